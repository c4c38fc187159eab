//! Worker nodes for tenant clusters, without machines: a `kubeadm join` command is taken apart
//! ([`command`]), kubeadm's token discovery runs for real against the tenant ([`discovery`]: the
//! cluster-info signature is checked with the token, the CA against the pinned hash), and a hollow
//! kubelet (kubemark `--morph=kubelet`) does the kubelet's TLS bootstrap from nothing but the discovered
//! bootstrap kubeconfig ([`hollow`]). [`session`] is `tenantplane-dev join`.

pub mod command;
pub mod discovery;
pub mod hollow;
pub mod session;

pub use command::{JoinCommand, Token};
pub use discovery::{Bootstrap, bootstrap_kubeconfig, ca_cert_hash, discover, discover_with};
pub use hollow::HollowNode;

/// Why a join command, discovery or a hollow node failed.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The join command is missing a part or has a malformed one.
    #[error("join command: {0}")]
    Command(String),
    /// cluster-info could not be fetched before the discovery timeout.
    #[error("discovery: cannot fetch cluster-info from {url}: {message}")]
    Fetch {
        /// The URL fetched.
        url: String,
        /// The last error.
        message: String,
    },
    /// cluster-info carries no signature of the token (unknown, expired or revoked token).
    #[error(
        "discovery: cluster-info has no signature for token id {token_id} after {waited_secs} s: the token \
         is unknown, expired or revoked"
    )]
    NoSignature {
        /// The token's id.
        token_id: String,
        /// How long discovery waited for the signature.
        waited_secs: u64,
    },
    /// The signature does not verify with the token's secret.
    #[error(
        "discovery: the cluster-info signature for token id {token_id} does not verify with the token's \
         secret (wrong secret, or cluster-info was tampered with): {reason}"
    )]
    BadSignature {
        /// The token's id.
        token_id: String,
        /// What did not match.
        reason: String,
    },
    /// None of the CA certificates in cluster-info has a pinned public key.
    #[error("discovery: none of the public keys of the CA in cluster-info ({found}) is pinned ({pinned})")]
    CaNotPinned {
        /// The hashes of the CA certificates cluster-info holds.
        found: String,
        /// The `--discovery-token-ca-cert-hash` values.
        pinned: String,
    },
    /// cluster-info is malformed, or changed between the unverified and the pinned fetch.
    #[error("discovery: {0}")]
    ClusterInfo(String),
    /// A hollow node could not start, exited, or was not Ready in time.
    #[error("hollow node {name}: {message}")]
    Node {
        /// The node's name.
        name: String,
        /// What went wrong (with the end of its log when it ran).
        message: String,
    },
}

impl NodeError {
    /// A [`NodeError::Command`].
    pub(crate) fn command(message: impl Into<String>) -> Self {
        Self::Command(message.into())
    }

    /// A [`NodeError::Node`].
    pub(crate) fn node(name: &str, message: impl Into<String>) -> Self {
        Self::Node {
            name: name.to_string(),
            message: message.into(),
        }
    }
}

/// Result alias of this module.
pub type Result<T, E = NodeError> = std::result::Result<T, E>;
