//! etcd to etcd: [`EtcdMover`] moves the keys under `/<schema>/` of a source etcd to a target etcd
//! with the DataStores' root connections, while the tenant's kube-apiserver keeps serving from the
//! source until the freeze.
//!
//! **Copy.** The source prefix is read at one revision R ([`Checkpoint::snapshot_revision`]) in pages
//! after [`Checkpoint::cursor`] (the last copied key, percent-encoded), each written to the target in
//! transactions of at most `batch_keys` operations and `batch_bytes` bytes (below etcd's default
//! `--max-txn-ops` 128 and `--max-request-bytes` 1.5 MiB). Target keys in a page's key span that the
//! source lacks are deleted, so a copy restarted at a new R converges. A compacted R restarts the copy
//! at the source's current revision. A key with a lease gets a target lease granted with the source
//! lease's remaining TTL (one per source lease, cached in memory); a key whose lease expired is not
//! copied (and deleted on the target).
//!
//! **Catch-up.** A watch on the source prefix from [`Checkpoint::applied_through`]` + 1` applies puts
//! and deletes in order. `applied_through` advances to the last applied event's revision, and to the
//! revision of each progress notification (requested with `WatchProgressRequest`; etcd sends it only
//! once every earlier event is delivered, and drops a request while the watch still replays history,
//! so an unanswered one is repeated every 100 ms), so it advances without tenant events too; without
//! the repeat, the final catch-up of every freeze waited out its whole 2 s step. The lag is in
//! source revisions: the source's current revision minus `applied_through` (an upper bound of the
//! tenant's pending changes, since other tenants' writes count too; 0 right after a progress
//! notification). A compacted start revision resets the checkpoint to a fresh copy, which the next
//! [`Mover::catch_up_step`] (or [`Mover::finish_step`]) calls run page by page; until it is done, the
//! lag is the source's whole revision.
//!
//! **Freeze.** The tenant role's READWRITE permission on its range is replaced by READ (one
//! `RoleGrantPermission` on the same range changes the permission's type in place). etcd checks the
//! permission on every request, so the tenant's existing connections get `permission denied` on their
//! next write; reads keep working. The tenant has no etcd admin rights and cannot lift it; note that
//! [`crate::Driver::provision`] of the source restores READWRITE, so the source must not be
//! re-provisioned while frozen.
//!
//! **Safe to serve: resourceVersions.** kube-apiserver uses etcd's `mod_revision` as an object's
//! resourceVersion and the store revision as a list's; a client may hold any source revision. Two rules
//! make a target safe:
//! - (a) every tenant key's target `mod_revision` is greater than the source revision its value was
//!   read at (before each write, the target's revision is raised to at least the highest source
//!   revision in the batch); [`Mover::finish_step`] then re-puts (`ignore_value`, `ignore_lease`) every
//!   tenant key whose target `mod_revision` is not above Rf, the source revision through which
//!   everything is applied after the freeze. Most of that work happens before the freeze: once the
//!   lag is under `pre_touch_lag`, [`Mover::catch_up_step`] raises the target above a projected Rf
//!   (the source's revision then plus the switch margin below) and re-puts the keys at or below it,
//!   reporting a lag above `pre_touch_lag` until it is done, so the freeze re-puts (almost) nothing. So every resourceVersion a client holds for an object is
//!   smaller than the object's target `mod_revision`: an update or delete with it gets 409 Conflict,
//!   never a lost update;
//! - (b) the target's revision ends above the source's current revision plus a switch margin (the
//!   source's revision rate as measured by this mover times `switch_window`, at least
//!   `revision_margin`): other tenants keep raising a shared source's revision while the old
//!   apiservers still answer reads during the switch. The new apiservers' watch caches start above
//!   every revision a client holds, so a watch from an old resourceVersion answers 410 Gone and the
//!   informer relists instead of silently missing events.
//!
//! The target's revision is raised by empty puts of [`REVISION_FLOOR_KEY`] (outside every tenant's
//! range), `bump_concurrency` in flight; a mover refuses to write more than `max_revision_bump` of
//! them in all ([`DatastoreError::InvalidConfig`] naming the gap). Each is one revision of history on
//! the target until compaction.
//!
//! **Compaction.** [`Mover::finish_step`] ends by compacting the target to its current revision. Below
//! it the target's tenant range holds partial copies, and a continue token or an exact-resourceVersion
//! list from before the switch names a source revision; etcd would answer it from the target's
//! history at that number, which is another state. Compacted, etcd refuses it and kube-apiserver
//! answers 410 Gone ("continue parameter is too old", "too old resource version"), which clients
//! handle by relisting. Other tenants on the target lose the history below that revision a few
//! minutes earlier than their own apiservers' compaction (every 5 minutes) would remove it; their
//! running watches are current and unaffected, and any continue token or exact read may get 410 after
//! a compaction by the API's contract.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use etcd_client::{
    Client, EventType, GetOptions, KeyValue, Permission, PermissionType, PutOptions, ResponseHeader, Txn,
    TxnOp, WatchOptions, WatchResponse,
};
use futures_util::{StreamExt as _, TryStreamExt as _, stream};

use super::{Checkpoint, Mover, Step, Verification};
use crate::{
    DatastoreError, TenantSpace,
    etcd::{EtcdDriver, prefix, prefix_end, resending_stale_auth, role_name},
    k8s::crd,
};

/// How long a catch-up waits for a watch message before asking for progress again.
const PROGRESS_RETRY: Duration = Duration::from_millis(100);

/// The key whose empty puts raise a target's revision: outside every tenant's range (no leading `/`).
pub const REVISION_FLOOR_KEY: &str = "tenantplane.io/revision-floor";

/// Largest gRPC message the mover decodes (a page or a watch response of large values).
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// Keys in the first page, before the mover knows the values' size.
const FIRST_PAGE_KEYS: usize = 100;

/// Tunables of an [`EtcdMover`].
#[derive(Debug, Clone)]
pub struct EtcdMoveOptions {
    /// Most keys read per copy page.
    pub page_keys: usize,
    /// Most bytes (keys and values) written per copy page (at least one key).
    pub page_bytes: usize,
    /// Most operations per target transaction (etcd's `--max-txn-ops` defaults to 128).
    pub batch_keys: usize,
    /// Most bytes per target transaction (etcd's `--max-request-bytes` defaults to 1.5 MiB).
    pub batch_bytes: usize,
    /// Longest time one catch-up step watches.
    pub catch_up_duration: Duration,
    /// Most events one catch-up step applies.
    pub catch_up_events: usize,
    /// Most revision-floor puts one mover writes in all; more is refused.
    pub max_revision_bump: u64,
    /// How far above the needed revision a bump goes, so that it is not needed again at once.
    pub revision_margin: i64,
    /// How long the switch may take: the target ends this much of the source's revision growth ahead.
    pub switch_window: Duration,
    /// Revision-floor puts in flight.
    pub bump_concurrency: usize,
    /// The lag under which catching up also raises every tenant key above the projected final
    /// revision (so the freeze has few keys left to re-put); the lag reported stays above it until done.
    pub pre_touch_lag: u64,
}

impl Default for EtcdMoveOptions {
    fn default() -> Self {
        Self {
            page_keys: 500,
            page_bytes: 4 * 1024 * 1024,
            batch_keys: 128,
            batch_bytes: 1024 * 1024,
            catch_up_duration: Duration::from_secs(2),
            catch_up_events: 10_000,
            max_revision_bump: 5_000_000,
            revision_margin: 1_000,
            switch_window: Duration::from_secs(120),
            bump_concurrency: 64,
            pre_touch_lag: 1_000,
        }
    }
}

/// Moves one tenant's prefix from a source etcd to a target etcd (see the module docs).
pub struct EtcdMover {
    source: Arc<EtcdDriver>,
    target: Arc<EtcdDriver>,
    source_prefix: Vec<u8>,
    target_prefix: Vec<u8>,
    role: String,
    options: EtcdMoveOptions,
    /// Source lease → target lease; `None` for an expired source lease.
    leases: Mutex<HashMap<i64, Option<i64>>>,
    /// A revision the target is known to have reached.
    target_revision: AtomicI64,
    /// Revision-floor puts written so far.
    bumped: AtomicU64,
    /// Keys to read in the next copy page.
    page_limit: AtomicUsize,
    /// The first source revision this mover saw, and when.
    first_seen: Mutex<Option<(Instant, i64)>>,
    /// The revision catching up raises every tenant key above, once chosen (see [`EtcdMover::pre_touch`]).
    pre_floor: Mutex<Option<i64>>,
}

impl std::fmt::Debug for EtcdMover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdMover")
            .field("source", &self.source.endpoint_label())
            .field("target", &self.target.endpoint_label())
            .field("source_prefix", &String::from_utf8_lossy(&self.source_prefix))
            .field("target_prefix", &String::from_utf8_lossy(&self.target_prefix))
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// One write on the target.
enum Op {
    /// Put `value` at `key`, attached to target lease `lease` (0: none).
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        lease: i64,
    },
    /// Delete `key`.
    Delete { key: Vec<u8> },
    /// Put `key` again with its current value and lease (a new `mod_revision`).
    Touch { key: Vec<u8> },
}

impl Op {
    fn key(&self) -> &[u8] {
        match self {
            Op::Put { key, .. } | Op::Delete { key } | Op::Touch { key } => key,
        }
    }

    fn size(&self) -> usize {
        match self {
            Op::Put { key, value, .. } => key.len() + value.len() + 16,
            Op::Delete { key } | Op::Touch { key } => key.len() + 16,
        }
    }

    fn into_txn_op(self) -> TxnOp {
        match self {
            Op::Put { key, value, lease } => {
                let options = (lease != 0).then(|| PutOptions::new().with_lease(lease));
                TxnOp::put(key, value, options)
            }
            Op::Delete { key } => TxnOp::delete(key, None),
            Op::Touch { key } => TxnOp::put(
                key,
                Vec::new(),
                Some(PutOptions::new().with_ignore_value().with_ignore_lease()),
            ),
        }
    }
}

impl EtcdMover {
    /// A mover from `source_space` on `source` to `target_space` on `target` (provisioned already),
    /// both drivers connecting as root.
    pub fn new(
        source: impl Into<Arc<EtcdDriver>>,
        target: impl Into<Arc<EtcdDriver>>,
        source_space: &TenantSpace,
        target_space: &TenantSpace,
        options: EtcdMoveOptions,
    ) -> Self {
        let first = options.page_keys.clamp(1, FIRST_PAGE_KEYS);
        Self {
            source: source.into(),
            target: target.into(),
            source_prefix: prefix(source_space.schema()).into_bytes(),
            target_prefix: prefix(target_space.schema()).into_bytes(),
            role: role_name(source_space).to_string(),
            options,
            leases: Mutex::new(HashMap::new()),
            target_revision: AtomicI64::new(0),
            bumped: AtomicU64::new(0),
            page_limit: AtomicUsize::new(first),
            first_seen: Mutex::new(None),
            pre_floor: Mutex::new(None),
        }
    }

    /// Revision-floor puts this mover has written.
    pub fn revisions_bumped(&self) -> u64 {
        self.bumped.load(Ordering::Relaxed)
    }

    /// The target key of a source key (same path under the target prefix).
    fn target_key(&self, source_key: &[u8]) -> Vec<u8> {
        let rest = source_key
            .strip_prefix(self.source_prefix.as_slice())
            .unwrap_or(source_key);
        [self.target_prefix.as_slice(), rest].concat()
    }

    /// The target end of a source span: the target key of `end`, or the end of the target prefix.
    fn target_end(&self, end: Option<&[u8]>) -> Vec<u8> {
        match end {
            Some(end) => self.target_key(end),
            None => prefix_end(&self.target_prefix),
        }
    }

    /// The source's current revision (a count-only read of one key).
    async fn source_revision(&self, client: &mut Client) -> Result<i64, DatastoreError> {
        let revision = current_revision(&self.source, client, "read the source revision").await?;
        let mut first = self.first_seen.lock().unwrap_or_else(|e| e.into_inner());
        first.get_or_insert((Instant::now(), revision));
        Ok(revision)
    }

    fn note_target(&self, header: Option<&ResponseHeader>) {
        if let Some(header) = header {
            self.target_revision
                .fetch_max(header.revision(), Ordering::Relaxed);
        }
    }

    /// Makes the target's revision at least `floor`, bumping to `floor + headroom` when it is below.
    async fn ensure_target_at_least(
        &self,
        client: &mut Client,
        floor: i64,
        headroom: i64,
    ) -> Result<(), DatastoreError> {
        if self.target_revision.load(Ordering::Relaxed) >= floor {
            return Ok(());
        }
        let current = current_revision(&self.target, client, "read the target revision").await?;
        self.target_revision.fetch_max(current, Ordering::Relaxed);
        if current >= floor {
            return Ok(());
        }
        self.bump(client, current, floor + headroom).await
    }

    /// Raises the target's revision from `current` to at least `to` with empty revision-floor puts.
    async fn bump(&self, client: &Client, mut current: i64, to: i64) -> Result<(), DatastoreError> {
        let gap = u64::try_from(to - current).unwrap_or(0);
        let total = self.bumped.load(Ordering::Relaxed) + gap;
        let cap = self.options.max_revision_bump;
        if total > cap {
            return Err(DatastoreError::InvalidConfig {
                driver: crd::Driver::Etcd,
                message: format!(
                    "the target etcd at {} is at revision {current}, {gap} revisions below the {to} that \
                     the tenant's resourceVersions need; closing the gap takes {total} revision-floor \
                     writes in all, more than the cap of {cap}",
                    self.target.endpoint_label()
                ),
            });
        }
        while current < to {
            let count = to - current;
            let kv = client.kv_client();
            let reached = stream::iter(0..count)
                .map(|_| {
                    let mut kv = kv.clone();
                    async move { kv.put(REVISION_FLOOR_KEY, Vec::new(), None).await }
                })
                .buffer_unordered(self.options.bump_concurrency.max(1))
                .map_err(|e| self.target.map("raise the target revision", e))
                .try_fold(current, |high, put| async move {
                    Ok(high.max(put.header().map_or(0, ResponseHeader::revision)))
                })
                .await?;
            self.bumped
                .fetch_add(u64::try_from(count).unwrap_or(0), Ordering::Relaxed);
            current = reached;
        }
        self.target_revision.fetch_max(current, Ordering::Relaxed);
        Ok(())
    }

    /// Writes `ops` in order to the target, in transactions within the batch limits and without a key
    /// twice in one transaction (etcd refuses that).
    async fn write(&self, client: &mut Client, ops: Vec<Op>) -> Result<(), DatastoreError> {
        let mut batch: Vec<TxnOp> = Vec::new();
        let mut keys: HashSet<Vec<u8>> = HashSet::new();
        let mut bytes = 0;
        for op in ops {
            let full =
                batch.len() >= self.options.batch_keys.max(1) || bytes + op.size() > self.options.batch_bytes;
            if !batch.is_empty() && (full || keys.contains(op.key())) {
                self.commit(client, std::mem::take(&mut batch)).await?;
                keys.clear();
                bytes = 0;
            }
            bytes += op.size();
            keys.insert(op.key().to_vec());
            batch.push(op.into_txn_op());
        }
        if !batch.is_empty() {
            self.commit(client, batch).await?;
        }
        Ok(())
    }

    async fn commit(&self, client: &mut Client, ops: Vec<TxnOp>) -> Result<(), DatastoreError> {
        let response = client
            .txn(Txn::new().and_then(ops))
            .await
            .map_err(|e| self.target.map("write a batch of tenant keys", e))?;
        self.note_target(response.header());
        Ok(())
    }

    /// The target lease for `source_lease` (0: none), granted with the source lease's remaining TTL;
    /// `None` when the source lease has expired.
    async fn target_lease(
        &self,
        source: &mut Client,
        target: &mut Client,
        source_lease: i64,
    ) -> Result<Option<i64>, DatastoreError> {
        if source_lease == 0 {
            return Ok(Some(0));
        }
        if let Some(known) = self.cached_lease(source_lease) {
            return Ok(known);
        }
        let ttl = match source.lease_time_to_live(source_lease, None).await {
            Ok(response) => response.ttl(),
            Err(e) if e.to_string().contains("lease not found") => -1,
            Err(e) => return Err(self.source.map("read a lease's remaining time to live", e)),
        };
        let mapped = if ttl > 0 {
            let granted = target
                .lease_grant(ttl, None)
                .await
                .map_err(|e| self.target.map("grant a lease", e))?;
            Some(granted.id())
        } else {
            None
        };
        self.leases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(source_lease, mapped);
        Ok(mapped)
    }

    fn cached_lease(&self, source_lease: i64) -> Option<Option<i64>> {
        let leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        leases.get(&source_lease).copied()
    }

    /// The target write of a source key's current value: a put, or a delete when its lease expired.
    async fn op_for(
        &self,
        source: &mut Client,
        target: &mut Client,
        kv: &KeyValue,
    ) -> Result<Op, DatastoreError> {
        let key = self.target_key(kv.key());
        Ok(match self.target_lease(source, target, kv.lease()).await? {
            Some(lease) => Op::Put {
                key,
                value: kv.value().to_vec(),
                lease,
            },
            None => Op::Delete { key },
        })
    }
}

/// A driver's current revision: the header of a count-only read of [`REVISION_FLOOR_KEY`].
async fn current_revision(
    driver: &EtcdDriver,
    client: &mut Client,
    operation: &'static str,
) -> Result<i64, DatastoreError> {
    let response = client
        .get(REVISION_FLOOR_KEY, Some(GetOptions::new().with_count_only()))
        .await
        .map_err(|e| driver.map(operation, e))?;
    Ok(response.header().map_or(0, ResponseHeader::revision))
}

/// Whether etcd refused a read or watch because its revision is compacted.
fn is_compacted(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status)
        if status.message().contains("required revision has been compacted"))
}

/// How many of the entries of these sizes fit in `bytes`, at least one.
fn fitting(sizes: impl IntoIterator<Item = usize>, bytes: usize) -> usize {
    let mut total = 0;
    let mut count = 0;
    for size in sizes {
        total += size;
        if count > 0 && total > bytes {
            break;
        }
        count += 1;
    }
    count
}

/// The key right after `key` in etcd's order.
fn successor(key: &[u8]) -> Vec<u8> {
    let mut next = key.to_vec();
    next.push(0);
    next
}

/// Percent-encodes a key for [`Checkpoint::cursor`]: printable ASCII but `%` stays, the rest is `%XX`.
pub fn encode_key(key: &[u8]) -> String {
    let mut out = String::with_capacity(key.len());
    for &b in key {
        if b.is_ascii_graphic() && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes [`encode_key`]; `None` for text it did not write.
pub fn decode_key(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

// ---------------------------------------------------------------------------------------------- copy

impl EtcdMover {
    /// Starts (or restarts) the copy at the source's current revision, with the target above it.
    async fn start_copy(
        &self,
        source: &mut Client,
        target: &mut Client,
        checkpoint: &mut Checkpoint,
    ) -> Result<(), DatastoreError> {
        let revision = self.source_revision(source).await?;
        self.ensure_target_at_least(target, revision + self.options.revision_margin, 0)
            .await?;
        checkpoint.snapshot_revision = revision;
        checkpoint.cursor = None;
        checkpoint.copied = 0;
        checkpoint.applied_through = 0;
        Ok(())
    }

    /// Where the next page starts: after the cursor, or at the prefix.
    fn page_start(&self, checkpoint: &Checkpoint) -> Result<Vec<u8>, DatastoreError> {
        match &checkpoint.cursor {
            None => Ok(self.source_prefix.clone()),
            Some(cursor) => decode_key(cursor)
                .filter(|key| key.starts_with(&self.source_prefix))
                .map(|key| successor(&key))
                .ok_or_else(|| DatastoreError::InvalidConfig {
                    driver: crd::Driver::Etcd,
                    message: "the migration checkpoint's cursor is not a key of the tenant's prefix".into(),
                }),
        }
    }

    /// One copy page (see [`Mover::copy_step`]).
    async fn copy_page(&self, checkpoint: &mut Checkpoint) -> Result<Step, DatastoreError> {
        if checkpoint.applied_through > 0 {
            return Ok(Step::Done);
        }
        let mut source = self.source.client().await?;
        let mut target = self.target.client().await?;
        if checkpoint.snapshot_revision == 0 {
            self.start_copy(&mut source, &mut target, checkpoint).await?;
        }
        let start = self.page_start(checkpoint)?;
        let limit = self.page_limit.load(Ordering::Relaxed).max(1);
        let options = GetOptions::new()
            .with_range(prefix_end(&self.source_prefix))
            .with_revision(checkpoint.snapshot_revision)
            .with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
        let mut kv = source.kv_client().max_decoding_message_size(MAX_MESSAGE_BYTES);
        let response = match kv.get(start.clone(), Some(options)).await {
            Err(e) if is_compacted(&e) => {
                self.start_copy(&mut source, &mut target, checkpoint).await?;
                return Ok(Step::More);
            }
            Err(e) => return Err(self.source.map("read a page of the tenant's keys", e)),
            Ok(response) => response,
        };
        let kvs = response.kvs();
        let sizes = kvs.iter().map(|kv| kv.key().len() + kv.value().len());
        let taken = fitting(sizes, self.options.page_bytes);
        let page = &kvs[..taken];
        self.adapt_page_limit(page);
        let last = taken == kvs.len() && !response.more();
        let end = (!last).then(|| successor(page[taken - 1].key()));
        let mut ops = Vec::with_capacity(page.len());
        for kv in page {
            ops.push(self.op_for(&mut source, &mut target, kv).await?);
        }
        let stale = self.stale_keys(&mut target, &start, end.as_deref(), &ops).await?;
        ops.extend(stale.into_iter().map(|key| Op::Delete { key }));
        self.ensure_target_at_least(
            &mut target,
            checkpoint.snapshot_revision,
            self.options.revision_margin,
        )
        .await?;
        self.write(&mut target, ops).await?;
        checkpoint.copied += taken as u64;
        if last {
            checkpoint.cursor = None;
            checkpoint.applied_through = checkpoint.snapshot_revision;
            return Ok(Step::Done);
        }
        checkpoint.cursor = Some(encode_key(page[taken - 1].key()));
        Ok(Step::More)
    }

    /// Sizes the next page so that it holds about `page_bytes`.
    fn adapt_page_limit(&self, page: &[KeyValue]) {
        if page.is_empty() {
            return;
        }
        let bytes: usize = page.iter().map(|kv| kv.key().len() + kv.value().len()).sum();
        let per_key = (bytes / page.len()).max(1);
        let limit = (self.options.page_bytes / per_key).clamp(1, self.options.page_keys.max(1));
        self.page_limit.store(limit, Ordering::Relaxed);
    }

    /// Target keys in the source span `[start, end)` that the page does not put.
    async fn stale_keys(
        &self,
        target: &mut Client,
        start: &[u8],
        end: Option<&[u8]>,
        ops: &[Op],
    ) -> Result<Vec<Vec<u8>>, DatastoreError> {
        let options = GetOptions::new()
            .with_range(self.target_end(end))
            .with_keys_only();
        let response = target
            .get(self.target_key(start), Some(options))
            .await
            .map_err(|e| self.target.map("list the target keys of a page", e))?;
        let put: HashSet<&[u8]> = ops
            .iter()
            .filter(|op| matches!(op, Op::Put { .. }))
            .map(Op::key)
            .collect();
        Ok(response
            .kvs()
            .iter()
            .filter(|kv| !put.contains(kv.key()))
            .map(|kv| kv.key().to_vec())
            .collect())
    }
}

// ------------------------------------------------------------------------------------------ catch-up

impl EtcdMover {
    /// Watches the source from `applied_through + 1` and applies what comes, for at most the step's
    /// time and events, or until a progress notification at or above `until` (any, without `until`).
    /// Returns the lag in source revisions.
    async fn catch_up(&self, checkpoint: &mut Checkpoint, until: Option<i64>) -> Result<u64, DatastoreError> {
        let mut source = self.source.client().await?;
        if checkpoint.applied_through == 0 {
            self.copy_page(checkpoint).await?;
            return self.lag(&mut source, checkpoint).await;
        }
        let mut target = self.target.client().await?;
        let options = WatchOptions::new()
            .with_range(prefix_end(&self.source_prefix))
            .with_start_revision(checkpoint.applied_through + 1)
            .with_progress_notify();
        let mut watch = source
            .watch_client()
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .watch(self.source_prefix.clone(), Some(options))
            .await
            .map_err(|e| self.source.map("watch the tenant's keys", e))?;
        let progress = |e| self.source.map("request watch progress", e);
        watch.request_progress().await.map_err(progress)?;
        let deadline = Instant::now() + self.options.catch_up_duration;
        let mut applied = 0;
        while applied < self.options.catch_up_events {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            // etcd drops a progress request while the watch still replays history (it answers only
            // when every watcher of the stream is synced), so an unanswered request is repeated.
            let Ok(message) = tokio::time::timeout(left.min(PROGRESS_RETRY), watch.message()).await else {
                watch.request_progress().await.map_err(progress)?;
                continue;
            };
            let response = message
                .map_err(|e| self.source.map("watch the tenant's keys", e))?
                .ok_or_else(|| self.watch_closed("the source closed the watch"))?;
            if response.canceled() {
                return self.watch_canceled(&mut source, checkpoint, &response).await;
            }
            if response.created() {
                continue;
            }
            if response.events().is_empty() {
                let revision = response.header().map_or(0, ResponseHeader::revision);
                checkpoint.applied_through = checkpoint.applied_through.max(revision);
                if until.is_none_or(|until| checkpoint.applied_through >= until) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                watch.request_progress().await.map_err(progress)?;
                continue;
            }
            applied += response.events().len();
            self.apply(&mut source, &mut target, &response, checkpoint)
                .await?;
        }
        self.lag(&mut source, checkpoint).await
    }

    /// Applies one watch response's events in order and advances `applied_through` past them.
    async fn apply(
        &self,
        source: &mut Client,
        target: &mut Client,
        response: &WatchResponse,
        checkpoint: &mut Checkpoint,
    ) -> Result<(), DatastoreError> {
        let mut ops = Vec::with_capacity(response.events().len());
        let mut highest = checkpoint.applied_through;
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            highest = highest.max(kv.mod_revision());
            ops.push(match event.event_type() {
                EventType::Put => self.op_for(source, target, kv).await?,
                EventType::Delete => Op::Delete {
                    key: self.target_key(kv.key()),
                },
            });
        }
        self.ensure_target_at_least(target, highest, self.options.revision_margin)
            .await?;
        self.write(target, ops).await?;
        checkpoint.applied_through = highest;
        Ok(())
    }

    /// A canceled watch: a compacted start revision resets the checkpoint to a fresh copy.
    async fn watch_canceled(
        &self,
        source: &mut Client,
        checkpoint: &mut Checkpoint,
        response: &WatchResponse,
    ) -> Result<u64, DatastoreError> {
        if response.compact_revision() == 0 {
            return Err(self.watch_closed(&format!(
                "the source canceled the watch: {}",
                response.cancel_reason()
            )));
        }
        *checkpoint = Checkpoint::default();
        self.lag(source, checkpoint).await
    }

    fn watch_closed(&self, message: &str) -> DatastoreError {
        DatastoreError::Backend {
            driver: crd::Driver::Etcd,
            endpoint: self.source.endpoint_label().to_string(),
            operation: "watch the tenant's keys",
            message: message.to_string(),
        }
    }

    /// The source's current revision minus `applied_through`.
    async fn lag(&self, source: &mut Client, checkpoint: &Checkpoint) -> Result<u64, DatastoreError> {
        let revision = self.source_revision(source).await?;
        Ok(u64::try_from(revision - checkpoint.applied_through).unwrap_or(0))
    }
}

// ------------------------------------------------------------------------------------ freeze, finish

impl EtcdMover {
    /// Sets the type of the tenant role's permission on its range (READ or READWRITE); nothing when
    /// it already has that type, and nothing to freeze when the role holds no permission there.
    async fn set_permission(&self, wanted: PermissionType) -> Result<(), DatastoreError> {
        let client = self.source.client().await?;
        let end = prefix_end(&self.source_prefix);
        let role = resending_stale_auth(
            &client,
            |mut c| async move { c.role_get(self.role.as_str()).await },
        )
        .await
        .map_err(|e| self.source.map("read the tenant role", e))?;
        let current = role
            .permissions()
            .into_iter()
            .find(|p| p.key() == self.source_prefix.as_slice() && p.range_end() == end.as_slice());
        match current {
            Some(p) if p.get_type() == wanted as i32 => return Ok(()),
            None if wanted == PermissionType::Read => return Ok(()),
            _ => {}
        }
        let permission = match wanted {
            PermissionType::Read => Permission::read(self.source_prefix.clone()),
            _ => Permission::read_write(self.source_prefix.clone()),
        };
        let permission = permission.with_range_end(end);
        resending_stale_auth(&client, |mut c| {
            let permission = permission.clone();
            async move { c.role_grant_permission(self.role.as_str(), permission).await }
        })
        .await
        .map_err(|e| self.source.map("change the tenant role's permission", e))?;
        Ok(())
    }

    /// How far above the source's current revision the target ends: the source's revision rate seen
    /// by this mover times the switch window, at least `revision_margin`.
    fn switch_margin(&self, source_revision: i64) -> i64 {
        let first = *self.first_seen.lock().unwrap_or_else(|e| e.into_inner());
        let rate = first.map_or(0.0, |(at, revision)| {
            let seconds = at.elapsed().as_secs_f64();
            if seconds < 1.0 {
                0.0
            } else {
                (source_revision - revision) as f64 / seconds
            }
        });
        let window = (rate * self.options.switch_window.as_secs_f64()).ceil() as i64;
        window.max(self.options.revision_margin)
    }

    /// Re-puts one page of tenant keys whose target `mod_revision` is not above `floor`; whether
    /// there were any.
    async fn touch_page(&self, target: &mut Client, floor: i64) -> Result<bool, DatastoreError> {
        let options = GetOptions::new()
            .with_range(prefix_end(&self.target_prefix))
            .with_keys_only()
            .with_max_mod_revision(floor)
            .with_limit(i64::try_from(self.options.page_keys.max(1)).unwrap_or(i64::MAX));
        let response = target
            .get(self.target_prefix.clone(), Some(options))
            .await
            .map_err(|e| self.target.map("list target keys at old revisions", e))?;
        if response.kvs().is_empty() {
            return Ok(false);
        }
        let ops = response
            .kvs()
            .iter()
            .map(|kv| Op::Touch {
                key: kv.key().to_vec(),
            })
            .collect();
        self.write(target, ops).await?;
        Ok(true)
    }

    /// Compacts the target to its current revision (an earlier compaction beyond it is fine).
    async fn compact_target(&self, target: &mut Client) -> Result<(), DatastoreError> {
        let revision = current_revision(&self.target, target, "read the target revision").await?;
        match target.compact(revision, None).await {
            Ok(_) => Ok(()),
            Err(e) if is_compacted(&e) => Ok(()),
            Err(e) => Err(self.target.map("compact the target", e)),
        }
    }

    /// Before the freeze, for at most one catch-up step's time: raises the target above a projected
    /// final revision (the source's current one plus [`Self::switch_margin`], chosen once per mover)
    /// and re-puts the tenant keys at or below it, so that [`Mover::finish_step`] finds (almost) no
    /// key at or below the real final revision and the freeze stays short. Keys applied later land
    /// above it anyway.
    async fn pre_touch(&self) -> Result<Step, DatastoreError> {
        let mut target = self.target.client().await?;
        let chosen = *self.pre_floor.lock().unwrap_or_else(|e| e.into_inner());
        let floor = match chosen {
            Some(floor) => floor,
            None => {
                let mut source = self.source.client().await?;
                let now = self.source_revision(&mut source).await?;
                let floor = now + self.switch_margin(now);
                *self.pre_floor.lock().unwrap_or_else(|e| e.into_inner()) = Some(floor);
                floor
            }
        };
        self.ensure_target_at_least(&mut target, floor, 0).await?;
        let deadline = Instant::now() + self.options.catch_up_duration;
        while self.touch_page(&mut target, floor).await? {
            if Instant::now() >= deadline {
                return Ok(Step::More);
            }
        }
        Ok(Step::Done)
    }

    /// One finish step (see [`Mover::finish_step`]).
    async fn finish(&self, checkpoint: &mut Checkpoint) -> Result<Step, DatastoreError> {
        if checkpoint.applied_through == 0 {
            self.copy_page(checkpoint).await?;
            return Ok(Step::More);
        }
        let mut source = self.source.client().await?;
        let mut target = self.target.client().await?;
        let frozen = self.source_revision(&mut source).await?;
        if checkpoint.applied_through < frozen {
            self.catch_up(checkpoint, Some(frozen)).await?;
            if checkpoint.applied_through < frozen {
                return Ok(Step::More);
            }
        }
        let final_revision = checkpoint.applied_through;
        let floor = final_revision.max(frozen) + self.switch_margin(frozen);
        self.ensure_target_at_least(&mut target, floor, 0).await?;
        if self.touch_page(&mut target, final_revision).await? {
            return Ok(Step::More);
        }
        self.compact_target(&mut target).await?;
        Ok(Step::Done)
    }
}

// -------------------------------------------------------------------------------------------- verify

/// Reads one prefix page by page at one revision.
struct Pager<'a> {
    driver: &'a EtcdDriver,
    client: Client,
    prefix: &'a [u8],
    next: Option<Vec<u8>>,
    revision: i64,
    buffer: std::collections::VecDeque<KeyValue>,
    limit: i64,
}

impl<'a> Pager<'a> {
    async fn new(driver: &'a EtcdDriver, prefix: &'a [u8], limit: usize) -> Result<Self, DatastoreError> {
        Ok(Self {
            driver,
            client: driver.client().await?,
            prefix,
            next: Some(prefix.to_vec()),
            revision: 0,
            buffer: Default::default(),
            limit: i64::try_from(limit.max(1)).unwrap_or(i64::MAX),
        })
    }

    /// The next key and value, in key order.
    async fn next(&mut self) -> Result<Option<KeyValue>, DatastoreError> {
        if self.buffer.is_empty()
            && let Some(start) = self.next.take()
        {
            let mut options = GetOptions::new()
                .with_range(prefix_end(self.prefix))
                .with_limit(self.limit);
            if self.revision > 0 {
                options = options.with_revision(self.revision);
            }
            let mut kv = self
                .client
                .kv_client()
                .max_decoding_message_size(MAX_MESSAGE_BYTES);
            let mut response = kv
                .get(start, Some(options))
                .await
                .map_err(|e| self.driver.map("read the tenant's keys to verify them", e))?;
            if self.revision == 0 {
                self.revision = response.header().map_or(0, ResponseHeader::revision);
            }
            let more = response.more();
            self.buffer.extend(response.take_kvs());
            if more && let Some(last) = self.buffer.back() {
                self.next = Some(successor(last.key()));
            }
        }
        Ok(self.buffer.pop_front())
    }
}

impl EtcdMover {
    async fn compare(&self) -> Result<Verification, DatastoreError> {
        let page = self.options.page_keys;
        let mut source = Pager::new(&self.source, &self.source_prefix, page).await?;
        let mut target = Pager::new(&self.target, &self.target_prefix, page).await?;
        let mut result = Verification::default();
        let (mut a, mut b) = (source.next().await?, target.next().await?);
        loop {
            let rel_a = a.as_ref().map(|kv| &kv.key()[self.source_prefix.len()..]);
            let rel_b = b.as_ref().map(|kv| &kv.key()[self.target_prefix.len()..]);
            let (differs, key, advance_a, advance_b) = match (rel_a, rel_b, &a, &b) {
                (None, None, ..) => break,
                (Some(x), Some(y), Some(kv_a), Some(kv_b)) if x == y => {
                    let same = kv_a.value() == kv_b.value() && (kv_a.lease() == 0) == (kv_b.lease() == 0);
                    (!same, x.to_vec(), true, true)
                }
                (Some(x), Some(y), ..) if x < y => (true, x.to_vec(), true, false),
                (Some(x), None, ..) => (true, x.to_vec(), true, false),
                (_, Some(y), ..) => (true, y.to_vec(), false, true),
            };
            result.keys += 1;
            if differs {
                result.mismatch_count += 1;
                if result.mismatches.len() < 10 {
                    let key = [self.source_prefix.as_slice(), &key].concat();
                    result.mismatches.push(String::from_utf8_lossy(&key).into_owned());
                }
            }
            if advance_a {
                a = source.next().await?;
            }
            if advance_b {
                b = target.next().await?;
            }
        }
        Ok(result)
    }
}

impl Mover for EtcdMover {
    async fn copy_step(&self, checkpoint: &mut Checkpoint) -> Result<Step, DatastoreError> {
        self.copy_page(checkpoint).await
    }

    async fn catch_up_step(&self, checkpoint: &mut Checkpoint) -> Result<u64, DatastoreError> {
        let lag = self.catch_up(checkpoint, None).await?;
        if lag > self.options.pre_touch_lag || checkpoint.applied_through == 0 {
            return Ok(lag);
        }
        match self.pre_touch().await? {
            Step::Done => Ok(lag),
            Step::More => Ok(lag.max(self.options.pre_touch_lag.saturating_add(1))),
        }
    }

    async fn freeze(&self) -> Result<(), DatastoreError> {
        self.source
            .within_deadline("freeze the source", self.set_permission(PermissionType::Read))
            .await
    }

    async fn thaw(&self) -> Result<(), DatastoreError> {
        self.source
            .within_deadline("thaw the source", self.set_permission(PermissionType::Readwrite))
            .await
    }

    async fn finish_step(&self, checkpoint: &mut Checkpoint) -> Result<Step, DatastoreError> {
        self.finish(checkpoint).await
    }

    async fn verify(&self) -> Result<Verification, DatastoreError> {
        self.compare().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_any_key_and_keep_paths_readable() {
        assert_eq!(encode_key(b"/cp/registry/pods/a"), "/cp/registry/pods/a");
        for key in [&b"/cp/a b%c"[..], &[0, 0xff, b'/', b'%'], b""] {
            assert_eq!(decode_key(&encode_key(key)).as_deref(), Some(key));
        }
        assert_eq!(encode_key(b"a b%"), "a%20b%25");
        assert_eq!(decode_key("%zz"), None);
        assert_eq!(decode_key("%4"), None);
    }

    #[test]
    fn a_page_keeps_to_its_bytes_but_holds_at_least_one_key() {
        let sizes = [100, 100, 100];
        assert_eq!(fitting(sizes, 250), 2);
        assert_eq!(fitting(sizes, 10), 1);
        assert_eq!(fitting(sizes, 1000), 3);
        assert_eq!(fitting([], 10), 0);
    }
}
