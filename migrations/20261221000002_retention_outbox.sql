-- no-transaction
-- The worker purges processed outbox rows older than their retention (7 days by default) in batches.
create index concurrently if not exists outbox_processed_at_idx on outbox (processed_at) where processed_at is not null;
