//! The client commands of the `tenantplane` binary (issue 20, item 4), driven as a user would, with a
//! HOME of their own: `login` saves the token, `cp create --wait` shows the stages until Ready,
//! `kubeconfig get --merge` leaves one context per tenant and control plane in one file that kubectl
//! uses, a failing create exits with the "operation failed" code and its reason, Ctrl-C stops waiting
//! (the operation goes on) and says how to resume, and a refusal names the field.

use std::{
    io::BufRead as _,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use super::{READY, etcds, stack};

const VERSION: &str = "v1.34.4";
/// The stages of a create, in order.
const CREATE_STAGES: [&str; 6] = [
    "placed",
    "applied",
    "datastoreReady",
    "certificates",
    "deployed",
    "ready",
];

/// The binary with a clean environment: its own HOME, no TENANTPLANE_* or KUBECONFIG from outside.
#[derive(Clone)]
struct Cli {
    home: PathBuf,
}

impl Cli {
    fn new(prefix: &str) -> Cli {
        Cli {
            home: tenantplane::runtime::scratch_dir(prefix).unwrap(),
        }
    }

    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut command = Command::new("setpriv");
        command
            .args(["--pdeathsig", "KILL", "--", env!("CARGO_BIN_EXE_tenantplane")])
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// Runs the binary to its end, reading its output as it comes (a full pipe would block it); killed
    /// after `READY` and two minutes.
    async fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let child = self.command(args, env).spawn().unwrap();
        let pid = child.id().to_string();
        let limit = READY + Duration::from_secs(120);
        let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap());
        match tokio::time::timeout(limit, output).await {
            Ok(out) => out.unwrap(),
            Err(_) => {
                let _ = Command::new("kill").args(["-KILL", &pid]).status();
                panic!("tenantplane {args:?} still running after {limit:?}");
            }
        }
    }

    fn config(&self) -> PathBuf {
        self.home.join(".config/tenantplane/config.yaml")
    }

    fn kubeconfig(&self) -> PathBuf {
        self.home.join(".kube/config")
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Exit code, stdout and stderr, for assertion messages.
fn report(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        stdout(out),
        stderr(out)
    )
}

/// The stage names of the plain progress lines (`stage <name> at <time>`) on stderr.
fn stages(err: &str) -> Vec<String> {
    err.lines()
        .filter_map(|l| l.strip_prefix("stage "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_string)
        .collect()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// `kubectl get --raw /version` through `context` of `kubeconfig`, with only `PATH` and `env` for its
/// credential plugin (`tenantplane credential` reads the login config under `HOME`, or
/// `TENANTPLANE_TOKEN`; an outside `XDG_CONFIG_HOME` would move the config), again while the tenant
/// apiserver does not answer yet (see `super::connected`); returns its gitVersion.
async fn kubectl_version(kubeconfig: &Path, context: &str, env: &[(&str, &str)]) -> String {
    let kubectl = tenantplane::runtime::assets::binary("kubectl").unwrap_or_else(|_| "kubectl".into());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new(&kubectl)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(env.iter().copied())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "--context",
                context,
                "get",
                "--raw",
                "/version",
                "--request-timeout=10s",
            ])
            .output()
            .unwrap();
        if out.status.success() {
            let version: Value = serde_json::from_slice(&out.stdout).unwrap();
            return version["gitVersion"].as_str().unwrap().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "kubectl --context {context}: {}",
            report(&out)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The names of list `key` of a kubeconfig document.
fn names(doc: &serde_yaml::Value, key: &str) -> Vec<String> {
    doc[key]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

/// What a kubeconfig file held before the CLI merged into it: someone else's cluster.
const FOREIGN: &str = "apiVersion: v1
kind: Config
clusters:
- name: elsewhere
  cluster: {server: 'https://192.0.2.1:6443'}
users:
- name: someone
  user: {token: not-ours}
contexts:
- name: elsewhere
  context: {cluster: elsewhere, user: someone}
current-context: elsewhere
";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cli_creates_control_planes_of_two_tenants_and_kubectl_reaches_both_through_one_merged_file() {
    let stack = stack("e2e-cli", 2).await;
    let (_ca, etcd) = etcds("e2e-cli", 1).await;
    stack.pool("etcd").await;
    stack
        .etcd_datastore("etcd", &etcd[0], &format!("ca-{}", stack.id))
        .await;
    let cli = Cli::new("e2e-cli-home");
    let (t0, t1) = (&stack.tenants[0], &stack.tenants[1]);
    let url = stack.app.base.clone();

    // login checks the token, says who it is (never the token) and saves it, 0600.
    let out = cli
        .run(&["login", "--url", &url, "--token", &t0.admin], &[])
        .await;
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    assert!(
        said.starts_with(&format!(
            "logged in to {url}/api/v1 as tenant-admin of tenant {}; token ",
            t0.slug
        )) && said.ends_with(&format!("; saved to {}\n", cli.config().display())),
        "{said}"
    );
    assert!(!report(&out).contains(&t0.admin), "the token was printed");
    let saved: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(cli.config()).unwrap()).unwrap();
    assert_eq!(
        (
            saved["url"].as_str(),
            saved["token"].as_str(),
            saved["tenant"].as_str()
        ),
        (
            Some(format!("{url}/api/v1").as_str()),
            Some(t0.admin.as_str()),
            Some(t0.slug.as_str())
        )
    );
    assert_eq!(mode(&cli.config()), 0o600);

    // An invalid name: the API refuses (exit 3) and the field is named.
    let out = cli
        .run(&["cp", "create", "Web_1", "--version", VERSION], &[])
        .await;
    assert_eq!(out.status.code(), Some(3), "{}", report(&out));
    assert!(
        stderr(&out).starts_with("error: the API refused the request: Invalid input (422): name: ")
            && stderr(&out).contains("\n  field name: must be a DNS-1123 label"),
        "{}",
        report(&out)
    );

    // The same name in both tenants (the second through the environment's token and tenant), at once.
    let other: [(&str, &str); 2] = [("TENANTPLANE_TOKEN", &t1.admin), ("TENANTPLANE_TENANT", &t1.slug)];
    let create = [
        "cp",
        "create",
        "web",
        "--version",
        VERSION,
        "--replicas",
        "1",
        "--pool",
        "etcd",
        "--wait",
    ];
    let (a, b) = tokio::join!(cli.run(&create, &[]), cli.run(&create, &other));
    for out in [&a, &b] {
        assert_eq!(out.status.code(), Some(0), "{}", report(out));
        assert_eq!(stages(&stderr(out)), CREATE_STAGES.to_vec(), "{}", report(out));
        assert!(
            stdout(out).starts_with("control plane web: create succeeded (operation ")
                && stdout(out).ends_with(", stage ready)\n"),
            "{}",
            report(out)
        );
    }

    // By name: get (JSON) and list (table).
    let out = cli.run(&["cp", "get", "web", "-o", "json"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    let cp: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        (
            cp["name"].as_str(),
            cp["phase"].as_str(),
            cp["status"]["installedVersion"].as_str()
        ),
        (Some("web"), Some("Ready"), Some(VERSION))
    );
    let out = cli.run(&["cp", "list"], &[]).await;
    let lines: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 2, "{}", report(&out));
    assert!(lines[0].starts_with("NAME   ID"), "{}", report(&out));
    assert!(
        lines[1].starts_with(&format!(
            "web    {}   {VERSION}   1          Ready",
            cp["id"].as_str().unwrap()
        )),
        "{}",
        report(&out)
    );

    // Both kubeconfigs merged into the file that already held someone else's context.
    std::fs::create_dir_all(cli.home.join(".kube")).unwrap();
    std::fs::write(cli.kubeconfig(), FOREIGN).unwrap();
    let contexts = [
        format!("tenantplane_{}_web", t0.slug),
        format!("tenantplane_{}_web", t1.slug),
    ];
    for (env, context) in [(&[][..], &contexts[0]), (&other[..], &contexts[1])] {
        let out = cli.run(&["kubeconfig", "get", "web", "--merge"], env).await;
        assert_eq!(out.status.code(), Some(0), "{}", report(&out));
        assert_eq!(
            stdout(&out),
            format!(
                "context {context} merged into {}; use it with: kubectl --context {context} get namespaces\n",
                cli.kubeconfig().display()
            )
        );
    }
    let merged: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(cli.kubeconfig()).unwrap()).unwrap();
    let expected = |first: &str| vec![first.to_string(), contexts[0].clone(), contexts[1].clone()];
    assert_eq!(
        (
            names(&merged, "contexts"),
            names(&merged, "clusters"),
            names(&merged, "users")
        ),
        (expected("elsewhere"), expected("elsewhere"), expected("someone"))
    );
    assert_eq!(
        merged["current-context"], "elsewhere",
        "the user's current context stays"
    );
    assert_eq!(mode(&cli.kubeconfig()), 0o600);
    assert_ne!(
        merged["clusters"][1]["cluster"]["server"], merged["clusters"][2]["cluster"]["server"],
        "two tenant clusters"
    );
    // Each context's credential plugin runs with that tenant's login: the config file's, or the token
    // in the environment.
    let home = cli.home.display().to_string();
    let first = [("HOME", home.as_str())];
    let empty_home = tenantplane::runtime::scratch_dir("cli-no-login")
        .unwrap()
        .display()
        .to_string();
    let second = [other[0], other[1], ("HOME", empty_home.as_str())];
    for (context, env) in contexts.iter().zip([&first[..], &second[..]]) {
        assert_eq!(kubectl_version(&cli.kubeconfig(), context, env).await, VERSION);
    }

    // Without --merge the kubeconfig goes to stdout, named for the tenant and control plane.
    let out = cli.run(&["kubeconfig", "get", "web"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    let printed: serde_yaml::Value = serde_yaml::from_str(&stdout(&out)).unwrap();
    assert_eq!(printed["current-context"].as_str(), Some(contexts[0].as_str()));

    // A token the server does not know: exit 4.
    let out = cli
        .run(&["cp", "list"], &[("TENANTPLANE_TOKEN", "not-a-token")])
        .await;
    assert_eq!(out.status.code(), Some(4), "{}", report(&out));
    assert!(
        stderr(&out).starts_with("error: not authorized: Unauthorized (401)"),
        "{}",
        report(&out)
    );

    // Delete by name, waiting: the delete's stages, then the control plane is gone.
    let out = cli.run(&["cp", "delete", "web", "--wait"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    assert_eq!(
        stages(&stderr(&out)),
        vec!["requested", "applied", "deleted"],
        "{}",
        report(&out)
    );
    let out = cli.run(&["cp", "get", "web"], &[]).await;
    assert_eq!(out.status.code(), Some(3), "{}", report(&out));
    assert!(
        stderr(&out)
            .starts_with("error: the API refused the request: Not found (404): control plane not found"),
        "{}",
        report(&out)
    );

    let out = cli.run(&["completion", "bash"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    assert!(stdout(&out).contains("_tenantplane()"), "{}", report(&out));
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_create_that_cannot_succeed_exits_5_with_its_reason_and_ctrl_c_leaves_it_running() {
    let stack = stack("e2e-cli-fail", 1).await;
    let (_ca, etcd) = etcds("e2e-cli-fail", 1).await;
    stack.pool("etcd").await;
    stack
        .etcd_datastore("etcd", &etcd[0], &format!("ca-{}", stack.id))
        .await;
    let cli = Cli::new("e2e-cli-fail-home");
    let tenant = &stack.tenants[0];
    let out = cli
        .run(
            &["login", "--url", &stack.app.base, "--token", &tenant.member],
            &[],
        )
        .await;
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));

    // v1.34.1 is not built: the create can never be Ready. Ctrl-C once its first stage shows.
    let mut child = cli
        .command(
            &[
                "cp",
                "create",
                "bad",
                "--version",
                "v1.34.1",
                "--replicas",
                "1",
                "--pool",
                "etcd",
                "--wait",
            ],
            &[],
        )
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let err = child.stderr.take().unwrap();
    let (code, err) = tokio::task::spawn_blocking(move || {
        let mut lines = std::io::BufReader::new(err).lines();
        let mut seen = Vec::new();
        while !seen
            .last()
            .is_some_and(|l: &String| l.starts_with("stage placed at "))
        {
            match lines.next() {
                Some(line) => seen.push(line.unwrap()),
                None => panic!("no stage line before the end: {seen:?}"),
            }
        }
        let kill = Command::new("kill").args(["-INT", &pid]).status().unwrap();
        assert!(kill.success());
        seen.extend(lines.map(|l| l.unwrap()));
        (child.wait().unwrap().code(), seen.join("\n"))
    })
    .await
    .unwrap();
    assert_eq!(code, Some(130), "{err}");
    let resume = err
        .lines()
        .find_map(|l| l.strip_prefix("  tenantplane op wait "))
        .unwrap_or_else(|| panic!("no resume command: {err}"));
    let id = resume.split(' ').next().unwrap().to_string();
    assert_eq!(resume, format!("{id} --tenant {}", tenant.slug));
    assert!(
        err.contains(&format!(
            "error: interrupted: operation {id} goes on on the server; resume waiting with:\n"
        )),
        "{err}"
    );

    // The operation went on without the client.
    let out = cli.run(&["op", "get", &id, "-o", "json"], &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    let op: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        (op["kind"].as_str(), op["done"].as_bool()),
        (Some("create"), Some(false)),
        "{op:#}"
    );

    // Waiting again ends when it fails: exit 5 with the reason and the message.
    let out = cli.run(&["op", "wait", &id], &[]).await;
    assert_eq!(out.status.code(), Some(5), "{}", report(&out));
    let err = stderr(&out);
    let failed = err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("{}", report(&out)));
    assert!(
        failed.starts_with(&format!("error: operation {id} failed: ImageNotBuilt: "))
            && failed.contains("kube-apiserver v1.34.1 is not built"),
        "{}",
        report(&out)
    );
    assert_eq!(
        stages(&err).first().map(String::as_str),
        Some("placed"),
        "{}",
        report(&out)
    );
    assert!(!stages(&err).contains(&"ready".to_string()), "{}", report(&out));
    stack.stop().await;
}
