#!/usr/bin/env bash
# The whole Strait test suite, on a fresh machine: installs what is missing, fetches Apache Kafka
# from Maven Central, then runs formatting, lints, unit + integration tests (real brokers), the Helm
# chart checks (scripts/helm-check.sh) and a short fuzz run. `.ci/run` calls exactly this script.
#
# How it stays fast on 2 cores: the tools built once from the Go module proxy (Jaeger, helm,
# kubeconform) and the nightly fuzz build start in the background at the beginning (niced; cached
# in ~/.cache/strait, so later runs skip them), and scripts/test-runner.py runs the build and the
# test binaries concurrently, each binary as soon as it is linked, one real-broker scenario per
# process, within a load budget (STRAIT_TEST_JOBS, default 3; 3-broker scenarios count double;
# the build counts 1 while it runs); clippy lints the workspace inside that build.
# Logs: target/test-logs/.
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
  codec_memory   # strait-forward (counting global allocator with a limit)
  metrics_memory # strait (counting global allocator)
  memory_trim    # strait (reads its own resident set)
  receive        # strait-otlp-sink
)
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
start=$(date +%s)
step() { printf '\n=== %s (t=%ss)\n' "$1" "$(( $(date +%s) - start ))"; }

logs="${CARGO_TARGET_DIR:-$root/target}/test-logs"
cache=${STRAIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/strait}
background=() # process groups of the background builds, stopped when the suite ends
if [ "$fast" = 0 ]; then
  step "prerequisites"
  scripts/install-prereqs.sh

  step "Kafka jars (Maven Central -> $cache)"
  scripts/kafka-jars.sh 4 3.9

  # Built once from the Go module proxy and cached (Jaeger ~10, helm + kubeconform ~11
  # CPU-minutes on a new machine), and the nightly fuzz build (~4 minutes, cached too): in the
  # background, niced, while the Rust build and the tests run. Whoever needs one of them waits
  # for its build (the install scripts take a lock), not for all of them.
  step "background: Jaeger v2, helm + kubeconform, fuzz build (cached after the first run; logs in $logs)"
  rm -rf "$logs"; mkdir -p "$logs"
  bg() { # bg NAME COMMAND...: a niced process group of its own, output to $logs/NAME.log
    local name=$1; shift
    setsid nice -n 10 "$@" > "$logs/$name.log" 2>&1 &
    background+=("$!")
    eval "bg_$name=$!"
  }
  if [ -z "${STRAIT_JAEGER:-}" ]; then bg jaeger scripts/install-jaeger.sh; fi
  bg helm scripts/install-helm-tools.sh
  bg fuzz scripts/fuzz.sh --build
fi
stop_background() {
  local pgid
  for pgid in "${background[@]}"; do kill -TERM -- "-$pgid" 2>/dev/null || true; done
}

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
trap 'stop_background; stop_recorded "$STRAIT_TEST_PIDS"' EXIT

# The benchmark harness's own unit tests (parsing, verdicts, counts, config files): pure Python,
# well under a second; the harness itself runs only from scripts/bench.sh.
bench_unit_tests() {
  step "benchmark harness and test runner unit tests (python3 -m unittest: benches/mirror, scripts)"
  (cd benches/mirror && PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -q -s .)
  PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -q -s scripts -p 'test_*.py'
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

bench_unit_tests

# The runner runs the build itself and starts each test binary as soon as cargo has linked it, so
# the wire, testkit and forward scenarios run while the strait binaries still compile. Clippy runs
# inside that build: cargo compiles the workspace's own crates through clippy-driver (what `cargo
# clippy` does, with codegen), every target (`--all-targets`, so the divan bench too) with `-D
# warnings`, so a lint fails the build like a compile error. A separate `cargo clippy` pass shared
# nothing with the test build and cost 70-160 s of the 2 cores. The test of the optional `aws-sdk`
# feature (MSK IAM credentials from the AWS SDK's chain; off in the default build, which the rest
# of the suite tests) builds the SDK's ~60 crates: the runner starts it once the build has ended,
# beside the tests. The Helm chart checks (helm lint/template, kubeconform, strait check --offline)
# and the short fuzz run (fuzzing runs for a fixed time, so niced it only tries fewer inputs) are
# two more such processes, each once its tool build in the background has ended: they fill the
# cores while the last scenarios run instead of adding 70 s after them.
clippy_driver="$(dirname "$(rustup which cargo 2>/dev/null || command -v cargo)")/clippy-driver"
[ -x "$clippy_driver" ] || { echo "clippy-driver not found next to cargo: rustup component add clippy" >&2; exit 1; }
# The third-party crates' build of the last run (same compiler, Cargo.lock and Cargo.toml), if
# this target directory has none yet: a clean clone then compiles only the workspace's crates.
# The `aws-sdk` process below saves what the test build compiled before it starts its own build
# (nothing else writes to the target directory then), and adds the SDK's crates after it.
target_dir=${CARGO_TARGET_DIR:-$root/target}
deps_cache=$cache/rust-deps
step "restore the third-party crates' build (scripts/rust-deps-cache.py; $deps_cache)"
python3 scripts/rust-deps-cache.py restore "$target_dir" "$deps_cache"
step "build the tests (linted by clippy) and run them as they are built: unit + integration against real Kafka (scripts/test-runner.py, logs in $logs/tests)"
python3 scripts/test-runner.py --cargo-messages "$logs/cargo-tests.json" --log-dir "$logs/tests" \
  --times "$cache/test-times.json" --seed-times scripts/test-times.json \
  ${bg_jaeger:+--defer "jaeger=$bg_jaeger"} --defer "helm=$bg_helm" --defer "fuzz=$bg_fuzz" \
  --after-build "aws-sdk=bash -c 'python3 scripts/rust-deps-cache.py save \"\$1\" \"\$2\"; nice -n 5 cargo test -p strait-wire --locked --features aws-sdk --lib aws::; rc=\$?; python3 scripts/rust-deps-cache.py save \"\$1\" \"\$2\"; exit \$rc' aws-sdk $target_dir $deps_cache" \
  --after-build "helm=env STRAIT_BIN=${STRAIT_BIN:-${CARGO_TARGET_DIR:-$root/target}/debug/strait} scripts/helm-check.sh" \
  --after-build "fuzz=nice -n 10 scripts/fuzz.sh ${STRAIT_FUZZ_SECONDS:-15}" \
  -- env RUSTC_WORKSPACE_WRAPPER="$clippy_driver" CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__" \
  cargo test --workspace --locked --no-run --all-targets --message-format=json-render-diagnostics \
  || { echo "tests failed (see above; logs in $logs/tests)" >&2; exit 1; }

step "done in $(( $(date +%s) - start ))s"
