//! The client's configuration: the file `login` writes, and the environment variables that override it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{
    error::{ClientError, Result},
    http::Api,
};
use crate::secret::Secret;

/// The file's path (overrides the default location).
pub const ENV_CONFIG: &str = "TENANTPLANE_CONFIG";
/// The API URL (overrides the file's).
pub const ENV_URL: &str = "TENANTPLANE_URL";
/// The bearer token (overrides the file's).
pub const ENV_TOKEN: &str = "TENANTPLANE_TOKEN";

/// What `login` saves: the API URL, the token and the tenant.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// The API's base URL (`…/api/v1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The tenant commands act on unless `--tenant` or `TENANTPLANE_TENANT` says otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// Redacts the token.
impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("tenant", &self.tenant)
            .finish()
    }
}

/// The config file's path from the environment `env`: `TENANTPLANE_CONFIG`, else
/// `$XDG_CONFIG_HOME/tenantplane/config.yaml`, else `$HOME/.config/tenantplane/config.yaml`.
pub fn path_from(env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |key: &str| env(key).filter(|v| !v.is_empty());
    if let Some(path) = set(ENV_CONFIG) {
        return Some(PathBuf::from(path));
    }
    let base = set("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| set("HOME").map(|home| PathBuf::from(home).join(".config")))?;
    Some(base.join("tenantplane").join("config.yaml"))
}

/// The config file's path in this process's environment.
pub fn path() -> Result<PathBuf> {
    path_from(|k| std::env::var(k).ok())
        .ok_or_else(|| ClientError::Other(format!("no config file location: set {ENV_CONFIG} or HOME")))
}

impl Config {
    /// Reads the file at `path`; a missing file is an empty configuration.
    pub fn load(path: &Path) -> Result<Config> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_yaml::from_str(&text).map_err(|e| {
                ClientError::Other(format!(
                    "{} is not a tenantplane config file: {e}",
                    path.display()
                ))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(e) => Err(ClientError::Other(format!("read {}: {e}", path.display()))),
        }
    }

    /// Writes it to `path` atomically, mode 0600.
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_yaml::to_string(self)
            .map_err(|e| ClientError::Other(format!("serialize the config: {e}")))?;
        super::fs::write_private(path, text.as_bytes())
            .map_err(|e| ClientError::Other(format!("write {}: {e}", path.display())))
    }
}

/// An API client for the configured URL and token, and the tenant to act on.
#[derive(Debug)]
pub struct Session {
    /// The API.
    pub api: Api,
    /// The tenant: `--tenant`/`TENANTPLANE_TENANT`, else the saved one.
    pub tenant: Option<String>,
}

impl Session {
    /// From the environment and the config file; `tenant` is `--tenant` (or `TENANTPLANE_TENANT`). The
    /// file's token goes only to the origin of the file's URL ([`super::origin::check_saved`]).
    pub fn load(tenant: Option<String>) -> Result<Session> {
        let file = Config::load(&path()?)?;
        let env = |key: &str| std::env::var(key).ok().filter(|v| !v.is_empty());
        let not_logged_in = || {
            ClientError::NotLoggedIn(format!(
                "not logged in: run `tenantplane login --url URL --token TOKEN`, or set {ENV_URL} and {ENV_TOKEN}"
            ))
        };
        let url = env(ENV_URL).or(file.url.clone()).ok_or_else(not_logged_in)?;
        let token = match env(ENV_TOKEN) {
            Some(token) => token,
            None => {
                let token = file.token.ok_or_else(not_logged_in)?;
                super::origin::check_saved(&url, file.url.as_deref())?;
                token
            }
        };
        Ok(Session {
            api: Api::new(&url, Secret::new(token))?,
            tenant: tenant.filter(|t| !t.is_empty()).or(file.tenant),
        })
    }

    /// The tenant, or an error saying how to choose one.
    pub fn tenant(&self) -> Result<&str> {
        self.tenant.as_deref().ok_or_else(|| {
            ClientError::Other(
                "no tenant: pass --tenant, set TENANTPLANE_TENANT, or log in with a tenant's token".into(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |key| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    }

    #[test]
    fn the_path_is_the_override_else_xdg_config_home_else_home() {
        let all = [
            ("TENANTPLANE_CONFIG", "/c.yaml"),
            ("XDG_CONFIG_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(path_from(env(&all)), Some(PathBuf::from("/c.yaml")));
        assert_eq!(
            path_from(env(&all[1..])),
            Some(PathBuf::from("/x/tenantplane/config.yaml"))
        );
        assert_eq!(
            path_from(env(&[("XDG_CONFIG_HOME", "relative"), ("HOME", "/h")])),
            Some(PathBuf::from("/h/.config/tenantplane/config.yaml"))
        );
        assert_eq!(path_from(env(&[("TENANTPLANE_CONFIG", ""), ("HOME", "")])), None);
    }

    #[test]
    fn debug_never_shows_the_token() {
        let config = Config {
            url: Some("http://x/api/v1".into()),
            token: Some("eyJsecret".into()),
            tenant: None,
        };
        assert_eq!(
            format!("{config:?}"),
            r#"Config { url: Some("http://x/api/v1"), token: Some("<redacted>"), tenant: None }"#
        );
    }
}
