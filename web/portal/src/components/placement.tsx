import { humanize } from '../format';
import { Empty } from './bits';

/** The placement engine's decision JSON, as the server writes it. */
type Candidate = { data_store: string; pool: string; outcome: { scored?: number; rejected?: string } };
type Decision = { primary?: string; candidates?: Candidate[]; override_candidates?: Candidate[] };

/** A placement: its DataStore, its overrides and its decision. */
export type PlacementView = { dataStore: string; overrides: { resource: string; dataStore: string }[]; decision: unknown };

/** A candidate's outcome in words. */
function outcome(c: Candidate): string {
  if (typeof c.outcome?.scored === 'number') return `fits, score ${c.outcome.scored.toFixed(2)}`;
  return c.outcome?.rejected ? `rejected: ${humanize(c.outcome.rejected)}` : 'unknown';
}

/** The candidates table, chosen first. */
function Candidates({ caption, items, chosen }: { caption: string; items: Candidate[]; chosen: string[] }) {
  if (items.length === 0) return null;
  return (
    <table class="compact">
      <caption>{caption}</caption>
      <thead>
        <tr>
          <th scope="col">DataStore</th>
          <th scope="col">Pool</th>
          <th scope="col">Why</th>
        </tr>
      </thead>
      <tbody>
        {items.map((c) => (
          <tr key={c.data_store} class={chosen.includes(c.data_store) ? 'chosen' : undefined}>
            <th scope="row">
              {c.data_store}
              {chosen.includes(c.data_store) ? ' (chosen)' : ''}
            </th>
            <td>{c.pool}</td>
            <td>{outcome(c)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** Where a control plane lands (or would), and why: every candidate's score or the constraint it failed. */
export function PlacementDetails({ placement }: { placement: PlacementView | null }) {
  if (!placement) return <Empty>Not placed yet.</Empty>;
  const decision = (placement.decision ?? {}) as Decision;
  const chosen = [placement.dataStore, ...placement.overrides.map((o) => o.dataStore)];
  return (
    <div class="placement">
      <p>
        Primary DataStore: <strong data-testid="placement-datastore">{placement.dataStore}</strong>
      </p>
      {placement.overrides.length > 0 && (
        <ul class="plain">
          {placement.overrides.map((o) => (
            <li key={o.resource}>
              <code>{o.resource}</code> offloaded to <strong>{o.dataStore}</strong>
            </li>
          ))}
        </ul>
      )}
      <Candidates caption="Candidates for the primary" items={decision.candidates ?? []} chosen={chosen} />
      <Candidates caption="Candidates for the offloaded resources" items={decision.override_candidates ?? []} chosen={chosen} />
    </div>
  );
}
