//! Local processes for development and tests: etcd, kube-apiserver (+ controller-manager), kine, MariaDB,
//! NATS and hollow kubelets (tenant nodes, [`node`]) from the binaries `scripts/test-env` builds, beside
//! the embedded crate's PostgreSQL and process supervision (re-exported here, so one module names every
//! local process).

pub use tenantplane_runtime::*;

pub mod etcd;
pub mod issuer;
pub mod kine;
pub mod kube;
pub mod mariadb;
pub mod nats;
pub mod node;
