{{/* The release-scoped name of every object of the chart. */}}
{{- define "pdscaler.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The leader election's Lease: leaderElection.leaseName, else <fullname>-leader, so
two releases in one namespace never share one (release pdscaler: pdscaler-leader, the
name every release used before). */}}
{{- define "pdscaler.leaseName" -}}
{{- .Values.leaderElection.leaseName | default (printf "%s-leader" (include "pdscaler.fullname" .)) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "pdscaler.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "pdscaler.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pdscaler.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "pdscaler.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The operator image (the test pod runs it too). */}}
{{- define "pdscaler.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* global.imagePullSecrets then imagePullSecrets, as LocalObjectReferences; a name may
be given as a string or as {name: ...}. */}}
{{- define "pdscaler.imagePullSecrets" -}}
{{- $global := .Values.global | default dict -}}
{{- $all := concat ($global.imagePullSecrets | default list) (.Values.imagePullSecrets | default list) -}}
{{- range $all }}
- name: {{ if kindIs "string" . }}{{ . }}{{ else }}{{ .name }}{{ end }}
{{- end -}}
{{- end -}}

{{/* The replicas the Deployment runs: replicaCount with leader election, else 1. */}}
{{- define "pdscaler.replicas" -}}
{{- if .Values.leaderElection.enabled }}{{ .Values.replicaCount }}{{ else }}1{{ end -}}
{{- end -}}

{{/* The metrics Service's name. */}}
{{- define "pdscaler.metricsService" -}}
{{ include "pdscaler.fullname" . }}-metrics
{{- end -}}

{{/*
The namespaces the operator handles, one per line: watchNamespaces, else the release
namespace; nothing when clusterWide (every namespace). Both at once is refused.
*/}}
{{- define "pdscaler.watchNamespaces" -}}
{{- if and .Values.clusterWide .Values.watchNamespaces }}
{{- fail "clusterWide: true handles every namespace; leave watchNamespaces empty" }}
{{- end }}
{{- if not .Values.clusterWide }}
{{- range (.Values.watchNamespaces | default (list .Release.Namespace)) }}
{{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The chart needs Kubernetes >= 1.30 (ValidatingAdmissionPolicy v1, the CRD's CEL rules).
Checked here rather than by Chart.yaml's kubeVersion, which Helm checks before rendering:
`helm template` with no cluster and no --kube-version assumes v1.20.0 and refused the
chart. That offline default (exactly v1.20.0, a version no supported cluster runs) skips
the check; a real cluster's version, or --kube-version, is checked.
*/}}
{{- define "pdscaler.kubeVersion" -}}
{{- $v := .Capabilities.KubeVersion.Version -}}
{{- if and (ne $v "v1.20.0") (semverCompare "<1.30.0-0" $v) -}}
{{- fail (printf "pdscaler needs Kubernetes >= 1.30 (this cluster: %s)" $v) -}}
{{- end -}}
{{- end -}}
