import { useState } from 'preact/hooks';
import { request } from '../api/client';
import { useAction } from '../components/action';
import { Badge, Empty, Loading, LoadBar, ProblemBox, RelTime, Section } from '../components/bits';
import { TextField } from '../components/field';
import { SetTenantQuotasDocument, TenantsDocument, type TenantsQuery } from '../graphql/generated';
import { useNow, usePageTitle, useQuery } from '../hooks';
import { href } from '../router';

type Tenant = TenantsQuery['tenants']['nodes'][number];
type Usage = Tenant['quotas']['controlPlanes'];

/** A quota's use as a bar, and whether it is the server's default. */
function Quota({ usage, unit }: { usage: Usage; unit: string }) {
  return (
    <span class="quota">
      <LoadBar used={usage.used} capacity={usage.limit} unit={unit} />
      {usage.default && <span class="muted"> default</span>}
    </span>
  );
}

/** Sets a tenant's quotas; an empty field restores the server's default. */
function QuotaForm({ tenant, onSaved }: { tenant: Tenant; onSaved: () => void }) {
  const q = tenant.quotas;
  const [cps, setCps] = useState(q.controlPlanes.default ? '' : String(q.controlPlanes.limit));
  const [tokens, setTokens] = useState(q.tokens.default ? '' : String(q.tokens.limit));
  const [state, run] = useAction();
  const number = (v: string) => (v.trim() === '' ? null : Number(v));
  const submit = async (e: Event) => {
    e.preventDefault();
    const input = { tenant: tenant.slug, controlPlanes: number(cps), tokens: number(tokens) };
    if (await run(async () => (await request(SetTenantQuotasDocument, { input })).setTenantQuotas, `Quotas of ${tenant.slug} saved.`)) onSaved();
  };
  return (
    <Section title={`Quotas of ${tenant.slug}`} id="quota-title">
      <form class="inline-form" onSubmit={submit} aria-label={`Quotas of ${tenant.slug}`}>
        <TextField id="quota-cps" label="Control planes" value={cps} inputMode="numeric" onInput={setCps} error={state.fields.controlPlanes} hint="0 to 100000; empty for the default." />
        <TextField id="quota-tokens" label="Tokens" value={tokens} inputMode="numeric" onInput={setTokens} error={state.fields.tokens} hint="0 to 100000; empty for the default." />
        <button type="submit" disabled={state.busy}>Save quotas</button>
        <ProblemBox error={state.problem} />
        <p class="done" role="status">{state.done ?? ''}</p>
      </form>
    </Section>
  );
}

/** The tenants table. */
function TenantTable({ tenants, now, onEdit }: { tenants: Tenant[]; now: number; onEdit: (slug: string) => void }) {
  if (tenants.length === 0) return <Empty>No tenants.</Empty>;
  return (
    <table class="list auto">
      <thead>
        <tr><th scope="col">Tenant</th><th scope="col">State</th><th scope="col">Control planes</th><th scope="col">Tokens</th><th scope="col">Age</th><th scope="col">Actions</th></tr>
      </thead>
      <tbody>
        {tenants.map((t) => (
          <tr key={t.id}>
            <th scope="row" data-label="Tenant">
              <a href={href({ page: 'list', tenant: t.slug })}>{t.slug}</a> <span class="muted">{t.displayName}</span>
            </th>
            <td data-label="State"><Badge value={t.state} /></td>
            <td data-label="Control planes"><Quota usage={t.quotas.controlPlanes} unit="control planes" /></td>
            <td data-label="Tokens"><Quota usage={t.quotas.tokens} unit="tokens" /></td>
            <td data-label="Age"><RelTime iso={t.createdAt} now={now} /></td>
            <td data-label="Actions"><div class="actions">
              <button type="button" class="secondary small" onClick={() => onEdit(t.slug)} aria-label={`Edit quotas of ${t.slug}`}>Quotas</button>
            </div></td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** Tenants and their quotas, for platform admins. */
export function TenantsPage() {
  usePageTitle('Tenants');
  const now = useNow();
  const [cursors, setCursors] = useState<(string | null)[]>([null]);
  const query = useQuery(TenantsDocument, { first: 50, after: cursors[cursors.length - 1] ?? null });
  const [editing, setEditing] = useState<string | null>(null);
  const tenants = query.data?.tenants.nodes ?? null;
  const edited = tenants?.find((t) => t.slug === editing);
  return (
    <div class="page">
      <h1>Tenants</h1>
      <ProblemBox error={query.error} />
      <Section title="Tenants and quotas" id="tenants-title">
        {tenants ? <TenantTable tenants={tenants} now={now} onEdit={setEditing} /> : <Loading what="tenants" />}
        <nav class="pager" aria-label="Pages">
          <button type="button" class="secondary" disabled={cursors.length === 1} onClick={() => setCursors(cursors.slice(0, -1))}>Previous page</button>
          <span>Page {cursors.length}</span>
          <button type="button" class="secondary" disabled={!query.data?.tenants.pageInfo.hasNextPage}
            onClick={() => setCursors([...cursors, query.data?.tenants.pageInfo.endCursor ?? null])}>Next page</button>
        </nav>
      </Section>
      {edited && <QuotaForm key={edited.slug} tenant={edited} onSaved={query.reload} />}
    </div>
  );
}
