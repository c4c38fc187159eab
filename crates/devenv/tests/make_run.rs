//! `make run`'s entry point (`tenantplane-dev up`) driven like a user: wait for the printed URL, run the
//! printed curl, see the control plane become Ready, list it with the printed kubectl line for the
//! management cluster, stop with SIGINT, nothing left running and the scratch directory gone.

use std::{
    io::{BufRead as _, BufReader},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use tenantplane_testkit as support;

/// Kills the process when the test fails before SIGINT.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn make_run_prints_urls_and_a_curl_that_creates_a_control_plane_which_becomes_ready_and_ctrl_c_stops_everything()
 {
    tenantplane_runtime::install_crypto_provider();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenantplane-dev"))
        .args(["up", "--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let stdout = child.stdout.take().unwrap();
    let mut guard = Guard(child);
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let mut lines = Vec::new();
    while !lines.iter().any(|l: &String| l.starts_with("Scratch directory:")) {
        let line = rx
            .recv_timeout(Duration::from_secs(240).saturating_sub(start.elapsed()))
            .unwrap_or_else(|_| panic!("no banner within 240s; got {lines:?}"));
        lines.push(line);
    }
    let field = |prefix: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no line {prefix:?} in {lines:?}"))
            .trim()
            .to_string()
    };
    let api = field("API:");
    let base = api
        .split_whitespace()
        .next()
        .unwrap()
        .trim_end_matches("/api/v1")
        .to_string();
    assert!(base.starts_with("http://127.0.0.1:"), "{api}");
    assert_eq!(field("GraphiQL:"), format!("{base}/graphql"));
    assert_eq!(field("Docs:"), format!("{base}/docs"));
    // The portal link signs in with the demo member's token, carried in the fragment (never sent).
    let portal = field("Portal:");
    let demo = field("Demo tenant token (demo, tenant-member):");
    assert_eq!(
        portal.split_whitespace().next(),
        Some(format!("{base}/portal/#token={demo}").as_str()),
        "{portal}"
    );
    assert_eq!(field("Platform-admin token:").split('.').count(), 3);
    let curl = lines
        .iter()
        .skip_while(|l| !l.starts_with("Create a control plane:"))
        .nth(1)
        .unwrap()
        .trim()
        .to_string();
    assert!(
        curl.starts_with(&format!(
            "curl -sX POST {base}/api/v1/tenants/demo/control-planes"
        )),
        "{curl}"
    );
    // The management cluster's admin kubeconfig, inside the scratch directory of this process.
    let scratch = field("Scratch directory:")
        .strip_suffix(" (removed on Ctrl-C)")
        .unwrap()
        .to_string();
    let workdir = std::env::temp_dir().join(format!("tenantplane-{pid}"));
    let scratch_dir = std::path::Path::new(&scratch);
    assert_eq!(scratch_dir.parent(), Some(workdir.as_path()), "{scratch}");
    assert!(
        scratch_dir
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("dev-"),
        "{scratch}"
    );
    let kubectl_line = field("Management cluster (admin):");
    let (kubeconfig, kubectl_command) = kubectl_line
        .strip_prefix("KUBECONFIG=")
        .and_then(|rest| rest.split_once(' '))
        .unwrap_or_else(|| panic!("not `KUBECONFIG=<path> kubectl …`: {kubectl_line}"));
    assert_eq!(kubeconfig, format!("{scratch}/kube/admin.kubeconfig"));
    assert!(std::path::Path::new(kubeconfig).is_file(), "{kubeconfig}");
    assert_eq!(kubectl_command, "kubectl get tcp -A");

    let readyz = reqwest::get(format!("{base}/readyz")).await.unwrap();
    assert_eq!(readyz.status(), 200);
    let page = reqwest::get(format!("{base}/portal/")).await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");

    // The printed curl, as a user would paste it.
    let out = Command::new("sh").args(["-c", &curl]).output().unwrap();
    let created: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let token = field("Demo tenant token (demo, tenant-member):");
    let http = reqwest::Client::new();
    let cp = support::eventually("the demo control plane Ready", Duration::from_secs(180), || {
        let http = http.clone();
        let url = format!("{base}/api/v1/tenants/demo/control-planes/{id}");
        let token = token.clone();
        async move {
            let cp: serde_json::Value = http
                .get(url)
                .bearer_auth(token)
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            (cp["phase"] == "Ready").then_some(cp)
        }
    })
    .await;
    // The runner serves the tenant API on the published endpoint.
    let endpoint = cp["status"]["endpoint"].as_str().unwrap().to_string();
    tokio::net::TcpStream::connect(endpoint.as_str()).await.unwrap();

    // The management cluster holds exactly that TenantControlPlane, as kubectl shows it with the printed
    // kubeconfig and with the printed line itself (a status write may still be on its way: poll).
    let version = cp["kubernetesVersion"].as_str().unwrap().to_string();
    let expected_row = [
        "tp-demo",
        "demo",
        version.as_str(),
        version.as_str(),
        "Ready",
        endpoint.as_str(),
        "demo-admin-kubeconfig",
        "etcd-default",
    ];
    let header =
        "NAMESPACE NAME VERSION INSTALLED VERSION STATUS CONTROL-PLANE ENDPOINT KUBECONFIG DATASTORE AGE";
    let shown_by = |command: &mut Command| {
        let out = command.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<Vec<String>> = stdout
            .lines()
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .collect();
        (stdout, lines)
    };
    let matches = |lines: &[Vec<String>]| {
        lines.len() == 2
            && lines[0].join(" ") == header
            && lines[1].len() == expected_row.len() + 1
            && lines[1][..expected_row.len()] == expected_row
            && lines[1][expected_row.len()].ends_with(['s', 'm'])
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (stdout, lines) =
            shown_by(Command::new("kubectl").args(["--kubeconfig", kubeconfig, "get", "tcp", "-A"]));
        if matches(&lines) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl get tcp -A: expected {header:?} and {expected_row:?} + age, got:\n{stdout}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (stdout, lines) = shown_by(Command::new("sh").args(["-c", &kubectl_line]));
    assert!(matches(&lines), "{kubectl_line}:\n{stdout}");

    // Ctrl-C: a clean exit, and nothing of the stack left.
    Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = guard.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "dev up did not stop within 60s of SIGINT"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{status}");
    assert_eq!(
        support::processes_mentioning(&format!("/tenantplane-{pid}/")),
        Vec::<String>::new()
    );
    assert!(tokio::net::TcpStream::connect(endpoint.as_str()).await.is_err());
    assert!(!scratch_dir.exists(), "{scratch} outlived dev up");
}
