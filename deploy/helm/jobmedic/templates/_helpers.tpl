{{/* Names and labels shared by every manifest. The templates keep to the Go template subset that
tests/deploy/helm_render.py implements (see its docstring), so the chart is tested without helm. */}}

{{- define "jobmedic.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (default "jobmedic" .Values.nameOverride) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (default "jobmedic" .Values.nameOverride) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "jobmedic.selectorLabels" -}}
app.kubernetes.io/name: {{ default "jobmedic" .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "jobmedic.labels" -}}
{{ include "jobmedic.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "jobmedic.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "jobmedic.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* "true" when any cluster reaches Slurm over SSH */}}
{{- define "jobmedic.usesSsh" -}}
{{- range $c := .Values.clusters -}}
{{- if eq (default $.Values.slurm.access $c.access) "ssh" -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/* "true" when any cluster runs the Slurm commands in the pod */}}
{{- define "jobmedic.usesInCluster" -}}
{{- range $c := .Values.clusters -}}
{{- if eq (default $.Values.slurm.access $c.access) "inCluster" -}}true{{- end -}}
{{- end -}}
{{- end -}}
