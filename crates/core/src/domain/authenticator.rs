//! Checks of a tenant's own JWT authenticator (an identity provider its tenant kube-apiserver trusts),
//! before it is accepted: what kube-apiserver would refuse at reload, plus identities it must never map.
//!
//! CEL is parsed here (syntax, and which variables it reads); the server then runs kube-apiserver's own
//! compiler, which type-checks too (`tenantplane_service::authenticator_check`).

use crate::{
    domain::FieldError,
    k8s::crd::{ClaimOrExpression, JwtAuthenticator, PrefixedClaimOrExpression},
};

/// Most authenticators a tenant may add to one control plane (Tenantplane's own issuer is one more).
pub const MAX_PER_CONTROL_PLANE: usize = crate::k8s::crd::MAX_JWT_AUTHENTICATORS - 1;
/// Longest URL, expression, prefix or claim name accepted.
const MAX_TEXT: usize = 2048;
/// Largest CA bundle accepted, in bytes.
const MAX_CA_BYTES: usize = 64 * 1024;
/// Most audiences, claim rules, user rules or extra mappings of one authenticator.
const MAX_ITEMS: usize = 16;
/// Identity prefixes no tenant authenticator may map: Kubernetes' own, and Tenantplane's users.
const RESERVED_USER_PREFIXES: [&str; 2] = ["system:", "tenantplane:"];
/// Group prefix no tenant authenticator may map.
const RESERVED_GROUP_PREFIX: &str = "system:";

/// Which variable a CEL expression of a field may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Claim mappings and claim validation rules: `claims`.
    Claims,
    /// User validation rules: `user`.
    User,
}

impl Scope {
    fn variable(self) -> &'static str {
        match self {
            Scope::Claims => "claims",
            Scope::User => "user",
        }
    }
}

/// Every problem of `a`; `taken` are issuer URLs it may not use (Tenantplane's own, the other
/// authenticators' of the control plane, the service-account issuer).
pub fn check(a: &JwtAuthenticator, taken: &[&str]) -> Vec<FieldError> {
    let mut errors = Vec::new();
    check_issuer(a, taken, &mut errors);
    check_mappings(a, &mut errors);
    for (i, rule) in a.claim_validation_rules.iter().enumerate().take(MAX_ITEMS + 1) {
        let field = format!("claimValidationRules[{i}]");
        match (&rule.claim, &rule.required_value, &rule.expression) {
            (Some(claim), Some(_), None) => check_text(&format!("{field}.claim"), claim, &mut errors),
            (None, None, Some(expr)) => {
                check_cel(&format!("{field}.expression"), expr, Scope::Claims, &mut errors)
            }
            _ => errors.push(FieldError::new(
                field,
                "give either claim and requiredValue, or expression (with an optional message)",
            )),
        }
    }
    if a.claim_validation_rules.len() > MAX_ITEMS {
        errors.push(FieldError::new("claimValidationRules", "at most 16 rules"));
    }
    for (i, rule) in a.user_validation_rules.iter().enumerate().take(MAX_ITEMS + 1) {
        check_cel(
            &format!("userValidationRules[{i}].expression"),
            &rule.expression,
            Scope::User,
            &mut errors,
        );
    }
    if a.user_validation_rules.len() > MAX_ITEMS {
        errors.push(FieldError::new("userValidationRules", "at most 16 rules"));
    }
    errors
}

fn check_issuer(a: &JwtAuthenticator, taken: &[&str], errors: &mut Vec<FieldError>) {
    let issuer = &a.issuer;
    check_https("issuer.url", &issuer.url, errors);
    if taken.contains(&issuer.url.as_str()) {
        errors.push(FieldError::new(
            "issuer.url",
            "is already trusted by this control plane (Tenantplane's own issuer, its service-account issuer, or another authenticator): each issuer may appear once",
        ));
    }
    if let Some(discovery) = &issuer.discovery_url {
        check_https("issuer.discoveryURL", discovery, errors);
        if discovery == &issuer.url {
            errors.push(FieldError::new(
                "issuer.discoveryURL",
                "must differ from issuer.url (leave it out to use <url>/.well-known/openid-configuration)",
            ));
        }
    }
    if issuer.audiences.is_empty() || issuer.audiences.len() > MAX_ITEMS {
        errors.push(FieldError::new("issuer.audiences", "give 1 to 16 audiences"));
    }
    for (i, audience) in issuer.audiences.iter().enumerate() {
        if audience.is_empty() || audience.len() > MAX_TEXT {
            errors.push(FieldError::new(
                format!("issuer.audiences[{i}]"),
                "must be 1 to 2048 characters",
            ));
        }
    }
    match issuer.audience_match_policy.as_deref() {
        None if issuer.audiences.len() > 1 => errors.push(FieldError::new(
            "issuer.audienceMatchPolicy",
            "must be MatchAny when several audiences are given",
        )),
        None | Some("MatchAny") => {}
        Some(_) => errors.push(FieldError::new("issuer.audienceMatchPolicy", "must be MatchAny")),
    }
    if let Some(ca) = &issuer.certificate_authority {
        check_ca("issuer.certificateAuthority", ca, errors);
    }
}

fn check_mappings(a: &JwtAuthenticator, errors: &mut Vec<FieldError>) {
    let m = &a.claim_mappings;
    check_prefixed(
        "claimMappings.username",
        &m.username,
        &RESERVED_USER_PREFIXES,
        errors,
    );
    if let Some(groups) = &m.groups {
        check_prefixed("claimMappings.groups", groups, &[RESERVED_GROUP_PREFIX], errors);
    }
    if let Some(uid) = &m.uid {
        check_claim_or_expression("claimMappings.uid", uid, errors);
    }
    if m.extra.len() > MAX_ITEMS {
        errors.push(FieldError::new(
            "claimMappings.extra",
            "at most 16 extra mappings",
        ));
    }
    for (i, extra) in m.extra.iter().enumerate().take(MAX_ITEMS + 1) {
        let field = format!("claimMappings.extra[{i}]");
        let key = &extra.key;
        let domain_prefixed = key
            .split_once('/')
            .is_some_and(|(d, n)| d.contains('.') && !n.is_empty());
        if !domain_prefixed || key.to_lowercase() != *key || key.len() > 316 {
            errors.push(FieldError::new(
                format!("{field}.key"),
                "must be a lower-case, domain-prefixed key, e.g. example.com/team",
            ));
        } else if key.starts_with("tenantplane.io/")
            || key.contains("kubernetes.io/")
            || key.contains("k8s.io/")
        {
            errors.push(FieldError::new(
                format!("{field}.key"),
                "tenantplane.io/, kubernetes.io/ and k8s.io/ keys are reserved",
            ));
        }
        if m.extra[..i].iter().any(|e| e.key == *key) {
            errors.push(FieldError::new(
                format!("{field}.key"),
                "each key may appear once",
            ));
        }
        check_cel(
            &format!("{field}.valueExpression"),
            &extra.value_expression,
            Scope::Claims,
            errors,
        );
    }
}

/// A claim with a prefix, or an expression: exactly one; the prefix never a reserved one.
fn check_prefixed(
    field: &str,
    m: &PrefixedClaimOrExpression,
    reserved: &[&str],
    errors: &mut Vec<FieldError>,
) {
    match (&m.claim, &m.prefix, &m.expression) {
        (Some(claim), Some(prefix), None) => {
            check_text(&format!("{field}.claim"), claim, errors);
            check_text(&format!("{field}.prefix"), prefix, errors);
            if let Some(r) = reserved.iter().find(|r| reserved_prefix(prefix, r)) {
                errors.push(FieldError::new(format!("{field}.prefix"), format!("must not start with {r:?}: those identities are reserved")));
            }
        }
        (Some(_), None, None) => errors.push(FieldError::new(
            format!("{field}.prefix"),
            "is required with claim (it may be empty; a unique prefix such as \"idp:\" keeps its users apart from others)",
        )),
        (None, None, Some(expr)) => {
            check_cel(&format!("{field}.expression"), expr, Scope::Claims, errors);
            if let Some(r) = reserved.iter().find(|r| expr.contains(&format!("\"{r}")) || expr.contains(&format!("'{r}"))) {
                errors.push(FieldError::new(format!("{field}.expression"), format!("must not produce identities starting with {r:?}: they are reserved")));
            }
        }
        _ => errors.push(FieldError::new(field, "give either claim and prefix, or expression")),
    }
}

/// Whether a mapped value under `prefix` could start with reserved `r` (`sys` + `tem:…` too).
fn reserved_prefix(prefix: &str, r: &str) -> bool {
    prefix.starts_with(r) || (!prefix.is_empty() && r.starts_with(prefix))
}

fn check_claim_or_expression(field: &str, m: &ClaimOrExpression, errors: &mut Vec<FieldError>) {
    match (&m.claim, &m.expression) {
        (Some(claim), None) => check_text(&format!("{field}.claim"), claim, errors),
        (None, Some(expr)) => check_cel(&format!("{field}.expression"), expr, Scope::Claims, errors),
        _ => errors.push(FieldError::new(field, "give either claim or expression")),
    }
}

fn check_text(field: &str, text: &str, errors: &mut Vec<FieldError>) {
    if text.len() > MAX_TEXT || text.chars().any(char::is_control) {
        errors.push(FieldError::new(
            field,
            "must be at most 2048 characters, without control characters",
        ));
    }
}

fn check_https(field: &str, url: &str, errors: &mut Vec<FieldError>) {
    let host = url
        .strip_prefix("https://")
        .and_then(|rest| rest.split(['/', '?', '#']).next());
    if host.is_none_or(str::is_empty)
        || url.len() > MAX_TEXT
        || url.contains(['?', '#'])
        || url.chars().any(char::is_whitespace)
    {
        errors.push(FieldError::new(
            field,
            "must be an https:// URL with a host and no query or fragment (kube-apiserver requires https)",
        ));
    }
}

/// A PEM bundle of at least one certificate, each of which parses.
fn check_ca(field: &str, pem: &str, errors: &mut Vec<FieldError>) {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let bodies: Vec<&str> = pem
        .split(BEGIN)
        .skip(1)
        .filter_map(|block| block.split_once(END).map(|(body, _)| body))
        .collect();
    let decodes = |body: &&str| {
        let text: String = body.chars().filter(|c| !c.is_whitespace()).collect();
        !text.is_empty()
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b))
    };
    if pem.len() > MAX_CA_BYTES || bodies.is_empty() || !bodies.iter().all(decodes) {
        errors.push(FieldError::new(
            field,
            "must be a PEM bundle of one or more certificates (at most 64 KiB)",
        ));
    }
}

/// The expression parses as CEL and reads no variable but its scope's (and its own macro variables).
fn check_cel(field: &str, expr: &str, scope: Scope, errors: &mut Vec<FieldError>) {
    if expr.trim().is_empty() || expr.len() > MAX_TEXT {
        errors.push(FieldError::new(
            field,
            "must be a CEL expression of 1 to 2048 characters",
        ));
        return;
    }
    let program = match cel::Program::compile(expr) {
        Ok(p) => p,
        Err(e) => {
            let first = e
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .chars()
                .take(200)
                .collect::<String>();
            errors.push(FieldError::new(field, format!("is not valid CEL: {first}")));
            return;
        }
    };
    let references = program.references();
    let unknown: Vec<&str> = references
        .variables()
        .into_iter()
        .filter(|v| *v != scope.variable() && !is_macro_variable(expr, v))
        .collect();
    if !unknown.is_empty() {
        errors.push(FieldError::new(
            field,
            format!("may read only `{}`, not {}", scope.variable(), unknown.join(", ")),
        ));
    }
}

/// Whether `name` is bound by a macro (`x.map(name, …)`, `all`, `exists`, `exists_one`, `filter`).
fn is_macro_variable(expr: &str, name: &str) -> bool {
    ["map", "all", "exists", "exists_one", "filter"].iter().any(|m| {
        expr.match_indices(&format!(".{m}(")).any(|(i, found)| {
            expr[i + found.len()..]
                .trim_start()
                .strip_prefix(name)
                .is_some_and(|rest| rest.trim_start().starts_with(','))
        })
    })
}

#[cfg(test)]
mod tests;
