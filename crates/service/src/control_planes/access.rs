//! Access to tenant clusters: short-lived credentials for one control plane, the kubeconfig that
//! fetches them through the exec plugin (no secret in it), and the break-glass admin kubeconfig.

use chrono::{DateTime, Utc};
use serde_yaml::Value;

use super::{admin_kubeconfig, get_with_tenant, kubeconfig_names, served_secret};
use crate::auth::{Principal, cluster};
use crate::{
    Ctx, Result, ServiceError,
    domain::{FieldError, Role},
    model::{ClusterCredential, CreateCredential},
    tenant_for,
};
use tenantplane_store as store;

/// Why credentials cannot be had from a server without a credential issuer.
const NO_ISSUER: &str = "this Tenantplane has no credential issuer (--credential-issuer-url), so tenant \
     clusters accept no Tenantplane credentials; a platform admin can use the break-glass admin-kubeconfig";

/// Exchanges the caller's Tenantplane token for a short-lived JWT that control plane `id`'s API server
/// accepts (tenant viewer or above): its audience, the caller's role and subject, its own id. Audited.
pub async fn exchange(
    ctx: &Ctx,
    who: &Principal,
    slug: &str,
    id: &str,
    input: CreateCredential,
) -> Result<ClusterCredential> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantViewer).await?;
    let (tenant_id, cp) = get_with_tenant(ctx, who, &tenant.slug, id).await?;
    let ttl = input.ttl_seconds.unwrap_or(cluster::DEFAULT_TTL_SECONDS);
    if !(cluster::MIN_TTL_SECONDS..=cluster::MAX_TTL_SECONDS).contains(&ttl) {
        return Err(ServiceError::Invalid(vec![FieldError::new(
            "ttlSeconds",
            "must be 60 to 3600 seconds (default 900)",
        )]));
    }
    let issuer = ctx
        .tokens
        .cluster
        .issuer
        .as_ref()
        .ok_or_else(|| ServiceError::NotReady(NO_ISSUER.into()))?;
    let claims = cluster::claims(issuer, tenant_id, cp.id, who, ttl, Utc::now());
    let minted = cluster::mint(&ctx.db, &ctx.server_key, claims).await?;
    let expires_at = DateTime::from_timestamp(minted.claims.exp, 0).unwrap_or_else(Utc::now);
    store::audit(
        &ctx.db,
        Some(tenant_id),
        &who.actor(),
        "control-plane.credential",
        "control-plane",
        &cp.id.to_string(),
        None,
        serde_json::json!({
            "credentialId": minted.claims.jti,
            "role": who.role.as_str(),
            "expiresAt": expires_at,
        }),
    )
    .await?;
    Ok(ClusterCredential {
        token: minted.token,
        expires_at,
        audience: minted.claims.aud,
        username: format!("{}{}", crate::translate::USERNAME_PREFIX, who.subject),
        groups: vec![cluster::group_of(who.role).to_string()],
    })
}

/// A control plane that has served, as `who` may see it with at least `role`.
struct Served {
    tenant_id: uuid::Uuid,
    tenant: String,
    control_plane: uuid::Uuid,
    secret: super::KubeconfigSecret,
}

async fn served(ctx: &Ctx, who: &Principal, slug: &str, id: &str, role: Role) -> Result<Served> {
    let tenant = tenant_for(ctx, who, slug, role).await?;
    let (tenant_id, cp) = get_with_tenant(ctx, who, &tenant.slug, id).await?;
    let secret = served_secret(ctx, &tenant, &cp, "its kubeconfig does not exist yet").await?;
    Ok(Served {
        tenant_id,
        tenant: tenant.slug,
        control_plane: cp.id,
        secret,
    })
}

/// The admin kubeconfig Secret's content and the control plane's unique kubeconfig name.
async fn read_admin(kube: Option<&kube::Client>, served: &Served) -> Result<(Vec<u8>, String)> {
    let client = kube.ok_or(ServiceError::NoManagementCluster)?;
    let admin = admin_kubeconfig(client, &served.secret).await?;
    let name = kubeconfig_names::context_name(&served.secret.tenant, &served.secret.control_plane);
    Ok((admin, name))
}

/// The Secret held something that is not a kubeconfig (the controller will rewrite it).
fn unreadable(_: kubeconfig_names::NotAKubeconfig) -> ServiceError {
    ServiceError::NotReady("the admin kubeconfig Secret does not hold a kubeconfig yet".into())
}

/// The kubeconfig of control plane `id` (tenant viewer or above): its cluster (server and CA) and a user
/// whose credential comes from `tenantplane credential` (the exec plugin); no key and no token. Audited.
pub async fn kubeconfig(
    ctx: &Ctx,
    kube: Option<&kube::Client>,
    who: &Principal,
    slug: &str,
    id: &str,
) -> Result<Vec<u8>> {
    let served = served(ctx, who, slug, id, Role::TenantViewer).await?;
    if ctx.tokens.cluster.issuer.is_none() {
        return Err(ServiceError::NotReady(NO_ISSUER.into()));
    }
    crate::audit::kubeconfig_read(ctx, who, slug, id).await?;
    let (admin, name) = read_admin(kube, &served).await?;
    let exec = ExecPlugin {
        command: &ctx.tokens.cluster.exec_command,
        api_url: &ctx.tokens.cluster.api_url,
        tenant: &served.tenant,
        control_plane: &served.control_plane.to_string(),
    };
    exec_kubeconfig(&admin, &name, &exec).map_err(unreadable)
}

/// The `system:masters` admin kubeconfig of control plane `id`, for break-glass only (platform admin).
/// Audited as `control-plane.break-glass-kubeconfig`.
pub async fn break_glass(
    ctx: &Ctx,
    kube: Option<&kube::Client>,
    who: &Principal,
    slug: &str,
    id: &str,
) -> Result<Vec<u8>> {
    let served = served(ctx, who, slug, id, Role::PlatformAdmin).await?;
    store::audit(
        &ctx.db,
        Some(served.tenant_id),
        &who.actor(),
        "control-plane.break-glass-kubeconfig",
        "control-plane",
        &served.control_plane.to_string(),
        None,
        serde_json::json!({}),
    )
    .await?;
    let (admin, name) = read_admin(kube, &served).await?;
    kubeconfig_names::rename(&admin, &format!("{name}_break-glass")).map_err(unreadable)
}

/// What a downloaded kubeconfig runs to get a credential.
#[derive(Debug, Clone, Copy)]
pub struct ExecPlugin<'a> {
    /// The program (`tenantplane`).
    pub command: &'a str,
    /// The API's base URL.
    pub api_url: &'a str,
    /// The tenant's slug.
    pub tenant: &'a str,
    /// The control plane's id.
    pub control_plane: &'a str,
}

/// A kubeconfig named `name` for the first cluster of `admin` (server and CA only) whose user runs
/// `exec`; nothing of `admin`'s user is carried over.
pub fn exec_kubeconfig(
    admin: &[u8],
    name: &str,
    exec: &ExecPlugin<'_>,
) -> std::result::Result<Vec<u8>, kubeconfig_names::NotAKubeconfig> {
    use kubeconfig_names::NotAKubeconfig;
    let doc: Value = serde_yaml::from_slice(admin).map_err(|_| NotAKubeconfig)?;
    let cluster = doc
        .get("clusters")
        .and_then(Value::as_sequence)
        .and_then(|c| c.first())
        .and_then(|c| c.get("cluster"))
        .ok_or(NotAKubeconfig)?;
    let server = cluster
        .get("server")
        .and_then(Value::as_str)
        .ok_or(NotAKubeconfig)?;
    let ca = cluster.get("certificate-authority-data").and_then(Value::as_str);
    let mut cluster_fields = serde_json::json!({"server": server});
    if let Some(ca) = ca {
        cluster_fields["certificate-authority-data"] = ca.into();
    }
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster_fields}],
        "users": [{"name": name, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": exec.command,
            "args": ["credential", "--url", exec.api_url, "--tenant", exec.tenant, "--control-plane", exec.control_plane],
            "interactiveMode": "Never",
            "provideClusterInfo": false,
        }}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    });
    serde_yaml::to_string(&config)
        .map(String::into_bytes)
        .map_err(|_| NotAKubeconfig)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exec_kubeconfig_keeps_the_cluster_and_drops_every_secret() {
        let admin = b"apiVersion: v1\nkind: Config\nclusters:\n- name: k\n  cluster:\n    server: https://127.128.0.1:6443\n    certificate-authority-data: Q0E=\nusers:\n- name: admin\n  user:\n    client-certificate-data: Q0VSVA==\n    client-key-data: S0VZ\ncontexts:\n- name: admin@k\n  context: {cluster: k, user: admin}\ncurrent-context: admin@k\n";
        let exec = ExecPlugin {
            command: "/bin/tenantplane",
            api_url: "http://127.0.0.1:8080/api/v1",
            tenant: "acme",
            control_plane: "0000",
        };
        let out = String::from_utf8(exec_kubeconfig(admin, "tenantplane_acme_a", &exec).unwrap()).unwrap();
        assert!(!out.contains("S0VZ") && !out.contains("Q0VSVA=="), "{out}");
        let doc: serde_json::Value = serde_yaml::from_str(&out).unwrap();
        assert_eq!(
            doc["clusters"][0]["cluster"]["server"],
            "https://127.128.0.1:6443"
        );
        assert_eq!(
            doc["clusters"][0]["cluster"]["certificate-authority-data"],
            "Q0E="
        );
        assert_eq!(doc["current-context"], "tenantplane_acme_a");
        assert_eq!(
            doc["users"][0]["user"]["exec"]["args"],
            serde_json::json!([
                "credential",
                "--url",
                "http://127.0.0.1:8080/api/v1",
                "--tenant",
                "acme",
                "--control-plane",
                "0000"
            ])
        );
        assert_eq!(doc["users"][0]["user"]["exec"]["command"], "/bin/tenantplane");
        assert!(exec_kubeconfig(b"- not a kubeconfig", "n", &exec).is_err());
    }
}
