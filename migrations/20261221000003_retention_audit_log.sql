-- no-transaction
-- The worker purges audit rows older than their retention (400 days by default) in batches.
create index concurrently if not exists audit_log_created_at_idx on audit_log (created_at);
