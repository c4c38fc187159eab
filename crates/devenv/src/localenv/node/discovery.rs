//! kubeadm's token discovery (`kubeadm join --token … --discovery-token-ca-cert-hash …`), done the way
//! kubeadm does it (`cmd/kubeadm/app/discovery/token`):
//! 1. fetch `kube-public/cluster-info` anonymously without trusting the server certificate, until it
//!    carries the signature `jws-kubeconfig-<token id>` (the tenant's bootstrapsigner adds it);
//! 2. verify that detached JWS (HS256, key = the token secret) over the `kubeconfig` value: only a holder
//!    of the token could have signed it;
//! 3. check that a CA certificate of that kubeconfig has a pinned public key (SHA-256 of its
//!    SubjectPublicKeyInfo);
//! 4. fetch cluster-info again over TLS pinned to that CA and check it is the same.
//!
//! The result is what a kubelet's bootstrap kubeconfig needs: the server, the CA and the token.

use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::core::v1::ConfigMap;

use super::{JoinCommand, NodeError, Result, Token};

/// How long [`discover`] waits for cluster-info and its signature (kubeadm's default is 5 min).
pub const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(60);
/// The path of cluster-info.
const CLUSTER_INFO: &str = "/api/v1/namespaces/kube-public/configmaps/cluster-info";
/// The prefix of the signature keys in cluster-info.
const JWS_PREFIX: &str = "jws-kubeconfig-";

/// What discovery establishes about a tenant cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bootstrap {
    /// `host:port` from the join command.
    pub endpoint: String,
    /// The API server URL of the cluster-info kubeconfig (what kubeadm writes into the bootstrap
    /// kubeconfig), e.g. `https://127.130.0.7:6443`.
    pub server: String,
    /// The cluster CA (PEM), verified against the pinned hash.
    pub ca_pem: String,
    /// The bootstrap token.
    pub token: Token,
}

/// Discovery for `join_command` (a `kubeadm join …` line), waiting up to [`DISCOVERY_TIMEOUT`].
pub async fn discover(join_command: &str) -> Result<Bootstrap> {
    discover_with(&join_command.parse()?, DISCOVERY_TIMEOUT).await
}

/// Discovery for a parsed join command; cluster-info and its signature are awaited up to `timeout`.
/// A signature that does not verify, or a CA that is not pinned, fails at once.
pub async fn discover_with(command: &JoinCommand, timeout: Duration) -> Result<Bootstrap> {
    crate::localenv::install_crypto_provider();
    let deadline = Instant::now() + timeout;
    let url = format!("https://{}{CLUSTER_INFO}", command.endpoint);
    let insecure = http_client(None)?;
    let jws_key = format!("{JWS_PREFIX}{}", command.token.id);
    let (kubeconfig, jws) = poll(&url, deadline, || async {
        let data = fetch(&insecure, &url).await?;
        let kubeconfig = data.get("kubeconfig").ok_or("cluster-info has no kubeconfig")?;
        match data.get(&jws_key) {
            Some(jws) => Ok(Some((kubeconfig.clone(), jws.clone()))),
            None => Ok(None),
        }
    })
    .await?
    .ok_or_else(|| NodeError::NoSignature {
        token_id: command.token.id.clone(),
        waited_secs: timeout.as_secs(),
    })?;
    verify_detached_jws(&jws, &kubeconfig, &command.token)?;
    let (server, ca_pem) = cluster(&kubeconfig)?;
    check_pinned(&ca_pem, &command.ca_cert_hashes)?;

    let pinned = http_client(Some(&ca_pem))?;
    let again = poll(&url, deadline, || async {
        let data = fetch(&pinned, &url).await?;
        Ok(Some(data.get("kubeconfig").cloned().unwrap_or_default()))
    })
    .await?
    .unwrap_or_default();
    if again != kubeconfig {
        return Err(NodeError::ClusterInfo(
            "cluster-info fetched over the pinned CA differs from the one that was verified".into(),
        ));
    }
    Ok(Bootstrap {
        endpoint: command.endpoint.clone(),
        server,
        ca_pem,
        token: command.token.clone(),
    })
}

/// Calls `attempt` every 500 ms until it returns `Ok(Some(_))` or `deadline` passes: `Ok(None)` at the
/// deadline (the awaited value never came), a fetch error if the last attempt failed.
async fn poll<T, F, Fut>(url: &str, deadline: Instant, mut attempt: F) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<Option<T>, String>>,
{
    loop {
        let outcome = attempt().await;
        if let Ok(Some(value)) = outcome {
            return Ok(Some(value));
        }
        if Instant::now() >= deadline {
            return match outcome {
                Err(message) => Err(NodeError::Fetch {
                    url: url.to_string(),
                    message,
                }),
                _ => Ok(None),
            };
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A client that trusts only `ca_pem`, or (`None`) any server certificate.
fn http_client(ca_pem: Option<&str>) -> Result<reqwest::Client> {
    let builder = reqwest::Client::builder().timeout(Duration::from_secs(10));
    let builder = match ca_pem {
        None => builder.tls_danger_accept_invalid_certs(true),
        Some(pem) => {
            let certs = reqwest::Certificate::from_pem_bundle(pem.as_bytes())
                .map_err(|e| NodeError::ClusterInfo(format!("the cluster-info CA is not PEM: {e}")))?;
            builder.tls_certs_only(certs)
        }
    };
    builder
        .build()
        .map_err(|e| NodeError::ClusterInfo(format!("build an HTTP client: {e}")))
}

/// GETs cluster-info anonymously; its `data`.
async fn fetch(
    http: &reqwest::Client,
    url: &str,
) -> std::result::Result<std::collections::BTreeMap<String, String>, String> {
    let response = http.get(url).send().await.map_err(|e| format!("{e:#}"))?;
    let status = response.status();
    let body = response.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!(
            "{status}: {}",
            body.chars().take(300).collect::<String>()
        ));
    }
    let cm: ConfigMap = serde_json::from_str(&body).map_err(|e| format!("not a ConfigMap: {e}"))?;
    Ok(cm.data.unwrap_or_default())
}

/// The HMAC key of a token's signatures.
fn hmac_key(token: &Token) -> ring::hmac::Key {
    ring::hmac::Key::new(ring::hmac::HMAC_SHA256, token.secret.as_bytes())
}

/// The detached JWS the bootstrapsigner writes for `content`: `base64url(header)..base64url(HMAC)`,
/// header `{"alg":"HS256","kid":"<token id>"}`, signing input `base64url(header).base64url(content)`.
pub fn sign_detached(content: &str, token: &Token) -> String {
    let b64 = &base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = b64.encode(format!(r#"{{"alg":"HS256","kid":"{}"}}"#, token.id));
    let input = format!("{header}.{}", b64.encode(content));
    let tag = ring::hmac::sign(&hmac_key(token), input.as_bytes());
    format!("{header}..{}", b64.encode(tag.as_ref()))
}

/// Verifies a detached JWS (`header..signature`) over `content` with the token: the header must say
/// HS256 (and name the token id when it has a `kid`), the HMAC must match (constant-time compare).
pub fn verify_detached_jws(jws: &str, content: &str, token: &Token) -> Result<()> {
    let bad = |reason: &str| NodeError::BadSignature {
        token_id: token.id.clone(),
        reason: reason.to_string(),
    };
    let b64 = &base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let parts: Vec<&str> = jws.split('.').collect();
    let [header, "", signature] = parts.as_slice() else {
        return Err(bad("not a detached JWS (header..signature)"));
    };
    let decoded = b64
        .decode(header)
        .map_err(|_| bad("the JWS header is not base64url"))?;
    let fields: serde_json::Value =
        serde_json::from_slice(&decoded).map_err(|_| bad("the JWS header is not JSON"))?;
    if fields["alg"] != "HS256" {
        return Err(bad("the JWS algorithm is not HS256"));
    }
    if !fields["kid"].is_null() && fields["kid"] != token.id.as_str() {
        return Err(bad("the JWS is signed for another token id"));
    }
    let tag = b64
        .decode(signature)
        .map_err(|_| bad("the JWS signature is not base64url"))?;
    let input = format!("{header}.{}", b64.encode(content));
    ring::hmac::verify(&hmac_key(token), input.as_bytes(), &tag).map_err(|_| bad("the HMAC does not match"))
}

/// The server URL and the CA (PEM) of the cluster of a cluster-info kubeconfig (the current context's,
/// else the first).
fn cluster(kubeconfig: &str) -> Result<(String, String)> {
    let config = kube::config::Kubeconfig::from_yaml(kubeconfig)
        .map_err(|e| NodeError::ClusterInfo(format!("the cluster-info kubeconfig does not parse: {e}")))?;
    let wanted = config
        .current_context
        .as_ref()
        .and_then(|name| config.contexts.iter().find(|c| &c.name == name))
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone());
    let named = config
        .clusters
        .iter()
        .find(|c| wanted.as_ref().is_none_or(|w| &c.name == w))
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| NodeError::ClusterInfo("the cluster-info kubeconfig has no cluster".into()))?;
    let server = named
        .server
        .clone()
        .ok_or_else(|| NodeError::ClusterInfo("the cluster-info cluster has no server".into()))?;
    let ca = named.certificate_authority_data.as_deref().ok_or_else(|| {
        NodeError::ClusterInfo("the cluster-info cluster has no certificate-authority-data".into())
    })?;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(ca.trim())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(|| NodeError::ClusterInfo("certificate-authority-data is not base64 PEM".into()))?;
    Ok((server, pem))
}

/// `sha256:<hex>` of the SubjectPublicKeyInfo of each certificate of a PEM bundle (kubeadm's
/// `--discovery-token-ca-cert-hash`).
pub fn ca_cert_hashes(pem: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for block in x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes()) {
        let block = block.map_err(|e| NodeError::ClusterInfo(format!("the CA is not PEM: {e}")))?;
        if block.label != "CERTIFICATE" {
            continue;
        }
        let cert = block
            .parse_x509()
            .map_err(|e| NodeError::ClusterInfo(format!("the CA is not an X.509 certificate: {e}")))?;
        let digest = ring::digest::digest(&ring::digest::SHA256, cert.tbs_certificate.subject_pki.raw);
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        out.push(format!("sha256:{hex}"));
    }
    if out.is_empty() {
        return Err(NodeError::ClusterInfo("the CA holds no certificate".into()));
    }
    Ok(out)
}

/// `sha256:<hex>` of the first certificate of `pem` (the value of `--discovery-token-ca-cert-hash`).
pub fn ca_cert_hash(pem: &str) -> Result<String> {
    Ok(ca_cert_hashes(pem)?.remove(0))
}

/// Succeeds when a certificate of `ca_pem` has one of the `pinned` hashes.
fn check_pinned(ca_pem: &str, pinned: &[String]) -> Result<()> {
    let found = ca_cert_hashes(ca_pem)?;
    if found.iter().any(|hash| pinned.contains(hash)) {
        Ok(())
    } else {
        Err(NodeError::CaNotPinned {
            found: found.join(", "),
            pinned: pinned.join(", "),
        })
    }
}

/// The kubelet's bootstrap kubeconfig (YAML): cluster `server` with the CA embedded, user
/// `tls-bootstrap-token-user` with the bootstrap token, as kubeadm writes `bootstrap-kubelet.conf`.
pub fn bootstrap_kubeconfig(bootstrap: &Bootstrap) -> String {
    let quote = |s: &str| serde_json::Value::from(s).to_string();
    let ca = base64::engine::general_purpose::STANDARD.encode(&bootstrap.ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: tenant\n  cluster:\n    server: {}\n    \
         certificate-authority-data: {ca}\nusers:\n- name: tls-bootstrap-token-user\n  user:\n    token: {}\n\
         contexts:\n- name: tls-bootstrap-token-user@tenant\n  context:\n    cluster: tenant\n    \
         user: tls-bootstrap-token-user\ncurrent-context: tls-bootstrap-token-user@tenant\n",
        quote(&bootstrap.server),
        quote(&bootstrap.token.to_string()),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    fn token() -> Token {
        "abcdef.0123456789abcdef".parse().unwrap()
    }

    const CONTENT: &str = "apiVersion: v1\nkind: Config\n";
    /// Computed independently (Python's hmac and base64 modules) for [`token`] and [`CONTENT`].
    const VECTOR: &str =
        "eyJhbGciOiJIUzI1NiIsImtpZCI6ImFiY2RlZiJ9..vH_kT4yiol-nrAWgjfCYqvum5wsKETXe0S7OOp1VgnE";

    #[test]
    fn the_signature_matches_an_independently_computed_vector_and_verifies() {
        assert_eq!(sign_detached(CONTENT, &token()), VECTOR);
        verify_detached_jws(VECTOR, CONTENT, &token()).unwrap();
    }

    #[test]
    fn a_wrong_secret_another_content_or_a_malformed_jws_is_refused() {
        let other: Token = "abcdef.ffffffffffffffff".parse().unwrap();
        let refused = |jws: &str, content: &str, token: &Token| match verify_detached_jws(jws, content, token)
        {
            Err(NodeError::BadSignature { reason, .. }) => reason,
            other => panic!("not refused: {other:?}"),
        };
        assert_eq!(refused(VECTOR, CONTENT, &other), "the HMAC does not match");
        assert_eq!(
            refused(VECTOR, "apiVersion: v2\n", &token()),
            "the HMAC does not match"
        );
        let (header, signature) = VECTOR.split_once("..").unwrap();
        let attached = format!("{header}.e30.{signature}");
        assert!(refused(&attached, CONTENT, &token()).contains("not a detached JWS"));
        assert!(refused("", CONTENT, &token()).contains("not a detached JWS"));
        let b64 = &base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let none = format!("{}..{signature}", b64.encode(r#"{"alg":"none","kid":"abcdef"}"#));
        assert_eq!(
            refused(&none, CONTENT, &token()),
            "the JWS algorithm is not HS256"
        );
        let kid = format!("{}..{signature}", b64.encode(r#"{"alg":"HS256","kid":"zzzzzz"}"#));
        assert_eq!(
            refused(&kid, CONTENT, &token()),
            "the JWS is signed for another token id"
        );
    }

    /// A CA certificate and the SHA-256 of its SubjectPublicKeyInfo, computed with
    /// `openssl x509 -pubkey | openssl pkey -pubin -outform der | sha256sum`.
    const CA_PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIBgjCCASegAwIBAgIUJo7omlgwXO61/a0Bx1WwicrsAM8wCgYIKoZIzj0EAwIw\nFTETMBEGA1UEAwwKa3ViZXJuZXRlczAgFw0yNjEyMDExNTI1MTZaGA8yMTI2MTEw\nNzE1MjUxNlowFTETMBEGA1UEAwwKa3ViZXJuZXRlczBZMBMGByqGSM49AgEGCCqG\nSM49AwEHA0IABAn6pWUypUP4Xs9sqUz+kZEVut3nXwDMmkDXF89DnXpCCJzvJvYK\nUQi8N+S/4t3JVkNbxJaUW/vs0jddR64V8D2jUzBRMB0GA1UdDgQWBBSb6uL7u0G7\nRIigQCCZP/3tL5IcBDAfBgNVHSMEGDAWgBSb6uL7u0G7RIigQCCZP/3tL5IcBDAP\nBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0kAMEYCIQCw/Qko1NKFu9Ba+vPt\nXKnxz0uJijMLuYDZ/rg+1YGM9wIhALg1L9OlB7VeZJKbyqSxydlGJVEyTkUl86p1\nnOnPpMvv\n-----END CERTIFICATE-----\n";
    const CA_HASH: &str = "sha256:c6754652cda66ae99a10d50090b73ad7e79b33958538c837a553386efe0d6e53";

    #[test]
    fn the_ca_hash_is_the_sha256_of_the_subject_public_key_info() {
        assert_eq!(ca_cert_hash(CA_PEM).unwrap(), CA_HASH);
        check_pinned(CA_PEM, &[CA_HASH.to_string()]).unwrap();
        let wrong = format!("sha256:{}", "0".repeat(64));
        let err = check_pinned(CA_PEM, std::slice::from_ref(&wrong)).unwrap_err();
        assert!(
            matches!(&err, NodeError::CaNotPinned { found, pinned } if found == CA_HASH && pinned == &wrong),
            "{err}"
        );
        assert!(ca_cert_hash("no pem here").is_err());
    }

    #[test]
    fn any_certificate_of_a_ca_bundle_may_be_the_pinned_one() {
        let other = crate::pki::Ca::new("another-ca").unwrap().ca.cert_pem;
        let bundle = format!("{other}{CA_PEM}");
        let hashes = ca_cert_hashes(&bundle).unwrap();
        assert_eq!((hashes.len(), hashes[1].as_str()), (2, CA_HASH));
        assert_ne!(hashes[0], CA_HASH);
        check_pinned(&bundle, &[CA_HASH.to_string()]).unwrap();
    }

    #[test]
    fn the_bootstrap_kubeconfig_has_the_server_the_ca_and_the_token() {
        let bootstrap = Bootstrap {
            endpoint: "127.130.0.7:6443".into(),
            server: "https://127.130.0.7:6443".into(),
            ca_pem: CA_PEM.into(),
            token: token(),
        };
        let yaml = bootstrap_kubeconfig(&bootstrap);
        let config = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        assert_eq!(
            config.current_context.as_deref(),
            Some("tls-bootstrap-token-user@tenant")
        );
        let (server, ca) = cluster(&yaml).unwrap();
        assert_eq!(
            (server.as_str(), ca.as_str()),
            ("https://127.130.0.7:6443", CA_PEM)
        );
        let value: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
        assert_eq!(value["users"][0]["user"]["token"], "abcdef.0123456789abcdef");
    }

    #[test]
    fn a_cluster_info_kubeconfig_as_the_controller_writes_it_yields_server_and_ca() {
        let ca = base64::engine::general_purpose::STANDARD.encode(CA_PEM);
        let yaml = format!(
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: https://127.130.0.7:6443\n  name: \"\"\ncontexts: null\ncurrent-context: \"\"\nkind: Config\npreferences: {{}}\nusers: null\n"
        );
        let (server, pem) = cluster(&yaml).unwrap();
        assert_eq!(
            (server.as_str(), pem.as_str()),
            ("https://127.130.0.7:6443", CA_PEM)
        );
        assert!(cluster("apiVersion: v1\nkind: Config\nclusters: []\n").is_err());
    }
}
