-- Live migration between DataStores (issue 21): the `migrate` operation and the DataStores a migration
-- reserves.
alter table operations drop constraint operations_kind_check;
alter table operations add constraint operations_kind_check check (kind in ('create', 'update', 'delete', 'migrate'));

-- A migration of a control plane's primary DataStore: what it reserved at its start (the target, and
-- the new override DataStores), released when it ends without switching.
create table migrations (
    operation_id uuid primary key references operations (id) on delete cascade,
    tenant_id uuid not null references tenants (id) on delete cascade,
    control_plane_id uuid not null references control_planes (id) on delete cascade,
    -- A DataStore is deleted only without open migrations (the service checks); its closed ones go with it.
    source_id uuid not null references datastores (id) on delete cascade,
    target_id uuid not null references datastores (id) on delete cascade,
    overrides_policy text not null check (overrides_policy in ('drop', 'move')),
    -- The overrides rendered with the target: `[{"resource": …, "datastoreId": …}]`.
    overrides jsonb not null default '[]'::jsonb check (jsonb_typeof(overrides) = 'array'),
    -- DataStores whose load this migration raised.
    reserved uuid[] not null,
    open boolean not null default true,
    created_at timestamptz not null default now(),
    finished_at timestamptz
);
create unique index migrations_one_open_idx on migrations (control_plane_id) where open;
