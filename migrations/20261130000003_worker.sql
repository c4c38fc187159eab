-- The sync worker claims, per control plane, only the oldest unprocessed outbox row, so one control plane's
-- rows apply in order and never on two workers at once. This index serves that "is there an older row?" check.
create index outbox_pending_control_plane_idx on outbox (control_plane_id, id) where processed_at is null;

-- Counting applies per outbox row (duplicate detection) reads the worker's audit rows by action.
create index audit_log_action_idx on audit_log (action, created_at);
