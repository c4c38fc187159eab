//! Time to Ready: from `POST /control-planes` to the tenant's `/readyz` answering 200 at its published
//! endpoint, over 10 sequential runs on the `make run` stack (`tenantplane dev up` in-process: local
//! PostgreSQL, etcd, kube-apiserver, an etcd DataStore, serve + worker + controllers + pod-less runner).
//! Each control plane (1 replica, etcd) is deleted, and gone, before the next run starts.
//!
//! `cargo bench --bench time_to_ready` (needs `scripts/test-env build`). `TENANTPLANE_BENCH_RUNS`
//! changes the number of runs (1 at `TENANTPLANE_BENCH_SIZE=smoke`). An API error answer, a run past
//! its 300 s deadline, or no run fails the bench (exit 1), naming the run.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark panics on setup failures"
)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tenantplane_devenv::dev::{DEMO_TENANT, DevOptions, DevStack};

mod common;

/// How long one run may take before it fails.
const RUN_DEADLINE: Duration = Duration::from_secs(300);

/// A GET that must answer 200 with JSON; anything else fails `scenario`.
async fn get(http: &reqwest::Client, url: &str, token: &str, scenario: &str) -> Value {
    let r = common::ok(http.get(url).bearer_auth(token).send().await, scenario);
    let status = r.status();
    let body: Value = r.json().await.unwrap_or_default();
    assert!(status == 200, "{scenario}: GET {url} answered {status}: {body}");
    body
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// Panics, naming `scenario`, once the run is past its deadline.
fn within_deadline(start: Instant, scenario: &str, what: &str) {
    assert!(
        start.elapsed() < RUN_DEADLINE,
        "{scenario}: {what} after {RUN_DEADLINE:?}"
    );
}

/// Creates a control plane (the API must answer 202); returns its URL.
async fn create(stack: &DevStack, http: &reqwest::Client, base: &str, name: &str) -> String {
    let r = common::ok(
        http.post(base)
            .bearer_auth(&stack.demo_token)
            .json(&json!({"name": name, "kubernetesVersion": stack.kube_version, "replicas": 1}))
            .send()
            .await,
        name,
    );
    let status = r.status();
    let created: Value = r.json().await.unwrap_or_default();
    assert!(status == 202, "{name}: the create answered {status}: {created}");
    let id = created["controlPlane"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{name}: no control-plane id in {created}"));
    format!("{base}/{id}")
}

/// One run: POST, the tenant's `/readyz` 200, phase Ready in the API; then the control plane is deleted.
/// Returns the seconds to `/readyz`.
async fn run(stack: &DevStack, http: &reqwest::Client, insecure: &reqwest::Client, i: usize) -> f64 {
    let base = format!("{}/api/v1/tenants/{DEMO_TENANT}/control-planes", stack.url);
    let name = format!("bench-{i}");
    let start = Instant::now();
    let url = create(stack, http, &base, &name).await;
    let endpoint = loop {
        let cp = get(http, &url, &stack.demo_token, &name).await;
        if let Some(e) = cp["status"]["endpoint"].as_str() {
            break e.to_string();
        }
        within_deadline(start, &name, &format!("no endpoint: {cp}"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    loop {
        if let Ok(r) = insecure.get(format!("https://{endpoint}/readyz")).send().await
            && r.status().is_success()
        {
            break;
        }
        within_deadline(start, &name, "/readyz not answering");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    // Ready through the API too (the status path), for the record.
    let ready_api = loop {
        let cp = get(http, &url, &stack.demo_token, &name).await;
        if cp["phase"] == "Ready" {
            break start.elapsed().as_secs_f64();
        }
        within_deadline(start, &name, &format!("not Ready in the API: {cp}"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("run {i}: /readyz after {seconds:.2}s, phase Ready in the API after {ready_api:.2}s");
    delete(stack, http, &url, &name).await;
    seconds
}

/// Deletes the control plane at `url` (the API must accept it) and waits until it is gone.
async fn delete(stack: &DevStack, http: &reqwest::Client, url: &str, name: &str) {
    let r = common::ok(
        http.delete(url).bearer_auth(&stack.demo_admin_token).send().await,
        name,
    );
    assert!(
        r.status().is_success(),
        "{name}: the delete answered {}",
        r.status()
    );
    let start = Instant::now();
    loop {
        let r = common::ok(http.get(url).bearer_auth(&stack.demo_token).send().await, name);
        if r.status() == 404 || r.json::<Value>().await.unwrap_or_default()["phase"] == "Deleted" {
            break;
        }
        within_deadline(start, name, "not deleted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn main() {
    let size = common::Size::from_env();
    let runs = common::env_number("TENANTPLANE_BENCH_RUNS", size.pick(1, 10));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let stack = DevStack::start(DevOptions { listen: "127.0.0.1:0".parse().unwrap(), progress: true }).await.unwrap();
        let http = reqwest::Client::new();
        let insecure = reqwest::Client::builder()
            .tls_danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        let mut samples = Vec::new();
        for i in 0..runs {
            samples.push(run(&stack, &http, &insecure, i).await);
            if i + 1 < runs {
                // Let the runner stop the pod before the next run.
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
        if common::measured("time to Ready", samples.len()) {
            let mut sorted = samples.clone();
            sorted.sort_by(f64::total_cmp);
            println!(
                "time to Ready (POST -> tenant /readyz 200), {runs} runs: p50 {:.2} s, p99 {:.2} s, min {:.2} s, max {:.2} s; samples {:?}",
                percentile(&sorted, 50.0),
                percentile(&sorted, 99.0),
                sorted[0],
                sorted[sorted.len() - 1],
                samples.iter().map(|s| format!("{s:.2}")).collect::<Vec<_>>()
            );
        }
        stack.stop().await;
    });
    common::exit_if_failed();
}
