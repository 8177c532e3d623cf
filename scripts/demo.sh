#!/usr/bin/env bash
# The reference scenario on one machine: a traced producer writes "Hello world - N" to my-topic (12 partitions) on
# the mTLS cluster "europe", Strait mirrors every topic to the mTLS cluster "us", a traced consumer in group
# my-group reads them there, and all three send their spans to a real Jaeger v2 all-in-one (in-memory storage;
# scripts/install-jaeger.sh builds it from the Go module proxy the first time, ~10 CPU-minutes). Every 10 s the demo
# prints, from Jaeger's query API (/api/traces), the time each record spent in each hop: producer send, source ->
# mirror, inside the mirror, mirror -> consumer, end to end (p50/p99). Each record is one trace (the producer's
# traceparent travels unchanged; the mirror parents its per-record span on it). The locally built Jaeger has no UI
# (its Go module carries no UI assets): query http://127.0.0.1:16686/api/traces?service=hello-world-producer, or use
# docker-compose.yml for the UI.
#
#   ./scripts/demo.sh                     # until Ctrl-C
#   DEMO_DURATION=60 ./scripts/demo.sh    # stop by itself after 60 s (exit 1 if no record made it through)
#
# Environment:
#   DEMO_RATE=1               records per second from the producer
#   DEMO_DURATION=0           seconds to run; 0 = until Ctrl-C / SIGTERM
#   DEMO_PROFILE=debug        cargo profile of the binaries: debug or release
#   DEMO_TRACES=jaeger        jaeger, or sink: the in-house OTLP receiver (strait-otlp-sink) instead, no Go needed
#   DEMO_OTLP_LISTEN=127.0.0.1:4318     where Jaeger's (or the sink's) OTLP/HTTP receiver listens
#   DEMO_JAEGER_QUERY=127.0.0.1:16686   where Jaeger's query API listens (its OTLP/gRPC port is 4317 and its
#                                       query gRPC port 16685 unless STRAIT_JAEGER_OTLP_GRPC_PORT /
#                                       STRAIT_JAEGER_QUERY_GRPC_PORT say otherwise)
#   STRAIT_JAEGER             run this jaeger v2 binary instead of the one scripts/install-jaeger.sh builds
#   DEMO_METRICS_LISTEN=127.0.0.1:9464  Strait's /metrics (empty = off)
#   DEMO_SUMMARY_EVERY=10s    how often the hop summary is printed
#   DEMO_DIR=<new temp dir>   where logs, client properties and strait.toml go (kept afterwards)
#   DEMO_STRAIT_BIN           run this strait binary instead of the one just built
#   CARGO_TARGET_DIR          honoured
#
# Ctrl-C stops everything in order: producer, consumer, Strait, the summary (final one), Jaeger, both clusters.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

rate=${DEMO_RATE:-1}
duration=${DEMO_DURATION:-0}
profile=${DEMO_PROFILE:-debug}
traces=${DEMO_TRACES:-jaeger}
otlp=${DEMO_OTLP_LISTEN:-127.0.0.1:4318}
query=${DEMO_JAEGER_QUERY:-127.0.0.1:16686}
metrics=${DEMO_METRICS_LISTEN-127.0.0.1:9464}
summary=${DEMO_SUMMARY_EVERY:-10s}
work=${DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/strait-demo.XXXXXX")}
mkdir -p "$work"
target=${CARGO_TARGET_DIR:-$root/target}
case "$profile" in
  debug) bin=$target/debug; profile_flag=() ;;
  release) bin=$target/release; profile_flag=(--release) ;;
  *) echo "demo: DEMO_PROFILE=$profile: use debug or release" >&2; exit 2 ;;
esac
[[ "$duration" =~ ^[0-9]+$ ]] || { echo "demo: DEMO_DURATION=$duration: use a number of seconds" >&2; exit 2; }
case "$traces" in
  jaeger | sink) ;;
  *) echo "demo: DEMO_TRACES=$traces: use jaeger or sink" >&2; exit 2 ;;
esac

if [[ -t 1 ]]; then
  say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
  say() { printf '\n== %s\n' "$*"; }
fi

# What a new machine lacks, as scripts/test.sh does: Java and Maven for the clusters and their jars
# (Maven Central, cached in ~/.cache/strait), Go for Jaeger.
say "prerequisites (scripts/install-prereqs.sh --demo) and the Kafka jars (scripts/kafka-jars.sh 4)"
scripts/install-prereqs.sh --demo
scripts/kafka-jars.sh 4 >/dev/null

say "building strait, strait-demo, strait-otlp-sink ($profile) and strait-kafka"
cargo build "${profile_flag[@]}" -p strait -p strait-demo -p strait-otlp-sink \
  --bin strait --bin strait-demo --bin strait-otlp-sink
# scripts/kafka.sh runs strait-kafka with `cargo run` (debug): build it now so the clusters start at once.
cargo build -q -p strait-testkit --bin strait-kafka
if [[ "$traces" == jaeger ]]; then
  if [[ -n "${STRAIT_JAEGER:-}" ]]; then
    jaeger_bin=$STRAIT_JAEGER
  else
    say "Jaeger v2 (scripts/install-jaeger.sh: cached in ~/.cache/strait; the first build takes ~10 CPU-minutes)"
    jaeger_bin=$(scripts/install-jaeger.sh) || {
      echo "demo: no Jaeger binary (see above); DEMO_TRACES=sink runs the demo with the in-house receiver" >&2
      exit 1
    }
  fi
fi

# Job control: every background job gets its own process group, so Ctrl-C reaches only this script, which then
# stops the jobs in order (instead of every process at once).
set -m
declare -A pid=()
tails=()
stopping=0

alive() { [[ -n "${pid[$1]:-}" ]] && kill -0 "${pid[$1]}" 2>/dev/null; }

# stop NAME [SECONDS]: SIGTERM, wait, then SIGKILL.
stop() {
  local name=$1 grace=${2:-20} p=${pid[$1]:-}
  [[ -n "$p" ]] || return 0
  if kill -0 "$p" 2>/dev/null; then
    kill -TERM "$p" 2>/dev/null || true
    local i
    for ((i = 0; i < grace * 10; i++)); do
      kill -0 "$p" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$p" 2>/dev/null; then
      echo "demo: $name did not stop within ${grace}s; killing it" >&2
      kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true
    fi
  fi
  wait "$p" 2>/dev/null || true
  unset "pid[$name]"
}

cleanup() {
  local status=$?
  ((stopping)) && return
  stopping=1
  trap - INT TERM
  say "stopping"
  stop producer 10
  # Let the last records cross the mirror and reach the consumer.
  if alive strait && alive consumer; then sleep 3; fi
  stop consumer 20
  stop strait 30
  # Strait flushed its last spans on the way out; Jaeger stores them within ~0.2 s.
  if [[ "$traces" == jaeger ]] && alive summary; then sleep 1; fi
  stop summary 30
  stop jaeger 10
  sleep 0.5
  local t
  for t in "${tails[@]}"; do kill "$t" 2>/dev/null || true; wait "$t" 2>/dev/null || true; done
  stop kafka-us 60
  stop kafka-europe 60
  echo "demo: logs, client properties and strait.toml are in $work"
  if ((status == 0 && duration > 0)); then
    # The summary's final line: "... final <sink|jaeger>: ... N new complete trace(s), T total ...".
    local complete
    complete=$(sed -n 's/.* final [a-z]*: .* \([0-9]*\) total.*/\1/p' "$work/summary.log" | tail -n 1)
    if [[ "${complete:-0}" == 0 ]]; then
      echo "demo: records crossed the mirror but no producer -> mirror -> consumer trace was complete;" \
        "check that strait exports spans (tracing section of $work/strait.toml, $work/strait.log)" >&2
      status=1
    else
      echo "demo: $complete complete producer -> mirror -> consumer trace(s) in $traces"
    fi
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start NAME COMMAND...: runs in the background, output to $work/NAME.log.
start() {
  local name=$1
  shift
  "$@" >"$work/$name.log" 2>&1 &
  pid[$name]=$!
}

# show FILE: prints what is appended to FILE (the consumer's lines, the receiver's summaries).
show() {
  tail -n +1 -F "$1" 2>/dev/null &
  tails+=($!)
}

# wait_for NAME PATTERN SECONDS: until NAME's log has a line matching PATTERN.
wait_for() {
  local name=$1 pattern=$2 secs=$3 i
  for ((i = 0; i < secs * 5; i++)); do
    grep -q -- "$pattern" "$work/$name.log" 2>/dev/null && return 0
    if ! alive "$name"; then
      echo "demo: $name exited; the end of $work/$name.log:" >&2
      tail -n 30 "$work/$name.log" >&2 || true
      exit 1
    fi
    sleep 0.2
  done
  echo "demo: $name not ready after ${secs}s; the end of $work/$name.log:" >&2
  tail -n 30 "$work/$name.log" >&2 || true
  exit 1
}

if [[ "$traces" == jaeger ]]; then
  say "Jaeger v2: OTLP/HTTP on http://$otlp, query API on http://$query (hop summary from it every $summary)"
  # crates/otlp-sink/jaeger.yaml: the all-in-one defaults cut to OTLP in, memory storage, query API out.
  STRAIT_JAEGER_HOST=${otlp%:*} STRAIT_JAEGER_OTLP_HTTP_PORT=${otlp##*:} STRAIT_JAEGER_QUERY_PORT=${query##*:} \
    start jaeger "$jaeger_bin" --config "$root/crates/otlp-sink/jaeger.yaml"
  wait_for jaeger "Everything is ready" 60
fi

say "starting the clusters europe and us (mTLS, ACLs, my-topic with 12 partitions on europe)"
start kafka-europe scripts/kafka.sh up --name europe --mtls \
  --user my-europe-user:europe-secret \
  --topic my-topic:12 \
  --allow my-europe-user:topic:my-topic:Read,Write,Create,Describe \
  --allow my-europe-user:group:my-group:Read \
  --props-dir "$work/europe"
start kafka-us scripts/kafka.sh up --name us --mtls \
  --user my-us-user:us-secret \
  --allow my-us-user:topic:my-topic:Read,Write,Create,Describe \
  --allow my-us-user:group:my-group:Read \
  --props-dir "$work/us"
wait_for kafka-europe '^READY' 300
wait_for kafka-us '^READY' 300
europe_props=$work/europe/ssl-my-europe-user.properties
us_props=$work/us/ssl-my-us-user.properties
grep -E '^(bootstrap|security)' "$europe_props" | sed 's/^/  europe: /'
grep -E '^(bootstrap|security)' "$us_props" | sed 's/^/  us:     /'

# client properties file -> TOML table body ("key" = "value", quotes and backslashes escaped).
props_toml() {
  sed -e '/^[[:space:]]*\(#\|!\|$\)/d' -e 's/\\/\\\\/g' -e 's/"/\\"/g' \
    -e 's/^\([^=]*\)=\(.*\)$/"\1" = "\2"/' "$1"
}
cat >"$work/strait.toml" <<EOF
# Written by scripts/demo.sh: mirror every topic from europe to us, like the walkthrough's KafkaMirrorMaker
# (whitelist ".*", group my-group, mTLS users my-europe-user / my-us-user), traced per record.
[source]
alias = "europe"
$(props_toml "$europe_props")
"client.id" = "strait-europe"

[target]
alias = "us"
$(props_toml "$us_props")
"client.id" = "strait-us"

[mirror]
topics = [".*"]
rename = "identity"
group_id = "my-group"
start = "earliest"

[metrics]
listen = "$metrics"

[tracing]
otlp_endpoint = "http://$otlp"
mode = "records"
sample_ratio = 1.0
records_per_second = 100
service_name = "my-mirror-maker"

[log]
format = "text"
level = "info"
EOF

# The hop summary starts with the traffic (not while the brokers start).
if [[ "$traces" == jaeger ]]; then
  start summary "$bin/strait-otlp-sink" --jaeger-query "http://$query" --service hello-world-producer \
    --summary-every "$summary"
  wait_for summary "reading the traces" 30
else
  say "in-house OTLP receiver on http://$otlp (the hop summary prints every $summary)"
  start summary "$bin/strait-otlp-sink" --listen "$otlp" --summary-every "$summary"
  wait_for summary "receiving OTLP" 30
fi
show "$work/summary.log"

say "starting strait run --config $work/strait.toml"
start strait "${DEMO_STRAIT_BIN:-$bin/strait}" run --config "$work/strait.toml"
sleep 2
if ! alive strait; then
  echo "demo: strait run exited at once; the end of $work/strait.log:" >&2
  tail -n 30 "$work/strait.log" >&2
  exit 1
fi

say "consumer (group my-group on us) and producer ($rate record(s)/s to europe)"
"$bin/strait-demo" consume --props "$us_props" --topic my-topic --group my-group \
  --otlp-endpoint "http://$otlp" >"$work/consumer.out" 2>"$work/consumer.log" &
pid[consumer]=$!
show "$work/consumer.out"
start producer "$bin/strait-demo" produce --props "$europe_props" --topic my-topic --rate "$rate" \
  --otlp-endpoint "http://$otlp"

if ((duration > 0)); then
  echo "(running for ${duration}s; Ctrl-C stops earlier; logs in $work)"
else
  echo "(Ctrl-C stops the demo; logs in $work)"
fi
started=$SECONDS
while ((duration == 0 || SECONDS - started < duration)); do
  # In the background, so that Ctrl-C interrupts `wait` at once and runs the trap.
  sleep 1 &
  wait $! || true
  for name in strait producer consumer summary kafka-europe kafka-us ${jaeger_bin:+jaeger}; do
    if ! alive "$name"; then
      log=$work/$name.log
      echo "demo: $name stopped unexpectedly; the end of $log:" >&2
      tail -n 30 "$log" >&2 || true
      exit 1
    fi
  done
done

received=$(grep -c ' value: Hello world - ' "$work/consumer.out" || true)
if ((received == 0)); then
  echo "demo: the consumer on us received nothing in ${duration}s; see $work/strait.log" >&2
  exit 1
fi
echo "demo: the consumer on us received $received record(s)"
