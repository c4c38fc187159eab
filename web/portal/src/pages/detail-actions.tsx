import { useState } from 'preact/hooks';
import { request } from '../api/client';
import { asApiError, type ApiError } from '../api/errors';
import { allMessages, useAction } from '../components/action';
import { ProblemBox, RelTime, Section } from '../components/bits';
import { SelectField, TextField } from '../components/field';
import {
  CreateJoinTokenDocument, DeleteControlPlaneDocument, KubeconfigDocument, UpdateControlPlaneDocument,
  type ControlPlaneDetailQuery,
} from '../graphql/generated';
import { useNow } from '../hooks';

/** The control plane the detail page shows. */
export type Detail = Extract<NonNullable<ControlPlaneDetailQuery['node']>, { __typename: 'ControlPlane' }>;

/** A success line that keeps its space. */
function Done({ text }: { text: string | null }) {
  return <p class="done" role="status">{text ?? ''}</p>;
}

/** Saves a text as a file through a temporary link. */
function saveFile(name: string, text: string): void {
  const url = URL.createObjectURL(new Blob([text], { type: 'application/yaml' }));
  const link = Object.assign(document.createElement('a'), { href: url, download: name });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/** Downloads the kubeconfig (audited; it holds no secret: its user runs `tenantplane credential`). */
export function KubeconfigButton({ cp }: { cp: Detail }) {
  const [problem, setProblem] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);
  const download = async () => {
    setBusy(true);
    setProblem(null);
    try {
      const { node } = await request(KubeconfigDocument, { id: cp.id });
      const yaml = node?.__typename === 'ControlPlane' ? node.kubeconfig : null;
      if (yaml) saveFile(`${cp.tenant}-${cp.name}.kubeconfig`, yaml);
      else setProblem(asApiError(new Error('No kubeconfig yet: it exists once the control plane has served.')));
    } catch (e) {
      setProblem(asApiError(e));
    } finally {
      setBusy(false);
    }
  };
  return (
    <div class="action">
      <button type="button" onClick={download} disabled={busy}>
        {busy ? 'Preparing…' : 'Download kubeconfig'}
      </button>
      <ProblemBox error={problem} />
    </div>
  );
}

/** The version an upgrade to `line` proposes: the next patch on the current line, `.0` on the next. */
function proposedPatch(current: string, line: string): string {
  const [, curLine, curPatch] = /^(v\d+\.\d+)\.(\d+)$/.exec(current) ?? [];
  return curLine === line ? String(Number(curPatch ?? 0) + 1) : '0';
}

/** Upgrade: only the lines `allowedUpgrades` lists are offered. */
export function UpgradeForm({ cp, onChanged }: { cp: Detail; onChanged: () => void }) {
  const lines = cp.allowedUpgrades;
  const [line, setLine] = useState(lines[lines.length - 1] ?? '');
  const [patch, setPatch] = useState(() => proposedPatch(cp.spec.kubernetesVersion, lines[lines.length - 1] ?? ''));
  const [state, run] = useAction();
  if (lines.length === 0) return <p class="muted">No upgrade is possible now.</p>;
  const submit = async (e: Event) => {
    e.preventDefault();
    const input = { id: cp.id, kubernetesVersion: `${line}.${patch.trim()}`, ifMatch: cp.etag };
    if (await run(async () => (await request(UpdateControlPlaneDocument, { input })).updateControlPlane, `Upgrading to ${input.kubernetesVersion}.`)) onChanged();
  };
  return (
    <form class="inline-form" onSubmit={submit} aria-label="Upgrade">
      <SelectField id="upgrade-line" label="Version line" value={line} options={lines.map((l) => ({ value: l, label: l }))}
        onChange={(v) => { setLine(v); setPatch(proposedPatch(cp.spec.kubernetesVersion, v)); }} />
      <TextField id="upgrade-patch" label="Patch" value={patch} inputMode="numeric" onInput={setPatch}
        error={allMessages(state.fields)} hint={`Now ${cp.spec.kubernetesVersion}.`} />
      <button type="submit" disabled={state.busy}>Upgrade</button>
      <ProblemBox error={state.problem} />
      <Done text={state.done} />
    </form>
  );
}

/** Scale: replicas 0 to 9. */
export function ScaleForm({ cp, onChanged }: { cp: Detail; onChanged: () => void }) {
  const [replicas, setReplicas] = useState(String(cp.spec.replicas));
  const [state, run] = useAction();
  const submit = async (e: Event) => {
    e.preventDefault();
    const input = { id: cp.id, replicas: Number(replicas), ifMatch: cp.etag };
    if (!/^\d$/.test(replicas.trim())) return void run(async () => ({ userErrors: [{ field: 'replicas', message: 'must be between 0 and 9 (0 puts the control plane to sleep)' }] }), '');
    if (await run(async () => (await request(UpdateControlPlaneDocument, { input })).updateControlPlane, `Scaling to ${replicas}.`)) onChanged();
  };
  return (
    <form class="inline-form" onSubmit={submit} aria-label="Scale">
      <TextField id="scale-replicas" label="Replicas" value={replicas} inputMode="numeric" onInput={setReplicas}
        error={allMessages(state.fields)} hint="0 puts it to sleep." />
      <button type="submit" disabled={state.busy}>Scale</button>
      <ProblemBox error={state.problem} />
      <Done text={state.done} />
    </form>
  );
}

/** A kubeadm join command from a new join token (tenant admins); shown once. */
export function JoinCommand({ cp }: { cp: Detail }) {
  const now = useNow();
  const [token, setToken] = useState<{ joinCommand: string; expiresAt: string } | null>(null);
  const [state, run] = useAction();
  const create = () =>
    run(async () => {
      const payload = (await request(CreateJoinTokenDocument, { input: { tenant: cp.tenant, controlPlane: cp.id, description: 'portal' } })).createJoinToken;
      setToken(payload.joinToken);
      return payload;
    }, 'Join token created.');
  return (
    <Section title="Join a node" id="join-title">
      <p class="muted">A bootstrap token for `kubeadm join`; its secret is shown only here, once.</p>
      <button type="button" onClick={create} disabled={state.busy}>Create join command</button>
      <ProblemBox error={state.problem} />
      {allMessages(state.fields) && <p class="field-error">{allMessages(state.fields)}</p>}
      {token && (
        <div>
          <pre class="command" tabIndex={0} aria-label="Join command">{token.joinCommand}</pre>
          <p>Expires <RelTime iso={token.expiresAt} now={now} />.</p>
        </div>
      )}
    </Section>
  );
}

/** Delete, behind typing the control plane's name (tenant admins). */
export function DeleteForm({ cp, onDeleted }: { cp: Detail; onDeleted: () => void }) {
  const [typed, setTyped] = useState('');
  const [state, run] = useAction();
  const submit = async (e: Event) => {
    e.preventDefault();
    if (typed !== cp.name) return;
    if (await run(async () => (await request(DeleteControlPlaneDocument, { input: { id: cp.id } })).deleteControlPlane, 'Deleting.')) onDeleted();
  };
  return (
    <Section title="Delete" id="delete-title">
      <form class="inline-form" onSubmit={submit} aria-label="Delete control plane">
        <TextField id="delete-confirm" label={`Type ${cp.name} to confirm`} value={typed} onInput={setTyped}
          error={allMessages(state.fields)} hint="This removes the control plane and its data." />
        <button type="submit" class="danger" disabled={typed !== cp.name || state.busy}>Delete control plane</button>
        <ProblemBox error={state.problem} />
      </form>
    </Section>
  );
}
