//! Tenantplane's own JWT issuer as the first authenticator of every tenant kube-apiserver (pure).
//!
//! A cluster credential (`POST …/control-planes/{id}/credentials`) is an ES256 JWT with `aud` =
//! [`audience`] of one control plane, `tid` = its tenant, `role` = the caller's role, `sub` = the
//! caller's subject and `tok` = the caller's token id. The authenticator below accepts exactly those.

use uuid::Uuid;

use crate::{
    domain::Role,
    k8s::crd::{
        AuthenticationSpec, ClaimMappings, ClaimValidationRule, ExtraMapping, JwtAuthenticator, JwtIssuer,
        PrefixedClaimOrExpression, TenantControlPlaneSpec, UserValidationRule,
    },
};

/// Prefix of every user name the Tenantplane issuer maps (`tenantplane:<sub>`).
pub const USERNAME_PREFIX: &str = "tenantplane:";
/// Group of tenant admins (and platform admins) in tenant clusters: bound to `cluster-admin`.
pub const GROUP_ADMINS: &str = "tenantplane:admins";
/// Group of tenant members: bound to `edit`.
pub const GROUP_MEMBERS: &str = "tenantplane:members";
/// Group of tenant viewers: bound to `view`.
pub const GROUP_VIEWERS: &str = "tenantplane:viewers";
/// Extra attribute holding the id of the Tenantplane token a credential was exchanged for.
pub const EXTRA_TOKEN_ID: &str = "tenantplane.io/token-id";

/// Tenantplane's credential issuer as tenant apiservers reach it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterIssuer {
    /// `https://` URL: the `iss` of credentials; discovery is at `<url>/.well-known/openid-configuration`.
    pub url: String,
    /// PEM bundle verifying the issuer's TLS certificate (a private CA), if any.
    pub certificate_authority: Option<String>,
}

/// The audience of credentials for control plane `id`: unique per control plane.
pub fn audience(control_plane: Uuid) -> String {
    format!("tenantplane:cp:{control_plane}")
}

/// The tenant-cluster group of `role`.
pub fn group_of(role: Role) -> &'static str {
    match role {
        Role::PlatformAdmin | Role::TenantAdmin => GROUP_ADMINS,
        Role::TenantMember => GROUP_MEMBERS,
        Role::TenantViewer => GROUP_VIEWERS,
    }
}

/// CEL mapping the `role` claim to its group (an unknown role maps to none).
fn groups_expression() -> String {
    let arm = |roles: &[Role], group: &str| {
        let test: Vec<String> = roles
            .iter()
            .map(|r| format!("claims.role == \"{}\"", r.as_str()))
            .collect();
        format!("({}) ? [\"{group}\"] : ", test.join(" || "))
    };
    format!(
        "{}{}{}[]",
        arm(&[Role::TenantAdmin, Role::PlatformAdmin], GROUP_ADMINS),
        arm(&[Role::TenantMember], GROUP_MEMBERS),
        arm(&[Role::TenantViewer], GROUP_VIEWERS)
    )
}

/// The authenticator of Tenantplane's issuer for control plane `control_plane` of `tenant`: its own
/// audience, the tenant claim required, `tenantplane:<sub>` and the role's group.
pub fn tenantplane_authenticator(
    issuer: &ClusterIssuer,
    tenant: Uuid,
    control_plane: Uuid,
) -> JwtAuthenticator {
    JwtAuthenticator {
        issuer: JwtIssuer {
            url: issuer.url.clone(),
            discovery_url: None,
            audiences: vec![audience(control_plane)],
            audience_match_policy: None,
            certificate_authority: issuer.certificate_authority.clone(),
        },
        claim_validation_rules: vec![ClaimValidationRule {
            claim: Some("tid".into()),
            required_value: Some(tenant.to_string()),
            ..ClaimValidationRule::default()
        }],
        claim_mappings: ClaimMappings {
            username: PrefixedClaimOrExpression {
                claim: Some("sub".into()),
                prefix: Some(USERNAME_PREFIX.into()),
                expression: None,
            },
            groups: Some(PrefixedClaimOrExpression {
                expression: Some(groups_expression()),
                ..PrefixedClaimOrExpression::default()
            }),
            uid: None,
            extra: vec![ExtraMapping {
                key: EXTRA_TOKEN_ID.into(),
                value_expression: "has(claims.tok) ? claims.tok : \"\"".into(),
            }],
        },
        user_validation_rules: Vec::new(),
    }
}

/// `spec.authentication` of a control plane: Tenantplane's issuer first, when one is configured.
pub fn authentication(
    issuer: Option<&ClusterIssuer>,
    tenant: Uuid,
    control_plane: Uuid,
) -> Option<AuthenticationSpec> {
    issuer.map(|issuer| AuthenticationSpec {
        jwt: vec![tenantplane_authenticator(issuer, tenant, control_plane)],
    })
}

/// What every tenant authenticator also requires of the users it maps: never a `system:` user or group
/// (kube-apiserver's own identities), checked by the apiserver at each authentication.
pub fn hardening_rules() -> Vec<UserValidationRule> {
    vec![
        UserValidationRule {
            expression: "!user.username.startsWith('system:')".into(),
            message: Some("user names starting with system: are reserved".into()),
        },
        UserValidationRule {
            expression: "user.groups.all(g, !g.startsWith('system:'))".into(),
            message: Some("groups starting with system: are reserved".into()),
        },
    ]
}

/// Appends a tenant's own authenticators (after Tenantplane's issuer), each with [`hardening_rules`];
/// with none and no Tenantplane issuer, `spec.authentication` stays unset.
pub fn add_tenant_authenticators(spec: &mut TenantControlPlaneSpec, own: Vec<JwtAuthenticator>) {
    if own.is_empty() {
        return;
    }
    let authentication = spec
        .authentication
        .get_or_insert_with(AuthenticationSpec::default);
    for mut a in own {
        a.user_validation_rules.extend(hardening_rules());
        authentication.jwt.push(a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_role_maps_to_its_own_group_and_admins_include_platform_admins() {
        assert_eq!(
            groups_expression(),
            "(claims.role == \"tenant-admin\" || claims.role == \"platform-admin\") ? [\"tenantplane:admins\"] : \
             (claims.role == \"tenant-member\") ? [\"tenantplane:members\"] : \
             (claims.role == \"tenant-viewer\") ? [\"tenantplane:viewers\"] : []"
        );
        assert_eq!(group_of(Role::TenantViewer), GROUP_VIEWERS);
        assert_eq!(group_of(Role::PlatformAdmin), GROUP_ADMINS);
    }

    #[test]
    fn the_authenticator_is_bound_to_one_control_plane_and_one_tenant() {
        let tenant = Uuid::from_u128(1);
        let cp = Uuid::from_u128(2);
        let issuer = ClusterIssuer {
            url: "https://127.0.0.1:8443".into(),
            certificate_authority: Some("PEM".into()),
        };
        let a = tenantplane_authenticator(&issuer, tenant, cp);
        assert_eq!(a.issuer.audiences, vec![format!("tenantplane:cp:{cp}")]);
        assert_eq!(a.issuer.certificate_authority.as_deref(), Some("PEM"));
        assert_eq!(a.claim_validation_rules[0].claim.as_deref(), Some("tid"));
        assert_eq!(
            a.claim_validation_rules[0].required_value.as_deref(),
            Some(tenant.to_string().as_str())
        );
        assert_eq!(a.claim_mappings.username.prefix.as_deref(), Some("tenantplane:"));
        assert_eq!(authentication(None, tenant, cp), None);
    }

    #[test]
    fn tenant_authenticators_follow_tenantplanes_and_may_never_map_system_identities() {
        let issuer = ClusterIssuer {
            url: "https://tp.example/credentials".into(),
            certificate_authority: None,
        };
        let (tenant, cp) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let mut own = tenantplane_authenticator(&issuer, tenant, cp);
        own.issuer.url = "https://idp.example".into();
        let mut spec: TenantControlPlaneSpec = serde_json::from_value(serde_json::json!({
            "controlPlane": {"service": {"serviceType": "ClusterIP"}},
            "kubernetes": {"version": "v1.34.4", "kubelet": {}},
        }))
        .unwrap();
        add_tenant_authenticators(&mut spec, vec![]);
        assert_eq!(spec.authentication, None);
        spec.authentication = authentication(Some(&issuer), tenant, cp);
        add_tenant_authenticators(&mut spec, vec![own]);
        let jwt = &spec.authentication.unwrap().jwt;
        assert_eq!(
            jwt.iter().map(|a| a.issuer.url.as_str()).collect::<Vec<_>>(),
            ["https://tp.example/credentials", "https://idp.example"]
        );
        assert!(jwt[0].user_validation_rules.is_empty());
        assert_eq!(jwt[1].user_validation_rules, hardening_rules());
    }
}
