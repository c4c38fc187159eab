//! The token `tenantplane login` saved goes only to the origin it was saved for (issue 37): the exec
//! plugin of a kubeconfig (`tenantplane credential --url …`, or `TENANTPLANE_URL` from the exec plugin's
//! `env`) naming another server is refused naming both origins, exits 4, and that server sees no
//! connection; the saved origin still gets credentials, and logging in elsewhere moves the binding.

use std::{
    net::SocketAddr,
    path::Path,
    process::{Command, Output, Stdio},
    sync::{Arc, Mutex},
};

use serde_json::Value;
use tenantplane_testkit::app;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    sync::mpsc,
};

use super::App;
use crate::support;

/// A server that should never be reached: it records each connection in accept order and the request
/// line of each request (with whether it carried a bearer token, never the token), and answers 401.
struct Trap {
    addr: SocketAddr,
    accepted: mpsc::UnboundedReceiver<SocketAddr>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Trap {
    async fn start() -> Trap {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, accepted) = mpsc::unbounded_channel();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        tokio::spawn(async move {
            while let Ok((socket, peer)) = listener.accept().await {
                let _ = tx.send(peer);
                tokio::spawn(answer(socket, seen.clone()));
            }
        });
        Trap {
            addr,
            accepted,
            requests,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/api/v1", self.addr)
    }

    /// The connections accepted before now, with the requests they sent: a last connection of our own
    /// marks "now", since the listener accepts in arrival order.
    async fn connections(&mut self) -> (usize, Vec<String>) {
        let mut marker = TcpStream::connect(self.addr).await.unwrap();
        let mine = marker.local_addr().unwrap();
        let mut before = 0;
        while self.accepted.recv().await.unwrap() != mine {
            before += 1;
        }
        marker.write_all(b"MARKER / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut reply = Vec::new();
        marker.read_to_end(&mut reply).await.unwrap();
        let requests = self.requests.lock().unwrap().clone();
        (
            before,
            requests
                .into_iter()
                .filter(|r| !r.starts_with("MARKER"))
                .collect(),
        )
    }
}

/// Reads one request head, records its first line and whether it had a bearer token, answers 401.
async fn answer(mut socket: TcpStream, seen: Arc<Mutex<Vec<String>>>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head);
    let line = text.lines().next().unwrap_or_default().to_string();
    let bearer = text.to_lowercase().contains("\r\nauthorization: bearer ");
    seen.lock()
        .unwrap()
        .push(format!("{line} (bearer token: {bearer})"));
    let body = r#"{"status":401,"title":"Unauthorized"}"#;
    let reply = format!(
        "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = socket.write_all(reply.as_bytes()).await;
}

/// An app that issues control-plane credentials (an HTTPS issuer, no management cluster).
async fn app_with_issuer() -> App {
    tenantplane_devenv::localenv::install_crypto_provider();
    let mut options = app::TestAppOptions::new(support::fresh_database("cli-origin").await);
    let tls = tenantplane_devenv::localenv::issuer::start().await.unwrap();
    options.credential_issuer = Some((tls.listener, tls.issuer));
    let test_app = app::spawn(options).await.unwrap();
    app::default_datastore(&test_app.ctx.db, "etcd-default:2379", 1_000, Some("ca-default"))
        .await
        .unwrap();
    App {
        base: test_app.base,
        ctx: test_app.ctx,
        admin: test_app.admin,
        http: reqwest::Client::new(),
        issuer: test_app.issuer,
    }
}

/// A tenant admin's token and a control plane's id on `app`.
async fn tenant_with_control_plane(app: &App) -> (String, String, String) {
    let slug = app.tenant("origin").await;
    let token = app.token(&slug, "tenant-admin").await;
    let cp = app.control_plane(&slug, &token, "web").await["controlPlane"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    (slug, token, cp)
}

/// Runs the binary with only `PATH`, a `HOME` of its own and `env`, to its end.
async fn run(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tenantplane"));
    command
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

fn report(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The refusal `tenantplane` prints for origin `target` when the saved token belongs to origin `saved`
/// (the apps' and the trap's base URLs, `http://127.0.0.1:<port>`, are their origins).
fn refusal(target: &str, saved: &str) -> String {
    format!(
        "error: refusing to send the saved Tenantplane token to {target}: it was saved for {saved} and is \
         sent there only; if you trust {target}, log in to it: `tenantplane login --url {target} --token \
         TOKEN`\n"
    )
}

/// A successful `credential` run: one ExecCredential with a token, and nothing else.
fn assert_exec_credential(out: &Output) {
    assert_eq!(out.status.code(), Some(0), "{}", report(out));
    let credential: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (credential["apiVersion"].as_str(), credential["kind"].as_str()),
        (Some("client.authentication.k8s.io/v1"), Some("ExecCredential")),
        "{}",
        report(out)
    );
    assert!(
        credential["status"]["token"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{}",
        report(out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_saved_token_is_sent_only_to_the_origin_it_was_saved_for() {
    let (first, second) = tokio::join!(app_with_issuer(), app_with_issuer());
    let (slug, token, cp) = tenant_with_control_plane(&first).await;
    let mut trap = Trap::start().await;
    let home = tenantplane::runtime::scratch_dir("cli-origin-home").unwrap();
    let out = run(
        &home,
        &["login", "--url", &first.base],
        &[("TENANTPLANE_TOKEN", &token)],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));

    // What a kubeconfig's exec plugin runs, pointed at another server by its flag or by the exec env;
    // and any other command, through the environment.
    let (trap_url, trap_origin) = (trap.url(), format!("http://{}", trap.addr));
    let exec = ["credential", "--tenant", &slug, "--control-plane", &cp];
    let by_flag = [&exec[..], &["--url", &trap_url]].concat();
    let by_env = [("TENANTPLANE_URL", trap_url.as_str())];
    let none: &[(&str, &str)] = &[];
    for (args, env) in [(&by_flag[..], none), (&exec, &by_env), (&["cp", "list"], &by_env)] {
        let out = run(&home, args, env).await;
        assert_eq!(out.status.code(), Some(4), "{args:?}: {}", report(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            refusal(&trap_origin, &first.base),
            "{args:?}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: {}", report(&out));
    }
    assert_eq!(
        trap.connections().await,
        (0, vec![]),
        "the other server was contacted"
    );

    // The origin it was saved for still gets credentials, as the kubeconfig the server serves says.
    let first_url = format!("{}/api/v1", first.base);
    let at_first = [&exec[..], &["--url", &first_url]].concat();
    let out = run(&home, &at_first, &[]).await;
    assert_exec_credential(&out);
    assert!(
        !report(&out).contains(&token),
        "the Tenantplane token was printed"
    );

    // Logging in to another server binds the saved token to that one instead.
    let (slug2, token2, cp2) = tenant_with_control_plane(&second).await;
    let out = run(
        &home,
        &["login", "--url", &second.base],
        &[("TENANTPLANE_TOKEN", &token2)],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    let second_url = format!("{}/api/v1", second.base);
    let at_second = [
        "credential",
        "--url",
        &second_url,
        "--tenant",
        &slug2,
        "--control-plane",
        &cp2,
    ];
    assert_exec_credential(&run(&home, &at_second, &[]).await);
    let out = run(&home, &at_first, &[]).await;
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned()
        ),
        (Some(4), refusal(&first.base, &second.base)),
        "{}",
        report(&out)
    );
    std::fs::remove_dir_all(&home).unwrap();
}
