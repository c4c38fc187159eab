//! What control-plane writes answer in GraphQL: the payload, and the service's refusals as typed user
//! errors (input problems, conflicts, quotas, stale ETags); anything else stays a GraphQL error.

use async_graphql::{Context, Result, SimpleObject};
use uuid::Uuid;

use super::{
    caller, gql_error,
    types::{ControlPlane, Operation, UserError, UserErrorCode},
};
use crate::domain::FieldError;
use tenantplane_service::{self as service, ServiceError, model::Accepted};

/// The result of a control-plane mutation.
#[derive(SimpleObject, Debug, Clone, Default)]
pub struct ControlPlanePayload {
    /// The control plane as recorded; none when there are user errors.
    pub control_plane: Option<ControlPlane>,
    /// The operation carrying the change to the cluster.
    pub operation: Option<Operation>,
    /// Why nothing changed.
    pub user_errors: Vec<UserError>,
}

/// One user error of `code` per field error (an empty field names none).
fn field_errors(errors: Vec<FieldError>, code: UserErrorCode) -> Vec<UserError> {
    errors
        .into_iter()
        .map(|e| UserError {
            field: (!e.field.is_empty()).then_some(e.field),
            message: e.message,
            code,
        })
        .collect()
}

/// User errors for input problems, conflicts and stale ETags; a GraphQL error for the rest.
pub fn user_errors(err: ServiceError) -> Result<Vec<UserError>> {
    let one = |code, field: Option<&str>, message: String| UserError {
        field: field.map(str::to_string),
        message,
        code,
    };
    match err {
        ServiceError::Invalid(errors) => Ok(field_errors(errors, UserErrorCode::Invalid)),
        ServiceError::ConflictFields(errors) => Ok(field_errors(errors, UserErrorCode::Conflict)),
        ServiceError::Conflict(message) | ServiceError::NotReady(message) => {
            Ok(vec![one(UserErrorCode::Conflict, None, message)])
        }
        ServiceError::QuotaExceeded(quota, limit) => Ok(vec![one(
            UserErrorCode::QuotaExceeded,
            Some(quota),
            ServiceError::QuotaExceeded(quota, limit).to_string(),
        )]),
        ServiceError::PreconditionFailed(etag) => Ok(vec![one(
            UserErrorCode::PreconditionFailed,
            Some("ifMatch"),
            format!("the control plane changed: its ETag is now {etag}; fetch it and retry"),
        )]),
        other => Err(gql_error(other)),
    }
}

fn accepted(slug: String, tenant_id: Uuid, acc: Accepted) -> ControlPlanePayload {
    ControlPlanePayload {
        control_plane: Some(ControlPlane {
            slug,
            tenant_id,
            cp: acc.control_plane,
        }),
        operation: Some(acc.operation.into()),
        user_errors: Vec::new(),
    }
}

/// Runs a control-plane write in one transaction, committed only when it succeeds.
pub async fn in_tx(
    ctx: &Context<'_>,
    slug: String,
    work: impl AsyncFnOnce(&mut sqlx::PgConnection) -> Result<Accepted, ServiceError>,
) -> Result<ControlPlanePayload> {
    let (c, who) = caller(ctx)?;
    let mut tx = c.db.begin().await.map_err(|e| gql_error(e.into()))?;
    match work(&mut tx).await {
        Ok(acc) => {
            tx.commit().await.map_err(|e| gql_error(e.into()))?;
            // The tenant's id, for the payload's batched fields (the write was authorized on it).
            let tenant = service::tenants::get(c, who, &slug).await.map_err(gql_error)?;
            Ok(accepted(slug, tenant.id, acc))
        }
        Err(err) => Ok(ControlPlanePayload {
            user_errors: user_errors(err)?,
            ..Default::default()
        }),
    }
}
