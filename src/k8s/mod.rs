//! Kubernetes-facing types: the Kamaji-compatible custom resources.

pub mod crd;
