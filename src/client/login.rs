//! `tenantplane login --url URL --token TOKEN`: checks the token with `GET /viewer`, then saves the URL,
//! the token and the token's tenant to the config file (mode 0600, written atomically).

use std::io::BufRead as _;

use super::{
    config::{self, Config},
    error::{ClientError, Result},
    http::{self, Api},
};
use crate::secret::Secret;

/// `tenantplane login`.
#[derive(Debug, clap::Args)]
pub struct LoginArgs {
    /// The server's URL, with or without `/api/v1` (e.g. http://127.0.0.1:8080).
    #[arg(long, env = config::ENV_URL)]
    url: String,
    /// The bearer token; `-` reads it from stdin (keeps it out of the process list).
    #[arg(long, env = config::ENV_TOKEN, hide_env_values = true)]
    token: Secret<String>,
    /// The tenant to act on (default: the token's own tenant).
    #[arg(long, env = "TENANTPLANE_TENANT")]
    tenant: Option<String>,
}

impl LoginArgs {
    /// Runs `login`.
    pub async fn run(self) -> Result<()> {
        let token = if self.token.expose() == "-" {
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line)?;
            Secret::new(line.trim().to_string())
        } else {
            self.token
        };
        if token.expose().is_empty() {
            return Err(ClientError::Other("the token is empty".into()));
        }
        let url = http::normalize(&self.url);
        let api = Api::new(&url, token.clone())?;
        let viewer = api.viewer().await?;
        let tenant = self.tenant.filter(|t| !t.is_empty()).or(viewer.tenant.clone());
        let path = config::path()?;
        Config {
            url: Some(url.clone()),
            token: Some(token.expose().clone()),
            tenant: tenant.clone(),
        }
        .save(&path)?;
        let whose = match (&viewer.tenant, &tenant) {
            (Some(own), _) => format!("{} of tenant {own}", viewer.role),
            (None, Some(chosen)) => format!("{} (acting on tenant {chosen})", viewer.role),
            (None, None) => format!("{} (no tenant: pass --tenant to commands)", viewer.role),
        };
        println!(
            "logged in to {url} as {whose}; token {} expires at {}; saved to {}",
            viewer.token_id,
            viewer
                .expires_at
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            path.display()
        );
        Ok(())
    }
}
