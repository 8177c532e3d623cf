#!/usr/bin/env bash
# Fetch the Apache Kafka jars from Maven Central into a cache outside the source tree.
# Usage: scripts/kafka-jars.sh [4|3.9]...   (default: both)
# Prints nothing on success but the lib dirs; idempotent (a stamp file marks a complete copy).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${STRAIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/strait}
mkdir -p "$cache"
lines=("$@"); [ ${#lines[@]} -gt 0 ] || lines=(4 3.9)
for line in "${lines[@]}"; do
  pom="$root/kafka/pom-kafka-$line.xml"
  [ -f "$pom" ] || { echo "unknown Kafka line '$line' (expected 4 or 3.9)" >&2; exit 2; }
  version=$(sed -n 's:.*<kafka.version>\([^<]*\)</kafka.version>.*:\1:p' "$pom")
  dir="$cache/kafka-$version"
  # The stamp holds the pom's hash: a clean clone's pom is newer than any cache (its mtime is the
  # clone's), so an mtime check fetched all jars again on every clean-clone run (43 s).
  stamp="$version $(sha256sum "$pom" | cut -d' ' -f1)"
  if [ "$(cat "$dir/.complete" 2>/dev/null)" != "$stamp" ]; then
    command -v mvn >/dev/null || { echo "mvn not found: install Maven (apt-get install maven)" >&2; exit 3; }
    rm -rf "$dir.tmp"
    mvn -B -q -f "$pom" dependency:copy-dependencies -DoutputDirectory="$dir.tmp/lib" -DincludeScope=runtime >&2
    rm -rf "$dir"; mv "$dir.tmp" "$dir"
    echo "$stamp" > "$dir/.complete"
  fi
  echo "$dir/lib"
done
