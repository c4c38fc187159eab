//! The controller's own record of each migration: one ConfigMap per TenantControlPlane UID in the
//! controller's state namespace (`ControllerSettings::state_namespace`), which no
//! TenantControlPlane writer may write. `status.migration` is only its published copy: anyone who may
//! patch `tenantcontrolplanes/status` can write it, so the manager runs the journal's record, and a
//! status that says anything else is refused ([`judge`]) and put back.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    ResourceExt as _,
    api::{ObjectMeta, Patch, PatchParams},
};

use crate::{
    Context, Error,
    k8s::crd::{MigrationStatus, TenantControlPlane},
    state_records,
};

/// The field manager of `status.migration`, the `Migrating` condition and the journal.
pub const MIGRATION_MANAGER: &str = "tenantplane-migration";

use crate::k8s::migration_journal::{CURRENT, PREVIOUS};

/// What the journal holds for one TenantControlPlane.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Journal {
    /// The last record the manager wrote.
    pub current: Option<MigrationStatus>,
    /// The record before it.
    pub previous: Option<MigrationStatus>,
}

/// How `status.migration` stands towards the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Status shows the journal's record (or an ended migration the journal never held: nothing to run).
    Agrees,
    /// Status shows the record before the last one: the last status write was lost; publish again.
    Behind,
    /// Status shows a migration the controller did not record: refused, with why.
    Forged(String),
}

/// Compares what status says with what the controller recorded (pure).
pub fn judge(status: Option<&MigrationStatus>, journal: &Journal) -> Verdict {
    if status == journal.current.as_ref() {
        return Verdict::Agrees;
    }
    if journal.current.is_some() && status.is_some() && status == journal.previous.as_ref() {
        return Verdict::Behind;
    }
    match (status, &journal.current) {
        // Before the journal existed, or a record the controller never acted on: nothing runs from it.
        (Some(s), None) if s.stage.ended() => Verdict::Agrees,
        (None, None) => Verdict::Agrees,
        (None, Some(_)) => Verdict::Behind,
        (Some(s), None) => Verdict::Forged(format!(
            "status.migration shows stage {} from {} to {}, but the controller recorded no migration",
            s.stage.as_str(),
            s.source,
            s.target
        )),
        (Some(s), Some(c)) => Verdict::Forged(format!(
            "status.migration shows stage {} from {} to {}, but the controller recorded stage {} from {} to {}{}",
            s.stage.as_str(),
            s.source,
            s.target,
            c.stage.as_str(),
            c.source,
            c.target,
            differing_fields(s, c)
        )),
    }
}

/// `" (fields that differ: …)"` for two records of the same stage and DataStores, else empty.
fn differing_fields(status: &MigrationStatus, recorded: &MigrationStatus) -> String {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
        (serde_json::to_value(status), serde_json::to_value(recorded))
    else {
        return String::new();
    };
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let differ: Vec<&str> = keys
        .into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(String::as_str)
        .collect();
    if differ.is_empty() {
        String::new()
    } else {
        format!(" (fields that differ: {})", differ.join(", "))
    }
}

/// `tcp` as the datastore phase may act on it: `status.migration` replaced by the journal's record
/// (no refusal here: the migration manager refuses and restores a forged record).
pub async fn recorded_view(ctx: &Context, tcp: &TenantControlPlane) -> Result<TenantControlPlane, Error> {
    let recorded = read(ctx, tcp).await?;
    Ok(with_migration(tcp.clone(), recorded.current))
}

/// `tcp` with `status.migration` set to `m`.
pub fn with_migration(mut tcp: TenantControlPlane, m: Option<MigrationStatus>) -> TenantControlPlane {
    tcp.status.get_or_insert_with(Default::default).migration = m;
    tcp
}

/// The journal's ConfigMap name for `tcp`.
fn name(tcp: &TenantControlPlane) -> Result<String, Error> {
    let uid = tcp.uid().ok_or(Error::MissingObjectKey(".metadata.uid"))?;
    Ok(crate::k8s::migration_journal::name(&uid))
}

/// Reads `tcp`'s journal (empty when none was written).
pub async fn read(ctx: &Context, tcp: &TenantControlPlane) -> Result<Journal, Error> {
    let Some(map) = state_records::api(ctx).get_opt(&name(tcp)?).await? else {
        return Ok(Journal::default());
    };
    let data = map.data.unwrap_or_default();
    let record = |key: &str| {
        crate::k8s::migration_journal::record(&data, key).map_err(|message| Error::Invalid {
            reason: "MigrationJournalUnreadable",
            message,
        })
    };
    Ok(Journal {
        current: record(CURRENT)?,
        previous: record(PREVIOUS)?,
    })
}

/// Records `m` as `tcp`'s current migration (the record it replaces becomes the previous one).
pub async fn write(ctx: &Context, tcp: &TenantControlPlane, m: &MigrationStatus) -> Result<(), Error> {
    let journal = read(ctx, tcp).await?;
    let next = Journal {
        previous: journal
            .current
            .clone()
            .filter(|c| c != m)
            .or(journal.previous.clone()),
        current: Some(m.clone()),
    };
    let mut data = BTreeMap::new();
    for (key, record) in [(CURRENT, &next.current), (PREVIOUS, &next.previous)] {
        if let Some(record) = record {
            let text = serde_json::to_string(record).map_err(|e| Error::Invalid {
                reason: "MigrationJournalUnwritable",
                message: format!("the migration record cannot be serialized: {e}"),
            })?;
            data.insert(key.to_string(), text);
        }
    }
    let map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name(tcp)?),
            namespace: Some(ctx.settings.state_namespace.clone()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_string(),
                "tenantplane".to_string(),
            )])),
            annotations: Some(BTreeMap::from([(
                "tenantplane.io/control-plane".to_string(),
                format!("{}/{}", tcp.namespace().unwrap_or_default(), tcp.name_any()),
            )])),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..ConfigMap::default()
    };
    state_records::api(ctx)
        .patch(
            &name(tcp)?,
            &PatchParams::apply(MIGRATION_MANAGER).force(),
            &Patch::Apply(&map),
        )
        .await
        .map_err(|e| state_records::missing_namespace(ctx, e, "migrations wait for it"))?;
    Ok(())
}

/// Removes `tcp`'s journal (the TenantControlPlane is gone).
pub async fn forget(ctx: &Context, tcp: &TenantControlPlane) -> Result<(), Error> {
    state_records::delete(ctx, &name(tcp)?).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde_json::json;

    use super::*;
    use crate::k8s::crd::MigrationStage;

    fn record(stage: &str, source_schema: &str) -> MigrationStatus {
        serde_json::from_value(json!({
            "source": "a", "target": "b", "stage": stage, "overrides": "Drop",
            "startedAt": "2026-12-06T00:00:00Z", "stageStartedAt": "2026-12-06T00:00:00Z",
            "sourceSchema": source_schema, "sourceUser": "u",
        }))
        .unwrap()
    }

    #[test]
    fn status_equal_to_the_journal_agrees_and_one_record_behind_is_published_again() {
        let copying = record("Copying", "s");
        let catching_up = record("CatchingUp", "s");
        let journal = Journal {
            current: Some(catching_up.clone()),
            previous: Some(copying.clone()),
        };
        assert_eq!(judge(Some(&catching_up), &journal), Verdict::Agrees);
        assert_eq!(judge(Some(&copying), &journal), Verdict::Behind);
        assert_eq!(judge(None, &journal), Verdict::Behind);
        assert_eq!(judge(None, &Journal::default()), Verdict::Agrees);
    }

    #[test]
    fn a_running_migration_the_controller_did_not_record_is_forged() {
        let forged = record("CatchingUp", "victim");
        let Verdict::Forged(why) = judge(Some(&forged), &Journal::default()) else {
            panic!("not refused");
        };
        assert_eq!(
            why,
            "status.migration shows stage CatchingUp from a to b, but the controller recorded no migration"
        );
    }

    #[test]
    fn a_stage_skipped_or_a_name_changed_is_forged_and_named() {
        let journal = Journal {
            current: Some(record("Copying", "s")),
            previous: None,
        };
        let Verdict::Forged(why) = judge(Some(&record("Switching", "s")), &journal) else {
            panic!("not refused");
        };
        assert!(
            why.contains("shows stage Switching") && why.contains("recorded stage Copying"),
            "{why}"
        );
        let Verdict::Forged(why) = judge(Some(&record("Copying", "victim")), &journal) else {
            panic!("not refused");
        };
        assert!(why.ends_with("(fields that differ: sourceSchema)"), "{why}");
    }

    #[test]
    fn an_ended_migration_without_a_journal_runs_nothing_and_is_left_alone() {
        for stage in [
            MigrationStage::Done,
            MigrationStage::Failed,
            MigrationStage::Aborted,
        ] {
            let ended = record(stage.as_str(), "s");
            assert_eq!(judge(Some(&ended), &Journal::default()), Verdict::Agrees);
        }
    }
}
