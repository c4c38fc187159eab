//! The generated CRDs on a real kube-apiserver: upstream manifests apply unchanged, kubectl prints
//! upstream's columns, and every invalid case is refused with its message.

use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use tenantplane::k8s::crd::{DataStore, TenantControlPlane};

use crate::support::{self, kubectl};

const UPSTREAM_TCP: &str = r#"
apiVersion: kamaji.clastix.io/v1alpha1
kind: TenantControlPlane
metadata: {name: k8s-133, labels: {tenant.clastix.io: k8s-133}}
spec:
  dataStore: mysql-gold
  controlPlane: {deployment: {replicas: 2}, service: {serviceType: LoadBalancer}}
  kubernetes:
    version: "v1.33.0"
    kubelet:
      configurationJSONPatches:
        - {op: add, path: /featureGates, value: {KubeletCrashLoopBackOffMax: false, KubeletEnsureSecretPulledImages: false}}
        - {op: replace, path: /cgroupDriver, value: systemd}
  networkProfile: {port: 6443}
  addons: {coreDNS: {}, kubeProxy: {}, konnectivity: {server: {port: 8132}, agent: {mode: DaemonSet}}}
"#;

/// Asserts that every field of `expected` is in `actual` with the same value.
fn assert_subset(expected: &Value, actual: &Value, path: &str) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, v) in e {
                let next = format!("{path}.{k}");
                assert_subset(
                    v,
                    a.get(k)
                        .unwrap_or_else(|| panic!("{next} is missing in {actual}")),
                    &next,
                );
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            assert_eq!(e.len(), a.len(), "{path} has another length");
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                assert_subset(ev, av, &format!("{path}[{i}]"));
            }
        }
        _ => assert_eq!(expected, actual, "{path} differs"),
    }
}

#[tokio::test]
async fn upstream_manifest_applies_unchanged_and_reads_back_the_same() {
    support::crds_installed();
    let client = support::client().await;
    let ns = support::namespace(&client, "upstream").await;
    let (ok, out, err) = kubectl(&["apply", "-n", &ns, "-f", "-"], Some(UPSTREAM_TCP));
    assert!(ok, "kubectl apply failed: {out}{err}");
    let api: Api<TenantControlPlane> = Api::namespaced(client, &ns);
    let tcp = api.get("k8s-133").await.unwrap();
    let expected: Value = serde_yaml::from_str(UPSTREAM_TCP).unwrap();
    let actual = serde_json::to_value(&tcp).unwrap();
    assert_subset(&expected["spec"], &actual["spec"], "spec");
    assert_eq!(tcp.metadata.labels.unwrap()["tenant.clastix.io"], "k8s-133");
    // Typed access sees the same values.
    assert_eq!(tcp.spec.kubernetes.version, "v1.33.0");
    assert_eq!(tcp.spec.control_plane.deployment.unwrap().replicas, Some(2));
    let patches = tcp.spec.kubernetes.kubelet.configuration_json_patches.unwrap();
    assert_eq!(
        patches[0].value,
        Some(json!({"KubeletCrashLoopBackOffMax": false, "KubeletEnsureSecretPulledImages": false}))
    );
    assert_eq!(patches[1].value, Some(json!("systemd")));
}

/// Columns of the header line of `kubectl get` output.
fn header(output: &str) -> Vec<String> {
    output
        .lines()
        .next()
        .unwrap_or_default()
        .split("  ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

#[tokio::test]
async fn kubectl_get_prints_upstream_columns() {
    support::crds_installed();
    let client = support::client().await;
    let ns = support::namespace(&client, "columns").await;
    let (ok, out, err) = kubectl(&["apply", "-n", &ns, "-f", "-"], Some(UPSTREAM_TCP));
    assert!(ok, "{out}{err}");
    let (ok, out, err) = kubectl(&["get", "tcp", "-A"], None);
    assert!(ok, "{err}");
    assert_eq!(
        header(&out),
        [
            "NAMESPACE",
            "NAME",
            "VERSION",
            "INSTALLED VERSION",
            "STATUS",
            "CONTROL-PLANE ENDPOINT",
            "KUBECONFIG",
            "DATASTORE",
            "AGE"
        ]
    );
    let ds = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/samples/datastore-nats.yaml"
    ))
    .unwrap();
    let unique = ds.replace(
        "name: nats-gold",
        &format!("name: {}", support::unique("columns")),
    );
    let (ok, out, err) = kubectl(&["apply", "-f", "-"], Some(&unique));
    assert!(ok, "{out}{err}");
    let (ok, out, err) = kubectl(&["get", "datastores"], None);
    assert!(ok, "{err}");
    assert_eq!(header(&out), ["NAME", "DRIVER", "READY", "AGE"]);
}

#[tokio::test]
async fn kubectl_scale_changes_the_deployment_replicas() {
    support::crds_installed();
    let client = support::client().await;
    let ns = support::namespace(&client, "scale").await;
    let (ok, out, err) = kubectl(&["apply", "-n", &ns, "-f", "-"], Some(UPSTREAM_TCP));
    assert!(ok, "{out}{err}");
    let (ok, out, err) = kubectl(&["scale", "-n", &ns, "tcp", "k8s-133", "--replicas=3"], None);
    assert!(ok, "kubectl scale failed: {out}{err}");
    let tcp = Api::<TenantControlPlane>::namespaced(client, &ns)
        .get("k8s-133")
        .await
        .unwrap();
    assert_eq!(tcp.spec.control_plane.deployment.unwrap().replicas, Some(3));
}

#[tokio::test]
async fn every_sample_is_accepted() {
    support::crds_installed();
    let client = support::client().await;
    let ns = support::namespace(&client, "samples").await;
    for file in [
        "datastore-etcd",
        "datastore-mysql",
        "datastore-postgresql",
        "datastore-nats",
    ] {
        let text = std::fs::read_to_string(format!(
            "{}/config/samples/{file}.yaml",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let mut ds: DataStore = serde_yaml::from_str(&text).unwrap();
        ds.metadata.name = Some(support::unique(file));
        Api::<DataStore>::all(client.clone())
            .create(&PostParams::default(), &ds)
            .await
            .unwrap();
    }
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/samples/tenantcontrolplane.yaml"
    ))
    .unwrap();
    let mut tcp: TenantControlPlane = serde_yaml::from_str(&text).unwrap();
    tcp.metadata.namespace = Some(ns.clone());
    let created = Api::<TenantControlPlane>::namespaced(client, &ns)
        .create(&PostParams::default(), &tcp)
        .await
        .unwrap();
    assert_eq!(created.spec, tcp.spec);
}

// ---- invalid cases: one test each, asserting the apiserver's message ----

fn tcp_value(spec_patch: Value) -> Value {
    let mut base: Value = serde_yaml::from_str(UPSTREAM_TCP).unwrap();
    base["metadata"] = json!({"name": support::unique("tcp")});
    merge(&mut base["spec"], spec_patch);
    base
}

fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(&k);
                } else {
                    merge(t.entry(k).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p,
    }
}

/// Creates the object; returns the apiserver's rejection message (panics if it was accepted).
async fn create_rejected<K>(api: &Api<K>, value: Value) -> String
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(value).unwrap();
    match api.create(&PostParams::default(), &object).await {
        Ok(o) => panic!("the apiserver accepted an invalid object: {o:?}"),
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            status.message
        }
        Err(other) => panic!("unexpected error {other:?}"),
    }
}

async fn tcp_api() -> Api<TenantControlPlane> {
    support::crds_installed();
    let client = support::client().await;
    let ns = support::namespace(&client, "invalid").await;
    Api::namespaced(client, &ns)
}

fn etcd_datastore(name: &str) -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/samples/datastore-etcd.yaml"
    ))
    .unwrap();
    let mut v: Value = serde_yaml::from_str(&text).unwrap();
    v["metadata"]["name"] = json!(name);
    v
}

#[tokio::test]
async fn datastore_driver_change_is_rejected() {
    support::crds_installed();
    let api: Api<DataStore> = Api::all(support::client().await);
    let name = support::unique("driver");
    let ds: DataStore = serde_json::from_value(etcd_datastore(&name)).unwrap();
    api.create(&PostParams::default(), &ds).await.unwrap();
    let patch = json!({"spec": {"driver": "MySQL", "basicAuth": {"username": {"content": "cm9vdA=="}, "password": {"content": "cm9vdA=="}}}});
    let err = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("{err:?}")
    };
    assert_eq!(status.code, 422);
    assert!(
        status
            .message
            .contains("driver is immutable: create a new DataStore for another driver"),
        "{}",
        status.message
    );
}

#[tokio::test]
async fn etcd_datastore_without_tls_is_rejected() {
    support::crds_installed();
    let api: Api<DataStore> = Api::all(support::client().await);
    let mut ds = etcd_datastore(&support::unique("notls"));
    ds["spec"].as_object_mut().unwrap().remove("tlsConfig");
    let message = create_rejected(&api, ds).await;
    assert!(
        message.contains("driver etcd needs tlsConfig.certificateAuthority.privateKey"),
        "{message}"
    );
    assert!(
        message.contains("driver etcd needs tlsConfig.clientCertificate"),
        "{message}"
    );
}

#[tokio::test]
async fn sql_datastore_without_credentials_is_rejected() {
    support::crds_installed();
    let api: Api<DataStore> = Api::all(support::client().await);
    let ds = json!({
        "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "DataStore",
        "metadata": {"name": support::unique("nocreds")},
        "spec": {"driver": "PostgreSQL", "endpoints": ["pg:5432"]}
    });
    let message = create_rejected(&api, ds).await;
    assert!(message.contains("drivers MySQL, PostgreSQL and NATS need credentials: set basicAuth (username and password) or tlsConfig"), "{message}");
}

#[tokio::test]
async fn duplicate_override_resource_is_rejected() {
    let api = tcp_api().await;
    let tcp = tcp_value(json!({"dataStoreOverrides": [
        {"resource": "/events", "dataStore": "etcd-a"},
        {"resource": "/events", "dataStore": "etcd-b"}
    ]}));
    let message = create_rejected(&api, tcp).await;
    assert!(message.contains("Duplicate value"), "{message}");
}

#[tokio::test]
async fn override_resource_without_a_slash_is_rejected() {
    let api = tcp_api().await;
    let tcp = tcp_value(json!({"dataStoreOverrides": [{"resource": "events", "dataStore": "etcd-a"}]}));
    let message = create_rejected(&api, tcp).await;
    assert!(message.contains("resource must be <group>/<resource> with an empty core group, e.g. /events or coordination.k8s.io/leases"), "{message}");
}

#[tokio::test]
async fn override_pointing_at_the_primary_is_rejected() {
    let api = tcp_api().await;
    let tcp = tcp_value(json!({"dataStoreOverrides": [{"resource": "/events", "dataStore": "mysql-gold"}]}));
    let message = create_rejected(&api, tcp).await;
    assert!(
        message.contains("a dataStoreOverrides entry points at spec.dataStore"),
        "{message}"
    );
}

#[tokio::test]
async fn more_than_sixteen_overrides_are_rejected() {
    let api = tcp_api().await;
    let overrides: Vec<Value> = (0..17)
        .map(|i| json!({"resource": format!("/resource{i}"), "dataStore": "etcd-a"}))
        .collect();
    let message = create_rejected(&api, tcp_value(json!({"dataStoreOverrides": overrides}))).await;
    assert!(
        message.contains("at most 16 dataStoreOverrides are supported"),
        "{message}"
    );
}

#[tokio::test]
async fn sixteen_overrides_are_accepted() {
    let api = tcp_api().await;
    let overrides: Vec<Value> = (0..16)
        .map(|i| json!({"resource": format!("/resource{i}"), "dataStore": "etcd-a"}))
        .collect();
    let tcp: TenantControlPlane =
        serde_json::from_value(tcp_value(json!({"dataStoreOverrides": overrides}))).unwrap();
    let created = api.create(&PostParams::default(), &tcp).await.unwrap();
    assert_eq!(created.spec.data_store_overrides.unwrap().len(), 16);
}

async fn created_tcp(api: &Api<TenantControlPlane>, spec: Value) -> String {
    let value = tcp_value(spec);
    let name = value["metadata"]["name"].as_str().unwrap().to_string();
    let tcp: TenantControlPlane = serde_json::from_value(value).unwrap();
    api.create(&PostParams::default(), &tcp).await.unwrap();
    name
}

async fn update_rejected(api: &Api<TenantControlPlane>, name: &str, patch: Value) -> String {
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(o) => panic!("the apiserver accepted an invalid update: {:?}", o.spec),
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            status.message
        }
        Err(other) => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn unsetting_the_datastore_is_rejected() {
    let api = tcp_api().await;
    let name = created_tcp(&api, json!({})).await;
    let message = update_rejected(&api, &name, json!({"spec": {"dataStore": null}})).await;
    assert!(
        message.contains("unsetting the dataStore is not supported"),
        "{message}"
    );
}

#[tokio::test]
async fn changing_the_datastore_schema_is_rejected() {
    let api = tcp_api().await;
    let name = created_tcp(&api, json!({"dataStoreSchema": "tenant_a"})).await;
    let message = update_rejected(&api, &name, json!({"spec": {"dataStoreSchema": "tenant_b"}})).await;
    assert!(
        message.contains("changing the dataStoreSchema is not supported"),
        "{message}"
    );
}

#[tokio::test]
async fn version_without_v_and_patch_is_rejected() {
    let api = tcp_api().await;
    let tcp = tcp_value(json!({"kubernetes": {"version": "1.33"}}));
    let message = create_rejected(&api, tcp).await;
    assert!(
        message.contains("version must have the form vMAJOR.MINOR.PATCH, e.g. v1.34.4"),
        "{message}"
    );
}

#[tokio::test]
async fn a_konnectivity_port_taken_in_the_pod_is_rejected() {
    let api = tcp_api().await;
    let message = "addons.konnectivity.server.port must differ from networkProfile.port (default 6443) and from 8133, 8134, 10257 and 10259: every port of the control-plane pod is its own";
    let same_as_the_api_server = tcp_value(json!({"addons": {"konnectivity": {"server": {"port": 6443}}}}));
    let rejected = create_rejected(&api, same_as_the_api_server).await;
    assert!(rejected.contains(message), "{rejected}");
    let default_api_server_port = tcp_value(json!({
        "networkProfile": null,
        "addons": {"konnectivity": {"server": {"port": 6443}}},
    }));
    let rejected = create_rejected(&api, default_api_server_port).await;
    assert!(rejected.contains(message), "{rejected}");
    let health_port = tcp_value(json!({"addons": {"konnectivity": {"server": {"port": 8134}}}}));
    let rejected = create_rejected(&api, health_port).await;
    assert!(rejected.contains(message), "{rejected}");
}

#[tokio::test]
async fn an_api_server_port_taken_in_the_pod_is_rejected() {
    let api = tcp_api().await;
    let scheduler = tcp_value(json!({"networkProfile": {"port": 10259}, "addons": null}));
    let rejected = create_rejected(&api, scheduler).await;
    assert!(rejected.contains("networkProfile.port must not be 10257 or 10259: kube-controller-manager and kube-scheduler listen there in the control-plane pod"), "{rejected}");
    let konnectivity_admin = tcp_value(json!({"networkProfile": {"port": 8133}}));
    let rejected = create_rejected(&api, konnectivity_admin).await;
    assert!(rejected.contains("with Konnectivity, networkProfile.port must not be 8133 or 8134: the konnectivity-server sidecar's admin and health ports"), "{rejected}");
    created_tcp(&api, json!({"networkProfile": {"port": 8133}, "addons": null})).await;
}
