-- Node join tokens: the record of every kubeadm bootstrap token a tenant asked for, one row per token.
-- The token's secret half is never stored, in any form: only its public id (the `token-id` of the
-- tenant cluster's `kube-system/bootstrap-token-<id>` Secret) and what the tenant said about it.
-- A row whose token never became usable (the Secret was removed again) is revoked at once.
create table join_tokens (
    id uuid primary key,
    tenant_id uuid not null references tenants (id) on delete cascade,
    control_plane_id uuid not null references control_planes (id) on delete cascade,
    token_id text not null check (token_id ~ '^[a-z0-9]{6}$'),
    description text check (description is null or char_length(description) <= 256),
    expires_at timestamptz not null,
    created_at timestamptz not null default now(),
    created_by text not null,
    revoked_at timestamptz,
    check (expires_at > created_at)
);
-- A token id names one Secret in the tenant cluster: unique per control plane, revoked tokens included,
-- so the audit trail of an id is never ambiguous.
create unique index join_tokens_control_plane_token_key on join_tokens (control_plane_id, token_id);
-- The live tokens of a control plane, oldest first.
create index join_tokens_live_idx on join_tokens (control_plane_id, created_at) where revoked_at is null;
