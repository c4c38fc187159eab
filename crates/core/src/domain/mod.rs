//! Domain rules: names, versions, roles and the shapes of a control-plane request. No I/O.

pub mod authenticator;
mod row;
pub mod schema;

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

pub use row::ControlPlaneRow;

/// One invalid field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FieldError {
    /// JSON path of the field, e.g. `kubernetesVersion`.
    pub field: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl FieldError {
    /// A field error.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A DNS-1123 label (lowercase alphanumerics and `-`, at most 63, alphanumeric at both ends).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Name(String);

impl Name {
    /// Parses a DNS-1123 label; `field` names the input in the error.
    pub fn parse(field: &str, value: &str) -> Result<Self, FieldError> {
        let ok = !value.is_empty()
            && value.len() <= 63
            && value
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !value.starts_with('-')
            && !value.ends_with('-');
        if ok {
            Ok(Self(value.to_string()))
        } else {
            Err(FieldError::new(
                field,
                "must be a DNS-1123 label: 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit",
            ))
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A Kubernetes version `vMAJOR.MINOR.PATCH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubeVersion {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

impl FromStr for KubeVersion {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("{s:?} is not a version of the form vMAJOR.MINOR.PATCH, e.g. v1.34.4");
        let rest = s.strip_prefix('v').ok_or_else(bad)?;
        let parts: Vec<&str> = rest.split('.').collect();
        let [major, minor, patch] = parts.as_slice() else {
            return Err(bad());
        };
        let num = |p: &str| {
            if p.is_empty()
                || p.len() > 6
                || !p.bytes().all(|b| b.is_ascii_digit())
                || (p.len() > 1 && p.starts_with('0'))
            {
                Err(bad())
            } else {
                p.parse::<u32>().map_err(|_| bad())
            }
        };
        Ok(Self {
            major: num(major)?,
            minor: num(minor)?,
            patch: num(patch)?,
        })
    }
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The supported range of Kubernetes minors (inclusive), e.g. v1.30 to v1.34.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionRange {
    /// Lowest supported `(major, minor)`.
    pub min: (u32, u32),
    /// Highest supported `(major, minor)`.
    pub max: (u32, u32),
}

impl Default for VersionRange {
    fn default() -> Self {
        Self {
            min: (1, 30),
            max: (1, 34),
        }
    }
}

impl FromStr for VersionRange {
    type Err = String;

    /// Parses `v1.30-v1.34`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parse = |p: &str| -> Result<(u32, u32), String> {
            let v = p
                .trim()
                .strip_prefix('v')
                .ok_or_else(|| format!("{p:?}: expected vMAJOR.MINOR"))?;
            let (a, b) = v
                .split_once('.')
                .ok_or_else(|| format!("{p:?}: expected vMAJOR.MINOR"))?;
            Ok((
                a.parse().map_err(|_| format!("{p:?}: bad major"))?,
                b.parse().map_err(|_| format!("{p:?}: bad minor"))?,
            ))
        };
        let (lo, hi) = s
            .split_once('-')
            .ok_or_else(|| format!("{s:?}: expected vX.Y-vX.Z"))?;
        let range = Self {
            min: parse(lo)?,
            max: parse(hi)?,
        };
        if range.min > range.max {
            return Err(format!("{s:?}: the lower bound is above the upper bound"));
        }
        Ok(range)
    }
}

impl fmt::Display for VersionRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}-v{}.{}", self.min.0, self.min.1, self.max.0, self.max.1)
    }
}

impl VersionRange {
    /// Parses `value` and checks it lies in the range.
    pub fn check(&self, field: &str, value: &str) -> Result<KubeVersion, FieldError> {
        let version: KubeVersion = value.parse().map_err(|e: String| FieldError::new(field, e))?;
        let mm = (version.major, version.minor);
        if mm < self.min || mm > self.max {
            return Err(FieldError::new(
                field,
                format!("{version} is outside the supported range {self}"),
            ));
        }
        Ok(version)
    }
}

/// An inclusive range of ports, e.g. the cluster's NodePort range `30000-32767`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// Lowest port.
    pub low: i32,
    /// Highest port.
    pub high: i32,
}

impl PortRange {
    /// Kubernetes' default `--service-node-port-range`.
    pub const NODE_PORTS: PortRange = PortRange {
        low: 30000,
        high: 32767,
    };

    /// Whether `port` lies in the range.
    pub fn contains(self, port: i32) -> bool {
        (self.low..=self.high).contains(&port)
    }
}

impl FromStr for PortRange {
    type Err = String;

    /// Parses `LOW-HIGH`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("{s:?}: expected LOW-HIGH, two ports from 1 to 65535, e.g. 30000-32767");
        let (low, high) = s.split_once('-').ok_or_else(bad)?;
        let port = |p: &str| p.trim().parse::<i32>().ok().filter(|p| (1..=65535).contains(p));
        let (Some(low), Some(high)) = (port(low), port(high)) else {
            return Err(bad());
        };
        if low > high {
            return Err(format!("{s:?}: the lower bound is above the upper bound"));
        }
        Ok(Self { low, high })
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.low, self.high)
    }
}

/// A Kubernetes Service name (DNS-1035 label): 1-63 lowercase letters, digits or `-`, starting with a letter
/// and ending with a letter or digit. Control-plane names become Service names, so they must be one.
pub fn check_dns1035(field: &str, value: &str) -> Result<(), FieldError> {
    Name::parse(field, value)?;
    if value.starts_with(|c: char| c.is_ascii_lowercase()) {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            "must be a DNS-1035 label: 1-63 lowercase letters, digits or '-', starting with a letter and ending with a letter or digit (it names the control plane's Service)",
        ))
    }
}

/// The namespace of a tenant's control planes (`template` with `{tenant}` = `slug`) must be a DNS-1123
/// label; `field` names the slug in the error.
pub fn check_namespace(field: &str, template: &str, slug: &str) -> Result<(), FieldError> {
    let namespace = template.replace("{tenant}", slug);
    if namespace.len() > 63 {
        return Err(FieldError::new(
            field,
            format!(
                "is too long: the tenant's namespace {namespace:?} (from the namespace template {template:?}) would have {} characters, and Kubernetes allows at most 63; use a slug of at most {} characters",
                namespace.len(),
                63usize.saturating_sub(template.len().saturating_sub("{tenant}".len())),
            ),
        ));
    }
    Name::parse(field, &namespace).map(|_| ()).map_err(|_| {
        FieldError::new(
            field,
            format!("makes the namespace {namespace:?} (from the namespace template {template:?}), which is not a DNS-1123 label"),
        )
    })
}

/// A Kubernetes object name that is a DNS-1123 subdomain (Secrets): at most 253 characters of lowercase
/// letters, digits, `-` and `.`, each dot-separated part starting and ending with a letter or digit.
pub fn check_subdomain(field: &str, value: &str) -> Result<(), FieldError> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && value.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        });
    if ok {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            "must be a DNS-1123 subdomain: at most 253 lowercase letters, digits, '-' or '.', each part starting and ending with a letter or digit",
        ))
    }
}

/// A key of a Secret's data: 1-253 letters, digits, `-`, `_` or `.`.
pub fn check_secret_key(field: &str, value: &str) -> Result<(), FieldError> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            "must be a Secret key: 1-253 letters, digits, '-', '_' or '.'",
        ))
    }
}

/// Whether `c` is whitespace at the ends of a display name (Unicode `White_Space`).
fn is_edge_space(c: char) -> bool {
    c.is_whitespace()
}

/// A display name: 1-200 characters, no control characters, no whitespace at either end.
pub fn check_display_name(field: &str, value: &str) -> Result<(), FieldError> {
    let ok = (1..=200).contains(&value.chars().count())
        && !value.chars().any(char::is_control)
        && !value.starts_with(is_edge_space)
        && !value.ends_with(is_edge_space);
    if ok {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            "must be 1 to 200 characters, without control characters or whitespace at either end",
        ))
    }
}

/// A free-text description: at most `max` characters, no control characters.
pub fn check_description(field: &str, value: &str, max: usize) -> Result<(), FieldError> {
    if value.chars().count() > max {
        Err(FieldError::new(
            field,
            format!("must be at most {max} characters"),
        ))
    } else if value.chars().any(char::is_control) {
        Err(FieldError::new(field, "must not contain control characters"))
    } else {
        Ok(())
    }
}

/// A bare `host:port` endpoint: a host name or IPv4 address (letters, digits, `.`, `_`, `-`) or a
/// bracketed IPv6 address, and a port from 1 to 65535 without leading zeros.
pub fn check_endpoint(field: &str, value: &str) -> Result<(), FieldError> {
    let host_ok = |host: &str| match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(ip) => {
            !ip.is_empty()
                && ip
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.'))
        }
        None => {
            !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        }
    };
    let port_ok = |port: &str| {
        (1..=5).contains(&port.len())
            && port.bytes().all(|b| b.is_ascii_digit())
            && !port.starts_with('0')
            && port.parse::<u32>().is_ok_and(|p| p <= 65535)
    };
    match value.rsplit_once(':') {
        Some((host, port)) if host_ok(host) && port_ok(port) => Ok(()),
        _ => Err(FieldError::new(
            field,
            "must be a bare host:port without a scheme: a host name, an IPv4 address or a bracketed IPv6 address, and a port from 1 to 65535",
        )),
    }
}

/// An `Idempotency-Key`: 1-255 visible ASCII characters (no spaces).
pub fn is_idempotency_key(value: &str) -> bool {
    (1..=255).contains(&value.len()) && value.bytes().all(|b| b.is_ascii_graphic())
}

/// A NodePort control plane's port must lie in the cluster's NodePort range.
pub fn check_node_port(field: &str, range: PortRange, port: i32) -> Result<(), FieldError> {
    if range.contains(port) {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!(
                "{port} is outside the cluster's NodePort range {range}: a NodePort control plane serves on its node port, so pick a port in that range"
            ),
        ))
    }
}

/// Ports kube-controller-manager and kube-scheduler listen on inside the control-plane pod.
pub const CONTROLLER_PORTS: [i32; 2] = [10257, 10259];
/// Ports of the konnectivity-server sidecar: agents (as the API creates it), admin and health.
pub const KONNECTIVITY_PORTS: [i32; 3] = [8132, 8133, 8134];

/// The API server's port must be free in the control-plane pod, where every container shares one
/// network namespace.
pub fn check_api_server_port(field: &str, port: i32, konnectivity: bool) -> Result<(), FieldError> {
    let taken_by = if CONTROLLER_PORTS.contains(&port) {
        "kube-controller-manager and kube-scheduler listen on 10257 and 10259"
    } else if konnectivity && KONNECTIVITY_PORTS.contains(&port) {
        "the konnectivity-server sidecar listens on 8132, 8133 and 8134"
    } else {
        return Ok(());
    };
    Err(FieldError::new(
        field,
        format!("{port} is taken in the control-plane pod: {taken_by}; pick another port"),
    ))
}

/// Checks an upgrade: never down, never skipping a minor.
pub fn check_upgrade(field: &str, from: KubeVersion, to: KubeVersion) -> Result<(), FieldError> {
    if to < from {
        return Err(FieldError::new(
            field,
            format!("downgrading from {from} to {to} is not supported"),
        ));
    }
    if to.major != from.major || to.minor > from.minor + 1 {
        return Err(FieldError::new(
            field,
            format!(
                "upgrading from {from} to {to} skips a minor version: upgrade to v{}.{}.x first",
                from.major,
                from.minor + 1
            ),
        ));
    }
    Ok(())
}

macro_rules! string_enum {
    ($(#[doc = $doc:literal])+ $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[doc = $doc])+
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name { $($(#[$vmeta])* #[serde(rename = $text)] $variant),+ }

        // By hand: utoipa's derive reads no `serde(rename)` given through a macro literal, and would
        // document the variant names instead of the wire spellings.
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .description(Some([$($doc),+].map(str::trim).join("\n")))
                    .enum_values(Some([$($text),+]))
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {}

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.as_str()) }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(format!("must be one of: {}", [$($text),+].join(", "))),
                }
            }
        }
    };
}

string_enum!(
    /// What a token may do.
    Role {
        /// Everything, across tenants.
        PlatformAdmin = "platform-admin",
        /// Everything in its own tenant, including tokens.
        TenantAdmin = "tenant-admin",
        /// Create, read and update control planes of its tenant.
        TenantMember = "tenant-member",
        /// Read its tenant.
        TenantViewer = "tenant-viewer",
    }
);

impl Role {
    /// Rank for "at least" comparisons (viewer < member < admin < platform-admin).
    pub fn rank(self) -> u8 {
        match self {
            Role::TenantViewer => 0,
            Role::TenantMember => 1,
            Role::TenantAdmin => 2,
            Role::PlatformAdmin => 3,
        }
    }

    /// Whether this role includes `needed`.
    pub fn includes(self, needed: Role) -> bool {
        self.rank() >= needed.rank()
    }
}

string_enum!(
    /// Size class of a control plane; drives resources and offload.
    SizeClass {
        /// Small tenants.
        Small = "small",
        /// Medium tenants.
        Medium = "medium",
        /// Large tenants.
        Large = "large",
    }
);

string_enum!(
    /// How the tenant API server is exposed.
    ServiceType {
        /// Cluster-internal.
        ClusterIp = "ClusterIP",
        /// A node port.
        NodePort = "NodePort",
        /// A load balancer.
        LoadBalancer = "LoadBalancer",
    }
);

string_enum!(
    /// What an operation does to its control plane.
    OperationKind {
        /// Makes it.
        Create = "create",
        /// Changes its spec (version, replicas, labels).
        Update = "update",
        /// Removes it and its datastore space.
        Delete = "delete",
        /// Moves it, live, to another DataStore.
        Migrate = "migrate",
    }
);

string_enum!(
    /// Where an operation is: `pending` until the worker takes it, `running` until it is done, then
    /// `succeeded` or `failed`.
    OperationState {
        /// Recorded; the worker has not taken it yet.
        Pending = "pending",
        /// Being carried out.
        Running = "running",
        /// Done: the control plane is Ready at the requested generation, or gone.
        Succeeded = "succeeded",
        /// Ended without reaching its goal; `reason` and `error` say why.
        Failed = "failed",
    }
);

impl OperationState {
    /// Whether the operation has ended.
    pub fn is_done(self) -> bool {
        matches!(self, OperationState::Succeeded | OperationState::Failed)
    }
}

string_enum!(
    /// A step an operation has reached. A create or update goes `placed`, `applied`, `datastoreReady`,
    /// `certificates`, `deployed`, `ready`; a delete goes `requested`, `applied`, `deleted`.
    OperationStage {
        /// Recorded with its placement on DataStores.
        Placed = "placed",
        /// A delete is recorded.
        Requested = "requested",
        /// The worker applied it to the management cluster (the TenantControlPlane, or its deletion).
        Applied = "applied",
        /// The tenant's space on its DataStores is provisioned (`DataStoreReady`).
        DatastoreReady = "datastoreReady",
        /// Its certificates and kubeconfigs are issued (`CertificatesReady`, `KubeconfigsReady`).
        Certificates = "certificates",
        /// Its Deployment is available (`DeploymentAvailable`).
        Deployed = "deployed",
        /// The control plane is Ready at the requested generation (or asleep, when scaled to zero).
        Ready = "ready",
        /// The TenantControlPlane is gone, and with it the tenant's datastore space.
        Deleted = "deleted",
        /// A migration copies the source's space to the target.
        Copying = "copying",
        /// A migration applies the source's later changes to the target.
        CatchingUp = "catchingUp",
        /// A migration froze writes on the source.
        Frozen = "frozen",
        /// A migration moves the control plane's Deployment to the target.
        Switching = "switching",
        /// A migration compares both spaces key by key.
        Verifying = "verifying",
        /// A migration is done: the control plane serves from the target.
        Done = "done",
    }
);

impl OperationStage {
    /// The stages of a create or an update, in order.
    pub const APPLY: [OperationStage; 6] = [
        OperationStage::Placed,
        OperationStage::Applied,
        OperationStage::DatastoreReady,
        OperationStage::Certificates,
        OperationStage::Deployed,
        OperationStage::Ready,
    ];
    /// The stages of a migration, in order.
    pub const MIGRATE: [OperationStage; 7] = [
        OperationStage::Placed,
        OperationStage::Copying,
        OperationStage::CatchingUp,
        OperationStage::Frozen,
        OperationStage::Switching,
        OperationStage::Verifying,
        OperationStage::Done,
    ];
    /// The stages of a delete, in order.
    pub const DELETE: [OperationStage; 3] = [
        OperationStage::Requested,
        OperationStage::Applied,
        OperationStage::Deleted,
    ];
}

/// Where high-churn resources (events, leases) go: `none`, `auto`, or `pool:<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Offload {
    /// Everything stays on the primary.
    None,
    /// Decided by size class and configuration.
    Auto,
    /// Offloaded to the named pool.
    Pool(Name),
}

impl FromStr for Offload {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Offload::None),
            "auto" => Ok(Offload::Auto),
            other => match other.strip_prefix("pool:") {
                Some(pool) => Name::parse("offload", pool)
                    .map(Offload::Pool)
                    .map_err(|e| format!("pool name {}", e.message)),
                None => Err("must be none, auto or pool:<name>".into()),
            },
        }
    }
}

impl fmt::Display for Offload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Offload::None => f.write_str("none"),
            Offload::Auto => f.write_str("auto"),
            Offload::Pool(p) => write!(f, "pool:{p}"),
        }
    }
}

/// Replicas of a control plane: 0 (asleep) to 9.
pub fn check_replicas(field: &str, replicas: i32) -> Result<i32, FieldError> {
    if (0..=9).contains(&replicas) {
        Ok(replicas)
    } else {
        Err(FieldError::new(
            field,
            "must be between 0 and 9 (0 puts the control plane to sleep)",
        ))
    }
}

/// Labels: at most 64, keys and values like Kubernetes labels (simplified: ≤63 chars, `[A-Za-z0-9._/-]`).
pub fn check_labels(
    field: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> Result<(), FieldError> {
    if labels.len() > 64 {
        return Err(FieldError::new(field, "at most 64 labels"));
    }
    let valid = |s: &str, allow_empty: bool| {
        (allow_empty || !s.is_empty())
            && s.len() <= 63 + 254
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/'))
    };
    for (k, v) in labels {
        if !valid(k, false) || !valid(v, true) {
            return Err(FieldError::new(
                format!("{field}.{k}"),
                "label keys and values use letters, digits, '.', '_', '-' and '/'",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> KubeVersion {
        s.parse().unwrap()
    }

    #[test]
    fn names_follow_dns_1123_labels() {
        assert!(Name::parse("name", "prod-eu-1").is_ok());
        for bad in ["", "Prod", "-a", "a-", "a_b", &"a".repeat(64)] {
            assert_eq!(Name::parse("name", bad).unwrap_err().field, "name", "{bad:?}");
        }
        assert!(Name::parse("name", &"a".repeat(63)).is_ok());
    }

    #[test]
    fn control_plane_names_are_dns_1035_labels() {
        assert!(check_dns1035("name", "prod-1").is_ok());
        for bad in ["1prod", "0", "-a", "a-", "Prod", "a_b", "", &"a".repeat(64)] {
            assert_eq!(check_dns1035("name", bad).unwrap_err().field, "name", "{bad:?}");
        }
        assert!(check_dns1035("name", &format!("a{}", "9".repeat(62))).is_ok());
    }

    #[test]
    fn slugs_whose_namespace_exceeds_63_characters_are_refused() {
        assert!(check_namespace("slug", "tp-{tenant}", &"a".repeat(60)).is_ok());
        let err = check_namespace("slug", "tp-{tenant}", &"a".repeat(61)).unwrap_err();
        assert_eq!(err.field, "slug");
        assert!(
            err.message.contains("would have 64 characters"),
            "{}",
            err.message
        );
        assert!(err.message.contains("at most 60 characters"), "{}", err.message);
        assert!(check_namespace("slug", "{tenant}", &"a".repeat(63)).is_ok());
        assert!(check_namespace("slug", "Tenant-{tenant}", "a").is_err());
    }

    #[test]
    fn secret_references_use_kubernetes_names_and_keys() {
        assert!(check_subdomain("s", "etcd-gold.certs").is_ok());
        for bad in ["", "Etcd", "a..b", "-a", "a_b", &"a".repeat(254)] {
            assert!(check_subdomain("s", bad).is_err(), "{bad:?}");
        }
        assert!(check_secret_key("k", "tls.crt").is_ok());
        assert!(check_secret_key("k", "CA_key-1").is_ok());
        for bad in ["", "a/b", "a b", &"k".repeat(254)] {
            assert!(check_secret_key("k", bad).is_err(), "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn dns_1035_accepts_exactly_the_kubernetes_pattern(name in "[a-z0-9-]{0,64}") {
            let pattern = name.len() <= 63
                && name.starts_with(|c: char| c.is_ascii_lowercase())
                && !name.ends_with('-');
            proptest::prop_assert_eq!(check_dns1035("name", &name).is_ok(), pattern);
        }

        #[test]
        fn the_namespace_check_accepts_exactly_the_slugs_that_fit(slug in "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?") {
            let fits = slug.len() + "tp-".len() <= 63;
            proptest::prop_assert_eq!(check_namespace("slug", "tp-{tenant}", &slug).is_ok(), fits);
        }

        #[test]
        fn node_ports_are_accepted_exactly_within_the_range(port in 1i32..=65535) {
            let within = (30000..=32767).contains(&port);
            proptest::prop_assert_eq!(check_node_port("port", PortRange::NODE_PORTS, port).is_ok(), within);
        }
    }

    #[test]
    fn the_api_server_port_must_be_free_in_the_pod() {
        for free in [6443, 443, 8132, 8134, 10250] {
            assert!(check_api_server_port("port", free, false).is_ok(), "{free}");
        }
        for taken in [10257, 10259] {
            let error = check_api_server_port("port", taken, false).unwrap_err();
            assert_eq!(error.field, "port");
            assert_eq!(
                error.message,
                format!(
                    "{taken} is taken in the control-plane pod: kube-controller-manager and kube-scheduler listen on 10257 and 10259; pick another port"
                )
            );
        }
        for taken in [8132, 8133, 8134] {
            assert_eq!(
                check_api_server_port("port", taken, true).unwrap_err().message,
                format!(
                    "{taken} is taken in the control-plane pod: the konnectivity-server sidecar listens on 8132, 8133 and 8134; pick another port"
                )
            );
        }
        assert!(check_api_server_port("port", 6443, true).is_ok());
    }

    #[test]
    fn node_ports_must_be_in_the_range() {
        let range = PortRange::NODE_PORTS;
        assert!(check_node_port("port", range, 30000).is_ok());
        assert!(check_node_port("port", range, 32767).is_ok());
        for bad in [6443, 29999, 32768] {
            assert_eq!(check_node_port("port", range, bad).unwrap_err().field, "port");
        }
        assert_eq!(
            "30000-30010".parse::<PortRange>().unwrap(),
            PortRange {
                low: 30000,
                high: 30010
            }
        );
        for bad in ["30000", "2-1", "0-10", "1-70000", "a-b"] {
            assert!(bad.parse::<PortRange>().is_err(), "{bad}");
        }
    }

    #[test]
    fn versions_parse_strictly() {
        assert_eq!(
            v("v1.34.4"),
            KubeVersion {
                major: 1,
                minor: 34,
                patch: 4
            }
        );
        for bad in ["1.34.4", "v1.34", "v1.34.4.1", "v1.034.1", "v1.x.1", "v1.34.-1"] {
            assert!(bad.parse::<KubeVersion>().is_err(), "{bad}");
        }
    }

    #[test]
    fn range_check_names_the_range() {
        let range = VersionRange::default();
        assert!(range.check("kubernetesVersion", "v1.30.0").is_ok());
        assert!(range.check("kubernetesVersion", "v1.34.9").is_ok());
        assert_eq!(
            range.check("kubernetesVersion", "v1.29.9").unwrap_err().message,
            "v1.29.9 is outside the supported range v1.30-v1.34"
        );
        assert_eq!(
            "v1.31-v1.33".parse::<VersionRange>().unwrap(),
            VersionRange {
                min: (1, 31),
                max: (1, 33)
            }
        );
    }

    #[test]
    fn upgrades_never_downgrade_or_skip_a_minor() {
        assert!(check_upgrade("v", v("v1.33.1"), v("v1.33.2")).is_ok());
        assert!(check_upgrade("v", v("v1.33.9"), v("v1.34.0")).is_ok());
        assert_eq!(
            check_upgrade("v", v("v1.33.2"), v("v1.33.1"))
                .unwrap_err()
                .message,
            "downgrading from v1.33.2 to v1.33.1 is not supported"
        );
        assert_eq!(
            check_upgrade("v", v("v1.32.0"), v("v1.34.0"))
                .unwrap_err()
                .message,
            "upgrading from v1.32.0 to v1.34.0 skips a minor version: upgrade to v1.33.x first"
        );
    }

    #[test]
    fn offload_parses_pool_names() {
        assert_eq!("auto".parse::<Offload>().unwrap(), Offload::Auto);
        assert_eq!(
            "pool:events-eu".parse::<Offload>().unwrap().to_string(),
            "pool:events-eu"
        );
        assert!("pool:".parse::<Offload>().is_err());
        assert!("sometimes".parse::<Offload>().is_err());
    }

    #[test]
    fn roles_are_ordered() {
        assert!(Role::PlatformAdmin.includes(Role::TenantAdmin));
        assert!(Role::TenantMember.includes(Role::TenantViewer));
        assert!(!Role::TenantViewer.includes(Role::TenantMember));
        assert_eq!("tenant-admin".parse::<Role>().unwrap(), Role::TenantAdmin);
    }
}
