//! What can go wrong in a client command, and the exit code each failure gives.

use std::{fmt, process::ExitCode};

use crate::domain::FieldError;

/// The exit codes of the client commands, as `--help` and the README list them.
pub const EXIT_CODES: &str = "Exit codes of the client commands (login, cp, kubeconfig, join-token, op):
  0    success
  1    any other error: network, local files, configuration, a server error (5xx)
  2    usage error (bad flags or arguments)
  3    the API refused the request (4xx other than 401/403): its title, detail and field errors are printed
  4    authentication or authorization: not logged in, token refused (401) or role too low (403)
  5    the operation failed: its reason and message are printed
  130  interrupted (Ctrl-C) while waiting: the operation goes on; the command to resume waiting is printed";

/// A problem document (RFC 9457) as the API sends it.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiProblem {
    /// HTTP status.
    #[serde(default)]
    pub status: u16,
    /// Short summary.
    #[serde(default)]
    pub title: String,
    /// What happened.
    #[serde(default)]
    pub detail: String,
    /// The invalid fields.
    #[serde(default)]
    pub errors: Vec<FieldError>,
    /// The request id, to quote in a report.
    #[serde(default)]
    pub request_id: Option<String>,
}

impl fmt::Display for ApiProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.title, self.status)?;
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        for e in &self.errors {
            write!(f, "\n  field {}: {}", e.field, e.message)?;
        }
        if let Some(id) = &self.request_id {
            write!(f, "\n  request id: {id}")?;
        }
        Ok(())
    }
}

/// A failed client command.
#[derive(Debug)]
pub enum ClientError {
    /// Network, local files, configuration, an unexpected answer (exit 1).
    Other(String),
    /// The server failed (5xx, exit 1).
    Server(ApiProblem),
    /// The API refused the request (4xx, exit 3).
    Refused(ApiProblem),
    /// Not logged in (exit 4).
    NotLoggedIn(String),
    /// The token was refused (401) or its role is too low (403) (exit 4).
    Auth(ApiProblem),
    /// The operation ended `failed` (exit 5).
    OperationFailed {
        /// Operation id.
        id: String,
        /// Machine-readable reason.
        reason: Option<String>,
        /// What went wrong.
        error: Option<String>,
    },
    /// Ctrl-C while waiting on operation `id` of `tenant` (exit 130).
    Interrupted {
        /// Operation id.
        id: String,
        /// Tenant slug.
        tenant: String,
    },
}

/// Exit code 3: the API refused the request.
pub const EXIT_REFUSED: u8 = 3;
/// Exit code 4: authentication or authorization.
pub const EXIT_AUTH: u8 = 4;
/// Exit code 5: the operation failed.
pub const EXIT_OPERATION_FAILED: u8 = 5;
/// Exit code 130: interrupted while waiting.
pub const EXIT_INTERRUPTED: u8 = 130;

impl ClientError {
    /// The process exit code for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Other(_) | ClientError::Server(_) => 1,
            ClientError::Refused(_) => EXIT_REFUSED,
            ClientError::NotLoggedIn(_) | ClientError::Auth(_) => EXIT_AUTH,
            ClientError::OperationFailed { .. } => EXIT_OPERATION_FAILED,
            ClientError::Interrupted { .. } => EXIT_INTERRUPTED,
        }
    }

    /// An error from a problem answer with `status`.
    pub fn from_problem(status: u16, problem: ApiProblem) -> Self {
        match status {
            401 | 403 => ClientError::Auth(problem),
            400..=499 => ClientError::Refused(problem),
            _ => ClientError::Server(problem),
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Other(msg) | ClientError::NotLoggedIn(msg) => f.write_str(msg),
            ClientError::Server(p) => write!(f, "the server failed: {p}"),
            ClientError::Refused(p) => write!(f, "the API refused the request: {p}"),
            ClientError::Auth(p) => write!(f, "not authorized: {p}"),
            ClientError::OperationFailed { id, reason, error } => write!(
                f,
                "operation {id} failed: {}: {}",
                reason.as_deref().unwrap_or("(no reason)"),
                error.as_deref().unwrap_or("(no message)")
            ),
            ClientError::Interrupted { id, tenant } => write!(
                f,
                "interrupted: operation {id} goes on on the server; resume waiting with:\n  tenantplane op wait {id} --tenant {tenant}"
            ),
        }
    }
}

impl From<std::io::Error> for ClientError {
    fn from(e: std::io::Error) -> Self {
        ClientError::Other(e.to_string())
    }
}

impl From<reqwest::Error> for ClientError {
    fn from(e: reqwest::Error) -> Self {
        ClientError::Other(format!("cannot reach the API: {e}"))
    }
}

/// The result of a client command.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// Prints the error of a failed command (never a token: none is ever part of one) and gives the exit code.
pub fn exit(result: Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(status: u16) -> ApiProblem {
        ApiProblem {
            status,
            title: "Invalid input".into(),
            detail: "name: must be a DNS-1035 label".into(),
            errors: vec![FieldError::new("name", "must be a DNS-1035 label")],
            request_id: Some("r1".into()),
        }
    }

    #[test]
    fn each_failure_has_its_documented_exit_code() {
        let codes: Vec<u8> = [
            ClientError::Other("x".into()),
            ClientError::from_problem(500, problem(500)),
            ClientError::from_problem(422, problem(422)),
            ClientError::from_problem(404, problem(404)),
            ClientError::from_problem(401, problem(401)),
            ClientError::from_problem(403, problem(403)),
            ClientError::NotLoggedIn("x".into()),
            ClientError::OperationFailed {
                id: "o".into(),
                reason: None,
                error: None,
            },
            ClientError::Interrupted {
                id: "o".into(),
                tenant: "t".into(),
            },
        ]
        .iter()
        .map(ClientError::exit_code)
        .collect();
        assert_eq!(codes, vec![1, 1, 3, 3, 4, 4, 4, 5, 130]);
    }

    #[test]
    fn a_refusal_names_title_status_detail_fields_and_request_id() {
        assert_eq!(
            ClientError::from_problem(422, problem(422)).to_string(),
            "the API refused the request: Invalid input (422): name: must be a DNS-1035 label\n  field name: must be a DNS-1035 label\n  request id: r1"
        );
    }

    #[test]
    fn an_interruption_says_how_to_resume() {
        assert_eq!(
            ClientError::Interrupted {
                id: "o1".into(),
                tenant: "acme".into()
            }
            .to_string(),
            "interrupted: operation o1 goes on on the server; resume waiting with:\n  tenantplane op wait o1 --tenant acme"
        );
    }
}
