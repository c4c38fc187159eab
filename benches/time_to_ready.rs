//! Time to Ready: from `POST /control-planes` to the tenant's `/readyz` answering 200 at its published
//! endpoint, over 10 sequential runs on the `make run` stack (`tenantplane dev up` in-process: local
//! PostgreSQL, etcd, kube-apiserver, an etcd DataStore, serve + worker + controllers + pod-less runner).
//! Each control plane (1 replica, etcd) is deleted, and gone, before the next run starts.
//!
//! `cargo bench --bench time_to_ready` (needs `scripts/test-env build`). `TENANTPLANE_BENCH_RUNS`
//! changes the number of runs.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark panics on setup failures"
)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tenantplane_devenv::dev::{DEMO_TENANT, DevOptions, DevStack};

async fn get(http: &reqwest::Client, url: &str, token: &str) -> Value {
    http.get(url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn main() {
    let runs: usize = std::env::var("TENANTPLANE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
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
        let base = format!("{}/api/v1/tenants/{DEMO_TENANT}/control-planes", stack.url);
        let mut samples = Vec::new();
        for i in 0..runs {
            let name = format!("bench-{i}");
            let start = Instant::now();
            let created: Value = http
                .post(&base)
                .bearer_auth(&stack.demo_token)
                .json(&json!({"name": name, "kubernetesVersion": stack.kube_version, "replicas": 1}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let id = created["controlPlane"]["id"].as_str().expect("a control-plane id").to_string();
            let url = format!("{base}/{id}");
            let endpoint = loop {
                let cp = get(&http, &url, &stack.demo_token).await;
                if let Some(e) = cp["status"]["endpoint"].as_str() {
                    break e.to_string();
                }
                assert!(start.elapsed() < Duration::from_secs(300), "no endpoint after 300s: {cp}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            loop {
                if let Ok(r) = insecure.get(format!("https://{endpoint}/readyz")).send().await
                    && r.status().is_success()
                {
                    break;
                }
                assert!(start.elapsed() < Duration::from_secs(300), "/readyz not answering after 300s");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let seconds = start.elapsed().as_secs_f64();
            // Ready through the API too (the status path), for the record.
            let ready_api = loop {
                let cp = get(&http, &url, &stack.demo_token).await;
                if cp["phase"] == "Ready" {
                    break start.elapsed().as_secs_f64();
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            eprintln!("run {i}: /readyz after {seconds:.2}s, phase Ready in the API after {ready_api:.2}s");
            samples.push(seconds);
            http.delete(&url).bearer_auth(&stack.demo_admin_token).send().await.unwrap();
            loop {
                let r = http.get(&url).bearer_auth(&stack.demo_token).send().await.unwrap();
                if r.status() == 404 || r.json::<Value>().await.unwrap()["phase"] == "Deleted" {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            // Let the runner stop the pod before the next run.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
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
        stack.stop().await;
    });
}
