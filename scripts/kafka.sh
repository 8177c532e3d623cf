#!/usr/bin/env bash
# Start a real Apache Kafka cluster (KRaft, jars from Maven Central) for humans and demos. It prints the bootstrap,
# client properties and PKI paths, then "READY", and runs until Ctrl-C or SIGTERM, which tear it down.
#
#   scripts/kafka.sh up --name europe --mtls --user my-europe-user:europe-secret \
#       --topic my-topic:3 --allow my-europe-user:topic:my-topic:Read,Write,Describe [--props-dir DIR]
#   scripts/kafka.sh up --name us --nodes 3 --sasl --user mirror:mirror-secret --version 4
#   scripts/kafka.sh up --help
#
# STRAIT_KEEP_CLUSTERS=1 keeps the cluster dir afterwards; CARGO_TARGET_DIR is honoured.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# cargo run replaces itself with the binary (exec), so signals sent to this script's pid reach it.
exec cargo run -q -p strait-testkit --bin strait-kafka -- "$@"
