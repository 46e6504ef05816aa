{{/* The chart's name (app.kubernetes.io/name of the operator's own objects); nameOverride replaces it. */}}
{{- define "squall.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The objects' full name: fullnameOverride, or the release name with the chart's name appended
unless it holds it. */}}
{{- define "squall.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "squall.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "squall.selectorLabels" -}}
app.kubernetes.io/name: {{ include "squall.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "squall.labels" -}}
{{ include "squall.selectorLabels" . }}
app.kubernetes.io/part-of: squall
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "squall.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "squall.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The worker image: Topologies without spec.image run it (unless topologyImage). */}}
{{- define "squall.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The slim operator image (the Dockerfile's operator target). */}}
{{- define "squall.operatorImage" -}}
{{- printf "%s:%s" .Values.operatorImage.repository (default (default .Chart.AppVersion .Values.image.tag) .Values.operatorImage.tag) -}}
{{- end -}}

{{/* SQUALL_OPERATOR_PODMONITOR: the chart's own monitor replaces the operator's per-Topology ones. */}}
{{- define "squall.topologyPodMonitors" -}}
{{- $mode := toString .Values.topologyPodMonitors -}}
{{- $chartMonitor := or .Values.monitoring.podMonitor.enabled .Values.monitoring.serviceMonitor.enabled -}}
{{- if and .Values.monitoring.podMonitor.enabled .Values.monitoring.serviceMonitor.enabled -}}
{{- fail "enable at most one of monitoring.podMonitor and monitoring.serviceMonitor: both scrape the same pods" -}}
{{- end -}}
{{- if and $chartMonitor (eq $mode "true") -}}
{{- fail "topologyPodMonitors is \"true\" while the chart's own monitor is enabled: every pod would be scraped twice; set topologyPodMonitors to \"auto\" or \"false\"" -}}
{{- end -}}
{{- if $chartMonitor -}}false{{- else -}}{{ $mode }}{{- end -}}
{{- end -}}

{{/* Whether the chart creates the operator's PodMonitor ("true" or empty): "auto" when the cluster
serves prometheus-operator's PodMonitor API, so that a default install next to kube-prometheus-stack
fills the "Squall operator" dashboard. */}}
{{- define "squall.operatorPodMonitor" -}}
{{- $mode := toString .Values.monitoring.operatorPodMonitor.enabled -}}
{{- if or (eq $mode "true") (and (eq $mode "auto") (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PodMonitor")) -}}
true
{{- end -}}
{{- end -}}

{{/* Labels of the worker and acker pods (and Services) the operator renders: squall_operator.render.labels. */}}
{{- define "squall.topologyPodSelector" -}}
matchLabels:
  app.kubernetes.io/name: squall
  app.kubernetes.io/managed-by: squall-operator
matchExpressions:
  - key: app.kubernetes.io/component
    operator: In
    values: [worker, acker]
{{- end -}}

{{- define "squall.monitorNamespaces" -}}
{{- if .Values.watchNamespaces -}}
matchNames:
{{- range .Values.watchNamespaces }}
  - {{ . }}
{{- end }}
{{- else -}}
any: true
{{- end -}}
{{- end -}}

{{/*
The operator's permissions in a namespace whose Topologies it runs. Each rule names the code that
needs it (operator/squall_operator/); tests/chart/test_chart_rbac.py checks them against that code.
*/}}
{{- define "squall.namespacedRules" -}}
# kopf lists and watches Topologies and keeps its state in their annotations (patch); the operator
# reads one before reconciling it (reconcile.Operator.reconcile)
- apiGroups: [squall.dev]
  resources: [topologies]
  verbs: [get, list, watch, patch]
# reconcile.Operator._write: the status subresource
- apiGroups: [squall.dev]
  resources: [topologies/status]
  verbs: [patch]
# kopf.adopt sets ownerReferences with blockOwnerDeletion, which clusters with the
# OwnerReferencesPermissionEnforcement admission plugin allow only to who may update the owner's finalizers
- apiGroups: [squall.dev]
  resources: [topologies/finalizers]
  verbs: [update]
# apply.apply: get, create, patch and prune; kopf watches StatefulSets for the status (on.event)
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, list, watch, create, patch, delete]
# apply.apply of render.config_map and service_account, which every Topology has (never pruned);
# kopf watches ConfigMaps to put back one deleted or edited by hand (on.event "configmaps")
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, patch]
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, create, patch]
# apply.apply of render.tls_secret (pruned when tls is turned off); watched like ConfigMaps, so a
# Secret deleted to rotate the CA is re-issued at once
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch, create, patch, delete]
# claims.ensure of render.state_claim (a topology with stateful bolts): made once, never deleted (kept
# with the Topology unless state.deleteClaimWithTopology: its owner reference, patched in or out)
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, create, patch]
# apply.apply of render.network_policy (pruned when networkPolicy.enabled is false)
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create, patch, delete]
# apply.apply of render.service; the ackers' Service is pruned when ackers becomes 0; kopf watches
# Services as it does ConfigMaps
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, patch, delete]
# apply.apply of render.spark_role and spark_role_binding
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create, patch, delete]
# apply.apply of render.disruption_budget (policy/v1, or v1beta1 before Kubernetes 1.21)
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, create, patch, delete]
# apply.apply of render.pod_monitor
- apiGroups: [monitoring.coreos.com]
  resources: [podmonitors]
  verbs: [get, create, patch, delete]
# reconcile.Operator._pods lists the worker and acker pods (container states into the status);
# kopf watches them (on.event "pods"); a rebalance deletes the pods whose template changed
# (squall_operator.rebalance: the StatefulSets' updateStrategy is OnDelete)
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, delete]
# the operator (apply.Kube.event) and kopf post core v1 Events
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- if .Values.rbac.sparkExecutors }}
# what render.spark_role grants to a Spark driver: Kubernetes lets the operator create that Role only
# if it holds these permissions itself (the alternative, `escalate` and `bind`, would let it grant anything)
- apiGroups: [""]
  resources: [pods, services, configmaps, persistentvolumeclaims]
  verbs: [create, get, list, watch, delete, deletecollection, patch]
{{- end }}
{{- end -}}

{{/* Cluster-scoped reads kopf makes when it serves every namespace (with a list of namespaces,
handlers.kopf_settings turns kopf's scanning off, and kopf reads nothing cluster-wide). */}}
{{- define "squall.clusterRules" -}}
# kopf watches CRDs to notice resources that appear or go (kopf: observation.resource_observer);
# cluster.install_cel reads the Topology CRD and adds its CEL rules on Kubernetes >= 1.25
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  resourceNames: [topologies.squall.dev]
  verbs: [get, patch]
{{- if include "squall.webhook" . }}
# The operator writes its webhook into the configuration the chart makes (templates/webhook.yaml):
# that one only, and no other, since a subject that may create or change webhook configurations may
# read or rewrite any object anyone writes.
- apiGroups: [admissionregistration.k8s.io]
  resources: [validatingwebhookconfigurations]
  resourceNames: [squall.dev]
  verbs: [patch]
{{- end }}
{{- end -}}


{{/* Whether the admission webhook is served: enabled, and the operator watches every namespace. */}}
{{- define "squall.webhook" -}}
{{- if and .Values.webhook.enabled (not .Values.watchNamespaces) -}}true{{- end -}}
{{- end -}}

{{/* The webhook Service's name: the full name cut so that the name with its suffix fits 63 characters. */}}
{{- define "squall.webhookService" -}}
{{- printf "%s-webhook" (include "squall.fullname" . | trunc 55 | trimSuffix "-") -}}
{{- end -}}

{{/* The webhook Service's DNS name: the operator names this Service in the webhook configuration. */}}
{{- define "squall.webhookHost" -}}
{{- printf "%s.%s.svc" (include "squall.webhookService" .) .Release.Namespace -}}
{{- end -}}

{{/* Labels of the chart's monitors and PrometheusRule: `release` (what kube-prometheus-stack's default
selectors match) and the extra `labels`. Call with (dict "root" $ "labels" <extra labels>). */}}
{{- /* The chart's labels and a monitor's (.labels over the release label): see squall.labelsWith. */ -}}
{{- define "squall.monitorLabels" -}}
{{- $labels := deepCopy (default dict .labels) -}}
{{- with .root.Values.monitoring.release }}{{ $labels = merge $labels (dict "release" .) }}{{ end -}}
{{- include "squall.labelsWith" (dict "root" .root "labels" $labels) -}}
{{- end -}}

{{- /* The chart's labels with .labels (a dict) added, each key once (YAML refuses a key twice); on a clash
the chart's win, as selectors need them. */ -}}
{{- define "squall.labelsWith" -}}
{{- toYaml (merge (fromYaml (include "squall.labels" .root)) (deepCopy (default dict .labels))) -}}
{{- end -}}

{{- /* An alert's runbook_url annotation: monitoring.alerts.runbookUrl and the alert's anchor there (the
alert's name in lower case, as docs/operations.md's "Alerts" table has them); nothing without it. */}}
{{- define "squall.runbookUrl" -}}
{{- with (index . 0).Values.monitoring.alerts.runbookUrl }}
{{- printf "runbook_url: %s" (printf "%s#%s" . (lower (index $ 1)) | quote) | nindent 12 }}
{{- end }}
{{- end }}
