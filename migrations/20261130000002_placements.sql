-- Where each control plane's state lives, decided by the placement engine when the control plane is
-- created and reserved in the same transaction. One row per control plane; its overrides (the
-- DataStores of offloaded resources such as events and leases) are in placement_overrides.
create table placements (
    control_plane_id uuid primary key references control_planes (id) on delete cascade,
    tenant_id uuid not null references tenants (id) on delete cascade,
    datastore_id uuid not null references datastores (id) on delete restrict,
    -- Denormalized for the NATS exclusivity index below.
    driver text not null check (driver in ('etcd', 'MySQL', 'PostgreSQL', 'NATS')),
    decision jsonb not null default '{}',
    created_at timestamptz not null default now()
);
create index placements_datastore_idx on placements (datastore_id);
-- A NATS DataStore never holds a second tenant, whatever the code does.
create unique index placements_nats_exclusive on placements (datastore_id) where driver = 'NATS';

-- Override DataStores a control plane uses (for load accounting and cleanup).
create table placement_overrides (
    control_plane_id uuid not null references control_planes (id) on delete cascade,
    resource text not null,
    datastore_id uuid not null references datastores (id) on delete restrict,
    primary key (control_plane_id, resource)
);
create index placement_overrides_datastore_idx on placement_overrides (datastore_id);
