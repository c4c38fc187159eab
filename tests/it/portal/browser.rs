//! The portal in real Chromium on the real stack (serve, worker, controllers, pod-less runner): the
//! portal's own browser script (`web/portal/tests/browser.mjs`, playwright-core driving the system
//! Chromium, axe-core for accessibility) signs in as a tenant member, creates a control plane and
//! watches it go Pending → Provisioning → Ready without a reload, opens its detail page and downloads the
//! kubeconfig, sees a field error, signs in as a platform admin and cordons a DataStore, and never sees
//! the other tenant. It writes screenshots and its measurements (load times, gzipped bundle size, axe
//! results); this test prints them.
//!
//! Screenshots go to `target/portal-screenshots` (`TENANTPLANE_SCREENSHOT_DIR` moves them);
//! `TENANTPLANE_UPDATE_SCREENSHOTS=1` also copies them to `docs/screenshots` for the README.

use std::{path::PathBuf, time::Duration};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{repo, run, workspace};
use crate::e2e::{READY, etcds, stack};

const VERSION: &str = "v1.34.4";

/// The browser binary itself: Debian's `/usr/bin/chromium` is a shell script that starts it, so that
/// killing the browser (and `--pdeathsig`) reaches the right process.
fn chromium() -> PathBuf {
    Some(PathBuf::from("/usr/lib/chromium/chromium"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| {
            tenantplane::runtime::assets::system_program("chromium").expect("chromium (Debian: chromium)")
        })
}

/// Where the screenshots go.
fn screenshot_dir() -> PathBuf {
    std::env::var_os("TENANTPLANE_SCREENSHOT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/portal-screenshots"))
}

/// Copies the run's PNGs to `docs/screenshots` (for the README); returns how many.
fn publish(from: &std::path::Path) -> usize {
    let to = repo().join("docs/screenshots");
    std::fs::create_dir_all(&to).unwrap();
    let mut n = 0;
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "png") {
            std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
            n += 1;
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_portal_works_in_chromium_on_the_real_stack() {
    let stack = stack("e2e-portal", 2).await;
    let (_ca, etcd) = etcds("e2e-portal", 2).await;
    stack.pool("etcd").await;
    let ca_id = format!("ca-{}", stack.id);
    stack.etcd_datastore("etcd", &etcd[0], &ca_id).await;
    // The one the admin cordons; placement may use either, so creating works before and after.
    let cordoned = stack.etcd_datastore("etcd", &etcd[1], &ca_id).await;
    // The test app's stand-in DataStore serves nothing: nothing may land on it.
    let gone = stack
        .app
        .call(
            Method::DELETE,
            "/api/v1/datastores/etcd-default",
            Some(&stack.app.admin),
            None,
        )
        .await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT, "{}", gone.text);
    let other = stack
        .create(
            1,
            json!({"name": "hidden-from-a", "kubernetesVersion": VERSION, "replicas": 1}),
        )
        .await;
    assert_eq!(other["controlPlane"]["name"], "hidden-from-a", "{other:#}");

    let dir = tenantplane::runtime::scratch_dir("e2e-portal-browser").unwrap();
    let work = workspace(&dir);
    let shots = screenshot_dir();
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    let result = dir.join("result.json");
    let (a, b) = (&stack.tenants[0], &stack.tenants[1]);
    let env = vec![
        ("PORTAL_URL", format!("{}/portal/", stack.app.base)),
        ("TENANT", a.slug.clone()),
        ("MEMBER_TOKEN", a.member.clone()),
        ("TENANT_ADMIN_TOKEN", a.admin.clone()),
        ("OTHER_TENANT", b.slug.clone()),
        ("OTHER_CONTROL_PLANE", "hidden-from-a".to_string()),
        ("ADMIN_TOKEN", stack.app.admin.clone()),
        ("DATASTORE", cordoned.clone()),
        ("VERSION", VERSION.to_string()),
        ("CHROMIUM", chromium().display().to_string()),
        ("SCREENSHOT_DIR", shots.display().to_string()),
        ("RESULT_FILE", result.display().to_string()),
    ];
    let node = tenantplane::runtime::assets::system_program("node").expect("node (Debian: nodejs)");
    let (out, text) = tokio::task::spawn_blocking(move || {
        run(
            &node,
            &["tests/browser.mjs"],
            &work,
            &env,
            READY + Duration::from_secs(300),
        )
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "tests/browser.mjs failed ({}):\n{text}",
        out.status
    );
    let figures: Value = serde_json::from_slice(&std::fs::read(&result).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}\n{text}", result.display()));
    eprintln!(
        "portal: initial load {} ms; JS gzipped {} bytes; axe {}; screenshots in {}",
        figures["loadMs"],
        figures["bundleGzipBytes"],
        figures["axe"],
        shots.display()
    );
    assert!(
        figures["loadMs"].as_array().is_some_and(|l| !l.is_empty()),
        "{figures:#}"
    );
    assert!(figures["bundleGzipBytes"].as_u64().is_some(), "{figures:#}");
    let pngs = std::fs::read_dir(&shots)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "png"))
        .count();
    assert!(
        pngs >= 6,
        "list, detail and admin at 1280 and 375 px: {pngs} in {}",
        shots.display()
    );
    if std::env::var("TENANTPLANE_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
        eprintln!(
            "portal: copied {} screenshots to docs/screenshots",
            publish(&shots)
        );
    }

    // The admin's cordon went through the API, audited.
    let audited: Vec<String> = sqlx::query_scalar(
        "select action from audit_log where target_kind = 'datastore' and target_id = $1 order by id",
    )
    .bind(&cordoned)
    .fetch_all(&stack.app.ctx.db)
    .await
    .unwrap();
    // After its registration, the first change is the admin's cordon (the script may uncordon later).
    assert_eq!(
        audited.get(1).map(String::as_str),
        Some("datastore.cordon"),
        "{audited:?}"
    );
    stack.stop().await;
}
