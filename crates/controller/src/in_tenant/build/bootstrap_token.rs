//! kubeadm's bootstrap-token phase: `kube-public/cluster-info` (the CA and the endpoint, which the
//! tenant's bootstrapsigner controller signs with each bootstrap token), the Role that lets
//! `system:anonymous` read it, and the bindings a bootstrapping node needs: to post its CSR, to have it
//! approved, to rotate its certificate later, and to read its Node.

use base64::Engine as _;
use serde_json::json;

use super::{BOOTSTRAPPERS, Facts, KUBE_PUBLIC, Kind, NODES, TenantObject, binding, config_map_reader};

/// `kube-public/cluster-info`.
pub const CLUSTER_INFO: &str = "cluster-info";
/// The prefix of the keys the bootstrapsigner adds to cluster-info, one per signing token.
pub const JWS_PREFIX: &str = "jws-kubeconfig-";

/// The phase's objects.
pub fn objects(facts: &Facts<'_>) -> Vec<TenantObject> {
    let bootstrappers = [("Group", BOOTSTRAPPERS)];
    vec![
        cluster_info(facts),
        config_map_reader(KUBE_PUBLIC, "kubeadm:bootstrap-signer-clusterinfo", CLUSTER_INFO),
        binding(
            Kind::RoleBinding,
            KUBE_PUBLIC,
            "kubeadm:bootstrap-signer-clusterinfo",
            "kubeadm:bootstrap-signer-clusterinfo",
            &[("User", "system:anonymous")],
        ),
        TenantObject::new(
            Kind::ClusterRole,
            "",
            "kubeadm:get-nodes",
            json!({"rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]}),
            &[],
        ),
        binding(
            Kind::ClusterRoleBinding,
            "",
            "kubeadm:get-nodes",
            "kubeadm:get-nodes",
            &bootstrappers,
        ),
        binding(
            Kind::ClusterRoleBinding,
            "",
            "kubeadm:kubelet-bootstrap",
            "system:node-bootstrapper",
            &bootstrappers,
        ),
        binding(
            Kind::ClusterRoleBinding,
            "",
            "kubeadm:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            &bootstrappers,
        ),
        binding(
            Kind::ClusterRoleBinding,
            "",
            "kubeadm:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            &[("Group", NODES)],
        ),
    ]
}

/// The kubeconfig in cluster-info: one unnamed cluster with the CA and the endpoint, as kubeadm writes it.
pub fn cluster_info_kubeconfig(endpoint: &str, ca_cert: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_cert);
    format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: https://{endpoint}\n  name: \"\"\ncontexts: null\ncurrent-context: \"\"\nkind: Config\npreferences: {{}}\nusers: null\n"
    )
}

/// `kube-public/cluster-info`. Only its `kubeconfig` key is applied: the signatures beside it are the
/// bootstrapsigner's.
fn cluster_info(facts: &Facts<'_>) -> TenantObject {
    TenantObject::new(
        Kind::ConfigMap,
        KUBE_PUBLIC,
        CLUSTER_INFO,
        json!({"data": {"kubeconfig": cluster_info_kubeconfig(facts.endpoint, facts.ca_cert)}}),
        &[],
    )
}
