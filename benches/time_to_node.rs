//! Time to the first node: from `POST /control-planes` to the first joined node `Ready`, over 10
//! sequential runs on the `make run` stack (`tenantplane dev up` in-process). Each run asks for a join
//! token as soon as the API gives one (it answers 409 until the control plane has served), runs
//! kubeadm's token discovery on the join command (`localenv::node::discover`: JWS checked, CA pinned),
//! and starts one hollow kubelet (kubemark `--morph=kubelet`) with nothing but the resulting bootstrap
//! kubeconfig; the sample ends when its Node reports `Ready` (read with the node's own certificate). The
//! control plane is deleted, and gone, before the next run.
//!
//! `cargo bench --bench time_to_node` (needs `scripts/test-env build`, kubeadm and kubemark included).
//! `TENANTPLANE_BENCH_RUNS` changes the number of runs (1 at `TENANTPLANE_BENCH_SIZE=smoke`). An API
//! error answer, a failed discovery or node, a run past its 300 s deadlines, or no run fails the bench
//! (exit 1), naming the run.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark panics on setup failures"
)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tenantplane_devenv::{
    dev::{DEMO_TENANT, DevOptions, DevStack},
    localenv::node::{HollowNode, discover},
};

mod common;

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// The seconds of each step of one run, from the POST.
#[derive(Debug, Clone, Copy)]
struct Run {
    /// The API handed out a join token (the token works from then on).
    token: f64,
    /// Discovery passed.
    discovered: f64,
    /// The Node reported Ready.
    ready: f64,
}

/// Asks for a join token until one is handed out; returns the join command.
async fn join_command(http: &reqwest::Client, url: &str, token: &str, start: Instant) -> String {
    loop {
        let r = http
            .post(format!("{url}/join-tokens"))
            .bearer_auth(token)
            .json(&json!({"ttlSeconds": 600, "description": "time_to_node"}))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or_default();
        match status {
            201 => return body["joinCommand"].as_str().unwrap().to_string(),
            409 | 503 => {}
            other => panic!("join-tokens answered {other}: {body}"),
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "no join token after 300 s: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates control plane `name` (the API must answer 202); returns its URL.
async fn create(stack: &DevStack, http: &reqwest::Client, base: &str, name: &str, scenario: &str) -> String {
    let r = common::ok(
        http.post(base)
            .bearer_auth(&stack.demo_token)
            .json(&json!({"name": name, "kubernetesVersion": stack.kube_version, "replicas": 1}))
            .send()
            .await,
        scenario,
    );
    let status = r.status();
    let created: Value = r.json().await.unwrap_or_default();
    assert!(
        status == 202,
        "{scenario}: the create answered {status}: {created}"
    );
    let id = created["controlPlane"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{scenario}: no control-plane id in {created}"));
    format!("{base}/{id}")
}

/// Deletes the control plane at `url` (the API must accept it) and waits, up to 300 s, until it is gone.
async fn delete(stack: &DevStack, http: &reqwest::Client, url: &str, scenario: &str) {
    let r = common::ok(
        http.delete(url).bearer_auth(&stack.demo_admin_token).send().await,
        scenario,
    );
    assert!(
        r.status().is_success(),
        "{scenario}: the delete answered {}",
        r.status()
    );
    let start = Instant::now();
    loop {
        let r = common::ok(
            http.get(url).bearer_auth(&stack.demo_token).send().await,
            scenario,
        );
        if r.status() == 404 || r.json::<Value>().await.unwrap_or_default()["phase"] == "Deleted" {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "{scenario}: not deleted after 300 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One run: POST, join token, discovery, a hollow node Ready; then the control plane is deleted.
async fn run(stack: &DevStack, http: &reqwest::Client, i: usize) -> Run {
    let base = format!("{}/api/v1/tenants/{DEMO_TENANT}/control-planes", stack.url);
    let start = Instant::now();
    let scenario = format!("run {i}");
    let url = create(stack, http, &base, &format!("node-bench-{i}"), &scenario).await;
    let command = join_command(http, &url, &stack.demo_admin_token, start).await;
    let token = start.elapsed().as_secs_f64();
    let bootstrap = common::ok(discover(&command).await, &format!("{scenario}: discovery"));
    let discovered = start.elapsed().as_secs_f64();
    let name = format!("bench-node-{i}");
    let dir = stack.dir.join("bench-nodes").join(&name);
    let mut node = common::ok(
        HollowNode::start(&dir, &name, &bootstrap),
        &format!("{scenario}: node"),
    );
    common::ok(
        node.wait_ready(Duration::from_secs(300)).await,
        &format!("{scenario}: node Ready"),
    );
    let ready = start.elapsed().as_secs_f64();
    node.stop();
    drop(node);
    delete(stack, http, &url, &scenario).await;
    let _ = std::fs::remove_dir_all(&dir);
    Run {
        token,
        discovered,
        ready,
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
        let stack = DevStack::start(DevOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            progress: true,
        })
        .await
        .unwrap();
        let http = reqwest::Client::new();
        let mut samples = Vec::new();
        for i in 0..runs {
            let r = run(&stack, &http, i).await;
            eprintln!(
                "run {i}: join token after {:.2} s, discovery {:.2} s, node Ready {:.2} s",
                r.token, r.discovered, r.ready
            );
            samples.push(r);
            if i + 1 < runs {
                // Let the runner stop the pod before the next run.
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
        if !common::measured("time to the first node", samples.len()) {
            stack.stop().await;
            return;
        }
        let mut sorted: Vec<f64> = samples.iter().map(|r| r.ready).collect();
        sorted.sort_by(f64::total_cmp);
        let mut tokens: Vec<f64> = samples.iter().map(|r| r.token).collect();
        tokens.sort_by(f64::total_cmp);
        println!(
            "time to the first node Ready (POST -> Node Ready), {runs} runs: p50 {:.2} s, p99 {:.2} s, min {:.2} s, max {:.2} s; join token p50 {:.2} s; samples {:?}",
            percentile(&sorted, 50.0),
            percentile(&sorted, 99.0),
            sorted[0],
            sorted[sorted.len() - 1],
            percentile(&tokens, 50.0),
            samples.iter().map(|r| format!("{:.2}", r.ready)).collect::<Vec<_>>()
        );
        stack.stop().await;
    });
    common::exit_if_failed();
}
