//! Node join tokens over REST without a tenant cluster: validation, roles, not found, the readiness and
//! management-cluster mappings, and the list read from PostgreSQL (the tenant-cluster side is
//! `e2e::join_tokens`).

use chrono::{Duration, Utc};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tenantplane::store::{self, join_tokens::NewJoinToken};
use uuid::Uuid;

use super::{App, Reply, spawn_app, spawn_app_with, tenant_id};
use crate::support;

/// A tenant with admin, member and viewer tokens and one (Pending) control plane.
struct Fixture {
    app: App,
    slug: String,
    admin: String,
    member: String,
    viewer: String,
    cp: String,
}

async fn fixture_on(app: App) -> Fixture {
    let slug = app.tenant("join").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let member = app.token(&slug, "tenant-member").await;
    let viewer = app.token(&slug, "tenant-viewer").await;
    let cp = app.control_plane(&slug, &member, "nodes").await["controlPlane"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    Fixture {
        app,
        slug,
        admin,
        member,
        viewer,
        cp,
    }
}

async fn fixture() -> Fixture {
    fixture_on(spawn_app().await).await
}

impl Fixture {
    fn path(&self) -> String {
        format!(
            "/api/v1/tenants/{}/control-planes/{}/join-tokens",
            self.slug, self.cp
        )
    }

    async fn post(&self, token: &str, body: Value) -> Reply {
        self.app
            .call(Method::POST, &self.path(), Some(token), Some(body))
            .await
    }

    /// Makes the control plane look as if it had served: Ready, with an endpoint and a pinned TCP.
    async fn served(&self) {
        sqlx::query(
            "update control_planes set phase = 'Ready', tcp_uid = 'uid-served',
                    status = '{\"endpoint\": \"127.0.0.1:6443\", \"installedVersion\": \"v1.33.2\"}'
             where id = $1",
        )
        .bind(Uuid::parse_str(&self.cp).unwrap())
        .execute(&self.app.ctx.db)
        .await
        .unwrap();
    }

    /// A join token record written straight into PostgreSQL.
    async fn record(
        &self,
        token_id: &str,
        created: chrono::DateTime<Utc>,
        ttl: Duration,
    ) -> store::join_tokens::JoinTokenRow {
        let tenant = tenant_id(&self.app, &self.slug).await;
        store::join_tokens::insert(
            &self.app.ctx.db,
            &NewJoinToken {
                tenant,
                control_plane: Uuid::parse_str(&self.cp).unwrap(),
                token_id,
                description: Some("rack 4"),
                created_at: created,
                expires_at: created + ttl,
                created_by: "tests",
            },
        )
        .await
        .unwrap()
    }
}

fn assert_problem(r: &Reply, status: StatusCode, slug: &str) {
    assert_eq!(r.status, status, "{}", r.text);
    assert_eq!(
        r.headers["content-type"], "application/problem+json",
        "{}",
        r.text
    );
    assert_eq!(r.body["status"], status.as_u16(), "{}", r.text);
    assert_eq!(
        r.body["type"],
        format!("https://tenantplane.dev/problems/{slug}"),
        "{}",
        r.text
    );
}

fn fields(r: &Reply) -> Vec<String> {
    r.body["errors"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|e| e["field"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn bad_ttl_and_description_are_422_naming_the_field() {
    let f = fixture().await;
    let cases = [
        (json!({"ttlSeconds": 0}), vec!["ttlSeconds"]),
        (json!({"ttlSeconds": 604_801}), vec!["ttlSeconds"]),
        (json!({"ttlSeconds": -1}), vec!["ttlSeconds"]),
        (json!({"ttlSeconds": "3600"}), vec!["ttlSeconds"]),
        (json!({"ttlSeconds": 1.5}), vec!["ttlSeconds"]),
        (json!({"description": "x".repeat(257)}), vec!["description"]),
        (json!({"description": "a\nb"}), vec!["description"]),
        (json!({"description": 7}), vec!["description"]),
        (
            json!({"ttlSeconds": 0, "description": "x".repeat(300)}),
            vec!["ttlSeconds", "description"],
        ),
        (json!({"ttl": 60}), vec!["ttl"]),
    ];
    for (body, expected) in cases {
        let r = f.post(&f.admin, body.clone()).await;
        assert_problem(&r, StatusCode::UNPROCESSABLE_ENTITY, "invalid-input");
        assert_eq!(fields(&r), expected, "{body}: {}", r.text);
    }
    let r = f.post(&f.admin, json!({"ttlSeconds": 0})).await;
    assert_eq!(
        r.body["errors"],
        json!([{"field": "ttlSeconds", "message": "must be between 1 and 604800 seconds (7 days)"}])
    );
    let r = f.post(&f.admin, json!({"description": "x".repeat(257)})).await;
    assert_eq!(
        r.body["errors"],
        json!([{"field": "description", "message": "must be at most 256 characters"}])
    );
    // The limits themselves are valid: the control plane is what is not ready.
    let r = f
        .post(
            &f.admin,
            json!({"ttlSeconds": 604_800, "description": "é".repeat(256)}),
        )
        .await;
    assert_problem(&r, StatusCode::CONFLICT, "not-ready");
    let r = f.post(&f.admin, json!({"ttlSeconds": 1})).await;
    assert_problem(&r, StatusCode::CONFLICT, "not-ready");
}

#[tokio::test]
async fn members_and_viewers_get_403_and_other_tenants_404() {
    let f = fixture().await;
    let token_path = format!("{}/abc123", f.path());
    for (who, token) in [("member", &f.member), ("viewer", &f.viewer)] {
        let r = f.post(token, json!({"ttlSeconds": 600})).await;
        assert_problem(&r, StatusCode::FORBIDDEN, "forbidden");
        assert_eq!(
            r.body["detail"], "this action needs the role tenant-admin or higher",
            "{who}"
        );
        let r = f.app.call(Method::GET, &f.path(), Some(token), None).await;
        assert_problem(&r, StatusCode::FORBIDDEN, "forbidden");
        let r = f.app.call(Method::DELETE, &token_path, Some(token), None).await;
        assert_problem(&r, StatusCode::FORBIDDEN, "forbidden");
    }
    let other = f.app.tenant("join-other").await;
    let intruder = f.app.token(&other, "tenant-admin").await;
    let r = f.post(&intruder, json!({})).await;
    assert_problem(&r, StatusCode::NOT_FOUND, "not-found");
    // Its own tenant's path with this control plane's id: still not found.
    let foreign = format!("/api/v1/tenants/{other}/control-planes/{}/join-tokens", f.cp);
    let r = f.app.call(Method::GET, &foreign, Some(&intruder), None).await;
    assert_problem(&r, StatusCode::NOT_FOUND, "not-found");
    assert_eq!(r.body["detail"], "control plane not found");
}

#[tokio::test]
async fn unknown_control_planes_and_tokens_are_404() {
    let f = fixture().await;
    for cp in [Uuid::new_v4().to_string(), "not-a-uuid".to_string()] {
        let path = format!("/api/v1/tenants/{}/control-planes/{cp}/join-tokens", f.slug);
        let r = f
            .app
            .call(Method::POST, &path, Some(&f.admin), Some(json!({})))
            .await;
        assert_problem(&r, StatusCode::NOT_FOUND, "not-found");
        assert_eq!(r.body["detail"], "control plane not found");
        let r = f.app.call(Method::GET, &path, Some(&f.admin), None).await;
        assert_problem(&r, StatusCode::NOT_FOUND, "not-found");
    }
    for token in ["abc123", "ABC123", "toolong1", "a.b"] {
        let r = f
            .app
            .call(
                Method::DELETE,
                &format!("{}/{token}", f.path()),
                Some(&f.admin),
                None,
            )
            .await;
        assert_problem(&r, StatusCode::NOT_FOUND, "not-found");
        assert_eq!(r.body["detail"], "join token not found", "{token}");
    }
}

#[tokio::test]
async fn the_list_reads_postgresql_and_shows_only_live_tokens_without_their_secret() {
    let f = fixture().await;
    let r = f.app.call(Method::GET, &f.path(), Some(&f.admin), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body, json!({"items": []}));

    let now = Utc::now();
    let live = f.record("live01", now, Duration::hours(1)).await;
    f.record("gone01", now - Duration::hours(2), Duration::hours(1))
        .await;
    let revoked = f.record("revk01", now, Duration::hours(1)).await;
    store::join_tokens::revoke(&f.app.ctx.db, revoked.tenant_id, revoked.id)
        .await
        .unwrap()
        .unwrap();
    let r = f.app.call(Method::GET, &f.path(), Some(&f.admin), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.body,
        json!({"items": [{
            "id": "live01",
            "description": "rack 4",
            "expiresAt": serde_json::to_value(live.expires_at).unwrap(),
            "createdAt": serde_json::to_value(live.created_at).unwrap(),
        }]})
    );
    // A revoked token is gone for good; a live one needs the tenant cluster to be revoked.
    let r = f
        .app
        .call(
            Method::DELETE,
            &format!("{}/revk01", f.path()),
            Some(&f.admin),
            None,
        )
        .await;
    assert_problem(&r, StatusCode::NOT_FOUND, "not-found");
    let r = f
        .app
        .call(
            Method::DELETE,
            &format!("{}/live01", f.path()),
            Some(&f.admin),
            None,
        )
        .await;
    assert_problem(&r, StatusCode::CONFLICT, "not-ready");
}

#[tokio::test]
async fn a_control_plane_takes_at_most_100_live_join_tokens_even_when_creates_race() {
    let f = fixture().await;
    let now = Utc::now();
    for i in 0..99 {
        f.record(&format!("cap{i:03}"), now, Duration::hours(1)).await;
    }
    f.record("old001", now - Duration::hours(2), Duration::hours(1))
        .await;
    let revoked = f.record("rev001", now, Duration::hours(1)).await;
    store::join_tokens::revoke(&f.app.ctx.db, revoked.tenant_id, revoked.id)
        .await
        .unwrap()
        .unwrap();
    // The 100th and 101st race: the row lock lets exactly one in; expired and revoked ones do not count.
    let tenant = tenant_id(&f.app, &f.slug).await;
    let cp = Uuid::parse_str(&f.cp).unwrap();
    let new = |token_id: &'static str| NewJoinToken {
        tenant,
        control_plane: cp,
        token_id,
        description: None,
        created_at: now,
        expires_at: now + Duration::hours(1),
        created_by: "tests",
    };
    let (a, b) = (new("race01"), new("race02"));
    let (a, b) = tokio::join!(
        store::join_tokens::insert_capped(&f.app.ctx.db, &a, 100),
        store::join_tokens::insert_capped(&f.app.ctx.db, &b, 100),
    );
    let admitted = [a.unwrap(), b.unwrap()].iter().filter(|r| r.is_some()).count();
    assert_eq!(admitted, 1);
    assert_eq!(
        store::join_tokens::count_live(&f.app.ctx.db, cp).await.unwrap(),
        100
    );

    let r = f.post(&f.admin, json!({"ttlSeconds": 600})).await;
    assert_problem(&r, StatusCode::CONFLICT, "conflict");
    assert_eq!(
        r.body["detail"],
        "the control plane has 100 live join tokens, the most it may have: revoke one, or wait for one to expire"
    );
    let r = f.app.call(Method::GET, &f.path(), Some(&f.admin), None).await;
    assert_eq!(r.body["items"].as_array().map(Vec::len), Some(100), "{}", r.text);
}

#[tokio::test]
async fn a_control_plane_that_has_not_served_is_409_like_its_kubeconfig() {
    let f = fixture().await;
    let r = f
        .post(&f.admin, json!({"ttlSeconds": 600, "description": "rack 4"}))
        .await;
    assert_problem(&r, StatusCode::CONFLICT, "not-ready");
    assert_eq!(
        r.body["detail"],
        "the control plane is Pending, not Ready yet: nodes cannot join it yet"
    );
    assert!(r.body["requestId"].is_string(), "{}", r.text);
    let rows: i64 = sqlx::query_scalar("select count(*) from join_tokens")
        .fetch_one(&f.app.ctx.db)
        .await
        .unwrap();
    assert_eq!(rows, 0, "nothing is recorded for a refused request");
}

#[tokio::test]
async fn a_served_control_plane_without_a_management_cluster_is_a_503() {
    let f = fixture().await;
    f.served().await;
    let r = f.post(&f.admin, json!({})).await;
    assert_problem(&r, StatusCode::SERVICE_UNAVAILABLE, "no-cluster");
    let live = f.record("live02", Utc::now(), Duration::hours(1)).await;
    let r = f
        .app
        .call(
            Method::DELETE,
            &format!("{}/live02", f.path()),
            Some(&f.admin),
            None,
        )
        .await;
    assert_problem(&r, StatusCode::SERVICE_UNAVAILABLE, "no-cluster");
    let still: Option<chrono::DateTime<Utc>> =
        sqlx::query_scalar("select revoked_at from join_tokens where id = $1")
            .bind(live.id)
            .fetch_one(&f.app.ctx.db)
            .await
            .unwrap();
    assert_eq!(
        still, None,
        "a revocation that could not reach the tenant changes nothing"
    );
}

#[tokio::test]
async fn a_served_control_plane_without_its_admin_kubeconfig_is_409() {
    let f = fixture_on(spawn_app_with(Some(support::client().await)).await).await;
    f.served().await;
    let r = f.post(&f.admin, json!({})).await;
    assert_problem(&r, StatusCode::CONFLICT, "not-ready");
    assert_eq!(r.body["detail"], "the kubeconfig Secret has no admin.conf yet");
    let rows: i64 = sqlx::query_scalar("select count(*) from join_tokens")
        .fetch_one(&f.app.ctx.db)
        .await
        .unwrap();
    assert_eq!(rows, 0);
}
