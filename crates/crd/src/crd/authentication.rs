//! Tenantplane's extension of the TenantControlPlane: structured authentication of the tenant
//! kube-apiserver (`--authentication-config`, `apiserver.config.k8s.io/v1` AuthenticationConfiguration).
//!
//! Each JWT authenticator here is rendered as written into the configuration file, so the field names
//! are the apiserver's own. Upstream Kamaji does not know `spec.authentication`; its CRD prunes it.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Most JWT authenticators one control plane takes (Tenantplane's own issuer included).
pub const MAX_JWT_AUTHENTICATORS: usize = 16;

/// How the tenant kube-apiserver authenticates bearer tokens besides client certificates.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthenticationSpec {
    /// JWT authenticators, in order. The sync worker writes Tenantplane's own issuer first, then the
    /// tenant's own identity providers. Issuer URLs must differ from each other and from the
    /// service-account issuer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new("self.all(a, self.exists_one(b, b.issuer.url == a.issuer.url))").message("each JWT issuer URL may appear once: merge the duplicate authenticators"))]
    pub jwt: Vec<JwtAuthenticator>,
}

/// One JWT issuer the tenant kube-apiserver trusts (`jwt[]` of the AuthenticationConfiguration).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JwtAuthenticator {
    /// Where the tokens come from and whom they are for.
    pub issuer: JwtIssuer,
    /// Rules every token's claims must pass (a claim with a required value, or a CEL expression).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claim_validation_rules: Vec<ClaimValidationRule>,
    /// How claims become the user's name, groups, uid and extra attributes.
    pub claim_mappings: ClaimMappings,
    /// CEL rules the mapped user must pass.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub user_validation_rules: Vec<UserValidationRule>,
}

/// The issuer of a JWT authenticator.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JwtIssuer {
    /// The exact `iss` of the tokens; an `https://` URL. (Its bounded length keeps the CEL cost of
    /// the list's uniqueness rule within the API server's budget.)
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new("self.startsWith('https://')").message("the issuer URL must use https"))]
    pub url: String,
    /// Where discovery is fetched from instead of `<url>/.well-known/openid-configuration`.
    #[serde(rename = "discoveryURL", default, skip_serializing_if = "Option::is_none")]
    pub discovery_url: Option<String>,
    /// Accepted `aud` values (at least one).
    #[schemars(length(min = 1))]
    pub audiences: Vec<String>,
    /// `MatchAny` when several audiences are listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience_match_policy: Option<String>,
    /// PEM bundle that verifies the issuer's TLS certificate (discovery and JWKS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_authority: Option<String>,
}

/// A rule on a token's claims.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimValidationRule {
    /// A claim that must be present with `requiredValue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    /// The value `claim` must have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_value: Option<String>,
    /// A CEL expression over `claims` that must be true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
    /// What a refused token is told (with `expression`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// How claims map to the user.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimMappings {
    /// The user name.
    pub username: PrefixedClaimOrExpression,
    /// The groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<PrefixedClaimOrExpression>,
    /// The uid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<ClaimOrExpression>,
    /// Extra attributes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra: Vec<ExtraMapping>,
}

/// A claim with a prefix, or a CEL expression.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrefixedClaimOrExpression {
    /// The claim to read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    /// Prepended to the claim's value (required with `claim`; may be empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// A CEL expression over `claims`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
}

/// A claim, or a CEL expression.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimOrExpression {
    /// The claim to read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    /// A CEL expression over `claims`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
}

/// One extra attribute of the user.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExtraMapping {
    /// A domain-prefixed lower-case key, e.g. `example.com/team`.
    pub key: String,
    /// A CEL expression over `claims` giving a string or a list of strings.
    pub value_expression: String,
}

/// A rule on the mapped user.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UserValidationRule {
    /// A CEL expression over `user` that must be true.
    pub expression: String,
    /// What a refused user is told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What the tenant kube-apiserver runs of `spec.authentication` (written by the in-tenant phase).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthenticationStatus {
    /// `sha256:<hex>` of the configuration file the controller rendered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<String>,
    /// `sha256:<hex>` of the configuration the tenant kube-apiserver reports it loaded
    /// (`apiserver_authentication_config_controller_last_config_info`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_hash: Option<String>,
    /// Each JWT authenticator of the rendered file, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jwt: Vec<JwtAuthenticatorStatus>,
}

/// Whether the tenant kube-apiserver runs one JWT authenticator.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct JwtAuthenticatorStatus {
    /// Its `issuer.url`.
    pub issuer_url: String,
    /// `Pending` (written, not loaded yet), `Active` (loaded) or `Failed` (refused; see `message`).
    pub state: AuthenticatorState,
    /// Why it is Pending or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The state of one JWT authenticator in the tenant kube-apiserver.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum AuthenticatorState {
    /// In the rendered file, not yet loaded by the apiserver.
    Pending,
    /// Loaded: its tokens are accepted.
    Active,
    /// The apiserver refused the configuration holding it, and keeps serving the previous one.
    Failed,
}
