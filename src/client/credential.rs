//! `tenantplane credential --url URL --tenant T --control-plane ID`: the client-go exec credential plugin
//! that downloaded kubeconfigs run. It prints one `ExecCredential` (a short-lived control-plane token from
//! `POST …/control-planes/{id}/credentials`) and caches it per (URL, tenant, control plane, Tenantplane
//! token) under `$XDG_CACHE_HOME/tenantplane/credentials/`, since kubectl starts it afresh every time.

use std::{
    os::unix::fs::{DirBuilderExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    process::ExitCode,
};

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{
    config::{self, Config, ENV_TOKEN, ENV_URL},
    error::{ApiProblem, ClientError, Result},
    http::Api,
    origin,
};
use crate::secret::Secret;

/// The `apiVersion` of the ExecCredential kubectl reads.
pub const EXEC_API_VERSION: &str = "client.authentication.k8s.io/v1";
/// The most a cached credential's safety margin is.
pub const MAX_MARGIN: Duration = Duration::seconds(60);

/// `tenantplane credential`.
#[derive(Debug, clap::Args)]
pub struct CredentialArgs {
    /// The API's base URL (…/api/v1); wins over TENANTPLANE_URL and the URL `login` saved. The token
    /// `login` saved is sent only to the origin (scheme, host, port) it was saved for.
    #[arg(long)]
    url: Option<String>,
    /// Tenant slug.
    #[arg(long)]
    tenant: String,
    /// Name or id of the control plane.
    #[arg(long)]
    control_plane: String,
    /// Lifetime of a new credential in seconds, 60 to 3600 (default: the server's, 900).
    #[arg(long, value_parser = clap::value_parser!(u32).range(60..=3600))]
    ttl_seconds: Option<u32>,
}

/// A cache file's content: the credential and when this client received it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedCredential {
    /// The control plane's bearer token.
    pub token: String,
    /// When it expires (the server's `expiresAt`).
    pub expires_at: DateTime<Utc>,
    /// When it was requested, by this machine's clock.
    pub issued_at: DateTime<Utc>,
}

/// Redacts the token.
impl std::fmt::Debug for CachedCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedCredential")
            .field("token", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .field("issued_at", &self.issued_at)
            .finish()
    }
}

impl CachedCredential {
    /// The safety margin: a quarter of its lifetime, at most [`MAX_MARGIN`].
    pub fn margin(&self) -> Duration {
        ((self.expires_at - self.issued_at) / 4).min(MAX_MARGIN)
    }

    /// Whether it may still be handed out at `now`: more than its margin left (and a positive lifetime).
    pub fn usable(&self, now: DateTime<Utc>) -> bool {
        !self.token.is_empty() && self.expires_at > self.issued_at && self.expires_at - now > self.margin()
    }
}

impl CredentialArgs {
    /// Runs `credential`: the ExecCredential on stdout, or one `error: …` line on stderr.
    pub async fn run(self) -> ExitCode {
        match self.credential().await {
            Ok(entry) => {
                println!("{}", exec_credential(&entry.token, entry.expires_at));
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("error: {}", describe(&err, &self.tenant, &self.control_plane));
                ExitCode::from(err.exit_code())
            }
        }
    }

    /// A usable cached credential, else a new one from the API (then cached).
    async fn credential(&self) -> Result<CachedCredential> {
        let env = |key: &str| std::env::var(key).ok();
        let (url, token) = resolve(self.url.as_deref(), env, || Config::load(&config::path()?))?;
        let api = Api::new(&url, token.clone())?;
        let cache = cache_dir_from(env).map(|dir| {
            dir.join(cache_key(
                api.base(),
                &self.tenant,
                &self.control_plane,
                token.expose(),
            ))
        });
        obtain(
            &api,
            cache.as_deref(),
            &self.tenant,
            &self.control_plane,
            self.ttl_seconds,
            Utc::now(),
        )
        .await
    }
}

/// The URL (`--url`, else `TENANTPLANE_URL`, else the config file's) and the Tenantplane token
/// (`TENANTPLANE_TOKEN`, else the config file's). `file` is read only when one of them is missing; the
/// file's token goes only to the origin of the file's URL ([`origin::check_saved`]).
pub fn resolve(
    url: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
    file: impl FnOnce() -> Result<Config>,
) -> Result<(String, Secret<String>)> {
    let set = |key: &str| env(key).filter(|v| !v.is_empty());
    let url = url
        .filter(|u| !u.is_empty())
        .map(str::to_string)
        .or_else(|| set(ENV_URL));
    let not_logged_in = |what: &str| {
        ClientError::NotLoggedIn(format!(
            "no {what}: run `tenantplane login --url URL --token TOKEN`, or set {ENV_TOKEN}"
        ))
    };
    if let Some(token) = set(ENV_TOKEN) {
        let url = match url {
            Some(url) => url,
            None => file()?.url.ok_or_else(|| not_logged_in("API URL (--url)"))?,
        };
        return Ok((url, Secret::new(token)));
    }
    let file = file()?;
    let token = file
        .token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| not_logged_in("Tenantplane token"))?;
    let url = match url {
        Some(url) => {
            origin::check_saved(&url, file.url.as_deref())?;
            url
        }
        None => file.url.ok_or_else(|| not_logged_in("API URL (--url)"))?,
    };
    Ok((url, Secret::new(token)))
}

/// The cached credential at `cache` if still usable at `now`, else a new one from `api`, written to `cache`.
pub async fn obtain(
    api: &Api,
    cache: Option<&Path>,
    tenant: &str,
    control_plane: &str,
    ttl_seconds: Option<u32>,
    now: DateTime<Utc>,
) -> Result<CachedCredential> {
    if let Some(entry) = cache.and_then(read_cached).filter(|e| e.usable(now)) {
        return Ok(entry);
    }
    let body = match ttl_seconds {
        Some(ttl) => json!({ "ttlSeconds": ttl }),
        None => json!({}),
    };
    let issued = api.credential(tenant, control_plane, &body).await?;
    if issued.token.is_empty() {
        return Err(ClientError::Other(
            "unexpected answer from the API: the credential has no token".into(),
        ));
    }
    let entry = CachedCredential {
        token: issued.token,
        expires_at: issued.expires_at,
        issued_at: now,
    };
    match cache {
        Some(path) => {
            if let Err(e) = write_cached(path, &entry) {
                eprintln!(
                    "warning: the credential was not cached in {}: {e}",
                    path.display()
                );
            }
            prune(path, now);
        }
        None => eprintln!("warning: the credential was not cached: set XDG_CACHE_HOME or HOME"),
    }
    Ok(entry)
}

/// The ExecCredential kubectl reads (`client.authentication.k8s.io/v1`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ExecCredential<'a> {
    api_version: &'static str,
    kind: &'static str,
    status: ExecCredentialStatus<'a>,
}

/// The `status` of an [`ExecCredential`].
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ExecCredentialStatus<'a> {
    token: &'a str,
    expiration_timestamp: String,
}

/// The ExecCredential JSON kubectl reads: `token`, valid until `expires_at`.
pub fn exec_credential(token: &str, expires_at: DateTime<Utc>) -> String {
    let credential = ExecCredential {
        api_version: EXEC_API_VERSION,
        kind: "ExecCredential",
        status: ExecCredentialStatus {
            token,
            expiration_timestamp: expires_at.to_rfc3339_opts(SecondsFormat::Secs, true),
        },
    };
    serde_json::to_string(&credential).unwrap_or_default()
}

/// The cache directory from the environment `env`: `$XDG_CACHE_HOME/tenantplane/credentials`, else
/// `$HOME/.cache/tenantplane/credentials`.
pub fn cache_dir_from(env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |key: &str| env(key).filter(|v| !v.is_empty());
    let base = set("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| set("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(base.join("tenantplane").join("credentials"))
}

/// The cache file's name: the SHA-256 (hex) of the URL, tenant, control plane and the token's own
/// SHA-256, so it names neither the token nor anything from which it can be read back.
pub fn cache_key(url: &str, tenant: &str, control_plane: &str, token: &str) -> String {
    let token_hash = hex(&sha256(token.as_bytes()));
    let material = [
        "tenantplane-credential-v1",
        url,
        tenant,
        control_plane,
        &token_hash,
    ]
    .join("\0");
    format!("{}.json", hex(&sha256(material.as_bytes())))
}

/// The credential cached at `path`; `None` when missing, unreadable or corrupt (it is then replaced).
pub fn read_cached(path: &Path) -> Option<CachedCredential> {
    let text = std::fs::read(path).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Writes `entry` to `path` atomically with mode 0600, in a directory of mode 0700.
pub fn write_cached(path: &Path, entry: &CachedCredential) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        if std::fs::metadata(dir)?.permissions().mode() & 0o777 != 0o700 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    let text = serde_json::to_vec(entry).map_err(std::io::Error::other)?;
    super::fs::write_private(path, &text)
}

/// Removes the other cache files beside `path` that have expired or cannot be read (best effort).
fn prune(path: &Path, now: DateTime<Utc>) {
    let Some(entries) = path.parent().and_then(|dir| std::fs::read_dir(dir).ok()) else {
        return;
    };
    for entry in entries.flatten() {
        let other = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if other == path || name.starts_with('.') || !name.ends_with(".json") {
            continue;
        }
        if read_cached(&other).is_none_or(|e| e.expires_at <= now) {
            let _ = std::fs::remove_file(&other);
        }
    }
}

/// One line saying why no credential could be had for `control_plane` of `tenant`.
pub fn describe(err: &ClientError, tenant: &str, control_plane: &str) -> String {
    let target = format!("control plane {control_plane} of tenant {tenant}");
    match err {
        ClientError::Auth(p) if p.status == 403 => format!(
            "the Tenantplane token may not get a credential for {target} (403 {}): {}",
            p.title,
            reason(p)
        ),
        ClientError::Auth(p) => format!(
            "the Tenantplane token was refused (401 {}): {}; log in again with `tenantplane login`, or set {ENV_TOKEN}",
            p.title,
            reason(p)
        ),
        ClientError::Refused(p) if p.status == 404 => format!("{target} was not found (404): {}", reason(p)),
        ClientError::Refused(p) if p.status == 409 => format!(
            "{target} is not served yet (409): {}; try again when it is Ready",
            reason(p)
        ),
        ClientError::Refused(p) if p.status == 429 => {
            format!(
                "too many credential requests (429): {}; try again later",
                reason(p)
            )
        }
        ClientError::Refused(p) => format!(
            "the API refused a credential for {target}: {} ({}): {}",
            p.title,
            p.status,
            reason(p)
        ),
        ClientError::Server(p) => format!(
            "the server could not issue a credential for {target}: {} ({}): {}",
            p.title,
            p.status,
            reason(p)
        ),
        other => other.to_string().replace('\n', " "),
    }
}

/// The problem's detail (else its title), with its request id, on one line.
fn reason(p: &ApiProblem) -> String {
    let text = if p.detail.is_empty() { &p.title } else { &p.detail };
    let mut text = text.replace('\n', " ");
    if let Some(id) = &p.request_id {
        text.push_str(&format!(" (request id {id})"));
    }
    text
}

/// Lower-case hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of `data`.
fn sha256(data: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    const TOKEN: &str = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ0In0.c2lnbmF0dXJl";
    const URL: &str = "http://h:8080/api/v1";

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    fn entry(issued: &str, expires: &str) -> CachedCredential {
        CachedCredential {
            token: "cp-token".into(),
            expires_at: at(expires),
            issued_at: at(issued),
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tp-client-cred-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.to_string())
        }
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_cache_key_is_a_hash_without_the_token_and_differs_per_token_and_target() {
        let key = cache_key(URL, "acme", "prod", TOKEN);
        assert_eq!(key.len(), 64 + ".json".len());
        assert!(key.ends_with(".json"));
        assert!(key[..64].chars().all(|c| c.is_ascii_hexdigit()));
        for part in TOKEN.split('.') {
            assert!(!key.contains(part), "{key} contains a part of the token");
        }
        assert!(!key.contains(&hex(&sha256(TOKEN.as_bytes()))));
        assert_eq!(key, cache_key(URL, "acme", "prod", TOKEN), "stable");
        let others = [
            cache_key(URL, "acme", "prod", "another-token"),
            cache_key("http://other/api/v1", "acme", "prod", TOKEN),
            cache_key(URL, "other", "prod", TOKEN),
            cache_key(URL, "acme", "other", TOKEN),
            cache_key(URL, "acmep", "rod", TOKEN),
        ];
        for other in &others {
            assert_ne!(&key, other);
        }
    }

    #[test]
    fn a_fresh_entry_is_reused_and_one_inside_its_margin_is_not() {
        // 900 s lifetime: the margin is 60 s.
        let long = entry("2026-01-01T00:00:00Z", "2026-01-01T00:15:00Z");
        assert_eq!(long.margin(), Duration::seconds(60));
        assert!(long.usable(at("2026-01-01T00:00:01Z")));
        assert!(long.usable(at("2026-01-01T00:13:59Z")), "61 s left");
        assert!(!long.usable(at("2026-01-01T00:14:00Z")), "60 s left");
        assert!(!long.usable(at("2026-01-01T00:20:00Z")), "expired");
        // 120 s lifetime: the margin is a quarter, 30 s.
        let short = entry("2026-01-01T00:00:00Z", "2026-01-01T00:02:00Z");
        assert_eq!(short.margin(), Duration::seconds(30));
        assert!(short.usable(at("2026-01-01T00:01:29Z")), "31 s left");
        assert!(!short.usable(at("2026-01-01T00:01:30Z")), "30 s left");
        // No lifetime, or no token: never.
        let odd = entry("2026-01-01T00:15:00Z", "2026-01-01T00:15:00Z");
        assert!(!odd.usable(at("2026-01-01T00:00:00Z")));
        let empty = CachedCredential {
            token: String::new(),
            ..long
        };
        assert!(!empty.usable(at("2026-01-01T00:00:01Z")));
    }

    #[test]
    fn the_exec_credential_has_exactly_the_client_go_shape() {
        assert_eq!(
            exec_credential("cp-token", at("2026-01-01T00:15:00.750Z")),
            r#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"cp-token","expirationTimestamp":"2026-01-01T00:15:00Z"}}"#
        );
    }

    #[test]
    fn a_refused_token_exits_4_naming_the_cause_and_a_conflict_exits_3() {
        let problem = |status: u16, title: &str, detail: &str| ApiProblem {
            status,
            title: title.into(),
            detail: detail.into(),
            request_id: Some("r1".into()),
            ..ApiProblem::default()
        };
        let refused = ClientError::from_problem(401, problem(401, "Unauthorized", "the token was revoked"));
        assert_eq!(refused.exit_code(), 4);
        assert_eq!(
            describe(&refused, "acme", "prod"),
            "the Tenantplane token was refused (401 Unauthorized): the token was revoked (request id r1); log in again with `tenantplane login`, or set TENANTPLANE_TOKEN"
        );
        let forbidden = ClientError::from_problem(403, problem(403, "Forbidden", "role too low"));
        assert_eq!(
            (forbidden.exit_code(), describe(&forbidden, "acme", "prod")),
            (
                4,
                "the Tenantplane token may not get a credential for control plane prod of tenant acme (403 Forbidden): role too low (request id r1)".to_string()
            )
        );
        let conflict = ClientError::from_problem(409, problem(409, "Conflict", ""));
        assert_eq!(
            (conflict.exit_code(), describe(&conflict, "acme", "prod")),
            (
                3,
                "control plane prod of tenant acme is not served yet (409): Conflict (request id r1); try again when it is Ready".to_string()
            )
        );
        let unavailable = ClientError::from_problem(503, problem(503, "Service Unavailable", "db down"));
        assert_eq!(unavailable.exit_code(), 1);
    }

    #[test]
    fn the_url_flag_wins_and_the_token_comes_from_the_environment_else_the_file() {
        let file = || {
            Ok(Config {
                url: Some("http://file/api/v1".into()),
                token: Some("file-token".into()),
                tenant: None,
            })
        };
        let both = env(&[
            ("TENANTPLANE_URL", "http://env"),
            ("TENANTPLANE_TOKEN", "env-token"),
        ]);
        let (url, token) = resolve(Some("http://flag"), &both, file).unwrap();
        assert_eq!(
            (url.as_str(), token.expose().as_str()),
            ("http://flag", "env-token")
        );
        // The saved token goes to the origin of the saved URL only.
        let (url, token) = resolve(Some("http://file/other"), env(&[]), file).unwrap();
        assert_eq!(
            (url.as_str(), token.expose().as_str()),
            ("http://file/other", "file-token")
        );
        let err = resolve(Some("http://flag"), env(&[]), file).unwrap_err();
        assert_eq!(
            (err.exit_code(), err.to_string()),
            (
                4,
                "refusing to send the saved Tenantplane token to http://flag:80: it was saved for \
                 http://file:80 and is sent there only; if you trust http://flag:80, log in to it: \
                 `tenantplane login --url http://flag:80 --token TOKEN`"
                    .to_string()
            )
        );
        let err = resolve(None, env(&[("TENANTPLANE_URL", "http://env")]), file).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("refusing to send the saved Tenantplane token to http://env:80: "),
            "{err}"
        );
        let (url, _) = resolve(None, env(&[("TENANTPLANE_TOKEN", "env-token")]), file).unwrap();
        assert_eq!(url, "http://file/api/v1");
        let err = resolve(Some("http://flag"), env(&[]), || Ok(Config::default())).unwrap_err();
        assert_eq!(
            (err.exit_code(), err.to_string()),
            (
                4,
                "no Tenantplane token: run `tenantplane login --url URL --token TOKEN`, or set TENANTPLANE_TOKEN"
                    .to_string()
            )
        );
    }

    #[test]
    fn the_cache_lives_under_xdg_cache_home_else_home() {
        assert_eq!(
            cache_dir_from(env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")])),
            Some(PathBuf::from("/x/tenantplane/credentials"))
        );
        assert_eq!(
            cache_dir_from(env(&[("XDG_CACHE_HOME", "rel"), ("HOME", "/h")])),
            Some(PathBuf::from("/h/.cache/tenantplane/credentials"))
        );
        assert_eq!(cache_dir_from(env(&[("HOME", "")])), None);
    }

    #[test]
    fn a_cache_file_is_0600_in_a_0700_directory_and_a_corrupt_one_is_ignored_and_replaced() {
        let dir = scratch("file").join("tenantplane/credentials");
        let path = dir.join(cache_key(URL, "acme", "prod", TOKEN));
        let fresh = entry("2026-01-01T00:00:00Z", "2026-01-01T00:15:00Z");
        write_cached(&path, &fresh).unwrap();
        assert_eq!((mode(&path), mode(&dir)), (0o600, 0o700));
        assert_eq!(read_cached(&path), Some(fresh.clone()));
        std::fs::write(&path, b"{\"token\": tru").unwrap();
        assert_eq!(read_cached(&path), None);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        write_cached(&path, &fresh).unwrap();
        assert_eq!(read_cached(&path), Some(fresh));
        assert_eq!(mode(&dir), 0o700, "a too open directory is tightened");
        std::fs::remove_dir_all(dir.parent().unwrap().parent().unwrap()).unwrap();
    }

    #[tokio::test]
    async fn a_usable_cached_credential_needs_no_server_and_a_stale_one_is_not_served() {
        crate::runtime::install_crypto_provider();
        let dir = scratch("obtain");
        let path = dir.join(cache_key(URL, "acme", "prod", TOKEN));
        let stale_neighbour = dir.join("0000.json");
        write_cached(&path, &entry("2026-01-01T00:00:00Z", "2026-01-01T00:15:00Z")).unwrap();
        write_cached(
            &stale_neighbour,
            &entry("2025-01-01T00:00:00Z", "2025-01-01T00:15:00Z"),
        )
        .unwrap();
        // Nothing listens on port 1: any request fails at once.
        let api = Api::new("http://127.0.0.1:1", Secret::new(TOKEN.into())).unwrap();
        let got = obtain(
            &api,
            Some(&path),
            "acme",
            "prod",
            None,
            at("2026-01-01T00:10:00Z"),
        )
        .await
        .unwrap();
        assert_eq!(got.token, "cp-token");
        let err = obtain(
            &api,
            Some(&path),
            "acme",
            "prod",
            None,
            at("2026-01-01T00:14:30Z"),
        )
        .await
        .unwrap_err();
        assert_eq!(err.exit_code(), 1);
        assert!(err.to_string().starts_with("cannot reach the API"), "{err}");
        assert!(
            stale_neighbour.exists(),
            "nothing is pruned without a new credential"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_flags_take_a_ttl_between_60_and_3600_seconds() {
        #[derive(Debug, clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: CredentialArgs,
        }
        let parse = |ttl: &str| {
            Cli::try_parse_from([
                "tenantplane",
                "--url",
                URL,
                "--tenant",
                "acme",
                "--control-plane",
                "prod",
                "--ttl-seconds",
                ttl,
            ])
        };
        assert_eq!(parse("60").unwrap().args.ttl_seconds, Some(60));
        assert_eq!(parse("3600").unwrap().args.ttl_seconds, Some(3600));
        assert!(parse("59").is_err());
        assert!(parse("3601").is_err());
        let no_cp = Cli::try_parse_from(["tenantplane", "--tenant", "acme"]).unwrap_err();
        assert_eq!(no_cp.kind(), clap::error::ErrorKind::MissingRequiredArgument);
    }
}
