//! The TypeScript client (`clients/typescript`, issue 20, item 2): its committed types are what the pinned
//! openapi-typescript makes of the committed `schema/openapi.json`, and the client type-checks with the
//! pinned tsc. Compiled, its e2e script creates a control plane on a real stack, waits on the operation,
//! checks each answer against the document and downloads the kubeconfig, and kubectl reaches the tenant
//! cluster with that kubeconfig. A path, a method, a content type or a required field that the document
//! has and the server does not fails here; the npm packages come from `scripts/test-env` (`npm ci` from
//! the committed lock).

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use super::{READY, etcds, stack};

const VERSION: &str = "v1.34.4";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn client_dir() -> PathBuf {
    repo().join("clients/typescript")
}

/// The installed npm packages, after checking that they were installed from the committed lock.
fn node_modules() -> PathBuf {
    let dir = tenantplane::runtime::assets::binary("ts-client")
        .expect("the TypeScript client's npm packages (`scripts/test-env` installs them)");
    for file in ["package.json", "package-lock.json"] {
        let installed = std::fs::read(dir.join(file)).unwrap_or_default();
        let committed = std::fs::read(client_dir().join(file)).unwrap();
        assert!(
            installed == committed,
            "{} was installed from another clients/typescript/{file}: run `scripts/test-env ts-client`",
            dir.display()
        );
    }
    dir.join("node_modules")
}

/// A copy of the client (sources, tsconfig.json, package.json) in `dir` with the packages linked in, so
/// tsc and node resolve them as in `clients/typescript`.
fn workspace(dir: &Path) -> PathBuf {
    let modules = node_modules();
    let work = dir.join("client");
    std::fs::create_dir_all(work.join("src")).unwrap();
    for file in ["tsconfig.json", "package.json"] {
        std::fs::copy(client_dir().join(file), work.join(file)).unwrap();
    }
    for entry in std::fs::read_dir(client_dir().join("src")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, work.join("src").join(path.file_name().unwrap())).unwrap();
    }
    std::os::unix::fs::symlink(modules, work.join("node_modules")).unwrap();
    work
}

/// Runs a node script of the packages, or a compiled one, in `cwd` with `env`; killed with this process
/// and after `timeout`.
fn node(cwd: &Path, args: &[&str], env: &[(&str, String)], timeout: Duration) -> Output {
    let node = tenantplane::runtime::assets::system_program("node").expect("node (Debian: nodejs)");
    let mut child = Command::new("setpriv")
        .args(["--pdeathsig", "KILL", "--"])
        .arg(node)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start node");
    let deadline = Instant::now() + timeout;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "node {args:?} still running after {timeout:?}:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `tsc -p <work>` (`extra` adds options); panics with tsc's report on a type error.
fn tsc(work: &Path, extra: &[&str]) {
    let mut args = vec!["node_modules/typescript/bin/tsc", "-p", "tsconfig.json"];
    args.extend_from_slice(extra);
    let out = node(work, &args, &[], Duration::from_secs(600));
    assert!(out.status.success(), "tsc {extra:?} failed:\n{}", text(&out));
}

#[test]
fn the_typescript_types_are_generated_from_the_committed_document_and_type_check() {
    let dir = tenantplane::runtime::scratch_dir("ts-client-types").unwrap();
    let work = workspace(&dir);
    let generated = dir.join("schema.d.ts");
    let document = repo().join("schema/openapi.json");
    let out = node(
        &work,
        &[
            "node_modules/openapi-typescript/bin/cli.js",
            document.to_str().unwrap(),
            "-o",
            generated.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(300),
    );
    assert!(out.status.success(), "openapi-typescript failed:\n{}", text(&out));
    let committed = std::fs::read_to_string(client_dir().join("src/schema.d.ts")).unwrap();
    let fresh = std::fs::read_to_string(&generated).unwrap();
    assert!(
        committed == fresh,
        "clients/typescript/src/schema.d.ts is not what openapi-typescript generates from schema/openapi.json: \
         run `make generate` (fresh output: {})",
        generated.display()
    );
    tsc(&work, &["--noEmit"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_typescript_client_creates_a_control_plane_waits_on_its_operation_and_its_kubeconfig_serves() {
    let stack = stack("e2e-ts", 1).await;
    let (_ca, etcd) = etcds("e2e-ts", 1).await;
    stack.pool("etcd").await;
    stack
        .etcd_datastore("etcd", &etcd[0], &format!("ca-{}", stack.id))
        .await;
    let dir = tenantplane::runtime::scratch_dir("e2e-ts-client").unwrap();
    let work = workspace(&dir);
    let kubeconfig = dir.join("kubeconfig");
    let tenant = &stack.tenants[0];
    let env = vec![
        ("TENANTPLANE_URL", format!("{}/api/v1", stack.app.base)),
        ("TENANTPLANE_TOKEN", tenant.member.clone()),
        ("TENANTPLANE_TENANT", tenant.slug.clone()),
        (
            "TENANTPLANE_OPENAPI",
            repo().join("schema/openapi.json").display().to_string(),
        ),
        ("TENANTPLANE_KUBECONFIG_OUT", kubeconfig.display().to_string()),
        ("TENANTPLANE_NAME", "ts".to_string()),
        ("TENANTPLANE_KUBERNETES_VERSION", VERSION.to_string()),
        ("TENANTPLANE_POOL", "etcd".to_string()),
        ("TENANTPLANE_TIMEOUT_MS", READY.as_millis().to_string()),
    ];

    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        tsc(&work, &[]);
        let compiled = started.elapsed();
        let out = node(&work, &["dist/e2e.js"], &env, READY + Duration::from_secs(120));
        (compiled, out)
    })
    .await
    .unwrap();
    let (compiled, out) = out;
    eprintln!(
        "ts client: compiled in {compiled:.0?}, e2e.js ran {:.0?}",
        started.elapsed() - compiled
    );
    assert!(out.status.success(), "e2e.js failed:\n{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let id = line["controlPlaneId"].as_str().unwrap().to_string();
    let operation = &line["operation"];
    assert_eq!(operation["state"], "succeeded", "{line:#}");
    assert_eq!(operation["kind"], "create", "{line:#}");
    // The client's long poll saw the stages one change at a time, ending at `ready`.
    let seen: Vec<&str> = line["stagesSeen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(seen.last(), Some(&"ready"), "{line:#}");
    assert!(seen.len() >= 2, "{line:#}");
    assert_eq!(operation["controlPlaneId"], id.as_str(), "{line:#}");
    // A create's operation succeeds once the control plane serves.
    assert_eq!(line["phase"], "Ready", "{line:#}");
    let bytes = std::fs::metadata(&kubeconfig).unwrap().len();
    assert_eq!(line["kubeconfigBytes"], bytes, "{line:#}");

    // The kubeconfig reaches the tenant's API server (the runner serves it on a loopback address).
    let cp = stack.get(0, &id).await;
    assert_eq!(cp["status"]["installedVersion"], VERSION, "{cp:#}");
    let kubectl = tenantplane::runtime::assets::binary("kubectl").unwrap_or_else(|_| "kubectl".into());
    let deadline = Instant::now() + Duration::from_secs(30);
    let version: Value = loop {
        // Its credential plugin (`tenantplane credential`) exchanges the member's token.
        let out = Command::new(&kubectl)
            .env("TENANTPLANE_TOKEN", &tenant.member)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["get", "--raw", "/version", "--request-timeout=10s"])
            .output()
            .unwrap();
        if out.status.success() {
            break serde_json::from_slice(&out.stdout).unwrap();
        }
        // A replica's readiness can fail for a moment under load (see `super::connected`).
        assert!(
            Instant::now() < deadline,
            "kubectl get --raw /version failed:\n{}",
            text(&out)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(version["gitVersion"], VERSION, "{version:#}");
    stack.stop().await;
}
