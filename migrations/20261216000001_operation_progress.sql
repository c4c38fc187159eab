-- Operations that finish when the work does (issue 20, item 3): the generation an operation asks for, the
-- stages it has reached (`[{"stage": "placed", "at": "…"}, …]`, in order), the machine-readable reason of
-- a failure, and the deadline after which an unfinished operation fails.
alter table operations
    add column generation bigint,
    add column stages jsonb not null default '[]'::jsonb,
    add column reason text,
    add column deadline_at timestamptz;

update operations o set generation = c.generation from control_planes c where c.id = o.control_plane_id;
update operations set deadline_at = created_at + interval '30 minutes';
alter table operations alter column generation set not null;
alter table operations alter column deadline_at set not null;
alter table operations add constraint operations_stages_is_array check (jsonb_typeof(stages) = 'array');

-- The open operations of a control plane (advanced on every status event), and the deadline sweep.
create index operations_open_idx on operations (control_plane_id, generation) where state in ('pending', 'running');
create index operations_deadline_idx on operations (deadline_at) where state in ('pending', 'running');
-- Keyset pagination of a tenant's operations, newest first.
create index operations_tenant_page_idx on operations (tenant_id, created_at desc, id desc);
