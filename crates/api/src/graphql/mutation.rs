//! Mutation root: payloads carry the result and typed user errors side by side (errors as data). Input
//! problems, conflicts and stale ETags are user errors; not found, forbidden and internal errors are
//! GraphQL errors, as for queries.

use async_graphql::{Context, ID, InputObject, Object, Result, SimpleObject};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::{
    caller, cluster, gql_error,
    payload::{ControlPlanePayload, in_tx, user_errors},
    request_id,
    types::{
        self, ClusterCredential, CreatedJoinToken, DataStore, GqlRole, LabelInput, TenantQuotas, Token,
        UserError,
    },
};
use crate::domain::FieldError;
use tenantplane_service::{
    self as service, ServiceError,
    model::{
        CreateControlPlane, CreateCredential, CreateJoinToken, MintToken, SetQuotas, UpdateControlPlane,
    },
};

/// Where the tenant wants its state.
#[derive(InputObject, Debug, Clone)]
pub struct DataStorePreferenceInput {
    /// Pool to place in.
    pub pool: Option<String>,
    /// Labels the DataStore must have.
    pub labels: Option<Vec<LabelInput>>,
    /// An explicit DataStore (platform admins only).
    pub name: Option<String>,
}

/// Addons of the tenant cluster.
#[derive(InputObject, Debug, Clone)]
pub struct AddonsInput {
    /// CoreDNS (default on).
    #[graphql(name = "coreDNS")]
    pub core_dns: Option<bool>,
    /// kube-proxy (default on).
    pub kube_proxy: Option<bool>,
    /// Konnectivity (default off).
    pub konnectivity: Option<bool>,
}

/// A new control plane (defaults as in REST).
#[derive(InputObject, Debug, Clone)]
pub struct CreateControlPlaneInput {
    /// Tenant slug.
    pub tenant: String,
    /// Name (DNS-1035 label: starts with a letter; it names the Service), unique in the tenant.
    pub name: String,
    /// Kubernetes version `vX.Y.Z` within the supported range.
    pub kubernetes_version: String,
    /// Replicas, 0 (asleep) to 9 (default 2).
    pub replicas: Option<i32>,
    /// `ClusterIP` (default), `NodePort` or `LoadBalancer`.
    pub service_type: Option<String>,
    /// API server port (default 6443); with `NodePort` also the node port: in the cluster's range, unique.
    pub port: Option<i32>,
    /// `small` (default), `medium` or `large`.
    pub size_class: Option<String>,
    /// Datastore preference.
    pub datastore: Option<DataStorePreferenceInput>,
    /// `none` (default), `auto` or `pool:<name>`.
    pub offload: Option<String>,
    /// Addons.
    pub addons: Option<AddonsInput>,
    /// Labels.
    pub labels: Option<Vec<LabelInput>>,
}

impl CreateControlPlaneInput {
    /// The service's create request, or the field it breaks (named as `createControlPlane` names it).
    pub(super) fn create_body(&self) -> std::result::Result<CreateControlPlane, ServiceError> {
        serde_path_to_error::deserialize(self.to_body()).map_err(|err| {
            let field = err.path().to_string();
            ServiceError::Invalid(vec![FieldError::new(field, err.into_inner().to_string())])
        })
    }

    /// The REST body this input stands for, so that defaults and enum spellings come from one place.
    fn to_body(&self) -> Value {
        let mut body = Map::new();
        body.insert("name".into(), json!(self.name));
        body.insert("kubernetesVersion".into(), json!(self.kubernetes_version));
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                body.insert(k.into(), v);
            }
        };
        put("replicas", self.replicas.map(|v| json!(v)));
        put("serviceType", self.service_type.as_ref().map(|v| json!(v)));
        put("port", self.port.map(|v| json!(v)));
        put("sizeClass", self.size_class.as_ref().map(|v| json!(v)));
        put("offload", self.offload.as_ref().map(|v| json!(v)));
        put("labels", self.labels.as_ref().map(|l| json!(types::label_map(l))));
        put(
            "datastore",
            self.datastore.as_ref().map(|d| {
                let mut m = Map::new();
                if let Some(p) = &d.pool {
                    m.insert("pool".into(), json!(p));
                }
                if let Some(l) = &d.labels {
                    m.insert("labels".into(), json!(types::label_map(l)));
                }
                if let Some(n) = &d.name {
                    m.insert("name".into(), json!(n));
                }
                Value::Object(m)
            }),
        );
        put(
            "addons",
            self.addons.as_ref().map(|a| {
                let mut m = Map::new();
                if let Some(v) = a.core_dns {
                    m.insert("coreDNS".into(), json!(v));
                }
                if let Some(v) = a.kube_proxy {
                    m.insert("kubeProxy".into(), json!(v));
                }
                if let Some(v) = a.konnectivity {
                    m.insert("konnectivity".into(), json!(v));
                }
                Value::Object(m)
            }),
        );
        Value::Object(body)
    }
}

/// A change to a control plane; absent fields stay as they are.
#[derive(InputObject, Debug, Clone)]
pub struct UpdateControlPlaneInput {
    /// The control plane's global id.
    pub id: ID,
    /// New version: same or next minor, never lower.
    pub kubernetes_version: Option<String>,
    /// New replicas (0–9).
    pub replicas: Option<i32>,
    /// Replaces the labels.
    pub labels: Option<Vec<LabelInput>>,
    /// The ETag the change is based on (`ControlPlane.etag`); a stale one is a `PRECONDITION_FAILED` user error.
    pub if_match: Option<String>,
}

/// Deletes a control plane.
#[derive(InputObject, Debug, Clone)]
pub struct DeleteControlPlaneInput {
    /// The control plane's global id.
    pub id: ID,
}

/// A new token in a tenant (tenant admin).
#[derive(InputObject, Debug, Clone)]
pub struct MintTokenInput {
    /// Tenant slug.
    pub tenant: String,
    /// `TENANT_ADMIN`, `TENANT_MEMBER` or `TENANT_VIEWER`.
    pub role: GqlRole,
    /// Lifetime in seconds (default 86400, at most 366 days).
    pub ttl_seconds: Option<i64>,
    /// Description.
    pub description: Option<String>,
}

/// Revokes a tenant's token (tenant admin).
#[derive(InputObject, Debug, Clone)]
pub struct RevokeTokenInput {
    /// Tenant slug.
    pub tenant: String,
    /// The token's id (`jti`).
    pub token_id: Uuid,
}

/// A new node join token for a control plane (tenant admin).
#[derive(InputObject, Debug, Clone)]
pub struct CreateJoinTokenInput {
    /// Tenant slug.
    pub tenant: String,
    /// The control plane: its global id (`ControlPlane.id`) or its database id (`controlPlaneId`).
    pub control_plane: ID,
    /// Lifetime in seconds, 1 to 604800 (7 days); default 86400.
    pub ttl_seconds: Option<i64>,
    /// What the token is for: at most 256 characters, no control characters.
    pub description: Option<String>,
}

/// A short-lived credential for one control plane's tenant cluster (tenant viewer or above).
#[derive(InputObject, Debug, Clone)]
pub struct CreateClusterCredentialInput {
    /// Tenant slug.
    pub tenant: String,
    /// The control plane: its global id (`ControlPlane.id`) or its database id (`controlPlaneId`).
    pub control_plane: ID,
    /// Lifetime in seconds, 60 to 3600; default 900.
    pub ttl_seconds: Option<i64>,
}

/// The result of `createClusterCredential`.
#[derive(SimpleObject, Debug, Clone, Default)]
pub struct CreateClusterCredentialPayload {
    /// The credential: its token is shown only here.
    pub credential: Option<ClusterCredential>,
    /// Why none was minted.
    pub user_errors: Vec<UserError>,
}

/// Adds a JWT authenticator (a tenant's own identity provider) to a control plane (tenant admin).
#[derive(InputObject, Debug, Clone)]
pub struct AddAuthenticatorInput {
    /// Tenant slug.
    pub tenant: String,
    /// The control plane: its global id or its database id.
    pub control_plane: ID,
    /// The authenticator in the tenant kube-apiserver's own `JWTAuthenticator` fields, as in REST.
    pub spec: async_graphql::Json<serde_json::Value>,
}

/// Removes a JWT authenticator (tenant admin).
#[derive(InputObject, Debug, Clone)]
pub struct RemoveAuthenticatorInput {
    /// Tenant slug.
    pub tenant: String,
    /// The control plane: its global id or its database id.
    pub control_plane: ID,
    /// The authenticator's id.
    pub authenticator_id: Uuid,
}

/// The result of `addAuthenticator`.
#[derive(SimpleObject, Debug, Clone, Default)]
pub struct AddAuthenticatorPayload {
    /// The authenticator, `pending` until the tenant API server loads it.
    pub authenticator: Option<types::Authenticator>,
    /// Why it was refused (each field named).
    pub user_errors: Vec<UserError>,
}

/// The result of `removeAuthenticator`.
#[derive(SimpleObject, Debug, Clone, Default)]
pub struct RemoveAuthenticatorPayload {
    /// The id of the authenticator removed.
    pub authenticator_id: Option<Uuid>,
    /// Why nothing changed.
    pub user_errors: Vec<UserError>,
}

/// Revokes a node join token (tenant admin).
#[derive(InputObject, Debug, Clone)]
pub struct RevokeJoinTokenInput {
    /// Tenant slug.
    pub tenant: String,
    /// The control plane: its global id or its database id.
    pub control_plane: ID,
    /// The token's public id (the part before the dot).
    pub token_id: String,
}

/// The result of `createJoinToken`.
#[derive(SimpleObject, Debug, Clone, Default)]
pub struct CreateJoinTokenPayload {
    /// The token, usable now: its secret half is shown only here, once.
    pub join_token: Option<CreatedJoinToken>,
    /// Why nothing was created.
    pub user_errors: Vec<UserError>,
}

/// The result of `revokeJoinToken`.
#[derive(SimpleObject, Debug, Clone, Default)]
pub struct RevokeJoinTokenPayload {
    /// The id of the token now revoked.
    pub token_id: Option<String>,
    /// Why nothing changed.
    pub user_errors: Vec<UserError>,
}

/// The database id of the control plane `id` names in `tenant`: a control plane's global id (of that
/// tenant) or its database id; another tenant's global id is not found.
pub(super) fn control_plane_in(tenant: &str, id: &ID) -> Result<String> {
    match types::control_plane_key(id) {
        Some((slug, uuid)) if slug == tenant => Ok(uuid),
        Some(_) => Err(gql_error(ServiceError::NotFound("control plane"))),
        None => Ok(id.to_string()),
    }
}

/// Names a DataStore.
#[derive(InputObject, Debug, Clone)]
pub struct DataStoreNameInput {
    /// The DataStore's name.
    pub name: String,
}

/// The result of a DataStore mutation.
#[derive(SimpleObject, Debug, Clone, Default)]
pub struct DataStorePayload {
    /// The DataStore after the change.
    pub data_store: Option<DataStore>,
    /// Why nothing changed.
    pub user_errors: Vec<UserError>,
}

/// A tenant's quotas (platform admin); an absent or null limit restores the server's default.
#[derive(InputObject, Debug, Clone)]
pub struct SetTenantQuotasInput {
    /// Tenant slug.
    pub tenant: String,
    /// Live control planes the tenant may have (0–100,000).
    pub control_planes: Option<i64>,
    /// Live tokens the tenant may have (0–100,000).
    pub tokens: Option<i64>,
}

/// The result of `setTenantQuotas`.
#[derive(SimpleObject, Debug, Clone, Default)]
pub struct TenantQuotasPayload {
    /// The quotas now in force, with usage.
    pub quotas: Option<TenantQuotas>,
    /// Why nothing changed (each out-of-range limit named).
    pub user_errors: Vec<UserError>,
}

/// Cordons or uncordons a DataStore (platform admin), as REST's `cordon`/`uncordon`.
async fn set_cordoned(ctx: &Context<'_>, name: &str, cordoned: bool) -> Result<DataStorePayload> {
    let (c, who) = caller(ctx)?;
    let rid = request_id(ctx);
    match service::datastores::set_cordoned(c, who, name, cordoned, rid.as_deref()).await {
        Ok(ds) => Ok(DataStorePayload {
            data_store: Some(ds.into()),
            user_errors: Vec::new(),
        }),
        Err(err) => Ok(DataStorePayload {
            user_errors: user_errors(err)?,
            ..Default::default()
        }),
    }
}

/// The result of `mintToken`.
#[derive(SimpleObject, Debug, Clone, Default)]
pub struct MintTokenPayload {
    /// The bearer token: shown only here, once.
    pub token: Option<String>,
    /// Its record.
    pub record: Option<Token>,
    /// Why nothing was minted.
    pub user_errors: Vec<UserError>,
}

/// The result of `revokeToken`.
#[derive(SimpleObject, Debug, Clone, Default)]
pub struct RevokeTokenPayload {
    /// The token's record, now revoked.
    pub token: Option<Token>,
    /// Why nothing changed.
    pub user_errors: Vec<UserError>,
}

/// `value` as `T`, or the field it breaks (its JSON path).
fn from_json<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> std::result::Result<T, Vec<crate::domain::FieldError>> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        let field = if path == "." { String::new() } else { path };
        vec![crate::domain::FieldError::new(
            field,
            err.into_inner().to_string(),
        )]
    })
}

/// The tenant and uuid of a control plane's global id; anything else is not found.
fn control_plane_id(id: &ID) -> Result<(String, String)> {
    types::control_plane_key(id).ok_or_else(|| gql_error(ServiceError::NotFound("control plane")))
}

/// Mutations.
#[derive(Debug, Default)]
pub struct Mutation;

#[Object]
impl Mutation {
    /// Records a new control plane and queues its creation (tenant-member).
    async fn create_control_plane(
        &self,
        ctx: &Context<'_>,
        input: CreateControlPlaneInput,
    ) -> Result<ControlPlanePayload> {
        let (c, who) = caller(ctx)?;
        let rid = request_id(ctx);
        let body = match input.create_body() {
            Ok(body) => body,
            Err(err) => {
                return Ok(ControlPlanePayload {
                    user_errors: user_errors(err)?,
                    ..Default::default()
                });
            }
        };
        let slug = input.tenant.clone();
        in_tx(ctx, slug.clone(), async |tx| {
            service::control_planes::create(c, tx, who, &slug, body, rid.as_deref()).await
        })
        .await
    }

    /// Changes version, replicas or labels (tenant-member).
    async fn update_control_plane(
        &self,
        ctx: &Context<'_>,
        input: UpdateControlPlaneInput,
    ) -> Result<ControlPlanePayload> {
        let (c, who) = caller(ctx)?;
        let rid = request_id(ctx);
        let (slug, id) = control_plane_id(&input.id)?;
        let change = UpdateControlPlane {
            kubernetes_version: input.kubernetes_version.clone(),
            replicas: input.replicas,
            labels: input.labels.as_deref().map(types::label_map),
            datastore: None,
        };
        let if_match = input.if_match.clone();
        in_tx(ctx, slug.clone(), async |tx| {
            service::control_planes::update(
                c,
                tx,
                who,
                &slug,
                &id,
                change,
                if_match.as_deref(),
                rid.as_deref(),
            )
            .await
        })
        .await
    }

    /// Queues the deletion (tenant-admin); a second call returns the pending delete.
    async fn delete_control_plane(
        &self,
        ctx: &Context<'_>,
        input: DeleteControlPlaneInput,
    ) -> Result<ControlPlanePayload> {
        let (c, who) = caller(ctx)?;
        let rid = request_id(ctx);
        let (slug, id) = control_plane_id(&input.id)?;
        in_tx(ctx, slug.clone(), async |tx| {
            service::control_planes::delete(c, tx, who, &slug, &id, rid.as_deref()).await
        })
        .await
    }

    /// Mints a token in a tenant (tenant-admin); the token is in the payload, once.
    async fn mint_token(&self, ctx: &Context<'_>, input: MintTokenInput) -> Result<MintTokenPayload> {
        let (c, who) = caller(ctx)?;
        let rid = request_id(ctx);
        let body = MintToken {
            role: input.role.into(),
            ttl_seconds: input.ttl_seconds,
            description: input.description.unwrap_or_default(),
        };
        match service::tokens::mint(c, who, &input.tenant, body, rid.as_deref()).await {
            Ok(minted) => Ok(MintTokenPayload {
                token: Some(minted.token),
                record: Some(minted.record.into()),
                user_errors: Vec::new(),
            }),
            Err(err) => Ok(MintTokenPayload {
                user_errors: user_errors(err)?,
                ..Default::default()
            }),
        }
    }

    /// Creates a node join token (a kubeadm bootstrap token) in a control plane's tenant cluster
    /// (tenant-admin). It is usable when the mutation answers: the tenant's cluster-info is signed with it
    /// and its API server authenticates it; otherwise nothing is created and the error is `UNAVAILABLE`
    /// (retry). The token is in the payload, once.
    async fn create_join_token(
        &self,
        ctx: &Context<'_>,
        input: CreateJoinTokenInput,
    ) -> Result<CreateJoinTokenPayload> {
        let (c, who) = caller(ctx)?;
        let rid = request_id(ctx);
        let id = control_plane_in(&input.tenant, &input.control_plane)?;
        let body = CreateJoinToken {
            ttl_seconds: input.ttl_seconds,
            description: input.description,
        };
        match service::join_tokens::create(c, cluster(ctx), who, &input.tenant, &id, body, rid.as_deref())
            .await
        {
            Ok(created) => Ok(CreateJoinTokenPayload {
                join_token: Some(created.into()),
                user_errors: Vec::new(),
            }),
            Err(err) => Ok(CreateJoinTokenPayload {
                user_errors: user_errors(err)?,
                ..Default::default()
            }),
        }
    }

    /// Exchanges the caller's token for a short-lived credential of one tenant cluster (tenant viewer or
    /// above): a JWT only that control plane's API server accepts, as `tenantplane:<subject>` in the
    /// caller's role group. Audited; revoking the caller's token stops new ones at once.
    async fn create_cluster_credential(
        &self,
        ctx: &Context<'_>,
        input: CreateClusterCredentialInput,
    ) -> Result<CreateClusterCredentialPayload> {
        let (c, who) = caller(ctx)?;
        let id = control_plane_in(&input.tenant, &input.control_plane)?;
        let body = CreateCredential {
            ttl_seconds: input.ttl_seconds,
        };
        match service::control_planes::credential(c, who, &input.tenant, &id, body).await {
            Ok(credential) => Ok(CreateClusterCredentialPayload {
                credential: Some(credential.into()),
                user_errors: Vec::new(),
            }),
            Err(err) => Ok(CreateClusterCredentialPayload {
                user_errors: user_errors(err)?,
                ..Default::default()
            }),
        }
    }

    /// Adds a JWT authenticator to a control plane (tenant-admin): checked as in REST (each refused field
    /// named in `userErrors`); its tenant API server loads it without a restart.
    async fn add_authenticator(
        &self,
        ctx: &Context<'_>,
        input: AddAuthenticatorInput,
    ) -> Result<AddAuthenticatorPayload> {
        let (c, who) = caller(ctx)?;
        let id = control_plane_in(&input.tenant, &input.control_plane)?;
        let spec = match from_json(input.spec.0) {
            Ok(spec) => spec,
            Err(errors) => {
                return Ok(AddAuthenticatorPayload {
                    user_errors: user_errors(ServiceError::Invalid(errors))?,
                    ..Default::default()
                });
            }
        };
        match service::authenticators::create(c, who, &input.tenant, &id, spec).await {
            Ok(a) => Ok(AddAuthenticatorPayload {
                authenticator: Some(a.into()),
                user_errors: Vec::new(),
            }),
            Err(err) => Ok(AddAuthenticatorPayload {
                user_errors: user_errors(err)?,
                ..Default::default()
            }),
        }
    }

    /// Removes a JWT authenticator from a control plane (tenant-admin); an unknown one is `NOT_FOUND`.
    async fn remove_authenticator(
        &self,
        ctx: &Context<'_>,
        input: RemoveAuthenticatorInput,
    ) -> Result<RemoveAuthenticatorPayload> {
        let (c, who) = caller(ctx)?;
        let id = control_plane_in(&input.tenant, &input.control_plane)?;
        match service::authenticators::delete(c, who, &input.tenant, &id, input.authenticator_id).await {
            Ok(()) => Ok(RemoveAuthenticatorPayload {
                authenticator_id: Some(input.authenticator_id),
                user_errors: Vec::new(),
            }),
            Err(err) => Ok(RemoveAuthenticatorPayload {
                user_errors: user_errors(err)?,
                ..Default::default()
            }),
        }
    }

    /// Revokes a node join token (tenant-admin): its Secret leaves the tenant cluster and its signature
    /// leaves cluster-info; an unknown or already revoked token is `NOT_FOUND`.
    async fn revoke_join_token(
        &self,
        ctx: &Context<'_>,
        input: RevokeJoinTokenInput,
    ) -> Result<RevokeJoinTokenPayload> {
        let (c, who) = caller(ctx)?;
        let rid = request_id(ctx);
        let id = control_plane_in(&input.tenant, &input.control_plane)?;
        let revoked = service::join_tokens::revoke(
            c,
            cluster(ctx),
            who,
            &input.tenant,
            &id,
            &input.token_id,
            rid.as_deref(),
        )
        .await;
        match revoked {
            Ok(()) => Ok(RevokeJoinTokenPayload {
                token_id: Some(input.token_id),
                user_errors: Vec::new(),
            }),
            Err(err) => Ok(RevokeJoinTokenPayload {
                user_errors: user_errors(err)?,
                ..Default::default()
            }),
        }
    }

    /// Cordons a DataStore: it takes no new control planes; the ones on it stay (platform admin; audited
    /// `datastore.cordon`). An unknown DataStore is `NOT_FOUND`.
    async fn cordon_data_store(
        &self,
        ctx: &Context<'_>,
        input: DataStoreNameInput,
    ) -> Result<DataStorePayload> {
        set_cordoned(ctx, &input.name, true).await
    }

    /// Uncordons a DataStore: placement may choose it again (platform admin; audited
    /// `datastore.uncordon`). An unknown DataStore is `NOT_FOUND`.
    async fn uncordon_data_store(
        &self,
        ctx: &Context<'_>,
        input: DataStoreNameInput,
    ) -> Result<DataStorePayload> {
        set_cordoned(ctx, &input.name, false).await
    }

    /// Sets a tenant's quotas (platform admin; REST `PUT /tenants/{t}/quotas`): a limit below what is in
    /// use refuses nothing that exists, it only stops new ones.
    async fn set_tenant_quotas(
        &self,
        ctx: &Context<'_>,
        input: SetTenantQuotasInput,
    ) -> Result<TenantQuotasPayload> {
        let (c, who) = caller(ctx)?;
        let rid = request_id(ctx);
        let body = SetQuotas {
            control_planes: input.control_planes,
            tokens: input.tokens,
        };
        match service::quotas::set(c, who, &input.tenant, body, rid.as_deref()).await {
            Ok(quotas) => Ok(TenantQuotasPayload {
                quotas: Some(quotas.into()),
                user_errors: Vec::new(),
            }),
            Err(err) => Ok(TenantQuotasPayload {
                user_errors: user_errors(err)?,
                ..Default::default()
            }),
        }
    }

    /// Moves a control plane, live, to another etcd DataStore (platform admin; REST `POST …/migrate`):
    /// the same checks, each refusal a user error naming `target` or `overrides`; the operation is a
    /// `MIGRATE` one, recorded with the target's reservation.
    async fn migrate_control_plane(
        &self,
        ctx: &Context<'_>,
        input: super::drains::MigrateControlPlaneInput,
    ) -> Result<ControlPlanePayload> {
        super::drains::migrate_control_plane(ctx, input).await
    }

    /// Aborts a control plane's live migration before its switch (platform admin; REST `POST
    /// …/migrate/abort`): the source is rendered again and the operation fails with reason
    /// `MigrationAborted` once unwound; after the switch a `CONFLICT` user error names the stage.
    async fn abort_migration(
        &self,
        ctx: &Context<'_>,
        input: super::drains::AbortMigrationInput,
    ) -> Result<ControlPlanePayload> {
        super::drains::abort_migration(ctx, input).await
    }

    /// Drains a DataStore (platform admin; REST `POST /datastores/{name}/drain`): cordons it, then moves
    /// every control plane off it as its drain plan says, at most `concurrency` (1–10, default 2) at once,
    /// as one `DRAIN` parent operation. A second drain while one is open is a `CONFLICT` naming `name`.
    async fn drain_data_store(
        &self,
        ctx: &Context<'_>,
        input: super::drains::DrainDataStoreInput,
    ) -> Result<super::drains::ParentOperationPayload> {
        super::drains::drain_data_store(ctx, input).await
    }

    /// Rebalances a `spread` pool (platform admin; REST `POST /pools/{name}/rebalance`): live migrations
    /// from its fullest to its emptiest DataStores until the spread imbalance is at most one tenant, at
    /// most `concurrency` at once, as one `REBALANCE` parent operation.
    async fn rebalance_pool(
        &self,
        ctx: &Context<'_>,
        input: super::drains::RebalancePoolInput,
    ) -> Result<super::drains::ParentOperationPayload> {
        super::drains::rebalance_pool(ctx, input).await
    }

    /// Revokes a tenant's token (tenant-admin); effective on its next request.
    async fn revoke_token(&self, ctx: &Context<'_>, input: RevokeTokenInput) -> Result<RevokeTokenPayload> {
        let (c, who) = caller(ctx)?;
        let rid = request_id(ctx);
        match service::tokens::revoke(c, who, &input.tenant, &input.token_id.to_string(), rid.as_deref())
            .await
        {
            Ok(token) => Ok(RevokeTokenPayload {
                token: Some(token.into()),
                user_errors: Vec::new(),
            }),
            Err(err) => Ok(RevokeTokenPayload {
                user_errors: user_errors(err)?,
                ..Default::default()
            }),
        }
    }
}
