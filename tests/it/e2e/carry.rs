//! `overrides: move` (issue 21, item 4) on the real stack: a control plane moving to an etcd under
//! another CA re-places its Events override under that CA, and with `move` the Events go with it:
//! afterwards the tenant lists every Event it wrote, they are on the new override etcd, and nothing
//! of the tenant is left on the old primary or the old override.

use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kube::{Api, api::PostParams};
use reqwest::{Method, StatusCode};
use serde_json::json;

use super::{connected, etcd::schema, etcd_keys, etcds, namespace_and_event, stack};
use crate::support::eventually;

/// Events written before the move, besides the one of [`namespace_and_event`].
const EVENTS: usize = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_move_to_another_ca_carries_the_events_to_an_override_under_that_ca() {
    let stack = stack("e2e-carry", 1).await;
    let (_old_ca, old) = etcds("e2e-carry-old", 2).await;
    let (_new_ca, new) = etcds("e2e-carry-new", 2).await;
    let (old_ca, new_ca) = (format!("ca-old-{}", stack.id), format!("ca-new-{}", stack.id));
    stack.pool("carry").await;
    stack.pool("carry-ev").await;
    let source = stack.etcd_datastore("carry", &old[0], &old_ca).await;
    let old_events = stack.etcd_datastore("carry-ev", &old[1], &old_ca).await;
    let created = stack
        .create(
            0,
            json!({"name": "prod", "kubernetesVersion": "v1.34.4", "replicas": 1,
                   "datastore": {"pool": "carry"}, "offload": "pool:carry-ev"}),
        )
        .await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let cp = stack.ready(0, &id, "v1.34.4").await;
    assert_eq!(cp["placement"]["dataStore"], source.as_str(), "{cp:#}");
    assert_eq!(cp["placement"]["overrides"][0]["dataStore"], old_events.as_str());
    let tenant = stack.tenant_client(0, &id).await;
    namespace_and_event(&tenant, "carried").await;
    let events = Api::<Event>::namespaced(tenant.clone(), "carried");
    for i in 0..EVENTS {
        let event: Event = serde_json::from_value(json!({
            "metadata": {"name": format!("carried-{i:03}"), "namespace": "carried"},
            "involvedObject": {"kind": "Namespace", "name": "carried", "namespace": "carried", "apiVersion": "v1"},
            "reason": "Carried", "message": format!("event {i}"), "type": "Normal",
        }))
        .unwrap();
        events.create(&PostParams::default(), &event).await.unwrap();
    }
    let prefix = format!(
        "/{}/",
        schema(&stack.kube, &stack.tenants[0].namespace, "prod").await
    );
    let on_old = etcd_keys(&old[1], &format!("{prefix}events/carried/")).await;
    assert_eq!(on_old.len(), EVENTS + 1, "{on_old:?}");

    let target = stack.etcd_datastore("carry", &new[0], &new_ca).await;
    let new_events = stack.etcd_datastore("carry-ev", &new[1], &new_ca).await;
    let slug = &stack.tenants[0].slug;
    let r = stack
        .app
        .call(
            Method::POST,
            &format!("/api/v1/tenants/{slug}/control-planes/{id}/migrate"),
            Some(&stack.app.admin),
            Some(json!({"target": target, "overrides": "move"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    let op = r.body["operation"]["id"].as_str().unwrap().to_string();
    let seen = stack.operation_until_done(0, &op).await;
    let (last, cp) = seen.last().unwrap();
    assert_eq!(last["state"], "succeeded", "{last:#}");
    assert_eq!(cp["placement"]["dataStore"], target.as_str(), "{cp:#}");
    assert_eq!(
        cp["placement"]["overrides"][0]["dataStore"],
        new_events.as_str(),
        "{cp:#}"
    );

    // The tenant lists every Event through its new apiserver, read from the new override etcd.
    let listed = connected(|| async { events.list(&Default::default()).await })
        .await
        .unwrap();
    let mut names: Vec<String> = listed
        .items
        .iter()
        .filter_map(|e| e.metadata.name.clone())
        .collect();
    names.sort();
    let mut expected: Vec<String> = (0..EVENTS).map(|i| format!("carried-{i:03}")).collect();
    expected.push("e2e-event".into());
    expected.sort();
    assert_eq!(names, expected, "the Events after the move");
    let message = listed
        .items
        .iter()
        .find(|e| e.metadata.name.as_deref() == Some("carried-007"))
        .and_then(|e| e.message.clone());
    assert_eq!(message.as_deref(), Some("event 7"));
    // The new override space is the tenant's to write.
    let after: Event = serde_json::from_value(json!({
        "metadata": {"name": "after-the-move", "namespace": "carried"},
        "involvedObject": {"kind": "Namespace", "name": "carried", "namespace": "carried", "apiVersion": "v1"},
        "reason": "Carried", "message": "written on the new override", "type": "Normal",
    }))
    .unwrap();
    events.create(&PostParams::default(), &after).await.unwrap();
    let on_new = etcd_keys(&new[1], &format!("{prefix}events/carried/")).await;
    assert_eq!(on_new.len(), EVENTS + 2, "{on_new:?}");
    // The old override space goes once the datastore phase sees the switch (after the operation).
    for (etcd, what) in [(&old[0], "the old primary"), (&old[1], "the old override")] {
        let left = eventually(what, Duration::from_secs(60), || async {
            let keys = etcd_keys(etcd, &prefix).await;
            keys.is_empty().then_some(keys)
        })
        .await;
        assert_eq!(left, Vec::<String>::new(), "tenant keys left on {what}");
    }
    stack.stop().await;
}
