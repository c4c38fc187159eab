import { useState } from 'preact/hooks';
import { request } from '../api/client';
import { asApiError, fromUserErrors, type ApiError, type FieldErrors } from '../api/errors';
import { Loading, ProblemBox } from '../components/bits';
import { SelectField, TextAreaField, TextField } from '../components/field';
import { PlacementDetails, type PlacementView } from '../components/placement';
import { CreateControlPlaneDocument, PlacementPreviewDocument } from '../graphql/generated';
import { useDebounced, usePageTitle } from '../hooks';
import type { Row } from '../live-list';
import { byFormField, DEFAULT_FORM, toInput, validate, type CreateForm } from '../validation';

const SERVICE_TYPES = ['ClusterIP', 'NodePort', 'LoadBalancer'].map((v) => ({ value: v, label: v }));
const SIZES = [
  { value: 'small', label: 'Small' },
  { value: 'medium', label: 'Medium' },
  { value: 'large', label: 'Large' },
];

/** Focuses the first field with an error. */
function focusFirstError(errors: FieldErrors): void {
  const order = ['name', 'kubernetesVersion', 'replicas', 'serviceType', 'port', 'sizeClass', 'pool', 'offload', 'labels'];
  const first = order.find((f) => errors[f]);
  if (first) requestAnimationFrame(() => document.getElementById(`cp-${first}`)?.focus());
}

/** The preview's state. */
type Preview = { state: 'idle' } | { state: 'loading' } | { state: 'done'; placement: PlacementView } | { state: 'error'; error: ApiError };

/** The placement preview panel: where the form's control plane would land, refreshed as it is typed. */
function PreviewPanel({ tenant, form }: { tenant: string; form: CreateForm }) {
  const [preview, setPreview] = useState<Preview>({ state: 'idle' });
  useDebounced(form, 400, (f) => {
    if (Object.keys(validate(f)).length) return setPreview({ state: 'idle' });
    setPreview({ state: 'loading' });
    request(PlacementPreviewDocument, { tenant, input: toInput(tenant, f) }).then(
      (d) => setPreview({ state: 'done', placement: d.placementPreview }),
      (e) => setPreview({ state: 'error', error: asApiError(e) }),
    );
  });
  return (
    <aside class="card preview" aria-labelledby="preview-title" aria-live="polite" aria-busy={preview.state === 'loading'}>
      <h2 id="preview-title">Placement preview</h2>
      {preview.state === 'idle' && <p class="muted">Fill in a valid form to see where it would land and why. Nothing is reserved.</p>}
      {preview.state === 'loading' && <Loading what="the placement" />}
      {preview.state === 'error' && <PreviewError error={preview.error} />}
      {preview.state === 'done' && <PlacementDetails placement={preview.placement} />}
    </aside>
  );
}

/** Why the preview has no placement, with each refused field. */
function PreviewError({ error }: { error: ApiError }) {
  const fields = Object.entries(error.fields);
  return (
    <div>
      <ProblemBox error={error} />
      {fields.length > 0 && (
        <ul class="plain">
          {fields.map(([field, message]) => (
            <li key={field}>
              <code>{field}</code>: {message}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}

/** The fields of the form. */
function CreateFields({ form, errors, set }: { form: CreateForm; errors: FieldErrors; set: (patch: Partial<CreateForm>) => void }) {
  return (
    <>
      <TextField id="cp-name" label="Name" value={form.name} required error={errors.name} onInput={(v) => set({ name: v })}
        hint="Lowercase letters, digits and '-', starting with a letter; unique in the tenant." />
      <TextField id="cp-kubernetesVersion" label="Kubernetes version" value={form.kubernetesVersion} required error={errors.kubernetesVersion}
        onInput={(v) => set({ kubernetesVersion: v })} hint="vMAJOR.MINOR.PATCH within the server's supported range, e.g. v1.34.4." />
      <TextField id="cp-replicas" label="Replicas" value={form.replicas} inputMode="numeric" error={errors.replicas}
        onInput={(v) => set({ replicas: v })} hint="0 (asleep) to 9." />
      <SelectField id="cp-serviceType" label="Service type" value={form.serviceType} options={SERVICE_TYPES} error={errors.serviceType}
        onChange={(v) => set({ serviceType: v })} />
      <TextField id="cp-port" label="API server port" value={form.port} inputMode="numeric" error={errors.port}
        onInput={(v) => set({ port: v })} hint="With NodePort, also the node port (in the cluster's NodePort range)." />
      <SelectField id="cp-sizeClass" label="Size" value={form.sizeClass} options={SIZES} error={errors.sizeClass} onChange={(v) => set({ sizeClass: v })} />
      <TextField id="cp-pool" label="DataStore pool (optional)" value={form.pool} error={errors.pool} onInput={(v) => set({ pool: v })} />
      <TextField id="cp-offload" label="Offload" value={form.offload} error={errors.offload} onInput={(v) => set({ offload: v })}
        hint="none, auto, or pool:<name> for events and leases." />
      <TextAreaField id="cp-labels" label="Labels (optional)" value={form.labels} error={errors.labels} onInput={(v) => set({ labels: v })}
        hint="One key=value per line." />
      <fieldset class="checks" aria-describedby={errors.addons ? 'cp-addons-error' : undefined}>
        <legend>Addons</legend>
        {(['coreDNS', 'kubeProxy', 'konnectivity'] as const).map((k) => (
          <label key={k} class="check">
            <input type="checkbox" checked={form[k]} onChange={(e) => set({ [k]: (e.target as HTMLInputElement).checked })} />
            {{ coreDNS: 'CoreDNS', kubeProxy: 'kube-proxy', konnectivity: 'Konnectivity' }[k]}
          </label>
        ))}
        {errors.addons && <p class="field-error" id="cp-addons-error">{errors.addons}</p>}
      </fieldset>
    </>
  );
}

/** The create form: client checks as the API's, the API's field errors next to their fields, and the preview. */
export function CreatePage({ tenant, onCreated }: { tenant: string; onCreated: (row: Row) => void }) {
  usePageTitle('Create a control plane');
  const [form, setForm] = useState(DEFAULT_FORM);
  const [errors, setErrors] = useState<FieldErrors>({});
  const [problem, setProblem] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);
  const set = (patch: Partial<CreateForm>) => setForm((f) => ({ ...f, ...patch }));
  const submit = async (e: Event) => {
    e.preventDefault();
    setProblem(null);
    const found = validate(form);
    setErrors(found);
    if (Object.keys(found).length) return focusFirstError(found);
    setBusy(true);
    try {
      const { createControlPlane: payload } = await request(CreateControlPlaneDocument, { input: toInput(tenant, form) });
      if (payload.controlPlane) return onCreated(payload.controlPlane);
      const refused = byFormField(fromUserErrors(payload.userErrors));
      setErrors(refused);
      focusFirstError(refused);
    } catch (err) {
      const error = asApiError(err);
      setProblem(error);
      setErrors(byFormField(error.fields));
    } finally {
      setBusy(false);
    }
  };
  return (
    <div class="page">
      <h1>Create a control plane</h1>
      <p class="subtitle">
        In tenant <strong>{tenant}</strong>
      </p>
      <div class="split">
        <form class="card form" onSubmit={submit} noValidate aria-label="New control plane">
          <ProblemBox error={problem} />
          {errors[''] && <p class="field-error" role="alert">{errors['']}</p>}
          <CreateFields form={form} errors={errors} set={set} />
          <button type="submit" disabled={busy}>
            {busy ? 'Creating…' : 'Create control plane'}
          </button>
        </form>
        <PreviewPanel tenant={tenant} form={form} />
      </div>
    </div>
  );
}
