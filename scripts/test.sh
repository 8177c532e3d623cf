#!/usr/bin/env bash
# The whole Strait test suite, on a fresh machine: installs what is missing, fetches Apache Kafka
# from Maven Central, then runs formatting, lints, unit + integration tests (real brokers), the Helm
# chart checks (scripts/helm-check.sh) and a short fuzz run. `.ci/run` calls exactly this script.
#
# `scripts/test.sh --fast`: only the tests that need no Kafka broker (every crate's unit tests and
# the in-memory integration tests listed below), no fmt/clippy/fuzz, nothing installed or fetched.
set -euo pipefail
fast=0
case "${1:-}" in
  "") ;;
  --fast) fast=1 ;;
  *) echo "usage: scripts/test.sh [--fast]" >&2; exit 2 ;;
esac
# Integration test binaries that start no broker (in-memory fakes, Java-written fixture files, the
# binary's command line, local HTTP). Each crate keeps its broker-free tests in `tests/offline/`
# (one binary) and its real-broker tests in `tests/kafka/`; a test that needs a process of its own
# (a counting global allocator, the process's resident set) stays a binary by itself.
brokerless_tests=(
  offline        # strait-forward and strait: tests/offline/main.rs
  idle_memory    # strait-forward (counting global allocator)
  metrics_memory # strait (counting global allocator)
  memory_trim    # strait (reads its own resident set)
  receive        # strait-otlp-sink
)
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$(date +%s)
step() { printf '\n=== %s (t=%ss)\n' "$1" "$(( $(date +%s) - start ))"; }

if [ "$fast" = 0 ]; then
  step "prerequisites"
  scripts/install-prereqs.sh

  step "Kafka jars (Maven Central -> ${STRAIT_CACHE:-$HOME/.cache/strait})"
  scripts/kafka-jars.sh 4 3.9

  # The tracing tests read their traces back from a real Jaeger v2. A fresh machine builds it
  # once from the Go module proxy (~10 CPU-minutes); later runs find it cached.
  step "Jaeger v2 (Go module proxy -> ${STRAIT_CACHE:-$HOME/.cache/strait}; first time only)"
  STRAIT_JAEGER=${STRAIT_JAEGER:-$(scripts/install-jaeger.sh)}
  export STRAIT_JAEGER
fi

# Process hygiene on a shared machine: stop only this suite's own processes, never by name
# (another run's brokers match any pattern ours do). Every process the test kit starts (brokers,
# tool JVMs, watchdogs) and every `strait` a test starts is recorded in $STRAIT_TEST_PIDS as
# <pid> -> start time; a process whose pid was reused has another start time and is left alone.
runs="${TMPDIR:-/tmp}/strait-test-pids"
start_time() { # field 22 of /proc/<pid>/stat, counted after the ")" that ends the name
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  set -- ${stat##*) }
  echo "${20}"
}
stop_recorded() { # kill what a run's registry lists and still runs, then drop the registry
  local dir=$1 f pid
  for f in "$dir"/[0-9]*; do
    [ -f "$f" ] || continue
    pid=${f##*/}
    if [ "$(start_time "$pid")" = "$(cat "$f")" ]; then
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$dir"
}
mkdir -p "$runs"
# Leftovers of earlier runs of this suite whose script is gone (killed before its EXIT trap).
for dir in "$runs"/run-*; do
  [ -f "$dir/owner" ] || continue
  read -r owner owner_start < "$dir/owner" || continue
  if [ "$(start_time "$owner")" != "$owner_start" ]; then
    stop_recorded "$dir"
  fi
done
STRAIT_TEST_PIDS=$(mktemp -d "$runs/run-XXXXXX")
export STRAIT_TEST_PIDS
echo "$$ $(start_time $$)" > "$STRAIT_TEST_PIDS/owner"
trap 'stop_recorded "$STRAIT_TEST_PIDS"' EXIT

# The benchmark harness's own unit tests (parsing, verdicts, counts, config files): pure Python,
# well under a second; the harness itself runs only from scripts/bench.sh.
bench_unit_tests() {
  step "benchmark harness unit tests (python3 -m unittest, benches/mirror)"
  (cd benches/mirror && PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -q -s .)
}

if [ "$fast" = 1 ]; then
  bench_unit_tests
  step "cargo test, no brokers (unit tests + ${#brokerless_tests[@]} in-memory integration tests)"
  cargo test --workspace --locked --lib --bins "${brokerless_tests[@]/#/--test=}"
  step "done in $(( $(date +%s) - start ))s"
  exit 0
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

bench_unit_tests

step "cargo test (unit + integration against real Kafka)"
cargo test --workspace --locked --no-fail-fast

step "Helm chart (helm lint/template, kubeconform, strait check --offline; tools from the Go module proxy on first use)"
scripts/helm-check.sh

step "fuzz (short run)"
scripts/fuzz.sh "${STRAIT_FUZZ_SECONDS:-30}"

step "done in $(( $(date +%s) - start ))s"
