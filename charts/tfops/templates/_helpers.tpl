{{/* Labels Helm adds to everything it installs (the objects are otherwise those of config/). */}}
{{- define "tfops.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "tfops.managerLabels" -}}
app.kubernetes.io/name: tfops
app.kubernetes.io/component: manager
{{- end -}}

{{- define "tfops.image" -}}
{{ .repository }}:{{ .tag | default $.appVersion }}
{{- end -}}
