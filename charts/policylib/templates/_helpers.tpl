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

{{/* The webhooks' namespaceSelector: webhook.namespaceSelector when set, else by webhook.namespaceMode. */}}
{{- define "policylib.namespaceSelector" -}}
{{- if .Values.webhook.namespaceSelector -}}
{{ toYaml .Values.webhook.namespaceSelector }}
{{- else -}}
matchExpressions:
{{- if eq .Values.webhook.namespaceMode "opt-in" }}
  - key: policylib.io/enabled
    operator: In
    values: ["true"]
{{- end }}
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: {{ concat .Values.webhook.excludeNamespaces (list .Release.Namespace) | uniq | toJson }}
  - key: policylib.io/skip
    operator: NotIn
    values: ["true"]
{{- end -}}
{{- end -}}

{{- define "policylib.checks" -}}
{{- if and (eq .Values.certificates.mode "self") (not .Values.controller.enabled) -}}
{{- fail "certificates.mode self needs controller.enabled: the controller's leader makes and rotates the certificates" -}}
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
