//! A tenant's own JWT authenticators of a control plane: checked before they are accepted (422 naming
//! the field), at most 15, one per issuer, tenant admins only.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{App, spawn_app};

fn idp(url: &str) -> Value {
    json!({
        "issuer": {"url": url, "audiences": ["tenant-cluster"]},
        "claimMappings": {"username": {"claim": "email", "prefix": "idp:"}},
    })
}

async fn setup() -> (App, String, String, String) {
    let app = spawn_app().await;
    let slug = app.tenant("authn").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let created = app.control_plane(&slug, &admin, "web").await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let path = format!("/api/v1/tenants/{slug}/control-planes/{id}/authenticators");
    (app, slug, admin, path)
}

/// The field names of a 422 problem.
fn fields(body: &Value) -> Vec<String> {
    body["errors"]
        .as_array()
        .map(|e| {
            e.iter()
                .filter_map(|e| e["field"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn bad_cel_or_a_system_mapping_is_refused_with_a_422_naming_the_field() {
    let (app, _, admin, path) = setup().await;
    let cases = [
        (
            json!({"groups": {"expression": "claims.groups.map(g, 'x:' + g"}}),
            "claimMappings.groups.expression",
        ),
        (
            json!({"groups": {"claim": "groups", "prefix": "system:"}}),
            "claimMappings.groups.prefix",
        ),
        (
            json!({"groups": {"expression": "['system:masters']"}}),
            "claimMappings.groups.expression",
        ),
        (
            json!({"uid": {"expression": "request.headers['x'] + claims.sub"}}),
            "claimMappings.uid.expression",
        ),
    ];
    for (mapping, field) in cases {
        let mut body = idp("https://idp.example.com");
        for (k, v) in mapping.as_object().unwrap() {
            body["claimMappings"][k] = v.clone();
        }
        let r = app.call(Method::POST, &path, Some(&admin), Some(body)).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{field}: {}", r.text);
        assert_eq!(r.headers["content-type"], "application/problem+json");
        assert_eq!(fields(&r.body), vec![field.to_string()], "{}", r.text);
    }
    let mut body = idp("https://idp.example.com");
    body["claimMappings"]["username"]["prefix"] = json!("system:");
    let r = app.call(Method::POST, &path, Some(&admin), Some(body)).await;
    assert_eq!(
        fields(&r.body),
        vec!["claimMappings.username.prefix"],
        "{}",
        r.text
    );
    // http, the service-account issuer, and a field kube-apiserver does not know.
    let r = app
        .call(
            Method::POST,
            &path,
            Some(&admin),
            Some(idp("http://idp.example.com")),
        )
        .await;
    assert_eq!(fields(&r.body), vec!["issuer.url"], "{}", r.text);
    let r = app
        .call(
            Method::POST,
            &path,
            Some(&admin),
            Some(idp("https://kubernetes.default.svc.cluster.local")),
        )
        .await;
    assert_eq!(fields(&r.body), vec!["issuer.url"], "{}", r.text);
    let mut body = idp("https://idp.example.com");
    body["claimMappings"]["usernames"] = json!({});
    let r = app.call(Method::POST, &path, Some(&admin), Some(body)).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert_eq!(fields(&r.body), vec!["claimMappings.usernames"], "{}", r.text);
    // Nothing refused was kept.
    let listed = app.call(Method::GET, &path, Some(&admin), None).await;
    assert_eq!(listed.body["items"], json!([]), "{}", listed.text);
}

/// CEL that parses, reads only `claims`, and still fails kube-apiserver's type check: caught by its own
/// compiler (`tenantplane-authn-check`, which the test app runs as serve does).
#[tokio::test]
async fn cel_that_parses_but_kube_apiserver_refuses_is_a_422_naming_the_field() {
    let (app, _, admin, path) = setup().await;
    let rule = |expression: &str| json!([{"expression": expression, "message": "refused"}]);
    let mut not_a_bool = idp("https://idp.example.com");
    not_a_bool["claimValidationRules"] = rule("'yes'");
    let mut undeclared = idp("https://idp.example.com");
    undeclared["claimMappings"]["username"] = json!({"expression": "claims.sub.shout()"});
    for (body, field, says) in [
        (
            not_a_bool,
            "claimValidationRules[0].expression",
            "must evaluate to bool",
        ),
        (
            undeclared,
            "claimMappings.username.expression",
            "undeclared reference to 'shout'",
        ),
    ] {
        let r = app.call(Method::POST, &path, Some(&admin), Some(body)).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{field}: {}", r.text);
        assert_eq!(fields(&r.body), vec![field.to_string()], "{}", r.text);
        let message = r.body["errors"][0]["message"].as_str().unwrap();
        assert!(message.starts_with("kube-apiserver refuses it: "), "{message}");
        assert!(message.contains(says), "{message}");
    }
    // The same shapes, well typed, are accepted.
    let mut fine = idp("https://idp.example.com");
    fine["claimValidationRules"] = rule("claims.sub != ''");
    fine["claimMappings"]["username"] = json!({"expression": "claims.sub.lowerAscii()"});
    let r = app.call(Method::POST, &path, Some(&admin), Some(fine)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let listed = app.call(Method::GET, &path, Some(&admin), None).await;
    assert_eq!(
        listed.body["items"].as_array().unwrap().len(),
        1,
        "{}",
        listed.text
    );
}

#[tokio::test]
async fn authenticators_are_added_listed_and_removed_once_per_issuer_and_at_most_fifteen() {
    let (app, slug, admin, path) = setup().await;
    let r = app
        .call(
            Method::POST,
            &path,
            Some(&admin),
            Some(idp("https://idp-0.example.com")),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(r.body["state"], "pending");
    assert_eq!(r.body["spec"]["issuer"]["url"], "https://idp-0.example.com");
    let first = r.body["id"].as_str().unwrap().to_string();
    let again = app
        .call(
            Method::POST,
            &path,
            Some(&admin),
            Some(idp("https://idp-0.example.com")),
        )
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.text);
    for i in 1..15 {
        let r = app
            .call(
                Method::POST,
                &path,
                Some(&admin),
                Some(idp(&format!("https://idp-{i}.example.com"))),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{i}: {}", r.text);
    }
    let sixteenth = app
        .call(
            Method::POST,
            &path,
            Some(&admin),
            Some(idp("https://idp-15.example.com")),
        )
        .await;
    assert_eq!(sixteenth.status, StatusCode::CONFLICT, "{}", sixteenth.text);
    let listed = app.call(Method::GET, &path, Some(&admin), None).await;
    let items = listed.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 15);
    assert_eq!(items[0]["id"], first.as_str(), "oldest first");

    // Tenant admins only; other tenants see nothing.
    let member = app.token(&slug, "tenant-member").await;
    let r = app.call(Method::GET, &path, Some(&member), None).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    let other = app.tenant("authn-other").await;
    let intruder = app.token(&other, "tenant-admin").await;
    let r = app
        .call(Method::GET, &format!("{path}/{first}"), Some(&intruder), None)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);

    let gone = app
        .call(Method::DELETE, &format!("{path}/{first}"), Some(&admin), None)
        .await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT, "{}", gone.text);
    let r = app
        .call(Method::GET, &format!("{path}/{first}"), Some(&admin), None)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    let r = app
        .call(Method::DELETE, &format!("{path}/not-an-id"), Some(&admin), None)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    let audit = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}/audit?action=control-plane.authenticator.delete"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(
        audit.body["items"][0]["details"]["authenticatorId"],
        first.as_str(),
        "{}",
        audit.text
    );
}
