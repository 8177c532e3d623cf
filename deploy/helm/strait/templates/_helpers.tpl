{{/*
Names and labels.
*/}}
{{- define "strait.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "strait.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "strait.selectorLabels" -}}
app.kubernetes.io/name: {{ include "strait.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "strait.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "strait.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: mirror
{{- end }}

{{/*
Where the certificates of one cluster ("source" or "target") are mounted.
*/}}
{{- define "strait.tlsDir" -}}
/etc/strait/tls/{{ . }}
{{- end }}

{{/*
A TOML key: bare when TOML allows it, else quoted ("bootstrap.servers").
*/}}
{{- define "strait.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . }}{{ . }}{{ else }}{{ toJson . }}{{ end -}}
{{- end }}

{{/*
One TOML value: a string, boolean, number, list or (inline) table. Numbers arrive from YAML as
float64: whole ones are written as integers, because strait rejects 1.0 where it wants an integer.
*/}}
{{- define "strait.tomlValue" -}}
{{- $v := . -}}
{{- if kindIs "string" $v -}}
{{ toJson $v }}
{{- else if kindIs "bool" $v -}}
{{ $v }}
{{- else if or (kindIs "int" $v) (kindIs "int64" $v) -}}
{{ $v }}
{{- else if kindIs "float64" $v -}}
{{- if eq (floor $v) $v -}}{{ int64 $v }}{{- else -}}{{ $v }}{{- end -}}
{{- else if kindIs "slice" $v -}}
[{{- range $i, $item := $v }}{{ if $i }}, {{ end }}{{ include "strait.tomlValue" $item }}{{ end -}}]
{{- else if kindIs "map" $v -}}
{ {{- range $i, $k := keys $v | sortAlpha }}{{ if $i }}, {{ end }}{{ include "strait.tomlKey" $k }} = {{ include "strait.tomlValue" (get $v $k) }}{{ end -}} }
{{- else -}}
{{- fail (printf "config: cannot write %v (a %s) as TOML; use a string, number, boolean, list or map" $v (kindOf $v)) -}}
{{- end -}}
{{- end }}

{{/*
Duration text ("10s", "1500ms", "2m", "1h") -> whole seconds, rounded up; "" when it is not one of
those simple forms (strait itself validates the value).
*/}}
{{- define "strait.durationSeconds" -}}
{{- $d := toString . | trim -}}
{{- if regexMatch "^[0-9]+ms$" $d -}}
{{- div (add (trimSuffix "ms" $d | atoi) 999) 1000 -}}
{{- else if regexMatch "^[0-9]+s$" $d -}}
{{- trimSuffix "s" $d | atoi -}}
{{- else if regexMatch "^[0-9]+m$" $d -}}
{{- mul (trimSuffix "m" $d | atoi) 60 -}}
{{- else if regexMatch "^[0-9]+h$" $d -}}
{{- mul (trimSuffix "h" $d | atoi) 3600 -}}
{{- end -}}
{{- end }}

{{/*
The strait.toml the ConfigMap carries: .Values.config plus what the chart owns (the metrics
listener and, for a cluster with certificate Secrets, security.protocol and the ssl.*.location
paths). mirror.instance_id is not written: each pod sets it from its own name
(STRAIT_MIRROR_INSTANCE_ID), because one file is shared by every replica.
*/}}
{{- define "strait.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- $mirror := get $cfg "mirror" | default dict -}}
{{- if and .Values.staticMembership (hasKey $mirror "instance_id") -}}
{{- fail "config.mirror.instance_id: leave it out; with staticMembership: true every pod uses its own name (strait-0, strait-1, ...) as its instance id" -}}
{{- end -}}
{{- $metrics := get $cfg "metrics" | default dict -}}
{{- if hasKey $metrics "listen" -}}
{{- fail "config.metrics.listen: leave it out; the chart sets it to 0.0.0.0:<metrics.port> so that the probes and Prometheus reach it (set metrics.port instead)" -}}
{{- end -}}
{{- $_ := set $metrics "listen" (printf "0.0.0.0:%d" (int .Values.metrics.port)) -}}
{{- $_ := set $cfg "metrics" $metrics -}}
{{- $flowsForm := or (hasKey $cfg "flows") (hasKey $cfg "clusters") -}}
{{- if $flowsForm -}}
{{- if or (hasKey $cfg "source") (hasKey $cfg "target") -}}
{{- fail "config: either source/target (one flow) or clusters with flows (several flows), not both" -}}
{{- end -}}
{{- range $side := list "source" "target" -}}
{{- $s := get $.Values.secrets $side | default dict -}}
{{- if or ($s.clusterCaCert | default dict).name ($s.userCert | default dict).name ($s.saslPassword | default dict).name -}}
{{- fail (printf "secrets.%s: applies to config.%s (one flow); with config.flows mount Secrets with extraVolumes/extraVolumeMounts, set ssl.*.location under config.clusters.<alias>, and pass passwords as STRAIT_CLUSTER_<ALIAS>_SASL_PASSWORD through extraEnv" $side $side) -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- range $side := list "source" "target" -}}
{{- $cluster := get $cfg $side | default dict -}}
{{- $s := get $.Values.secrets $side | default dict -}}
{{- $ca := $s.clusterCaCert | default dict -}}
{{- $user := $s.userCert | default dict -}}
{{- $dir := include "strait.tlsDir" $side -}}
{{- if $ca.name -}}
{{- if hasKey $cluster "ssl.ca.location" -}}
{{- fail (printf "config.%s: ssl.ca.location is set by the chart from secrets.%s.clusterCaCert; remove one of them" $side $side) -}}
{{- end -}}
{{- $_ := set $cluster "ssl.ca.location" (printf "%s/ca/%s" $dir ($ca.key | default "ca.crt")) -}}
{{- if not (hasKey $cluster "security.protocol") -}}
{{- $_ := set $cluster "security.protocol" "SSL" -}}
{{- end -}}
{{- end -}}
{{- if $user.name -}}
{{- if or (hasKey $cluster "ssl.certificate.location") (hasKey $cluster "ssl.key.location") -}}
{{- fail (printf "config.%s: ssl.certificate.location/ssl.key.location are set by the chart from secrets.%s.userCert; remove one of them" $side $side) -}}
{{- end -}}
{{- $_ := set $cluster "ssl.certificate.location" (printf "%s/user/%s" $dir ($user.certKey | default "user.crt")) -}}
{{- $_ := set $cluster "ssl.key.location" (printf "%s/user/%s" $dir ($user.keyKey | default "user.key")) -}}
{{- if not (hasKey $cluster "security.protocol") -}}
{{- $_ := set $cluster "security.protocol" "SSL" -}}
{{- end -}}
{{- end -}}
{{- $_ := set $cfg $side $cluster -}}
{{- end -}}
{{- end -}}
# strait.toml rendered by the {{ .Chart.Name }} Helm chart {{ .Chart.Version }} from .Values.config;
# keys: examples/strait.toml.
{{- if .Values.staticMembership }} mirror.instance_id comes from each pod's name (STRAIT_MIRROR_INSTANCE_ID).{{ end }}
{{- range $section := keys (omit $cfg "clusters" "flows") | sortAlpha }}
{{- $body := get $cfg $section }}
{{- if not (kindIs "map" $body) }}
{{- fail (printf "config.%s: expected a map of keys (a TOML section such as [mirror])" $section) }}
{{- end }}

[{{ $section }}]
{{- range $key := keys $body | sortAlpha }}
{{ include "strait.tomlKey" $key }} = {{ include "strait.tomlValue" (get $body $key) }}
{{- end }}
{{- end }}
{{- range $alias, $body := (get $cfg "clusters" | default dict) }}

[clusters.{{ include "strait.tomlKey" $alias }}]
{{- range $key := keys $body | sortAlpha }}
{{ include "strait.tomlKey" $key }} = {{ include "strait.tomlValue" (get $body $key) }}
{{- end }}
{{- end }}
{{- range $flow := (get $cfg "flows" | default list) }}

[[flows]]
{{- range $key := keys $flow | sortAlpha }}
{{ include "strait.tomlKey" $key }} = {{ include "strait.tomlValue" (get $flow $key) }}
{{- end }}
{{- end }}
{{ end }}

{{/*
Fails when the pod would be killed before strait's own bounded shutdown ends: strait drains for
mirror.drain_timeout, then allows 10 s more (final commit, leaving the group, flushing traces)
before it exits by itself (code 3). The kubelet's SIGKILL must come later than that.
*/}}
{{- define "strait.checkGrace" -}}
{{- $mirror := get (.Values.config | default dict) "mirror" | default dict -}}
{{- $drain := include "strait.durationSeconds" (get $mirror "drain_timeout" | default "10s") -}}
{{- if $drain -}}
{{- $need := add (atoi $drain) 15 -}}
{{- if lt (int .Values.terminationGracePeriodSeconds) (int $need) -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be at least mirror.drain_timeout + 15 s (%d s): strait drains for drain_timeout, then takes up to 10 s more to commit and leave the group; the kubelet kills it after the grace period" (int .Values.terminationGracePeriodSeconds) (int $need)) -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
The ServiceAccount the pods run as: the chart's own (serviceAccount.create), a given one, or the
namespace's default.
*/}}
{{- define "strait.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "strait.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end }}
