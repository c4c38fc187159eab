//! Why a reconcile failed, and in which step.

use crate::datastore::DatastoreError;

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed. Transient.
    #[error("Kubernetes API call failed: {0}")]
    Kube(#[from] kube::Error),
    /// A datastore operation failed; [`DatastoreError::is_transient`] decides.
    #[error(transparent)]
    Datastore(#[from] DatastoreError),
    /// The object or what it references is wrong; waits for a change. Permanent.
    #[error("{message}")]
    Invalid {
        /// CamelCase reason.
        reason: &'static str,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Something it needs is not ready yet. Transient.
    #[error("{message}")]
    NotReady {
        /// CamelCase reason.
        reason: &'static str,
        /// What is awaited.
        message: String,
    },
    /// The overrides cannot be applied. Permanent.
    #[error("{message}")]
    Overrides {
        /// CamelCase reason.
        reason: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A NATS DataStore already serves another TenantControlPlane. Permanent.
    #[error(
        "NATS DataStore {data_store} already serves another TenantControlPlane; a NATS DataStore serves one TenantControlPlane, so no bucket was created"
    )]
    NotExclusive {
        /// The DataStore.
        data_store: String,
        /// `namespace/name` of the TenantControlPlane that holds it.
        holder: String,
    },
    /// The object lacks a field the API server always sets. Permanent.
    #[error("object has no {0}")]
    MissingObjectKey(&'static str),
    /// A step of the TenantControlPlane pipeline failed: the cause's message, reason and permanence,
    /// and which step.
    #[error("{source}")]
    InPhase {
        /// The step.
        phase: Phase,
        /// What went wrong.
        source: Box<Error>,
    },
}

/// A step of the TenantControlPlane pipeline, as conditions, Events and metrics name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The tenant's space and user on its DataStores, and the datastore Secrets.
    Datastore,
    /// The Service (before the certificates: its cluster IP is one of the apiserver's SANs).
    Service,
    /// The PKI and kubeconfig Secrets.
    Certificates,
    /// The structured-authentication ConfigMap (`spec.authentication`).
    Authentication,
    /// The egress NetworkPolicy of the control-plane pods (before the Deployment).
    Egress,
    /// The Deployment.
    Deployment,
    /// The status write.
    Status,
}

impl Phase {
    /// The phase's name in the `Ready` condition's message and the `phase` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Datastore => "datastore",
            Phase::Service => "service",
            Phase::Certificates => "certificates",
            Phase::Authentication => "authentication",
            Phase::Egress => "egress",
            Phase::Deployment => "deployment",
            Phase::Status => "status",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Error {
    /// A stable CamelCase reason: condition reason, Event reason and metric label.
    pub fn reason(&self) -> &str {
        match self {
            Error::Kube(_) => "KubernetesApiError",
            Error::Datastore(e) => e.reason(),
            Error::Invalid { reason, .. }
            | Error::NotReady { reason, .. }
            | Error::Overrides { reason, .. } => reason,
            Error::NotExclusive { .. } => "DataStoreNotExclusive",
            Error::MissingObjectKey(_) => "MissingObjectKey",
            Error::InPhase { source, .. } => source.reason(),
        }
    }

    /// This error, as failed in `phase` (an error that already names its phase keeps it).
    pub fn in_phase(self, phase: Phase) -> Self {
        match self {
            Error::InPhase { .. } => self,
            other => Error::InPhase {
                phase,
                source: Box::new(other),
            },
        }
    }

    /// The pipeline step that failed, if known.
    pub fn phase(&self) -> Option<Phase> {
        match self {
            Error::InPhase { phase, .. } => Some(*phase),
            _ => None,
        }
    }

    /// The error without its phase.
    pub fn cause(&self) -> &Error {
        match self {
            Error::InPhase { source, .. } => source.cause(),
            other => other,
        }
    }

    /// Whether a retry with backoff may help without anyone changing anything.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Kube(_) | Error::NotReady { .. } => true,
            Error::Datastore(e) => e.is_transient(),
            Error::InPhase { source, .. } => source.is_transient(),
            Error::Invalid { .. }
            | Error::Overrides { .. }
            | Error::NotExclusive { .. }
            | Error::MissingObjectKey(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_keeps_the_causes_message_reason_and_permanence() {
        let cause = Error::NotReady {
            reason: "DataStoreNotReady",
            message: "DataStore ds is not ready: not checked yet".into(),
        };
        let message = cause.to_string();
        let err = cause.in_phase(Phase::Datastore);
        assert_eq!(err.to_string(), message);
        assert_eq!(err.reason(), "DataStoreNotReady");
        assert!(err.is_transient());
        assert_eq!(err.phase(), Some(Phase::Datastore));
        assert!(matches!(err.cause(), Error::NotReady { .. }));
        // The first phase named stays.
        let err = err.in_phase(Phase::Status);
        assert_eq!(err.phase(), Some(Phase::Datastore));
        assert_eq!(Phase::Certificates.to_string(), "certificates");
        let permanent = Error::MissingObjectKey(".metadata.uid").in_phase(Phase::Service);
        assert!(!permanent.is_transient());
        assert_eq!(permanent.to_string(), "object has no .metadata.uid");
    }
}
