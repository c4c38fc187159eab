//! The origin a saved token is bound to. `login` saves the token with the URL it checked it against;
//! the CLI sends that token to that URL's origin (scheme, host and port) only, whatever `--url` or
//! `TENANTPLANE_URL` names, so a kubeconfig whose exec plugin names another server cannot collect it.

use reqwest::Url;

use super::{
    error::{ClientError, Result},
    http,
};

/// The origin of API URL `url`: `scheme://host:port`, the port explicit (the scheme's default if none).
pub fn of(url: &str) -> Result<String> {
    let invalid = |why: &str| ClientError::Other(format!("invalid API URL {url:?}: {why}"));
    let parsed = Url::parse(&http::normalize(url)).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid("must be http:// or https://"));
    }
    match (parsed.host_str(), parsed.port_or_known_default()) {
        (Some(host), Some(port)) => Ok(format!("{}://{host}:{port}", parsed.scheme())),
        _ => Err(invalid("no host")),
    }
}

/// Refuses `url` for the saved token unless it has the origin of `saved`, the URL `login` saved it for.
pub fn check_saved(url: &str, saved: Option<&str>) -> Result<()> {
    let target = of(url)?;
    let bound = saved.and_then(|s| of(s).ok());
    if bound.as_deref() == Some(target.as_str()) {
        return Ok(());
    }
    let why = match &bound {
        Some(bound) => format!("it was saved for {bound} and is sent there only"),
        None => "the config file names no valid URL it was saved for".to_string(),
    };
    Err(ClientError::NotLoggedIn(format!(
        "refusing to send the saved Tenantplane token to {target}: {why}; if you trust {target}, log in \
         to it: `tenantplane login --url {target} --token TOKEN`"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_origin_is_scheme_host_and_port_with_the_default_port_explicit() {
        assert_eq!(of("http://H:8080/api/v1").unwrap(), "http://h:8080");
        assert_eq!(of("https://h/prefix").unwrap(), "https://h:443");
        assert_eq!(of("http://[::1]:80/").unwrap(), "http://[::1]:80");
        assert_eq!(of("http://user:pw@h:1").unwrap(), "http://h:1");
        assert_eq!(
            of("ftp://h").unwrap_err().to_string(),
            r#"invalid API URL "ftp://h": must be http:// or https://"#
        );
    }

    #[test]
    fn the_saved_token_goes_to_its_own_origin_only() {
        let saved = Some("http://h:8080/api/v1");
        for same in [
            "http://h:8080",
            "http://H:8080/api/v1/",
            "http://h:8080/other/api/v1",
        ] {
            check_saved(same, saved).unwrap();
        }
        check_saved("https://h/api/v1", Some("https://h:443/api/v1")).unwrap();
        for other in [
            "http://evil:8080",
            "https://h:8080",
            "http://h:8081",
            "http://h.evil:8080",
        ] {
            let err = check_saved(other, saved).unwrap_err();
            let target = of(other).unwrap();
            assert_eq!(
                (err.exit_code(), err.to_string()),
                (
                    4,
                    format!(
                        "refusing to send the saved Tenantplane token to {target}: it was saved for \
                         http://h:8080 and is sent there only; if you trust {target}, log in to it: \
                         `tenantplane login --url {target} --token TOKEN`"
                    )
                )
            );
        }
        let err = check_saved("http://h:8080", None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "refusing to send the saved Tenantplane token to http://h:8080: the config file names no valid \
             URL it was saved for; if you trust http://h:8080, log in to it: `tenantplane login --url \
             http://h:8080 --token TOKEN`"
        );
    }
}
