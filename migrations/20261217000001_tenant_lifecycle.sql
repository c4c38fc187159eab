-- Tenant lifecycle (issue 20, item 5): a tenant deleted with its control planes is `deleting` until the
-- last one's data is gone, then its row (and everything referencing it) is removed.
alter table tenants drop constraint tenants_state_check;
alter table tenants add constraint tenants_state_check check (state in ('active', 'suspended', 'deleting'));

-- Keyset pages of every list: (created_at, id) for tenants, pools and DataStores, and the audit log by id.
create index tenants_created_idx on tenants (created_at, id);
create index pools_created_idx on pools (created_at, id);
create index datastores_created_idx on datastores (created_at, id);
create index audit_log_tenant_id_idx on audit_log (tenant_id, id desc);
