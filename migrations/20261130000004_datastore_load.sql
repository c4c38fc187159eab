-- The number of control planes that use a DataStore (as primary or override), kept on the row itself and
-- changed only under that row's lock by the placement transaction: reading loads stays O(DataStores)
-- instead of counting every placement inside the critical section.
alter table datastores add column load_tenants integer not null default 0 check (load_tenants >= 0);
update datastores d set load_tenants = (
    select count(*) from (select control_plane_id from placements where datastore_id = d.id
                          union select control_plane_id from placement_overrides where datastore_id = d.id) u
);
