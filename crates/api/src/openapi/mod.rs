//! What the derive cannot see, added to the generated OpenAPI document: the input checks' rules
//! ([`contract`]), problem documents as `application/problem+json`, and the statuses that
//! authentication, the JSON body extractor and the error mapping can answer on any route, with their
//! headers.

pub mod contract;

use serde_json::{Map, Value, json};
use utoipa::openapi::OpenApi;

pub use contract::Contract;

/// The problem media type.
pub const PROBLEM: &str = "application/problem+json";

/// `doc` as JSON, with `contract`'s rules and the shared responses added. It stays JSON: utoipa's types
/// have no room for `allOf` beside `properties`, `if`/`then` or `not`, which the rules need.
pub fn complete(doc: &OpenApi, contract: &Contract) -> Value {
    let mut value = serde_json::to_value(doc).unwrap_or_default();
    let missed = apply_contract(&mut value, contract);
    debug_assert!(missed.is_empty(), "contract rules without a target: {missed:?}");
    for operation in operations(&mut value) {
        complete_operation(operation);
    }
    value
}

fn operations(value: &mut Value) -> impl Iterator<Item = &mut Value> {
    value
        .get_mut("paths")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|paths| paths.values_mut())
        .filter_map(Value::as_object_mut)
        .flat_map(|item| item.values_mut())
}

fn merge(target: &mut Value, keywords: &Value) {
    if let (Some(target), Some(keywords)) = (target.as_object_mut(), keywords.as_object()) {
        for (k, v) in keywords {
            target.insert(k.clone(), v.clone());
        }
    }
}

/// Writes the contract into the schemas and parameters; returns the rules whose target is missing.
fn apply_contract(doc: &mut Value, contract: &Contract) -> Vec<String> {
    let mut missed = Vec::new();
    for (schema, property, keywords) in contract::properties(contract) {
        match doc.pointer_mut(&format!("/components/schemas/{schema}/properties/{property}")) {
            Some(target) => merge(target, &keywords),
            None => missed.push(format!("{schema}.{property}")),
        }
    }
    for (schema, rules) in contract::rules(contract) {
        match doc.pointer_mut(&format!("/components/schemas/{schema}")) {
            Some(target) => merge(target, &json!({"allOf": rules})),
            None => missed.push(schema.to_string()),
        }
    }
    for (path, method, status, header, description) in contract::response_headers() {
        let at = format!("/paths/{}/{method}/responses/{status}", path.replace('/', "~1"));
        match doc.pointer_mut(&at).and_then(Value::as_object_mut) {
            Some(response) => {
                let headers = response.entry("headers").or_insert_with(|| json!({}));
                merge(
                    headers,
                    &json!({header: {"description": description, "schema": {"type": "string"}}}),
                );
            }
            None => missed.push(format!("{method} {path} {status}")),
        }
    }
    for (schema, example) in contract::examples() {
        match doc.pointer_mut(&format!("/components/schemas/{schema}")) {
            Some(target) => merge(target, &json!({"examples": [example]})),
            None => missed.push(format!("example {schema}")),
        }
    }
    match doc.pointer_mut("/components/schemas/MintToken/properties/role") {
        Some(role) => *role = contract::tenant_roles(),
        None => missed.push("MintToken.role".into()),
    }
    for (name, keywords) in contract::parameters() {
        let mut found = false;
        for operation in operations(doc) {
            let parameters = operation.get_mut("parameters").and_then(Value::as_array_mut);
            for parameter in parameters.into_iter().flatten() {
                if parameter.get("name").and_then(Value::as_str) == Some(name)
                    && let Some(schema) = parameter.get_mut("schema")
                {
                    merge(schema, &keywords);
                    found = true;
                }
            }
        }
        if !found {
            missed.push(format!("parameter {name}"));
        }
    }
    missed
}

fn complete_operation(operation: &mut Value) {
    let secured = operation
        .get("security")
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty());
    let has_body = operation.get("requestBody").is_some();
    // Query and header parameters are checked too (`limit`, `cursor`, `Idempotency-Key`, …).
    let has_checked_parameters = operation
        .get("parameters")
        .and_then(Value::as_array)
        .is_some_and(|ps| {
            ps.iter()
                .any(|p| p.get("in").and_then(Value::as_str) != Some("path"))
        });
    let Some(responses) = operation.get_mut("responses").and_then(Value::as_object_mut) else {
        return;
    };
    for (status, description) in shared_statuses(secured, has_body, has_checked_parameters) {
        responses
            .entry(status.to_string())
            .or_insert_with(|| problem_response(description));
    }
    for (status, response) in responses.iter_mut() {
        complete_response(status, response);
    }
}

/// The statuses any operation may answer, by whether it is secured and takes a JSON body.
fn shared_statuses(secured: bool, has_body: bool, has_checked_parameters: bool) -> Vec<(u16, &'static str)> {
    let mut statuses = Vec::new();
    if secured {
        statuses.extend([
            (401, "Missing, invalid, expired or revoked token"),
            (
                403,
                "The caller's tenant is suspended (`tenant-suspended`), or its role is too low",
            ),
            (
                429,
                "The token's subject or tenant is over its rate limit; retry after Retry-After",
            ),
        ]);
    }
    if has_checked_parameters && !has_body {
        statuses.push((422, "Invalid parameters; the problem names each"));
    }
    if has_body {
        statuses.extend([
            (400, "The body is not valid JSON"),
            (413, "The body exceeds the size limit"),
            (415, "The body is not sent as application/json"),
            (422, "Invalid input; the problem names each field"),
        ]);
    }
    statuses.extend([
        (
            500,
            "An internal error; the problem carries the request id to quote",
        ),
        (
            503,
            "A dependency (the database or the management cluster) is unavailable; retry after Retry-After",
        ),
    ]);
    statuses
}

fn problem_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
    })
}

/// Moves a problem body to its media type and adds the headers its status carries.
fn complete_response(status: &str, response: &mut Value) {
    let Some(response) = response.as_object_mut() else {
        return;
    };
    if let Some(content) = response.get_mut("content").and_then(Value::as_object_mut)
        && content
            .get("application/json")
            .and_then(|c| c.pointer("/schema/$ref"))
            .and_then(Value::as_str)
            == Some("#/components/schemas/Problem")
        && let Some(body) = content.remove("application/json")
    {
        content.insert(PROBLEM.into(), body);
    }
    let headers = response
        .entry("headers")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(headers) = headers.as_object_mut() else {
        return;
    };
    headers
        .entry("x-request-id")
        .or_insert_with(|| header("The request's id: the caller's `x-request-id`, or one generated for it"));
    match status {
        "401" => {
            headers
                .entry("WWW-Authenticate")
                .or_insert_with(|| header("`Bearer error=\"invalid_token\"`"));
        }
        "429" | "503" => {
            headers
                .entry("Retry-After")
                .or_insert_with(|| integer_header("Seconds to wait before retrying"));
        }
        _ => {}
    }
}

fn header(description: &str) -> Value {
    json!({"description": description, "schema": {"type": "string"}})
}

fn integer_header(description: &str) -> Value {
    json!({"description": description, "schema": {"type": "integer", "minimum": 0}})
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn a_problem_body_moves_to_its_media_type_and_shared_statuses_are_added() {
        let mut operation = json!({
            "security": [{"bearer": []}],
            "requestBody": {"content": {"application/json": {}}},
            "responses": {
                "201": {"description": "Created", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Tenant"}}}},
                "409": problem_response("Conflict"),
            },
        });
        complete_operation(&mut operation);
        let responses = operation["responses"].as_object().unwrap();
        let statuses: Vec<&str> = responses.keys().map(String::as_str).collect();
        assert_eq!(
            statuses,
            [
                "201", "400", "401", "403", "409", "413", "415", "422", "429", "500", "503"
            ]
        );
        assert!(responses["201"]["content"]["application/json"].is_object());
        assert!(responses["429"]["headers"]["Retry-After"].is_object());
        assert_eq!(
            responses["409"]["content"][PROBLEM]["schema"]["$ref"],
            "#/components/schemas/Problem"
        );
        assert!(responses["409"]["content"].get("application/json").is_none());
        assert!(responses["401"]["headers"]["WWW-Authenticate"].is_object());
        assert_eq!(
            responses["503"]["headers"]["Retry-After"]["schema"]["type"],
            "integer"
        );
        assert!(responses["201"]["headers"]["x-request-id"].is_object());
    }

    /// Reads `value` as `T` and writes it back: the wire spelling survives only if the document's enum
    /// is what serde speaks.
    fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(value: &str) -> Result<(), String> {
        let typed: T = serde_json::from_value(json!(value)).map_err(|e| e.to_string())?;
        match serde_json::to_value(&typed).map_err(|e| e.to_string())? {
            Value::String(back) if back == value => Ok(()),
            other => Err(format!("{value:?} came back as {other}")),
        }
    }

    /// Every string enum of the document (exclusion lists under `not` aside), by JSON pointer.
    fn enums(doc: &Value, at: &str, found: &mut Vec<(String, Vec<String>)>) {
        match doc {
            Value::Object(map) => {
                if let Some(Value::Array(values)) = map.get("enum")
                    && values.iter().all(Value::is_string)
                {
                    found.push((
                        at.to_string(),
                        values
                            .iter()
                            .filter_map(|v| v.as_str().map(String::from))
                            .collect(),
                    ));
                }
                for (k, v) in map.iter().filter(|(k, _)| k.as_str() != "not") {
                    enums(v, &format!("{at}/{k}"), found);
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    enums(v, &format!("{at}/{i}"), found);
                }
            }
            _ => {}
        }
    }

    /// What each enum of the document must mean on the wire: the type (or check) the server reads it with.
    fn wire(at: &str, value: &str) -> Result<(), String> {
        use crate::{domain, k8s::crd::Driver};
        use tenantplane_core::placement::Reason;
        use tenantplane_service::placement::DrainUsage;
        match at {
            "/components/schemas/Role" => round_trip::<domain::Role>(value),
            "/components/schemas/ServiceType" => round_trip::<domain::ServiceType>(value),
            "/components/schemas/SizeClass" => round_trip::<domain::SizeClass>(value),
            "/components/schemas/OperationKind" => round_trip::<domain::OperationKind>(value),
            "/components/schemas/OperationState" => round_trip::<domain::OperationState>(value),
            "/components/schemas/OperationStage" => round_trip::<domain::OperationStage>(value),
            "/components/schemas/Reason" => round_trip::<Reason>(value),
            "/components/schemas/AuthenticatorState" => {
                round_trip::<tenantplane_service::model::AuthenticatorState>(value)
            }
            "/components/schemas/DrainUsage/oneOf/0" => round_trip::<DrainUsage>(value),
            "/components/schemas/OverridesPolicy" => {
                round_trip::<tenantplane_service::migrations::OverridesPolicy>(value)
            }
            "/components/schemas/DrainDataStore/properties/overrides" => {
                round_trip::<tenantplane_service::migrations::OverridesPolicy>(value)
                    .and_then(|()| (value == "drop").then_some(()).ok_or("move is refused".into()))
            }
            "/components/schemas/ParentKind" => round_trip::<tenantplane_service::drains::ParentKind>(value),
            "/components/schemas/ChildUsage" => round_trip::<tenantplane_service::drains::ChildUsage>(value),
            "/components/schemas/CreateDataStore/properties/driver" => round_trip::<Driver>(value),
            "/components/schemas/MintToken/properties/role" => {
                round_trip::<domain::Role>(value).and_then(|()| {
                    (value != "platform-admin")
                        .then_some(())
                        .ok_or("platform-admin is refused".into())
                })
            }
            // The `driver` filter of `GET /datastores`.
            p if p.starts_with("/paths//datastores/get/parameters/") => round_trip::<Driver>(value),
            "/components/schemas/CreatePool/properties/policy"
            | "/components/schemas/UpdatePool/properties/policy" => tenantplane_service::datastores::POLICIES
                .contains(&value)
                .then_some(())
                .ok_or(format!("{value:?} is not a policy")),
            other => Err(format!("no wire type is known for the enum at {other}")),
        }
    }

    /// The enums of `doc` whose values the server does not speak.
    fn enum_failures(doc: &Value) -> Vec<String> {
        let mut found = Vec::new();
        enums(doc, "", &mut found);
        found
            .iter()
            .flat_map(|(at, values)| {
                values
                    .iter()
                    .filter_map(move |v| wire(at, v).err().map(|e| format!("{at}: {e}")))
            })
            .collect()
    }

    #[test]
    fn every_enum_of_the_document_round_trips_through_serde() {
        let (_, doc) = crate::api_v1(&Contract::default());
        let mut found = Vec::new();
        enums(&doc, "", &mut found);
        assert_eq!(found.len(), 18, "{found:?}");
        assert_eq!(enum_failures(&doc), Vec::<String>::new());
    }

    #[test]
    fn the_enum_check_refuses_variant_names() {
        let doc = json!({"components": {"schemas": {"Role": {"type": "string", "enum": ["PlatformAdmin", "tenant-admin"]}}}});
        assert_eq!(
            enum_failures(&doc),
            [
                "/components/schemas/Role: unknown variant `PlatformAdmin`, expected one of `platform-admin`, `tenant-admin`, `tenant-member`, `tenant-viewer`"
            ]
        );
    }

    #[test]
    fn every_contract_rule_finds_its_schema_property_or_parameter() {
        let (_, doc) = crate::api_v1(&Contract::default());
        let mut value = doc;
        assert_eq!(
            apply_contract(&mut value, &Contract::default()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn an_open_operation_without_a_body_gets_only_the_server_statuses() {
        let mut operation = json!({"responses": {"200": {"description": "OK"}}});
        complete_operation(&mut operation);
        let statuses: Vec<&String> = operation["responses"].as_object().unwrap().keys().collect();
        assert_eq!(statuses, ["200", "500", "503"]);
    }
}
