//! `tenantplane join-token create NAME [--ttl 24h]`: a kubeadm bootstrap token for a control plane, and
//! the `kubeadm join` command that uses it.

use clap::Subcommand;
use serde_json::json;

use super::{
    config::Session,
    error::{ClientError, Result},
};

/// `tenantplane join-token …`.
#[derive(Debug, clap::Args)]
pub struct JoinTokenArgs {
    /// Tenant slug (default: the one saved by `login`).
    #[arg(long, env = "TENANTPLANE_TENANT", global = true)]
    tenant: Option<String>,
    #[command(subcommand)]
    command: JoinTokenCommand,
}

/// The join-token subcommands.
#[derive(Debug, Subcommand)]
enum JoinTokenCommand {
    /// Create a join token and print the `kubeadm join` command (the only time the token is shown).
    Create {
        /// Name or id of the control plane.
        name: String,
        /// Lifetime: seconds, or a number with s, m, h or d (e.g. 90m, 24h, 7d); at most 7 days.
        #[arg(long, value_parser = parse_ttl)]
        ttl: Option<i64>,
        /// What the token is for.
        #[arg(long)]
        description: Option<String>,
    },
}

/// A lifetime in seconds from `3600`, `90s`, `30m`, `24h` or `7d`.
pub fn parse_ttl(text: &str) -> std::result::Result<i64, String> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return Err(format!("{text:?}: use seconds or a number with s, m, h or d")),
    };
    digits
        .parse::<i64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("{text:?}: use seconds or a number with s, m, h or d"))
}

impl JoinTokenArgs {
    /// Runs the subcommand.
    pub async fn run(self) -> Result<()> {
        let session = Session::load(self.tenant)?;
        let tenant = session.tenant()?;
        let JoinTokenCommand::Create {
            name,
            ttl,
            description,
        } = self.command;
        let mut body = json!({});
        if let Some(ttl) = ttl {
            body["ttlSeconds"] = ttl.into();
        }
        if let Some(description) = description {
            body["description"] = description.into();
        }
        let created = session.api.join_token(tenant, &name, &body).await?;
        if created.join_command.is_empty() {
            return Err(ClientError::Other(
                "the API answered without a join command".into(),
            ));
        }
        eprintln!(
            "join token {} for {name} expires at {} (shown only now)",
            created.id,
            created
                .expires_at
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        );
        println!("{}", created.join_command);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::parse_ttl;

    #[test]
    fn ttls_take_seconds_and_units() {
        let parsed: Vec<Result<i64, String>> = ["3600", "90s", "30m", "24h", "7d"]
            .into_iter()
            .map(parse_ttl)
            .collect();
        assert_eq!(parsed, vec![Ok(3600), Ok(90), Ok(1800), Ok(86400), Ok(604800)]);
        assert_eq!(
            parse_ttl("1w"),
            Err(r#""1w": use seconds or a number with s, m, h or d"#.to_string())
        );
        assert_eq!(
            parse_ttl("h"),
            Err(r#""h": use seconds or a number with s, m, h or d"#.to_string())
        );
    }
}
