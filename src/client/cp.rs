//! `tenantplane cp create|list|get|upgrade|scale|delete`: control planes of the tenant, by name or id.

use std::collections::BTreeMap;

use clap::Subcommand;
use serde_json::{Value, json};

use super::{
    config::Session,
    error::{ClientError, Result},
    op,
    output::{self, Format},
};
use crate::service::model::Accepted;

/// `tenantplane cp …`: the tenant's control planes.
#[derive(Debug, clap::Args)]
pub struct CpArgs {
    /// Tenant slug (default: the one saved by `login`).
    #[arg(long, env = "TENANTPLANE_TENANT", global = true)]
    tenant: Option<String>,
    #[command(subcommand)]
    command: CpCommand,
}

/// The control-plane subcommands.
#[derive(Debug, Subcommand)]
enum CpCommand {
    /// Create a control plane.
    Create(Box<CreateArgs>),
    /// List the tenant's control planes.
    List {
        /// Output format.
        #[arg(short, long, value_enum, default_value_t)]
        output: Format,
    },
    /// Print one control plane.
    Get {
        /// Name or id.
        name: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t)]
        output: Format,
    },
    /// Change the Kubernetes version (the same or the next minor).
    Upgrade {
        /// Name or id.
        name: String,
        /// The new version, `vX.Y.Z`.
        #[arg(long)]
        version: String,
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Change the number of API server replicas (0 puts it to sleep).
    Scale {
        /// Name or id.
        name: String,
        /// Replicas, 0 to 9.
        #[arg(long)]
        replicas: i32,
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Delete a control plane and its data.
    Delete {
        /// Name or id.
        name: String,
        #[command(flatten)]
        write: WriteArgs,
    },
}

/// What every change takes: whether to wait for its operation, and the output format.
#[derive(Debug, Clone, clap::Args)]
struct WriteArgs {
    /// Wait until the operation is done, showing its stages (Ctrl-C stops waiting, not the operation).
    #[arg(long)]
    wait: bool,
    /// Output format: the accepted change, or with --wait the finished operation.
    #[arg(short, long, value_enum, default_value_t)]
    output: Format,
}

/// `cp create`: the fields of `POST /tenants/{t}/control-planes`; unset ones take the server's defaults.
#[derive(Debug, Clone, clap::Args)]
struct CreateArgs {
    /// Name: a DNS-1035 label, unique in the tenant.
    name: String,
    /// Kubernetes version, `vX.Y.Z`.
    #[arg(long)]
    version: String,
    /// API server replicas, 0 to 9 (server default 2).
    #[arg(long)]
    replicas: Option<i32>,
    /// Service type: ClusterIP (default), NodePort or LoadBalancer.
    #[arg(long)]
    service_type: Option<String>,
    /// API server port (default 6443; with NodePort also the node port).
    #[arg(long)]
    port: Option<i32>,
    /// Size class: small (default), medium or large.
    #[arg(long)]
    size_class: Option<String>,
    /// DataStore pool to place it in.
    #[arg(long)]
    pool: Option<String>,
    /// A label the DataStore must have, `key=value` (repeatable).
    #[arg(long = "datastore-label", value_name = "KEY=VALUE")]
    datastore_labels: Vec<String>,
    /// An explicit DataStore (platform admins only).
    #[arg(long)]
    datastore: Option<String>,
    /// Events/leases offload: none (default), auto or pool:<name>.
    #[arg(long)]
    offload: Option<String>,
    /// Run Konnectivity.
    #[arg(long)]
    konnectivity: bool,
    /// Do not install CoreDNS.
    #[arg(long)]
    no_coredns: bool,
    /// Do not install kube-proxy.
    #[arg(long)]
    no_kube_proxy: bool,
    /// A label of the control plane, `key=value` (repeatable).
    #[arg(long = "label", value_name = "KEY=VALUE")]
    labels: Vec<String>,
    #[command(flatten)]
    write: WriteArgs,
}

/// `key=value` pairs as a map; `flag` names the option in the error.
fn pairs(flag: &str, items: &[String]) -> Result<BTreeMap<String, String>> {
    items
        .iter()
        .map(|item| match item.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(ClientError::Other(format!(
                "--{flag} {item:?}: must be key=value"
            ))),
        })
        .collect()
}

impl CreateArgs {
    /// The request body: only what was given, so the server's defaults apply to the rest.
    fn body(&self) -> Result<Value> {
        let mut body = json!({"name": self.name, "kubernetesVersion": self.version});
        let mut set = |key: &str, value: Option<Value>| {
            if let Some(value) = value {
                body[key] = value;
            }
        };
        set("replicas", self.replicas.map(Value::from));
        set("serviceType", self.service_type.clone().map(Value::from));
        set("port", self.port.map(Value::from));
        set("sizeClass", self.size_class.clone().map(Value::from));
        set("offload", self.offload.clone().map(Value::from));
        let mut datastore = serde_json::Map::new();
        if let Some(pool) = &self.pool {
            datastore.insert("pool".into(), pool.clone().into());
        }
        let labels = pairs("datastore-label", &self.datastore_labels)?;
        if !labels.is_empty() {
            datastore.insert("labels".into(), json!(labels));
        }
        if let Some(name) = &self.datastore {
            datastore.insert("name".into(), name.clone().into());
        }
        set(
            "datastore",
            (!datastore.is_empty()).then_some(Value::Object(datastore)),
        );
        let addons = self.konnectivity || self.no_coredns || self.no_kube_proxy;
        set(
            "addons",
            addons.then(|| {
                json!({"coreDNS": !self.no_coredns, "kubeProxy": !self.no_kube_proxy, "konnectivity": self.konnectivity})
            }),
        );
        let labels = pairs("label", &self.labels)?;
        set("labels", (!labels.is_empty()).then(|| json!(labels)));
        Ok(body)
    }
}

impl CpArgs {
    /// Runs the subcommand.
    pub async fn run(self) -> Result<()> {
        let session = Session::load(self.tenant)?;
        let tenant = session.tenant()?;
        let api = &session.api;
        match self.command {
            CpCommand::Create(args) => {
                let accepted = api.create(tenant, &args.body()?).await?;
                finish(&session, accepted, &args.write).await
            }
            CpCommand::List { output } => {
                let mut items = Vec::new();
                let mut cursor = None;
                loop {
                    let page = api.list(tenant, cursor.as_deref()).await?;
                    items.extend(page.items);
                    match page.next_cursor {
                        Some(next) => cursor = Some(next),
                        None => break,
                    }
                }
                output::print(output, &items, || output::control_planes(&items))
            }
            CpCommand::Get { name, output } => {
                let cp = api.get(tenant, &name).await?;
                output::print(output, &cp, || output::control_planes(std::slice::from_ref(&cp)))
            }
            CpCommand::Upgrade { name, version, write } => {
                let accepted = api
                    .update(tenant, &name, &json!({"kubernetesVersion": version}))
                    .await?;
                finish(&session, accepted, &write).await
            }
            CpCommand::Scale {
                name,
                replicas,
                write,
            } => {
                let accepted = api.update(tenant, &name, &json!({"replicas": replicas})).await?;
                finish(&session, accepted, &write).await
            }
            CpCommand::Delete { name, write } => {
                let accepted = api.delete(tenant, &name).await?;
                finish(&session, accepted, &write).await
            }
        }
    }
}

/// After a change was accepted: waits with `--wait`, then prints the outcome.
async fn finish(session: &Session, accepted: Accepted, write: &WriteArgs) -> Result<()> {
    let tenant = session.tenant()?;
    let name = accepted.control_plane.name.clone();
    let kind = accepted.operation.kind;
    let id = accepted.operation.id;
    if !write.wait {
        return output::print(write.output, &accepted, || {
            format!(
                "control plane {name}: {kind} accepted (operation {id}); wait for it with:\n  tenantplane op wait {id} --tenant {tenant}\n"
            )
        });
    }
    let label = format!("{kind} {name}");
    let done = op::wait(&session.api, tenant, accepted.operation, &label).await?;
    output::print(write.output, &done, || {
        format!(
            "control plane {name}: {kind} succeeded (operation {id}, stage {})\n",
            done.stage.map(|s| s.as_str()).unwrap_or("-")
        )
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Test {
        #[command(flatten)]
        create: CreateArgs,
    }

    fn body(args: &[&str]) -> Result<Value> {
        let mut argv = vec!["create"];
        argv.extend_from_slice(args);
        Test::try_parse_from(argv).unwrap().create.body()
    }

    #[test]
    fn a_minimal_create_sends_the_name_and_version_only() {
        assert_eq!(
            body(&["prod", "--version", "v1.34.4"]).unwrap(),
            json!({"name": "prod", "kubernetesVersion": "v1.34.4"})
        );
    }

    #[test]
    fn every_option_becomes_its_field() {
        let got = body(&[
            "prod",
            "--version",
            "v1.34.4",
            "--replicas",
            "1",
            "--service-type",
            "NodePort",
            "--port",
            "30443",
            "--size-class",
            "medium",
            "--pool",
            "etcd",
            "--datastore-label",
            "tier=gold",
            "--offload",
            "auto",
            "--no-kube-proxy",
            "--label",
            "env=prod",
            "--label",
            "team=a",
        ])
        .unwrap();
        assert_eq!(
            got,
            json!({"name": "prod", "kubernetesVersion": "v1.34.4", "replicas": 1, "serviceType": "NodePort",
                   "port": 30443, "sizeClass": "medium", "offload": "auto",
                   "datastore": {"pool": "etcd", "labels": {"tier": "gold"}},
                   "addons": {"coreDNS": true, "kubeProxy": false, "konnectivity": false},
                   "labels": {"env": "prod", "team": "a"}})
        );
    }

    #[test]
    fn a_label_without_equals_is_refused_naming_the_option() {
        assert_eq!(
            body(&["prod", "--version", "v1", "--label", "env"])
                .unwrap_err()
                .to_string(),
            r#"--label "env": must be key=value"#
        );
    }
}
