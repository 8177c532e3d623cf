#!/usr/bin/env bash
# The whole Strait test suite, on a fresh machine: installs what is missing, fetches Apache Kafka
# from Maven Central, then runs formatting, lints, unit + integration tests (real brokers) and a
# short fuzz run. `.ci/run` calls exactly this script.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$(date +%s)
step() { printf '\n=== %s (t=%ss)\n' "$1" "$(( $(date +%s) - start ))"; }

step "prerequisites"
scripts/install-prereqs.sh

step "Kafka jars (Maven Central -> ${STRAIT_CACHE:-$HOME/.cache/strait})"
scripts/kafka-jars.sh 4 3.9

# Brokers left over by an earlier, interrupted run would only eat the two cores.
pkill -f 'strait.testkit' 2>/dev/null || true
trap 'pkill -f "strait.testkit" 2>/dev/null || true' EXIT

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test (unit + integration against real Kafka)"
cargo test --workspace --locked --no-fail-fast

step "fuzz (short run)"
scripts/fuzz.sh "${STRAIT_FUZZ_SECONDS:-30}"

step "done in $(( $(date +%s) - start ))s"
