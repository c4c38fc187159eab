-- Drains and rebalances (issue 21): a platform operation (no tenant) whose children are the control-plane
-- operations it starts: a `migrate` per control plane that moves its primary, an `update` per control plane
-- whose overrides are re-placed. The worker starts pending children, at most `concurrency` running at
-- once, under the parent's row lock, and ends the parent when every child has ended.
create table parent_operations (
    id uuid primary key,
    kind text not null check (kind in ('drain', 'rebalance')),
    -- The drained DataStore's or the rebalanced pool's name (kept after it is deleted).
    subject text not null,
    concurrency integer not null check (concurrency between 1 and 10),
    overrides_policy text not null default 'drop' check (overrides_policy = 'drop'),
    state text not null default 'running' check (state in ('running', 'succeeded', 'failed')),
    reason text,
    error text,
    -- Who asked (`role:subject(jti)`): the children's audit entries name them too.
    actor text not null,
    request_id text,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    finished_at timestamptz
);
-- One open drain per DataStore, one open rebalance per pool.
create unique index parent_operations_one_open_idx on parent_operations (kind, subject) where state = 'running';

-- The children in the order they start. A child ends `failed` without an operation when the plan placed
-- nothing or its start was refused (`reason`, `error` say why).
create table parent_operation_children (
    parent_id uuid not null references parent_operations (id) on delete cascade,
    position integer not null check (position >= 0),
    tenant_id uuid not null references tenants (id) on delete cascade,
    control_plane_id uuid not null references control_planes (id) on delete cascade,
    usage text not null check (usage in ('primary', 'overrides')),
    -- The offloaded resources that move (usage `overrides`).
    resources text[] not null default '{}',
    source text not null,
    -- The DataStore the plan chose; null when nothing fits.
    target text,
    state text not null default 'pending' check (state in ('pending', 'running', 'succeeded', 'failed')),
    operation_id uuid references operations (id) on delete set null,
    reason text,
    error text,
    started_at timestamptz,
    finished_at timestamptz,
    primary key (parent_id, position)
);
create index parent_operation_children_operation_idx on parent_operation_children (operation_id);
create index parent_operation_children_control_plane_idx on parent_operation_children (control_plane_id);
