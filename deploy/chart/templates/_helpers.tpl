{{/* Labels every object of the release carries (app.kubernetes.io recommended labels). */}}
{{- define "rivora.labels" -}}
app.kubernetes.io/name: rivora
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The selector of one component's Pods: stable across upgrades (selectors are immutable). */}}
{{- define "rivora.selector" -}}
app.kubernetes.io/name: rivora
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* The image reference; the tag defaults to the chart's appVersion. */}}
{{- define "rivora.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* KUBERNETES_SERVICE_HOST/PORT overridden with apiServer.host/port when set: how the Pods reach
     the API server on a cluster where nothing serves the kubernetes Service's ClusterIP. */}}
{{- define "rivora.apiServerEnv" -}}
{{- with .Values.apiServer.host }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ . | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: "{{ int $.Values.apiServer.port }}"
{{- end }}
{{- end }}
