#![allow(clippy::unwrap_used, reason = "tests")]
use super::*;
use crate::k8s::crd::{ClaimMappings, ClaimValidationRule, ExtraMapping, JwtIssuer, UserValidationRule};

fn idp() -> JwtAuthenticator {
    JwtAuthenticator {
        issuer: JwtIssuer {
            url: "https://idp.example.com".into(),
            discovery_url: None,
            audiences: vec!["tenant-cluster".into()],
            audience_match_policy: None,
            certificate_authority: None,
        },
        claim_validation_rules: vec![],
        claim_mappings: ClaimMappings {
            username: PrefixedClaimOrExpression {
                claim: Some("email".into()),
                prefix: Some("idp:".into()),
                expression: None,
            },
            groups: None,
            uid: None,
            extra: vec![],
        },
        user_validation_rules: vec![],
    }
}

fn fields(a: &JwtAuthenticator) -> Vec<String> {
    check(a, &["https://tenantplane.test/credentials"])
        .into_iter()
        .map(|e| e.field)
        .collect()
}

#[test]
fn a_plain_identity_provider_passes() {
    assert_eq!(fields(&idp()), Vec::<String>::new());
}

#[test]
fn cel_that_does_not_parse_is_refused_naming_the_field() {
    let mut a = idp();
    a.claim_mappings.groups = Some(PrefixedClaimOrExpression {
        expression: Some("claims.groups.map(g, 'idp:' + g".into()),
        ..Default::default()
    });
    let errors = check(&a, &[]);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].field, "claimMappings.groups.expression");
    assert!(
        errors[0].message.starts_with("is not valid CEL"),
        "{}",
        errors[0].message
    );
}

#[test]
fn cel_may_read_its_own_scope_and_macro_variables_only() {
    let mut a = idp();
    a.claim_mappings.groups = Some(PrefixedClaimOrExpression {
        expression: Some("claims.groups.map(g, 'idp:' + g)".into()),
        ..Default::default()
    });
    a.claim_validation_rules = vec![ClaimValidationRule {
        expression: Some("claims.email_verified == true && claims.groups.all(x, x != 'banned')".into()),
        ..Default::default()
    }];
    a.user_validation_rules = vec![UserValidationRule {
        expression: "!user.username.startsWith('idp:bot')".into(),
        message: None,
    }];
    assert_eq!(fields(&a), Vec::<String>::new());
    a.user_validation_rules[0].expression = "claims.sub != ''".into();
    assert_eq!(fields(&a), vec!["userValidationRules[0].expression"]);
    a.user_validation_rules.clear();
    a.claim_validation_rules[0].expression = Some("request.user == 'x' && claims.a".into());
    assert_eq!(fields(&a), vec!["claimValidationRules[0].expression"]);
}

#[test]
fn system_and_tenantplane_identities_are_refused() {
    let mut a = idp();
    a.claim_mappings.username.prefix = Some("system:".into());
    assert_eq!(fields(&a), vec!["claimMappings.username.prefix"]);
    a.claim_mappings.username.prefix = Some("tenantplane:".into());
    assert_eq!(fields(&a), vec!["claimMappings.username.prefix"]);
    // A prefix that a claim value can complete into "system:".
    a.claim_mappings.username.prefix = Some("sys".into());
    assert_eq!(fields(&a), vec!["claimMappings.username.prefix"]);
    let mut a = idp();
    a.claim_mappings.groups = Some(PrefixedClaimOrExpression {
        claim: Some("groups".into()),
        prefix: Some("system:".into()),
        expression: None,
    });
    assert_eq!(fields(&a), vec!["claimMappings.groups.prefix"]);
    a.claim_mappings.groups = Some(PrefixedClaimOrExpression {
        expression: Some("['system:masters']".into()),
        ..Default::default()
    });
    let errors = fields(&a);
    assert!(
        errors.contains(&"claimMappings.groups.expression".to_string()),
        "{errors:?}"
    );
}

#[test]
fn issuer_rules_follow_kube_apiserver() {
    let mut a = idp();
    a.issuer.url = "http://idp.example.com".into();
    assert_eq!(fields(&a), vec!["issuer.url"]);
    a.issuer.url = "https://tenantplane.test/credentials".into();
    assert_eq!(fields(&a), vec!["issuer.url"]);
    let mut a = idp();
    a.issuer.audiences = vec!["a".into(), "b".into()];
    assert_eq!(fields(&a), vec!["issuer.audienceMatchPolicy"]);
    a.issuer.audience_match_policy = Some("MatchAny".into());
    assert_eq!(fields(&a), Vec::<String>::new());
    a.issuer.certificate_authority = Some("not a certificate".into());
    assert_eq!(fields(&a), vec!["issuer.certificateAuthority"]);
    a.issuer.audiences.clear();
    assert!(fields(&a).contains(&"issuer.audiences".to_string()));
}

#[test]
fn a_claim_needs_its_prefix_and_extra_keys_are_domain_prefixed_and_unreserved() {
    let mut a = idp();
    a.claim_mappings.username.prefix = None;
    assert_eq!(fields(&a), vec!["claimMappings.username.prefix"]);
    let mut a = idp();
    a.claim_mappings.extra = vec![
        ExtraMapping {
            key: "team".into(),
            value_expression: "claims.team".into(),
        },
        ExtraMapping {
            key: "tenantplane.io/token-id".into(),
            value_expression: "claims.jti".into(),
        },
        ExtraMapping {
            key: "example.com/team".into(),
            value_expression: "claims.team".into(),
        },
        ExtraMapping {
            key: "example.com/team".into(),
            value_expression: "claims.team".into(),
        },
    ];
    assert_eq!(
        fields(&a),
        vec![
            "claimMappings.extra[0].key",
            "claimMappings.extra[1].key",
            "claimMappings.extra[3].key"
        ]
    );
}
