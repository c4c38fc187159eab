//! Hollow nodes join a real tenant cluster served by the runner: kubeadm's token discovery
//! (`tenantplane_devenv::localenv::node::discover`) against the tenant, then hollow kubelets (kubemark)
//! that bootstrap from nothing but the discovered bootstrap kubeconfig. The tenant's controller-manager
//! approves and signs their CSRs, its scheduler places a Deployment and a DaemonSet on them.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    time::{Duration, Instant},
};

use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment},
    certificates::v1::CertificateSigningRequest,
    core::v1::{Namespace, Node, Pod, Secret, Service},
};
use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
};
use serde_json::json;
use tenantplane_devenv::localenv::{
    self,
    etcd::LocalEtcd,
    node::{Bootstrap, HollowNode, JoinCommand, NodeError, discover, discover_with},
};

use super::{
    Stack, connected, etcds,
    kubeadm::{ca_cert_hash, create_token, join_command, new_token},
    stack,
};
use crate::support::{self, eventually};

/// Start → Ready of one hollow node (about 1 s when idle; generous for a loaded 2-core machine).
const NODE_READY: Duration = Duration::from_secs(90);
/// Scheduling and running the workloads.
const WORKLOADS: Duration = Duration::from_secs(120);

/// A serving tenant cluster of its own stack.
pub(super) struct Serving {
    pub(super) stack: Stack,
    _etcd: Vec<LocalEtcd>,
    /// The control plane's id in the API.
    pub(super) id: String,
    /// `host:port` of the tenant API server.
    pub(super) endpoint: String,
    /// The tenant CA (PEM), from the management cluster.
    pub(super) ca_pem: String,
    /// The tenant's admin client.
    pub(super) tenant: kube::Client,
}

/// One control plane through the API on an etcd pool of its own, Ready.
async fn serving(prefix: &str, name: &str) -> Serving {
    serving_with(prefix, name, json!({})).await
}

/// [`serving`] with `extra` fields in the create body (e.g. `addons`).
pub(super) async fn serving_with(prefix: &str, name: &str, extra: serde_json::Value) -> Serving {
    let stack = stack(prefix, 1).await;
    let (_ca, etcd) = etcds(prefix, 1).await;
    stack.pool("etcd").await;
    stack
        .etcd_datastore("etcd", &etcd[0], &format!("ca-{}", stack.id))
        .await;
    let mut body =
        json!({"name": name, "kubernetesVersion": "v1.34.4", "replicas": 1, "datastore": {"pool": "etcd"}});
    for (k, v) in extra.as_object().into_iter().flatten() {
        body[k] = v.clone();
    }
    let created = stack.create(0, body).await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let cp = stack.ready(0, &id, "v1.34.4").await;
    let endpoint = cp["status"]["endpoint"].as_str().unwrap().to_string();
    let ns = stack.tenants[0].namespace.clone();
    let ca_secret = Api::<Secret>::namespaced(stack.kube.clone(), &ns)
        .get(&format!("{name}-ca"))
        .await
        .unwrap();
    let ca_pem = String::from_utf8(ca_secret.data.unwrap()["ca.crt"].0.clone()).unwrap();
    let tenant = stack.tenant_client(0, &id).await;
    Serving {
        stack,
        _etcd: etcd,
        id,
        endpoint,
        ca_pem,
        tenant,
    }
}

/// The first certificate of a PEM text, DER.
fn first_cert_der(pem: &str) -> Vec<u8> {
    x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .unwrap()
        .1
        .contents
}

/// The CSR whose issued certificate is `system:node:<name>`'s; checks it was requested with the
/// bootstrap token, approved, and issued by the tenant CA, and that the node holds that certificate.
fn check_csr(csrs: &[CertificateSigningRequest], node: &HollowNode, token_id: &str, ca_pem: &str) {
    let cn = format!("system:node:{}", node.name());
    let ca_der = first_cert_der(ca_pem);
    let (_, ca) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
    let issued: Vec<(&CertificateSigningRequest, Vec<u8>)> = csrs
        .iter()
        .filter_map(|csr| {
            let pem = csr.status.as_ref()?.certificate.as_ref()?;
            let der = first_cert_der(std::str::from_utf8(&pem.0).ok()?);
            let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
            let subject = cert
                .subject()
                .iter_common_name()
                .next()?
                .as_str()
                .ok()?
                .to_string();
            (subject == cn).then_some((csr, der.clone()))
        })
        .collect();
    assert_eq!(issued.len(), 1, "one issued CSR for {cn}");
    let (csr, der) = &issued[0];
    assert_eq!(
        csr.spec.signer_name,
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert_eq!(
        csr.spec.username.as_deref(),
        Some(format!("system:bootstrap:{token_id}").as_str())
    );
    let conditions = csr
        .status
        .as_ref()
        .unwrap()
        .conditions
        .clone()
        .unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Approved" && c.status == "True"),
        "{cn}: {conditions:?}"
    );
    let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
    cert.verify_signature(Some(ca.public_key()))
        .unwrap_or_else(|e| panic!("{cn}'s certificate is not signed by the tenant CA: {e:?}"));
    let held = std::fs::read_to_string(node.dir().join("certs/kubelet-client-current.pem")).unwrap();
    assert_eq!(&first_cert_der(&held), der, "{cn} holds the issued certificate");
}

/// The Running pods of `namespace` labelled `app=<app>`, counted per node.
async fn running_per_node(tenant: &kube::Client, namespace: &str, app: &str) -> BTreeMap<String, usize> {
    let pods = Api::<Pod>::namespaced(tenant.clone(), namespace);
    let params = ListParams::default().labels(&format!("app={app}"));
    let mut out = BTreeMap::new();
    for pod in connected(|| pods.list(&params)).await.unwrap().items {
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if let (true, Some(node)) = (running, pod.spec.and_then(|s| s.node_name)) {
            *out.entry(node).or_default() += 1;
        }
    }
    out
}

/// How many kube-system pods matching `selector` are Running on one of `nodes`.
async fn running_on(tenant: &kube::Client, selector: &str, nodes: &BTreeSet<String>) -> Option<usize> {
    let pods = Api::<Pod>::namespaced(tenant.clone(), "kube-system");
    let params = ListParams::default().labels(selector);
    let list = connected(|| pods.list(&params)).await.ok()?;
    let running = list.items.iter().filter(|p| {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        phase == Some("Running") && nodes.contains(&node)
    });
    Some(running.count())
}

/// A Deployment of 6 and a DaemonSet in `namespace`, pause containers.
async fn create_workloads(tenant: &kube::Client, namespace: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
    let post = PostParams::default();
    let namespaces = Api::<Namespace>::all(tenant.clone());
    connected(|| namespaces.create(&post, &ns)).await.unwrap();
    let template = |app: &str| {
        json!({
            "metadata": {"labels": {"app": app}},
            "spec": {"containers": [{"name": app, "image": "registry.k8s.io/pause:3.10"}]},
        })
    };
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 6, "selector": {"matchLabels": {"app": "web"}}, "template": template("web")},
    }))
    .unwrap();
    let deployments = Api::<Deployment>::namespaced(tenant.clone(), namespace);
    connected(|| deployments.create(&post, &deployment))
        .await
        .unwrap();
    let daemon_set: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template("agent")},
    }))
    .unwrap();
    let daemon_sets = Api::<DaemonSet>::namespaced(tenant.clone(), namespace);
    connected(|| daemon_sets.create(&post, &daemon_set))
        .await
        .unwrap();
}

/// Starts `names` on `bootstrap` and waits until all are Ready; prints and returns start → Ready.
pub(super) async fn start_ready(
    base: &Path,
    names: &[String],
    bootstrap: &Bootstrap,
) -> (Vec<HollowNode>, Vec<Duration>) {
    let mut nodes: Vec<HollowNode> = names
        .iter()
        .map(|name| HollowNode::start(&base.join(name), name, bootstrap).unwrap())
        .collect();
    let waits = nodes.iter_mut().map(|node| node.wait_ready(NODE_READY));
    let took: Vec<Duration> = futures::future::join_all(waits)
        .await
        .into_iter()
        .map(|ready| ready.unwrap())
        .collect();
    for (name, took) in names.iter().zip(&took) {
        println!("hollow node {name}: start -> Ready {:.2} s", took.as_secs_f64());
    }
    (nodes, took)
}

/// Waits until the tenant API server refuses `bootstrap`'s token (401) once its Secret is gone: its
/// token cache (10 s) and Secret informer have caught up, however slow the machine.
async fn until_refused(bootstrap: &Bootstrap) {
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let token = format!("{}.{}", bootstrap.token.id, bootstrap.token.secret);
    eventually("the revoked bootstrap token refused", WORKLOADS, || async {
        let r = http
            .get(format!("{}/api", bootstrap.server))
            .bearer_auth(&token)
            .send()
            .await
            .ok()?;
        (r.status() == reqwest::StatusCode::UNAUTHORIZED).then_some(())
    })
    .await;
}

/// A node started with a revoked token: no Node and no CSR for 30 s and until its log shows the
/// refusal (within [`NODE_READY`], what a node with a good token takes to be Ready).
async fn revoked_never_registers(base: &Path, tenant: &kube::Client, bootstrap: &Bootstrap) {
    let name = "e2e-hollow-revoked";
    let mut node = HollowNode::start(&base.join(name), name, bootstrap).unwrap();
    let nodes = Api::<Node>::all(tenant.clone());
    let start = Instant::now();
    loop {
        let _ = node.check_running();
        let found = connected(|| nodes.get_opt(name)).await.unwrap();
        let log = node.log();
        assert!(found.is_none(), "a node with a revoked token registered:\n{log}");
        let refused = log.contains("the server has asked for the client to provide credentials")
            || log.contains("Unauthorized");
        if refused && start.elapsed() >= Duration::from_secs(30) {
            break;
        }
        assert!(
            start.elapsed() < NODE_READY,
            "no refusal in the node's log after {NODE_READY:?}:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        !base.join(name).join("kubeconfig").exists(),
        "no kubeconfig without a bootstrap"
    );
    let (csrs, all) = (
        Api::<CertificateSigningRequest>::all(tenant.clone()),
        ListParams::default(),
    );
    let list = connected(|| csrs.list(&all)).await.unwrap();
    let from_revoked = list
        .items
        .iter()
        .filter(|c| c.spec.username.as_deref() == Some(&format!("system:bootstrap:{}", bootstrap.token.id)))
        .count();
    assert_eq!(
        from_revoked, 3,
        "only the three nodes' CSRs were made with the token"
    );
    node.stop();
    assert_eq!(node.leftovers(), Vec::<std::path::PathBuf>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_hollow_nodes_join_with_only_a_discovered_bootstrap_run_a_deployment_and_a_daemonset_and_a_revoked_token_never_registers()
 {
    let serving = serving("e2e-nodes", "nodes").await;
    let tenant = serving.tenant.clone();
    let (id, secret) = new_token();
    create_token(&tenant, &id, &secret).await;
    let join = join_command(
        &serving.endpoint,
        &format!("{id}.{secret}"),
        &ca_cert_hash(&serving.ca_pem),
    );
    let bootstrap = discover(&join).await.unwrap();
    assert_eq!(bootstrap.ca_pem, serving.ca_pem);
    assert_eq!(bootstrap.server, format!("https://{}", serving.endpoint));

    let base = localenv::scratch_dir("e2e-nodes").unwrap();
    let names: Vec<String> = (1..=3).map(|i| format!("e2e-hollow-{i}")).collect();
    let (mut nodes, _took) = start_ready(&base, &names, &bootstrap).await;

    // Each CSR was approved and signed by the tenant's controller-manager; each Node is Ready.
    let (all, delete) = (ListParams::default(), DeleteParams::default());
    let csrs = Api::<CertificateSigningRequest>::all(tenant.clone());
    let list = connected(|| csrs.list(&all)).await.unwrap();
    for node in &nodes {
        check_csr(&list.items, node, &id, &serving.ca_pem);
    }
    let node_api = Api::<Node>::all(tenant.clone());
    for name in &names {
        let node = connected(|| node_api.get(name)).await.unwrap();
        assert!(
            tenantplane_devenv::localenv::node::hollow::is_ready(&node),
            "{name}: {node:?}"
        );
    }

    // The scheduler spreads a Deployment of 6 over the three; a DaemonSet runs one pod on each.
    create_workloads(&tenant, "e2e-nodes").await;
    let ours: BTreeSet<String> = names.iter().cloned().collect();
    let web = eventually("6 web pods Running on all three nodes", WORKLOADS, || async {
        let per_node = running_per_node(&tenant, "e2e-nodes", "web").await;
        let spread = per_node.keys().cloned().collect::<BTreeSet<_>>() == ours;
        (per_node.values().sum::<usize>() == 6 && spread).then_some(per_node)
    })
    .await;
    println!("web pods per node: {web:?}");
    let agent = eventually("one agent pod Running per node", WORKLOADS, || async {
        let per_node = running_per_node(&tenant, "e2e-nodes", "agent").await;
        let one_each = per_node.len() == 3 && per_node.values().all(|n| *n == 1);
        (one_each && per_node.keys().cloned().collect::<BTreeSet<_>>() == ours).then_some(per_node)
    })
    .await;
    println!("agent pods per node: {agent:?}");

    // The addons run on them: CoreDNS 2/2, kube-proxy once per node, kube-dns at the tenth service
    // address, and the API reports AddonsReady.
    eventually("CoreDNS 2/2 and kube-proxy 3/3 Running", WORKLOADS, || async {
        let dns = running_on(&tenant, "k8s-app=kube-dns", &ours).await?;
        let proxy = running_on(&tenant, "k8s-app=kube-proxy", &ours).await?;
        (dns == 2 && proxy == 3).then_some(())
    })
    .await;
    let services = Api::<Service>::namespaced(tenant.clone(), "kube-system");
    let kube_dns = connected(|| services.get("kube-dns")).await.unwrap();
    assert_eq!(kube_dns.spec.unwrap().cluster_ip.as_deref(), Some("10.96.0.10"));
    let ready = eventually("AddonsReady True in the API", WORKLOADS, || async {
        let cp = serving.stack.get(0, &serving.id).await;
        let ready = cp["addons"]["ready"].clone();
        (ready["status"] == "True").then_some(ready)
    })
    .await;
    assert_eq!(
        ready["message"],
        "CoreDNS: 2/2 replicas available; kube-proxy: available on 3/3 nodes"
    );

    // A revoked token: once the apiserver refuses it (past its 10 s token cache), a new node never gets in.
    let secrets = Api::<Secret>::namespaced(tenant.clone(), "kube-system");
    let token_name = format!("bootstrap-token-{id}");
    connected(|| secrets.delete(&token_name, &delete)).await.unwrap();
    until_refused(&bootstrap).await;
    revoked_never_registers(&base, &tenant, &bootstrap).await;

    // Stop everything; the Node objects go; nothing is left behind (the runtime sockets are found with
    // iproute2's `ss`).
    let has_ss = std::process::Command::new("ss").arg("-V").output().is_ok();
    let mut leftovers = Vec::new();
    for node in &mut nodes {
        node.check_running().unwrap();
        let found = node.leftovers();
        let root = found
            .iter()
            .filter(|p| p.to_string_lossy().starts_with("/tmp/hollow-kubelet."));
        assert_eq!(root.count(), 1, "{}'s root directory: {found:?}", node.name());
        if has_ss {
            let socket = found
                .iter()
                .filter(|p| p.to_string_lossy().starts_with("/tmp/kubelet_remote_"));
            assert_eq!(socket.count(), 1, "{}'s runtime socket: {found:?}", node.name());
        }
        assert!(found.iter().all(|p| p.exists()), "{found:?}");
        leftovers.extend(found);
        node.stop();
    }
    for name in &names {
        connected(|| node_api.delete(name, &delete)).await.unwrap();
    }
    eventually("the Node objects gone", Duration::from_secs(30), || async {
        let list = connected(|| node_api.list(&all)).await.ok()?;
        list.items
            .iter()
            .all(|n| !ours.contains(n.metadata.name.as_deref().unwrap_or_default()))
            .then_some(())
    })
    .await;
    drop(nodes);
    let dir = base.to_string_lossy().into_owned();
    assert_eq!(
        support::processes_mentioning(&dir),
        Vec::<String>::new(),
        "kubemark left running"
    );
    let left: Vec<_> = leftovers.iter().filter(|p| p.exists()).collect();
    assert!(left.is_empty(), "left in /tmp: {left:?}");
    let _ = std::fs::remove_dir_all(&base);
    serving.stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn discovery_of_a_real_tenant_refuses_a_wrong_ca_hash_a_wrong_token_secret_and_an_unknown_token() {
    let serving = serving("e2e-discovery", "discovery").await;
    let (id, secret) = new_token();
    create_token(&serving.tenant, &id, &secret).await;
    let hash = ca_cert_hash(&serving.ca_pem);
    let endpoint = &serving.endpoint;

    // The right parts pass.
    let bootstrap = discover(&join_command(endpoint, &format!("{id}.{secret}"), &hash))
        .await
        .unwrap();
    assert_eq!(bootstrap.ca_pem, serving.ca_pem);

    // A CA hash that is not the tenant's.
    let wrong_hash = format!("sha256:{}", "0".repeat(64));
    match discover(&join_command(endpoint, &format!("{id}.{secret}"), &wrong_hash)).await {
        Err(NodeError::CaNotPinned { found, pinned }) => {
            assert_eq!((found, pinned), (hash.clone(), wrong_hash));
        }
        other => panic!("a wrong CA hash was not refused: {other:?}"),
    }

    // The right id with another secret: the signature does not verify.
    let wrong_secret: String = secret.chars().rev().collect();
    assert_ne!(wrong_secret, secret);
    match discover(&join_command(endpoint, &format!("{id}.{wrong_secret}"), &hash)).await {
        Err(NodeError::BadSignature { token_id, reason }) => {
            assert_eq!(
                (token_id.as_str(), reason.as_str()),
                (id.as_str(), "the HMAC does not match")
            );
        }
        other => panic!("a wrong token secret was not refused: {other:?}"),
    }

    // A token the tenant does not know: no signature appears.
    let (unknown, unknown_secret) = new_token();
    let command: JoinCommand = join_command(endpoint, &format!("{unknown}.{unknown_secret}"), &hash)
        .parse()
        .unwrap();
    match discover_with(&command, Duration::from_secs(3)).await {
        Err(NodeError::NoSignature { token_id, .. }) => assert_eq!(token_id, unknown),
        other => panic!("an unknown token was not refused: {other:?}"),
    }
    serving.stack.stop().await;
}
