//! Development and test tooling: local etcd, kube-apiserver, kine, MariaDB, NATS, the pod-less runner and `make run`.

use tenantplane_api as api;
use tenantplane_controller as controller;
use tenantplane_core::domain;
use tenantplane_core::secret;
use tenantplane_core::translate;
use tenantplane_crd as k8s;
use tenantplane_datastore as datastore;
use tenantplane_pki as pki;
use tenantplane_service::{self as service, auth};
use tenantplane_store as store;
use tenantplane_worker as worker;

pub mod dev;
pub mod localenv;
pub mod runner;
pub mod testenv;
