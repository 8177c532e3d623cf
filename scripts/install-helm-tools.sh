#!/usr/bin/env bash
# Installs what scripts/helm-check.sh needs into a cache outside the source tree, from the Go
# module proxy only (no other download site is used or needed):
#   - helm (v4), built with `go install`;
#   - kubeconform, built with `go install`;
#   - strict JSON schemas for kubeconform, generated offline by deploy/helm/tools/schemagen from
#     the Kubernetes OpenAPI document inside the k8s.io/kubernetes module
#     (api/openapi-spec/swagger.json) and from the Prometheus Operator's PodMonitor,
#     ServiceMonitor and PrometheusRule CRDs inside its module (example/prometheus-operator-crd/).
# Prints the helm binary, the kubeconform binary, then one schema directory per Kubernetes
# release, one a line.
# Idempotent: a stamp file marks each complete item; a changed version or generator rebuilds it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${STRAIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/strait}
HELM_VERSION=v4.3.2
KUBECONFORM_VERSION=v0.8.0
# k8s.io/kubernetes releases whose API schemas the chart is validated against: the oldest the
# chart supports (Chart.yaml kubeVersion) and a current one.
K8S_VERSIONS=(v1.25.16 v1.37.2)
PROMETHEUS_OPERATOR_VERSION=v0.85.0
# The Prometheus Operator kinds the chart can render (their CRDs give the schemas).
PROMETHEUS_OPERATOR_CRDS=(podmonitors servicemonitors prometheusrules)
mkdir -p "$cache"
# One build at a time: scripts/test.sh starts this in the background at the beginning of a run,
# and whoever needs the tools meanwhile waits here for that build instead of starting another.
exec 9>"$cache/.install-helm-tools.lock"
flock 9

command -v go >/dev/null || {
  echo "go not found: install Go (https://go.dev/doc/install; Debian's golang-go is too old for helm v4)" >&2
  exit 3
}
log() { echo "install-helm-tools: $*" >&2; }
now() { date +%s; }

# Scratch directories (module and build caches, unpacked modules) are removed on every exit,
# an interrupted one included. Go makes module files read-only: `go clean -modcache` first.
scratch=()
cleanup() {
  local d
  for d in "${scratch[@]}"; do
    GOMODCACHE="$d/mod" go clean -modcache 2>/dev/null || true
    chmod -R u+w "$d" 2>/dev/null || true
    rm -rf "$d"
  done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# go_tool NAME MODULE/PATH VERSION [LDFLAGS]: `go install` into $cache/NAME-VERSION/bin, with
# module and build caches of its own that are thrown away afterwards (helm's are ~0.5 GB and
# 1.2 GB, and nothing else uses them); the binary is what is kept. Prints the binary's path.
go_tool() {
  local name=$1 pkg=$2 version=$3 ldflags="-s -w ${4:-}" dir="$cache/$1-$3"
  if [ "$(cat "$dir/.complete" 2>/dev/null)" != "$version $ldflags" ] || [ ! -x "$dir/bin/$name" ]; then
    local t0 work; t0=$(now)
    log "building $name $version from the Go module proxy (first time only)"
    work=$(mktemp -d "$cache/go-build.XXXXXX"); scratch+=("$work")
    rm -rf "$dir.tmp"; mkdir -p "$dir.tmp/bin"
    # -mod=mod: resolve the tool's own go.mod, whatever GOFLAGS the machine sets.
    GOBIN="$dir.tmp/bin" GOMODCACHE="$work/mod" GOCACHE="$work/cache" GOFLAGS=-mod=mod \
      CGO_ENABLED=0 go install -trimpath -ldflags="$ldflags" "$pkg@$version" >&2 \
      || { log "building $name $version failed"; exit 1; }
    rm -rf "$dir"; mv "$dir.tmp" "$dir"
    echo "$version $ldflags" > "$dir/.complete"
    log "$name $version built in $(( $(now) - t0 ))s"
  fi
}

# Without -X, helm prints its version as "v4.3" and kubeconform as "development".
go_tool helm helm.sh/helm/v4/cmd/helm "$HELM_VERSION" "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
go_tool kubeconform github.com/yannh/kubeconform/cmd/kubeconform "$KUBECONFORM_VERSION" "-X main.version=$KUBECONFORM_VERSION"

# Schemas, one directory per Kubernetes release: regenerated when a version or the generator
# changes. The modules go to a throw-away module cache: only a few files of them are needed, and
# an unpacked k8s.io/kubernetes module is ~120 MB.
gen="$root/deploy/helm/tools/schemagen"
gen_hash=$(cat "$gen/main.go" "$gen/go.mod" | sha256sum | cut -c1-16)
mods=""
dir_of() { GOMODCACHE="$mods/mod" GOFLAGS=-mod=mod go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'; }
schema_dirs=()
for k8s_version in "${K8S_VERSIONS[@]}"; do
  schemas="$cache/k8s-schemas-$k8s_version"
  schema_dirs+=("$schemas")
  stamp="$k8s_version $PROMETHEUS_OPERATOR_VERSION $gen_hash ${PROMETHEUS_OPERATOR_CRDS[*]}"
  [ "$(cat "$schemas/.complete" 2>/dev/null)" != "$stamp" ] || continue
  t0=$(now)
  log "generating Kubernetes $k8s_version + Prometheus Operator $PROMETHEUS_OPERATOR_VERSION schemas (first time only)"
  if [ -z "$mods" ]; then
    mods=$(mktemp -d "$cache/modules.XXXXXX"); scratch+=("$mods")
    po=$(dir_of "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")
    crds="$po/example/prometheus-operator-crd"
  fi
  crd_args=()
  for c in "${PROMETHEUS_OPERATOR_CRDS[@]}"; do crd_args+=(-crd "$crds/monitoring.coreos.com_$c.yaml"); done
  k8s=$(dir_of "k8s.io/kubernetes@$k8s_version")
  [ -f "$k8s/api/openapi-spec/swagger.json" ] || { log "no api/openapi-spec/swagger.json in k8s.io/kubernetes@$k8s_version"; exit 1; }
  rm -rf "$schemas.tmp"
  (cd "$gen" && GOFLAGS=-mod=mod go run . \
    -swagger "$k8s/api/openapi-spec/swagger.json" \
    "${crd_args[@]}" \
    -out "$schemas.tmp") >&2
  rm -rf "$schemas"; mv "$schemas.tmp" "$schemas"
  echo "$stamp" > "$schemas/.complete"
  log "schemas for $k8s_version generated in $(( $(now) - t0 ))s"
done
echo "$cache/helm-$HELM_VERSION/bin/helm"
echo "$cache/kubeconform-$KUBECONFORM_VERSION/bin/kubeconform"
printf '%s\n' "${schema_dirs[@]}"
