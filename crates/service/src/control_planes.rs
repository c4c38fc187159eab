//! Control planes: every write records the spec, an operation, an outbox row and an audit row in one transaction.

pub mod access;
pub mod kubeconfig_names;

use sqlx::PgConnection;
use uuid::Uuid;

use super::{
    Ctx, OnConflict, Result, ServiceError,
    model::{
        Accepted, AuditEntry, ControlPlane, ControlPlanePage, CreateControlPlane, Operation, Placement,
        PlacementOverride, UpdateControlPlane,
    },
    page::{MAX_PAGE, decode_cursor, encode_cursor},
    stored::{
        control_plane_key, control_plane_model, control_plane_model_with, operation_model, placement_model,
        with_placements_in,
    },
    tenant_for,
};
use crate::auth::Principal;
use crate::domain::{
    FieldError, KubeVersion, Name, Offload, OperationKind, Role, check_api_server_port, check_dns1035,
    check_labels, check_node_port, check_replicas, check_upgrade,
};
use tenantplane_store::{
    self as store,
    control_planes::{ControlPlaneRow, ListQuery, NewControlPlane},
};

/// The unique index that keeps a NodePort to one live control plane.
const NODE_PORT_KEY: &str = "control_planes_node_port_key";

/// What `who` may see of a placement: platform admins see every candidate the engine scored; anyone else
/// only the candidates that were chosen (the primary and the override DataStores), never the other
/// DataStores' names, pools or scores.
pub fn redact_placement(who: &Principal, placement: &mut Placement) {
    if who.role == Role::PlatformAdmin {
        return;
    }
    let mut chosen: std::collections::HashSet<String> =
        placement.overrides.iter().map(|o| o.data_store.clone()).collect();
    chosen.insert(placement.data_store.clone());
    for key in ["candidates", "override_candidates"] {
        if let Some(list) = placement.decision.get_mut(key).and_then(|v| v.as_array_mut()) {
            list.retain(|c| {
                c.get("data_store")
                    .and_then(|d| d.as_str())
                    .is_some_and(|d| chosen.contains(d))
            });
        }
    }
}

/// [`redact_placement`] on a control plane.
pub fn redact(who: &Principal, mut cp: ControlPlane) -> ControlPlane {
    if let Some(p) = cp.placement.as_mut() {
        redact_placement(who, p);
    }
    cp
}

/// Loads the placements of `rows` (one query) and converts them.
async fn with_placements(ctx: &Ctx, tenant: Uuid, rows: Vec<ControlPlaneRow>) -> Result<Vec<ControlPlane>> {
    with_placements_in(&ctx.db, tenant, rows).await
}

fn validate_create(ctx: &Ctx, who: &Principal, input: &CreateControlPlane) -> Result<()> {
    let mut errors = Vec::new();
    let mut check = |r: std::result::Result<(), FieldError>| {
        if let Err(e) = r {
            errors.push(e);
        }
    };
    check(check_dns1035("name", &input.name));
    check(
        ctx.versions
            .check("kubernetesVersion", &input.kubernetes_version)
            .map(|_| ()),
    );
    check(check_replicas("replicas", input.replicas).map(|_| ()));
    if !(1..=65535).contains(&input.port) {
        check(Err(FieldError::new("port", "must be between 1 and 65535")));
    } else {
        check(check_api_server_port(
            "port",
            input.port,
            input.addons.konnectivity,
        ));
        if input.service_type == crate::domain::ServiceType::NodePort {
            check(check_node_port("port", ctx.limits.node_ports, input.port));
        }
    }
    check(
        input
            .offload
            .parse::<Offload>()
            .map(|_| ())
            .map_err(|e| FieldError::new("offload", e)),
    );
    check(check_labels("labels", &input.labels));
    check(check_labels("datastore.labels", &input.datastore.labels));
    if let Some(pool) = &input.datastore.pool {
        check(Name::parse("datastore.pool", pool).map(|_| ()));
    }
    if let Some(name) = &input.datastore.name {
        check(Name::parse("datastore.name", name).map(|_| ()));
    }
    if !errors.is_empty() {
        return Err(ServiceError::Invalid(errors));
    }
    // A well-formed choice the caller's role does not allow: 403, after the input checks.
    if input.datastore.name.is_some() && who.role != Role::PlatformAdmin {
        return Err(ServiceError::Forbidden(
            "datastore.name: only platform admins may pick a DataStore; give a pool or labels instead".into(),
        ));
    }
    Ok(())
}

/// Records a new control plane and queues its creation (202).
pub async fn create(
    ctx: &Ctx,
    tx: &mut PgConnection,
    who: &Principal,
    slug: &str,
    input: CreateControlPlane,
    request_id: Option<&str>,
) -> Result<Accepted> {
    let (accepted, pending) = create_unreserved(ctx, tx, who, slug, input, request_id).await?;
    Ok(reserve_created(ctx, tx, who, pending).await?.unwrap_or(accepted))
}

/// A create whose DataStore reservation is still to make, by [`reserve_created`].
#[derive(Debug)]
pub struct PendingCreate {
    row: ControlPlaneRow,
    op: store::operations::OperationRow,
    placement: super::placement::Pending,
}

/// [`create`] up to its answer, without the quota admission and the DataStore reservation: the caller
/// makes [`reserve_created`] the transaction's last statements before its commit, so that the tenant's
/// quota lock (every create of the tenant takes it) and the chosen DataStores' rows (every create of a
/// pool updates their load) stay locked only for those statements and the commit.
pub async fn create_unreserved(
    ctx: &Ctx,
    tx: &mut PgConnection,
    who: &Principal,
    slug: &str,
    input: CreateControlPlane,
    request_id: Option<&str>,
) -> Result<(Accepted, PendingCreate)> {
    let tenant = super::tenant_in(&mut *tx, who, slug, Role::TenantMember).await?;
    validate_create(ctx, who, &input)?;
    let new = NewControlPlane {
        name: input.name.clone(),
        kubernetes_version: input.kubernetes_version.clone(),
        replicas: input.replicas,
        service_type: input.service_type.as_str().to_string(),
        port: input.port,
        size_class: input.size_class.as_str().to_string(),
        datastore_pool: input.datastore.pool.clone(),
        datastore_labels: serde_json::to_value(&input.datastore.labels).unwrap_or_default(),
        datastore_name: input.datastore.name.clone(),
        offload: input.offload.clone(),
        addons: serde_json::to_value(&input.addons).unwrap_or_default(),
        labels: serde_json::to_value(&input.labels).unwrap_or_default(),
    };
    // The row, its operation, the outbox row and the audit entry: one statement.
    let (row, op) = match store::control_planes::insert_created(
        tx,
        tenant.id,
        &new,
        &who.actor(),
        request_id,
        ctx.limits.operation_deadline_seconds,
    )
    .await
    {
        Err(store::StoreError::Conflict(constraint)) if constraint == NODE_PORT_KEY => {
            return Err(ServiceError::ConflictFields(vec![FieldError::new(
                "port",
                format!(
                    "NodePort {} is already taken by another control plane: node ports are unique in the cluster",
                    input.port
                ),
            )]));
        }
        other => other.on_conflict(|| {
            format!(
                "a control plane named {:?} already exists in this tenant",
                input.name
            )
        })?,
    };
    let placement = super::placement::choose(ctx, tx, tenant.id, &row).await?;
    let accepted = accepted_with(who, row.clone(), op.clone(), placement.decision());
    Ok((accepted, PendingCreate { row, op, placement }))
}

/// Admits a [`create_unreserved`] under the tenant's quota and reserves its DataStores: `None` when its
/// answer stands, `Some` with the answer to give instead when a chosen DataStore filled up meanwhile and
/// the create was placed again.
pub async fn reserve_created(
    ctx: &Ctx,
    tx: &mut PgConnection,
    who: &Principal,
    pending: PendingCreate,
) -> Result<Option<Accepted>> {
    super::quotas::admit_inserted_control_plane(ctx, tx, pending.row.tenant_id).await?;
    let changed = super::placement::reserve(ctx, tx, pending.placement).await?;
    Ok(changed.map(|decision| accepted_with(who, pending.row, pending.op, &decision)))
}

/// A create's answer for `who`.
fn accepted_with(
    who: &Principal,
    row: ControlPlaneRow,
    op: store::operations::OperationRow,
    decision: &tenantplane_core::placement::Decision,
) -> Accepted {
    Accepted {
        operation: operation_model(op),
        control_plane: redact(who, control_plane_model_with(row, Some(placement_of(decision)))),
    }
}

/// The API shape of an engine decision.
fn placement_of(decision: &tenantplane_core::placement::Decision) -> Placement {
    Placement {
        data_store: decision.primary.clone(),
        overrides: decision
            .overrides
            .iter()
            .map(|o| PlacementOverride {
                resource: o.resource.clone(),
                data_store: o.data_store.clone(),
            })
            .collect(),
        decision: serde_json::to_value(decision).unwrap_or_default(),
    }
}

/// Where a control plane created with `input` would land now, and why, reserving nothing
/// (tenant-member): checked as a create is (the same field errors), redacted as a control plane's
/// placement is for the caller.
pub async fn preview(
    ctx: &Ctx,
    who: &Principal,
    slug: &str,
    input: &CreateControlPlane,
) -> Result<Placement> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantMember).await?;
    validate_create(ctx, who, input)?;
    let decision = super::placement::preview(ctx, tenant.id, input).await?;
    let mut placement = placement_of(&decision);
    redact_placement(who, &mut placement);
    Ok(placement)
}

/// The version an update of a control plane on `current` to `new` would record: `Invalid` outside the
/// supported range, `ConflictFields` for a move the current version forbids (a downgrade, a skipped minor).
fn version_change(ctx: &Ctx, current: &str, new: &str) -> Result<String> {
    let to = ctx
        .versions
        .check("kubernetesVersion", new)
        .map_err(|e| ServiceError::Invalid(vec![e]))?;
    match current.parse::<KubeVersion>() {
        Ok(from) => check_upgrade("kubernetesVersion", from, to)
            .map(|()| new.to_string())
            .map_err(|e| ServiceError::ConflictFields(vec![e])),
        Err(_) => Ok(new.to_string()),
    }
}

/// The minor lines (`vX.Y`, ascending) an update may move `cp` to: any `vX.Y.Z` of a listed line that
/// [`update`] accepts (not lower than the current version); none while it is being deleted.
pub fn allowed_upgrades(ctx: &Ctx, cp: &ControlPlane) -> Vec<String> {
    if cp.phase == "Deleting" {
        return Vec::new();
    }
    let current = cp.kubernetes_version.parse::<KubeVersion>().ok();
    let (min, max) = (ctx.versions.min, ctx.versions.max);
    let mut lines = Vec::new();
    for major in min.0..=max.0 {
        let last = if major == max.0 {
            max.1
        } else {
            current.map_or(0, |v| v.minor + 1)
        };
        for minor in 0..=last {
            // The lowest version of the line the update could accept: the current one on its own line.
            let patch = current
                .filter(|v| (v.major, v.minor) == (major, minor))
                .map_or(0, |v| v.patch);
            let candidate = format!("v{major}.{minor}.{patch}");
            if version_change(ctx, &cp.kubernetes_version, &candidate).is_ok() {
                lines.push(format!("v{major}.{minor}"));
            }
        }
    }
    lines
}

/// The live control plane `id` (its id or its name) of `tenant`, locked for update.
async fn for_update(tx: &mut PgConnection, tenant: Uuid, id: &str) -> Result<ControlPlaneRow> {
    let key = control_plane_key(id);
    if key.id.is_none() && key.name.is_none() {
        return Err(ServiceError::NotFound("control plane"));
    }
    store::control_planes::get_for_update(tx, tenant, key)
        .await?
        .ok_or(ServiceError::NotFound("control plane"))
}

/// One control plane, by id or name.
pub async fn get(ctx: &Ctx, who: &Principal, slug: &str, id: &str) -> Result<ControlPlane> {
    Ok(get_with_tenant(ctx, who, slug, id).await?.1)
}

/// One control plane and its tenant's id (for batch loads that follow, e.g. GraphQL DataLoaders).
pub async fn get_with_tenant(
    ctx: &Ctx,
    who: &Principal,
    slug: &str,
    id: &str,
) -> Result<(Uuid, ControlPlane)> {
    let key = control_plane_key(id);
    if key.id.is_none() && key.name.is_none() {
        // Authorization answers first, as for every request.
        tenant_for(ctx, who, slug, Role::TenantViewer).await?;
        return Err(ServiceError::NotFound("control plane"));
    }
    // One statement: the tenant, the row and its placement.
    let (tenant, found) = store::control_planes::get_with_tenant(&ctx.db, slug, key)
        .await?
        .ok_or(ServiceError::NotFound("tenant"))?;
    super::authorize(who, tenant.id, Role::TenantViewer)?;
    let (row, placement) = found.ok_or(ServiceError::NotFound("control plane"))?;
    Ok((
        tenant.id,
        redact(who, control_plane_model_with(row, placement.map(placement_model))),
    ))
}

/// How many operations and audit entries a batch load returns per control plane.
pub const RECENT: i64 = 20;

/// Refuses batch loads for a tenant the caller does not see (never distinguishes missing from hidden).
fn visible(who: &Principal, tenant: Uuid) -> Result<()> {
    if who.sees(tenant) {
        Ok(())
    } else {
        Err(ServiceError::NotFound("control plane"))
    }
}

/// The newest operation of each of `tenant`'s control planes in `ids` (one query for a page).
pub async fn latest_operations(
    ctx: &Ctx,
    who: &Principal,
    tenant: Uuid,
    ids: &[Uuid],
) -> Result<std::collections::HashMap<Uuid, Operation>> {
    visible(who, tenant)?;
    Ok(store::operations::latest(&ctx.db, tenant, ids)
        .await?
        .into_iter()
        .map(|row| (row.control_plane_id, operation_model(row)))
        .collect())
}

/// The [`RECENT`] newest operations of each of `tenant`'s control planes in `ids`, newest first.
pub async fn recent_operations(
    ctx: &Ctx,
    who: &Principal,
    tenant: Uuid,
    ids: &[Uuid],
) -> Result<std::collections::HashMap<Uuid, Vec<Operation>>> {
    visible(who, tenant)?;
    let mut out: std::collections::HashMap<Uuid, Vec<Operation>> = std::collections::HashMap::new();
    for row in store::operations::recent(&ctx.db, tenant, ids, RECENT).await? {
        out.entry(row.control_plane_id)
            .or_default()
            .push(operation_model(row));
    }
    Ok(out)
}

/// The [`RECENT`] newest audit entries about each of `tenant`'s control planes in `ids`, newest first.
pub async fn audit_entries(
    ctx: &Ctx,
    who: &Principal,
    tenant: Uuid,
    ids: &[Uuid],
) -> Result<std::collections::HashMap<Uuid, Vec<AuditEntry>>> {
    visible(who, tenant)?;
    let targets: Vec<String> = ids.iter().map(Uuid::to_string).collect();
    let mut out: std::collections::HashMap<Uuid, Vec<AuditEntry>> = std::collections::HashMap::new();
    for row in store::audit_for(&ctx.db, tenant, "control-plane", &targets, RECENT).await? {
        let Ok(id) = Uuid::parse_str(&row.target_id) else {
            continue;
        };
        out.entry(id).or_default().push(AuditEntry {
            id: row.id,
            actor: row.actor,
            action: row.action,
            request_id: row.request_id,
            details: row.details,
            created_at: row.created_at,
        });
    }
    Ok(out)
}

/// Filters of a list request.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Phase.
    pub status: Option<String>,
    /// Version.
    pub version: Option<String>,
    /// `key=value` label selectors (all must match).
    pub labels: Vec<String>,
    /// Opaque cursor.
    pub cursor: Option<String>,
    /// Page size (1–100, default 20).
    pub limit: Option<i64>,
}

/// The cursor that continues a list after `cp` (what `nextCursor` is for a page's last item).
pub fn cursor_after(cp: &ControlPlane) -> String {
    encode_cursor(cp.created_at, cp.id)
}

/// A page of control planes, stable order `(createdAt, id)`.
pub async fn list(ctx: &Ctx, who: &Principal, slug: &str, filter: ListFilter) -> Result<ControlPlanePage> {
    Ok(list_with_tenant(ctx, who, slug, filter).await?.1)
}

/// The same, with the tenant's id (for batch loads that follow).
pub async fn list_with_tenant(
    ctx: &Ctx,
    who: &Principal,
    slug: &str,
    filter: ListFilter,
) -> Result<(Uuid, ControlPlanePage)> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantViewer).await?;
    let mut errors = Vec::new();
    let limit = filter.limit.unwrap_or(20);
    if !(1..=MAX_PAGE).contains(&limit) {
        errors.push(FieldError::new("limit", "must be between 1 and 100"));
    }
    let after = match filter.cursor.as_deref().map(decode_cursor).transpose() {
        Ok(after) => after,
        Err(e) => {
            errors.push(e);
            None
        }
    };
    let mut labels = serde_json::Map::new();
    for selector in &filter.labels {
        match selector.split_once('=') {
            Some((k, v))
                if check_labels(
                    "label",
                    &std::collections::BTreeMap::from([(k.to_string(), v.to_string())]),
                )
                .is_ok() =>
            {
                labels.insert(k.to_string(), serde_json::Value::String(v.to_string()));
            }
            _ => errors.push(FieldError::new(
                "label",
                "must be key=value, with letters, digits, '.', '_', '-' and '/' (the key not empty)",
            )),
        }
    }
    if let Some(status) = &filter.status
        && !crate::domain::schema::is_phase(status)
    {
        errors.push(FieldError::new("status", "must be a phase name, e.g. Ready"));
    }
    if let Some(version) = &filter.version
        && version.parse::<KubeVersion>().is_err()
    {
        errors.push(FieldError::new("version", "must be vX.Y.Z"));
    }
    if !errors.is_empty() {
        return Err(ServiceError::Invalid(errors));
    }
    let query = ListQuery {
        phase: filter.status,
        version: filter.version,
        labels: (!labels.is_empty()).then_some(serde_json::Value::Object(labels)),
        after,
        limit: limit + 1,
    };
    let mut rows = store::control_planes::list(&ctx.db, tenant.id, &query).await?;
    let next_cursor = if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(|r| encode_cursor(r.created_at, r.id))
    } else {
        None
    };
    let page = ControlPlanePage {
        items: with_placements(ctx, tenant.id, rows)
            .await?
            .into_iter()
            .map(|cp| redact(who, cp))
            .collect(),
        next_cursor,
    };
    Ok((tenant.id, page))
}

/// Changes version, replicas or labels; `if_match` is the caller's ETag.
#[expect(
    clippy::too_many_arguments,
    reason = "one use-case with its full request context"
)]
pub async fn update(
    ctx: &Ctx,
    tx: &mut PgConnection,
    who: &Principal,
    slug: &str,
    id: &str,
    input: UpdateControlPlane,
    if_match: Option<&str>,
    request_id: Option<&str>,
) -> Result<Accepted> {
    if let Some(target) = input.datastore.clone() {
        return migrate_by_update(ctx, tx, who, (slug, id), (input, target), (if_match, request_id)).await;
    }
    let tenant = super::tenant_in(&mut *tx, who, slug, Role::TenantMember).await?;
    let current = for_update(tx, tenant.id, id).await?;
    let id = current.id;
    let mut errors = Vec::new();
    let mut conflicts = Vec::new();
    let mut version = current.kubernetes_version.clone();
    if let Some(new) = &input.kubernetes_version {
        // A version in range that this control plane's current version cannot move to: 409.
        match version_change(ctx, &current.kubernetes_version, new) {
            Ok(v) => version = v,
            Err(ServiceError::ConflictFields(e)) => conflicts.extend(e),
            Err(ServiceError::Invalid(e)) => errors.extend(e),
            Err(other) => return Err(other),
        }
    }
    let replicas = match input.replicas.map(|r| check_replicas("replicas", r)).transpose() {
        Ok(r) => r.unwrap_or(current.replicas),
        Err(e) => {
            errors.push(e);
            current.replicas
        }
    };
    let labels = match &input.labels {
        Some(l) => match check_labels("labels", l) {
            Ok(()) => serde_json::to_value(l).unwrap_or_default(),
            Err(e) => {
                errors.push(e);
                current.labels.clone()
            }
        },
        None => current.labels.clone(),
    };
    // Invalid input first, then the precondition, then conflicts with the current state (RFC 9110
    // 13.2.1: a request that fails without its preconditions ignores them).
    if !errors.is_empty() {
        return Err(ServiceError::Invalid(errors));
    }
    let etag = format!("\"{}\"", current.generation);
    if !matches(if_match, &etag) {
        return Err(ServiceError::PreconditionFailed(etag));
    }
    if current.phase == "Deleting" {
        return Err(ServiceError::Conflict(
            "the control plane is being deleted".into(),
        ));
    }
    if !conflicts.is_empty() {
        return Err(ServiceError::ConflictFields(conflicts));
    }
    let row = store::control_planes::update_spec(tx, tenant.id, id, &version, replicas, &labels).await?;
    let op = super::operations::record(
        ctx,
        tx,
        (tenant.id, id),
        OperationKind::Update,
        row.generation,
        request_id,
    )
    .await?;
    store::control_planes::enqueue(
        tx,
        tenant.id,
        id,
        op.id,
        "apply",
        &serde_json::json!({"generation": row.generation}),
    )
    .await?;
    store::audit(
        &mut *tx,
        Some(tenant.id),
        &who.actor(),
        "control-plane.update",
        "control-plane",
        &id.to_string(),
        request_id,
        serde_json::json!({"kubernetesVersion": version, "replicas": replicas, "generation": row.generation}),
    )
    .await?;
    Ok(Accepted {
        operation: operation_model(op),
        control_plane: redact(
            who,
            with_placements_in(&mut *tx, tenant.id, vec![row])
                .await?
                .into_iter()
                .next()
                .ok_or(ServiceError::NotFound("control plane"))?,
        ),
    })
}

/// What serde answered for `datastore` before the field existed: non-admins still get it.
const UNKNOWN_DATASTORE: &str =
    "unknown field `datastore`, expected one of `kubernetesVersion`, `replicas`, `labels`";

/// Whether `etag` is one `If-Match` accepts.
fn matches(if_match: Option<&str>, etag: &str) -> bool {
    if_match.is_none_or(|expected| {
        expected.trim() == "*"
            || expected
                .split(',')
                .any(|t| t.trim().trim_start_matches("W/") == etag)
    })
}

/// A `PATCH` with `datastore` (platform admin, and no other field): a live migration to it, as `POST
/// …/migrate {target}`, with problems naming `datastore`.
async fn migrate_by_update(
    ctx: &Ctx,
    tx: &mut PgConnection,
    who: &Principal,
    (slug, id): (&str, &str),
    (input, target): (UpdateControlPlane, String),
    (if_match, request_id): (Option<&str>, Option<&str>),
) -> Result<Accepted> {
    if who.role != Role::PlatformAdmin {
        return Err(ServiceError::Invalid(vec![FieldError::new(
            "datastore",
            UNKNOWN_DATASTORE,
        )]));
    }
    if input.kubernetes_version.is_some() || input.replicas.is_some() || input.labels.is_some() {
        return Err(ServiceError::Invalid(vec![FieldError::new(
            "datastore",
            "a DataStore change starts a live migration: send it alone, without other changes",
        )]));
    }
    let rename = |errors: Vec<FieldError>| {
        errors
            .into_iter()
            .map(|e| {
                let field = if e.field == "target" {
                    "datastore".to_string()
                } else {
                    e.field
                };
                FieldError::new(field, e.message)
            })
            .collect()
    };
    let renamed = |e: ServiceError| match e {
        ServiceError::Invalid(errors) => ServiceError::Invalid(rename(errors)),
        ServiceError::ConflictFields(errors) => ServiceError::ConflictFields(rename(errors)),
        e => e,
    };
    let body = super::migrations::MigrateControlPlane {
        target,
        overrides: super::migrations::OverridesPolicy::Drop,
    };
    super::migrations::check(&body).map_err(renamed)?;
    if if_match.is_some() {
        let tenant = super::tenant_in(&mut *tx, who, slug, Role::TenantViewer).await?;
        let current = for_update(tx, tenant.id, id).await?;
        let etag = format!("\"{}\"", current.generation);
        if !matches(if_match, &etag) {
            return Err(ServiceError::PreconditionFailed(etag));
        }
    }
    super::migrations::start(ctx, tx, who, (slug, id), body, request_id)
        .await
        .map_err(renamed)
}

/// Queues the deletion (202); a second call returns the pending delete.
pub async fn delete(
    ctx: &Ctx,
    tx: &mut PgConnection,
    who: &Principal,
    slug: &str,
    id: &str,
    request_id: Option<&str>,
) -> Result<Accepted> {
    let tenant = super::tenant_in(&mut *tx, who, slug, Role::TenantAdmin).await?;
    let current = for_update(tx, tenant.id, id).await?;
    let id = current.id;
    if let Some(open) = store::operations::open_delete(tx, tenant.id, id).await? {
        return Ok(Accepted {
            operation: operation_model(open),
            control_plane: control_plane_model(current),
        });
    }
    let row = store::control_planes::set_phase(tx, tenant.id, id, "Deleting").await?;
    // The creates and updates still open can no longer reach Ready.
    store::operations::supersede(tx, tenant.id, id).await?;
    let op = super::operations::record(
        ctx,
        tx,
        (tenant.id, id),
        OperationKind::Delete,
        row.generation,
        request_id,
    )
    .await?;
    store::control_planes::enqueue(tx, tenant.id, id, op.id, "delete", &serde_json::json!({})).await?;
    store::audit(
        &mut *tx,
        Some(tenant.id),
        &who.actor(),
        "control-plane.delete",
        "control-plane",
        &id.to_string(),
        request_id,
        serde_json::json!({}),
    )
    .await?;
    Ok(Accepted {
        operation: operation_model(op),
        control_plane: redact(
            who,
            with_placements_in(&mut *tx, tenant.id, vec![row])
                .await?
                .into_iter()
                .next()
                .ok_or(ServiceError::NotFound("control plane"))?,
        ),
    })
}

/// Whether the control plane is Ready, or has been (an installed version is recorded): a control plane
/// that is momentarily NotReady, Upgrading or Sleeping still hands out its kubeconfig.
fn has_served(phase: &str, status: &serde_json::Value) -> bool {
    phase == "Ready" || status.get("installedVersion").is_some_and(|v| v.is_string())
}

/// The admin kubeconfig Secret of a control plane, derived from its row (never from reported status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeconfigSecret {
    /// Namespace: the tenant's, from the namespace template.
    pub namespace: String,
    /// Name: `<control plane>-admin-kubeconfig`.
    pub name: String,
    /// The UID of the control plane's own TCP: the Secret must be owned by it.
    pub owner_uid: String,
    /// The tenant's slug.
    pub tenant: String,
    /// The control plane's name.
    pub control_plane: String,
}

/// Where the admin kubeconfig of a control plane that has served lives: the tenant's namespace and
/// `<name>-admin-kubeconfig`, owned by the control plane's pinned TCP.
pub async fn kubeconfig_secret(ctx: &Ctx, who: &Principal, slug: &str, id: &str) -> Result<KubeconfigSecret> {
    let tenant = tenant_for(ctx, who, slug, Role::TenantMember).await?;
    let cp = get(ctx, who, &tenant.slug, id).await?;
    served_secret(ctx, &tenant, &cp, "its kubeconfig does not exist yet").await
}

/// [`kubeconfig_secret`] of a control plane the caller was authorized for; `NotReady` (with `why`, e.g.
/// "its kubeconfig does not exist yet") until it has served and its TCP is pinned.
pub(crate) async fn served_secret(
    ctx: &Ctx,
    tenant: &store::tenants::TenantRow,
    cp: &ControlPlane,
    why: &str,
) -> Result<KubeconfigSecret> {
    let not_ready =
        |phase: &str| ServiceError::NotReady(format!("the control plane is {phase}, not Ready yet: {why}"));
    if !has_served(&cp.phase, &cp.status) {
        return Err(not_ready(&cp.phase));
    }
    let owner_uid = store::outbox::tcp_uid(&ctx.db, tenant.id, cp.id)
        .await?
        .ok_or_else(|| not_ready("not yet observed"))?;
    Ok(KubeconfigSecret {
        namespace: crate::translate::namespace(&ctx.limits.namespace_template, &tenant.slug),
        name: format!("{}-admin-kubeconfig", cp.name),
        owner_uid,
        tenant: tenant.slug.clone(),
        control_plane: cp.name.clone(),
    })
}

/// Keys of the kubeconfig Secret that may hold the admin kubeconfig, in order of preference.
const KUBECONFIG_KEYS: [&str; 3] = ["admin.conf", "super-admin.conf", "value"];

/// The data of Secret `namespace/name` of the management cluster, only if it is owned by the control
/// plane's pinned TCP (`owner_uid`): `NotReady` naming `what` when it is someone else's, `None` when it
/// does not exist.
pub(crate) async fn owned_secret_data(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    owner_uid: &str,
    what: &str,
) -> Result<Option<std::collections::BTreeMap<String, k8s_openapi::ByteString>>> {
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(client.clone(), namespace);
    let secret = secrets
        .get_opt(name)
        .await
        .map_err(|e| ServiceError::Internal(e.to_string()))?;
    let Some(secret) = secret else { return Ok(None) };
    let owned = secret
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == owner_uid);
    if !owned {
        return Err(ServiceError::NotReady(format!(
            "the {what} Secret is not owned by this control plane's TenantControlPlane (yet)"
        )));
    }
    Ok(Some(secret.data.unwrap_or_default()))
}

/// The admin kubeconfig (YAML) in `wanted`, read from the management cluster only if that Secret is owned
/// by the control plane's pinned TCP; `NotReady` until it exists, is owned and holds a kubeconfig.
pub(crate) async fn admin_kubeconfig(client: &kube::Client, wanted: &KubeconfigSecret) -> Result<Vec<u8>> {
    let mut data = owned_secret_data(
        client,
        &wanted.namespace,
        &wanted.name,
        &wanted.owner_uid,
        "kubeconfig",
    )
    .await?
    .unwrap_or_default();
    KUBECONFIG_KEYS
        .iter()
        .find_map(|k| data.remove(*k))
        .map(|content| content.0)
        .ok_or_else(|| ServiceError::NotReady("the kubeconfig Secret has no admin.conf yet".into()))
}

pub use access::{break_glass, exchange as credential, kubeconfig};

#[cfg(test)]
mod tests {
    use super::has_served;
    use serde_json::json;

    #[test]
    fn a_control_plane_that_has_served_keeps_its_kubeconfig_while_momentarily_not_ready() {
        assert!(has_served("Ready", &json!({})));
        assert!(has_served("NotReady", &json!({"installedVersion": "v1.34.4"})));
        assert!(has_served("Sleeping", &json!({"installedVersion": "v1.34.4"})));
        assert!(!has_served("Provisioning", &json!({})));
        assert!(!has_served("NotReady", &json!({"installedVersion": null})));
    }
}
