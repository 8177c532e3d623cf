#!/usr/bin/env bash
# Runs every cargo-fuzz target for N seconds each (default 30). 0 skips.
set -euo pipefail
secs=${1:-30}
[ "$secs" != 0 ] || { echo "fuzzing skipped"; exit 0; }
cd "$(dirname "$0")/../fuzz"
if ! cargo +nightly --version >/dev/null 2>&1 || ! command -v cargo-fuzz >/dev/null; then
  echo "WARNING: fuzzing SKIPPED: it needs a nightly toolchain and cargo-fuzz (scripts/install-prereqs.sh could not install them)." >&2
  echo "The no-panic properties of the batch parser still ran as proptests (crates/forward/tests/proptests.rs)." >&2
  exit 0
fi
for t in $(cargo +nightly fuzz list); do
  echo "--- fuzz target $t for ${secs}s"
  cargo +nightly fuzz run "$t" -- -max_total_time="$secs" -rss_limit_mb=2048
done
