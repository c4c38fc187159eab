-- Aborting a live migration (issue 21): while `aborted_at` is set the worker renders the source again,
-- and the controller unwinds the migration (thaws the source, removes the target space).
alter table migrations add column aborted_at timestamptz;
