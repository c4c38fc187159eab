-- Cluster credentials (issue 23): the ES256 keys that sign the short-lived JWTs tenant kube-apiservers
-- accept. kube-apiserver verifies RS*, ES* and PS* signatures only, not the EdDSA of API tokens, so these
-- keys are their own set, published in the credential issuer's JWKS. Private keys are sealed with the
-- server key, as signing_keys' are.
create table credential_keys (
    kid text primary key,
    -- SEC1 uncompressed P-256 point (0x04 || x || y).
    public_key bytea not null,
    private_key_ciphertext bytea not null,
    private_key_nonce bytea not null,
    created_at timestamptz not null default now(),
    retired_at timestamptz
);
create unique index credential_keys_one_active_idx on credential_keys ((true)) where retired_at is null;

-- A tenant's own JWT authenticators (identity providers) of a control plane, rendered after
-- Tenantplane's issuer into its AuthenticationConfiguration. `spec` holds the apiserver's JWTAuthenticator
-- fields as accepted; the issuer URL is unique per control plane.
create table authenticators (
    id uuid primary key,
    tenant_id uuid not null references tenants (id) on delete cascade,
    control_plane_id uuid not null references control_planes (id) on delete cascade,
    issuer_url text not null,
    spec jsonb not null,
    created_by text not null,
    created_at timestamptz not null default now(),
    unique (control_plane_id, issuer_url)
);
create index authenticators_control_plane_idx on authenticators (control_plane_id, created_at, id);
create index authenticators_tenant_id_idx on authenticators (tenant_id);
