//! kube-apiserver's own check of a tenant's JWT authenticator, before it is accepted. The program
//! `tenantplane-authn-check` (`tools/authn-check`: k8s.io/apiserver's strict decoder, validation and CEL
//! compiler, at the tenants' Kubernetes version) reads the AuthenticationConfiguration the controller
//! would render with this one authenticator. It type-checks CEL (a rule that is no bool, a function the
//! apiserver does not declare), which [`crate::domain::authenticator`]'s parser cannot: such an
//! authenticator would be kept out by the running apiserver and stop the next one from starting.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use serde::Deserialize;
use tokio::io::AsyncWriteExt as _;

use super::ServiceError;
use crate::{domain::FieldError, k8s::crd::JwtAuthenticator};

/// The program's name, looked up beside the running executable, then on `PATH`.
pub const PROGRAM: &str = "tenantplane-authn-check";
/// How long one check may take (it answers in tens of milliseconds).
const TIMEOUT: Duration = Duration::from_secs(10);

/// The program at `configured`, else [`PROGRAM`] beside the running executable, else on `PATH`;
/// `None` when there is none.
pub fn locate(configured: Option<PathBuf>) -> Option<PathBuf> {
    if configured.is_some() {
        return configured;
    }
    let beside = std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name(PROGRAM));
    let on_path = std::env::var_os("PATH")
        .map(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(PROGRAM))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    beside.into_iter().chain(on_path).find(|p| p.is_file())
}

/// The configuration kube-apiserver would load with `a` as its only authenticator (pure).
pub fn configuration(a: &JwtAuthenticator) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AuthenticationConfiguration",
        "jwt": [a],
    })
}

/// One reason the program gave.
#[derive(Debug, Deserialize)]
struct Problem {
    field: String,
    message: String,
}

/// The program's answer as field errors of the authenticator (`jwt[0].` taken off each field; the
/// whole authenticator, `authenticator`, when the program names none) (pure).
pub fn field_errors(stdout: &[u8]) -> Result<Vec<FieldError>, String> {
    let problems: Vec<Problem> = serde_json::from_slice(stdout)
        .map_err(|e| format!("{PROGRAM} answered something other than its JSON list: {e}"))?;
    Ok(problems
        .into_iter()
        .map(|p| {
            let field = match p.field.strip_prefix("jwt[0].") {
                Some(inner) => inner.to_string(),
                None if p.field.is_empty() || p.field == "jwt[0]" => "authenticator".to_string(),
                None => p.field,
            };
            FieldError::new(field, format!("kube-apiserver refuses it: {}", p.message))
        })
        .collect())
}

/// Runs `program` on `a`: the reasons kube-apiserver would refuse it (empty: it loads).
pub async fn check(program: &Path, a: &JwtAuthenticator) -> Result<Vec<FieldError>, ServiceError> {
    let unavailable = |what: String| {
        tracing::error!(program = %program.display(), "the authenticator check failed: {what}");
        ServiceError::Unavailable("the authenticator could not be checked; retry shortly".into())
    };
    let input = serde_json::to_vec(&configuration(a)).map_err(|e| ServiceError::Internal(e.to_string()))?;
    let mut child = tokio::process::Command::new(program)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| unavailable(format!("cannot start: {e}")))?;
    let mut stdin = child.stdin.take().ok_or_else(|| unavailable("no stdin".into()))?;
    let run = async {
        stdin.write_all(&input).await?;
        drop(stdin);
        child.wait_with_output().await
    };
    let output = match tokio::time::timeout(TIMEOUT, run).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => return Err(unavailable(e.to_string())),
        Err(_) => return Err(unavailable(format!("no answer within {} s", TIMEOUT.as_secs()))),
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(unavailable(format!("{}: {}", output.status, stderr.trim())));
    }
    field_errors(&output.stdout).map_err(unavailable)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn the_programs_fields_are_the_authenticators_own_and_every_message_says_who_refuses() {
        let stdout = br#"[{"field":"jwt[0].claimValidationRules[0].expression","message":"Invalid value: \"'x'\": must evaluate to bool"},{"field":"","message":"strict decoding error"}]"#;
        let errors = field_errors(stdout).unwrap();
        assert_eq!(
            errors,
            [
                FieldError::new(
                    "claimValidationRules[0].expression",
                    "kube-apiserver refuses it: Invalid value: \"'x'\": must evaluate to bool"
                ),
                FieldError::new(
                    "authenticator",
                    "kube-apiserver refuses it: strict decoding error"
                ),
            ]
        );
        assert_eq!(field_errors(b"[]").unwrap(), []);
        assert!(field_errors(b"panic: oops").is_err());
    }

    #[test]
    fn the_configuration_holds_the_authenticator_alone_under_the_apiservers_own_kind() {
        let a: JwtAuthenticator = serde_json::from_value(serde_json::json!({
            "issuer": {"url": "https://idp.example.com", "audiences": ["a"]},
            "claimMappings": {"username": {"claim": "sub", "prefix": ""}},
        }))
        .unwrap();
        let config = configuration(&a);
        assert_eq!(config["apiVersion"], "apiserver.config.k8s.io/v1");
        assert_eq!(config["kind"], "AuthenticationConfiguration");
        assert_eq!(config["jwt"], serde_json::json!([a]));
    }

    #[tokio::test]
    async fn a_program_that_fails_or_is_missing_is_a_retryable_503_and_never_an_accept() {
        let a: JwtAuthenticator = serde_json::from_value(serde_json::json!({
            "issuer": {"url": "https://idp.example.com", "audiences": ["a"]},
            "claimMappings": {"username": {"claim": "sub", "prefix": ""}},
        }))
        .unwrap();
        for program in ["/bin/false", "/nonexistent/tenantplane-authn-check"] {
            let err = check(Path::new(program), &a).await.unwrap_err();
            assert!(matches!(err, ServiceError::Unavailable(_)), "{program}: {err:?}");
        }
    }
}
