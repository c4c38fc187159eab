//! Query root: every field calls a `service` use-case with the caller's principal.

use async_graphql::{Context, ID, Object, Result};

use super::{
    caller,
    connection::Connection,
    types::{
        self, ControlPlane, ControlPlaneConnection, ControlPlaneEdge, ControlPlanePhase, DataStore,
        DrainMove, JoinToken, Node, Operation, OperationConnection, OperationEdge, OperationKind,
        OperationState, PageInfo, Placement, Pool, Tenant, Viewer,
    },
};
use tenantplane_service::{self as service, ServiceError, control_planes::ListFilter, page::encode_cursor};

/// Queries.
#[derive(Debug, Default)]
pub struct Query;

#[Object]
impl Query {
    /// The caller: tenant, role and token expiry.
    async fn viewer(&self, ctx: &Context<'_>) -> Result<Viewer> {
        let (c, who) = caller(ctx)?;
        Ok(service::tenants::viewer(c, who)
            .await
            .map_err(super::gql_error)?
            .into())
    }

    /// One tenant (tenant-viewer of it, or platform admin); `null` when it does not exist or the caller may
    /// not see it, so the rest of the response stands.
    async fn tenant(&self, ctx: &Context<'_>, slug: String) -> Result<Option<Tenant>> {
        let (c, who) = caller(ctx)?;
        match service::tenants::get(c, who, &slug).await {
            Ok(tenant) => Ok(Some(Tenant(tenant))),
            Err(ServiceError::NotFound(_)) => Ok(None),
            Err(e) => Err(super::gql_error(e)),
        }
    }

    /// A page of tenants, oldest first (platform admin). `first` is 1–100 (default 20); filters as in
    /// REST: `prefix` of the slug, `suspended`.
    #[graphql(complexity = "first.unwrap_or(20).clamp(1, 100) as usize * child_complexity + 1")]
    async fn tenants(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        prefix: Option<String>,
        suspended: Option<bool>,
    ) -> Result<Connection<Tenant>> {
        let (c, who) = caller(ctx)?;
        let asked_after = after.is_some();
        let filter = service::tenants::ListFilter {
            prefix,
            suspended,
            cursor: after,
            limit: first.map(i64::from),
        };
        let page = service::tenants::page(c, who, filter)
            .await
            .map_err(|e| super::gql_error(rename_list_fields(e)))?;
        let items = page
            .items
            .into_iter()
            .map(|t| {
                let cursor = encode_cursor(t.created_at, t.id);
                (Tenant(t), cursor)
            })
            .collect();
        Ok(Connection::of(items, asked_after, page.next_cursor.is_some()))
    }

    /// A page of a tenant's control planes, oldest first (tenant-viewer). `first` is 1–100 (default 20);
    /// filters as in REST: `status` (phase), `version`, `labels` (`key=value`, all must match).
    #[graphql(complexity = "first.unwrap_or(20).clamp(1, 100) as usize * child_complexity + 1")]
    #[expect(clippy::too_many_arguments, reason = "the connection's arguments")]
    async fn control_planes(
        &self,
        ctx: &Context<'_>,
        tenant: String,
        first: Option<i32>,
        after: Option<String>,
        status: Option<ControlPlanePhase>,
        version: Option<String>,
        labels: Option<Vec<String>>,
    ) -> Result<ControlPlaneConnection> {
        let (c, who) = caller(ctx)?;
        let asked_after = after.is_some();
        let filter = ListFilter {
            status: status.map(|p| p.as_str().to_string()),
            version,
            labels: labels.unwrap_or_default(),
            cursor: after,
            limit: first.map(i64::from),
        };
        let (tenant_id, page) = service::control_planes::list_with_tenant(c, who, &tenant, filter)
            .await
            .map_err(|e| super::gql_error(rename_list_fields(e)))?;
        let nodes: Vec<ControlPlane> = page
            .items
            .into_iter()
            .map(|cp| ControlPlane {
                slug: tenant.clone(),
                tenant_id,
                cp,
            })
            .collect();
        let edges: Vec<ControlPlaneEdge> = nodes
            .iter()
            .map(|node| ControlPlaneEdge {
                cursor: service::control_planes::cursor_after(&node.cp),
                node: node.clone(),
            })
            .collect();
        let cursors: Vec<String> = edges.iter().map(|e| e.cursor.clone()).collect();
        Ok(ControlPlaneConnection {
            edges,
            nodes,
            page_info: PageInfo::of(&cursors, asked_after, page.next_cursor.is_some()),
        })
    }

    /// One operation of a tenant (tenant-viewer); `null` when it does not exist or the caller may not see
    /// it. To wait for it, subscribe to `operationEvents`.
    async fn operation(&self, ctx: &Context<'_>, tenant: String, id: ID) -> Result<Option<Operation>> {
        let (c, who) = caller(ctx)?;
        let hub = ctx.data::<service::events::Hub>()?;
        match service::operations::get(c, hub, who, &tenant, &id, None).await {
            Ok(op) => Ok(Some(op.into())),
            Err(ServiceError::NotFound(_)) => Ok(None),
            Err(e) => Err(super::gql_error(e)),
        }
    }

    /// A page of a tenant's operations, newest first (tenant-viewer). `first` is 1–100 (default 20);
    /// filters: `controlPlane` (its id), `state`, `kind`.
    #[graphql(complexity = "first.unwrap_or(20).clamp(1, 100) as usize * child_complexity + 1")]
    #[expect(clippy::too_many_arguments, reason = "the connection's arguments")]
    async fn operations(
        &self,
        ctx: &Context<'_>,
        tenant: String,
        first: Option<i32>,
        after: Option<String>,
        control_plane: Option<ID>,
        state: Option<OperationState>,
        kind: Option<OperationKind>,
    ) -> Result<OperationConnection> {
        let (c, who) = caller(ctx)?;
        let asked_after = after.is_some();
        let filter = service::operations::ListFilter {
            control_plane: control_plane.map(|id| id.to_string()),
            state: state.map(Into::into),
            kind: kind.map(Into::into),
            cursor: after,
            limit: first.map(i64::from),
        };
        let page = service::operations::list(c, who, &tenant, filter)
            .await
            .map_err(|e| super::gql_error(rename_list_fields(e)))?;
        let edges: Vec<OperationEdge> = page
            .items
            .into_iter()
            .map(|op| OperationEdge {
                cursor: service::operations::cursor_after(&op),
                node: op.into(),
            })
            .collect();
        let cursors: Vec<String> = edges.iter().map(|e| e.cursor.clone()).collect();
        Ok(OperationConnection {
            nodes: edges.iter().map(|e| e.node.clone()).collect(),
            edges,
            page_info: PageInfo::of(&cursors, asked_after, page.next_cursor.is_some()),
        })
    }

    /// Any object by its global id; `null` when it does not exist or the caller may not see it.
    async fn node(&self, ctx: &Context<'_>, id: ID) -> Result<Option<Node>> {
        let (c, who) = caller(ctx)?;
        let found = match types::parse_global_id(&id) {
            Some((kind, key)) if kind == "Tenant" => service::tenants::get(c, who, &key)
                .await
                .map(|t| Node::Tenant(Tenant(t))),
            Some((kind, _)) if kind == "ControlPlane" => match types::control_plane_key(&id) {
                Some((slug, uuid)) => service::control_planes::get_with_tenant(c, who, &slug, &uuid)
                    .await
                    .map(|(tenant_id, cp)| Node::ControlPlane(ControlPlane { slug, tenant_id, cp })),
                None => Err(ServiceError::NotFound("node")),
            },
            _ => Err(ServiceError::NotFound("node")),
        };
        match found {
            Ok(node) => Ok(Some(node)),
            Err(ServiceError::NotFound(_)) => Ok(None),
            Err(e) => Err(super::gql_error(e)),
        }
    }

    /// The live (neither revoked nor expired) node join tokens of a control plane, oldest first
    /// (tenant-admin): never their secret half. `controlPlane` is its global id or its database id.
    async fn join_tokens(
        &self,
        ctx: &Context<'_>,
        tenant: String,
        control_plane: ID,
    ) -> Result<Vec<JoinToken>> {
        let (c, who) = caller(ctx)?;
        let id = super::mutation::control_plane_in(&tenant, &control_plane)?;
        Ok(service::join_tokens::list(c, who, &tenant, &id)
            .await
            .map_err(super::gql_error)?
            .items
            .into_iter()
            .map(Into::into)
            .collect())
    }

    /// A control plane's own identity providers (JWT authenticators), oldest first, each with the state
    /// its tenant API server reports (tenant-admin).
    async fn authenticators(
        &self,
        ctx: &Context<'_>,
        tenant: String,
        control_plane: ID,
    ) -> Result<Vec<types::Authenticator>> {
        let (c, who) = caller(ctx)?;
        let id = super::mutation::control_plane_in(&tenant, &control_plane)?;
        Ok(service::authenticators::list(c, who, &tenant, &id)
            .await
            .map_err(super::gql_error)?
            .items
            .into_iter()
            .map(Into::into)
            .collect())
    }

    /// A page of DataStores, oldest first (platform admin). `first` is 1–100 (default 20); filters as in
    /// REST: `pool`, `driver` (etcd, MySQL, PostgreSQL, NATS), `cordoned`.
    #[graphql(complexity = "first.unwrap_or(20).clamp(1, 100) as usize * child_complexity + 1")]
    async fn data_stores(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
        pool: Option<String>,
        driver: Option<String>,
        cordoned: Option<bool>,
    ) -> Result<Connection<DataStore>> {
        let (c, who) = caller(ctx)?;
        let asked_after = after.is_some();
        let filter = service::datastores::ListFilter {
            pool,
            driver,
            cordoned,
            cursor: after,
            limit: first.map(i64::from),
        };
        let page = service::datastores::page(c, who, filter)
            .await
            .map_err(|e| super::gql_error(rename_list_fields(e)))?;
        let items = page
            .items
            .into_iter()
            .map(|d| {
                let cursor = encode_cursor(d.created_at, d.id);
                (DataStore::from(d), cursor)
            })
            .collect();
        Ok(Connection::of(items, asked_after, page.next_cursor.is_some()))
    }

    /// The moves that would empty a DataStore under its pool's policy, reserving nothing (platform admin;
    /// REST `GET /datastores/{name}/drain-plan`).
    async fn drain_plan(&self, ctx: &Context<'_>, data_store: String) -> Result<Vec<DrainMove>> {
        let (c, who) = caller(ctx)?;
        Ok(service::placement::drain_plan(c, who, &data_store)
            .await
            .map_err(super::gql_error)?
            .into_iter()
            .map(Into::into)
            .collect())
    }

    /// One drain or rebalance with its children, their states and stages, and counts per state (platform
    /// admin; REST `GET /operations/{id}`); an unknown one is a `NOT_FOUND` error.
    async fn parent_operation(
        &self,
        ctx: &Context<'_>,
        id: uuid::Uuid,
    ) -> Result<super::drains::ParentOperation> {
        super::drains::parent_operation(ctx, id).await
    }

    /// Where a control plane created with `input` in `tenant` would land now, and why, reserving nothing
    /// (tenant-member of it, or platform admin). Invalid input is a `BAD_USER_INPUT` error whose
    /// `extensions.fields` are the field errors `createControlPlane` would give; nothing fitting is a
    /// `CONFLICT` error saying why. Tenants see only the chosen DataStores' candidates.
    async fn placement_preview(
        &self,
        ctx: &Context<'_>,
        tenant: String,
        input: super::mutation::CreateControlPlaneInput,
    ) -> Result<Placement> {
        let (c, who) = caller(ctx)?;
        let body = input.create_body().map_err(super::gql_error)?;
        if input.tenant != tenant {
            return Err(super::gql_error(ServiceError::Invalid(vec![
                crate::domain::FieldError::new("tenant", "must be the tenant the preview is for"),
            ])));
        }
        Ok(service::control_planes::preview(c, who, &tenant, &body)
            .await
            .map_err(super::gql_error)?
            .into())
    }

    /// A page of pools, oldest first (platform admin). `first` is 1–100 (default 20).
    #[graphql(complexity = "first.unwrap_or(20).clamp(1, 100) as usize * child_complexity + 1")]
    async fn pools(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> Result<Connection<Pool>> {
        let (c, who) = caller(ctx)?;
        let asked_after = after.is_some();
        let page = service::datastores::pool_page(c, who, first.map(i64::from), after.as_deref())
            .await
            .map_err(|e| super::gql_error(rename_list_fields(e)))?;
        let items = page
            .items
            .into_iter()
            .map(|p| {
                let cursor = encode_cursor(p.created_at, p.id);
                (Pool(p), cursor)
            })
            .collect();
        Ok(Connection::of(items, asked_after, page.next_cursor.is_some()))
    }
}

/// The list use-case names REST's parameters; name GraphQL's arguments instead.
fn rename_list_fields(err: ServiceError) -> ServiceError {
    match err {
        ServiceError::Invalid(errors) => ServiceError::Invalid(
            errors
                .into_iter()
                .map(|mut e| {
                    e.field = match e.field.as_str() {
                        "limit" => "first".into(),
                        "cursor" => "after".into(),
                        "label" => "labels".into(),
                        other => other.to_string(),
                    };
                    e
                })
                .collect(),
        ),
        other => other,
    }
}
