{{- define "nri-resmgr.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nri-resmgr.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "nri-resmgr.labels" -}}
app.kubernetes.io/name: {{ include "nri-resmgr.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "nri-resmgr.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nri-resmgr.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "nri-resmgr.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "nri-resmgr.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "nri-resmgr.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* true when a controller needs to write host files (resctrl groups, cgroup files) */}}
{{- define "nri-resmgr.needsControl" -}}
{{- if or .Values.control.rdt.enable .Values.control.blockio.enable -}}true{{- end -}}
{{- end -}}
