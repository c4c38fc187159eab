//! Draining a DataStore on the real stack (issue 21): three serving control planes on one etcd DataStore
//! move, live, to another as one `drain` with concurrency 2. While it runs, the drain's children and the
//! TenantControlPlanes' `status.migration` are sampled: never more than two move at once. Afterwards
//! every child operation succeeded, every TCP's `status.storage` names the other DataStore, and the
//! drained DataStore's `status.usedBy` is empty.

use std::{
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use kube::{Api, api::ListParams};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tenantplane::k8s::crd::{DataStore, TenantControlPlane};

use super::{Stack, etcds, stack};
use crate::support::eventually;

/// Control planes on the drained DataStore.
const NAMES: [&str; 3] = ["one", "two", "three"];

/// How long the whole drain may take (three small tenants, two at a time, on a loaded 2-core machine).
const DRAINED: Duration = Duration::from_secs(900);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn draining_an_etcd_datastore_moves_its_three_control_planes_two_at_a_time() {
    let stack = stack("e2e-drain", 1).await;
    let (_ca, etcd) = etcds("e2e-drain", 2).await;
    let ca_id = format!("ca-{}", stack.id);
    stack.pool("drain").await;
    let a = stack.etcd_datastore("drain", &etcd[0], &ca_id).await;
    let mut ids = Vec::new();
    for name in NAMES {
        let created = stack
            .create(
                0,
                json!({"name": name, "kubernetesVersion": "v1.34.4", "replicas": 1, "datastore": {"pool": "drain"}}),
            )
            .await;
        ids.push(created["controlPlane"]["id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        let cp = stack.ready(0, id, "v1.34.4").await;
        assert_eq!(cp["placement"]["dataStore"], a.as_str(), "{cp:#}");
    }
    // The target joins the pool only now, so that all three started on `a`.
    let b = stack.etcd_datastore("drain", &etcd[1], &ca_id).await;

    let r = stack
        .app
        .call(
            Method::POST,
            &format!("/api/v1/datastores/{a}/drain"),
            Some(&stack.app.admin),
            Some(json!({"concurrency": 2})),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let drain = r.body["id"].as_str().unwrap().to_string();
    let started = Instant::now();
    let (most_children, most_tcps) = (Arc::new(AtomicI64::new(0)), Arc::new(AtomicI64::new(0)));
    let sampler = sample(&stack, &drain, most_children.clone(), most_tcps.clone());
    let done = until_done(&stack, &drain).await;
    sampler.abort();
    eprintln!(
        "drain of 3 control planes, concurrency 2: done in {:?}; at most {} children and {} TCP migrations at once",
        started.elapsed(),
        most_children.load(Ordering::SeqCst),
        most_tcps.load(Ordering::SeqCst)
    );

    assert_eq!(done["state"], "succeeded", "{done:#}");
    assert_eq!(
        done["counts"],
        json!({"pending": 0, "running": 0, "succeeded": 3, "failed": 0})
    );
    let children = done["children"].as_array().unwrap();
    assert_eq!(children.len(), 3, "{done:#}");
    // Never three at once, as sampled (a sample can miss a moment, never invent one); two at once is
    // read from the children's own operations.
    let at_once = (
        most_children.load(Ordering::SeqCst),
        most_tcps.load(Ordering::SeqCst),
    );
    assert!(
        at_once.0 <= 2 && at_once.1 <= 2,
        "at once: {} children running, {} TCPs migrating",
        at_once.0,
        at_once.1
    );
    children_moved_two_at_once(&stack, children, &a, &b).await;
    let tcps = Api::<TenantControlPlane>::namespaced(stack.kube.clone(), &stack.tenants[0].namespace);
    for name in NAMES {
        let storage = tcps.get(name).await.unwrap().status.unwrap().storage.unwrap();
        assert_eq!(storage.data_store_name.as_deref(), Some(b.as_str()), "{name}");
    }
    for id in &ids {
        assert_eq!(stack.get(0, id).await["placement"]["dataStore"], b.as_str());
    }
    let datastores: Api<DataStore> = Api::all(stack.kube.clone());
    eventually(
        &format!("DataStore {a}'s status.usedBy empty"),
        Duration::from_secs(60),
        || {
            let datastores = datastores.clone();
            let a = a.clone();
            async move {
                let used = datastores.get(&a).await.ok()?.status?.used_by;
                used.is_empty().then_some(())
            }
        },
    )
    .await;
    stack.stop().await;
}

/// Each child of the drain is a succeeded `migrate` from `a` to `b`, and the first pass started two: the
/// first two operations were both created before either ended (database times, so the machine's speed
/// does not matter).
async fn children_moved_two_at_once(stack: &Stack, children: &[Value], a: &str, b: &str) {
    let slug = &stack.tenants[0].slug;
    let mut spans = Vec::new();
    for child in children {
        assert_eq!((&child["from"], &child["to"]), (&json!(a), &json!(b)), "{child}");
        let op = child["operationId"].as_str().unwrap();
        let r = stack
            .app
            .call(
                Method::GET,
                &format!("/api/v1/tenants/{slug}/operations/{op}"),
                Some(&stack.tenants[0].member),
                None,
            )
            .await;
        assert_eq!(
            (&r.body["kind"], &r.body["state"], &r.body["stage"]),
            (&json!("migrate"), &json!("succeeded"), &json!("done")),
            "{}",
            r.text
        );
        let at = |field: &str| r.body[field].as_str().unwrap().parse::<DateTime<Utc>>().unwrap();
        spans.push((at("createdAt"), at("updatedAt")));
    }
    spans.sort();
    assert!(
        spans[0].0.max(spans[1].0) < spans[0].1.min(spans[1].1),
        "the first two children did not run at once (created, ended): {spans:?}"
    );
}

/// Samples, every 100 ms until aborted, how many of the drain's children run and how many of the
/// tenant's TCPs have a migration under way; keeps the largest of each.
fn sample(
    stack: &Stack,
    drain: &str,
    most_children: Arc<AtomicI64>,
    most_tcps: Arc<AtomicI64>,
) -> tokio::task::JoinHandle<()> {
    let (http, url, admin) = (
        stack.app.http.clone(),
        format!("{}/api/v1/operations/{drain}", stack.app.base),
        stack.app.admin.clone(),
    );
    let tcps = Api::<TenantControlPlane>::namespaced(stack.kube.clone(), &stack.tenants[0].namespace);
    tokio::spawn(async move {
        loop {
            if let Ok(r) = http.get(&url).bearer_auth(&admin).send().await
                && let Ok(body) = r.json::<Value>().await
                && let Some(running) = body["counts"]["running"].as_i64()
            {
                most_children.fetch_max(running, Ordering::SeqCst);
            }
            if let Ok(list) = tcps.list(&ListParams::default()).await {
                let moving = list
                    .items
                    .iter()
                    .filter_map(|t| t.status.as_ref()?.migration.as_ref())
                    .filter(|m| !m.stage.ended())
                    .count() as i64;
                most_tcps.fetch_max(moving, Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// Polls the drain until it is done (within [`DRAINED`]); returns it.
async fn until_done(stack: &Stack, drain: &str) -> Value {
    let start = Instant::now();
    let mut last = Value::Null;
    loop {
        let r = stack
            .app
            .call(
                Method::GET,
                &format!("/api/v1/operations/{drain}"),
                Some(&stack.app.admin),
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        if r.body["counts"] != last["counts"] {
            eprintln!("drain at {:?}: {}", start.elapsed(), r.body["counts"]);
        }
        if r.body["done"] == true {
            return r.body;
        }
        assert!(
            start.elapsed() < DRAINED,
            "drain not done after {DRAINED:?}: {:#}",
            r.body
        );
        last = r.body;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
