#!/usr/bin/env bash
# Checks the Helm chart (deploy/helm/strait) without a cluster:
#   1. `helm lint --strict` with the default values and every ci/*.yaml values file;
#   2. `helm template` of each, validated by kubeconform against strict Kubernetes schemas
#      (unknown fields and wrong types fail; PodMonitor/ServiceMonitor against the Prometheus
#      Operator's own CRD schemas; a kind without a schema fails);
#   3. what the chart promises, read from the rendered manifests (pod name as instance id,
#      probes, security context, Secret mounts);
#   4. the rendered strait.toml accepted by `strait check --offline` (no brokers needed);
#      1-4 also for the values `strait import strimzi` converts from the Strimzi test resources;
#   5. mistakes that must be refused: a grace period shorter than the drain, an instance id or
#      metrics listener in the values, a misspelt chart key (values.schema.json), a misspelt
#      Kubernetes field, an invalid PodMonitor, an invalid strait setting.
# Tools come from scripts/install-helm-tools.sh (Go module proxy, cached). STRAIT_BIN: the strait
# binary to use (default: `cargo build -p strait` and target/debug/strait).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
chart=deploy/helm/strait

installed=$(scripts/install-helm-tools.sh) # fails the check if an install fails
mapfile -t tools <<<"$installed"
helm=${tools[0]} kubeconform=${tools[1]} schema_dirs=("${tools[@]:2}")
[ ${#schema_dirs[@]} -gt 0 ] || { echo "install-helm-tools.sh gave no schema directory" >&2; exit 1; }
if [ -z "${STRAIT_BIN:-}" ]; then
  cargo build -q --locked -p strait
  STRAIT_BIN=${CARGO_TARGET_DIR:-$root/target}/debug/strait
fi
out=$(mktemp -d "${TMPDIR:-/tmp}/strait-helm.XXXXXX")
trap 'rm -rf "$out"' EXIT

passed=0 failed=0
pass() { echo "ok: $*"; passed=$((passed + 1)); }
fail() { echo "FAILED: $*" >&2; failed=$((failed + 1)); }

# validate FILE [SCHEMA_DIR]: kubeconform, strict, every kind needs a schema (default: the
# newest Kubernetes release's schemas).
validate() {
  local dir=${2:-${schema_dirs[-1]}}
  "$kubeconform" -strict -summary -output text \
    -schema-location "$dir/{{ .ResourceKind }}{{ .KindSuffix }}.json" "$1"
}

# toml_of RENDERED: the strait.toml of the ConfigMap in a rendered manifest (the block scalar
# under `strait.toml: |`, indented 4 spaces).
toml_of() {
  awk '/^kind: ConfigMap/{cm=1} cm && /^  strait.toml: \|/{on=1; next}
       on && /^    /{print substr($0, 5); next} on && /^$/{print ""; next} on{exit}' "$1"
}

# has RENDERED PATTERN WHAT: the rendered manifest contains a line matching PATTERN.
has() {
  if grep -Eq -- "$2" "$1"; then pass "$3"; else fail "$3 (no line matching '$2' in $1)"; fi
}

# near RENDERED ANCHOR N PATTERN WHAT: a line matching PATTERN within N lines after ANCHOR.
near() {
  if grep -A"$3" -- "$2" "$1" | grep -Eq -- "$4"; then pass "$5"; else fail "$5 (no '$4' after '$2' in $1)"; fi
}

echo "helm: $("$helm" version --short)  kubeconform: $("$kubeconform" -v)  schemas: ${schema_dirs[*]}"

# The schema generator's own tests (file names as kubeconform asks, strictness, standalone files).
gen=deploy/helm/tools/schemagen
if (cd "$gen" && GOFLAGS=-mod=mod go test ./... >"$out/go-test.txt" 2>&1 && [ -z "$(gofmt -l .)" ]); then
  pass "schemagen: go test, gofmt"
else
  cat "$out/go-test.txt" >&2; (cd "$gen" && gofmt -l .) >&2; fail "schemagen: go test, gofmt"
fi

sets=(default)
for f in "$chart"/ci/*.yaml; do sets+=("$f"); done
# The Helm values `strait import strimzi` writes for the Strimzi resources of its tests
# (crates/strait/tests/data/strimzi; the seed's KafkaMirrorMaker must convert): the import's
# output and the chart fit together. A resource the import refuses is its tests' business.
mkdir "$out/imported"
for f in crates/strait/tests/data/strimzi/*.yaml; do
  v="$out/imported/strimzi-$(basename "$f")"
  if "$STRAIT_BIN" import strimzi "$f" -o "$out/imported.toml" --helm-values "$v" >/dev/null 2>"$out/err.txt"; then
    sets+=("$v")
  elif [ "$(basename "$f")" = seed-kafka-mirror-maker.yaml ]; then
    cat "$out/err.txt" >&2; fail "strait import strimzi $f"
  else
    echo "note: strait import strimzi refuses $f; not rendered"
  fi
done
for set in "${sets[@]}"; do
  name=$(basename "$set" .yaml)
  args=(); [ "$set" = default ] || args=(-f "$set")
  if "$helm" lint --strict "$chart" "${args[@]}" >"$out/lint-$name.txt" 2>&1; then
    pass "helm lint --strict ($name)"
  else
    cat "$out/lint-$name.txt" >&2; fail "helm lint --strict ($name)"
  fi
  rendered="$out/$name.yaml"
  if ! "$helm" template strait "$chart" --namespace mirror "${args[@]}" >"$rendered" 2>"$out/err.txt"; then
    cat "$out/err.txt" >&2; fail "helm template ($name)"; continue
  fi
  pass "helm template ($name)"
  for dir in "${schema_dirs[@]}"; do
    release=${dir##*/k8s-schemas-}
    # Rendered for that release: fields newer than the floor (unhealthyPodEvictionPolicy, 1.26)
    # are left out on older API servers, as `helm install` does against them.
    if ! "$helm" template strait "$chart" --namespace mirror --kube-version "$release" "${args[@]}" \
        >"$out/$name-$release.yaml" 2>"$out/err.txt"; then
      cat "$out/err.txt" >&2; fail "helm template --kube-version $release ($name)"; continue
    fi
    if validate "$out/$name-$release.yaml" "$dir" >"$out/kc.txt" 2>&1; then
      pass "kubeconform -strict, Kubernetes $release ($name): $(tail -1 "$out/kc.txt")"
    else
      cat "$out/kc.txt" >&2; fail "kubeconform -strict, Kubernetes $release ($name)"
    fi
  done

  # What the chart promises (same for every values file).
  has "$rendered" '^kind: StatefulSet$' "$name: a StatefulSet"
  near "$rendered" 'name: STRAIT_MIRROR_INSTANCE_ID' 3 'fieldPath: metadata.name$' "$name: mirror.instance_id is the pod name"
  has "$rendered" '^ +path: /healthz$' "$name: /healthz liveness probe"
  has "$rendered" '^ +path: /readyz$' "$name: /readyz readiness probe"
  has "$rendered" '^ +readOnlyRootFilesystem: true$' "$name: read-only root filesystem"
  has "$rendered" '^ +runAsNonRoot: true$' "$name: non-root"
  has "$rendered" '^ +- ALL$' "$name: all capabilities dropped"
  has "$rendered" '^ +type: RuntimeDefault$' "$name: seccomp RuntimeDefault"
  has "$rendered" '^kind: PodDisruptionBudget$' "$name: a PodDisruptionBudget"
  has "$rendered" '^ +publishNotReadyAddresses: true$' "$name: metrics Service keeps not-ready pods"
  has "$rendered" '^ +serviceAccountName: ' "$name: pods run as the chart's ServiceAccount"

  # The rendered configuration, as the pod strait-0 would load it: with its instance id and,
  # for every STRAIT_* variable the chart sets from a Secret (a SASL password, an OAuth client
  # secret), a value under that variable name.
  toml_of "$rendered" >"$out/$name.toml"
  pod_env=(STRAIT_MIRROR_INSTANCE_ID=strait-0)
  while read -r var; do
    pod_env+=("$var=from-the-secret")
  done < <(awk '/^ *- name: STRAIT_[A-Z_]*$/ { var = $3; seen = NR; next }
                seen && NR <= seen + 2 && /secretKeyRef:/ { print var; seen = 0 }' "$rendered")
  if env "${pod_env[@]}" "$STRAIT_BIN" check --offline --config "$out/$name.toml" \
      >"$out/$name.effective.toml" 2>"$out/err.txt"; then
    pass "strait check --offline accepts the rendered strait.toml ($name)"
    has "$out/$name.effective.toml" '^instance_id = "strait-0"$' "$name: strait sees the pod name as instance_id"
    has "$out/$name.effective.toml" '^listen = "0.0.0.0:9464"$' "$name: metrics listen on the pod's port"
  else
    cat "$out/$name.toml" "$out/err.txt" >&2; fail "strait check --offline ($name)"
  fi
done

# The seed's KafkaMirrorMaker, converted: its Strimzi Secrets mounted and wired into the config.
i="$out/strimzi-seed-kafka-mirror-maker"
has "$i.yaml" '^ +secretName: my-europe-user$' "imported seed: the source KafkaUser's Secret mounted"
has "$i.yaml" '^ +secretName: us-cluster-cluster-ca-cert$' "imported seed: the target cluster CA Secret mounted"
has "$i.toml" '^"ssl.certificate.location" = "/etc/strait/tls/source/user/user.crt"$' "imported seed: source certificate path in strait.toml"

# The mTLS values: Strimzi Secrets mounted and wired into the config.
m="$out/mtls-values"
has "$m.yaml" '^ +secretName: europe-cluster-ca-cert$' "mtls: source cluster CA Secret mounted"
has "$m.yaml" '^ +secretName: my-us-user$' "mtls: target user Secret mounted"
has "$m.toml" '^"ssl.ca.location" = "/etc/strait/tls/source/ca/ca.crt"$' "mtls: source CA path in strait.toml"
has "$m.toml" '^"ssl.key.location" = "/etc/strait/tls/target/user/user.key"$' "mtls: target key path in strait.toml"
has "$m.toml" '^"security.protocol" = "SSL"$' "mtls: security.protocol SSL"
has "$m.yaml" '^kind: PodMonitor$' "mtls: PodMonitor rendered"
s="$out/scram-values"
near "$s.yaml" 'name: STRAIT_SOURCE_SASL_PASSWORD' 4 'name: my-europe-user$' "scram: SASL password from the KafkaUser Secret"
has "$s.toml" '^"security.protocol" = "SASL_SSL"$' "scram: security.protocol kept"
has "$s.yaml" '^kind: ServiceMonitor$' "scram: ServiceMonitor rendered"

# The defaults: a ServiceAccount, a startup probe, PDB eviction of unhealthy pods (on 1.26+ only:
# the 1.25 floor's API server rejects the field), no config checksum (strait reloads the file).
d="$out/default"
has "$d.yaml" '^kind: ServiceAccount$' "default: a ServiceAccount"
near "$d.yaml" 'startupProbe:' 3 'path: /healthz$' "default: /healthz startup probe"
has "$d.yaml" '^  unhealthyPodEvictionPolicy: AlwaysAllow$' "default: the PDB lets unhealthy pods be evicted"
if grep -q unhealthyPodEvictionPolicy "$d-v1.25.16.yaml"; then
  fail "default: unhealthyPodEvictionPolicy rendered for Kubernetes 1.25"
else
  pass "default: no unhealthyPodEvictionPolicy for Kubernetes 1.25"
fi
if grep -q 'checksum/config' "$d.yaml"; then
  fail "default: checksum/config set although strait reloads its configuration"
else
  pass "default: no checksum/config (hot reload applies changes without a rollout)"
fi

# The platform values: workload identity, extra volumes and env, alerts, dashboard, checksum.
p="$out/platform-values"
near "$p.yaml" '^kind: ServiceAccount$' 12 'eks.amazonaws.com/role-arn: arn:aws:iam::123456789012:role/strait-msk$' "platform: ServiceAccount annotated for IRSA"
has "$p.yaml" '^ +checksum/config: [0-9a-f]{64}$' "platform: configChecksum rolls pods on a change"
has "$p.yaml" 'mountPath: /etc/strait/oauth$' "platform: extraVolumeMounts"
has "$p.yaml" '^ +secretName: strait-oauth$' "platform: extraVolumes"
near "$p.yaml" 'envFrom:' 2 'secretRef:' "platform: envFrom"
has "$p.yaml" '^kind: PrometheusRule$' "platform: PrometheusRule rendered"
for alert in StraitLagGrowing StraitPartitionStopped StraitPartitionBlocked StraitRecordsLost StraitCheckpointStale; do
  has "$p.yaml" "^ +- alert: $alert$" "platform: alert $alert"
done
# Every metric the alerts query is one strait serves (the table in crates/strait/src/observe/metrics.rs).
for metric in $(awk '/^kind: PrometheusRule/{on=1} on' "$p.yaml" | grep -o 'strait_[a-z_]*' | sort -u); do
  if grep -q "^//! | \`$metric\`" crates/strait/src/observe/metrics.rs; then
    pass "platform: alerts query $metric, which strait serves"
  else
    fail "platform: the alerts query $metric, which crates/strait/src/observe/metrics.rs does not serve"
  fi
done
has "$p.yaml" '^    grafana_dashboard: "1"$' "platform: dashboard ConfigMap labelled for Grafana's sidecar"
if awk '/^  strait.json: \|-$/{on=1; next} on && /^    /{print substr($0, 5); next} on{exit}' "$p.yaml" \
    | cmp -s - "$chart/dashboards/strait.json"; then
  pass "platform: the dashboard ConfigMap carries dashboards/strait.json unchanged"
else
  fail "platform: the dashboard ConfigMap differs from dashboards/strait.json"
fi

# The flows values: [clusters.*] and [[flows]] rendered (strait check --offline accepted them above).
f="$out/flows-values"
has "$f.toml" '^\[\[flows\]\]$' "flows: [[flows]] in strait.toml"
has "$f.toml" '^\[clusters\.europe\]$' "flows: [clusters.europe] in strait.toml"
if grep -q '^\[source\]' "$f.toml"; then fail "flows: [source] rendered next to [[flows]]"; else pass "flows: no [source] next to [[flows]]"; fi

# must_refuse WHAT MESSAGE HELM-ARGS...: `helm template` fails and says MESSAGE.
must_refuse() {
  local what=$1 message=$2; shift 2
  if "$helm" template strait "$chart" "$@" >/dev/null 2>"$out/err.txt"; then
    fail "$what: rendered, expected a refusal"
  elif grep -q -- "$message" "$out/err.txt"; then
    pass "$what: refused"
  else
    cat "$out/err.txt" >&2; fail "$what: refused for another reason"
  fi
}
must_refuse "grace period shorter than drain_timeout + 15 s" "terminationGracePeriodSeconds (30) must be at least" \
  --set config.mirror.drain_timeout=20s
must_refuse "instance_id in the values" "config.mirror.instance_id: leave it out" \
  --set config.mirror.instance_id=x
must_refuse "metrics.listen in the values" "config.metrics.listen: leave it out" \
  --set config.metrics.listen=127.0.0.1:1
must_refuse "both PodMonitor and ServiceMonitor" "both enabled" \
  --set metrics.podMonitor.enabled=true --set metrics.serviceMonitor.enabled=true
# values.schema.json: a misspelt chart key is an error, not a silently ignored value.
must_refuse "a misspelt chart key (secret for secrets)" "additional properties 'secret' not allowed" \
  --set secret.source.userCert.name=my-europe-user
must_refuse "a string as replicas" "replicas" --set-string replicas=two
must_refuse "secrets.source with config.flows" "secrets.source: applies to config.source (one flow)" \
  -f "$chart/ci/flows-values.yaml" --set secrets.source.clusterCaCert.name=europe-cluster-ca-cert
must_refuse "a misspelt [[flows]] key" "additional properties 'topic' not allowed" \
  -f "$chart/ci/flows-values.yaml" --set 'config.flows[0].topic=x'
must_refuse "a PrometheusRule key misspelt" "additional properties 'lagSeconds' not allowed" \
  --set prometheusRule.lagSeconds=60

# The validator rejects what Kubernetes would: a misspelt probe field, a string where an integer
# belongs.
"$helm" template strait "$chart" --set livenessProbe.periodSecond=10 >"$out/bad.yaml"
if validate "$out/bad.yaml" >"$out/kc.txt" 2>&1; then
  fail "kubeconform accepted a misspelt field (livenessProbe.periodSecond)"
elif grep -q periodSecond "$out/kc.txt"; then
  pass "kubeconform rejects a misspelt field (livenessProbe.periodSecond)"
else
  cat "$out/kc.txt" >&2; fail "kubeconform rejected livenessProbe.periodSecond for another reason"
fi
"$helm" template strait "$chart" --set-string livenessProbe.periodSeconds=ten >"$out/bad.yaml"
if validate "$out/bad.yaml" >"$out/kc.txt" 2>&1; then
  fail "kubeconform accepted periodSeconds: ten"
elif grep -q periodSeconds "$out/kc.txt"; then
  pass "kubeconform rejects a string as periodSeconds"
else
  cat "$out/kc.txt" >&2; fail "kubeconform rejected periodSeconds: ten for another reason"
fi

# The PodMonitor is checked against the Prometheus Operator's CRD schema, not skipped.
"$helm" template strait "$chart" --set metrics.podMonitor.enabled=true \
  --set metrics.podMonitor.interval=often >"$out/bad.yaml"
if validate "$out/bad.yaml" >"$out/kc.txt" 2>&1; then
  fail "kubeconform accepted a PodMonitor with interval: often"
elif grep -q 'PodMonitor' "$out/kc.txt"; then
  pass "kubeconform rejects a PodMonitor with interval: often (CRD schema)"
else
  cat "$out/kc.txt" >&2; fail "kubeconform rejected interval: often for another reason"
fi

# The chart's "drain_timeout + 15 s" is strait's SHUTDOWN_GRACE (10 s) plus 5 s for the kubelet;
# a changed SHUTDOWN_GRACE must change templates/_helpers.tpl (strait.checkGrace) too.
if grep -q 'const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);' \
    crates/strait/src/main.rs; then
  pass "strait's SHUTDOWN_GRACE is the 10 s the chart's grace check assumes"
else
  fail "SHUTDOWN_GRACE in crates/strait/src/main.rs changed: update strait.checkGrace in $chart/templates/_helpers.tpl, values.yaml and README"
fi

# staticMembership: false leaves the instance id out.
"$helm" template strait "$chart" --set staticMembership=false >"$out/nostatic.yaml"
if grep -q 'name: STRAIT_MIRROR_INSTANCE_ID' "$out/nostatic.yaml"; then
  fail "staticMembership: false still sets STRAIT_MIRROR_INSTANCE_ID"
else
  pass "staticMembership: false sets no instance id"
fi

# The chart runs the Dockerfile's image as it is built: entrypoint /strait (the chart passes only
# arguments) and user 65534 (runAsUser, fsGroup of the Secret files).
if grep -qx 'ENTRYPOINT \["/strait"\]' Dockerfile && grep -qx 'USER 65534:65534' Dockerfile; then
  pass "Dockerfile: ENTRYPOINT /strait and USER 65534:65534, as the chart assumes"
else
  fail "Dockerfile's ENTRYPOINT or USER changed: update args/podSecurityContext in $chart"
fi

# The image builds for both platforms the docs name (TARGETARCH mapped to a musl target each),
# and the build context leaves out the git history and build output.
if grep -q 'amd64) echo x86_64-unknown-linux-musl' Dockerfile && grep -q 'arm64) echo aarch64-unknown-linux-musl' Dockerfile; then
  pass "Dockerfile: linux/amd64 and linux/arm64 (buildx TARGETARCH)"
else
  fail "Dockerfile: no musl target for TARGETARCH amd64 and arm64"
fi
if grep -qx '.git/' .dockerignore && grep -qx 'target/' .dockerignore; then
  pass ".dockerignore: .git/ and target/ stay out of the build context"
else
  fail ".dockerignore must leave out .git/ and target/"
fi

# strait refuses a bad setting passed through the values (the config check is real).
"$helm" template strait "$chart" --set config.mirror.start=yesterday >"$out/bad.yaml"
toml_of "$out/bad.yaml" >"$out/bad.toml"
if "$STRAIT_BIN" check --offline --config "$out/bad.toml" >/dev/null 2>"$out/err.txt"; then
  fail "strait check accepted mirror.start = yesterday"
elif grep -q 'mirror.start' "$out/err.txt"; then
  pass "strait check --offline refuses mirror.start = yesterday"
else
  cat "$out/err.txt" >&2; fail "strait check refused mirror.start = yesterday for another reason"
fi

echo "helm-check: $passed passed, $failed failed"
[ "$failed" = 0 ]
