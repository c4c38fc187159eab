import { useEffect } from 'preact/hooks';
import { markRendered } from '../rendered';
import { subscribe } from '../api/live';
import { Badge, Empty, Loading, ProblemBox, RelTime, Section } from '../components/bits';
import { PlacementDetails } from '../components/placement';
import { humanize } from '../format';
import { ControlPlaneDetailDocument, ControlPlaneEventsDocument, ControlPlaneOperationsDocument } from '../graphql/generated';
import { useNow, usePageTitle, useQuery } from '../hooks';
import { canWrite, isTenantAdmin, useViewer } from '../viewer';
import { DeleteForm, JoinCommand, KubeconfigButton, ScaleForm, UpgradeForm, type Detail } from './detail-actions';

/** Reloads the page's data on every event about this control plane or its operations. */
function useLiveReload(cp: Detail | null, reload: () => void): void {
  const tenant = cp?.tenant;
  const id = cp?.id;
  useEffect(() => {
    if (!tenant || !id) return;
    const stops = [
      subscribe(ControlPlaneEventsDocument, { tenant }, (d) => d.controlPlaneEvents.controlPlane.id === id && reload(), () => {}),
      subscribe(ControlPlaneOperationsDocument, { tenant, controlPlane: id }, () => reload(), () => {}),
    ];
    return () => stops.forEach((stop) => stop());
  }, [tenant, id]);
}

/** The summary: phase, versions, endpoint, DataStore, replicas, age. */
function Summary({ cp, now }: { cp: Detail; now: number }) {
  const items: [string, preact.ComponentChildren][] = [
    ['Phase', <span data-phase={cp.phase} class="cell-phase"><Badge value={cp.phase} /></span>],
    ['Version', cp.spec.kubernetesVersion + (cp.status.installedVersion && cp.status.installedVersion !== cp.spec.kubernetesVersion ? ` (runs ${cp.status.installedVersion})` : '')],
    ['Endpoint', cp.endpoint ? <code>{cp.endpoint}</code> : '—'],
    ['DataStore', cp.placement?.dataStore ?? '—'],
    ['Replicas', String(cp.spec.replicas)],
    ['Service', `${cp.spec.serviceType}, port ${cp.spec.port}, ${cp.spec.sizeClass}`],
    ['Created', <RelTime iso={cp.createdAt} now={now} />],
    ['Labels', cp.spec.labels.length ? cp.spec.labels.map((l) => `${l.key}=${l.value}`).join(', ') : '—'],
  ];
  return (
    <dl class="summary">
      {items.map(([term, value]) => (
        <div key={term}>
          <dt>{term}</dt>
          <dd>{value}</dd>
        </div>
      ))}
    </dl>
  );
}

/** Conditions with their messages. */
function Conditions({ cp, now }: { cp: Detail; now: number }) {
  if (cp.conditions.length === 0) return <Empty>No conditions reported yet.</Empty>;
  return (
    <table class="compact">
      <thead>
        <tr><th scope="col">Type</th><th scope="col">Status</th><th scope="col">Reason and message</th><th scope="col">Since</th></tr>
      </thead>
      <tbody>
        {cp.conditions.map((c) => (
          <tr key={c.type}>
            <th scope="row">{c.type}</th>
            <td><span class={`status status-${c.status.toLowerCase()}`}>{c.status}</span></td>
            <td>{c.reason && <strong>{c.reason}</strong>} {c.message}</td>
            <td><RelTime iso={c.lastTransitionTime} now={now} /></td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** The operations timeline, newest first, each with its stages. */
function Operations({ cp, now }: { cp: Detail; now: number }) {
  if (cp.operations.length === 0) return <Empty>No operations.</Empty>;
  return (
    <ol class="timeline">
      {cp.operations.map((op) => (
        <li key={op.id}>
          <p>
            <strong>{humanize(op.kind)}</strong> to generation {op.generation} · <Badge value={op.state} /> · <RelTime iso={op.createdAt} now={now} />
          </p>
          <ol class="stages">
            {op.stages.map((s) => (
              <li key={s.stage}>{humanize(s.stage)} <RelTime iso={s.at} now={now} /></li>
            ))}
          </ol>
          {op.error && <p class="field-error">{op.reason}: {op.error}</p>}
        </li>
      ))}
    </ol>
  );
}

/** The audit entries about it, newest first. */
function Audit({ cp, now }: { cp: Detail; now: number }) {
  if (cp.auditEntries.length === 0) return <Empty>No audit entries.</Empty>;
  return (
    <table class="compact">
      <thead>
        <tr><th scope="col">Action</th><th scope="col">Actor</th><th scope="col">When</th></tr>
      </thead>
      <tbody>
        {cp.auditEntries.map((a) => (
          <tr key={a.id}>
            <th scope="row"><code>{a.action}</code></th>
            <td class="mono wrap">{a.actor}</td>
            <td><RelTime iso={a.createdAt} now={now} /></td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** One control plane: summary, actions, conditions, placement, operations and audit, kept live. */
export function DetailPage({ id, onDeleted }: { id: string; onDeleted: (name: string, tenant: string) => void }) {
  const viewer = useViewer();
  const now = useNow();
  const query = useQuery(ControlPlaneDetailDocument, { id });
  const cp = query.data?.node?.__typename === 'ControlPlane' ? query.data.node : null;
  usePageTitle(cp ? cp.name : 'Control plane');
  useLiveReload(cp, query.reload);
  useEffect(() => {
    if (query.data) markRendered();
  }, [query.data !== null]);
  if (!query.data && query.loading) return <div class="page"><h1>Control plane</h1><Loading what="the control plane" /></div>;
  if (!cp) {
    return (
      <div class="page">
        <h1>Control plane not found</h1>
        <ProblemBox error={query.error} />
        {!query.error && <p>It does not exist, or this token may not see it.</p>}
      </div>
    );
  }
  return (
    <div class="page">
      <h1>{cp.name}</h1>
      <ProblemBox error={query.error} />
      <Section title="Overview" id="overview-title">
        <Summary cp={cp} now={now} />
        <KubeconfigButton cp={cp} />
      </Section>
      {canWrite(viewer) && (
        <Section title="Upgrade and scale" id="change-title">
          <div class="two">
            <UpgradeForm key={`u${cp.id}`} cp={cp} onChanged={query.reload} />
            <ScaleForm key={`s${cp.id}`} cp={cp} onChanged={query.reload} />
          </div>
        </Section>
      )}
      <Section title="Conditions" id="conditions-title"><Conditions cp={cp} now={now} /></Section>
      <Section title="Placement" id="placement-title"><PlacementDetails placement={cp.placement} /></Section>
      <Section title="Operations" id="operations-title"><Operations cp={cp} now={now} /></Section>
      <Section title="Audit" id="audit-title"><Audit cp={cp} now={now} /></Section>
      {isTenantAdmin(viewer) && <JoinCommand cp={cp} />}
      {isTenantAdmin(viewer) && <DeleteForm cp={cp} onDeleted={() => onDeleted(cp.name, cp.tenant)} />}
    </div>
  );
}
