{{/* The image of both components. */}}
{{- define "gangkeeper.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Labels and selector of one component (webhook or controller). */}}
{{- define "gangkeeper.labels" -}}
app.kubernetes.io/name: gangkeeper
app.kubernetes.io/component: {{ . }}
{{- end }}

{{/* The pod security context both components run with (restricted Pod Security Standard). */}}
{{- define "gangkeeper.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  seccompProfile:
    type: RuntimeDefault
{{- end }}

{{- define "gangkeeper.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsNonRoot: true
  capabilities:
    drop: [ALL]
{{- end }}

{{/* Namespaces the webhooks act on: opted in, and never kube-system nor gangkeeper's own (by its label
when the chart makes it; by name when helm --create-namespace does). */}}
{{- define "gangkeeper.namespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    - key: gangkeeper.io/enabled
      operator: In
      values: ["true"]
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: [kube-system{{ if not .Values.namespace.create }}, {{ .Release.Namespace }}{{ end }}]
    - key: gangkeeper.io/system
      operator: DoesNotExist
    {{- with .Values.extraNamespaceSelector }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{- define "gangkeeper.clientConfig" -}}
clientConfig:
  service:
    name: gangkeeper-webhook
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
    port: 443
{{- end }}

{{- define "gangkeeper.caInjection" -}}
{{- if eq .Values.certificates.mode "cert-manager" }}
annotations:
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/gangkeeper-webhook
{{- end }}
{{- end }}

{{/* nodeSelector and tolerations of every gangkeeper pod. */}}
{{- define "gangkeeper.placement" -}}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The Configuration both components read (templates/config.yaml). */}}
{{- define "gangkeeper.configuration" -}}
apiVersion: gangkeeper.io/v1alpha1
kind: Configuration
maxGangPods: {{ .Values.maxGangPods }}
schedulerNames:
  volcano: {{ .Values.schedulerNames.volcano }}
  coscheduling: {{ .Values.schedulerNames.coscheduling }}
topologyLevels:
{{- toYaml .Values.topologyLevels | nindent 2 }}
protectFromDisruption: {{ .Values.protectFromDisruption }}
volcanoAllocatesDevices: {{ .Values.volcanoAllocatesDevices }}
{{- with .Values.volcanoQueues }}
volcanoQueues:
{{- toYaml . | nindent 2 }}
{{- end }}
webhook:
  workers: {{ .Values.webhook.workers }}
  drainSeconds: 5
controller:
  queuePolicy: {{ .Values.controller.queuePolicy }}
  headOfLineSeconds: {{ .Values.controller.headOfLineSeconds }}
  recoveryTimeoutSeconds: {{ .Values.controller.recoveryTimeoutSeconds }}
  nativeVersion: {{ .Values.controller.nativeVersion | quote }}
  autoscaler: {{ .Values.controller.autoscaler }}
  placeholderImage: {{ .Values.controller.placeholderImage | quote }}
  maxPlaceholderPods: {{ .Values.controller.maxPlaceholderPods }}
  maxPlaceholderPodsPerNamespace: {{ .Values.controller.maxPlaceholderPodsPerNamespace }}
{{- end }}

{{/* Mounting the Configuration, and restarting pods when it changes. */}}
{{- define "gangkeeper.configChecksum" -}}
gangkeeper.io/config-checksum: {{ include "gangkeeper.configuration" . | sha256sum }}
{{- end }}

{{/* The API server's addresses, as CIDRs (a JSON list): networkPolicy.apiServerCIDRs when set; else,
unless allowAnySource, the `kubernetes` Service's endpoints read from the cluster at install (each
address alone); rendering fails when neither can say, rather than leave the webhook open unasked. */}}
{{- define "gangkeeper.apiServerCIDRs" -}}
{{- $np := .Values.networkPolicy -}}
{{- $cidrs := list -}}
{{- if $np.apiServerCIDRs -}}
{{- $cidrs = $np.apiServerCIDRs -}}
{{- else if not $np.allowAnySource -}}
{{- $slices := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "" -}}
{{- range ($slices.items | default list) -}}
{{- if eq (index (.metadata.labels | default dict) "kubernetes.io/service-name" | default "") "kubernetes" -}}
{{- range (.endpoints | default list) -}}
{{- range (.addresses | default list) -}}
{{- $cidrs = append $cidrs (printf "%s/%s" . (ternary "128" "32" (contains ":" .))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $cidrs -}}
{{- fail "networkPolicy: the API server's addresses could not be read from the cluster (helm template or a client-side dry run): set networkPolicy.apiServerCIDRs to them, or networkPolicy.allowAnySource=true to let any source reach the webhook" -}}
{{- end -}}
{{- end -}}
{{- toJson $cidrs -}}
{{- end }}

{{/* Egress both components need: the API server, and the cluster DNS only. */}}
{{- define "gangkeeper.networkEgress" -}}
{{- $cidrs := include "gangkeeper.apiServerCIDRs" . | fromJsonArray -}}
{{- $np := .Values.networkPolicy -}}
- ports:
    - port: 443
      protocol: TCP
    - port: 6443
      protocol: TCP
  {{- if $cidrs }}
  to:
    {{- range $cidrs }}
    - ipBlock: {cidr: {{ . | quote }}}
    {{- end }}
  {{- end }}
- ports:
    - port: 53
      protocol: UDP
    - port: 53
      protocol: TCP
  to:
    {{- toYaml $np.dns | nindent 4 }}
{{- end }}
