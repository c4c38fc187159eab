//! One identity from Tenantplane to the tenant cluster: every tenant kube-apiserver trusts Tenantplane's
//! credential issuer (structured authentication), the downloaded kubeconfig runs `tenantplane
//! credential`, and the role of the caller's Tenantplane token decides what it may do there.

use std::{
    path::Path,
    process::{Command, Output},
    time::{Duration, Instant},
};

use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tenantplane::{auth::cluster, domain::Role};

use super::{Stack, etcds, stack, stack_with};
use crate::api::tenant_id;

const VERSION: &str = "v1.34.4";

/// Runs kubectl with `kubeconfig` and `TENANTPLANE_TOKEN=token` (and an empty credential cache).
fn kubectl(kubeconfig: &Path, token: &str, cache: &Path, args: &[&str]) -> Output {
    let kubectl = tenantplane::runtime::assets::binary("kubectl").unwrap_or_else(|_| "kubectl".into());
    Command::new(kubectl)
        .env("TENANTPLANE_TOKEN", token)
        .env("XDG_CACHE_HOME", cache)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .arg("--request-timeout=20s")
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `args` until it succeeds (up to 120 s: the in-tenant phase binds the groups, and the apiserver
/// fetches the issuer's keys, shortly after Ready).
async fn kubectl_until_ok(kubeconfig: &Path, token: &str, cache: &Path, args: &[&str]) -> Output {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = kubectl(kubeconfig, token, cache, args);
        if out.status.success() {
            return out;
        }
        assert!(Instant::now() < deadline, "kubectl {args:?}: {}", text(&out));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A credential from the API for control plane `id` of tenant `t`, as `token`.
async fn credential(stack: &Stack, t: usize, id: &str, token: &str, ttl: i64) -> Value {
    let r = stack
        .app
        .call(
            Method::POST,
            &format!(
                "/api/v1/tenants/{}/control-planes/{id}/credentials",
                stack.tenants[t].slug
            ),
            Some(token),
            Some(json!({"ttlSeconds": ttl})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(r.headers["cache-control"], "no-store");
    r.body
}

/// The status of a SelfSubjectReview with bearer `token` at `server` (201: authenticated; 401: not).
async fn review(server: &str, token: &str) -> (StatusCode, Value) {
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let r = http
        .post(format!(
            "{server}/apis/authentication.k8s.io/v1/selfsubjectreviews"
        ))
        .bearer_auth(token)
        .json(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}))
        .send()
        .await
        .unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tenant_clusters_take_tenantplane_credentials_by_role_audience_and_tenant_and_stop_at_revocation() {
    let stack = stack("e2e-id", 2).await;
    let (_ca, etcd) = etcds("e2e-id", 1).await;
    stack.pool("etcd").await;
    stack
        .etcd_datastore("etcd", &etcd[0], &format!("ca-{}", stack.id))
        .await;
    let body =
        json!({"name": "web", "kubernetesVersion": VERSION, "replicas": 1, "datastore": {"pool": "etcd"}});
    let mut ids = Vec::new();
    for t in 0..2 {
        let created = stack.create(t, body.clone()).await;
        ids.push(created["controlPlane"]["id"].as_str().unwrap().to_string());
    }
    for (t, id) in ids.iter().enumerate() {
        stack.ready(t, id, VERSION).await;
    }
    let dir = tenantplane::runtime::scratch_dir("e2e-identity").unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let text_config = stack.kubeconfig(0, &ids[0]).await;
    assert!(
        !text_config.contains("client-key-data") && !text_config.contains("token:"),
        "the kubeconfig holds no secret: {text_config}"
    );
    std::fs::write(&kubeconfig, &text_config).unwrap();
    let doc: serde_yaml::Value = serde_yaml::from_str(&text_config).unwrap();
    let server = doc["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap()
        .to_string();
    let slug = stack.tenants[0].slug.clone();
    let member = stack.tenants[0].member.clone();
    let viewer = stack.app.token(&slug, "tenant-viewer").await;

    // A member is `tenantplane:<sub>` in group tenantplane:members, through the exec plugin.
    let member_cache = dir.join("cache-member");
    let whoami = kubectl_until_ok(
        &kubeconfig,
        &member,
        &member_cache,
        &["auth", "whoami", "-o", "json"],
    )
    .await;
    let review_of_member: Value = serde_json::from_slice(&whoami.stdout).unwrap();
    let minted = credential(&stack, 0, &ids[0], &member, 600).await;
    let user = &review_of_member["status"]["userInfo"];
    assert_eq!(user["username"], minted["username"], "{review_of_member:#}");
    assert!(user["username"].as_str().unwrap().starts_with("tenantplane:"));
    assert!(
        user["groups"]
            .as_array()
            .unwrap()
            .contains(&json!("tenantplane:members")),
        "{review_of_member:#}"
    );
    assert_eq!(minted["groups"], json!(["tenantplane:members"]));
    assert_eq!(minted["audience"], format!("tenantplane:cp:{}", ids[0]));
    // The plugin cached its credential, mode 0600, named by a hash (never the token).
    let cached: Vec<_> = walk(&member_cache);
    assert!(
        !cached.is_empty(),
        "no cached credential under {}",
        member_cache.display()
    );
    for file in &cached {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(!file.display().to_string().contains(&member));
    }

    // Members list namespaces and create a Deployment (edit).
    kubectl_until_ok(&kubeconfig, &member, &member_cache, &["get", "namespaces"]).await;
    let deploy = kubectl_until_ok(
        &kubeconfig,
        &member,
        &member_cache,
        &[
            "create",
            "deployment",
            "web",
            "--image=registry.k8s.io/pause:3.10",
            "-n",
            "default",
        ],
    )
    .await;
    assert!(
        String::from_utf8_lossy(&deploy.stdout).contains("deployment.apps/web created"),
        "{}",
        text(&deploy)
    );

    // Viewers read, and are refused writes (view).
    let viewer_cache = dir.join("cache-viewer");
    kubectl_until_ok(
        &kubeconfig,
        &viewer,
        &viewer_cache,
        &["get", "deployments", "-n", "default"],
    )
    .await;
    let refused = kubectl(
        &kubeconfig,
        &viewer,
        &viewer_cache,
        &["create", "configmap", "nope", "-n", "default"],
    );
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("is forbidden"),
        "{}",
        text(&refused)
    );

    // Another control plane's credential (its audience) is refused: 401.
    let (ok, _) = review(&server, minted["token"].as_str().unwrap()).await;
    assert_eq!(ok, StatusCode::CREATED);
    let other_cp = credential(&stack, 1, &ids[1], &stack.tenants[1].member, 600).await;
    let (status, _) = review(&server, other_cp["token"].as_str().unwrap()).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "another control plane's credential"
    );
    // A credential for this control plane's audience naming another tenant is refused too: 401.
    let issuer = stack.app.issuer.clone().unwrap();
    let cp0 = uuid::Uuid::parse_str(&ids[0]).unwrap();
    let principal = tenantplane::auth::Principal {
        jti: uuid::Uuid::new_v4(),
        tenant_id: None,
        role: Role::TenantAdmin,
        subject: "forger".into(),
        expires_at: chrono::Utc::now(),
        external: false,
    };
    let mint = |tenant: uuid::Uuid| {
        let claims = cluster::claims(&issuer, tenant, cp0, &principal, 300, chrono::Utc::now());
        cluster::mint(&stack.app.ctx.db, &stack.app.ctx.server_key, claims)
    };
    let own_tenant = tenant_id(&stack.app, &slug).await;
    let other_tenant = tenant_id(&stack.app, &stack.tenants[1].slug).await;
    let (status, _) = review(&server, &mint(other_tenant).await.unwrap().token).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "another tenant's claim");
    let (status, body) = review(&server, &mint(own_tenant).await.unwrap().token).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "the same forge for the right tenant: {body:#}"
    );
    assert!(
        body["status"]["userInfo"]["groups"]
            .as_array()
            .unwrap()
            .contains(&json!("tenantplane:admins"))
    );

    // Revocation: the plugin gets no new credential at once; one already handed out lasts its TTL.
    let doomed = stack.app.token(&slug, "tenant-member").await;
    let viewer_row = stack
        .app
        .call(Method::GET, "/api/v1/viewer", Some(&doomed), None)
        .await;
    let token_id = viewer_row.body["tokenId"].as_str().unwrap().to_string();
    let short = credential(&stack, 0, &ids[0], &doomed, 60).await;
    let expires: chrono::DateTime<chrono::Utc> = short["expiresAt"].as_str().unwrap().parse().unwrap();
    let revoked = stack
        .app
        .call(
            Method::DELETE,
            &format!("/api/v1/tenants/{slug}/tokens/{token_id}"),
            Some(&stack.tenants[0].admin),
            None,
        )
        .await;
    assert!(revoked.status.is_success(), "{}", revoked.text);
    let plugin = Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .env("TENANTPLANE_TOKEN", &doomed)
        .env("XDG_CACHE_HOME", dir.join("cache-doomed"))
        .args([
            "credential",
            "--url",
            &format!("{}/api/v1", stack.app.base),
            "--tenant",
            &slug,
            "--control-plane",
            &ids[0],
        ])
        .output()
        .unwrap();
    assert!(!plugin.status.success(), "{}", text(&plugin));
    assert!(plugin.stdout.is_empty(), "{}", text(&plugin));
    let (status, _) = review(&server, short["token"].as_str().unwrap()).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "a credential handed out before the revocation works until its expiry"
    );
    let wait = (expires - chrono::Utc::now()).to_std().unwrap_or_default() + Duration::from_secs(2);
    tokio::time::sleep(wait).await;
    let (status, _) = review(&server, short["token"].as_str().unwrap()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "expired");

    // Every exchange is audited, with the credential's id and never its token.
    let audit = stack
        .app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}/audit?action=control-plane.credential&limit=100"),
            Some(&stack.tenants[0].admin),
            None,
        )
        .await;
    assert_eq!(audit.status, StatusCode::OK, "{}", audit.text);
    let items = audit.body["items"].as_array().unwrap();
    assert!(items.len() >= 3, "{}", audit.text);
    assert!(items.iter().all(|i| i["targetId"] == ids[0].as_str()));
    assert!(!audit.text.contains(minted["token"].as_str().unwrap()));
    stack.stop().await;
}

/// The system ServiceAccount whose ClusterRole may `escalate` ClusterRoles.
const AGGREGATOR: &str = "system:serviceaccount:kube-system:clusterrole-aggregation-controller";

/// The user name `token` has in the tenant cluster (`kubectl auth whoami`).
fn username(kubeconfig: &Path, token: &str, cache: &Path) -> String {
    let out = kubectl(
        kubeconfig,
        token,
        cache,
        &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"],
    );
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// Runs each check (what it tries, kubectl's arguments, the refusal it must print) once with `token`;
/// a line for each that was not refused with exactly that message.
fn not_refused(
    kubeconfig: &Path,
    token: &str,
    cache: &Path,
    checks: &[(&str, Vec<&str>, String)],
) -> Vec<String> {
    checks
        .iter()
        .filter_map(|(what, args, refusal)| {
            let out = kubectl(kubeconfig, token, cache, args);
            let refused = !out.status.success() && String::from_utf8_lossy(&out.stderr).contains(refusal);
            (!refused).then(|| format!("{what}: wanted {refusal:?}, got {}", text(&out)))
        })
        .collect()
}

/// Waits (a watch) until RoleBinding or ClusterRoleBinding `name` exists (`present`) or not.
async fn binding_until<K>(api: kube::Api<K>, name: &str, present: bool) -> Option<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    // The in-tenant phase's periodic check is an hour in this test: only a namespace event wakes it.
    let bound = Duration::from_secs(120);
    let condition = move |object: Option<&K>| object.is_some() == present;
    tokio::time::timeout(bound, kube::runtime::wait::await_condition(api, name, condition))
        .await
        .unwrap_or_else(|_| panic!("{name} present={present}: not within {bound:?}"))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_edit_only_the_tenants_own_namespaces_and_a_new_namespace_gets_their_bindings_on_its_event() {
    // An hour between periodic checks: what happens after the first passes follows from events.
    let stack = stack_with("e2e-rbac", 1, |settings| {
        settings.in_tenant_resync = Duration::from_secs(3600);
    })
    .await;
    let (_ca, etcd) = etcds("e2e-rbac", 1).await;
    stack.pool("etcd").await;
    stack
        .etcd_datastore("etcd", &etcd[0], &format!("ca-{}", stack.id))
        .await;
    let body =
        json!({"name": "web", "kubernetesVersion": VERSION, "replicas": 1, "datastore": {"pool": "etcd"}});
    let id = stack.create(0, body).await["controlPlane"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    stack.ready(0, &id, VERSION).await;
    let dir = tenantplane::runtime::scratch_dir("e2e-rbac").unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, stack.kubeconfig(0, &id).await).unwrap();
    let slug = stack.tenants[0].slug.clone();
    let (member, admin) = (stack.tenants[0].member.clone(), stack.tenants[0].admin.clone());
    let viewer = stack.app.token(&slug, "tenant-viewer").await;
    let (member_cache, viewer_cache, admin_cache) = (
        dir.join("cache-member"),
        dir.join("cache-viewer"),
        dir.join("cache-admin"),
    );

    // Once the in-tenant phase has bound the groups, a member edits `default` and lists namespaces.
    let can_deploy = ["auth", "can-i", "create", "deployments", "-n", "default"];
    kubectl_until_ok(&kubeconfig, &member, &member_cache, &can_deploy).await;
    let me = username(&kubeconfig, &member, &member_cache);
    let deploy = kubectl(
        &kubeconfig,
        &member,
        &member_cache,
        &[
            "create",
            "deployment",
            "web",
            "--image=registry.k8s.io/pause:3.10",
            "-n",
            "default",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&deploy.stdout),
        "deployment.apps/web created\n",
        "{}",
        text(&deploy)
    );
    let listed = kubectl(
        &kubeconfig,
        &member,
        &member_cache,
        &["get", "namespaces", "-o", "name"],
    );
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("namespace/kube-system\n"),
        "{}",
        text(&listed)
    );

    // …and nothing in the system namespaces, nor RBAC: each refused with the API's 403.
    let impersonate = format!(
        "Error from server (Forbidden): serviceaccounts \"clusterrole-aggregation-controller\" is forbidden: User \"{me}\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"kube-system\""
    );
    let as_aggregator = format!("--as={AGGREGATOR}");
    let everything = r#"[{"op": "add", "path": "/rules/-", "value": {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}}]"#;
    let member_checks = vec![
        (
            "list kube-system's Secrets",
            vec!["get", "secrets", "-n", "kube-system"],
            format!(
                "Error from server (Forbidden): secrets is forbidden: User \"{me}\" cannot list resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
            ),
        ),
        (
            "impersonate a system ServiceAccount",
            vec!["get", "clusterrole", "edit", "-o", "name", &as_aggregator],
            impersonate.clone(),
        ),
        (
            "request a token of kube-system/generic-garbage-collector",
            vec![
                "create",
                "token",
                "generic-garbage-collector",
                "-n",
                "kube-system",
            ],
            format!(
                "error: failed to create token: serviceaccounts \"generic-garbage-collector\" is forbidden: User \"{me}\" cannot create resource \"serviceaccounts/token\" in API group \"\" in the namespace \"kube-system\""
            ),
        ),
        (
            "escalate ClusterRole edit as the aggregation controller",
            vec![
                "patch",
                "clusterrole",
                "edit",
                "--type=json",
                "-p",
                everything,
                &as_aggregator,
            ],
            impersonate.clone(),
        ),
        (
            "bind itself cluster-admin",
            vec![
                "create",
                "clusterrolebinding",
                "e2e-mine",
                "--clusterrole=cluster-admin",
                "--group=tenantplane:members",
            ],
            format!(
                "error: failed to create clusterrolebinding: clusterrolebindings.rbac.authorization.k8s.io is forbidden: User \"{me}\" cannot create resource \"clusterrolebindings\" in API group \"rbac.authorization.k8s.io\" at the cluster scope"
            ),
        ),
    ];
    let viewer_name = username(&kubeconfig, &viewer, &viewer_cache);
    let viewer_checks = vec![(
        "list kube-system's ConfigMaps",
        vec!["get", "configmaps", "-n", "kube-system"],
        format!(
            "Error from server (Forbidden): configmaps is forbidden: User \"{viewer_name}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"kube-system\""
        ),
    )];
    let mut allowed = not_refused(&kubeconfig, &member, &member_cache, &member_checks);
    allowed.extend(not_refused(&kubeconfig, &viewer, &viewer_cache, &viewer_checks));
    assert!(allowed.is_empty(), "not refused:\n{}", allowed.join("\n\n"));
    let read = kubectl(
        &kubeconfig,
        &viewer,
        &viewer_cache,
        &["get", "deployments", "-n", "default", "-o", "name"],
    );
    assert_eq!(
        String::from_utf8_lossy(&read.stdout),
        "deployment.apps/web\n",
        "{}",
        text(&read)
    );

    // A tenant upgraded from a version with cluster-wide member and viewer bindings loses them (here
    // recreated as that version labelled them), at the next pass: the one a new namespace wakes.
    let tenant = stack.tenant_client(0, &id).await;
    let cluster_bindings = kube::Api::<ClusterRoleBinding>::all(tenant.clone());
    for (group, role) in [("tenantplane:members", "edit"), ("tenantplane:viewers", "view")] {
        let old: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": group, "labels": {"app.kubernetes.io/managed-by": "tenantplane", "tenantplane.io/in-tenant-phase": "authentication"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
        }))
        .unwrap();
        cluster_bindings.create(&Default::default(), &old).await.unwrap();
    }
    let created = kubectl(
        &kubeconfig,
        &admin,
        &admin_cache,
        &["create", "namespace", "team-a"],
    );
    assert_eq!(
        String::from_utf8_lossy(&created.stdout),
        "namespace/team-a created\n",
        "{}",
        text(&created)
    );
    let in_team_a = kube::Api::<RoleBinding>::namespaced(tenant.clone(), "team-a");
    let bound = binding_until(in_team_a, "tenantplane:members", true)
        .await
        .unwrap();
    assert_eq!(
        (
            serde_json::to_value(&bound.role_ref).unwrap(),
            serde_json::to_value(&bound.subjects).unwrap()
        ),
        (
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"}),
            json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "tenantplane:members"}]),
        )
    );
    for group in ["tenantplane:members", "tenantplane:viewers"] {
        binding_until(cluster_bindings.clone(), group, false).await;
    }
    // The member's authorizer has the binding (the apiserver's cache), then its ConfigMap is created.
    let can_write = ["auth", "can-i", "create", "configmaps", "-n", "team-a"];
    kubectl_until_ok(&kubeconfig, &member, &member_cache, &can_write).await;
    let written = kubectl(
        &kubeconfig,
        &member,
        &member_cache,
        &["create", "configmap", "e2e", "-n", "team-a"],
    );
    assert_eq!(
        String::from_utf8_lossy(&written.stdout),
        "configmap/e2e created\n",
        "{}",
        text(&written)
    );
    stack.stop().await;
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// A local identity provider over HTTPS (its own CA): discovery and a JWKS with one ES256 key.
struct HttpsIdp {
    issuer: tenantplane::translate::ClusterIssuer,
    key: jsonwebtoken::EncodingKey,
}

impl HttpsIdp {
    async fn start() -> Self {
        use axum::{Json, Router, routing::get};
        let tls = tenantplane_devenv::localenv::issuer::start().await.unwrap();
        let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &ring::rand::SystemRandom::new(),
        )
        .unwrap();
        let key = jsonwebtoken::EncodingKey::from_ec_der(pkcs8.as_ref());
        let mut jwk =
            jsonwebtoken::jwk::Jwk::from_encoding_key(&key, jsonwebtoken::Algorithm::ES256).unwrap();
        jwk.common.key_id = Some("idp-1".into());
        let url = tls.issuer.url.clone();
        let discovery = json!({"issuer": url, "jwks_uri": format!("{url}/keys"),
            "response_types_supported": ["id_token"], "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"]});
        let keys = json!({"keys": [jwk]});
        let app = Router::new()
            .route(
                "/credentials/.well-known/openid-configuration",
                get(move || async move { Json(discovery) }),
            )
            .route("/credentials/keys", get(move || async move { Json(keys) }));
        tokio::spawn(async move {
            let _ = axum::serve(tls.listener, app).await;
        });
        Self {
            issuer: tls.issuer,
            key,
        }
    }

    /// A token for `email` in `groups`, for audience `e2e-idp`, valid 10 minutes.
    fn token(&self, email: &str, groups: &[&str]) -> String {
        let now = chrono::Utc::now().timestamp();
        let claims = json!({"iss": self.issuer.url, "aud": "e2e-idp", "sub": email, "email": email,
            "groups": groups, "iat": now, "nbf": now, "exp": now + 600});
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some("idp-1".into());
        jsonwebtoken::encode(&header, &claims, &self.key).unwrap()
    }
}

/// The names of the runner's pods of Deployment `name` in `ns` (their `pod.json`).
fn pod_names(stack: &Stack, ns: &str, name: &str) -> std::collections::BTreeSet<String> {
    stack
        .runner
        .logs(ns, name)
        .iter()
        .filter_map(|log| {
            let meta: Value =
                serde_json::from_slice(&std::fs::read(log.parent()?.parent()?.join("pod.json")).ok()?)
                    .ok()?;
            meta["pod"].as_str().map(str::to_string)
        })
        .collect()
}

/// Polls a SelfSubjectReview with `token` until it answers `want` (within `limit`); returns its body.
async fn review_until(server: &str, token: &str, want: StatusCode, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let (status, body) = review(server, token).await;
        if status == want {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "still {status} after {limit:?}, not {want}: {body:#}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenants_own_identity_provider_is_trusted_and_dropped_without_a_restart() {
    let stack = stack("e2e-idp", 1).await;
    let (_ca, etcd) = etcds("e2e-idp", 1).await;
    stack.pool("etcd").await;
    stack
        .etcd_datastore("etcd", &etcd[0], &format!("ca-{}", stack.id))
        .await;
    let created = stack
        .create(0, json!({"name": "web", "kubernetesVersion": VERSION, "replicas": 1, "datastore": {"pool": "etcd"}}))
        .await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let cp = stack.ready(0, &id, VERSION).await;
    let server = format!("https://{}", cp["status"]["endpoint"].as_str().unwrap());
    let ns = stack.tenants[0].namespace.clone();
    let pods = pod_names(&stack, &ns, "web");
    assert_eq!(pods.len(), 1, "{pods:?}");

    let idp = HttpsIdp::start().await;
    let token = idp.token("alice@example.com", &["dev"]);
    let (status, _) = review(&server, &token).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "not trusted yet");

    let path = format!(
        "/api/v1/tenants/{}/control-planes/{id}/authenticators",
        stack.tenants[0].slug
    );
    let admin = &stack.tenants[0].admin;
    let body = json!({
        "issuer": {"url": idp.issuer.url, "audiences": ["e2e-idp"], "certificateAuthority": idp.issuer.certificate_authority},
        "claimMappings": {"username": {"claim": "email", "prefix": "idp:"}, "groups": {"claim": "groups", "prefix": "idp:"}},
    });
    let added = stack.app.call(Method::POST, &path, Some(admin), Some(body)).await;
    assert_eq!(added.status, StatusCode::CREATED, "{}", added.text);
    assert_eq!(added.body["state"], "pending");
    let aid = added.body["id"].as_str().unwrap().to_string();

    // Within the reload interval (kube-apiserver watches the file and polls it every minute; the runner
    // syncs the ConfigMap every 2 s), with no restart.
    let reviewed = review_until(&server, &token, StatusCode::CREATED, Duration::from_secs(150)).await;
    assert_eq!(
        reviewed["status"]["userInfo"]["username"], "idp:alice@example.com",
        "{reviewed:#}"
    );
    assert!(
        reviewed["status"]["userInfo"]["groups"]
            .as_array()
            .unwrap()
            .contains(&json!("idp:dev")),
        "{reviewed:#}"
    );
    // The API reports it active once the controller has seen the apiserver load it.
    crate::support::eventually("the authenticator active", Duration::from_secs(90), || async {
        let r = stack
            .app
            .call(Method::GET, &format!("{path}/{aid}"), Some(admin), None)
            .await;
        (r.body["state"] == "active").then_some(())
    })
    .await;

    // Removed: its tokens fail again, still without a restart.
    let removed = stack
        .app
        .call(Method::DELETE, &format!("{path}/{aid}"), Some(admin), None)
        .await;
    assert_eq!(removed.status, StatusCode::NO_CONTENT, "{}", removed.text);
    review_until(
        &server,
        &token,
        StatusCode::UNAUTHORIZED,
        Duration::from_secs(150),
    )
    .await;
    assert_eq!(
        pod_names(&stack, &ns, "web"),
        pods,
        "the control plane pod was not replaced"
    );
    let listed = stack.app.call(Method::GET, &path, Some(admin), None).await;
    assert_eq!(listed.body["items"], json!([]));
    stack.stop().await;
}
