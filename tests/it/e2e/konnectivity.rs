//! Konnectivity end to end: a control plane with `addons.konnectivity` runs the real
//! konnectivity-server beside its kube-apiserver (through the runner), the in-tenant phase installs the
//! agents' objects, and a real konnectivity-agent (a local process, with a token of the agents'
//! ServiceAccount for the server's audience) connects through the tenant's published address. Then
//! `kubectl logs` of a pod on a hollow node goes apiserver → egress socket → server → agent → the
//! node's kubelet port: without an agent it fails with "No agent available"; with one, the dial
//! reaches the kubelet and the kubelet's answer comes back through the tunnel. That answer is plain
//! HTTP: kubemark's hollow kubelet serves no TLS (its server has no TLS options), so the apiserver's
//! TLS client reports that the kubelet answered in HTTP; the same request made in plain HTTP to the
//! kubelet returns the fake runtime's logs answer, which is what the apiserver would relay. A whole
//! answer does come back through the tunnel from the kubelet's read-only port (plain HTTP by design),
//! through the node proxy: the kubelet's own pod list.

use std::time::Duration;

use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment},
    authentication::v1::TokenRequest,
    core::v1::{Node, Pod, Service, ServiceAccount},
    rbac::v1::ClusterRoleBinding,
};
use kube::{
    Api,
    api::{DeleteParams, ListParams, LogParams, PostParams},
};
use serde_json::json;
use tenantplane_devenv::localenv::{
    self, assets,
    node::discover,
    ports,
    process::{ChildProcess, Spec},
};

use super::{
    connected,
    kubeadm::{ca_cert_hash, create_token, join_command, new_token},
    nodes::{serving_with, start_ready},
};
use crate::support::eventually;

/// The in-tenant phase's first pass, the agent's connect, the tunnel's answers.
const SETTLE: Duration = Duration::from_secs(90);

/// The error of `kubectl logs <pod> -c <container>` in kube-system, or its text when it succeeds.
async fn logs(tenant: &kube::Client, pod: &str, container: &str) -> Result<String, String> {
    let pods = Api::<Pod>::namespaced(tenant.clone(), "kube-system");
    let params = LogParams {
        container: Some(container.into()),
        ..LogParams::default()
    };
    pods.logs(pod, &params).await.map_err(|e| e.to_string())
}

/// `GET /api/v1/nodes/http:<node>:<port>/proxy/<path>` (the node proxy in plain HTTP): the body, or the
/// error.
async fn node_proxy(tenant: &kube::Client, node: &str, port: i32, path: &str) -> Result<String, String> {
    let request = axum::http::Request::get(format!("/api/v1/nodes/http:{node}:{port}/proxy/{path}"))
        .body(Vec::new())
        .unwrap();
    tenant.request_text(request).await.map_err(|e| e.to_string())
}

/// Whether a logs error is the apiserver's TLS client reading a plain-HTTP kubelet answer.
fn kubelet_answered_in_http(error: &str) -> bool {
    error.contains("first record does not look like a TLS handshake")
        || error.contains("server gave HTTP response to HTTPS client")
}

/// A token of `kube-system/konnectivity-agent` for the server's audience.
async fn agent_token(tenant: &kube::Client) -> String {
    let accounts = Api::<ServiceAccount>::namespaced(tenant.clone(), "kube-system");
    let request: TokenRequest = serde_json::from_value(json!({
        "spec": {"audiences": ["system:konnectivity-server"], "expirationSeconds": 3600},
    }))
    .unwrap();
    let post = PostParams::default();
    let issued = connected(|| accounts.create_token_request("konnectivity-agent", &post, &request))
        .await
        .unwrap();
    issued.status.unwrap().token
}

/// The agent pod of the DaemonSet on `node`, once the fake runtime reports it Running.
async fn agent_pod_on(tenant: &kube::Client, node: &str) -> String {
    let pods = Api::<Pod>::namespaced(tenant.clone(), "kube-system");
    let params = ListParams::default().labels("k8s-app=konnectivity-agent");
    eventually(
        "a konnectivity-agent pod Running on the hollow node",
        SETTLE,
        || async {
            let list = connected(|| pods.list(&params)).await.ok()?;
            list.items.into_iter().find_map(|p| {
                let on_node = p.spec.as_ref()?.node_name.as_deref() == Some(node);
                let running = p.status.as_ref()?.phase.as_deref() == Some("Running");
                (on_node && running).then(|| p.metadata.name.clone())?
            })
        },
    )
    .await
}

/// A real konnectivity-agent dialling the tenant's published Konnectivity port.
struct Agent {
    process: ChildProcess,
    health: ports::PortClaim,
    _admin: ports::PortClaim,
}

impl Agent {
    fn start(dir: &std::path::Path, endpoint: &str, ca_pem: &str, token: &str) -> Self {
        let program = assets::versioned_binary("konnectivity-agent", "v0.34.0").unwrap();
        std::fs::write(dir.join("ca.crt"), ca_pem).unwrap();
        std::fs::write(dir.join("token"), token).unwrap();
        let (health, admin) = (ports::claim().unwrap(), ports::claim().unwrap());
        let host = endpoint.rsplit_once(':').unwrap().0;
        let spec = Spec::new("konnectivity-agent", program).args([
            format!("--proxy-server-host={host}"),
            "--proxy-server-port=8132".into(),
            format!("--ca-cert={}", dir.join("ca.crt").display()),
            format!("--service-account-token-path={}", dir.join("token").display()),
            format!("--health-server-port={}", health.port()),
            format!("--admin-server-port={}", admin.port()),
            "--agent-id=e2e-agent".into(),
        ]);
        let process = ChildProcess::spawn(&spec, &dir.join("agent.log")).unwrap();
        Self {
            process,
            health,
            _admin: admin,
        }
    }

    /// Waits until the agent reports a server connection (`/readyz`).
    async fn connected(&mut self) {
        let url = format!("http://127.0.0.1:{}/readyz", self.health.port());
        let process = &mut self.process;
        let ready = tokio::time::timeout(SETTLE, async {
            loop {
                if let Err(exited) = process.check_running() {
                    return Err(exited.to_string());
                }
                let ok = reqwest::get(&url).await.map(|r| r.status().is_success());
                if ok.unwrap_or(false) {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
        .await;
        match ready {
            Ok(Ok(())) => {}
            Ok(Err(exited)) => panic!("the agent exited: {exited}"),
            Err(_) => panic!(
                "the agent did not connect in {SETTLE:?}:\n{}",
                self.process.log_tail(30)
            ),
        }
    }
}

/// The server's log (the runner's log of the `konnectivity-server` container).
fn server_log(serving: &super::nodes::Serving, name: &str) -> String {
    let ns = &serving.stack.tenants[0].namespace;
    serving
        .stack
        .runner
        .logs(ns, name)
        .iter()
        .filter(|p| p.to_string_lossy().contains("konnectivity-server"))
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubelet_traffic_of_the_apiserver_goes_through_a_real_konnectivity_server_and_agent() {
    let name = "konn";
    let serving = serving_with(
        "e2e-konnectivity",
        name,
        json!({"addons": {"coreDNS": false, "kubeProxy": false, "konnectivity": true}}),
    )
    .await;
    let (stack, tenant) = (&serving.stack, serving.tenant.clone());
    let ns = &stack.tenants[0].namespace;

    // The management side: the sidecar in the pod template, the Service port, the server running.
    let deployment = Api::<Deployment>::namespaced(stack.kube.clone(), ns)
        .get(name)
        .await
        .unwrap();
    let containers: Vec<String> = deployment
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(
        containers,
        [
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "konnectivity-server"
        ]
    );
    let service = Api::<Service>::namespaced(stack.kube.clone(), ns)
        .get(name)
        .await
        .unwrap();
    let ports: Vec<i32> = service
        .spec
        .unwrap()
        .ports
        .unwrap()
        .iter()
        .map(|p| p.port)
        .collect();
    assert_eq!(ports, [6443, 8132]);
    let log = eventually("the server listening for agents", SETTLE, || async {
        let log = server_log(&serving, name);
        log.contains("Starting agent server for tunnel connections")
            .then_some(log)
    })
    .await;
    assert!(
        log.contains("Starting frontend server for client connections"),
        "{log}"
    );

    // The tenant side: the agents' ServiceAccount, the server's review binding, the DaemonSet.
    let bindings = Api::<ClusterRoleBinding>::all(tenant.clone());
    let binding = eventually("the in-tenant phase's Konnectivity objects", SETTLE, || async {
        connected(|| bindings.get_opt("system:konnectivity-server"))
            .await
            .ok()?
    })
    .await;
    assert_eq!(binding.role_ref.name, "system:auth-delegator");
    // The DaemonSet comes later in the same pass than the binding.
    let daemon_sets = Api::<DaemonSet>::namespaced(tenant.clone(), "kube-system");
    let ds = eventually("the agents' DaemonSet", SETTLE, || async {
        connected(|| daemon_sets.get_opt("konnectivity-agent"))
            .await
            .ok()?
    })
    .await;
    let args = ds.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    let host = serving.endpoint.rsplit_once(':').unwrap().0;
    assert!(args.contains(&format!("--proxy-server-host={host}")), "{args:?}");
    assert!(args.contains(&"--proxy-server-port=8132".to_string()), "{args:?}");

    // One hollow node; the DaemonSet's pod runs on it (in the fake runtime).
    let (id, secret) = new_token();
    create_token(&tenant, &id, &secret).await;
    let join = join_command(
        &serving.endpoint,
        &format!("{id}.{secret}"),
        &ca_cert_hash(&serving.ca_pem),
    );
    let bootstrap = discover(&join).await.unwrap();
    let base = localenv::scratch_dir("e2e-konnectivity").unwrap();
    let node_name = "e2e-konn-node".to_string();
    let (mut nodes, _) = start_ready(&base, std::slice::from_ref(&node_name), &bootstrap).await;
    let pod = agent_pod_on(&tenant, &node_name).await;

    // The API reports the addon installed once its agents are available.
    eventually(
        "addons.konnectivity installed and AddonsReady",
        SETTLE,
        || async {
            let cp = stack.get(0, &serving.id).await;
            let addons = &cp["addons"];
            (addons["konnectivity"]["installed"] == true && addons["ready"]["status"] == "True").then_some(())
        },
    )
    .await;

    // No agent connected: the apiserver's dial has nowhere to go.
    let error = logs(&tenant, &pod, "konnectivity-agent").await.unwrap_err();
    assert!(error.contains("No agent available"), "{error}");

    // A real agent connects through the published port and the dial reaches the kubelet.
    let agent_dir = base.join("agent");
    std::fs::create_dir_all(&agent_dir).unwrap();
    let token = agent_token(&tenant).await;
    let mut agent = Agent::start(&agent_dir, &serving.endpoint, &serving.ca_pem, &token);
    agent.connected().await;
    let error = eventually("the kubelet's answer through the tunnel", SETTLE, || async {
        let error = logs(&tenant, &pod, "konnectivity-agent").await.unwrap_err();
        kubelet_answered_in_http(&error).then_some(error)
    })
    .await;
    println!("kubectl logs through the tunnel: {error}");
    let node_api = Api::<Node>::all(tenant.clone());
    let node = connected(|| node_api.get(&node_name)).await.unwrap();
    let status = node.status.unwrap();
    let internal_ip = status
        .addresses
        .unwrap()
        .into_iter()
        .find(|a| a.type_ == "InternalIP")
        .unwrap()
        .address;
    let kubelet_port = status.daemon_endpoints.unwrap().kubelet_endpoint.unwrap().port;
    assert_eq!(kubelet_port, i32::from(nodes[0].ports().0));
    let dial = format!("dialAddress=\"{internal_ip}:{kubelet_port}\"");
    let agent_log = std::fs::read_to_string(agent_dir.join("agent.log")).unwrap();
    assert!(
        agent_log
            .lines()
            .any(|l| l.contains("Endpoint connection established") && l.contains(&dial)),
        "the agent dialled the kubelet at {internal_ip}:{kubelet_port}:\n{agent_log}"
    );
    let server = server_log(&serving, name);
    assert!(server.contains("Agent connected"), "{server}");
    assert!(
        server
            .lines()
            .any(|l| l.contains("Received DIAL_REQ") && l.contains(&dial)),
        "{server}"
    );

    // What the kubelet answers to the same request in plain HTTP: the fake runtime's logs answer (its
    // containers have no log file).
    let logs_path = format!("containerLogs/kube-system/{pod}/konnectivity-agent");
    let direct = reqwest::get(format!("http://{internal_ip}:{kubelet_port}/{logs_path}"))
        .await
        .unwrap();
    let (code, direct) = (direct.status().as_u16(), direct.text().await.unwrap_or_default());
    println!("the hollow kubelet's own answer over HTTP: {code} {direct:?}");
    assert_eq!(code, 200, "{direct}");
    assert!(direct.starts_with("failed to read log file"), "{direct}");

    // A whole answer through the tunnel: the node proxy on the kubelet's read-only port, which is plain
    // HTTP by design (on the kubelet port the proxy always speaks TLS), returns the kubelet's pod list,
    // with the agent's pod in it; unless the node's address is loopback, which kube-apiserver's proxy
    // refuses before any dial.
    let read_only = i32::from(nodes[0].ports().1);
    let proxied = node_proxy(&tenant, &node_name, read_only, "pods").await;
    let loopback = internal_ip
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        let refused = proxied.unwrap_err();
        assert!(refused.contains("address not allowed"), "{refused}");
    } else {
        let pods: serde_json::Value = serde_json::from_str(&proxied.unwrap()).unwrap();
        let names: Vec<&str> = pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["metadata"]["name"].as_str())
            .collect();
        assert!(
            names.contains(&pod.as_str()),
            "the kubelet's pods through the tunnel: {names:?}"
        );
        let read_only_dial = format!("dialAddress=\"{internal_ip}:{read_only}\"");
        let agent_log = std::fs::read_to_string(agent_dir.join("agent.log")).unwrap();
        assert!(
            agent_log
                .lines()
                .any(|l| l.contains("Endpoint connection established") && l.contains(&read_only_dial)),
            "{agent_log}"
        );
    }

    // The agent gone: the tunnel has no way out again.
    agent.process.stop(Duration::from_secs(1));
    eventually("No agent available once the agent is gone", SETTLE, || async {
        let error = logs(&tenant, &pod, "konnectivity-agent").await.err()?;
        error.contains("No agent available").then_some(())
    })
    .await;
    for node in &mut nodes {
        node.stop();
    }
    let delete = DeleteParams::default();
    connected(|| node_api.delete(&node_name, &delete)).await.unwrap();
    drop(nodes);
    let _ = std::fs::remove_dir_all(&base);
    serving.stack.stop().await;
}
