//! The Helm chart `charts/tenantplane` and `docker-compose.yml`: `helm lint` is clean, upstream Kamaji's
//! alternative-datastore `--set` lines render the DataStore they describe, the values schema rejects
//! typos, the chart installs into the shared kube-apiserver with every object present, serve and the
//! worker are granted exactly what they use (the installed worker, impersonated, applies tenant namespaces
//! with its labels and nothing else), serve's NetworkPolicy admits tenant control planes to the credential
//! issuer's port, and the compose file wires its services with healthchecks.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde::Deserialize as _;
use serde_yaml::Value;
use tenantplane::k8s::crd::{
    BasicAuth, CertificateAuthority, ClientCertificate, ContentRef, DataStore, Driver, SecretReference,
    TenantControlPlane, TlsConfig,
};
use tenantplane_devenv::localenv;

use crate::support::{self, kubectl};

/// The `--set` lines of upstream Kamaji's alternative-datastore guide, unchanged.
const UPSTREAM_DATASTORE_SETS: &[&str] = &[
    "datastore.driver=PostgreSQL",
    "datastore.endpoints[0]=postgres-default-rw.kamaji-system.svc:5432",
    "datastore.basicAuth.usernameSecret.name=postgres-default-superuser",
    "datastore.basicAuth.usernameSecret.namespace=kamaji-system",
    "datastore.basicAuth.usernameSecret.keyPath=username",
    "datastore.basicAuth.passwordSecret.name=postgres-default-superuser",
    "datastore.basicAuth.passwordSecret.namespace=kamaji-system",
    "datastore.basicAuth.passwordSecret.keyPath=password",
    "datastore.tlsConfig.certificateAuthority.certificate.name=postgres-default-ca",
    "datastore.tlsConfig.certificateAuthority.certificate.namespace=kamaji-system",
    "datastore.tlsConfig.certificateAuthority.certificate.keyPath=ca.crt",
    "datastore.tlsConfig.certificateAuthority.privateKey.name=postgres-default-ca",
    "datastore.tlsConfig.certificateAuthority.privateKey.namespace=kamaji-system",
    "datastore.tlsConfig.certificateAuthority.privateKey.keyPath=ca.key",
    "datastore.tlsConfig.clientCertificate.certificate.name=postgres-default-root-cert",
    "datastore.tlsConfig.clientCertificate.certificate.namespace=kamaji-system",
    "datastore.tlsConfig.clientCertificate.certificate.keyPath=tls.crt",
    "datastore.tlsConfig.clientCertificate.privateKey.name=postgres-default-root-cert",
    "datastore.tlsConfig.clientCertificate.privateKey.namespace=kamaji-system",
    "datastore.tlsConfig.clientCertificate.privateKey.keyPath=tls.key",
    "kamaji-etcd.deploy=false",
];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> String {
    repo().join("charts/tenantplane").display().to_string()
}

/// Helm's cache, config and data directories, private to this test run.
fn helm_home() -> &'static PathBuf {
    static HOME: OnceLock<PathBuf> = OnceLock::new();
    HOME.get_or_init(|| localenv::scratch_dir("helm").expect("helm scratch dir"))
}

/// Runs the cached helm with `args`; returns (success, stdout, stderr).
fn helm(args: &[&str]) -> (bool, String, String) {
    let helm = localenv::assets::binary("helm").unwrap_or_else(|e| panic!("{e}"));
    let home = helm_home();
    let out = Command::new(helm)
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .expect("run helm");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// `--set a --set b …`.
fn sets<'a>(values: &[&'a str]) -> Vec<&'a str> {
    values.iter().flat_map(|v| ["--set", v]).collect()
}

/// The non-empty YAML documents of a multi-document stream.
fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| Value::deserialize(doc).expect("valid YAML document"))
        .filter(|v| !v.is_null())
        .collect()
}

fn kind_of(doc: &Value) -> &str {
    doc["kind"].as_str().unwrap_or_default()
}

fn name_of(doc: &Value) -> &str {
    doc["metadata"]["name"].as_str().unwrap_or_default()
}

fn secret(name: &str, key_path: &str) -> ContentRef {
    ContentRef {
        content: None,
        secret_reference: Some(SecretReference {
            name: name.into(),
            namespace: "kamaji-system".into(),
            key_path: key_path.into(),
        }),
    }
}

/// What upstream's alternative-datastore guide describes.
fn assert_upstream_datastore(ds: &DataStore) {
    assert_eq!(ds.spec.driver, Driver::PostgreSQL);
    assert_eq!(
        ds.spec.endpoints,
        vec!["postgres-default-rw.kamaji-system.svc:5432".to_string()]
    );
    assert_eq!(
        ds.spec.basic_auth,
        Some(BasicAuth {
            username: secret("postgres-default-superuser", "username"),
            password: secret("postgres-default-superuser", "password"),
        })
    );
    assert_eq!(
        ds.spec.tls_config,
        Some(TlsConfig {
            certificate_authority: CertificateAuthority {
                certificate: secret("postgres-default-ca", "ca.crt"),
                private_key: Some(secret("postgres-default-ca", "ca.key")),
            },
            client_certificate: Some(ClientCertificate {
                certificate: secret("postgres-default-root-cert", "tls.crt"),
                private_key: secret("postgres-default-root-cert", "tls.key"),
            }),
        })
    );
}

#[test]
fn helm_lint_is_clean_with_defaults_and_with_every_option_on() {
    let chart = chart();
    let (ok, out, err) = helm(&["lint", "--strict", &chart]);
    assert!(
        ok && !out.contains("[ERROR]") && !out.contains("[WARNING]"),
        "{out}{err}"
    );

    let options = [
        "serve.autoscaling.enabled=true",
        "serve.ingress.enabled=true",
        "networkPolicy.enabled=true",
        "serviceMonitor.enabled=true",
        "controller.watchNamespace=tenants",
        "database.existingSecret=tenantplane-db",
        "auth.existingSecret=tenantplane-auth",
        "worker.replicas=3",
    ];
    let mut args = vec!["lint", "--strict", chart.as_str()];
    args.extend(sets(&options));
    args.extend(sets(UPSTREAM_DATASTORE_SETS));
    let (ok, out, err) = helm(&args);
    assert!(
        ok && !out.contains("[ERROR]") && !out.contains("[WARNING]"),
        "{out}{err}"
    );
}

#[test]
fn upstream_alternative_datastore_sets_render_the_datastore_they_describe() {
    let chart = chart();
    let mut args = vec!["template", "tp", chart.as_str(), "--namespace", "kamaji-system"];
    args.extend(sets(UPSTREAM_DATASTORE_SETS));
    let (ok, out, err) = helm(&args);
    assert!(ok, "helm template failed: {err}");
    let docs = documents(&out);

    let datastores: Vec<&Value> = docs.iter().filter(|d| kind_of(d) == "DataStore").collect();
    assert_eq!(datastores.len(), 1, "one DataStore expected in:\n{out}");
    assert_eq!(
        datastores[0]["apiVersion"].as_str(),
        Some("kamaji.clastix.io/v1alpha1")
    );
    let ds: DataStore = serde_yaml::from_value(datastores[0].clone()).expect("a DataStore");
    assert_eq!(ds.metadata.name.as_deref(), Some("default"));
    assert_eq!(ds.metadata.namespace, None, "DataStores are cluster-scoped");
    assert_upstream_datastore(&ds);

    // The controller gets it as its default; it runs leader-elected in the release namespace.
    let controller = docs
        .iter()
        .find(|d| kind_of(d) == "Deployment" && name_of(d) == "tp-tenantplane-controller")
        .expect("controller Deployment");
    let container = &controller["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(args.contains(&"--leader-election=true"), "{args:?}");
    assert!(
        args.contains(&"--leader-election-namespace=kamaji-system"),
        "{args:?}"
    );
    assert_eq!(args.last(), Some(&"--default-datastore=default"), "{args:?}");

    // No etcd is deployed whatever kamaji-etcd.deploy says.
    assert!(
        !out.contains("kamaji-etcd"),
        "kamaji-etcd must be ignored, found it in:\n{out}"
    );
}

/// `helm template tp <chart> --namespace kamaji-system` with `extra` (`--set …` pairs); panics on failure.
fn render(extra: &[&str]) -> Vec<Value> {
    let chart = chart();
    let mut args = vec!["template", "tp", chart.as_str(), "--namespace", "kamaji-system"];
    args.extend(extra);
    let (ok, out, err) = helm(&args);
    assert!(ok, "helm template {extra:?} failed: {err}");
    documents(&out)
}

/// The controller container's args and the names of its env variables.
fn controller_args_and_env(docs: &[Value]) -> (Vec<String>, Vec<String>) {
    let controller = docs
        .iter()
        .find(|d| kind_of(d) == "Deployment" && name_of(d) == "tp-tenantplane-controller")
        .expect("controller Deployment");
    let container = &controller["spec"]["template"]["spec"]["containers"][0];
    let strings = |list: &Value, field: Option<&str>| -> Vec<String> {
        list.as_sequence()
            .unwrap()
            .iter()
            .map(|v| field.map_or(v, |f| &v[f]).as_str().unwrap().to_string())
            .collect()
    };
    (
        strings(&container["args"], None),
        strings(&container["env"], Some("name")),
    )
}

/// The controller's args with the default values, then `tail`.
fn controller_args_with(tail: &[&str]) -> Vec<String> {
    [
        "controller",
        "--leader-election=true",
        "--leader-election-name=tp-tenantplane-controller",
        "--leader-election-namespace=kamaji-system",
        "--state-namespace=kamaji-system",
        "--concurrency=4",
        "--in-tenant=true",
        "--in-tenant-resync-secs=60",
        "--metrics-listen=0.0.0.0:8081",
    ]
    .iter()
    .chain(tail)
    .map(|s| s.to_string())
    .collect()
}

/// Names of the rendered DataStores.
fn datastore_names(docs: &[Value]) -> Vec<&str> {
    docs.iter()
        .filter(|d| kind_of(d) == "DataStore")
        .map(name_of)
        .collect()
}

#[test]
fn kamaji_default_datastore_name_and_datastore_name_override_set_the_controller_default() {
    let with_upstream = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut args = sets(UPSTREAM_DATASTORE_SETS);
        args.extend(sets(extra));
        args
    };
    // (values, the DataStores rendered, the controller's default-DataStore flag)
    let cases: [(Vec<&str>, Vec<&str>, Option<&str>); 6] = [
        // Kamaji's defaultDatastoreName names an existing DataStore; the chart renders none (no endpoints).
        (sets(&["defaultDatastoreName=gold"]), vec![], Some("gold")),
        (
            sets(&["datastore.enabled=false", "defaultDatastoreName=gold"]),
            vec![],
            Some("gold"),
        ),
        // Without either, datastore.name (default `default`) is the default while datastore.enabled.
        (vec![], vec![], Some("default")),
        (sets(&["datastore.enabled=false"]), vec![], None),
        // Kamaji's datastore.nameOverride renames the DataStore the chart creates, which is the default.
        (
            with_upstream(&["datastore.nameOverride=silver"]),
            vec!["silver"],
            Some("silver"),
        ),
        // Both: the chart creates silver, and TenantControlPlanes without spec.dataStore get gold.
        (
            with_upstream(&["datastore.nameOverride=silver", "defaultDatastoreName=gold"]),
            vec!["silver"],
            Some("gold"),
        ),
    ];
    for (values, datastores, default) in cases {
        let docs = render(&values);
        assert_eq!(datastore_names(&docs), datastores, "{values:?}");
        let (args, env) = controller_args_and_env(&docs);
        let flag = default.map(|d| format!("--default-datastore={d}"));
        assert_eq!(
            args,
            controller_args_with(&flag.as_deref().into_iter().collect::<Vec<_>>()),
            "{values:?}"
        );
        assert_eq!(
            env,
            [
                "TENANTPLANE_LOG_FORMAT",
                "RUST_LOG",
                "POD_NAME",
                "TENANTPLANE_IDENTITY"
            ],
            "{values:?}"
        );
    }
    // The renamed DataStore is still the one upstream's --set lines describe.
    let docs = render(&with_upstream(&["datastore.nameOverride=silver"]));
    let ds = docs.iter().find(|d| kind_of(d) == "DataStore").unwrap();
    let ds: DataStore = serde_yaml::from_value(ds.clone()).expect("a DataStore");
    assert_eq!(ds.metadata.name.as_deref(), Some("silver"));
    assert_upstream_datastore(&ds);
}

#[test]
fn kamaji_default_datastore_values_of_a_wrong_type_or_no_dns_name_are_refused_by_the_schema() {
    let chart = chart();
    for (flag, set, error) in [
        (
            "--set",
            "defaultDatastoreName=5",
            "- at '/defaultDatastoreName': got number, want string",
        ),
        (
            "--set-json",
            r#"defaultDatastoreName=["gold"]"#,
            "- at '/defaultDatastoreName': got array, want string",
        ),
        (
            "--set",
            "datastore.nameOverride=true",
            "- at '/datastore/nameOverride': got boolean, want string",
        ),
        (
            "--set",
            "defaultDatastoreName=Gold_1",
            "- at '/defaultDatastoreName': 'Gold_1' does not match pattern",
        ),
        (
            "--set",
            "datastore.nameOverride=silver.",
            "- at '/datastore/nameOverride': 'silver.' does not match pattern",
        ),
    ] {
        let (ok, out, err) = helm(&["template", "tp", &chart, flag, set]);
        assert!(!ok, "{flag} {set} was accepted:\n{out}");
        assert!(
            err.contains("don't meet the specifications of the schema") && err.contains(error),
            "{flag} {set}: expected {error:?} in:\n{err}"
        );
    }
}

#[test]
fn hardened_pods_and_no_fixed_replicas_under_autoscaling() {
    let chart = chart();
    let (ok, out, err) = helm(&[
        "template",
        "tp",
        &chart,
        "--set",
        "serve.autoscaling.enabled=true",
    ]);
    assert!(ok, "{err}");
    let docs = documents(&out);
    let deployments: Vec<&Value> = docs.iter().filter(|d| kind_of(d) == "Deployment").collect();
    assert_eq!(deployments.len(), 3);
    for d in &deployments {
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(
            pod["securityContext"]["runAsNonRoot"],
            Value::Bool(true),
            "{}",
            name_of(d)
        );
        let c = &pod["containers"][0];
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], Value::Bool(true));
        assert_eq!(
            c["securityContext"]["allowPrivilegeEscalation"],
            Value::Bool(false)
        );
        assert_eq!(c["securityContext"]["capabilities"]["drop"][0], "ALL");
        assert!(c["resources"]["requests"]["cpu"].is_string(), "{}", name_of(d));
    }
    let serve = deployments
        .iter()
        .find(|d| name_of(d) == "tp-tenantplane-serve")
        .unwrap();
    assert!(serve["spec"].get("replicas").is_none(), "the HPA owns replicas");
    let probes = &serve["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(probes["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(probes["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(docs.iter().any(|d| kind_of(d) == "HorizontalPodAutoscaler"));

    let job = docs.iter().find(|d| kind_of(d) == "Job").expect("migrations Job");
    assert_eq!(
        job["spec"]["template"]["spec"]["containers"][0]["args"][0],
        "migrate"
    );
    // The default values use the bundled PostgreSQL, which exists only after the install.
    assert_eq!(
        job["metadata"]["annotations"]["helm.sh/hook"],
        "post-install,pre-upgrade"
    );
    let (ok, out, err) = helm(&["template", "tp", &chart, "--set", "database.existingSecret=db"]);
    assert!(ok, "{err}");
    let job = documents(&out).into_iter().find(|d| kind_of(d) == "Job").unwrap();
    assert_eq!(
        job["metadata"]["annotations"]["helm.sh/hook"],
        "pre-install,pre-upgrade"
    );
    assert!(
        !out.contains("kind: StatefulSet"),
        "no bundled PostgreSQL with an existing Secret"
    );
}

#[test]
fn values_typos_are_rejected_by_the_schema_naming_the_field() {
    let chart = chart();
    for (set, field, at) in [
        ("datastroe.driver=etcd", "datastroe", "at ''"),
        ("serve.replicaCount=2", "replicaCount", "/serve"),
        (
            "datastore.basicAuth.usernameSecret.nmae=x",
            "nmae",
            "/datastore/basicAuth/usernameSecret",
        ),
        (
            "datastore.tlsConfig.clientCertificate.privateKey.keypath=tls.key",
            "keypath",
            "/datastore/tlsConfig/clientCertificate/privateKey",
        ),
    ] {
        let (ok, out, err) = helm(&["template", "tp", &chart, "--set", set]);
        assert!(!ok, "--set {set} was accepted:\n{out}");
        assert!(
            err.contains("don't meet the specifications of the schema")
                && err.contains(field)
                && err.contains(at),
            "--set {set}: {err}"
        );
    }
    // A driver outside Kamaji's enum is refused too (the spelling is case-sensitive).
    let (ok, _, err) = helm(&["template", "tp", &chart, "--set", "datastore.driver=postgresql"]);
    assert!(!ok && err.contains("/datastore/driver"), "{err}");
}

#[test]
fn external_issuers_render_into_a_configmap_that_serve_reads() {
    let chart = chart();
    let issuers = r#"[{"issuer":"https://login.example.com","audience":"tenantplane","tenantClaim":"org.tenant","roleClaim":"groups","roleMap":{"devs":"tenant-member"}}]"#;
    let set = format!("auth.externalIssuers={issuers}");
    let (ok, out, err) = helm(&["template", "tp", &chart, "--set-json", &set]);
    assert!(ok, "{err}");
    let docs = documents(&out);
    let config_map = docs
        .iter()
        .find(|d| kind_of(d) == "ConfigMap" && name_of(d) == "tp-tenantplane-oidc-issuers")
        .expect("the issuers ConfigMap");
    // The rendered file is what `serve` loads, and it passes the same validation.
    let file = config_map["data"]["issuers.yaml"].as_str().unwrap();
    let dir = localenv::scratch_dir("helm-oidc").unwrap();
    let path = dir.join("issuers.yaml");
    std::fs::write(&path, file).unwrap();
    let loaded = tenantplane::auth::external::load(&path, "tenantplane").unwrap();
    assert_eq!(
        (
            loaded.len(),
            loaded[0].issuer.as_str(),
            loaded[0].tenant_claim.as_str()
        ),
        (1, "https://login.example.com", "org.tenant")
    );
    let serve = docs
        .iter()
        .find(|d| kind_of(d) == "Deployment" && name_of(d) == "tp-tenantplane-serve")
        .unwrap();
    let container = &serve["spec"]["template"]["spec"]["containers"][0];
    let env = container["env"].as_sequence().unwrap();
    assert!(env.iter().any(|e| e["name"] == "TENANTPLANE_OIDC_ISSUERS_FILE"
        && e["value"] == "/etc/tenantplane/oidc/issuers.yaml"));
    assert!(
        container["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|m| m["mountPath"] == "/etc/tenantplane/oidc")
    );

    // Without issuers there is neither the ConfigMap nor the variable.
    let (ok, out, _) = helm(&["template", "tp", &chart]);
    assert!(ok && !out.contains("oidc-issuers") && !out.contains("TENANTPLANE_OIDC_ISSUERS_FILE"));

    // A typo in an issuer is refused by the schema.
    let typo = r#"auth.externalIssuers=[{"issuer":"https://x","audience":"a","tenantClaim":"t","roleClaim":"r","jwksUri":"https://x/k"}]"#;
    let (ok, _, err) = helm(&["template", "tp", &chart, "--set-json", typo]);
    assert!(
        !ok && err.contains("jwksUri") && err.contains("/auth/externalIssuers/0"),
        "{err}"
    );
}

#[tokio::test]
async fn chart_installs_into_the_test_cluster_with_every_object_present() {
    support::crds_installed();
    let kubeconfig = support::cluster().kube.kubeconfig_path().display().to_string();
    let release = support::unique("tp");
    let namespace = support::unique("helm");
    let datastore = support::unique("ds-default");
    let chart = chart();
    let datastore_name = format!("datastore.name={datastore}");

    // --skip-crds: support::crds_installed() already applied them. --no-hooks: no kubelet runs the
    // migrations Job, and helm would wait for it. --wait is off: no pod ever becomes ready here.
    let mut args = vec![
        "install",
        release.as_str(),
        chart.as_str(),
        "--kubeconfig",
        kubeconfig.as_str(),
        "--namespace",
        namespace.as_str(),
        "--create-namespace",
        "--skip-crds",
        "--no-hooks",
        "--timeout",
        "60s",
    ];
    let options = [
        datastore_name.as_str(),
        "serve.autoscaling.enabled=true",
        "serve.ingress.enabled=true",
        "networkPolicy.enabled=true",
    ];
    args.extend(sets(&options));
    args.extend(sets(UPSTREAM_DATASTORE_SETS));
    let (ok, out, err) = helm(&args);
    assert!(ok, "helm install failed: {out}{err}");
    assert!(
        out.contains(
            "kamaji-etcd.deploy=false is accepted for compatibility with upstream Kamaji and ignored"
        ),
        "NOTES should say kamaji-etcd is ignored:\n{out}"
    );

    let (ok, manifest, err) = helm(&[
        "get",
        "manifest",
        &release,
        "--kubeconfig",
        &kubeconfig,
        "--namespace",
        &namespace,
    ]);
    assert!(ok, "{err}");
    let rendered: BTreeSet<(String, String)> = documents(&manifest)
        .iter()
        .map(|d| (kind_of(d).to_string(), name_of(d).to_string()))
        .collect();
    for kind in [
        "Deployment",
        "Service",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "Ingress",
        "NetworkPolicy",
        "StatefulSet",
        "Secret",
        "DataStore",
    ] {
        assert!(rendered.iter().any(|(k, _)| k == kind), "no {kind} rendered");
    }

    // Every rendered object is in the cluster: kubectl reads them all back from the manifest.
    let (ok, out, err) = kubectl(
        &["get", "-n", &namespace, "-f", "-", "-o", "json"],
        Some(&manifest),
    );
    assert!(ok, "kubectl get -f <manifest> failed: {err}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    let in_cluster: BTreeSet<(String, String)> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_string(),
                o["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(in_cluster, rendered);

    // The DataStore passed our CRD's validation (CEL included) and reads back as rendered.
    let client = support::client().await;
    let ds = Api::<DataStore>::all(client)
        .get(&datastore)
        .await
        .expect("DataStore");
    assert_upstream_datastore(&ds);

    // An upgrade keeps the generated encryption key and database password (lookup of the live Secrets).
    let secret_data = |name: &str| {
        let (ok, out, err) = kubectl(
            &["get", "secret", name, "-n", &namespace, "-o", "jsonpath={.data}"],
            None,
        );
        assert!(ok, "{err}");
        out
    };
    let auth_secret = format!("{release}-tenantplane-auth");
    let db_secret = format!("{release}-tenantplane-database");
    let before = (secret_data(&auth_secret), secret_data(&db_secret));
    assert!(before.0.contains("TENANTPLANE_ENCRYPTION_KEY"), "{}", before.0);
    assert!(before.1.contains("POSTGRES_PASSWORD"), "{}", before.1);
    let mut upgrade = args.clone();
    upgrade[0] = "upgrade";
    upgrade.retain(|a| *a != "--create-namespace" && *a != "--skip-crds");
    let (ok, out, err) = helm(&upgrade);
    assert!(ok, "helm upgrade failed: {out}{err}");
    assert_eq!((secret_data(&auth_secret), secret_data(&db_secret)), before);

    let (ok, _, err) = helm(&[
        "uninstall",
        &release,
        "--kubeconfig",
        &kubeconfig,
        "--namespace",
        &namespace,
        "--no-hooks",
    ]);
    assert!(ok, "helm uninstall failed: {err}");
    let (ok, _, err) = kubectl(&["delete", "namespace", &namespace, "--wait=false"], None);
    assert!(ok, "{err}");
}

/// The rendered object of `kind` named `name`.
fn object<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| kind_of(d) == kind && name_of(d) == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

fn yaml(text: &str) -> Value {
    serde_yaml::from_str(text).unwrap()
}

/// `(binding kind, binding name, role kind, role name)` of every binding whose subjects include
/// ServiceAccount `account`.
fn bindings_of(docs: &[Value], account: &str) -> Vec<(String, String, String, String)> {
    docs.iter()
        .filter(|d| matches!(kind_of(d), "ClusterRoleBinding" | "RoleBinding"))
        .filter(|d| {
            d["subjects"].as_sequence().is_some_and(|s| {
                s.iter()
                    .any(|s| s["kind"] == "ServiceAccount" && s["name"] == account)
            })
        })
        .map(|d| {
            let text = |v: &Value| v.as_str().unwrap().to_string();
            (
                kind_of(d).to_string(),
                name_of(d).to_string(),
                text(&d["roleRef"]["kind"]),
                text(&d["roleRef"]["name"]),
            )
        })
        .collect()
}

/// `(expression, message)` of each validation of the worker's namespace policy in `docs`.
fn namespace_policy(docs: &[Value]) -> Vec<(String, String)> {
    let policy = object(
        docs,
        "ValidatingAdmissionPolicy",
        "tp-tenantplane-worker-namespaces",
    );
    policy["spec"]["validations"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| {
            let text = |v: &Value| v.as_str().unwrap().to_string();
            (text(&v["expression"]), text(&v["message"]))
        })
        .collect()
}

#[test]
fn serve_and_the_worker_are_granted_exactly_what_they_use() {
    let docs = render(&[]);
    // serve reads the admin kubeconfig and CA Secrets of served control planes, by name: get, no list.
    assert_eq!(
        object(&docs, "ClusterRole", "tp-tenantplane-serve")["rules"],
        yaml("[{apiGroups: [''], resources: [secrets], verbs: [get]}]")
    );
    // The worker server-side applies TCPs and namespaces (an apply that creates needs `create` too),
    // deletes TCPs, and watches TCPs and DataStores: no reads of namespaces, no DataStore writes.
    assert_eq!(
        object(&docs, "ClusterRole", "tp-tenantplane-worker")["rules"],
        yaml(
            "
            - {apiGroups: [kamaji.clastix.io], resources: [tenantcontrolplanes], verbs: [get, list, watch, create, patch, delete]}
            - {apiGroups: [kamaji.clastix.io], resources: [datastores], verbs: [list, watch]}
            - {apiGroups: [''], resources: [namespaces], verbs: [create, patch]}
            "
        )
    );
    let binding = |kind: &str, name: &str, role: &str| {
        (
            kind.to_string(),
            name.to_string(),
            role.to_string(),
            name.to_string(),
        )
    };
    assert_eq!(
        bindings_of(&docs, "tp-tenantplane-serve"),
        vec![binding(
            "ClusterRoleBinding",
            "tp-tenantplane-serve",
            "ClusterRole"
        )],
        "serve has no other grant"
    );
    // The worker also reads the controller's migration journal, in the release namespace only.
    let mut worker = bindings_of(&docs, "tp-tenantplane-worker");
    worker.sort();
    assert_eq!(
        worker,
        vec![
            binding("ClusterRoleBinding", "tp-tenantplane-worker", "ClusterRole"),
            binding("RoleBinding", "tp-tenantplane-worker-journal", "Role"),
        ],
        "the worker has no other grant"
    );
    assert_eq!(
        object(&docs, "Role", "tp-tenantplane-worker-journal")["rules"],
        yaml("[{apiGroups: [''], resources: [configmaps], verbs: [get]}]")
    );
}

#[test]
fn the_worker_namespace_policy_matches_the_worker_alone_and_the_namespace_template() {
    // The worker's create and patch of namespaces are held to tenant namespaces and its own labels.
    let docs = render(&[]);
    let policy = object(
        &docs,
        "ValidatingAdmissionPolicy",
        "tp-tenantplane-worker-namespaces",
    );
    assert_eq!(
        (
            &policy["spec"]["failurePolicy"],
            &policy["spec"]["matchConstraints"],
            &policy["spec"]["matchConditions"]
        ),
        (
            &yaml("Fail"),
            &yaml(
                "resourceRules: [{apiGroups: [''], apiVersions: ['*'], operations: [CREATE, UPDATE], resources: [namespaces]}]"
            ),
            &yaml(
                "[{name: the-worker, expression: \"request.userInfo.username == 'system:serviceaccount:kamaji-system:tp-tenantplane-worker'\"}]"
            )
        )
    );
    assert_eq!(
        object(
            &docs,
            "ValidatingAdmissionPolicyBinding",
            "tp-tenantplane-worker-namespaces"
        )["spec"],
        yaml("{policyName: tp-tenantplane-worker-namespaces, validationActions: [Deny]}")
    );
    // Its names are the binary's default template, tp-{tenant}, unless namespaceTemplate says otherwise.
    assert_eq!(tenantplane::translate::DEFAULT_NAMESPACE_TEMPLATE, "tp-{tenant}");
    let names = |docs: &[Value]| namespace_policy(docs)[0].clone();
    assert_eq!(
        names(&docs),
        (
            "object.metadata.name.startsWith('tp-') && object.metadata.name.endsWith('') && size(object.metadata.name) > 3".to_string(),
            "the worker may only write tenant namespaces (tp-{tenant})".to_string()
        )
    );
    let custom = render(&["--set-json", r#"worker.namespaceTemplate="tenants-{tenant}-cp""#]);
    assert_eq!(
        names(&custom),
        (
            "object.metadata.name.startsWith('tenants-') && object.metadata.name.endsWith('-cp') && size(object.metadata.name) > 11".to_string(),
            "the worker may only write tenant namespaces (tenants-{tenant}-cp)".to_string()
        )
    );
    let off = render(&sets(&["worker.namespacePolicy=false"]));
    assert!(
        !off.iter()
            .any(|d| kind_of(d).starts_with("ValidatingAdmissionPolicy")),
        "worker.namespacePolicy=false renders no policy"
    );
}

/// The credential issuer's values, which open serve's https port.
const ISSUER: &[&str] = &[
    "networkPolicy.enabled=true",
    "serve.credentialIssuer.enabled=true",
    "serve.credentialIssuer.url=https://tp.example.com/credentials",
    "serve.credentialIssuer.tlsSecret=issuer-tls",
];

/// The `ingress` of serve's NetworkPolicy rendered with `extra`.
fn serve_ingress(extra: &[&str]) -> Value {
    let docs = render(extra);
    let policy = object(&docs, "NetworkPolicy", "tp-tenantplane-serve");
    assert_eq!(
        (&policy["spec"]["podSelector"], &policy["spec"]["policyTypes"]),
        (
            &yaml(
                "matchLabels: {app.kubernetes.io/name: tenantplane, app.kubernetes.io/instance: tp, app.kubernetes.io/component: serve}"
            ),
            &yaml("[Ingress]")
        )
    );
    policy["spec"]["ingress"].clone()
}

#[test]
fn the_serve_network_policy_admits_tenant_control_planes_to_the_issuer_port() {
    // The issuer's port is serve's container port `https`, which its Service targets.
    let docs = render(&sets(ISSUER));
    let serve = object(&docs, "Deployment", "tp-tenantplane-serve");
    assert_eq!(
        serve["spec"]["template"]["spec"]["containers"][0]["ports"],
        yaml(
            "[{name: http, containerPort: 8080, protocol: TCP}, {name: https, containerPort: 8443, protocol: TCP}]"
        )
    );
    assert_eq!(
        object(&docs, "Service", "tp-tenantplane-serve")["spec"]["ports"][1],
        yaml("{name: https, port: 8443, targetPort: https, protocol: TCP}")
    );

    // Tenant kube-apiservers: TenantControlPlane pods in the namespaces the worker labels.
    assert_eq!(
        serve_ingress(&sets(ISSUER)),
        yaml(
            "
            - ports: [{port: http, protocol: TCP}]
            - ports: [{port: https, protocol: TCP}]
              from:
                - namespaceSelector: {matchLabels: {app.kubernetes.io/managed-by: tenantplane}}
                  podSelector:
                    matchLabels: {kamaji.clastix.io/component: deployment}
                    matchExpressions: [{key: kamaji.clastix.io/name, operator: Exists}]
            "
        )
    );

    // Extra issuer peers join that rule only; the API's peers restrict http only.
    let mut extra = sets(ISSUER);
    extra.extend([
        "--set-json",
        r#"networkPolicy.issuerIngressFrom=[{"ipBlock":{"cidr":"192.0.2.0/24"}}]"#,
        "--set-json",
        r#"networkPolicy.apiIngressFrom=[{"ipBlock":{"cidr":"198.51.100.0/24"}}]"#,
    ]);
    assert_eq!(
        serve_ingress(&extra),
        yaml(
            "
            - ports: [{port: http, protocol: TCP}]
              from: [{ipBlock: {cidr: 198.51.100.0/24}}]
            - ports: [{port: https, protocol: TCP}]
              from:
                - namespaceSelector: {matchLabels: {app.kubernetes.io/managed-by: tenantplane}}
                  podSelector:
                    matchLabels: {kamaji.clastix.io/component: deployment}
                    matchExpressions: [{key: kamaji.clastix.io/name, operator: Exists}]
                - ipBlock: {cidr: 192.0.2.0/24}
            "
        )
    );

    // Without the issuer there is no https port, and only http is admitted.
    assert_eq!(
        serve_ingress(&sets(&["networkPolicy.enabled=true"])),
        yaml("[{ports: [{port: http, protocol: TCP}]}]")
    );
}

/// A client of the shared cluster acting as `user` (impersonated by the admin).
async fn client_as(user: &str) -> kube::Client {
    let mut config = support::cluster().kube.config().await.unwrap();
    config.auth_info.impersonate = Some(user.to_string());
    kube::Client::try_from(config).unwrap()
}

/// Namespace `name` as the worker applies it (its two labels), with `labels` and `annotations` added.
fn tenant_namespace(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Namespace {
    let mut all = vec![
        (tenantplane::k8s::LABEL_MANAGED_BY, tenantplane::k8s::MANAGED_BY),
        (
            tenantplane::translate::LABEL_TENANT,
            "0b5c9b1e-4a31-4ac1-9d7e-3f1c2a6b8d90",
        ),
    ];
    all.extend(labels);
    let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let mut ns = Namespace::default();
    ns.metadata.name = Some(name.to_string());
    ns.metadata.labels = Some(map(&all));
    ns.metadata.annotations = (!annotations.is_empty()).then(|| map(annotations));
    ns
}

/// The worker's server-side apply of `ns` (dry run: nothing is stored); the refusal's code and message.
async fn worker_apply(api: &Api<Namespace>, ns: &Namespace, dry_run: bool) -> Result<(), (u16, String)> {
    let mut params = PatchParams::apply(tenantplane::k8s::FIELD_MANAGER).force();
    params.dry_run = dry_run;
    match api
        .patch(ns.metadata.name.as_deref().unwrap(), &params, &Patch::Apply(ns))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err((status.code, status.message)),
        Err(e) => panic!("apply {:?}: {e}", ns.metadata.name),
    }
}

/// Waits until the admission plugin enforces `policy` (it loads policies from a watch): the worker's
/// dry-run apply of namespace `default` is refused by it. RBAC's own refusals (bindings not loaded
/// yet) and acceptances (policy not loaded yet) are waited out.
async fn enforced(api: &Api<Namespace>, policy: &str) -> (u16, String) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match worker_apply(api, &tenant_namespace("default", &[], &[]), true).await {
            Err(refusal) if refusal.1.contains(policy) => return refusal,
            other => assert!(
                std::time::Instant::now() < deadline,
                "{policy} is not enforced after 60 s: {other:?}"
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// What the policy answers when it refuses the worker's write of namespace `name` because `why`.
fn denied(policy: &str, name: &str, why: &str) -> (u16, String) {
    (
        422,
        format!(
            "namespaces \"{name}\" is forbidden: ValidatingAdmissionPolicy '{policy}' with binding \
             '{policy}' denied request: {why}"
        ),
    )
}

/// As `worker`, applies the sample TenantControlPlane into namespace `tenant` (the apply creates it),
/// reads it back and deletes it.
async fn worker_round_trips_a_tcp(worker: &str, tenant: &str) {
    let tcps: Api<TenantControlPlane> = Api::namespaced(client_as(worker).await, tenant);
    let sample = std::fs::read_to_string(repo().join("config/samples/tenantcontrolplane.yaml")).unwrap();
    let mut tcp: TenantControlPlane = serde_yaml::from_str(&sample).unwrap();
    tcp.metadata.namespace = Some(tenant.to_string());
    let apply = PatchParams::apply(tenantplane::k8s::FIELD_MANAGER).force();
    tcps.patch("tenant-00", &apply, &Patch::Apply(&tcp))
        .await
        .unwrap();
    tcps.get("tenant-00").await.unwrap();
    tcps.delete("tenant-00", &Default::default()).await.unwrap();
}

/// The worker (`as_worker`, user `worker`) may set no other label nor an annotation on its tenant
/// namespace, may not read it (RBAC), nor create a namespace of another name (dry runs).
async fn assert_worker_held(as_worker: &Api<Namespace>, worker: &str, tenant: &str, policy: &str) {
    let privileged = [("pod-security.kubernetes.io/enforce", "privileged")];
    assert_eq!(
        worker_apply(as_worker, &tenant_namespace(tenant, &privileged, &[]), true).await,
        Err(denied(
            policy,
            tenant,
            "the worker may only set its own labels (app.kubernetes.io/managed-by, tenantplane.io/tenant)"
        ))
    );
    let selector = [("scheduler.alpha.kubernetes.io/node-selector", "pool=x")];
    assert_eq!(
        worker_apply(as_worker, &tenant_namespace(tenant, &[], &selector), true).await,
        Err(denied(
            policy,
            tenant,
            "the worker may change nothing of a namespace but its own labels"
        ))
    );
    match as_worker.get(tenant).await {
        Err(kube::Error::Api(s)) => assert_eq!(
            (s.code, s.message),
            (
                403,
                format!(
                    "namespaces \"{tenant}\" is forbidden: User \"{worker}\" cannot get resource \"namespaces\" \
                     in API group \"\" in the namespace \"{tenant}\""
                )
            )
        ),
        other => panic!("the worker read a namespace: {other:?}"),
    }
    let name = format!("x{tenant}");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let template = tenant.replace("-acme", "-{tenant}");
    match as_worker
        .create(&dry_run, &tenant_namespace(&name, &[], &[]))
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(
            (s.code, s.message),
            denied(
                policy,
                &name,
                &format!("the worker may only write tenant namespaces ({template})")
            )
        ),
        other => panic!("the worker created a namespace: {other:?}"),
    }
}

#[tokio::test]
async fn the_installed_worker_may_only_apply_tenant_namespaces_with_its_labels() {
    support::crds_installed();
    let kubeconfig = support::cluster().kube.kubeconfig_path().display().to_string();
    let (release, namespace) = (support::unique("tp"), support::unique("helm-rbac"));
    let prefix = support::unique("hw");
    let template = format!(r#"worker.namespaceTemplate="{prefix}-{{tenant}}""#);
    let chart = chart();
    let on = ["--kubeconfig", &kubeconfig, "--namespace", &namespace];
    let mut install = vec!["install", &release, &chart, "--create-namespace", "--skip-crds"];
    install.extend(["--no-hooks", "--timeout", "60s", "--set-json", &template]);
    let (ok, out, err) = helm(&[&install[..], &on].concat());
    assert!(ok, "helm install failed: {out}{err}");
    let worker = format!("system:serviceaccount:{namespace}:{release}-tenantplane-worker");
    let as_worker: Api<Namespace> = Api::all(client_as(&worker).await);
    let policy = format!("{release}-tenantplane-worker-namespaces");

    // Another namespace: refused (dry run, so a missing policy would change nothing).
    assert_eq!(
        enforced(&as_worker, &policy).await,
        denied(
            &policy,
            "default",
            &format!("the worker may only write tenant namespaces ({prefix}-{{tenant}})")
        )
    );
    // A tenant namespace with the worker's labels: created by the apply, then applied again; in it a
    // TenantControlPlane is applied, read and deleted.
    let tenant = format!("{prefix}-acme");
    for _ in 0..2 {
        worker_apply(&as_worker, &tenant_namespace(&tenant, &[], &[]), false)
            .await
            .unwrap();
    }
    worker_round_trips_a_tcp(&worker, &tenant).await;
    assert_worker_held(&as_worker, &worker, &tenant, &policy).await;

    // Others are not held by the policy: the admin labels the tenant namespace.
    let admin: Api<Namespace> = Api::all(support::client().await);
    let label = serde_json::json!({"metadata": {"labels": {"team": "a"}}});
    admin
        .patch(&tenant, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();

    let (ok, _, err) = helm(&[&["uninstall", &release, "--no-hooks"][..], &on].concat());
    assert!(ok, "helm uninstall failed: {err}");
    for ns in [&namespace, &tenant] {
        let (ok, _, err) = kubectl(&["delete", "namespace", ns, "--wait=false"], None);
        assert!(ok, "{err}");
    }
}

/// Services of `docker-compose.yml`, with their healthchecks and start-up order.
#[test]
fn docker_compose_wires_every_service_with_healthchecks() {
    let path = repo().join("docker-compose.yml");
    if Command::new("docker")
        .args(["compose", "version"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        let out = Command::new("docker")
            .args(["compose", "-f", &path.display().to_string(), "config", "--quiet"])
            .output()
            .expect("docker compose config");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    let mut compose: Value = serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    compose.apply_merge().expect("YAML merge keys");
    let services = compose["services"].as_mapping().expect("services");
    let names: BTreeSet<&str> = services.keys().filter_map(Value::as_str).collect();
    for expected in [
        "certs",
        "postgres",
        "etcd",
        "kube-apiserver",
        "crds",
        "serve",
        "worker",
        "controller",
    ] {
        assert!(names.contains(expected), "no service {expected} in {names:?}");
    }
    assert_eq!(
        compose["services"]["kube-apiserver"]["image"],
        "registry.k8s.io/kube-apiserver:v1.34.4"
    );
    let one_shot = ["certs", "crds"];
    for (name, service) in services {
        let name = name.as_str().unwrap();
        if !one_shot.contains(&name) {
            assert!(
                service["healthcheck"]["test"].is_sequence(),
                "{name} has no healthcheck"
            );
        }
    }
    let condition = |service: &str, on: &str| {
        compose["services"][service]["depends_on"][on]["condition"]
            .as_str()
            .unwrap_or_else(|| panic!("{service} does not depend on {on}"))
            .to_string()
    };
    assert_eq!(
        condition("kube-apiserver", "certs"),
        "service_completed_successfully"
    );
    assert_eq!(condition("kube-apiserver", "etcd"), "service_healthy");
    assert_eq!(condition("crds", "kube-apiserver"), "service_healthy");
    for service in ["serve", "worker", "controller"] {
        assert_eq!(condition(service, "kube-apiserver"), "service_healthy");
        assert_eq!(condition(service, "crds"), "service_completed_successfully");
    }
    for service in ["serve", "worker"] {
        assert_eq!(condition(service, "postgres"), "service_healthy");
    }
    // serve migrates; the worker starts after serve is healthy so the schema exists.
    assert_eq!(condition("worker", "serve"), "service_healthy");
    for service in ["serve", "worker", "controller"] {
        let command: Vec<&str> = compose["services"][service]["command"]
            .as_sequence()
            .unwrap_or_else(|| panic!("{service} has no command"))
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(command.first(), Some(&service), "{service}: {command:?}");
    }
}
