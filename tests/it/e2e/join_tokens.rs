//! Node join tokens end to end: a control plane made through the API serves; a token POSTed through the
//! API works at once with real kubeadm v1.34.4 (`kubeadm join phase preflight`: discovery verifies
//! cluster-info's signature with the token and pins the CA hash from the answer, then reads kubeadm-config
//! authenticated by the token); it is listed and recorded without its secret half; once revoked kubeadm
//! fails with it; an expired token is not listed.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{
    Stack, connected, etcds,
    kubeadm::{ca_cert_hash, kubeadm_preflight},
    stack,
};
use crate::{graphql, support::eventually};

/// The parts of `kubeadm join <endpoint> --token <token> --discovery-token-ca-cert-hash <hash>`.
fn join_command(command: &str) -> (String, String, String) {
    let words: Vec<&str> = command.split(' ').collect();
    assert_eq!(words.len(), 7, "{command}");
    assert_eq!(
        (words[0], words[1], words[3], words[5]),
        ("kubeadm", "join", "--token", "--discovery-token-ca-cert-hash"),
        "{command}"
    );
    (words[2].into(), words[4].into(), words[6].into())
}

/// Whether `token` is `[a-z0-9]{6}.[a-z0-9]{16}`.
fn kubeadm_token(token: &str) -> bool {
    let ok =
        |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    token
        .split_once('.')
        .is_some_and(|(id, secret)| ok(id, 6) && ok(secret, 16))
}

/// Every value of every row of `table` as text, and its column names.
async fn table_text(db: &sqlx::PgPool, table: &str) -> (Vec<String>, Vec<String>) {
    let columns: Vec<String> = sqlx::query_scalar(
        "select column_name::text from information_schema.columns where table_name = $1 order by ordinal_position",
    )
    .bind(table)
    .fetch_all(db)
    .await
    .unwrap();
    let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "select row_to_json(t)::text from {table} t"
    )))
    .fetch_all(db)
    .await
    .unwrap();
    (columns, rows)
}

impl Stack {
    /// A REST call as tenant `t`'s admin.
    async fn as_admin(&self, t: usize, method: Method, path: &str, body: Option<Value>) -> crate::api::Reply {
        let admin = self.tenants[t].admin.clone();
        self.app.call(method, path, Some(&admin), body).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_join_token_from_the_api_works_at_once_with_kubeadm_and_not_after_it_is_revoked() {
    let stack = stack("e2e-jtok", 1).await;
    let (_ca, etcd) = etcds("e2e-jtok", 1).await;
    stack.pool("etcd").await;
    stack
        .etcd_datastore("etcd", &etcd[0], &format!("ca-{}", stack.id))
        .await;
    let created = stack
        .create(0, json!({"name": "nodes", "kubernetesVersion": "v1.34.4", "replicas": 1, "datastore": {"pool": "etcd"}}))
        .await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let cp = stack.ready(0, &id, "v1.34.4").await;
    let endpoint = cp["status"]["endpoint"].as_str().unwrap().to_string();
    let (slug, ns) = (stack.tenants[0].slug.clone(), stack.tenants[0].namespace.clone());
    let path = format!("/api/v1/tenants/{slug}/control-planes/{id}/join-tokens");
    // The API reports when nodes can join (the in-tenant phase's condition, mirrored by the worker).
    let join = eventually(
        "the API reports nodeJoin.ready True",
        Duration::from_secs(90),
        || async {
            let cp = stack.get(0, &id).await;
            (cp["nodeJoin"]["ready"]["status"] == "True").then(|| cp["nodeJoin"]["ready"].clone())
        },
    )
    .await;
    assert_eq!(join["reason"], "JoinObjectsPresent", "{join}");

    // POST, then real kubeadm at once: no waiting in between.
    let r = stack
        .as_admin(
            0,
            Method::POST,
            &path,
            Some(json!({"ttlSeconds": 3600, "description": "e2e rack"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let body = r.body.clone();
    let (cmd_endpoint, token, hash) = join_command(body["joinCommand"].as_str().unwrap());
    let dir = tenantplane::runtime::scratch_dir("e2e-join-token").unwrap();
    let (ok, out) = kubeadm_preflight(&dir, &cmd_endpoint, &token, &hash);
    assert!(
        ok,
        "kubeadm join phase preflight failed right after the POST:\n{out}"
    );
    assert!(
        out.contains("[preflight] Reading configuration from the \"kubeadm-config\" ConfigMap in namespace \"kube-system\""),
        "{out}"
    );
    assert_eq!(r.headers["cache-control"], "no-store");
    assert!(kubeadm_token(&token), "{token}");
    let (token_id, secret_half) = token.split_once('.').unwrap();
    let ca_secret = Api::<Secret>::namespaced(stack.kube.clone(), &ns)
        .get("nodes-ca")
        .await
        .unwrap();
    let ca_pem = String::from_utf8(ca_secret.data.unwrap()["ca.crt"].0.clone()).unwrap();
    let expected = json!({
        "id": token_id, "token": token, "expiresAt": body["expiresAt"], "createdAt": body["createdAt"],
        "description": "e2e rack", "endpoint": endpoint, "discoveryTokenCaCertHash": ca_cert_hash(&ca_pem),
        "joinCommand": format!("kubeadm join {endpoint} --token {token} --discovery-token-ca-cert-hash {}", ca_cert_hash(&ca_pem)),
    });
    assert_eq!(body, expected);
    let expires: chrono::DateTime<chrono::Utc> = serde_json::from_value(body["expiresAt"].clone()).unwrap();
    let made: chrono::DateTime<chrono::Utc> = serde_json::from_value(body["createdAt"].clone()).unwrap();
    assert!(
        (3600..=3601).contains(&(expires - made).num_seconds()),
        "{made} {expires}"
    );

    // In the tenant cluster: kubeadm's bootstrap token Secret, marked as ours.
    let tenant = stack.tenant_client(0, &id).await;
    let secrets = Api::<Secret>::namespaced(tenant.clone(), "kube-system");
    let name = format!("bootstrap-token-{token_id}");
    let object = connected(|| secrets.get(&name)).await.unwrap();
    assert_eq!(object.type_.as_deref(), Some("bootstrap.kubernetes.io/token"));
    assert_eq!(
        object.metadata.labels.unwrap()["app.kubernetes.io/managed-by"],
        "tenantplane"
    );
    let data: std::collections::BTreeMap<String, String> = object
        .data
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).unwrap()))
        .collect();
    let want: std::collections::BTreeMap<String, String> = [
        ("token-id", token_id),
        ("token-secret", secret_half),
        (
            "expiration",
            &expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        ),
        ("description", "e2e rack"),
        ("usage-bootstrap-authentication", "true"),
        ("usage-bootstrap-signing", "true"),
        (
            "auth-extra-groups",
            "system:bootstrappers:kubeadm:default-node-token",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(data, want);

    // Listed without the secret half.
    let list = stack.as_admin(0, Method::GET, &path, None).await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.text);
    assert_eq!(
        list.body,
        json!({"items": [{"id": token_id, "description": "e2e rack", "expiresAt": body["expiresAt"], "createdAt": body["createdAt"]}]})
    );
    assert!(!list.text.contains(secret_half));

    // PostgreSQL: the record has no column for the secret and no value holding it; nor does anything else
    // a request writes (audit log, idempotency replays, outbox).
    let db = &stack.app.ctx.db;
    let (columns, rows) = table_text(db, "join_tokens").await;
    assert_eq!(
        columns,
        [
            "id",
            "tenant_id",
            "control_plane_id",
            "token_id",
            "description",
            "expires_at",
            "created_at",
            "created_by",
            "revoked_at"
        ]
    );
    assert_eq!(rows.len(), 1, "{rows:?}");
    let record: Value = serde_json::from_str(&rows[0]).unwrap();
    assert_eq!(
        (
            record["token_id"].as_str(),
            record["description"].as_str(),
            record["revoked_at"].is_null()
        ),
        (Some(token_id), Some("e2e rack"), true)
    );
    for table in [
        "join_tokens",
        "audit_log",
        "idempotency_keys",
        "outbox",
        "control_planes",
    ] {
        let (_, rows) = table_text(db, table).await;
        assert!(
            rows.iter().all(|row| !row.contains(secret_half)),
            "{table} holds the secret half: {rows:?}"
        );
    }
    let (_, audit) = table_text(db, "audit_log").await;
    assert!(
        audit
            .iter()
            .any(|row| row.contains("\"join-token.create\"") && row.contains(token_id)),
        "{audit:?}"
    );

    // Revoked: 204, and kubeadm fails with it at once, naming the token id.
    let r = stack
        .as_admin(0, Method::DELETE, &format!("{path}/{token_id}"), None)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let (ok, out) = kubeadm_preflight(&dir, &cmd_endpoint, &token, &hash);
    assert!(!ok, "kubeadm passed with a revoked token:\n{out}");
    assert!(out.contains(token_id), "{out}");
    assert!(connected(|| secrets.get_opt(&name)).await.unwrap().is_none());
    let list = stack.as_admin(0, Method::GET, &path, None).await;
    assert_eq!(list.body, json!({"items": []}));
    let again = stack
        .as_admin(0, Method::DELETE, &format!("{path}/{token_id}"), None)
        .await;
    assert_eq!(again.status, StatusCode::NOT_FOUND, "{}", again.text);

    // GraphQL makes and revokes tokens the same way (the same use-cases, with the cluster client).
    let admin = stack.tenants[0].admin.clone();
    let made = graphql::data(
        &stack.app,
        &admin,
        "mutation($t: String!, $cp: ID!) { createJoinToken(input: {tenant: $t, controlPlane: $cp, ttlSeconds: 600}) {
            joinToken { id token endpoint discoveryTokenCaCertHash } userErrors { field } } }",
        json!({"t": slug, "cp": id}),
    )
    .await;
    let gql_token = &made["createJoinToken"]["joinToken"];
    assert_eq!(made["createJoinToken"]["userErrors"], json!([]), "{made}");
    assert!(kubeadm_token(gql_token["token"].as_str().unwrap()), "{made}");
    assert_eq!(
        (&gql_token["endpoint"], &gql_token["discoveryTokenCaCertHash"]),
        (&json!(endpoint), &json!(ca_cert_hash(&ca_pem)))
    );
    let gql_id = gql_token["id"].as_str().unwrap().to_string();
    let listed = graphql::data(
        &stack.app,
        &admin,
        "query($t: String!, $cp: ID!) { joinTokens(tenant: $t, controlPlane: $cp) { id } }",
        json!({"t": slug, "cp": id}),
    )
    .await;
    assert_eq!(listed, json!({"joinTokens": [{"id": gql_id}]}));
    let revoked = graphql::data(
        &stack.app,
        &admin,
        "mutation($t: String!, $cp: ID!, $id: String!) { revokeJoinToken(input: {tenant: $t, controlPlane: $cp, tokenId: $id}) {
            tokenId userErrors { field } } }",
        json!({"t": slug, "cp": id, "id": gql_id}),
    )
    .await;
    assert_eq!(
        revoked,
        json!({"revokeJoinToken": {"tokenId": gql_id, "userErrors": []}})
    );

    // A token of one second: created usable, then gone from the list once expired.
    let r = stack
        .as_admin(0, Method::POST, &path, Some(json!({"ttlSeconds": 1})))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(r.body["description"], Value::Null);
    let short_id = r.body["id"].as_str().unwrap().to_string();
    let expires: chrono::DateTime<chrono::Utc> = serde_json::from_value(r.body["expiresAt"].clone()).unwrap();
    let wait = (expires - chrono::Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(500);
    assert!(wait <= Duration::from_millis(2500), "{wait:?}");
    tokio::time::sleep(wait).await;
    let list = stack.as_admin(0, Method::GET, &path, None).await;
    assert_eq!(
        list.body,
        json!({"items": []}),
        "token {short_id} expired at {expires}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    stack.stop().await;
}
