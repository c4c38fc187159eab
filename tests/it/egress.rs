//! The egress NetworkPolicy of a tenant control plane on the real kube-apiserver, written by the
//! controller (test harness of `controller.rs`). Nothing here enforces NetworkPolicy (no CNI, no pods),
//! so the test proves the object: its selector on the Deployment's pods, its peers, its owner, its
//! repair after an edit and its garbage collection (kube-controller-manager) with the TCP.

use k8s_openapi::api::{apps::v1::Deployment, networking::v1::NetworkPolicy};
use kube::{
    Api, ResourceExt as _,
    api::{Patch, PatchParams},
    runtime::wait::{await_condition, conditions},
};
use serde_json::{Value, json};
use tenantplane::pki::Ca;

use crate::controller::{WAIT, env_configured, tls_etcd};

/// Waits (on the watch, at most [`WAIT`]) until `name` satisfies `check`; returns it.
async fn policy_where(
    api: &Api<NetworkPolicy>,
    name: &str,
    what: &str,
    check: impl Fn(&NetworkPolicy) -> bool,
) -> NetworkPolicy {
    tokio::time::timeout(
        WAIT,
        await_condition(api.clone(), name, move |p: Option<&NetworkPolicy>| {
            p.is_some_and(&check)
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("timed out after {WAIT:?} waiting for NetworkPolicy {name}: {what}"))
    .unwrap()
    .unwrap()
}

fn ip_rule(endpoint: &str) -> Value {
    let (ip, port) = endpoint.rsplit_once(':').unwrap();
    json!({
        "to": [{"ipBlock": {"cidr": format!("{ip}/32")}}],
        "ports": [{"protocol": "TCP", "port": port.parse::<u16>().unwrap()}],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_gets_an_egress_policy_on_its_pods_and_datastores_that_is_repaired_and_goes_with_it() {
    let issuer = "https://127.0.0.1:8443/credentials";
    let env = env_configured("egress", |s| {
        s.workload.credential_issuer_url = Some(issuer.into());
    })
    .await;
    let ca = Ca::new("egress-ca").unwrap();
    let (primary_etcd, events_etcd) = tokio::join!(tls_etcd("egress-a", &ca), tls_etcd("egress-b", &ca));
    let primary = env.etcd_datastore(&primary_etcd).await;
    let events = env.etcd_datastore(&events_etcd).await;
    env.ds_condition(&primary, "Ready", "True").await;
    env.ds_condition(&events, "Ready", "True").await;
    let uid = env
        .tcp(
            "cp",
            &primary,
            json!([{"resource": "/events", "dataStore": events}]),
        )
        .await
        .uid()
        .unwrap();

    // The Deployment is applied after the policy: once it exists, so does the policy.
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), &env.ns);
    tokio::time::timeout(
        WAIT,
        await_condition(deployments.clone(), "cp", |d: Option<&Deployment>| d.is_some()),
    )
    .await
    .expect("the Deployment cp within WAIT")
    .unwrap();
    let policies: Api<NetworkPolicy> = Api::namespaced(env.client.clone(), &env.ns);
    let policy = policies
        .get("cp-egress")
        .await
        .expect("cp-egress exists with the Deployment");
    let owner = &policy.owner_references()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str(),
            owner.controller
        ),
        ("TenantControlPlane", "cp", uid.as_str(), Some(true))
    );

    // It selects exactly the Deployment's pods.
    let deployment = deployments.get("cp").await.unwrap();
    let spec = deployment.spec.unwrap();
    let selector = serde_json::to_value(&policy.spec.as_ref().unwrap().pod_selector).unwrap();
    assert_eq!(selector, json!({"matchLabels": {"kamaji.clastix.io/name": "cp"}}));
    assert_eq!(selector, serde_json::to_value(&spec.selector).unwrap());
    let pod_labels = spec.template.metadata.unwrap().labels.unwrap();
    assert_eq!(
        pod_labels.get("kamaji.clastix.io/name").map(String::as_str),
        Some("cp")
    );

    // Egress only: DNS, each etcd, the credential issuer, kubelets (no Konnectivity).
    let expected = json!({
        "podSelector": {"matchLabels": {"kamaji.clastix.io/name": "cp"}},
        "policyTypes": ["Egress"],
        "egress": [
            {
                "to": [{
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }],
                "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
            },
            ip_rule(&primary_etcd.endpoint()),
            ip_rule(&events_etcd.endpoint()),
            ip_rule("127.0.0.1:8443"),
            {"ports": [{"protocol": "TCP", "port": 10250}]},
        ],
    });
    // The primary and the override sort by name in the policy.
    let mut expected = expected;
    if events < primary {
        expected["egress"].as_array_mut().unwrap().swap(1, 2);
    }
    assert_eq!(
        serde_json::to_value(policy.spec.as_ref().unwrap()).unwrap(),
        expected
    );
    let (_, restricted) = env.tcp_condition("cp", "EgressRestricted", "True").await;
    assert_eq!(restricted.reason, "NetworkPolicyApplied");
    let (first, second) = if events < primary {
        (&events, &primary)
    } else {
        (&primary, &events)
    };
    assert_eq!(
        restricted.message,
        format!(
            "egress limited to DNS (kube-system/k8s-app=kube-dns), DataStores {first}, {second} (2 endpoints), \
             the credential issuer (127.0.0.1:8443), kubelets on TCP 10250 at any address (no Konnectivity)"
        )
    );

    // An edit that would open everything (any egress, and a selector matching no pod) is put back.
    let edited = policies
        .patch(
            "cp-egress",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "egress": [{}],
                "podSelector": {"matchLabels": {"kamaji.clastix.io/name": "cp", "edited": "yes"}},
            }})),
        )
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&edited.spec.as_ref().unwrap().egress).unwrap(),
        json!([{}])
    );
    let repaired = policy_where(&policies, "cp-egress", "repaired", |p| {
        serde_json::to_value(p.spec.as_ref()).unwrap() == expected
    })
    .await;
    assert_ne!(repaired.resource_version(), edited.resource_version());

    // A deleted policy is made again.
    policies.delete("cp-egress", &Default::default()).await.unwrap();
    policy_where(&policies, "cp-egress", "made again", |p| {
        p.uid() != policy.uid() && serde_json::to_value(p.spec.as_ref()).unwrap() == expected
    })
    .await;

    // An identity provider of the tenant's own opens TCP 443 at public addresses only (the API server
    // takes the excepted ranges); Tenantplane's issuer is no such provider.
    let provider = |url: &str| {
        json!({
            "issuer": {"url": url, "audiences": ["a"]},
            "claimMappings": {"username": {"claim": "sub", "prefix": "x:"}},
        })
    };
    env.tcps()
        .patch(
            "cp",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"authentication": {"jwt": [
                provider(issuer),
                provider("https://login.example.com"),
            ]}}})),
        )
        .await
        .unwrap();
    let mut with_public = expected.clone();
    with_public["egress"].as_array_mut().unwrap().insert(
        4,
        json!({
            "to": [
                {"ipBlock": {"cidr": "0.0.0.0/0", "except": [
                    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
                    "172.16.0.0/12", "192.168.0.0/16",
                ]}},
                {"ipBlock": {"cidr": "::/0", "except": [
                    "::1/128", "64:ff9b::/96", "64:ff9b:1::/48", "fc00::/7", "fe80::/10",
                ]}},
            ],
            "ports": [{"protocol": "TCP", "port": 443}],
        }),
    );
    let public = tokio::time::timeout(
        WAIT,
        await_condition(policies.clone(), "cp-egress", |p: Option<&NetworkPolicy>| {
            p.is_some_and(|p| serde_json::to_value(p.spec.as_ref()).unwrap() == with_public)
        }),
    )
    .await;
    if public.is_err() {
        let tcp = env.tcps().get("cp").await.unwrap();
        let egress = tcp
            .status
            .unwrap()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "EgressRestricted");
        panic!("no public HTTPS rule within {WAIT:?}; EgressRestricted: {egress:?}");
    }

    // It goes with the TenantControlPlane (garbage collection of its owner reference).
    let made_again = policies.get("cp-egress").await.unwrap();
    env.delete_tcp_and_wait("cp").await;
    tokio::time::timeout(
        WAIT,
        await_condition(
            policies.clone(),
            "cp-egress",
            conditions::is_deleted(&made_again.uid().unwrap()),
        ),
    )
    .await
    .expect("cp-egress garbage-collected within WAIT")
    .unwrap();
}
