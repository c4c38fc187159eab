//! The data mover of a migration, picked by the two DataStores' drivers.

use std::sync::Arc;

use crate::{
    Error,
    datastore::{
        AnyDriver, DatastoreError, SqlSettings, TenantSpace,
        migrate::{
            Checkpoint, Mover, Step, Verification,
            etcd::{EtcdMoveOptions, EtcdMover},
            sql::{KineMover, KineSpace},
        },
    },
    k8s::crd,
};

/// A mover for one pair of drivers (the [`Mover`] trait is not object-safe).
#[derive(Debug)]
pub enum AnyMover {
    /// etcd → etcd.
    Etcd(Box<EtcdMover>),
    /// kine on PostgreSQL → PostgreSQL, or on MySQL/MariaDB → MySQL/MariaDB.
    Kine(Box<KineMover>),
}

/// The mover from `source_space` on `source` to `target_space` on `target`: etcd → etcd, PostgreSQL →
/// PostgreSQL and MySQL → MySQL; cross-driver and NATS moves are refused (permanent, see
/// [`unsupported`]).
pub fn mover(
    source: &Arc<AnyDriver>,
    target: &Arc<AnyDriver>,
    source_space: &TenantSpace,
    target_space: &TenantSpace,
) -> Result<AnyMover, Error> {
    match (source.as_ref(), target.as_ref()) {
        (AnyDriver::Etcd(s), AnyDriver::Etcd(t)) => Ok(AnyMover::Etcd(Box::new(EtcdMover::new(
            s.clone(),
            t.clone(),
            source_space,
            target_space,
            EtcdMoveOptions::default(),
        )))),
        (AnyDriver::Postgres(s), AnyDriver::Postgres(t)) => kine(
            crd::Driver::PostgreSQL,
            (s.settings(), source_space),
            (t.settings(), target_space),
        ),
        (AnyDriver::MySql(s), AnyDriver::MySql(t)) => kine(
            crd::Driver::MySQL,
            (s.settings(), source_space),
            (t.settings(), target_space),
        ),
        (s, t) => Err(unsupported(s, t)),
    }
}

/// A kine mover between two SQL DataStores of `driver`, each given by its admin settings and space.
fn kine(
    driver: crd::Driver,
    source: (&SqlSettings, &TenantSpace),
    target: (&SqlSettings, &TenantSpace),
) -> Result<AnyMover, Error> {
    let space = |(settings, tenant): (&SqlSettings, &TenantSpace)| KineSpace {
        settings: settings.clone(),
        tenant: tenant.clone(),
    };
    let mover = KineMover::new(driver, space(source), space(target))?;
    Ok(AnyMover::Kine(Box::new(mover)))
}

/// Why a pair of drivers has no mover.
fn unsupported(source: &AnyDriver, target: &AnyDriver) -> Error {
    use crate::datastore::Driver as _;
    let (s, t) = (source.kind(), target.kind());
    let message = if s != t {
        format!(
            "moving between a {s:?} and a {t:?} DataStore is not supported: resourceVersions cannot be carried across drivers; pick a {s:?} DataStore"
        )
    } else {
        format!("moving between {s:?} DataStores is not supported (one tenant per NATS server)")
    };
    Error::Invalid {
        reason: "MigrationUnsupported",
        message,
    }
}

impl AnyMover {
    /// [`Mover::copy_step`].
    pub async fn copy_step(&self, c: &mut Checkpoint) -> Result<Step, DatastoreError> {
        match self {
            Self::Etcd(m) => m.copy_step(c).await,
            Self::Kine(m) => m.copy_step(c).await,
        }
    }

    /// [`Mover::catch_up_step`].
    pub async fn catch_up_step(&self, c: &mut Checkpoint) -> Result<u64, DatastoreError> {
        match self {
            Self::Etcd(m) => m.catch_up_step(c).await,
            Self::Kine(m) => m.catch_up_step(c).await,
        }
    }

    /// [`Mover::freeze`].
    pub async fn freeze(&self) -> Result<(), DatastoreError> {
        match self {
            Self::Etcd(m) => m.freeze().await,
            Self::Kine(m) => m.freeze().await,
        }
    }

    /// [`Mover::seal`].
    pub async fn seal(&self) -> Result<(), DatastoreError> {
        match self {
            Self::Etcd(m) => m.seal().await,
            Self::Kine(m) => m.seal().await,
        }
    }

    /// [`Mover::thaw`].
    pub async fn thaw(&self) -> Result<(), DatastoreError> {
        match self {
            Self::Etcd(m) => m.thaw().await,
            Self::Kine(m) => m.thaw().await,
        }
    }

    /// [`Mover::finish_step`].
    pub async fn finish_step(&self, c: &mut Checkpoint) -> Result<Step, DatastoreError> {
        match self {
            Self::Etcd(m) => m.finish_step(c).await,
            Self::Kine(m) => m.finish_step(c).await,
        }
    }

    /// [`Mover::verify`].
    pub async fn verify(&self) -> Result<Verification, DatastoreError> {
        match self {
            Self::Etcd(m) => m.verify().await,
            Self::Kine(m) => m.verify().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datastore::{
        Owner,
        mysql::MySqlDriver,
        nats::{NatsDriver, NatsSettings},
        postgres::PostgresDriver,
    };

    fn space() -> TenantSpace {
        TenantSpace::from_owner(Owner::new("0f1e2d3c", "tenants", "moving").unwrap()).unwrap()
    }

    fn postgres() -> Arc<AnyDriver> {
        let settings = SqlSettings::new("pg.example:5432", "postgres", None);
        Arc::new(AnyDriver::Postgres(PostgresDriver::new(settings).unwrap()))
    }

    fn mysql() -> Arc<AnyDriver> {
        let settings = SqlSettings::new("mysql.example:3306", "root", None);
        Arc::new(AnyDriver::MySql(MySqlDriver::new(settings).unwrap()))
    }

    fn nats() -> Arc<AnyDriver> {
        let settings = NatsSettings::new(vec!["nats.example:4222".into()]);
        Arc::new(AnyDriver::Nats(NatsDriver::new(settings).unwrap()))
    }

    fn refusal(source: &Arc<AnyDriver>, target: &Arc<AnyDriver>) -> (&'static str, String) {
        match mover(source, target, &space(), &space()) {
            Err(Error::Invalid { reason, message }) => (reason, message),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn kine_moves_between_two_postgresql_or_two_mysql_datastores_get_the_kine_mover() {
        for (source, target) in [(postgres(), postgres()), (mysql(), mysql())] {
            let mover = mover(&source, &target, &space(), &space());
            assert!(matches!(mover, Ok(AnyMover::Kine(_))), "{mover:?}");
        }
    }

    #[test]
    fn cross_driver_and_nats_moves_are_refused() {
        for (source, target) in [(mysql(), postgres()), (postgres(), mysql())] {
            let (reason, message) = refusal(&source, &target);
            assert_eq!(reason, "MigrationUnsupported");
            assert!(
                message.contains("resourceVersions cannot be carried across drivers"),
                "{message}"
            );
        }
        let (reason, message) = refusal(&nats(), &nats());
        assert_eq!(reason, "MigrationUnsupported");
        assert!(message.contains("one tenant per NATS server"), "{message}");
    }
}
