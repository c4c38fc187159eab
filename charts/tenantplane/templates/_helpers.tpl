{{/* Chart name. */}}
{{- define "tenantplane.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fully qualified app name (at most 50 characters, so that suffixes stay under 63). */}}
{{- define "tenantplane.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "tenantplane.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Common labels. */}}
{{- define "tenantplane.labels" -}}
helm.sh/chart: {{ include "tenantplane.chart" . }}
app.kubernetes.io/name: {{ include "tenantplane.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tenantplane
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "serve"). */}}
{{- define "tenantplane.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tenantplane.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* All labels of one component. */}}
{{- define "tenantplane.componentLabels" -}}
{{ include "tenantplane.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tenantplane.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* ServiceAccount name of one component. */}}
{{- define "tenantplane.serviceAccountName" -}}
{{- if .ctx.Values.serviceAccount.create -}}
{{- printf "%s-%s" (include "tenantplane.fullname" .ctx) .component -}}
{{- else -}}
default
{{- end -}}
{{- end -}}

{{/* Secret and key of DATABASE_URL. */}}
{{- define "tenantplane.databaseSecret" -}}
{{- if .Values.database.existingSecret -}}
{{- .Values.database.existingSecret -}}
{{- else if .Values.postgresql.enabled -}}
{{- printf "%s-database" (include "tenantplane.fullname" .) -}}
{{- else -}}
{{- fail "set database.existingSecret (a Secret holding DATABASE_URL) or postgresql.enabled=true" -}}
{{- end -}}
{{- end -}}

{{- define "tenantplane.bundledPostgres" -}}
{{- if and .Values.postgresql.enabled (not .Values.database.existingSecret) -}}true{{- end -}}
{{- end -}}

{{- define "tenantplane.authSecret" -}}
{{- default (printf "%s-auth" (include "tenantplane.fullname" .)) .Values.auth.existingSecret -}}
{{- end -}}

{{/* Environment shared by the components that use PostgreSQL. */}}
{{- define "tenantplane.dbEnv" -}}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "tenantplane.databaseSecret" . }}
      key: {{ .Values.database.urlKey }}
- name: TENANTPLANE_DB_MAX_CONNECTIONS
  value: {{ .Values.database.maxConnections | quote }}
{{- end -}}

{{- define "tenantplane.commonEnv" -}}
- name: TENANTPLANE_LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
- name: RUST_LOG
  value: {{ .Values.logLevel | quote }}
{{- end -}}

{{- define "tenantplane.authEnv" -}}
- name: TENANTPLANE_ENCRYPTION_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "tenantplane.authSecret" . }}
      key: {{ .Values.auth.encryptionKeyKey }}
- name: TENANTPLANE_ISSUER
  value: {{ .Values.auth.issuer | quote }}
- name: TENANTPLANE_AUDIENCE
  value: {{ .Values.auth.audience | quote }}
{{- end -}}

{{/* A ContentRef from upstream-style {name, namespace, keyPath} values. */}}
{{- define "tenantplane.contentRef" -}}
secretReference:
  name: {{ required "datastore secret references need a name" .name | quote }}
  namespace: {{ required (printf "datastore secret %s needs a namespace" .name) .namespace | quote }}
  keyPath: {{ required (printf "datastore secret %s needs a keyPath" .name) .keyPath | quote }}
{{- end -}}

{{/* The name of the DataStore rendered from datastore.*: datastore.nameOverride (upstream Kamaji's), else datastore.name. */}}
{{- define "tenantplane.datastoreName" -}}
{{- .Values.datastore.nameOverride | default .Values.datastore.name -}}
{{- end -}}

{{/* The controller's --default-datastore: defaultDatastoreName, else the chart's DataStore when datastore.enabled, else empty. */}}
{{- define "tenantplane.defaultDatastore" -}}
{{- if .Values.defaultDatastoreName -}}
{{- .Values.defaultDatastoreName -}}
{{- else if .Values.datastore.enabled -}}
{{- include "tenantplane.datastoreName" . -}}
{{- end -}}
{{- end -}}

{{/* Pod-level scheduling and security settings of one component. */}}
{{- define "tenantplane.podCommon" -}}
{{- with .ctx.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .ctx.Values.podSecurityContext | nindent 2 }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The credential issuer's env (serve and worker), when it is enabled. */}}
{{- define "tenantplane.issuerEnv" -}}
{{- $i := .Values.serve.credentialIssuer -}}
{{- if $i.enabled }}
- name: TENANTPLANE_CREDENTIAL_ISSUER_URL
  value: {{ required "serve.credentialIssuer.url is required when the credential issuer is enabled" $i.url | quote }}
- name: TENANTPLANE_CREDENTIAL_ISSUER_CA_FILE
  value: /etc/tenantplane/tls/ca.crt
{{- end }}
{{- end -}}
