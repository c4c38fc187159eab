import type { FieldErrors } from './api/errors';
import type { CreateControlPlaneInput } from './graphql/generated';

/** The create form's values, as typed. */
export type CreateForm = {
  name: string;
  kubernetesVersion: string;
  replicas: string;
  serviceType: string;
  port: string;
  sizeClass: string;
  pool: string;
  offload: string;
  labels: string;
  coreDNS: boolean;
  kubeProxy: boolean;
  konnectivity: boolean;
};

/** The API's defaults. */
export const DEFAULT_FORM: CreateForm = {
  name: '', kubernetesVersion: '', replicas: '2', serviceType: 'ClusterIP', port: '6443', sizeClass: 'small',
  pool: '', offload: 'none', labels: '', coreDNS: true, kubeProxy: true, konnectivity: false,
};

/** The server's patterns (crates/core/src/domain/schema.rs). */
const DNS1035 = /^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/;
const DNS1123 = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const VERSION = /^v(0|[1-9][0-9]{0,5})[.](0|[1-9][0-9]{0,5})[.](0|[1-9][0-9]{0,5})$/;
const OFFLOAD = /^(none|auto|pool:[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)$/;
const LABEL_KEY = /^[-._/A-Za-z0-9]{1,317}$/;
const LABEL_VALUE = /^[-._/A-Za-z0-9]{0,317}$/;

/** `key=value` lines (or comma-separated) as pairs; null when one is malformed. */
export function parseLabels(text: string): { key: string; value: string }[] | null {
  const items = text.split(/[\n,]/).map((l) => l.trim()).filter(Boolean);
  const pairs = items.map((item) => {
    const at = item.indexOf('=');
    return at < 0 ? null : { key: item.slice(0, at).trim(), value: item.slice(at + 1).trim() };
  });
  if (pairs.some((p) => !p || !LABEL_KEY.test(p.key) || !LABEL_VALUE.test(p.value))) return null;
  return pairs as { key: string; value: string }[];
}

/** A whole number in `[min, max]`, or null. */
function integer(text: string, min: number, max: number): number | null {
  if (!/^\d{1,5}$/.test(text.trim())) return null;
  const n = Number(text);
  return n >= min && n <= max ? n : null;
}

/** The port's problem, if any: the control-plane pod's own ports are taken. */
function portError(form: CreateForm): string | undefined {
  const port = integer(form.port, 1, 65535);
  if (port === null) return 'must be a port from 1 to 65535';
  if (port === 10257 || port === 10259) return `${port} is taken in the control-plane pod: kube-controller-manager and kube-scheduler listen on 10257 and 10259; pick another port`;
  if (form.konnectivity && port >= 8132 && port <= 8134) return `${port} is taken in the control-plane pod: the konnectivity-server sidecar listens on 8132, 8133 and 8134; pick another port`;
  return undefined;
}

/** The same checks as the API's, by form field (the version's range and NodePort's are the server's). */
export function validate(form: CreateForm): FieldErrors {
  const errors: FieldErrors = {};
  if (!form.name) errors.name = 'is required';
  else if (form.name.length > 63 || !DNS1035.test(form.name))
    errors.name = "must be a DNS-1035 label: 1-63 lowercase letters, digits or '-', starting with a letter and ending with a letter or digit (it names the control plane's Service)";
  if (!VERSION.test(form.kubernetesVersion.trim())) errors.kubernetesVersion = 'must be a version vMAJOR.MINOR.PATCH, e.g. v1.34.4';
  if (integer(form.replicas, 0, 9) === null) errors.replicas = 'must be between 0 and 9 (0 puts the control plane to sleep)';
  const port = portError(form);
  if (port) errors.port = port;
  if (form.pool && !DNS1123.test(form.pool)) errors.pool = "must be a pool name: lowercase letters, digits or '-'";
  if (!OFFLOAD.test(form.offload)) errors.offload = 'must be none, auto or pool:<name>';
  if (parseLabels(form.labels) === null) errors.labels = "label keys and values use letters, digits, '.', '_', '-' and '/'; write key=value";
  return errors;
}

/** The mutation's input from a valid form. */
export function toInput(tenant: string, form: CreateForm): CreateControlPlaneInput {
  const labels = parseLabels(form.labels) ?? [];
  return {
    tenant, name: form.name, kubernetesVersion: form.kubernetesVersion.trim(), replicas: Number(form.replicas),
    serviceType: form.serviceType, port: Number(form.port), sizeClass: form.sizeClass,
    datastore: form.pool ? { pool: form.pool } : null, offload: form.offload,
    addons: { coreDNS: form.coreDNS, kubeProxy: form.kubeProxy, konnectivity: form.konnectivity },
    labels: labels.length ? labels : null,
  };
}

/** The form field an API field path belongs to (`datastore.pool` → `pool`); `''` for the form as a whole. */
export function formFieldOf(path: string): string {
  const head = path.split('.')[0] ?? '';
  const fields: Record<string, string> = {
    name: 'name', kubernetesVersion: 'kubernetesVersion', replicas: 'replicas', serviceType: 'serviceType',
    port: 'port', sizeClass: 'sizeClass', datastore: 'pool', offload: 'offload', labels: 'labels', addons: 'addons',
  };
  return fields[head] ?? '';
}

/** API field errors regrouped by form field. */
export function byFormField(errors: FieldErrors): FieldErrors {
  const out: FieldErrors = {};
  for (const [path, message] of Object.entries(errors)) {
    const field = formFieldOf(path);
    out[field] = out[field] ? `${out[field]} ${message}` : message;
  }
  return out;
}
