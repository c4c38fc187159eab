-- Tenantplane's record of every tenant request. Forward-only; one logical change per file.

create table tenants (
    id uuid primary key,
    slug text not null unique check (slug ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    display_name text not null check (length(display_name) between 1 and 200),
    labels jsonb not null default '{}',
    state text not null default 'active' check (state in ('active', 'suspended')),
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);

-- Ed25519 signing keys: one set per tenant, plus platform keys (tenant_id null). Private keys are
-- AES-256-GCM encrypted with the server key; a retired key still verifies until verify_until.
create table signing_keys (
    kid text primary key,
    tenant_id uuid references tenants (id) on delete cascade,
    algorithm text not null check (algorithm = 'EdDSA'),
    public_key bytea not null,
    private_key_ciphertext bytea not null,
    private_key_nonce bytea not null,
    created_at timestamptz not null default now(),
    retired_at timestamptz,
    verify_until timestamptz
);
create index signing_keys_tenant_id_idx on signing_keys (tenant_id, created_at desc);

create table api_tokens (
    jti uuid primary key,
    tenant_id uuid references tenants (id) on delete cascade,
    role text not null check (role in ('platform-admin', 'tenant-admin', 'tenant-member', 'tenant-viewer')),
    description text not null default '',
    created_by text not null,
    created_at timestamptz not null default now(),
    expires_at timestamptz not null,
    revoked_at timestamptz,
    check ((role = 'platform-admin') = (tenant_id is null))
);
create index api_tokens_tenant_id_idx on api_tokens (tenant_id, created_at desc);

create table pools (
    id uuid primary key,
    name text not null unique check (name ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    policy text not null default 'spread' check (policy in ('spread', 'binpack', 'rendezvous', 'dedicated')),
    labels jsonb not null default '{}',
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);

-- Platform-admin managed DataStores. Credentials are Secret references, never secret values.
create table datastores (
    id uuid primary key,
    name text not null unique check (name ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    pool_id uuid references pools (id) on delete restrict,
    driver text not null check (driver in ('etcd', 'MySQL', 'PostgreSQL', 'NATS')),
    endpoints text[] not null check (cardinality(endpoints) between 1 and 32),
    secret_refs jsonb not null default '{}',
    labels jsonb not null default '{}',
    capacity_tenants integer not null check (capacity_tenants >= 0),
    capacity_bytes bigint check (capacity_bytes is null or capacity_bytes > 0),
    ca_id text,
    ready boolean not null default true,
    cordoned boolean not null default false,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);

create table control_planes (
    id uuid primary key,
    tenant_id uuid not null references tenants (id) on delete cascade,
    name text not null check (name ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    kubernetes_version text not null check (kubernetes_version ~ '^v[0-9]+\.[0-9]+\.[0-9]+$'),
    replicas integer not null check (replicas between 0 and 9),
    service_type text not null check (service_type in ('ClusterIP', 'NodePort', 'LoadBalancer')),
    port integer not null check (port between 1 and 65535),
    size_class text not null check (size_class in ('small', 'medium', 'large')),
    datastore_pool text,
    datastore_labels jsonb not null default '{}',
    datastore_name text,
    offload text not null default 'none' check (offload = 'none' or offload = 'auto' or offload like 'pool:%'),
    addons jsonb not null default '{}',
    labels jsonb not null default '{}',
    phase text not null default 'Pending',
    status jsonb not null default '{}',
    generation bigint not null default 1,
    deleted_at timestamptz,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);
-- A name is unique among a tenant's live control planes.
create unique index control_planes_tenant_id_name_key on control_planes (tenant_id, name) where deleted_at is null;
-- Keyset pagination: (created_at, id) per tenant.
create index control_planes_tenant_page_idx on control_planes (tenant_id, created_at, id);

create table operations (
    id uuid primary key,
    tenant_id uuid not null references tenants (id) on delete cascade,
    control_plane_id uuid not null references control_planes (id) on delete cascade,
    kind text not null check (kind in ('create', 'update', 'delete')),
    state text not null default 'pending' check (state in ('pending', 'running', 'succeeded', 'failed')),
    error text,
    request_id text,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);
create index operations_control_plane_idx on operations (control_plane_id, created_at desc);

-- Rows the worker applies to the cluster, claimed with FOR UPDATE SKIP LOCKED.
create table outbox (
    id bigserial primary key,
    tenant_id uuid not null references tenants (id) on delete cascade,
    control_plane_id uuid references control_planes (id) on delete cascade,
    operation_id uuid references operations (id) on delete cascade,
    kind text not null,
    payload jsonb not null default '{}',
    attempts integer not null default 0,
    next_attempt_at timestamptz not null default now(),
    processed_at timestamptz,
    last_error text,
    created_at timestamptz not null default now()
);
create index outbox_pending_idx on outbox (next_attempt_at, id) where processed_at is null;

create table audit_log (
    id bigserial primary key,
    tenant_id uuid references tenants (id) on delete cascade,
    actor text not null,
    action text not null,
    target_kind text not null,
    target_id text not null,
    request_id text,
    details jsonb not null default '{}',
    created_at timestamptz not null default now()
);
create index audit_log_tenant_idx on audit_log (tenant_id, created_at desc);

-- Idempotency-Key: the first response to a (scope, key) is replayed for the same body.
create table idempotency_keys (
    scope text not null,
    key text not null,
    request_hash bytea not null,
    response_status integer not null,
    response_body jsonb not null,
    created_at timestamptz not null default now(),
    primary key (scope, key)
);
