#!/usr/bin/env bash
# Runs every cargo-fuzz target for N seconds each (default 30). 0 skips.
set -euo pipefail
secs=${1:-30}
[ "$secs" != 0 ] || { echo "fuzzing skipped"; exit 0; }
cd "$(dirname "$0")/../fuzz"
for t in $(cargo +nightly fuzz list); do
  echo "--- fuzz target $t for ${secs}s"
  cargo +nightly fuzz run "$t" -- -max_total_time="$secs" -rss_limit_mb=2048
done
