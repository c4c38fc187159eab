//! `tenantplane-dev join '<kubeadm join command>'`: discovery, one hollow node, wait until it is Ready,
//! run until Ctrl-C, then stop it and delete its Node object.

use std::{path::PathBuf, time::Duration};

use k8s_openapi::api::core::v1::Node;

use super::{HollowNode, JoinCommand, ca_cert_hash, discover_with};

/// Options of [`join`].
#[derive(Debug, Clone)]
pub struct JoinOptions {
    /// The `kubeadm join …` command line.
    pub command: String,
    /// The node's name (default: the command's `--node-name`, else `hollow-<random>`).
    pub name: Option<String>,
    /// Where the node's directory goes (default: a scratch directory, removed at the end).
    pub dir: Option<PathBuf>,
    /// A kubeconfig of the tenant allowed to delete Nodes; without it the node's own credentials try.
    pub tenant_kubeconfig: Option<PathBuf>,
    /// How long discovery and the way to Ready may each take.
    pub timeout: Duration,
}

/// `hollow-<8 random hex digits>`.
pub fn random_name() -> String {
    format!("hollow-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

/// Runs the join: prints `Node <name> joining <endpoint>` and `Node <name> Ready after <secs> s` on
/// stdout, progress on stderr; returns after Ctrl-C (or SIGTERM) once the node is stopped.
pub async fn join(options: JoinOptions) -> anyhow::Result<()> {
    let command: JoinCommand = options.command.parse()?;
    for flag in &command.ignored {
        eprintln!("[join] ignoring {flag} (no meaning for a hollow node)");
    }
    eprintln!("[join] discovery: cluster-info from {}", command.endpoint);
    let bootstrap = discover_with(&command, options.timeout).await?;
    eprintln!(
        "[join] cluster-info is signed with token {} and its CA is pinned ({}); API server {}",
        bootstrap.token.id,
        ca_cert_hash(&bootstrap.ca_pem)?,
        bootstrap.server
    );
    let name = options
        .name
        .clone()
        .or(command.node_name.clone())
        .unwrap_or_else(random_name);
    let (base, scratch) = match &options.dir {
        Some(dir) => (dir.clone(), false),
        None => (crate::localenv::scratch_dir("join")?, true),
    };
    println!("Node {name} joining {}", bootstrap.endpoint);
    let mut node = HollowNode::start(&base.join(&name), &name, &bootstrap)?;
    eprintln!(
        "[join] kubemark pid {}, kubelet port {}, log {}",
        node.pid(),
        node.ports().0,
        node.log_path().display()
    );
    let outcome = tokio::select! {
        ready = node.wait_ready(options.timeout) => Some(ready),
        () = crate::localenv::shutdown_signal() => None,
    };
    let result = match outcome {
        Some(Ok(took)) => {
            println!("Node {name} Ready after {:.1} s", took.as_secs_f64());
            eprintln!("[join] running; Ctrl-C stops it");
            crate::localenv::shutdown_signal().await;
            Ok(())
        }
        Some(Err(err)) => Err(err.into()),
        None => Ok(()),
    };
    eprintln!("[join] stopping {name}");
    let client = node.client().await.ok().flatten();
    node.stop();
    delete_node(&name, client, options.tenant_kubeconfig.as_deref()).await;
    if scratch {
        let _ = std::fs::remove_dir_all(&base);
        // The per-process work directory too, when nothing else is in it.
        if let Some(parent) = base.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
    result
}

/// Deletes Node `name` with the tenant kubeconfig if given, else with the node's own `client`, and
/// says what happened.
async fn delete_node(name: &str, own: Option<kube::Client>, tenant_kubeconfig: Option<&std::path::Path>) {
    let (client, whose) = match tenant_kubeconfig {
        Some(path) => match tenantplane_crd::client(Some(path)).await {
            Ok(client) => (client, format!("the kubeconfig {}", path.display())),
            Err(err) => {
                eprintln!("[join] Node {name} stays in the tenant: {err:#}");
                return;
            }
        },
        None => match own {
            Some(client) => (client, format!("the node's own credentials (system:node:{name})")),
            None => {
                eprintln!("[join] Node {name} never registered: nothing to delete");
                return;
            }
        },
    };
    let nodes = kube::Api::<Node>::all(client);
    match nodes.delete(name, &Default::default()).await {
        Ok(_) => println!("Node {name} stopped and deleted"),
        Err(kube::Error::Api(e)) if e.code == 404 => println!("Node {name} stopped (no Node object)"),
        Err(kube::Error::Api(e)) if e.code == 403 && tenant_kubeconfig.is_none() => println!(
            "Node {name} stopped; its Node object stays: {whose} may not delete Nodes (the Node authorizer \
             gives nodes no delete). Delete it with the tenant's admin kubeconfig (`kubectl delete node {name}`) \
             or pass --tenant-kubeconfig"
        ),
        Err(e) => println!("Node {name} stopped; deleting its Node object with {whose} failed: {e}"),
    }
}
