#!/usr/bin/env bash
# Runs every cargo-fuzz target for N seconds each (default 30). 0 skips.
# `scripts/fuzz.sh --build` only builds the targets (scripts/test.sh starts that in the background
# at the beginning of a run, so the nightly build overlaps the rest of the suite).
# The build goes to a cache outside the clone ($STRAIT_CACHE/fuzz-target, or CARGO_TARGET_DIR if
# set), so a new clone reuses the ~4-minute nightly build of the dependencies.
set -euo pipefail
secs=${1:-30}
[ "$secs" != 0 ] || { echo "fuzzing skipped"; exit 0; }
cd "$(dirname "$0")/../fuzz"
if ! cargo +nightly --version >/dev/null 2>&1 || ! command -v cargo-fuzz >/dev/null; then
  echo "WARNING: fuzzing SKIPPED: it needs a nightly toolchain and cargo-fuzz (scripts/install-prereqs.sh could not install them)." >&2
  echo "The no-panic properties of the batch parser still ran as proptests (crates/forward/tests/offline/proptests.rs)." >&2
  exit 0
fi
cache=${STRAIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/strait}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$cache/fuzz-target}
mkdir -p "$CARGO_TARGET_DIR"
# One build at a time in the shared target dir (the background build and the run that follows).
exec 9>"$CARGO_TARGET_DIR/.strait-fuzz.lock"
flock 9
if [ "$secs" = --build ]; then
  cargo +nightly fuzz build
  exit 0
fi
for t in $(cargo +nightly fuzz list); do
  echo "--- fuzz target $t for ${secs}s"
  # The local corpus (written to) and the committed seeds (fuzz/seeds/<target>/, which the
  # crates' unit tests also run on stable).
  mkdir -p "corpus/$t"
  seeds=(); [ -d "seeds/$t" ] && seeds=("seeds/$t")
  cargo +nightly fuzz run "$t" "corpus/$t" "${seeds[@]}" -- -max_total_time="$secs" -rss_limit_mb=2048
done
