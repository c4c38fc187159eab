-- Per-tenant quotas (issue 20, item 6), set by platform admins; null means the server's default
-- (`--default-quota-control-planes`, `--default-quota-tokens`).
alter table tenants
    add column quota_control_planes integer check (quota_control_planes between 0 and 100000),
    add column quota_tokens integer check (quota_tokens between 0 and 100000);
