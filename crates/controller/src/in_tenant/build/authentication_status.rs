//! Pure: `status.authentication`, what the tenant kube-apiserver runs of `spec.authentication`, from the
//! file the controller renders into `<tcp>-authentication-config` and the apiserver's own metrics.
//!
//! kube-apiserver v1.34 reports the configuration it loaded as
//! `apiserver_authentication_config_controller_last_config_info{apiserver_id_hash,hash="sha256:<hex>"} 1`,
//! where `<hex>` is the SHA-256 of the file's bytes, and each reload attempt as
//! `apiserver_authentication_config_controller_automatic_reload_last_timestamp_seconds{apiserver_id_hash,status}`
//! (`success` or `failure`, Unix seconds). It has no metric of an issuer's discovery or key fetches (its
//! only per-issuer metric, `apiserver_authentication_jwt_authenticator_latency_seconds`, times token
//! verifications), so an authenticator the apiserver loaded is `Active` whatever its issuer answers.

use crate::{
    Error,
    k8s::crd::{AuthenticationStatus, AuthenticatorState, JwtAuthenticatorStatus, TenantControlPlane},
    tenant_control_plane::build::{authentication_yaml, service_account_issuers},
};

/// The prefix of the metric lines the phase reads (the fetch keeps only those).
pub const METRIC_PREFIX: &str = "apiserver_authentication_config_controller_";
/// The loaded configuration's hash, as its `hash` label.
const LAST_CONFIG_INFO: &str = "apiserver_authentication_config_controller_last_config_info";
/// The time of the last reload attempt, per `status` label.
const LAST_RELOAD: &str =
    "apiserver_authentication_config_controller_automatic_reload_last_timestamp_seconds";
/// The message of an authenticator the apiserver has not loaded yet.
pub const PENDING_MESSAGE: &str =
    "written; the tenant kube-apiserver has not loaded it yet (it reloads within about a minute)";
/// The message of an authenticator in a configuration the apiserver refused.
pub const FAILED_MESSAGE: &str = "the tenant kube-apiserver refused this configuration at reload and keeps serving the previous one (its log names the reason)";

/// What the tenant kube-apiserver's metrics say of its authentication configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reloads {
    /// The `hash` label of `…_last_config_info` (`sha256:<hex>` of the loaded file).
    pub loaded_hash: Option<String>,
    /// When a reload last succeeded (Unix seconds).
    pub last_success: Option<f64>,
    /// When a reload last failed (Unix seconds).
    pub last_failure: Option<f64>,
}

impl Reloads {
    /// Whether the newest reload attempt failed: a failure newer than the last success, or no success.
    pub fn newest_failed(&self) -> bool {
        match (self.last_failure, self.last_success) {
            (Some(failure), Some(success)) => failure > success,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

/// One sample of the Prometheus text format.
struct Sample<'a> {
    name: &'a str,
    labels: Vec<(&'a str, String)>,
    value: f64,
}

impl Sample<'_> {
    /// The value of label `key`.
    fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The sample on `line` (`None` for a comment or junk).
fn sample(line: &str) -> Option<Sample<'_>> {
    let line = line.trim();
    if line.starts_with('#') {
        return None;
    }
    let (name, labels, rest) = match line.find(['{', ' ']) {
        Some(i) if line[i..].starts_with('{') => {
            let end = i + line[i..].rfind('}')?;
            (&line[..i], labels(&line[i + 1..end])?, &line[end + 1..])
        }
        Some(i) => (&line[..i], Vec::new(), &line[i..]),
        None => return None,
    };
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample { name, labels, value })
}

/// The `key="value"` pairs of a label set (`\\`, `\"` and `\n` unescaped).
fn labels(mut text: &str) -> Option<Vec<(&str, String)>> {
    let mut pairs = Vec::new();
    loop {
        text = text.trim_start_matches([',', ' ']);
        if text.is_empty() {
            return Some(pairs);
        }
        let (key, rest) = text.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        pairs.push((key.trim(), value));
        text = &rest[end + 1..];
    }
}

/// The reload state in `metrics` (the Prometheus text of `/metrics`, or only its [`METRIC_PREFIX`] lines).
pub fn parse(metrics: &str) -> Reloads {
    let mut reloads = Reloads::default();
    for sample in metrics.lines().filter_map(sample) {
        match sample.name {
            LAST_CONFIG_INFO if sample.value != 0.0 => {
                reloads.loaded_hash = sample.label("hash").map(str::to_string);
            }
            LAST_RELOAD => match sample.label("status") {
                Some("success") => reloads.last_success = Some(sample.value),
                Some("failure") => reloads.last_failure = Some(sample.value),
                _ => {}
            },
            _ => {}
        }
    }
    reloads
}

/// The file the controller renders into `<tcp>-authentication-config`: its hash and its authenticators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// `sha256:<hex>` of the file's bytes, as the apiserver hashes it.
    pub hash: String,
    /// The issuer URL of each JWT authenticator in the file, in order.
    pub issuers: Vec<String>,
}

/// The rendered file of `tcp` (the same render as the ConfigMap's), when `spec.authentication` is set.
pub fn rendered(tcp: &TenantControlPlane) -> Result<Option<Rendered>, Error> {
    let Some(spec) = tcp.spec.authentication.as_ref() else {
        return Ok(None);
    };
    let (yaml, _, left_out) = authentication_yaml(spec, &service_account_issuers(tcp))?;
    let issuers = spec
        .jwt
        .iter()
        .map(|a| a.issuer.url.clone())
        .filter(|url| !left_out.contains(url))
        .collect();
    Ok(Some(Rendered {
        hash: super::checksum([yaml.as_str()]),
        issuers,
    }))
}

/// The status of `rendered` given what the apiserver reports (`reloads`) and the `previous` status.
pub fn status(
    rendered: &Rendered,
    reloads: &Reloads,
    previous: Option<&AuthenticationStatus>,
) -> AuthenticationStatus {
    let loaded = reloads.loaded_hash.as_deref() == Some(rendered.hash.as_str());
    let was_active = |url: &str| {
        previous
            .into_iter()
            .flat_map(|p| &p.jwt)
            .any(|j| j.issuer_url == url && j.state == AuthenticatorState::Active)
    };
    let jwt = rendered
        .issuers
        .iter()
        .map(|url| {
            let (state, message) = if loaded || was_active(url) {
                (AuthenticatorState::Active, None)
            } else if reloads.newest_failed() {
                (AuthenticatorState::Failed, Some(FAILED_MESSAGE.to_string()))
            } else {
                (AuthenticatorState::Pending, Some(PENDING_MESSAGE.to_string()))
            };
            JwtAuthenticatorStatus {
                issuer_url: url.clone(),
                state,
                message,
            }
        })
        .collect();
    AuthenticationStatus {
        config_hash: Some(rendered.hash.clone()),
        loaded_hash: reloads.loaded_hash.clone(),
        jwt,
    }
}

/// `status.authentication` after a pass that read `metrics` (`None`: unread, so the previous status
/// stays); none without `spec.authentication`.
pub fn report(tcp: &TenantControlPlane, metrics: Option<&str>) -> Option<AuthenticationStatus> {
    let previous = tcp.status.as_ref().and_then(|s| s.authentication.as_ref());
    let rendered = match rendered(tcp) {
        Ok(Some(rendered)) => rendered,
        Ok(None) => return None,
        Err(_) => return previous.cloned(),
    };
    match metrics {
        Some(metrics) => Some(status(&rendered, &parse(metrics), previous)),
        None => previous.cloned(),
    }
}
