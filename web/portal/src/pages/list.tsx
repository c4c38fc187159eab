import { useEffect, useState } from 'preact/hooks';
import { Badge, Empty, Loading, ProblemBox, RelTime } from '../components/bits';
import { SelectField, TextField } from '../components/field';
import { humanize } from '../format';
import type { ControlPlanePhase } from '../graphql/generated';
import { useNow, usePageTitle } from '../hooks';
import { useLiveControlPlanes, type Filters, type Row } from '../live-list';
import { markRendered } from '../rendered';
import { href } from '../router';
import { canWrite, useViewer } from '../viewer';

/** The phases a filter offers. */
const PHASES: ControlPlanePhase[] = [
  'PENDING', 'PROVISIONING', 'READY', 'NOT_READY', 'UPGRADING', 'MIGRATING', 'SLEEPING', 'WRITE_LIMITED',
  'CERTIFICATE_AUTHORITY_ROTATING', 'DELETING', 'FAILED', 'UNKNOWN',
];

const NO_FILTERS: Filters = { status: null, version: '', labels: '' };

/** The filter form: phase, version and labels, applied together. */
function FilterForm({ value, onApply }: { value: Filters; onApply: (f: Filters) => void }) {
  const [draft, setDraft] = useState(value);
  const options = [{ value: '', label: 'Any phase' }, ...PHASES.map((p) => ({ value: p, label: humanize(p) }))];
  return (
    <form class="filters" aria-label="Filter control planes" onSubmit={(e) => { e.preventDefault(); onApply(draft); }}>
      <SelectField id="filter-phase" label="Phase" value={draft.status ?? ''} options={options}
        onChange={(v) => setDraft({ ...draft, status: (v || null) as ControlPlanePhase | null })} />
      <TextField id="filter-version" label="Version" value={draft.version} onInput={(v) => setDraft({ ...draft, version: v })} />
      <TextField id="filter-labels" label="Labels (key=value, comma-separated)" value={draft.labels} onInput={(v) => setDraft({ ...draft, labels: v })} />
      <div class="filter-actions">
        <button type="submit">Apply</button>
        <button type="button" class="secondary" onClick={() => { setDraft(NO_FILTERS); onApply(NO_FILTERS); }}>
          Clear
        </button>
      </div>
    </form>
  );
}

/** One control plane's row; its height is fixed so live updates move nothing. */
function ControlPlaneRow({ row, now }: { row: Row; now: number }) {
  const installed = row.status.installedVersion;
  return (
    <tr data-id={row.controlPlaneId} data-name={row.name}>
      <th scope="row" data-label="Name">
        <a href={href({ page: 'detail', id: row.id })}>{row.name}</a>
      </th>
      <td data-label="Phase" class="cell-phase" data-phase={row.phase}>
        <Badge value={row.phase} />
      </td>
      <td data-label="Version">
        {row.spec.kubernetesVersion}
        {installed && installed !== row.spec.kubernetesVersion ? <span class="muted"> (runs {installed})</span> : null}
      </td>
      <td data-label="Endpoint" class="mono" title={row.endpoint ?? undefined}>
        {row.endpoint ?? <span class="muted">—</span>}
      </td>
      <td data-label="DataStore">{row.placement?.dataStore ?? <span class="muted">—</span>}</td>
      <td data-label="Age">
        <RelTime iso={row.createdAt} now={now} />
      </td>
    </tr>
  );
}

/** The table of one page. */
function ControlPlaneTable({ rows }: { rows: Row[] }) {
  const now = useNow();
  return (
    <table class="list">
      <caption class="sr-only">Control planes, oldest first, updated live</caption>
      <thead>
        <tr>
          <th scope="col">Name</th>
          <th scope="col">Phase</th>
          <th scope="col">Version</th>
          <th scope="col">Endpoint</th>
          <th scope="col">DataStore</th>
          <th scope="col">Age</th>
        </tr>
      </thead>
      <tbody>
        {rows.map((row) => (
          <ControlPlaneRow key={row.id} row={row} now={now} />
        ))}
      </tbody>
    </table>
  );
}

/** A tenant's control planes: filters, live rows and keyset paging. */
export function ListPage({ tenant, notice, created }: { tenant: string; notice: string | null; created: Row | null }) {
  usePageTitle('Control planes');
  const viewer = useViewer();
  const [filters, setFilters] = useState(NO_FILTERS);
  const [cursors, setCursors] = useState<(string | null)[]>([null]);
  const list = useLiveControlPlanes(tenant, filters, cursors[cursors.length - 1] ?? null, created);
  const pageNumber = cursors.length;
  useEffect(() => {
    if (list.rows) markRendered();
  }, [list.rows !== null]);
  const apply = (f: Filters) => {
    setFilters(f);
    setCursors([null]);
  };
  return (
    <div class="page">
      <div class="page-head">
        <h1>Control planes</h1>
        {canWrite(viewer) && (
          <a class="button" href={href({ page: 'create', tenant: viewer.tenant ? null : tenant })}>
            Create control plane
          </a>
        )}
      </div>
      <p class="subtitle">
        Tenant <strong>{tenant}</strong> · <span class={list.liveError ? 'live-off' : 'live-on'}>{list.liveError ? 'live updates paused' : 'live'}</span>
      </p>
      <div class="notice-slot" role="status">
        {notice}
      </div>
      <FilterForm value={filters} onApply={apply} />
      <ProblemBox error={list.error} />
      {list.rows === null ? (
        <Loading what="control planes" />
      ) : list.rows.length === 0 ? (
        <Empty>{filters === NO_FILTERS ? 'No control planes yet. Create one to get started.' : 'No control plane matches these filters.'}</Empty>
      ) : (
        <ControlPlaneTable rows={list.rows} />
      )}
      <nav class="pager" aria-label="Pages">
        <button type="button" class="secondary" disabled={pageNumber === 1} onClick={() => setCursors(cursors.slice(0, -1))}>
          Previous page
        </button>
        <span>Page {pageNumber}</span>
        <button type="button" class="secondary" disabled={!list.hasNextPage || !list.endCursor} onClick={() => setCursors([...cursors, list.endCursor])}>
          Next page
        </button>
      </nav>
    </div>
  );
}
