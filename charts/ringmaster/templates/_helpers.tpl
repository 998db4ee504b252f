{{/* The chart's name, or nameOverride. */}}
{{- define "ringmaster.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name: fullnameOverride, or the release name
with "-ringmaster" unless it already contains it.
*/}}
{{- define "ringmaster.fullname" -}}
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

{{- define "ringmaster.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "ringmaster.labels" -}}
helm.sh/chart: {{ include "ringmaster.chart" . }}
app.kubernetes.io/name: {{ include "ringmaster.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the operator's pods. */}}
{{- define "ringmaster.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ringmaster.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The operator's ServiceAccount. */}}
{{- define "ringmaster.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ringmaster.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator's image: repository@digest, or repository:tag. */}}
{{- define "ringmaster.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The Secret holding the metrics endpoint's serving certificate (tls.crt,
tls.key, ca.crt), or "" when the operator makes itself a self-signed one.
*/}}
{{- define "ringmaster.metricsTLSSecret" -}}
{{- if .Values.metrics.tls.certManager.enabled -}}
{{- printf "%s-metrics-tls" (include "ringmaster.fullname" .) -}}
{{- else -}}
{{- .Values.metrics.tls.secretName -}}
{{- end -}}
{{- end }}
