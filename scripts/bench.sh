#!/usr/bin/env bash
# Side-by-side mirror benchmark (Strait vs MirrorMaker 2 vs MirrorMaker 1), on a fresh machine, in one command:
#   scripts/bench.sh            # full: 6 datasets x 2 repetitions + latency + broker limits (long on 2 cores)
#   scripts/bench.sh --quick    # 1 dataset, 200k records, 1 repetition, 15 s latency window (a few minutes)
#   scripts/bench.sh --wan      # instead: the WAN shapes (50/100 ms RTT through a delay proxy, mirror near the source
#                               # and near the target, small batches at 3,000 and 30,000 records/s, backlog catch-up)
#   scripts/bench.sh --wan --quick   # WAN shapes, near-source only, 15 s per rate (~10 minutes)
#   scripts/bench.sh --failover [--quick]   # instead: consumer-group failover through MM2 and Strait (checkpoints +
#                               # group offset sync): duplicates, losses, commit-to-target delay (quick: 120k records)
#   scripts/bench.sh --scale [--quick]   # instead: thousands of partitions (parts-TxP, idle-TxP shapes), Strait vs MM2:
#                               # CPU/GB, RSS, RSS per 1,000 partitions, time to first record / every partition started
#   scripts/bench.sh --quick --busy      # the latency phase also on a busy machine (one pinned busy loop per core)
# Every other option goes to benches/mirror/run.py (--help lists them). This script only prepares:
#   Java + Maven (scripts/install-prereqs.sh), the Kafka 4.x and 3.9 jars (scripts/kafka-jars.sh), a Python venv with
#   matplotlib under ${STRAIT_CACHE:-~/.cache/strait}/bench-venv, and `cargo build --release -p strait`
#   (skipped with --no-build; a failed build does not stop the bench, Strait is then reported as not measured).
# Results: bench-results/<date>/{results.md,results.csv,chart.png,logs/}; see benches/README.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cache=${STRAIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/strait}

build=1
wan=0
args=()
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    --wan) wan=1; args+=("$a") ;;
    *) args+=("$a") ;;
  esac
done

# Java/Maven only; the fuzz toolchain that install-prereqs.sh can also install is not needed here.
STRAIT_FUZZ_SECONDS=0 scripts/install-prereqs.sh
command -v javac >/dev/null || { echo "javac not found: install a JDK 17 (apt-get install openjdk-17-jdk-headless)" >&2; exit 1; }
lib4=$(scripts/kafka-jars.sh 4)
lib39=$(scripts/kafka-jars.sh 3.9)

venv="$cache/bench-venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
  echo "creating $venv (matplotlib from PyPI)" >&2
  python3 -m venv "$venv" || { echo "python3 -m venv failed: install python3-venv" >&2; exit 1; }
  "$venv/bin/pip" install --quiet --disable-pip-version-check "matplotlib>=3.8,<4"
fi

target_dir=${CARGO_TARGET_DIR:-$root/target}
export STRAIT_BENCH_STRAIT_BIN=${STRAIT_BENCH_STRAIT_BIN:-$target_dir/release/strait}
if [ "$build" = 1 ]; then
  echo "cargo build --release -p strait" >&2
  buildlog=bench-results/tmp/strait-build.log   # bench-results/tmp is git-ignored
  mkdir -p bench-results/tmp
  if ! cargo build --release -p strait 2> >(tee "$buildlog" >&2); then
    export STRAIT_BENCH_BUILD_ERROR="cargo build --release -p strait failed: $(grep -m1 '^error' "$buildlog" || tail -n1 "$buildlog")"
    echo "$STRAIT_BENCH_BUILD_ERROR (continuing without Strait)" >&2
  fi
  if [ "$wan" = 1 ]; then
    # The WAN shapes need the test kit's delay proxy as a process.
    echo "cargo build --release -p strait-testkit --bin strait-delay-proxy" >&2
    cargo build --release -p strait-testkit --bin strait-delay-proxy
  fi
fi
if [ "$wan" = 1 ]; then
  export STRAIT_BENCH_DELAY_PROXY_BIN=${STRAIT_BENCH_DELAY_PROXY_BIN:-$target_dir/release/strait-delay-proxy}
fi

export PYTHONDONTWRITEBYTECODE=1   # no __pycache__ in the source tree
exec "$venv/bin/python" "$root/benches/mirror/run.py" --kafka-lib4 "$lib4" --kafka-lib39 "$lib39" ${args[@]+"${args[@]}"}
