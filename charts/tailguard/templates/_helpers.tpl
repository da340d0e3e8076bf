{{/*
Names are truncated to 63 characters (the DNS label limit), trailing dashes removed.
*/}}
{{- define "tailguard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The full name: the release name, with the chart name appended unless the release name holds it.
*/}}
{{- define "tailguard.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
A name derived from the full name with a suffix, still at most 63 characters.
Usage: include "tailguard.suffixed" (list . "cluster")
*/}}
{{- define "tailguard.suffixed" -}}
{{- $root := index . 0 -}}
{{- $suffix := index . 1 -}}
{{- $base := include "tailguard.fullname" $root | trunc (int (sub 62 (len $suffix))) | trimSuffix "-" -}}
{{- printf "%s-%s" $base $suffix -}}
{{- end -}}

{{- define "tailguard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tailguard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tailguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tailguard.labels" -}}
helm.sh/chart: {{ include "tailguard.chart" . }}
{{ include "tailguard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tailguard
{{- end -}}

{{- define "tailguard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tailguard.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The operator image: repository@digest when a digest is given, repository:tag otherwise.
*/}}
{{- define "tailguard.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/*
The default vLLM image passed to the operator: repository@digest or repository:tag; empty when
vllm.image.repository is (the operator's built-in default applies).
*/}}
{{- define "tailguard.vllmImage" -}}
{{- $image := .Values.vllm.image -}}
{{- if $image.repository -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else if $image.tag -}}
{{- printf "%s:%s" $image.repository $image.tag -}}
{{- else -}}
{{- fail "vllm.image.repository needs vllm.image.tag or vllm.image.digest (the vLLM version is never implicit)" -}}
{{- end -}}
{{- else if or $image.tag $image.digest -}}
{{- fail "vllm.image.tag and vllm.image.digest need vllm.image.repository" -}}
{{- end -}}
{{- end -}}

{{/*
The namespaces the operator manages when rbac.scope is Namespaces, checked and de-duplicated.
*/}}
{{- define "tailguard.namespaces" -}}
{{- if eq .Values.rbac.scope "Namespaces" -}}
{{- if not .Values.rbac.namespaces -}}
{{- fail "rbac.scope Namespaces needs at least one namespace in rbac.namespaces" -}}
{{- end -}}
{{- .Values.rbac.namespaces | uniq | sortAlpha | join "," -}}
{{- end -}}
{{- end -}}

{{/*
The Secret holding Prometheus credentials: the user's, or the one this chart creates.
*/}}
{{- define "tailguard.prometheusSecretName" -}}
{{- default (include "tailguard.suffixed" (list . "prometheus")) .Values.prometheus.auth.existingSecret -}}
{{- end -}}

{{/*
Whether this chart creates the credentials Secret (a value given inline, no existing Secret named).
*/}}
{{- define "tailguard.createPrometheusSecret" -}}
{{- $auth := .Values.prometheus.auth -}}
{{- if and (not $auth.existingSecret) (or (and (eq $auth.type "bearerToken") $auth.bearerToken) (and (eq $auth.type "basicAuth") $auth.password)) -}}
true
{{- end -}}
{{- end -}}

{{/*
Fail early, with the value to set, on Prometheus settings that cannot work.
*/}}
{{- define "tailguard.validatePrometheus" -}}
{{- $auth := .Values.prometheus.auth -}}
{{- if and (eq $auth.type "bearerToken") (not $auth.bearerToken) (not $auth.existingSecret) -}}
{{- fail "prometheus.auth.type bearerToken needs prometheus.auth.bearerToken or prometheus.auth.existingSecret" -}}
{{- end -}}
{{- if eq $auth.type "basicAuth" -}}
{{- if not $auth.username -}}
{{- fail "prometheus.auth.type basicAuth needs prometheus.auth.username" -}}
{{- end -}}
{{- if and (not $auth.password) (not $auth.existingSecret) -}}
{{- fail "prometheus.auth.type basicAuth needs prometheus.auth.password or prometheus.auth.existingSecret" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.prometheus.tls.caBundle .Values.prometheus.tls.existingSecret -}}
{{- fail "set prometheus.tls.caBundle or prometheus.tls.existingSecret, not both" -}}
{{- end -}}
{{- end -}}
