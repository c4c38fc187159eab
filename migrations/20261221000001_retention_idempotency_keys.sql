-- no-transaction
-- The worker purges Idempotency-Key records older than their retention (24 h by default) in batches.
create index concurrently if not exists idempotency_keys_created_at_idx on idempotency_keys (created_at);
