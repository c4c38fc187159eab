//! The browser pages (issue 20, item 7): Swagger UI at `/docs` and GraphiQL at `GET /graphql` are built
//! from files embedded in the binary and served under `/assets`, no CDN. The vendored files are byte for
//! byte the npm packages pinned by `web/vendor/package-lock.json`; a headless Chromium that can resolve
//! no host but the server's renders both UIs; the pages carry their Content-Security-Policy.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use reqwest::{Method, StatusCode};
use tenantplane::api::web::{ASSETS, CONTENT_SECURITY_POLICY};

use crate::api::spawn_app;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The installed `web/vendor` packages, after checking they were installed from the committed lock.
fn node_modules() -> PathBuf {
    let dir = tenantplane::runtime::assets::binary("web-vendor")
        .expect("the pinned browser assets' npm packages (`scripts/test-env` installs them)");
    for file in ["package.json", "package-lock.json"] {
        let installed = std::fs::read(dir.join(file)).unwrap_or_default();
        let committed = std::fs::read(repo().join("web/vendor").join(file)).unwrap();
        assert!(
            installed == committed,
            "{} was installed from another web/vendor/{file}: run `scripts/test-env web-vendor`",
            dir.display()
        );
    }
    dir.join("node_modules")
}

#[test]
fn the_embedded_files_are_the_pinned_packages_byte_for_byte() {
    let modules = node_modules();
    let mut vendored = 0;
    for asset in ASSETS {
        let Some(source) = asset.source else { continue };
        vendored += 1;
        let package = std::fs::read(modules.join(source)).unwrap();
        assert!(
            package == asset.bytes,
            "crates/api/assets/vendor/{} differs from {source} of the pinned packages: run scripts/vendor-web",
            asset.name
        );
    }
    assert_eq!(vendored, 6);
}

#[tokio::test]
async fn the_pages_and_their_assets_are_served_from_the_binary() {
    let app = spawn_app().await;
    for (path, marker) in [("/docs", "swagger-ui-bundle.js"), ("/graphql", "graphiql.min.js")] {
        let page = app.call(Method::GET, path, None, None).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        assert_eq!(page.headers["content-type"], "text/html; charset=utf-8");
        assert_eq!(page.headers["content-security-policy"], CONTENT_SECURITY_POLICY);
        assert!(page.text.contains(marker), "{}", page.text);
        assert!(!page.text.contains("http"), "{}", page.text);
    }
    for asset in ASSETS {
        let r = app
            .http
            .get(format!("{}/assets/{}", app.base, asset.name))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{}", asset.name);
        assert_eq!(r.headers()["content-type"], asset.content_type);
        assert_eq!(r.headers()["x-content-type-options"], "nosniff");
        assert_eq!(r.bytes().await.unwrap().as_ref(), asset.bytes, "{}", asset.name);
    }
    let missing = app.call(Method::GET, "/assets/nope.js", None, None).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.headers["content-type"], "application/problem+json");
}

/// The DOM Chromium ends with after loading `url`, when no host but 127.0.0.1 resolves. Its output goes
/// to files: a full pipe would stall it.
fn rendered(url: &str, dir: &Path) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let (dom, log) = (dir.join("dom.html"), dir.join("chromium.log"));
    // Debian's /usr/bin/chromium is a shell script: run the browser it starts, so that killing it (and
    // --pdeathsig) reaches the browser itself.
    let chromium = Some(PathBuf::from("/usr/lib/chromium/chromium"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| {
            tenantplane::runtime::assets::system_program("chromium").expect("chromium (Debian: chromium)")
        });
    let mut child = Command::new("setpriv")
        .args(["--pdeathsig", "KILL", "--"])
        .arg(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "--virtual-time-budget=15000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg(url)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&dom).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start chromium");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let status = child.wait().unwrap();
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        Instant::now() < deadline,
        "chromium did not finish loading {url} in 120 s: {log}"
    );
    assert!(status.success(), "{log}");
    std::fs::read_to_string(&dom).unwrap()
}

#[tokio::test]
async fn a_browser_that_reaches_no_other_host_renders_both_uis() {
    let app = spawn_app().await;
    let dir = tenantplane::runtime::scratch_dir("chromium").unwrap();
    let (docs_url, graphiql_url) = (format!("{}/docs", app.base), format!("{}/graphql", app.base));
    let (docs, graphiql) = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || {
            (
                rendered(&docs_url, &dir.join("docs")),
                rendered(&graphiql_url, &dir.join("graphiql")),
            )
        }
    })
    .await
    .unwrap();
    // Swagger UI rendered the document it fetched: its title and the operations' blocks.
    assert!(docs.contains("Tenantplane API"), "{docs}");
    assert!(docs.contains("opblock-tag"), "{docs}");
    assert!(docs.contains("/tenants/{tenant}/control-planes"), "{docs}");
    // GraphiQL rendered its editor.
    assert!(graphiql.contains("graphiql-container"), "{graphiql}");
    assert!(graphiql.contains("graphiql-query-editor"), "{graphiql}");
}
