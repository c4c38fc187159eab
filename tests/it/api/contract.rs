//! The served OpenAPI document is the wire contract (issue 20, item 1): schemathesis (pinned, from PyPI,
//! installed by `scripts/test-env`) generates requests from it against the real app, on real PostgreSQL
//! with a real kube-apiserver as the management cluster, runs every check, and must find nothing. Three
//! runs at once: a platform-admin token over the platform's operations and a tenant-admin token over the
//! tenant's (100 cases per operation each in `make test`, 1,000 in `make test-deep`), and a
//! platform-admin token over the tenant's operations (a tenth of that). The tenant slug and a real
//! control plane id are fixed, so requests reach the handlers instead of stopping at 404.

use std::{path::Path, process::Command, time::Instant};

use reqwest::Method;
use serde_json::Value;

use super::{App, spawn_app_with};
use crate::support;

/// Fuzzing cases per operation and phase in `make test` (CI): a tenth of the full depth's time (200 s alone
/// against about 40 min). Neither depth redraws, with today's seed and operations, the form-feed body that
/// schemathesis once drew by chance at 1,000; the property test `an_optional_body_is_absent_exactly_when…`
/// of `crates/api/src/extract.rs` finds that bug class at once, with a seed of its own.
const CI_EXAMPLES: u32 = 100;

/// The full depth, `make test-deep` (the issue that brought schemathesis asked for 1,000 per operation).
const DEEP_EXAMPLES: u32 = 1000;

/// Fuzzing cases per operation: `TENANTPLANE_SCHEMATHESIS_EXAMPLES` if set (20 makes a quick local
/// look), else [`DEEP_EXAMPLES`] under `TENANTPLANE_TEST_DEPTH=deep` (`make test-deep`), else
/// [`CI_EXAMPLES`].
fn max_examples() -> u32 {
    let explicit = std::env::var("TENANTPLANE_SCHEMATHESIS_EXAMPLES").ok();
    match explicit.and_then(|v| v.parse().ok()) {
        Some(examples) => examples,
        None if support::deep() => DEEP_EXAMPLES,
        None => CI_EXAMPLES,
    }
}

/// `TENANTPLANE_SCHEMATHESIS_PATHS=<regex>` makes every run fuzz only the matching paths (in place of its
/// own path filter), for a quick focused look at a few operations (`'^/pools/\{name\}/rebalance$'`).
fn focus() -> Vec<String> {
    match std::env::var("TENANTPLANE_SCHEMATHESIS_PATHS") {
        Ok(regex) => vec!["--include-path-regex".into(), regex],
        Err(_) => Vec::new(),
    }
}

/// A fixed seed: the same cases on every machine, so a failure reproduces.
const SEED: u64 = 20_261_201;

/// The run's settings: every check, and the values the generated requests use for path parameters.
fn config(tenant: &str, control_plane: &str, lifecycle: &str) -> String {
    format!(
        r#"[checks]
enabled = true


[parameters]
"path.tenant" = "{tenant}"
"path.id" = "{control_plane}"

# The long poll answers after up to `waitSeconds` (60) on an open operation, longer than a request may take
# here: it is asked without waiting (`tests/it/api/operations.rs` covers the wait and its bounds).
[[operations]]
include-name = "GET /tenants/{{tenant}}/operations/{{id}}"
parameters = {{ "query.waitSeconds" = 0 }}

# A well-formed If-Match that is not the current ETag is answered 412, as it should be. A `datastore`
# starts a migration (platform admins): it must name a DataStore the control plane can move to, and come
# alone (422 naming `datastore` otherwise); other callers get 422 for it as for an unknown field.
[[operations]]
include-name = "PATCH /tenants/{{tenant}}/control-planes/{{id}}"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "412", "422"]

# Suspending and deleting a tenant turn its tokens away: these run on a tenant of their own (without
# control planes), so the other operations keep theirs.
[[operations]]
include-name = "DELETE /tenants/{{tenant}}"
parameters = {{ "path.tenant" = "{lifecycle}" }}

[[operations]]
include-name = "POST /tenants/{{tenant}}/suspend"
parameters = {{ "path.tenant" = "{lifecycle}" }}

[[operations]]
include-name = "POST /tenants/{{tenant}}/resume"
parameters = {{ "path.tenant" = "{lifecycle}" }}

# A pool with DataStores, a DataStore with control planes, or a pool that does not exist: 409, as it should.
[[operations]]
include-name = "DELETE /pools/{{name}}"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409"]

[[operations]]
include-name = "DELETE /datastores/{{name}}"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409"]

[[operations]]
include-name = "PATCH /datastores/{{name}}"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409"]

# A drain of a NATS DataStore with tenants is refused (422 naming `name`: a bucket cannot move); a second
# open drain or rebalance, or a rebalance of a pool that is not `spread`, is 409.
[[operations]]
include-name = "POST /datastores/{{name}}/drain"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422"]

# The default pool is balanced (its one DataStore holds the one control plane), so a rebalance of it succeeds
# at once, every time: each generated body reaches the optional-body parsing of the handler instead of a
# 404 (a form feed once passed for "no body" there and was accepted).
[[operations]]
include-name = "POST /pools/{{name}}/rebalance"
parameters = {{ "path.name" = "default" }}
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409"]

# A migration's target must name a ready DataStore of the control plane's driver, other than its own,
# with room (422 or 409 naming `target` otherwise); `overrides: move` is refused (422) when the override
# spaces would split or merge.
[[operations]]
include-name = "POST /tenants/{{tenant}}/control-planes/{{id}}/migrate"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422"]

# Whether a JWT authenticator is valid also depends on its CEL parsing and on cross-field rules (a claim
# or an expression, reserved prefixes) that JSON Schema cannot state: a schema-valid one may be 422, naming
# the field.
[[operations]]
include-name = "POST /tenants/{{tenant}}/control-planes/{{id}}/authenticators"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422"]
"#
    )
}

/// One schemathesis run: whose token, over which operations, with how many fuzzing cases per operation.
struct Run {
    name: &'static str,
    token: String,
    filter: [&'static str; 2],
    max_examples: u32,
}

/// Starts `st` for `run` against the app (one process per run: schemathesis generates on one core).
/// At the lowest CPU priority: `make test` runs it beside the live-migration and browser tests, whose
/// bounds are about the product, so its generating takes only the CPU they leave.
fn start(app: &App, run: &Run, config: &str, dir: &Path) -> std::process::Child {
    let st = tenantplane::runtime::assets::binary("st").expect("schemathesis (scripts/test-env installs it)");
    std::fs::create_dir_all(dir).unwrap();
    let config_file = dir.join("schemathesis.toml");
    std::fs::write(&config_file, config).unwrap();
    Command::new("nice")
        .args(["-n", "19"])
        .arg(st)
        .arg("--no-color")
        .arg("--config-file")
        .arg(&config_file)
        .arg("run")
        .arg(format!("{}/api/v1/openapi.json", app.base))
        .args([
            "--checks",
            "all",
            "--phases",
            "examples,coverage,fuzzing,stateful",
        ])
        // Deletes here are asynchronous or soft: a deleted control plane stays readable (phase Deleting)
        // until its data is gone (the DELETE answers 202), and a revoked token stays listed with its
        // revokedAt. A read after a DELETE is 200 by design; this check, written for synchronous deletes,
        // counts it a failure. (`--checks all` overrides a configuration file's switch, so it is excluded here.)
        .args(["--exclude-checks", "use_after_free"])
        .args(["--max-examples", &run.max_examples.to_string()])
        .args(["--seed", &SEED.to_string(), "--workers", "1"])
        .args(["--request-timeout", "30", "--continue-on-failure"])
        .args(["--header", &format!("Authorization: Bearer {}", run.token)])
        .args(["--report", "junit", "--report-junit-path"])
        .arg(dir.join("junit.xml"))
        .args(run.filter)
        .args(focus())
        .env("HOME", dir)
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a run; returns (success, combined output, the JUnit report).
fn finish(child: std::process::Child, dir: &Path) -> (bool, String, String) {
    let output = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let report = std::fs::read_to_string(dir.join("junit.xml")).unwrap_or_default();
    (output.status.success(), text, report)
}

/// Asserts a clean run: exit 0, and no failure or error in the JUnit report.
fn assert_clean(run: &str, (success, output, report): &(bool, String, String)) {
    assert!(success, "schemathesis ({run}) found problems:\n{output}");
    assert!(
        !report.contains("<failure") && !report.contains("<error"),
        "schemathesis ({run}) reported failures:\n{output}"
    );
    assert!(
        report.contains("<testcase"),
        "no operation ran ({run}):\n{output}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_contract_failure_and_no_server_error() {
    let app = spawn_app_with(Some(support::client().await)).await;
    let slug = app.tenant("contract").await;
    let admin = app.token(&slug, "tenant-admin").await;
    let created = app.control_plane(&slug, &admin, "contract").await;
    let id = created["controlPlane"]["id"].as_str().unwrap().to_string();
    let r = app
        .call(
            Method::GET,
            &format!("/api/v1/tenants/{slug}/control-planes/{id}"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(r.body["name"], Value::from("contract"), "{}", r.text);
    let dir = tenantplane::runtime::scratch_dir("schemathesis").unwrap();
    let lifecycle = app.tenant("contract-lifecycle").await;
    let config = config(&slug, &id, &lifecycle);
    let tenant_paths = "^/tenants/\\{tenant\\}";
    // Every operation gets the full count once, with the token of the caller it is for; the platform
    // admin also fuzzes the tenant's operations, with fewer cases.
    let runs = [
        Run {
            name: "platform admin, platform operations",
            token: app.admin.clone(),
            filter: ["--exclude-path-regex", tenant_paths],
            max_examples: max_examples(),
        },
        Run {
            name: "tenant admin, tenant operations",
            token: admin.clone(),
            filter: ["--include-path-regex", tenant_paths],
            max_examples: max_examples(),
        },
        Run {
            name: "platform admin, tenant operations",
            token: app.admin.clone(),
            filter: ["--include-path-regex", tenant_paths],
            max_examples: (max_examples() / 10).max(1),
        },
    ];
    let started = Instant::now();
    let results = tokio::task::block_in_place(|| {
        let children: Vec<_> = runs
            .iter()
            .enumerate()
            .map(|(i, run)| start(&app, run, &config, &dir.join(i.to_string())))
            .collect();
        children
            .into_iter()
            .enumerate()
            .map(|(i, child)| finish(child, &dir.join(i.to_string())))
            .collect::<Vec<_>>()
    });
    for (run, result) in runs.iter().zip(&results) {
        assert_clean(run.name, result);
    }
    eprintln!("schemathesis: all three runs clean in {:.0?}", started.elapsed());
}
