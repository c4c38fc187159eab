//! The rules of the input checks, written into the document's schemas: patterns, lengths, ranges and
//! enumerations of each field, the cross-field rules as `if`/`then`, and this server's configured limits
//! (supported versions, NodePort range, slug length). A request matches the document exactly when the
//! checks accept its form; what it conflicts with in the current state is a 409.

use serde_json::{Value, json};

use crate::domain::{
    CONTROLLER_PORTS, KONNECTIVITY_PORTS, PortRange, VersionRange,
    schema::{
        ANY_VERSION, CURSOR, DNS1035_LABEL, DNS1123_SUBDOMAIN, ENDPOINT, IDEMPOTENCY_KEY, LABEL_KEY,
        LABEL_SELECTOR, LABEL_VALUE, MAX_LABELS, OFFLOAD, PHASE, SECRET_KEY, UUID, description_pattern,
        display_name_pattern,
    },
};
use tenantplane_service::auth::MAX_TOKEN_TTL_SECONDS;
use tenantplane_service::{Limits, datastores, join_tokens, page::MAX_PAGE, tokens};

/// The configuration the document describes.
#[derive(Debug, Clone)]
pub struct Contract {
    /// Supported Kubernetes minors.
    pub versions: VersionRange,
    /// The cluster's NodePort range.
    pub node_ports: PortRange,
    /// The longest slug whose namespace fits 63 characters under the namespace template.
    pub slug_max: usize,
}

impl Contract {
    /// The contract of a server with these settings.
    pub fn new(versions: VersionRange, limits: &Limits) -> Self {
        let overhead = limits.namespace_template.len().saturating_sub("{tenant}".len());
        Self {
            versions,
            node_ports: limits.node_ports,
            slug_max: 63usize.saturating_sub(overhead).max(1),
        }
    }
}

impl Default for Contract {
    /// `serve`'s defaults: the committed document.
    fn default() -> Self {
        Self::new(VersionRange::default(), &Limits::default())
    }
}

/// A DNS-1123 label of at most `max` characters.
fn label(max: usize) -> Value {
    let pattern = match max {
        0 | 1 => "^[a-z0-9]$".to_string(),
        max => format!("^[a-z0-9]([-a-z0-9]{{0,{}}}[a-z0-9])?$", max - 2),
    };
    json!({"pattern": pattern, "maxLength": max})
}

fn labels() -> Value {
    json!({
        "maxProperties": MAX_LABELS,
        "propertyNames": {"type": "string", "pattern": LABEL_KEY},
        "additionalProperties": {"type": "string", "pattern": LABEL_VALUE},
    })
}

fn description() -> Value {
    json!({"pattern": description_pattern(tokens::MAX_DESCRIPTION_CHARS), "maxLength": tokens::MAX_DESCRIPTION_CHARS})
}

/// The properties of the pool and DataStore changes (`PATCH`), checked as on create.
fn update_properties() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        ("UpdatePool", "policy", json!({"enum": datastores::POLICIES})),
        ("UpdatePool", "labels", labels()),
        ("UpdateDataStore", "pool", label(63)),
        ("UpdateDataStore", "labels", labels()),
        (
            "UpdateDataStore",
            "capacityTenants",
            json!({"minimum": 0, "maximum": i32::MAX}),
        ),
        (
            "UpdateDataStore",
            "capacityBytes",
            json!({"minimum": 1, "maximum": i64::MAX}),
        ),
    ]
}

/// The properties of migrations, drains and rebalances.
fn migration_properties() -> Vec<(&'static str, &'static str, Value)> {
    let concurrency = json!({"minimum": 1, "maximum": tenantplane_service::drains::MAX_CONCURRENCY});
    vec![
        ("UpdateControlPlane", "datastore", label(63)),
        ("DrainDataStore", "concurrency", concurrency.clone()),
        // A drain drops override data (`move` is for one control plane's migration): only `drop` is accepted.
        ("DrainDataStore", "overrides", json!({"enum": ["drop"]})),
        ("RebalancePool", "concurrency", concurrency),
    ]
}

/// `(schema, property, keywords)`: what each property's check accepts, merged into its schema.
pub fn properties(c: &Contract) -> Vec<(&'static str, &'static str, Value)> {
    let version = json!({"pattern": c.versions.pattern()});
    let dns1123 = label(63);
    let replicas = json!({"minimum": 0, "maximum": 9});
    vec![
        ("CreateTenant", "slug", label(c.slug_max)),
        (
            "CreateTenant",
            "displayName",
            json!({"pattern": display_name_pattern(), "minLength": 1, "maxLength": 200}),
        ),
        ("CreateTenant", "labels", labels()),
        (
            "MintToken",
            "ttlSeconds",
            json!({"minimum": 60, "maximum": MAX_TOKEN_TTL_SECONDS}),
        ),
        ("MintToken", "description", description()),
        (
            "SetQuotas",
            "controlPlanes",
            json!({"minimum": 0, "maximum": tenantplane_service::quotas::MAX_QUOTA}),
        ),
        (
            "SetQuotas",
            "tokens",
            json!({"minimum": 0, "maximum": tenantplane_service::quotas::MAX_QUOTA}),
        ),
        ("DataStorePreference", "pool", dns1123.clone()),
        ("DataStorePreference", "name", dns1123.clone()),
        ("DataStorePreference", "labels", labels()),
        (
            "CreateControlPlane",
            "name",
            json!({"pattern": DNS1035_LABEL, "maxLength": 63}),
        ),
        ("CreateControlPlane", "kubernetesVersion", version.clone()),
        ("CreateControlPlane", "replicas", replicas.clone()),
        (
            "CreateControlPlane",
            "port",
            json!({"minimum": 1, "maximum": 65535, "not": {"enum": CONTROLLER_PORTS}}),
        ),
        ("CreateControlPlane", "offload", json!({"pattern": OFFLOAD})),
        ("CreateControlPlane", "labels", labels()),
        ("UpdateControlPlane", "kubernetesVersion", version),
        ("UpdateControlPlane", "replicas", replicas),
        ("UpdateControlPlane", "labels", labels()),
        ("CreatePool", "name", dns1123.clone()),
        (
            "CreatePool",
            "policy",
            json!({"enum": ["spread", "binpack", "rendezvous", "dedicated"]}),
        ),
        ("CreatePool", "labels", labels()),
        ("CreateDataStore", "name", dns1123.clone()),
        ("CreateDataStore", "pool", dns1123.clone()),
        (
            "CreateDataStore",
            "driver",
            json!({"enum": ["etcd", "MySQL", "PostgreSQL", "NATS"]}),
        ),
        (
            "CreateDataStore",
            "endpoints",
            json!({"minItems": 1, "maxItems": 32, "items": {"type": "string", "pattern": ENDPOINT}}),
        ),
        ("CreateDataStore", "labels", labels()),
        (
            "CreateDataStore",
            "capacityTenants",
            json!({"minimum": 0, "maximum": i32::MAX}),
        ),
        (
            "CreateDataStore",
            "caId",
            json!({"pattern": description_pattern(datastores::CA_ID_MAX), "maxLength": datastores::CA_ID_MAX}),
        ),
        (
            "CreateDataStore",
            "capacityBytes",
            json!({"minimum": 1, "maximum": i64::MAX}),
        ),
        (
            "SecretKeyRef",
            "name",
            json!({"pattern": DNS1123_SUBDOMAIN, "maxLength": 253}),
        ),
        ("SecretKeyRef", "namespace", dns1123.clone()),
        ("SecretKeyRef", "keyPath", json!({"pattern": SECRET_KEY})),
        (
            "CreateJoinToken",
            "ttlSeconds",
            json!({"minimum": 1, "maximum": join_tokens::MAX_TTL_SECONDS}),
        ),
        (
            "CreateJoinToken",
            "description",
            json!({"pattern": description_pattern(join_tokens::MAX_DESCRIPTION_CHARS), "maxLength": join_tokens::MAX_DESCRIPTION_CHARS}),
        ),
        (
            "CreateCredential",
            "ttlSeconds",
            json!({"minimum": tenantplane_service::auth::cluster::MIN_TTL_SECONDS, "maximum": tenantplane_service::auth::cluster::MAX_TTL_SECONDS}),
        ),
        (
            "JwtIssuer",
            "url",
            json!({"pattern": "^https://[^/?#\\s]+[^?#\\s]*$", "maxLength": 2048}),
        ),
        ("JwtIssuer", "audiences", json!({"minItems": 1, "maxItems": 16})),
        ("SimulateRequest", "pool", dns1123),
        ("SimulateRequest", "labels", labels()),
        ("SimulateRequest", "offload", json!({"pattern": OFFLOAD})),
    ]
    .into_iter()
    .chain(update_properties())
    .chain(migration_properties())
    .collect()
}

/// `(schema, keywords)`: the cross-field rules, merged into the object's schema as `allOf`.
pub fn rules(c: &Contract) -> Vec<(&'static str, Value)> {
    let node_port = {
        let mut then =
            json!({"properties": {"port": {"minimum": c.node_ports.low, "maximum": c.node_ports.high}}});
        // Without a port the default 6443 applies, which a NodePort control plane takes only in range.
        if !c.node_ports.contains(6443) {
            then["required"] = json!(["port"]);
        }
        json!({"if": {"properties": {"serviceType": {"const": "NodePort"}}, "required": ["serviceType"]}, "then": then})
    };
    let konnectivity = json!({
        "if": {"properties": {"addons": {"properties": {"konnectivity": {"const": true}}, "required": ["konnectivity"]}}, "required": ["addons"]},
        "then": {"properties": {"port": {"not": {"enum": KONNECTIVITY_PORTS}}}},
    });
    let refs = [
        "username",
        "password",
        "caCertificate",
        "caPrivateKey",
        "clientCertificate",
        "clientPrivateKey",
    ];
    let present = |key: &str| json!({"required": [key], "properties": {key: {"type": "object"}}});
    let etcd_refs: Vec<Value> = refs[2..].iter().map(|k| present(k)).collect();
    let any_ref: Vec<Value> = refs.iter().map(|k| present(k)).collect();
    let datastore = json!([
        {"if": {"properties": {"driver": {"const": "NATS"}}}, "then": {"properties": {"capacityTenants": {"maximum": 1}}}},
        {"if": {"properties": {"driver": {"const": "etcd"}}},
         "then": {"required": ["secrets"], "properties": {"secrets": {"allOf": etcd_refs}}},
         "else": {"required": ["secrets"], "properties": {"secrets": {"anyOf": any_ref}}}},
    ]);
    vec![
        ("CreateControlPlane", json!([node_port, konnectivity])),
        ("CreateDataStore", datastore),
    ]
}

/// `(parameter name, keywords)`: what the query and header parameters' checks accept.
pub fn parameters() -> Vec<(&'static str, Value)> {
    vec![
        ("limit", json!({"minimum": 1, "maximum": MAX_PAGE})),
        ("cursor", json!({"pattern": CURSOR})),
        ("version", json!({"pattern": ANY_VERSION})),
        ("label", json!({"pattern": LABEL_SELECTOR})),
        ("status", json!({"pattern": PHASE})),
        ("controlPlane", json!({"pattern": UUID})),
        (
            "waitSeconds",
            json!({"minimum": 0, "maximum": tenantplane_service::operations::MAX_WAIT_SECONDS}),
        ),
        ("Idempotency-Key", json!({"pattern": IDEMPOTENCY_KEY})),
        ("prefix", json!({"pattern": "^[-a-z0-9]*$", "maxLength": 63})),
        ("pool", label(63)),
        (
            "driver",
            json!({"enum": tenantplane_service::datastores::DRIVERS}),
        ),
        (
            "action",
            json!({"pattern": "^[-a-z0-9.]+$", "minLength": 1, "maxLength": tenantplane_service::audit::MAX_ACTION_CHARS}),
        ),
        ("since", json!({"format": "date-time"})),
    ]
}

/// The role a tenant token may take (`platform-admin` tokens are not minted through the API).
pub fn tenant_roles() -> Value {
    json!({"type": "string", "enum": ["tenant-admin", "tenant-member", "tenant-viewer"],
           "description": "Role of the new token."})
}

/// `(path, method, status, header, description)`: the headers a success carries.
pub fn response_headers() -> Vec<(
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
)> {
    let cp = "/tenants/{tenant}/control-planes";
    let one = "/tenants/{tenant}/control-planes/{id}";
    let migrate = "/tenants/{tenant}/control-planes/{id}/migrate";
    let abort = "/tenants/{tenant}/control-planes/{id}/migrate/abort";
    let location = "The operation that carries the change: `/api/v1/tenants/{tenant}/operations/{id}`";
    let etag = "The control plane's generation, for `If-Match`";
    vec![
        (cp, "post", "202", "Location", location),
        (cp, "post", "202", "ETag", etag),
        (one, "patch", "202", "Location", location),
        (one, "patch", "202", "ETag", etag),
        (one, "delete", "202", "Location", location),
        (one, "delete", "202", "ETag", etag),
        (one, "get", "200", "ETag", etag),
        (migrate, "post", "202", "Location", location),
        (migrate, "post", "202", "ETag", etag),
        (abort, "post", "202", "Location", location),
        (abort, "post", "202", "ETag", etag),
    ]
}

/// `(schema, example)`: a valid example of each request body (schemathesis' examples phase sends them).
pub fn examples() -> Vec<(&'static str, Value)> {
    vec![
        (
            "CreateTenant",
            json!({"slug": "acme", "displayName": "Acme Corp", "labels": {"tier": "gold"}}),
        ),
        (
            "MintToken",
            json!({"role": "tenant-member", "ttlSeconds": 3600, "description": "ci pipeline"}),
        ),
        (
            "CreateControlPlane",
            json!({"name": "prod", "kubernetesVersion": "v1.34.4", "replicas": 2,
            "serviceType": "ClusterIP", "sizeClass": "small", "offload": "none", "labels": {"env": "prod"}}),
        ),
        ("UpdateControlPlane", json!({"replicas": 3})),
        (
            "CreatePool",
            json!({"name": "gold", "policy": "spread", "labels": {"region": "eu"}}),
        ),
        (
            "CreateJoinToken",
            json!({"ttlSeconds": 3600, "description": "worker pool a"}),
        ),
        (
            "SimulateRequest",
            json!({"sizeClass": "medium", "offload": "auto"}),
        ),
    ]
}
