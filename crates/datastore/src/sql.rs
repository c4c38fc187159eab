//! Helpers shared by the PostgreSQL and MySQL drivers: error classification.

use super::{DatastoreError, redact};
use crate::k8s::crd;

/// Maps a sqlx error to a [`DatastoreError`], removing `secret` (a password that was part of the
/// statement) from the message.
pub(crate) fn error(
    driver: crd::Driver,
    endpoint: &str,
    operation: &'static str,
    error: sqlx::Error,
    secret: Option<&str>,
) -> DatastoreError {
    let clean = |message: String| match secret {
        Some(secret) => redact(message, secret),
        None => message,
    };
    let endpoint = endpoint.to_string();
    match error {
        sqlx::Error::Io(e) => DatastoreError::Unreachable {
            driver,
            endpoint,
            message: e.to_string(),
        },
        sqlx::Error::Tls(e) => DatastoreError::InvalidConfig {
            driver,
            message: format!("TLS with {endpoint} failed: {e}"),
        },
        sqlx::Error::Configuration(e) => DatastoreError::InvalidConfig {
            driver,
            message: clean(e.to_string()),
        },
        sqlx::Error::Database(db) => {
            let message = clean(db.message().to_string());
            let class = match driver {
                crd::Driver::MySQL => db
                    .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                    .map(|e| mysql_class(e.number()))
                    .unwrap_or(Class::Other),
                _ => db.code().map(|c| postgres_class(&c)).unwrap_or(Class::Other),
            };
            match class {
                Class::Unauthorized => DatastoreError::Unauthorized {
                    driver,
                    endpoint,
                    message,
                },
                Class::PermissionDenied => DatastoreError::PermissionDenied {
                    driver,
                    endpoint,
                    operation,
                    message,
                },
                Class::Unavailable => DatastoreError::Unreachable {
                    driver,
                    endpoint,
                    message,
                },
                Class::InvalidConfig => DatastoreError::InvalidConfig { driver, message },
                Class::Other => DatastoreError::Backend {
                    driver,
                    endpoint,
                    operation,
                    message,
                },
            }
        }
        sqlx::Error::PoolTimedOut => DatastoreError::Unreachable {
            driver,
            endpoint,
            message: "timed out waiting for a connection".into(),
        },
        other => DatastoreError::Backend {
            driver,
            endpoint,
            operation,
            message: clean(other.to_string()),
        },
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Class {
    Unauthorized,
    PermissionDenied,
    Unavailable,
    InvalidConfig,
    Other,
}

/// PostgreSQL SQLSTATEs (Appendix A of its manual).
fn postgres_class(code: &str) -> Class {
    match code {
        // invalid_authorization_specification (also "role does not exist"), invalid_password
        "28000" | "28P01" => Class::Unauthorized,
        "42501" => Class::PermissionDenied,
        // cannot_connect_now, too_many_connections, admin/crash shutdown
        "57P03" | "53300" | "57P01" | "57P02" => Class::Unavailable,
        // invalid_catalog_name: the maintenance database does not exist
        "3D000" => Class::InvalidConfig,
        c if c.starts_with("08") => Class::Unavailable,
        _ => Class::Other,
    }
}

/// MySQL/MariaDB error numbers.
fn mysql_class(number: u16) -> Class {
    match number {
        // ER_ACCESS_DENIED_ERROR, ER_ACCESS_DENIED_NO_PASSWORD_ERROR, ER_PASSWORD_NO_MATCH
        1045 | 1698 | 1133 => Class::Unauthorized,
        // ER_DBACCESS_DENIED_ERROR, ER_TABLEACCESS_DENIED_ERROR, ER_SPECIFIC_ACCESS_DENIED_ERROR,
        // ER_CANT_CREATE_USER_WITH_GRANT
        1044 | 1142 | 1227 | 1410 => Class::PermissionDenied,
        // ER_CON_COUNT_ERROR, ER_SERVER_SHUTDOWN, ER_TOO_MANY_USER_CONNECTIONS
        1040 | 1053 | 1203 => Class::Unavailable,
        // ER_BAD_DB_ERROR
        1049 => Class::InvalidConfig,
        _ => Class::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_codes_map_to_classes() {
        assert_eq!(postgres_class("28P01"), Class::Unauthorized);
        assert_eq!(postgres_class("08006"), Class::Unavailable);
        assert_eq!(postgres_class("42P04"), Class::Other);
        assert_eq!(mysql_class(1045), Class::Unauthorized);
        assert_eq!(mysql_class(1227), Class::PermissionDenied);
        assert_eq!(mysql_class(1064), Class::Other);
    }

    #[test]
    fn io_errors_are_unreachable_and_transient() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let err = error(
            crd::Driver::PostgreSQL,
            "127.0.0.1:1",
            "connect",
            sqlx::Error::Io(io),
            None,
        );
        assert_eq!(err.reason(), "DataStoreUnreachable");
        assert!(err.is_transient());
        assert_eq!(
            err.to_string(),
            "PostgreSQL datastore at 127.0.0.1:1 is unreachable: Connection refused"
        );
    }
}
