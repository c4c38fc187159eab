//! Integration tests on real parts: one binary, so the kube-apiserver starts once per run.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers panic on setup failures by design"
)]

mod api;
mod attack_matrix;
mod controller;
mod crds;
mod datastore;
mod e2e;
mod egress;
mod graphql;
mod helm;
mod migrate;
mod portal;
mod serve;
mod smoke;
mod structure;
mod support;
mod web;
mod worker;
