//! The self-service portal (issue 22): served from the binary at `/portal/` with its cache headers and
//! Content-Security-Policy; the committed build in `crates/api/assets/portal` is byte for byte what
//! `web/portal` builds to with the locked npm packages; and `browser` drives it in Chromium on the e2e
//! stack.

mod browser;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use reqwest::StatusCode;
use tenantplane::api::portal::{CONTENT_SECURITY_POLICY, FILES, content_type};

use crate::api::spawn_app;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The installed `web/portal` packages, after checking they were installed from the committed lock.
fn node_modules() -> PathBuf {
    let dir = tenantplane::runtime::assets::binary("portal")
        .expect("the portal's npm packages (`scripts/test-env` installs them)");
    for file in ["package.json", "package-lock.json"] {
        let installed = std::fs::read(dir.join(file)).unwrap_or_default();
        let committed = std::fs::read(repo().join("web/portal").join(file)).unwrap();
        assert!(
            installed == committed,
            "{} was installed from another web/portal/{file}: run `scripts/test-env portal`",
            dir.display()
        );
    }
    dir.join("node_modules")
}

/// A copy of the repository's `web/portal` (the files git tracks or would track: no `node_modules`, no
/// ignored local files) and `schema/schema.graphql` under `dir`, with the installed packages linked in;
/// returns the copy of `web/portal`. Its build writes `dir/crates/api/assets/portal`.
fn workspace(dir: &Path) -> PathBuf {
    let modules = node_modules();
    let listed = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
            "--",
            "web/portal",
        ])
        .current_dir(repo())
        .output()
        .expect("git ls-files");
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let mut files: Vec<String> = listed
        .stdout
        .split(|b| *b == 0)
        .filter(|f| !f.is_empty())
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect();
    files.push("schema/schema.graphql".into());
    for file in files {
        let (from, to) = (repo().join(&file), dir.join(&file));
        // A file deleted from the working tree but still tracked is not part of it.
        if !from.is_file() {
            continue;
        }
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&from, &to).unwrap();
    }
    let work = dir.join("web/portal");
    std::os::unix::fs::symlink(modules, work.join("node_modules")).unwrap();
    work
}

/// Runs `program` with `args` in `cwd` with `env`; killed with this process and after `timeout`. Its
/// output goes to files, so a chatty child never stalls on a full pipe.
fn run(
    program: &Path,
    args: &[&str],
    cwd: &Path,
    env: &[(&str, String)],
    timeout: Duration,
) -> (Output, String) {
    let log = cwd.join(format!(".run-{}.log", std::process::id()));
    let file = std::fs::File::create(&log).unwrap();
    let mut child = Command::new("setpriv")
        .args(["--pdeathsig", "KILL", "--"])
        .arg(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
    let deadline = Instant::now() + timeout;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let _ = child.wait();
            panic!(
                "{} {args:?} still running after {timeout:?}:\n{}",
                program.display(),
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    (out, text)
}

/// Every file under `dir`, relative to it and sorted.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.push(path.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    if dir.is_dir() {
        walk(dir, dir, &mut out);
    }
    out.sort();
    out
}

#[test]
fn the_committed_portal_build_is_what_web_portal_builds_to() {
    let dir = tenantplane::runtime::scratch_dir("portal-build").unwrap();
    let work = workspace(&dir);
    let npm = tenantplane::runtime::assets::system_program("npm").expect("npm (Debian: npm)");
    // `build` type-checks (the operations against the committed schema, then tsc) before Vite builds.
    let (out, text) = run(&npm, &["run", "build"], &work, &[], Duration::from_secs(600));
    assert!(
        out.status.success(),
        "`npm run build` of web/portal failed:\n{text}"
    );
    let rebuild = "run `make portal` and commit web/portal and crates/api/assets/portal";
    let generated = "src/graphql/generated.ts";
    assert!(
        std::fs::read(work.join(generated)).unwrap()
            == std::fs::read(repo().join("web/portal").join(generated)).unwrap(),
        "web/portal/{generated} is not what its codegen makes of schema/schema.graphql: {rebuild}"
    );
    let (built, committed) = (
        dir.join("crates/api/assets/portal"),
        repo().join("crates/api/assets/portal"),
    );
    assert_eq!(
        tree(&built),
        tree(&committed),
        "crates/api/assets/portal is not what web/portal builds to ({}): {rebuild}",
        built.display()
    );
    for file in tree(&built) {
        assert!(
            std::fs::read(built.join(&file)).unwrap() == std::fs::read(committed.join(&file)).unwrap(),
            "crates/api/assets/portal/{file} differs from the fresh build ({}): {rebuild}",
            built.display()
        );
    }
    // The binary embeds exactly the committed files.
    let embedded: Vec<&str> = FILES.iter().map(|(p, _)| *p).collect();
    assert_eq!(
        embedded,
        tree(&committed),
        "the binary embeds another portal: rebuild it"
    );
}

/// The headers every portal answer carries.
fn assert_secured(headers: &reqwest::header::HeaderMap, what: &str) {
    assert_eq!(
        headers["content-security-policy"], CONTENT_SECURITY_POLICY,
        "{what}"
    );
    assert_eq!(headers["x-content-type-options"], "nosniff", "{what}");
    assert_eq!(headers["referrer-policy"], "no-referrer", "{what}");
}

#[tokio::test]
async fn the_portal_is_served_from_the_binary_with_its_cache_headers_and_policy() {
    let app = spawn_app().await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let get = |path: String| {
        let http = http.clone();
        let url = format!("{}{path}", app.base);
        async move { http.get(url).send().await.unwrap() }
    };
    let root = get("/".into()).await;
    assert_eq!(root.status(), StatusCode::FOUND);
    assert_eq!(root.headers()["location"], "/portal/");
    let index = FILES
        .iter()
        .find(|(p, _)| *p == "index.html")
        .expect("the portal's index.html is embedded")
        .1;
    // The app's page, also for its own routes (history navigation), revalidated on every load.
    for path in ["/portal", "/portal/", "/portal/control-planes/x"] {
        let r = get(path.into()).await;
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8", "{path}");
        assert_eq!(r.headers()["cache-control"], "no-cache", "{path}");
        assert_secured(r.headers(), path);
        assert_eq!(r.bytes().await.unwrap().as_ref(), index, "{path}");
    }
    let mut hashed = 0;
    for (path, bytes) in FILES {
        let r = get(format!("/portal/{path}")).await;
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert_eq!(r.headers()["content-type"], content_type(path), "{path}");
        let cache = if path.starts_with("assets/") {
            hashed += 1;
            "public, max-age=31536000, immutable"
        } else {
            "no-cache"
        };
        assert_eq!(r.headers()["cache-control"], cache, "{path}");
        assert_secured(r.headers(), path);
        assert_eq!(r.bytes().await.unwrap().as_ref(), *bytes, "{path}");
    }
    assert!(hashed >= 2, "a script and a stylesheet under assets/: {FILES:?}");
    for path in ["/portal/assets/nope-123.js", "/portal/nope.png"] {
        let r = get(path.into()).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
        assert_eq!(r.headers()["content-type"], "application/problem+json", "{path}");
        assert_secured(r.headers(), path);
    }
    // Only this origin's scripts and styles, none inline.
    let page = String::from_utf8_lossy(index);
    assert!(!page.contains("http://") && !page.contains("https://"), "{page}");
    assert!(!page.contains("<script>") && !page.contains("style="), "{page}");
}
