//! Structured authentication of `spec.authentication`: the ConfigMap `<tcp>-authentication-config`
//! holding kube-apiserver's `apiserver.config.k8s.io/v1` AuthenticationConfiguration, mounted as a
//! directory (never by `subPath`, so the kubelet's in-place updates reach the pod) and named by the
//! managed flag `--authentication-config`.
//!
//! kube-apiserver reloads the file itself when it changes, so the ConfigMap's content feeds no
//! pod-template checksum: changing the authenticators never rolls the Deployment; only turning
//! `spec.authentication` on or off changes the pod template (the volume, the mount and the flag).

use k8s_openapi::api::core::v1::{ConfigMap, ConfigMapVolumeSource, Volume, VolumeMount};
use serde::Serialize;

use super::*;
use crate::k8s::crd::{AuthenticationSpec, JwtAuthenticator};

/// Where the ConfigMap is mounted in kube-apiserver.
pub const AUTHENTICATION_DIR: &str = "/etc/kubernetes/authentication";
/// The ConfigMap's key, the configuration file's name.
pub const AUTHENTICATION_KEY: &str = "authentication-config.yaml";
/// The pod volume of the ConfigMap.
pub const AUTHENTICATION_VOLUME: &str = "authentication-config";
/// The flag prefix kube-apiserver refuses beside `--authentication-config`.
const OIDC_PREFIX: &str = "oidc-";

/// The spec, when structured authentication is requested (also with no authenticator).
pub fn authentication(tcp: &TenantControlPlane) -> Option<&AuthenticationSpec> {
    tcp.spec.authentication.as_ref()
}

/// `<tcp>-authentication-config`.
pub fn authentication_config_name(tcp: &TenantControlPlane) -> String {
    format!("{}-authentication-config", tcp.name_any())
}

/// The kube-apiserver flags structured authentication manages.
pub fn authentication_flags() -> BTreeMap<String, String> {
    kv(&[(
        "authentication-config",
        format!("{AUTHENTICATION_DIR}/{AUTHENTICATION_KEY}"),
    )])
}

/// The user's `extraArgs.apiServer` `--oidc-*` flags (verbatim) that structured authentication drops:
/// kube-apiserver refuses them together with `--authentication-config`. None without it.
pub fn oidc_flags(tcp: &TenantControlPlane) -> Vec<String> {
    if authentication(tcp).is_none() {
        return Vec::new();
    }
    user_args(tcp, |e| e.api_server.clone())
        .into_iter()
        .filter(|a| flag_name(a).starts_with(OIDC_PREFIX))
        .collect()
}

/// The names (`--oidc-issuer-url`, never a value) of the [`oidc_flags`], each once, in order.
pub fn oidc_flag_names(tcp: &TenantControlPlane) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for name in oidc_flags(tcp).iter().map(|a| format!("--{}", flag_name(a))) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// The ConfigMap's mount in kube-apiserver: the whole directory, so updates reach the file.
pub fn authentication_mount() -> VolumeMount {
    VolumeMount {
        name: AUTHENTICATION_VOLUME.into(),
        mount_path: AUTHENTICATION_DIR.into(),
        read_only: Some(true),
        ..Default::default()
    }
}

/// The ConfigMap's volume.
pub fn authentication_volume(tcp: &TenantControlPlane) -> Volume {
    Volume {
        name: AUTHENTICATION_VOLUME.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: authentication_config_name(tcp),
            default_mode: Some(420),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The file kube-apiserver reads (the field names are the apiserver's own).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AuthenticationConfiguration<'a> {
    api_version: &'static str,
    kind: &'static str,
    jwt: Vec<&'a JwtAuthenticator>,
}

/// What [`authentication_config`] built: the ConfigMap and what the `AuthenticationConfigured`
/// condition reports.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltAuthentication {
    /// `<tcp>-authentication-config`.
    pub config_map: ConfigMap,
    /// How many JWT authenticators the configuration holds.
    pub authenticators: usize,
    /// Issuer URLs left out because they equal a service-account issuer.
    pub conflicts: Vec<String>,
    /// Names of the user's `--oidc-*` flags that were dropped (never their values).
    pub oidc_dropped: Vec<String>,
}

/// The configuration file: every authenticator of `spec` whose issuer is no service-account issuer,
/// in spec order; and the issuer URLs left out.
pub fn authentication_yaml(
    spec: &AuthenticationSpec,
    service_account_issuers: &[String],
) -> Result<(String, usize, Vec<String>), Error> {
    let (kept, left_out): (Vec<&JwtAuthenticator>, Vec<&JwtAuthenticator>) = spec
        .jwt
        .iter()
        .partition(|a| !service_account_issuers.contains(&a.issuer.url));
    let count = kept.len();
    let file = AuthenticationConfiguration {
        api_version: "apiserver.config.k8s.io/v1",
        kind: "AuthenticationConfiguration",
        jwt: kept,
    };
    let yaml = serde_yaml::to_string(&file).map_err(|e| {
        invalid(
            "AuthenticationConfigInvalid",
            format!("spec.authentication cannot be rendered: {e}"),
        )
    })?;
    Ok((
        yaml,
        count,
        left_out.into_iter().map(|a| a.issuer.url.clone()).collect(),
    ))
}

/// `<tcp>-authentication-config` with `authentication-config.yaml`, when `spec.authentication` is set.
pub fn authentication_config(tcp: &TenantControlPlane) -> Result<Option<BuiltAuthentication>, Error> {
    let Some(spec) = authentication(tcp) else {
        return Ok(None);
    };
    let (yaml, authenticators, conflicts) = authentication_yaml(spec, &service_account_issuers(tcp))?;
    let labels = BTreeMap::from([
        (TCP_NAME_LABEL.to_string(), tcp.name_any()),
        (MANAGED_BY_LABEL.0.to_string(), MANAGED_BY_LABEL.1.to_string()),
    ]);
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(authentication_config_name(tcp)),
            namespace: tcp.namespace(),
            labels: Some(labels),
            owner_references: Some(vec![owner(tcp)?]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(AUTHENTICATION_KEY.to_string(), yaml)])),
        ..Default::default()
    };
    Ok(Some(BuiltAuthentication {
        config_map,
        authenticators,
        conflicts,
        oidc_dropped: oidc_flag_names(tcp),
    }))
}
