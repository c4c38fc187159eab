//! What the node tests share: kubeadm's CA hash computed here (not with the code under test), bootstrap
//! tokens and their Secrets, the join command, and real `kubeadm join phase preflight`.

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, api::PostParams};
use serde_json::json;

use super::connected;

/// `sha256:<hex>` of a PEM certificate's SubjectPublicKeyInfo: kubeadm's `--discovery-token-ca-cert-hash`.
pub fn ca_cert_hash(pem: &str) -> String {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    let cert = pem.parse_x509().unwrap();
    let digest = ring::digest::digest(&ring::digest::SHA256, cert.tbs_certificate.subject_pki.raw);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// A random bootstrap token (`[a-z0-9]{6}.[a-z0-9]{16}`), as (id, secret).
pub fn new_token() -> (String, String) {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = [0u8; 22];
    getrandom::fill(&mut bytes).unwrap();
    let text: String = bytes
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect();
    (text[..6].to_string(), text[6..].to_string())
}

/// kubeadm's bootstrap token Secret for `(id, secret)`.
pub fn token_secret(id: &str, secret: &str) -> Secret {
    serde_json::from_value(json!({
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "token-id": id, "token-secret": secret,
            "usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
            "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
        },
    }))
    .unwrap()
}

/// Creates kubeadm's bootstrap token Secret for `(id, secret)` in the tenant's kube-system.
pub async fn create_token(tenant: &kube::Client, id: &str, secret: &str) {
    let object = token_secret(id, secret);
    let (secrets, post) = (
        Api::<Secret>::namespaced(tenant.clone(), "kube-system"),
        PostParams::default(),
    );
    connected(|| secrets.create(&post, &object)).await.unwrap();
}

/// The join command the API hands out, built from its parts.
pub fn join_command(endpoint: &str, token: &str, hash: &str) -> String {
    format!("kubeadm join {endpoint} --token {token} --discovery-token-ca-cert-hash {hash}")
}

/// Runs `kubeadm join phase preflight` against `endpoint` with `token` and `ca_hash` (node checks
/// ignored: this machine is no node); (succeeded, output).
pub fn kubeadm_preflight(
    dir: &std::path::Path,
    endpoint: &str,
    token: &str,
    ca_hash: &str,
) -> (bool, String) {
    let config = format!(
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken: {{apiServerEndpoint: \"{endpoint}\", token: \"{token}\", caCertHashes: [\"{ca_hash}\"]}}\nnodeRegistration: {{name: e2e-node, criSocket: unix:///var/run/containerd/containerd.sock, ignorePreflightErrors: [all]}}\ntimeouts: {{discovery: 15s}}\n"
    );
    let path = dir.join("join.yaml");
    std::fs::write(&path, config).unwrap();
    let kubeadm = tenantplane::runtime::assets::binary("kubeadm").unwrap();
    let out = std::process::Command::new(kubeadm)
        .args(["join", "phase", "preflight", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}
