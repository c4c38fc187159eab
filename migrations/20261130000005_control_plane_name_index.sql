-- Lead the live-name unique index with the name. With `tenant_id` first, PostgreSQL's generic plan for
-- `where tenant_id = $1 and id = $2` picks this partial index over the primary key whenever the table's
-- statistics are stale (a burst of creates before autovacuum analyzes): a scan of every control plane of
-- the tenant for each GET, PATCH or status write. Uniqueness is the same; lookups by (tenant, name) still
-- use it.
drop index control_planes_tenant_id_name_key;
create unique index control_planes_name_tenant_id_key on control_planes (name, tenant_id) where deleted_at is null;
