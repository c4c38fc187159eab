//! The etcd mover against two real etcds (TLS, certificate auth, a `root` user), with the tenant's
//! own client certificate writing on the source meanwhile.

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use etcd_client::{
    Certificate, Client, ConnectOptions, GetOptions, Identity, PutOptions, TlsOptions, Txn, TxnOp,
};
use tenantplane::{
    datastore::{
        Driver as _, EtcdCredentials, TenantSpace,
        etcd::EtcdDriver,
        migrate::{
            Checkpoint, Mover, Step,
            etcd::{EtcdMoveOptions, EtcdMover, REVISION_FLOOR_KEY},
        },
    },
    pki::CertKey,
};
use tenantplane_devenv::localenv::{self, etcd::LocalEtcd};

use crate::datastore::{etcd_auth_state, etcd_creds, etcd_with_driver, owner};
use crate::support;

/// Two etcds, the tenant provisioned on both, and its certificate on the source.
struct Pair {
    source_etcd: LocalEtcd,
    target_etcd: LocalEtcd,
    source: Arc<EtcdDriver>,
    target: Arc<EtcdDriver>,
    space: TenantSpace,
    creds: EtcdCredentials,
}

async fn pair(name: &str) -> Pair {
    localenv::install_crypto_provider();
    let (source_etcd, source, _) = etcd_with_driver(&format!("{name}-src")).await;
    let (target_etcd, target, _) = etcd_with_driver(&format!("{name}-dst")).await;
    let schema = support::unique("cp");
    let space = TenantSpace::new(&schema, &schema, owner()).unwrap();
    let creds = etcd_creds(source.provision(&space).await.unwrap());
    target.provision(&space).await.unwrap();
    Pair {
        source_etcd,
        target_etcd,
        source: Arc::new(source),
        target: Arc::new(target),
        space,
        creds,
    }
}

impl Pair {
    fn mover(&self, options: EtcdMoveOptions) -> EtcdMover {
        EtcdMover::new(
            self.source.clone(),
            self.target.clone(),
            &self.space,
            &self.space,
            options,
        )
    }

    fn prefix(&self) -> String {
        format!("/{}/", self.space.schema())
    }

    async fn tenant_client(&self) -> Client {
        let key = CertKey {
            cert_pem: self.creds.client_cert_pem.clone(),
            key_pem: self.creds.client_key_pem.expose().clone(),
        };
        client(&self.source_etcd, &key).await
    }
}

/// A gRPC client of `etcd` with the client certificate `key`.
async fn client(etcd: &LocalEtcd, key: &CertKey) -> Client {
    let tls = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(&etcd.tls().unwrap().ca.cert_pem))
        .identity(Identity::from_pem(&key.cert_pem, &key.key_pem));
    Client::connect([etcd.url()], Some(ConnectOptions::new().with_tls(tls)))
        .await
        .unwrap()
}

async fn root(etcd: &LocalEtcd) -> Client {
    client(etcd, &etcd.tls().unwrap().root_client).await
}

/// A ConfigMap-sized value (about 1.2 KiB) for key number `i`, version `v`.
fn value(i: usize, v: usize) -> Vec<u8> {
    let mut text =
        format!("{{\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"cm-{i}\",\"v\":{v}}},\"data\":\"");
    text.push_str(&"x".repeat(1100 + i % 200));
    text.push_str("\"}");
    text.into_bytes()
}

/// Writes `n` keys `<prefix>registry/configmaps/default/cm-<i>`, every 10th with a 600 s lease.
async fn seed(client: &mut Client, prefix: &str, n: usize) {
    let lease = client.lease_grant(600, None).await.unwrap().id();
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .map(|&i| {
                let options = (i % 10 == 0).then(|| PutOptions::new().with_lease(lease));
                TxnOp::put(
                    format!("{prefix}registry/configmaps/default/cm-{i}"),
                    value(i, 0),
                    options,
                )
            })
            .collect();
        client.txn(Txn::new().and_then(ops)).await.unwrap();
    }
}

/// Every key under `prefix` (relative to it): value, lease attached, mod_revision.
async fn dump(client: &Client, prefix: &str) -> BTreeMap<Vec<u8>, (Vec<u8>, bool, i64)> {
    let mut kv = client.kv_client().max_decoding_message_size(512 * 1024 * 1024);
    let response = kv
        .get(prefix, Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    response
        .kvs()
        .iter()
        .map(|kv| {
            let key = kv.key()[prefix.len()..].to_vec();
            (key, (kv.value().to_vec(), kv.lease() != 0, kv.mod_revision()))
        })
        .collect()
}

/// Keys and values only (mod_revisions differ between the etcds).
fn content(dump: &BTreeMap<Vec<u8>, (Vec<u8>, bool, i64)>) -> BTreeMap<Vec<u8>, (Vec<u8>, bool)> {
    dump.iter()
        .map(|(k, (v, lease, _))| (k.clone(), (v.clone(), *lease)))
        .collect()
}

async fn revision(client: &mut Client) -> i64 {
    let response = client
        .get("nothing", Some(GetOptions::new().with_count_only()))
        .await
        .unwrap();
    response.header().unwrap().revision()
}

/// The tenant's own writer: puts, updates and deletes at about 40/s until stopped; counts the writes
/// that succeeded and those refused with "permission denied" or for a stale auth revision (any other
/// error fails the test).
struct Writer {
    stop: Arc<AtomicBool>,
    handle: tokio::task::JoinHandle<(u64, u64)>,
}

fn spawn_writer(mut client: Client, prefix: String, keys: usize) -> Writer {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let handle = tokio::spawn(async move {
        let (mut ok, mut denied) = (0, 0);
        let mut i = 0;
        while !flag.load(Ordering::Relaxed) {
            i += 1;
            let key = |n: usize| format!("{prefix}registry/configmaps/default/cm-{n}");
            let result = match i % 5 {
                0 => client.delete(key(i * 7 % keys), None).await.map(|_| ()),
                1 => client.put(key(keys + i), value(i, 1), None).await.map(|_| ()),
                2 if i % 10 == 2 => match client.lease_grant(300, None).await {
                    Ok(lease) => {
                        let options = PutOptions::new().with_lease(lease.id());
                        client
                            .put(key(i * 3 % keys), value(i, 2), Some(options))
                            .await
                            .map(|_| ())
                    }
                    Err(e) => Err(e),
                },
                _ => client
                    .put(key(i * 13 % keys), value(i, 3), None)
                    .await
                    .map(|_| ()),
            };
            match result {
                Ok(()) => ok += 1,
                Err(e) if e.to_string().contains("permission denied") => denied += 1,
                // A write in flight while the freeze changes the tenant's role: etcd refuses it for
                // its stale auth revision, and etcd's Go client (kube-apiserver's) retries it.
                Err(e) if e.to_string().contains("revision of auth store is old") => denied += 1,
                Err(e) => panic!("the tenant's write failed: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        (ok, denied)
    });
    Writer { stop, handle }
}

impl Writer {
    async fn stop(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.await.unwrap()
    }
}

async fn copy_all(mover: &EtcdMover, checkpoint: &mut Checkpoint) -> usize {
    for steps in 1..10_000 {
        if mover.copy_step(checkpoint).await.unwrap() == Step::Done {
            return steps;
        }
    }
    panic!("the copy did not finish");
}

async fn catch_up_below(mover: &EtcdMover, checkpoint: &mut Checkpoint, lag: u64) -> u64 {
    for _ in 0..200 {
        let now = mover.catch_up_step(checkpoint).await.unwrap();
        if now <= lag {
            return now;
        }
    }
    panic!("the catch-up did not get below a lag of {lag}");
}

async fn finish_all(mover: &EtcdMover, checkpoint: &mut Checkpoint) {
    for _ in 0..10_000 {
        if mover.finish_step(checkpoint).await.unwrap() == Step::Done {
            return;
        }
    }
    panic!("the finish did not end");
}

/// Checks the end state: equal content, verify agrees, and the target above the source's revision.
async fn assert_moved(pair: &Pair, mover: &EtcdMover) {
    let mut source = root(&pair.source_etcd).await;
    let mut target = root(&pair.target_etcd).await;
    let source_keys = dump(&source, &pair.prefix()).await;
    let target_keys = dump(&target, &pair.prefix()).await;
    assert_eq!(content(&target_keys), content(&source_keys));
    let verification = mover.verify().await.unwrap();
    assert!(verification.equal(), "{verification:?}");
    assert_eq!(verification.keys, source_keys.len() as u64);
    let source_final = revision(&mut source).await;
    assert!(revision(&mut target).await > source_final);
    let low: Vec<_> = target_keys
        .iter()
        .filter(|(_, (_, _, m))| *m <= source_final)
        .collect();
    assert_eq!(
        low.len(),
        0,
        "keys at or below the source's final revision {source_final}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_written_during_the_move_arrives_equal_frozen_and_above_the_source_revisions() {
    let pair = pair("mv-etcd").await;
    let prefix = pair.prefix();
    let mut source = root(&pair.source_etcd).await;
    seed(&mut source, &prefix, 3000).await;
    let tenant = pair.tenant_client().await;
    let writer = spawn_writer(tenant.clone(), prefix.clone(), 3000);
    let mover = pair.mover(EtcdMoveOptions::default());
    let mut checkpoint = Checkpoint::default();
    let steps = copy_all(&mover, &mut checkpoint).await;
    assert!(steps > 1, "{steps} pages");
    assert!(checkpoint.copied >= 3000, "{checkpoint:?}");
    assert_eq!(checkpoint.applied_through, checkpoint.snapshot_revision);
    catch_up_below(&mover, &mut checkpoint, 50).await;
    // Caught up, every tenant key on the target is already above the source's revision: the
    // freeze has (almost) nothing left to re-put.
    let before_freeze = revision(&mut source).await;
    let target_keys = dump(&root(&pair.target_etcd).await, &prefix).await;
    let low = target_keys
        .values()
        .filter(|(_, _, m)| *m <= before_freeze)
        .count();
    assert_eq!(
        (low, target_keys.len() >= 3000),
        (0, true),
        "keys at or below {before_freeze} before the freeze"
    );

    mover.freeze().await.unwrap();
    mover.freeze().await.unwrap();
    let (role, _) = etcd_auth_state(&pair.source_etcd, pair.space.schema(), pair.space.user());
    let schema = pair.space.schema();
    assert_eq!(
        role.unwrap(),
        format!("Role {schema}\nKV Read:\n\t[/{schema}/, /{schema}0) (prefix /{schema}/)\nKV Write:\n")
    );
    // The tenant's existing connection: writes refused at once, reads work.
    let mut own = tenant.clone();
    let denied = own
        .put(format!("{prefix}after-freeze"), "x", None)
        .await
        .unwrap_err();
    assert!(denied.to_string().contains("permission denied"), "{denied}");
    let read = own
        .get(format!("{prefix}registry/configmaps/default/cm-1"), None)
        .await
        .unwrap();
    assert_eq!(read.kvs().len(), 1);

    finish_all(&mover, &mut checkpoint).await;
    let (ok, refused) = writer.stop().await;
    assert!(ok > 20 && refused > 0, "{ok} writes, {refused} refused");
    assert_moved(&pair, &mover).await;
    // Leased keys carry a live target lease.
    let mut target = root(&pair.target_etcd).await;
    let leased = target
        .get(format!("{prefix}registry/configmaps/default/cm-10"), None)
        .await
        .unwrap();
    let lease = leased.kvs()[0].lease();
    let ttl = target.lease_time_to_live(lease, None).await.unwrap().ttl();
    assert!((1..=600).contains(&ttl), "{ttl}");

    mover.thaw().await.unwrap();
    mover.thaw().await.unwrap();
    own.put(format!("{prefix}after-thaw"), "x", None).await.unwrap();
}

/// etcd drops a progress request while a watch still replays history: the freeze's final catch-up
/// asks again until it is answered, instead of waiting out its whole step (here three minutes; the
/// test allows one, however loaded the machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_final_catch_up_ends_at_the_frozen_revision_not_at_the_end_of_its_step() {
    let pair = pair("mv-etcd-progress").await;
    let prefix = pair.prefix();
    seed(&mut root(&pair.source_etcd).await, &prefix, 200).await;
    let mover = pair.mover(EtcdMoveOptions {
        catch_up_duration: Duration::from_secs(180),
        ..EtcdMoveOptions::default()
    });
    let mut checkpoint = Checkpoint::default();
    copy_all(&mover, &mut checkpoint).await;
    let mut tenant = pair.tenant_client().await;
    for i in 0..5 {
        tenant.put(format!("{prefix}late-{i}"), "x", None).await.unwrap();
    }
    mover.freeze().await.unwrap();
    let finished = tokio::time::timeout(Duration::from_secs(60), finish_all(&mover, &mut checkpoint)).await;
    assert!(finished.is_ok(), "the final catch-up waited out its 180 s step");
    assert_moved(&pair, &mover).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_mover_resumes_from_the_saved_checkpoint_mid_copy_and_mid_catch_up() {
    let pair = pair("mv-etcd-resume").await;
    let prefix = pair.prefix();
    let mut source = root(&pair.source_etcd).await;
    seed(&mut source, &prefix, 2000).await;
    let writer = spawn_writer(pair.tenant_client().await, prefix.clone(), 2000);
    let small = || EtcdMoveOptions {
        page_keys: 100,
        catch_up_duration: Duration::from_millis(300),
        ..EtcdMoveOptions::default()
    };
    let saved =
        |c: &Checkpoint| serde_json::from_value::<Checkpoint>(serde_json::to_value(c).unwrap()).unwrap();

    let first = pair.mover(small());
    let mut checkpoint = Checkpoint::default();
    for _ in 0..5 {
        assert_eq!(first.copy_step(&mut checkpoint).await.unwrap(), Step::More);
    }
    // A crash after a page's writes and before its checkpoint was saved: the page is done again.
    let mut lost = checkpoint.clone();
    first.copy_step(&mut lost).await.unwrap();
    drop(first);
    let mut checkpoint = saved(&checkpoint);
    let second = pair.mover(small());
    copy_all(&second, &mut checkpoint).await;
    assert!(checkpoint.copied >= 2000, "{checkpoint:?}");
    second.catch_up_step(&mut checkpoint).await.unwrap();
    drop(second);

    let mut checkpoint = saved(&checkpoint);
    let third = pair.mover(small());
    catch_up_below(&third, &mut checkpoint, 50).await;
    third.freeze().await.unwrap();
    finish_all(&third, &mut checkpoint).await;
    writer.stop().await;
    assert_moved(&pair, &third).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_compacted_snapshot_restarts_the_copy_and_a_compacted_catch_up_copies_again() {
    let pair = pair("mv-etcd-compact").await;
    let prefix = pair.prefix();
    let mut source = root(&pair.source_etcd).await;
    seed(&mut source, &prefix, 600).await;
    let options = EtcdMoveOptions {
        page_keys: 100,
        ..EtcdMoveOptions::default()
    };
    let mover = pair.mover(options);
    let mut checkpoint = Checkpoint::default();
    for _ in 0..3 {
        assert_eq!(mover.copy_step(&mut checkpoint).await.unwrap(), Step::More);
    }
    let first_snapshot = checkpoint.snapshot_revision;
    // Keys of the pages already copied go away on the source, which then compacts past R.
    let gone = format!("{prefix}registry/configmaps/default/cm-1");
    source.delete(gone.clone(), None).await.unwrap();
    source
        .put(format!("{prefix}registry/configmaps/default/cm-2"), "new", None)
        .await
        .unwrap();
    let now = revision(&mut source).await;
    source.compact(now, None).await.unwrap();

    assert_eq!(mover.copy_step(&mut checkpoint).await.unwrap(), Step::More);
    assert_eq!(checkpoint.snapshot_revision, now);
    assert_eq!(checkpoint.cursor, None);
    assert_eq!(checkpoint.copied, 0);
    copy_all(&mover, &mut checkpoint).await;
    assert!(first_snapshot < checkpoint.snapshot_revision);
    let mut target = root(&pair.target_etcd).await;
    assert_eq!(target.get(gone.clone(), None).await.unwrap().kvs().len(), 0);

    // The catch-up's start revision compacted: back to a fresh copy, with the source's whole
    // revision as the lag, and then caught up.
    for i in 0..20 {
        source.put(format!("{prefix}later-{i}"), "v", None).await.unwrap();
    }
    let now = revision(&mut source).await;
    source.compact(now, None).await.unwrap();
    let lag = mover.catch_up_step(&mut checkpoint).await.unwrap();
    assert_eq!(lag, now as u64);
    assert_eq!(checkpoint, Checkpoint::default());
    catch_up_below(&mover, &mut checkpoint, 0).await;
    assert!(checkpoint.snapshot_revision >= now);
    mover.freeze().await.unwrap();
    finish_all(&mover, &mut checkpoint).await;
    assert_moved(&pair, &mover).await;
}

/// Every key of `client`'s etcd outside `prefix` but the revision floor: key, value, mod_revision.
async fn others(client: &Client, prefix: &str) -> Vec<(Vec<u8>, Vec<u8>, i64)> {
    let mut kv = client.kv_client();
    let response = kv
        .get(vec![0], Some(GetOptions::new().with_from_key()))
        .await
        .unwrap();
    response
        .kvs()
        .iter()
        .filter(|kv| !kv.key().starts_with(prefix.as_bytes()) && kv.key() != REVISION_FLOOR_KEY.as_bytes())
        .map(|kv| (kv.key().to_vec(), kv.value().to_vec(), kv.mod_revision()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keys_outside_the_tenant_prefix_are_never_copied_nor_touched_on_the_target() {
    let pair = pair("mv-etcd-foreign").await;
    let prefix = pair.prefix();
    let schema = pair.space.schema();
    let mut source = root(&pair.source_etcd).await;
    let mut target = root(&pair.target_etcd).await;
    seed(&mut source, &prefix, 50).await;
    // Neighbours on the source: a schema that extends this one, the range end, another tenant.
    for key in [
        format!("/{schema}-b/k"),
        format!("/{schema}0"),
        "/other/k".into(),
        "top".into(),
    ] {
        source.put(key, "foreign", None).await.unwrap();
    }
    // Neighbours on the target, which must stay byte for byte (and revision for revision).
    for key in [
        format!("/{schema}-b/t"),
        format!("/{schema}0t"),
        "/other/t".into(),
    ] {
        target.put(key, "theirs", None).await.unwrap();
    }
    let before = others(&target, &prefix).await;

    let mover = pair.mover(EtcdMoveOptions::default());
    let mut checkpoint = Checkpoint::default();
    copy_all(&mover, &mut checkpoint).await;
    source
        .put(format!("/{schema}-b/k2"), "foreign", None)
        .await
        .unwrap();
    source.put(format!("{prefix}inside"), "mine", None).await.unwrap();
    catch_up_below(&mover, &mut checkpoint, 0).await;
    mover.freeze().await.unwrap();
    finish_all(&mover, &mut checkpoint).await;

    assert_eq!(others(&target, &prefix).await, before);
    assert_eq!(dump(&target, &prefix).await.len(), 51);
    let floor = target.get(REVISION_FLOOR_KEY, None).await.unwrap();
    assert_eq!(floor.kvs()[0].value(), b"");
    assert_moved(&pair, &mover).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_further_behind_than_the_bump_cap_is_refused_and_left_alone() {
    let pair = pair("mv-etcd-cap").await;
    let mut source = root(&pair.source_etcd).await;
    let mut target = root(&pair.target_etcd).await;
    for _ in 0..1500 {
        source.put("busy", "", None).await.unwrap();
    }
    let options = EtcdMoveOptions {
        max_revision_bump: 1000,
        revision_margin: 10,
        ..EtcdMoveOptions::default()
    };
    let mover = pair.mover(options);
    let source_revision = revision(&mut source).await;
    let target_revision = revision(&mut target).await;
    let mut checkpoint = Checkpoint::default();
    let err = mover.copy_step(&mut checkpoint).await.unwrap_err();
    assert_eq!(err.reason(), "DataStoreInvalidConfig");
    assert!(!err.is_transient());
    let needed = source_revision + 10;
    let gap = needed - target_revision;
    assert_eq!(
        err.to_string(),
        format!(
            "invalid etcd datastore configuration: the target etcd at {} is at revision {target_revision}, \
             {gap} revisions below the {needed} that the tenant's resourceVersions need; closing the gap \
             takes {gap} revision-floor writes in all, more than the cap of 1000",
            pair.target_etcd.endpoint()
        )
    );
    assert_eq!(revision(&mut target).await, target_revision);
    assert_eq!(mover.revisions_bumped(), 0);
    assert_eq!(checkpoint, Checkpoint::default());
}
