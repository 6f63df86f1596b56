{{/* Labels on every object: app.kubernetes.io/name is the component's (as in manifests/), the rest Helm's. */}}
{{- define "policylib.labels" -}}
app.kubernetes.io/part-of: policylib
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The image: registry/repository, then @digest when set, else :tag (default appVersion). */}}
{{- define "policylib.image" -}}
{{- $repo := .Values.image.repository -}}
{{- if .Values.image.registry -}}{{- $repo = printf "%s/%s" .Values.image.registry $repo -}}{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repo .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The Secret the webhook serves from. */}}
{{- define "policylib.tlsSecret" -}}
{{- if eq .Values.certificates.mode "existingSecret" -}}
{{- required "certificates.existingSecret.name is required with certificates.mode existingSecret" .Values.certificates.existingSecret.name -}}
{{- else -}}
policylib-webhook-tls
{{- end -}}
{{- end -}}

{{/* A config change rolls the webhook and the controller: the checksum of the rendered config. */}}
{{- define "policylib.configChecksum" -}}
{{- toYaml .Values.config | sha256sum -}}
{{- end -}}

{{/* The webhooks' namespaceSelector: webhook.namespaceSelector when set, else by webhook.namespaceMode; with
controller.rbac.namespaces (and the controller on) one more requirement: one of those names, so that the webhook is
sent only what the controller may write (docs/rbac.md). */}}
{{- define "policylib.namespaceSelector" -}}
{{- $selector := dict -}}
{{- if .Values.webhook.namespaceSelector -}}
{{- $selector = deepCopy .Values.webhook.namespaceSelector -}}
{{- else -}}
{{- $expressions := list -}}
{{- if eq .Values.webhook.namespaceMode "opt-in" -}}
{{- $expressions = append $expressions (dict "key" "policylib.io/enabled" "operator" "In" "values" (list "true")) -}}
{{- end -}}
{{- $expressions = append $expressions (dict "key" "kubernetes.io/metadata.name" "operator" "NotIn" "values" (concat .Values.webhook.excludeNamespaces (list .Release.Namespace) | uniq)) -}}
{{- $expressions = append $expressions (dict "key" "policylib.io/skip" "operator" "NotIn" "values" (list "true")) -}}
{{- $_ := set $selector "matchExpressions" $expressions -}}
{{- end -}}
{{- if and .Values.controller.enabled .Values.controller.rbac.namespaces -}}
{{- $_ := set $selector "matchExpressions" (append ($selector.matchExpressions | default list) (dict "key" "kubernetes.io/metadata.name" "operator" "In" "values" .Values.controller.rbac.namespaces)) -}}
{{- end -}}
{{ toYaml $selector }}
{{- end -}}

{{/* The config's sections (the top-level form or the LRS operator's Helm nesting). */}}
{{- define "policylib.configSections" -}}
{{- $c := .Values.config | default dict -}}
{{- if hasKey $c "lrs-operator" -}}
{{- $c = ((index $c "lrs-operator" | default dict).operator | default dict).config | default dict -}}
{{- end -}}
{{- toJson $c -}}
{{- end -}}

{{/* What the controller reads and writes for the config (webhook/controller/core.py watched_resources, run_controller),
as JSON: scaleDown (controller.spreadAwareScaleDown, default true: Pods and Nodes), podgroups (the PodGroup API groups of
gang method podgroup), workload (gang method workload: Kubernetes' Workload and PodGroup), kubeflow (either method). */}}
{{- define "policylib.uses" -}}
{{- $c := include "policylib.configSections" . | fromJson -}}
{{- $ctl := $c.controller | default dict -}}
{{- $gang := $c.gang | default dict -}}
{{- $on := ternary $gang.enabled true (hasKey $gang "enabled") -}}
{{- $method := $gang.method | default "labels" -}}
{{- $scheduler := $gang.scheduler | default "ack" -}}
{{- $podgroups := list -}}
{{- if and $on (eq $method "podgroup") -}}
{{- $podgroups = ternary (list "scheduling.volcano.sh") (list "scheduling.x-k8s.io" "scheduling.sigs.k8s.io") (eq $scheduler "volcano") -}}
{{- end -}}
{{- $workload := and $on (eq $method "workload") -}}
{{- $sts := $c.statefulSets | default dict -}}
{{- $statefulSets := ternary $sts.enabled true (hasKey $sts "enabled") -}}
{{- toJson (dict "scaleDown" (ternary $ctl.spreadAwareScaleDown true (hasKey $ctl "spreadAwareScaleDown")) "podgroups" $podgroups "workload" $workload "kubeflow" (or (not (empty $podgroups)) $workload) "statefulSets" $statefulSets) -}}
{{- end -}}

{{- define "policylib.checks" -}}
{{- if and (eq .Values.certificates.mode "self") (not .Values.controller.enabled) -}}
{{- fail "certificates.mode self needs controller.enabled: the controller's leader makes and rotates the certificates" -}}
{{- end -}}
{{- if has .Release.Namespace .Values.controller.rbac.namespaces -}}
{{- fail (printf "controller.rbac.namespaces: %q is the release's namespace, never in scope (docs/controller.md, \"Scope\"): remove it" .Release.Namespace) -}}
{{- end -}}
{{- /* The one check across config keys JSON Schema cannot say (values.schema.json has the others, generated from
policylib's config schema): two topology keys given with the same value while both spreads are on. */ -}}
{{- $c := .Values.config | default dict -}}
{{- if hasKey $c "lrs-operator" -}}
{{- $c = ((index $c "lrs-operator" | default dict).operator | default dict).config | default dict -}}
{{- end -}}
{{- $zone := $c.zoneTopologySpread | default dict -}}
{{- $host := $c.hostTopologySpread | default dict -}}
{{- if and (hasKey $zone "topologyKey") (hasKey $host "topologyKey") (ne (toString $zone.enabled) "false") (ne (toString $host.enabled) "false") (eq (toString $zone.topologyKey) (toString $host.topologyKey)) -}}
{{- fail (printf "config: hostTopologySpread.topologyKey must differ from zoneTopologySpread.topologyKey (both are %q) while both spreads are enabled" $zone.topologyKey) -}}
{{- end -}}
{{- end -}}

{{/* The Lease's name: config controller.leaseName (top-level or Helm-nested form), else the default. */}}
{{- define "policylib.leaseName" -}}
{{- $c := .Values.config | default dict -}}
{{- if hasKey $c "lrs-operator" -}}
{{- $c = ((index $c "lrs-operator" | default dict).operator | default dict).config | default dict -}}
{{- end -}}
{{- ($c.controller | default dict).leaseName | default "policylib-controller" -}}
{{- end -}}
