//! Operation progress (pure part): what a `TenantControlPlane`'s status says about the creates and updates
//! that asked for the generation it was rendered from.
//!
//! Only fresh conditions count: an `observedGeneration` below the object's `metadata.generation` is about
//! an older spec. A stage counts when it and every stage before it hold (a failed datastore phase leaves
//! the older `DeploymentAvailable=True` in place, which says nothing about this generation); `ready`
//! implies them all.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt as _;

use super::status;
use crate::{domain::OperationStage, k8s::crd::TenantControlPlane, translate::ANNOTATION_GENERATION};

/// What the status of one TCP means for its control plane's open operations.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// The row generation the TCP was rendered from (`tenantplane.io/generation`).
    pub generation: i64,
    /// The stages reached at that generation, in order (a prefix of [`OperationStage::APPLY`]).
    pub stages: Vec<OperationStage>,
    /// Ready (or asleep when scaled to zero) at that generation.
    pub done: bool,
    /// `Stalled=True`: `(reason, message)`; never set together with `done`.
    pub stalled: Option<(String, String)>,
}

/// The progress `tcp`'s status shows; `None` without a readable generation annotation.
pub fn progress(tcp: &TenantControlPlane) -> Option<Progress> {
    let generation = tcp
        .annotations()
        .get(ANNOTATION_GENERATION)?
        .parse::<i64>()
        .ok()?;
    let fresh = |type_: &str| fresh_condition(tcp, type_);
    let holds = |type_: &str| fresh(type_).is_some_and(|c| c.status == "True");
    let phase = status::phase(tcp);
    let asleep = phase == "Sleeping" && fresh("Ready").is_some_and(|c| c.reason == "Sleeping");
    let done = phase == "Ready" || asleep;
    let checks = [
        holds("DataStoreReady"),
        holds("CertificatesReady") && holds("KubeconfigsReady"),
        holds("DeploymentAvailable"),
    ];
    // `placed` and `applied` hold for any TCP rendered from the generation.
    let reached = if done {
        OperationStage::APPLY.len()
    } else {
        2 + checks.iter().take_while(|held| **held).count()
    };
    let stalled = fresh("Stalled")
        .filter(|c| !done && c.status == "True")
        .map(|c| (c.reason.clone(), c.message.clone()));
    Some(Progress {
        generation,
        stages: OperationStage::APPLY[..reached].to_vec(),
        done,
        stalled,
    })
}

/// The condition of `type_` unless it is about an older spec than the object's.
fn fresh_condition<'a>(tcp: &'a TenantControlPlane, type_: &str) -> Option<&'a Condition> {
    let status = tcp.status.as_ref()?;
    let condition = status.conditions.iter().find(|c| c.type_ == type_)?;
    let observed = condition.observed_generation.or(status.observed_generation);
    match (observed, tcp.metadata.generation) {
        (Some(seen), Some(current)) if seen < current => None,
        _ => Some(condition),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::domain::OperationStage::*;

    fn condition(type_: &str, status: &str, reason: &str, generation: i64) -> serde_json::Value {
        serde_json::json!({"type": type_, "status": status, "reason": reason, "message": format!("{type_} says {reason}"),
                           "lastTransitionTime": "2026-12-01T00:00:00Z", "observedGeneration": generation})
    }

    fn tcp(rendered: &str, version_status: &str, conditions: Vec<serde_json::Value>) -> TenantControlPlane {
        tenantplane_testkit::tcp("tp-acme", "prod")
            .uid("u-1")
            .generation(3)
            .annotation(ANNOTATION_GENERATION, rendered)
            .version("v1.33.2")
            .status(serde_json::json!({
                "conditions": conditions,
                "kubernetesResources": {"version": {"version": "v1.33.2", "status": version_status}}
            }))
            .build()
    }

    fn all_true(generation: i64) -> Vec<serde_json::Value> {
        [
            "DataStoreReady",
            "CertificatesReady",
            "KubeconfigsReady",
            "DeploymentAvailable",
            "Ready",
        ]
        .iter()
        .map(|t| condition(t, "True", "Ok", generation))
        .collect()
    }

    #[test]
    fn a_fresh_ready_status_is_done_with_every_stage() {
        let seen = progress(&tcp("7", "Ready", all_true(3))).unwrap();
        assert_eq!(
            seen,
            Progress {
                generation: 7,
                stages: OperationStage::APPLY.to_vec(),
                done: true,
                stalled: None
            }
        );
    }

    #[test]
    fn conditions_about_an_older_spec_count_for_nothing() {
        let seen = progress(&tcp("7", "Ready", all_true(2))).unwrap();
        assert_eq!(seen.stages, [Placed, Applied]);
        assert!(!seen.done);
    }

    #[test]
    fn a_stage_counts_only_after_every_stage_before_it() {
        let mut conditions = all_true(3);
        conditions[0] = condition("DataStoreReady", "False", "Unreachable", 3);
        conditions.pop();
        let seen = progress(&tcp("7", "Provisioning", conditions.clone())).unwrap();
        assert_eq!(
            seen.stages,
            [Placed, Applied],
            "DeploymentAvailable=True is older news"
        );
        conditions[0] = condition("DataStoreReady", "True", "Ok", 3);
        conditions[3] = condition("DeploymentAvailable", "False", "RolloutInProgress", 3);
        let seen = progress(&tcp("7", "Provisioning", conditions)).unwrap();
        assert_eq!(seen.stages, [Placed, Applied, DatastoreReady, Certificates]);
    }

    #[test]
    fn certificates_need_the_kubeconfigs_too() {
        let conditions = vec![
            condition("DataStoreReady", "True", "Ok", 3),
            condition("CertificatesReady", "True", "Ok", 3),
        ];
        let seen = progress(&tcp("7", "Provisioning", conditions)).unwrap();
        assert_eq!(seen.stages, [Placed, Applied, DatastoreReady]);
    }

    #[test]
    fn a_fresh_stalled_condition_is_a_failure_with_its_reason_and_message() {
        let mut conditions = all_true(3);
        conditions[3] = condition("DeploymentAvailable", "False", "RolloutInProgress", 3);
        conditions[4] = condition("Ready", "False", "Provisioning", 3);
        conditions.push(condition("Stalled", "True", "ImageNotBuilt", 3));
        let seen = progress(&tcp("7", "Provisioning", conditions.clone())).unwrap();
        assert_eq!(
            seen.stalled,
            Some(("ImageNotBuilt".into(), "Stalled says ImageNotBuilt".into()))
        );
        assert!(!seen.done);
        // Stalled about an older spec, or False: no failure.
        conditions[5] = condition("Stalled", "True", "ImageNotBuilt", 2);
        assert_eq!(
            progress(&tcp("7", "Provisioning", conditions.clone()))
                .unwrap()
                .stalled,
            None
        );
        conditions[5] = condition("Stalled", "False", "Progressing", 3);
        assert_eq!(
            progress(&tcp("7", "Provisioning", conditions)).unwrap().stalled,
            None
        );
    }

    #[test]
    fn a_control_plane_scaled_to_zero_is_done_when_asleep() {
        let mut conditions = all_true(3);
        conditions[3] = condition("DeploymentAvailable", "False", "Sleeping", 3);
        conditions[4] = condition("Ready", "False", "Sleeping", 3);
        let seen = progress(&tcp("7", "Sleeping", conditions)).unwrap();
        assert!(seen.done);
        assert_eq!(seen.stages, OperationStage::APPLY.to_vec());
    }

    #[test]
    fn upgrading_is_not_done() {
        let seen = progress(&tcp("7", "Upgrading", all_true(3))).unwrap();
        assert!(!seen.done);
        assert_eq!(
            seen.stages,
            [Placed, Applied, DatastoreReady, Certificates, Deployed]
        );
    }

    #[test]
    fn without_the_generation_annotation_nothing_is_known() {
        let mut object = tcp("7", "Ready", all_true(3));
        object.metadata.annotations = None;
        assert_eq!(progress(&object), None);
        assert_eq!(progress(&tcp("seven", "Ready", all_true(3))), None);
    }
}
