#!/usr/bin/env bash
# Installs Jaeger v2 (all-in-one: OTLP receiver, in-memory storage, query API) into a cache outside
# the source tree, built from the Go module proxy (`go mod download` + `go build`; no other
# download site is used or needed). The module carries no UI assets: the binary serves the query
# API (/api/traces on port 16686), which is what the tests and the demo read; docker-compose.yml
# keeps the official image with the UI for people.
# Prints the jaeger binary's path.
# Idempotent: a stamp file marks a complete build; a changed version or flags rebuild it.
# Cost: the first build takes about 10 CPU-minutes (measured: 8m54s user + 1m34s sys, 16m49s wall
# at nice 10 on a busy 2-core machine) and ~1.6 GB of throw-away module and build caches, removed
# afterwards; later runs return at once.
set -euo pipefail
cache=${STRAIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/strait}
JAEGER_VERSION=v1.75.0
mkdir -p "$cache"
# One build at a time: scripts/test.sh starts this in the background at the beginning of a run,
# and whoever needs the tools meanwhile waits here for that build instead of starting another.
exec 9>"$cache/.install-jaeger.lock"
flock 9
log() { echo "install-jaeger: $*" >&2; }

command -v go >/dev/null || {
  log "go not found: install Go >= 1.24 (https://go.dev/doc/install), or set STRAIT_JAEGER to a jaeger v2 binary"
  exit 3
}

dir="$cache/jaeger-$JAEGER_VERSION"
ldflags="-s -w"
if [ "$(cat "$dir/.complete" 2>/dev/null)" = "$JAEGER_VERSION $ldflags" ] && [ -x "$dir/bin/jaeger" ]; then
  echo "$dir/bin/jaeger"
  exit 0
fi

# Scratch module and build caches of their own, removed on every exit (an interrupted one
# included): nothing else uses them. Go makes module files read-only: `go clean -modcache` first.
work=""
cleanup() {
  [ -n "$work" ] || return 0
  GOMODCACHE="$work/mod" go clean -modcache 2>/dev/null || true
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work" "$dir.tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

t0=$(date +%s)
log "building jaeger $JAEGER_VERSION from the Go module proxy (first time only, ~10 CPU-minutes)"
work=$(mktemp -d "$cache/go-build.XXXXXX")
rm -rf "$dir.tmp"; mkdir -p "$dir.tmp/bin"
# The module's go.mod has a replace directive, so `go install pkg@version` refuses it: download
# the module source and build it as the main module instead (its go.sum pins every dependency).
if ! src=$(GOMODCACHE="$work/mod" GOFLAGS=-mod=mod go mod download -json \
    "github.com/jaegertracing/jaeger@$JAEGER_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p') \
    || [ -z "$src" ]; then
  log "downloading github.com/jaegertracing/jaeger@$JAEGER_VERSION from the Go module proxy failed:"
  log "check that it is reachable (GOPROXY=$(go env GOPROXY))"
  exit 1
fi
cp -r "$src" "$work/src"; chmod -R u+w "$work/src"
# -mod=mod: use the module's own go.mod, whatever GOFLAGS the machine sets.
if ! (cd "$work/src" && GOMODCACHE="$work/mod" GOCACHE="$work/cache" GOFLAGS=-mod=mod \
    GOTOOLCHAIN=local CGO_ENABLED=0 go build -trimpath -ldflags="$ldflags" \
    -o "$dir.tmp/bin/jaeger" ./cmd/jaeger) >&2; then
  log "building jaeger $JAEGER_VERSION failed (see the go output above). Check that the Go module"
  log "proxy is reachable (GOPROXY=$(go env GOPROXY)) and that go is >= 1.24.6 ($(go version));"
  log "or point STRAIT_JAEGER at a jaeger v2 binary."
  exit 1
fi
rm -rf "$dir"; mv "$dir.tmp" "$dir"
echo "$JAEGER_VERSION $ldflags" > "$dir/.complete"
log "jaeger $JAEGER_VERSION built in $(( $(date +%s) - t0 ))s"
echo "$dir/bin/jaeger"
