//! The `kubeadm join` command line a control plane hands out: the API endpoint, the bootstrap token and
//! the pinned CA hashes, parsed the way kubeadm reads its flags.

use super::NodeError;

/// A bootstrap token `<id>.<secret>` (`[a-z0-9]{6}.[a-z0-9]{16}`). Its `Debug` shows only the id.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    /// The public part, also the name suffix of the `bootstrap-token-<id>` Secret.
    pub id: String,
    /// The secret part: the HMAC key of the cluster-info signature and half of the bearer token.
    pub secret: String,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token({}.<secret>)", self.id)
    }
}

impl std::fmt::Display for Token {
    /// The bearer token, `<id>.<secret>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.id, self.secret)
    }
}

impl std::str::FromStr for Token {
    type Err = NodeError;

    fn from_str(text: &str) -> Result<Self, NodeError> {
        let ok = |part: &str, len: usize| {
            part.len() == len && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        match text.split_once('.') {
            Some((id, secret)) if ok(id, 6) && ok(secret, 16) => Ok(Self {
                id: id.to_string(),
                secret: secret.to_string(),
            }),
            _ => Err(NodeError::command(
                "the token is not a bootstrap token of the form [a-z0-9]{6}.[a-z0-9]{16}",
            )),
        }
    }
}

/// A parsed `kubeadm join` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinCommand {
    /// `host:port` of the API server (the positional argument).
    pub endpoint: String,
    /// `--token` (or `--discovery-token`): the token discovery verifies cluster-info with.
    pub token: Token,
    /// `--discovery-token-ca-cert-hash` values, `sha256:<64 hex>` (lowercase), at least one.
    pub ca_cert_hashes: Vec<String>,
    /// `--node-name`, when given.
    pub node_name: Option<String>,
    /// Flags that have no meaning for a hollow node (e.g. `--cri-socket`), as written.
    pub ignored: Vec<String>,
}

/// kubeadm join flags that take no value.
const BOOLEAN_FLAGS: &[&str] = &[
    "--control-plane",
    "--discovery-token-unsafe-skip-ca-verification",
    "--dry-run",
];

/// The words of a shell command line: split on blanks, single and double quotes group, a backslash
/// escapes the next character (a backslash before a newline joins two lines, as kubeadm prints them).
fn words(line: &str) -> Result<Vec<String>, NodeError> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('\''), c) => word.get_or_insert_default().push(c),
            (_, '\\') => match chars.next() {
                Some('\n') | None => {}
                Some(next) => word.get_or_insert_default().push(next),
            },
            (Some(_), c) => word.get_or_insert_default().push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_default();
            }
            (None, c) if c.is_whitespace() => out.extend(word.take()),
            (None, c) => word.get_or_insert_default().push(c),
        }
    }
    if quote.is_some() {
        return Err(NodeError::command("unbalanced quote"));
    }
    out.extend(word);
    Ok(out)
}

/// Checks a `sha256:<hex>` pin and returns it in lowercase.
fn ca_cert_hash(value: &str) -> Result<String, NodeError> {
    let hex = value.strip_prefix("sha256:").ok_or_else(|| {
        NodeError::command(format!(
            "--discovery-token-ca-cert-hash {value:?} is not of the form sha256:<hex>"
        ))
    })?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(NodeError::command(format!(
            "--discovery-token-ca-cert-hash {value:?}: expected 64 hex digits after sha256:"
        )));
    }
    Ok(format!("sha256:{}", hex.to_ascii_lowercase()))
}

/// Checks `host:port` (an IPv6 host in brackets).
fn endpoint(value: &str) -> Result<String, NodeError> {
    let bad = || NodeError::command(format!("the API server endpoint {value:?} is not host:port"));
    let (host, port) = value.rsplit_once(':').ok_or_else(bad)?;
    let host_ok = !host.is_empty()
        && !host.contains('/')
        && (host.starts_with('[') == host.ends_with(']'))
        && (host.starts_with('[') || !host.contains(':'));
    if !host_ok || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(bad());
    }
    Ok(value.to_string())
}

/// The flags of a join command, in the order they came.
#[derive(Debug, Default)]
struct Flags {
    endpoint: Option<String>,
    token: Option<String>,
    discovery_token: Option<String>,
    hashes: Vec<String>,
    node_name: Option<String>,
    ignored: Vec<String>,
}

impl Flags {
    /// Reads the words after `join`.
    fn read(words: &[String]) -> Result<Self, NodeError> {
        let mut flags = Self::default();
        let mut rest = words.iter();
        while let Some(word) = rest.next() {
            let Some(flag) = word.strip_prefix("--") else {
                if word.starts_with('-') {
                    // A short flag (`-v 5`, `-v=5`): logging only.
                    let value = if word.contains('=') { None } else { rest.next() };
                    flags.ignored.push(match value {
                        Some(value) => format!("{word}={value}"),
                        None => word.clone(),
                    });
                    continue;
                }
                if flags.endpoint.replace(endpoint(word)?).is_some() {
                    return Err(NodeError::command(format!(
                        "more than one API server endpoint ({word:?})"
                    )));
                }
                continue;
            };
            let (name, inline) = match flag.split_once('=') {
                Some((name, value)) => (format!("--{name}"), Some(value.to_string())),
                None => (word.clone(), None),
            };
            if BOOLEAN_FLAGS.contains(&name.as_str()) {
                flags.boolean(&name)?;
                continue;
            }
            let value = match inline {
                Some(value) => value,
                None => rest
                    .next()
                    .cloned()
                    .ok_or_else(|| NodeError::command(format!("{name} needs a value")))?,
            };
            flags.valued(&name, value)?;
        }
        Ok(flags)
    }

    /// A flag without a value: those a hollow worker cannot honour are refused.
    fn boolean(&mut self, name: &str) -> Result<(), NodeError> {
        match name {
            "--control-plane" => Err(NodeError::command(
                "--control-plane: a hollow node joins as a worker only",
            )),
            "--discovery-token-unsafe-skip-ca-verification" => Err(NodeError::command(
                "--discovery-token-unsafe-skip-ca-verification: discovery here always pins the CA; \
                 give --discovery-token-ca-cert-hash",
            )),
            _ => {
                self.ignored.push(name.to_string());
                Ok(())
            }
        }
    }

    /// A flag with a value.
    fn valued(&mut self, name: &str, value: String) -> Result<(), NodeError> {
        match name {
            "--token" => self.token = Some(value),
            "--discovery-token" => self.discovery_token = Some(value),
            "--discovery-token-ca-cert-hash" => {
                for pin in value.split(',').filter(|p| !p.is_empty()) {
                    self.hashes.push(ca_cert_hash(pin)?);
                }
            }
            "--node-name" => self.node_name = Some(value),
            "--discovery-file" => {
                return Err(NodeError::command(
                    "--discovery-file: only token discovery is supported",
                ));
            }
            _ => self.ignored.push(format!("{name}={value}")),
        }
        Ok(())
    }
}

impl std::str::FromStr for JoinCommand {
    type Err = NodeError;

    /// Parses `[sudo] kubeadm join <host:port> --token <id>.<secret> --discovery-token-ca-cert-hash
    /// sha256:<hex> [...]`; the flags may also be written `--flag=value`.
    fn from_str(line: &str) -> Result<Self, NodeError> {
        let words = words(line)?;
        let join = words
            .iter()
            .position(|w| w == "join")
            .filter(|&i| i > 0 && words[i - 1].rsplit('/').next() == Some("kubeadm"))
            .ok_or_else(|| NodeError::command("not a `kubeadm join …` command"))?;
        let flags = Flags::read(&words[join + 1..])?;
        let endpoint = flags
            .endpoint
            .ok_or_else(|| NodeError::command("the API server endpoint (host:port) is missing"))?;
        let token = flags
            .discovery_token
            .or(flags.token)
            .ok_or_else(|| NodeError::command("--token is missing"))?
            .parse()?;
        if flags.hashes.is_empty() {
            return Err(NodeError::command(
                "--discovery-token-ca-cert-hash is missing (discovery pins the CA)",
            ));
        }
        Ok(Self {
            endpoint,
            token,
            ca_cert_hashes: flags.hashes,
            node_name: flags.node_name,
            ignored: flags.ignored,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    const HASH: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn parse(line: &str) -> Result<JoinCommand, String> {
        line.parse::<JoinCommand>().map_err(|e| e.to_string())
    }

    #[test]
    fn the_command_the_api_prints_parses() {
        let cmd = parse(&format!(
            "kubeadm join 127.130.0.7:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash {HASH}"
        ))
        .unwrap();
        assert_eq!(cmd.endpoint, "127.130.0.7:6443");
        assert_eq!(cmd.token.id, "abcdef");
        assert_eq!(cmd.token.secret, "0123456789abcdef");
        assert_eq!(cmd.token.to_string(), "abcdef.0123456789abcdef");
        assert_eq!(cmd.ca_cert_hashes, vec![HASH.to_string()]);
        assert_eq!((cmd.node_name, cmd.ignored), (None, vec![]));
    }

    #[test]
    fn equals_forms_quotes_line_continuations_sudo_and_extra_flags_parse() {
        let upper = HASH.to_uppercase().replace("SHA256", "sha256");
        let cmd = parse(&format!(
            "sudo /usr/bin/kubeadm join \\\n  --token='abcdef.0123456789abcdef' \\\n  \"[::1]:6443\" --discovery-token-ca-cert-hash={upper},{HASH} --cri-socket unix:///run/x.sock --node-name n1 --dry-run -v 5"
        ))
        .unwrap();
        assert_eq!(cmd.endpoint, "[::1]:6443");
        assert_eq!(cmd.ca_cert_hashes, vec![HASH.to_string(), HASH.to_string()]);
        assert_eq!(cmd.node_name.as_deref(), Some("n1"));
        assert_eq!(
            cmd.ignored,
            vec![
                "--cri-socket=unix:///run/x.sock".to_string(),
                "--dry-run".into(),
                "-v=5".into()
            ]
        );
    }

    #[test]
    fn the_discovery_token_wins_over_the_token() {
        let cmd = parse(&format!(
            "kubeadm join h:1 --token aaaaaa.aaaaaaaaaaaaaaaa --discovery-token bbbbbb.bbbbbbbbbbbbbbbb --discovery-token-ca-cert-hash {HASH}"
        ))
        .unwrap();
        assert_eq!(cmd.token.id, "bbbbbb");
    }

    #[test]
    fn missing_or_malformed_parts_are_named() {
        let tok = "--token abcdef.0123456789abcdef";
        let pin = format!("--discovery-token-ca-cert-hash {HASH}");
        for (line, needle) in [
            (format!("kubectl join h:1 {tok} {pin}"), "not a `kubeadm join"),
            (
                format!("kubeadm join {tok} {pin}"),
                "endpoint (host:port) is missing",
            ),
            (format!("kubeadm join h:1 {pin}"), "--token is missing"),
            (
                format!("kubeadm join h:1 {tok}"),
                "--discovery-token-ca-cert-hash is missing",
            ),
            (
                format!("kubeadm join h:1 --token abc.def {pin}"),
                "[a-z0-9]{6}.[a-z0-9]{16}",
            ),
            (
                format!("kubeadm join h:1 --token ABCDEF.0123456789abcdef {pin}"),
                "[a-z0-9]{6}",
            ),
            (
                format!("kubeadm join h:1 {tok} --discovery-token-ca-cert-hash md5:00"),
                "sha256:<hex>",
            ),
            (
                format!("kubeadm join h:1 {tok} --discovery-token-ca-cert-hash sha256:00"),
                "64 hex digits",
            ),
            (format!("kubeadm join h {tok} {pin}"), "is not host:port"),
            (format!("kubeadm join h:0 {tok} {pin}"), "is not host:port"),
            (
                format!("kubeadm join https://h:1 {tok} {pin}"),
                "is not host:port",
            ),
            (
                format!("kubeadm join h:1 i:2 {tok} {pin}"),
                "more than one API server endpoint",
            ),
            (
                format!("kubeadm join h:1 {tok} {pin} --node-name"),
                "--node-name needs a value",
            ),
            (
                format!("kubeadm join h:1 {tok} {pin} --control-plane"),
                "worker only",
            ),
            (
                format!("kubeadm join h:1 {tok} --discovery-token-unsafe-skip-ca-verification"),
                "pins the CA",
            ),
            (
                format!("kubeadm join h:1 {tok} {pin} --discovery-file x"),
                "only token discovery",
            ),
            (format!("kubeadm join 'h:1 {tok} {pin}"), "unbalanced quote"),
        ] {
            let err = parse(&line).unwrap_err();
            assert!(err.contains(needle), "{line:?}: {err}");
            assert!(err.starts_with("join command: "), "{err}");
        }
    }

    #[test]
    fn a_token_debug_hides_the_secret() {
        let token: Token = "abcdef.0123456789abcdef".parse().unwrap();
        assert_eq!(format!("{token:?}"), "Token(abcdef.<secret>)");
    }
}
