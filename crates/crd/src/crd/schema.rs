//! Hand-written schema fragments where derived schemas cannot say enough (item patterns, free-form JSON).

use schemars::{Schema, SchemaGenerator, json_schema};

/// `host:port` without a scheme; IPv6 hosts in brackets.
const ENDPOINT_RULE: &str =
    "self.matches('^(\\\\[[0-9a-fA-F:.]+\\\\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?):[0-9]{1,5}$')";

/// DataStore `endpoints`: at least one bare `host:port`.
pub fn endpoints(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "minItems": 1,
        "maxItems": 32,
        "items": {
            "type": "string",
            "maxLength": 261,
            "x-kubernetes-validations": [{
                "rule": ENDPOINT_RULE,
                "message": "each endpoint is a bare host:port without a scheme, e.g. etcd-0.etcd:2379 or 10.0.0.5:5432"
            }]
        }
    })
}

/// Any JSON value (JSON-patch `value`).
pub fn any_json(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

fn string_list(max_items: u64, max_len: u64, rule: Option<(&str, &str)>) -> Schema {
    let mut item = serde_json::json!({"type": "string", "maxLength": max_len});
    if let Some((rule, message)) = rule {
        item["x-kubernetes-validations"] = serde_json::json!([{"rule": rule, "message": message}]);
    }
    json_schema!({"type": "array", "maxItems": max_items, "items": item})
}

/// Up to two CIDRs (dual stack).
pub fn cidrs(_: &mut SchemaGenerator) -> Schema {
    let mut schema = string_list(
        2,
        64,
        Some(("isCIDR(self)", "must be a CIDR such as 10.96.0.0/16")),
    );
    schema.insert("minItems".into(), 1.into());
    schema
}

/// Up to eight IP addresses.
pub fn ips(_: &mut SchemaGenerator) -> Schema {
    string_list(
        8,
        64,
        Some(("isIP(self)", "must be an IP address such as 10.96.0.10")),
    )
}

/// Up to sixteen CIDRs.
pub fn source_ranges(_: &mut SchemaGenerator) -> Schema {
    string_list(
        16,
        64,
        Some(("isCIDR(self)", "must be a CIDR such as 203.0.113.0/24")),
    )
}

/// Extra certificate SANs (DNS names or IPs).
pub fn cert_sans(_: &mut SchemaGenerator) -> Schema {
    string_list(64, 253, None)
}

/// Command-line flags (`--flag=value`).
pub fn flags(_: &mut SchemaGenerator) -> Schema {
    string_list(256, 4096, None)
}

/// Bytes, base64-encoded in JSON and YAML.
pub fn base64_bytes(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "format": "byte"})
}
