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

/// One caller of the tenant cluster: kubectl with the exec-plugin kubeconfig and a Tenantplane token.
struct Caller<'a> {
    kubeconfig: &'a Path,
    token: String,
    cache: std::path::PathBuf,
}

impl Caller<'_> {
    /// Runs kubectl with `args` once.
    fn run(&self, args: &[&str]) -> Output {
        kubectl(self.kubeconfig, &self.token, &self.cache, args)
    }

    /// Runs kubectl with `args` once and checks that it printed exactly `stdout`.
    fn prints(&self, args: &[&str], stdout: &str) {
        let out = self.run(args);
        assert_eq!(String::from_utf8_lossy(&out.stdout), stdout, "{}", text(&out));
    }

    /// Waits until `kubectl auth can-i <question>` answers yes.
    async fn until_allowed(&self, question: &[&str]) {
        let args = [&["auth", "can-i"], question].concat();
        kubectl_until_ok(self.kubeconfig, &self.token, &self.cache, &args).await;
    }

    /// The caller's user name in the tenant cluster (`kubectl auth whoami`).
    fn username(&self) -> String {
        let out = self.run(&["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs each check (what it tries, kubectl's arguments, the refusal it must print) once; a line for
    /// each that was not refused with exactly that message.
    fn not_refused(&self, checks: &[(&str, Vec<String>, String)]) -> Vec<String> {
        checks
            .iter()
            .filter_map(|(what, args, refusal)| {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let out = self.run(&args);
                let refused = !out.status.success() && String::from_utf8_lossy(&out.stderr).contains(refusal);
                (!refused).then(|| format!("{what}: wanted {refusal:?}, got {}", text(&out)))
            })
            .collect()
    }
}

/// What member `me` must be refused, with the API's 403 as kubectl prints it.
fn member_refusals(me: &str) -> Vec<(&'static str, Vec<String>, String)> {
    let forbidden = |what: &str, verb: &str, resource: &str| {
        format!("{what} is forbidden: User \"{me}\" cannot {verb} resource \"{resource}\" in API group")
    };
    let impersonate = format!(
        "Error from server (Forbidden): {} \"\" in the namespace \"kube-system\"",
        forbidden(
            "serviceaccounts \"clusterrole-aggregation-controller\"",
            "impersonate",
            "serviceaccounts"
        )
    );
    let as_aggregator = format!("--as={AGGREGATOR}");
    let everything = r#"[{"op": "add", "path": "/rules/-", "value": {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}}]"#;
    let args = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    vec![
        (
            "list kube-system's Secrets",
            args(&["get", "secrets", "-n", "kube-system"]),
            format!(
                "Error from server (Forbidden): {} \"\" in the namespace \"kube-system\"",
                forbidden("secrets", "list", "secrets")
            ),
        ),
        (
            "impersonate a system ServiceAccount",
            args(&["get", "clusterrole", "edit", "-o", "name", &as_aggregator]),
            impersonate.clone(),
        ),
        (
            "request a token of kube-system/generic-garbage-collector",
            args(&[
                "create",
                "token",
                "generic-garbage-collector",
                "-n",
                "kube-system",
            ]),
            format!(
                "error: failed to create token: {} \"\" in the namespace \"kube-system\"",
                forbidden(
                    "serviceaccounts \"generic-garbage-collector\"",
                    "create",
                    "serviceaccounts/token"
                )
            ),
        ),
        (
            "escalate ClusterRole edit as the aggregation controller",
            args(&[
                "patch",
                "clusterrole",
                "edit",
                "--type=json",
                "-p",
                everything,
                &as_aggregator,
            ]),
            impersonate,
        ),
        (
            "bind itself cluster-admin",
            args(&[
                "create",
                "clusterrolebinding",
                "e2e-mine",
                "--clusterrole=cluster-admin",
                "--group=tenantplane:members",
            ]),
            format!(
                "error: failed to create clusterrolebinding: {} \"rbac.authorization.k8s.io\" at the cluster scope",
                forbidden(
                    "clusterrolebindings.rbac.authorization.k8s.io",
                    "create",
                    "clusterrolebindings"
                )
            ),
        ),
    ]
}

/// The cluster-wide member and viewer bindings of earlier versions, made as those versions labelled them.
async fn old_cluster_bindings(api: &kube::Api<ClusterRoleBinding>) {
    for (group, role) in [("tenantplane:members", "edit"), ("tenantplane:viewers", "view")] {
        let old: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": group, "labels": {"app.kubernetes.io/managed-by": "tenantplane", "tenantplane.io/in-tenant-phase": "authentication"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
        }))
        .unwrap();
        api.create(&Default::default(), &old).await.unwrap();
    }
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
    let caller = |token: &str, cache: &str| Caller {
        kubeconfig: &kubeconfig,
        token: token.to_string(),
        cache: dir.join(cache),
    };
    let member = caller(&stack.tenants[0].member, "cache-member");
    let admin = caller(&stack.tenants[0].admin, "cache-admin");
    let viewer_token = stack.app.token(&stack.tenants[0].slug, "tenant-viewer").await;
    let viewer = caller(&viewer_token, "cache-viewer");

    // Once the in-tenant phase has bound the groups, a member edits `default` and lists namespaces…
    member
        .until_allowed(&["create", "deployments", "-n", "default"])
        .await;
    let image = "--image=registry.k8s.io/pause:3.10";
    let deploy = ["create", "deployment", "web", image, "-n", "default"];
    member.prints(&deploy, "deployment.apps/web created\n");
    let listed = member.run(&["get", "namespaces", "-o", "name"]);
    let names = String::from_utf8_lossy(&listed.stdout);
    assert!(names.contains("namespace/kube-system\n"), "{}", text(&listed));

    // …and may do nothing in the system namespaces nor escalate: each refused with the API's 403.
    let mut allowed = member.not_refused(&member_refusals(&member.username()));
    let viewer_refusal = format!(
        "Error from server (Forbidden): configmaps is forbidden: User \"{}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"kube-system\"",
        viewer.username()
    );
    let read_kube_system = ["get", "configmaps", "-n", "kube-system"].map(String::from);
    allowed.extend(viewer.not_refused(&[(
        "list kube-system's ConfigMaps",
        read_kube_system.to_vec(),
        viewer_refusal,
    )]));
    assert!(allowed.is_empty(), "not refused:\n{}", allowed.join("\n\n"));
    viewer.prints(
        &["get", "deployments", "-n", "default", "-o", "name"],
        "deployment.apps/web\n",
    );

    // A tenant upgraded from a version with cluster-wide member and viewer bindings loses them at the
    // next pass, and a namespace the admin creates gets the member's edit: the pass its event wakes.
    let tenant = stack.tenant_client(0, &id).await;
    let cluster_bindings = kube::Api::<ClusterRoleBinding>::all(tenant.clone());
    old_cluster_bindings(&cluster_bindings).await;
    admin.prints(&["create", "namespace", "team-a"], "namespace/team-a created\n");
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
    // Once the apiserver's authorizer has the binding, the member's ConfigMap is created there.
    member
        .until_allowed(&["create", "configmaps", "-n", "team-a"])
        .await;
    member.prints(
        &["create", "configmap", "e2e", "-n", "team-a"],
        "configmap/e2e created\n",
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
