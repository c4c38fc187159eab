import { useEffect, useState } from 'preact/hooks';
import { markRendered } from '../rendered';
import { request } from '../api/client';
import { asApiError, type ApiError } from '../api/errors';
import { allMessages, useAction } from '../components/action';
import { Badge, Empty, Loading, LoadBar, ProblemBox, RelTime, Section } from '../components/bits';
import { humanize } from '../format';
import {
  AdminDataStoresDocument, CordonDataStoreDocument, DrainPlanDocument, UncordonDataStoreDocument,
  type AdminDataStoresQuery, type DrainPlanQuery,
} from '../graphql/generated';
import { useNow, usePageTitle, useQuery } from '../hooks';

type DataStore = AdminDataStoresQuery['dataStores']['nodes'][number];
type Pool = AdminDataStoresQuery['pools']['nodes'][number];

/** Pools: policy and how much of their DataStores' capacity is used. */
function Pools({ pools, stores, now }: { pools: Pool[]; stores: DataStore[]; now: number }) {
  if (pools.length === 0) return <Empty>No pools.</Empty>;
  const capacity = (pool: string) => stores.filter((s) => s.pool === pool).reduce((n, s) => n + s.capacityTenants, 0);
  return (
    <table class="list auto">
      <thead>
        <tr><th scope="col">Pool</th><th scope="col">Policy</th><th scope="col">DataStores</th><th scope="col">Load</th><th scope="col">Age</th></tr>
      </thead>
      <tbody>
        {pools.map((p) => (
          <tr key={p.name}>
            <th scope="row" data-label="Pool">{p.name}</th>
            <td data-label="Policy">{p.policy}</td>
            <td data-label="DataStores">{p.dataStoreCount}</td>
            <td data-label="Load"><LoadBar used={p.usedBy} capacity={capacity(p.name)} unit="tenants" /></td>
            <td data-label="Age"><RelTime iso={p.createdAt} now={now} /></td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** Cordon or uncordon one DataStore. */
function CordonButton({ store, onChanged }: { store: DataStore; onChanged: () => void }) {
  const [state, run] = useAction();
  const toggle = async () => {
    const name = store.name;
    const ok = store.cordoned
      ? await run(async () => (await request(UncordonDataStoreDocument, { name })).uncordonDataStore, `${name} uncordoned.`)
      : await run(async () => (await request(CordonDataStoreDocument, { name })).cordonDataStore, `${name} cordoned.`);
    if (ok) onChanged();
  };
  return (
    <>
      <button type="button" class="secondary small" disabled={state.busy} onClick={toggle} aria-label={`${store.cordoned ? 'Uncordon' : 'Cordon'} ${store.name}`}>
        {store.cordoned ? 'Uncordon' : 'Cordon'}
      </button>
      {(state.problem || allMessages(state.fields)) && <span class="field-error" role="alert">{state.problem?.detail ?? allMessages(state.fields)}</span>}
    </>
  );
}

/** DataStores: driver, readiness, cordon state, load against capacity, and actions. */
function DataStores({ stores, now, onChanged, onDrain }: { stores: DataStore[]; now: number; onChanged: () => void; onDrain: (name: string) => void }) {
  if (stores.length === 0) return <Empty>No DataStores registered.</Empty>;
  return (
    <table class="list auto">
      <thead>
        <tr>
          <th scope="col">DataStore</th><th scope="col">Pool</th><th scope="col">Driver</th><th scope="col">Ready</th>
          <th scope="col">Scheduling</th><th scope="col">Load</th><th scope="col">Age</th><th scope="col">Actions</th>
        </tr>
      </thead>
      <tbody>
        {stores.map((s) => (
          <tr key={s.name} data-datastore={s.name} data-cordoned={String(s.cordoned)}>
            <th scope="row" data-label="DataStore" title={s.endpoints.join(', ')}>{s.name}</th>
            <td data-label="Pool">{s.pool ?? '—'}</td>
            <td data-label="Driver">{s.driver}</td>
            <td data-label="Ready"><Badge value={s.ready ? 'READY' : 'NOT_READY'} /></td>
            <td data-label="Scheduling" class="cell-cordon"><Badge value={s.cordoned ? 'CORDONED' : 'SCHEDULABLE'} /></td>
            <td data-label="Load"><LoadBar used={s.usedBy} capacity={s.capacityTenants} unit="tenants" /></td>
            <td data-label="Age"><RelTime iso={s.createdAt} now={now} /></td>
            <td data-label="Actions"><div class="actions">
              <CordonButton store={s} onChanged={onChanged} />
              <button type="button" class="secondary small" onClick={() => onDrain(s.name)} aria-label={`Drain plan of ${s.name}`}>Drain plan</button>
            </div></td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** Where each control plane on a DataStore would move if it were drained, or why it cannot. */
function DrainPlan({ name, moves, error }: { name: string; moves: DrainPlanQuery['drainPlan'] | null; error: ApiError | null }) {
  return (
    <Section title={`Drain plan of ${name}`} id="drain-title">
      <ProblemBox error={error} />
      {!moves && !error && <Loading what="the drain plan" />}
      {moves && moves.length === 0 && <Empty>Nothing to move: no control plane uses {name}.</Empty>}
      {moves && moves.length > 0 && (
        <table class="compact">
          <thead><tr><th scope="col">Control plane</th><th scope="col">Usage</th><th scope="col">To</th><th scope="col">Blocked by</th></tr></thead>
          <tbody>
            {moves.map((m) => (
              <tr key={`${m.controlPlaneId}${m.usage.overrides.join()}`}>
                <th scope="row" class="mono">{m.controlPlaneId}</th>
                <td>{m.usage.primary ? 'primary' : `overrides: ${m.usage.overrides.join(', ')}`}</td>
                <td>{m.to ?? <span class="muted">nowhere</span>}</td>
                <td>{m.blockedBy.map((b) => `${humanize(b.reason)} (${b.count})`).join(', ') || '—'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </Section>
  );
}

/** Pools and DataStores for platform admins. */
export function DataStoresPage() {
  usePageTitle('DataStores');
  const now = useNow();
  const query = useQuery(AdminDataStoresDocument, {});
  const [drain, setDrain] = useState<{ name: string; moves: DrainPlanQuery['drainPlan'] | null; error: ApiError | null } | null>(null);
  const showDrain = (name: string) => {
    setDrain({ name, moves: null, error: null });
    request(DrainPlanDocument, { dataStore: name }).then(
      (d) => setDrain({ name, moves: d.drainPlan, error: null }),
      (e) => setDrain({ name, moves: null, error: asApiError(e) }),
    );
  };
  const data = query.data;
  useEffect(() => {
    if (data) markRendered();
  }, [data !== null]);
  return (
    <div class="page">
      <h1>Pools and DataStores</h1>
      <ProblemBox error={query.error} />
      <Section title="Pools" id="pools-title">
        {data ? <Pools pools={data.pools.nodes} stores={data.dataStores.nodes} now={now} /> : <Loading what="pools" />}
      </Section>
      <Section title="DataStores" id="datastores-title">
        {data ? <DataStores stores={data.dataStores.nodes} now={now} onChanged={query.reload} onDrain={showDrain} /> : <Loading what="DataStores" />}
        {data?.dataStores.pageInfo.hasNextPage && <p class="muted">Showing the first 100.</p>}
      </Section>
      {drain && <DrainPlan {...drain} />}
    </div>
  );
}
