//! The shape the code is held to: which workspace crate may depend on which (the compiler then refuses a
//! wrong-way import between crates), which top-level module of a crate may import which (the compiler
//! does not check that), and no function over 120 lines. A new arrow has to be added here, on purpose.
//! `cycles`: no two sibling modules use each other, at any depth.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

mod cycles;

/// Every workspace package and the workspace packages it may list under `[dependencies]`.
const CRATES: &[(&str, &str, &[&str])] = &[
    ("crates/crd", "tenantplane-crd", &[]),
    ("crates/pki", "tenantplane-pki", &[]),
    ("crates/core", "tenantplane-core", &["tenantplane-crd"]),
    (
        "crates/datastore",
        "tenantplane-datastore",
        &["tenantplane-core", "tenantplane-crd", "tenantplane-pki"],
    ),
    ("crates/runtime", "tenantplane-runtime", &["tenantplane-pki"]),
    ("crates/store", "tenantplane-store", &["tenantplane-core"]),
    (
        "crates/service",
        "tenantplane-service",
        &["tenantplane-core", "tenantplane-crd", "tenantplane-store"],
    ),
    (
        "crates/worker",
        "tenantplane-worker",
        // The worker starts the children of drains and rebalances through the service's migrations.
        &[
            "tenantplane-core",
            "tenantplane-crd",
            "tenantplane-service",
            "tenantplane-store",
        ],
    ),
    (
        "crates/api",
        "tenantplane-api",
        &[
            "tenantplane-core",
            "tenantplane-crd",
            "tenantplane-service",
            "tenantplane-store",
        ],
    ),
    (
        "crates/controller",
        "tenantplane-controller",
        &[
            "tenantplane-core",
            "tenantplane-crd",
            "tenantplane-datastore",
            "tenantplane-pki",
        ],
    ),
    (
        ".",
        "tenantplane",
        &[
            "tenantplane-api",
            "tenantplane-controller",
            "tenantplane-core",
            "tenantplane-crd",
            "tenantplane-datastore",
            "tenantplane-pki",
            "tenantplane-runtime",
            "tenantplane-service",
            "tenantplane-store",
            "tenantplane-worker",
        ],
    ),
    (
        "crates/testkit",
        "tenantplane-testkit",
        &[
            "tenantplane-api",
            "tenantplane-core",
            "tenantplane-crd",
            "tenantplane-runtime",
            "tenantplane-service",
            "tenantplane-store",
        ],
    ),
    (
        "crates/devenv",
        "tenantplane-devenv",
        &[
            "tenantplane-api",
            "tenantplane-controller",
            "tenantplane-core",
            "tenantplane-crd",
            "tenantplane-datastore",
            "tenantplane-pki",
            "tenantplane-runtime",
            "tenantplane-service",
            "tenantplane-store",
            "tenantplane-worker",
        ],
    ),
];

/// Development tooling: no production package may depend on these, directly or not.
const DEV_TOOLING: &[&str] = &["tenantplane-devenv", "tenantplane-testkit"];

/// The top-level modules of each crate in layers: a module may import (`crate::…`) only modules of
/// lower layers.
const LAYERS: &[(&str, &[&[&str]])] = &[
    ("crates/crd/src", &[&["crd"]]),
    (
        "crates/core/src",
        &[&["domain", "secret"], &["placement", "translate"]],
    ),
    (
        "crates/datastore/src",
        &[
            &["sql", "tests"],
            &["etcd", "mysql", "nats", "postgres"],
            // Moves a tenant between two drivers' datastores.
            &["migrate"],
        ],
    ),
    (
        "crates/runtime/src",
        &[&["assets", "ports", "process", "telemetry"], &["postgres"]],
    ),
    (
        "crates/store/src",
        &[
            &[
                "authenticators",
                "control_planes",
                "datastores",
                "idempotency",
                "join_tokens",
                "migrations",
                "operations",
                "parent_operations",
                "placements",
                "quotas",
                "retention",
                "tenants",
                "tokens",
            ],
            // Claims a change and the control plane's placements with it.
            &["outbox"],
        ],
    ),
    (
        "crates/service/src",
        &[
            // Authentication, and what the use-cases share.
            &[
                "auth",
                "authenticator_check",
                "drive",
                "model",
                "page",
                "stored",
                "whole",
            ],
            // The use-cases.
            &[
                "audit",
                "authenticators",
                "control_planes",
                "datastores",
                "drains",
                "events",
                "idempotency",
                "join_tokens",
                "migrations",
                "operations",
                "placement",
                "quotas",
                "tenants",
                "tokens",
            ],
        ],
    ),
    (
        "crates/worker/src",
        &[&["metrics", "migration", "progress", "status"]],
    ),
    (
        "crates/api/src",
        &[&[
            "drains",
            "error",
            "extract",
            "graphql",
            "limits",
            "metrics",
            "migrations",
            "openapi",
            "portal",
            "rest",
            "serve",
            "tls",
            "web",
        ]],
    ),
    (
        "crates/controller/src",
        &[
            // Pure: what a TenantControlPlane says about its migration.
            &["migration_plan"],
            // The controller's own ConfigMaps in its state namespace.
            &["state_records"],
            // The controller's record of the DataStores each TenantControlPlane is served by.
            &["served"],
            &[
                "apply",
                "build",
                "cache",
                "error",
                "fetch",
                "leader",
                "metrics",
                "migration_journal",
                "owners",
                "settings",
                "status",
                "used_by",
            ],
            &["datastores", "tenant_control_plane"],
            // Builds from what the TenantControlPlane phase made (Secret names, networks).
            &["in_tenant"],
            // Drives a migration through the TenantControlPlane phase's provisioning.
            &["migration"],
        ],
    ),
    ("crates/testkit/src", &[&["fixtures", "wait"], &["app"]]),
    (
        "crates/devenv/src",
        &[&["localenv"], &["runner", "testenv"], &["dev"]],
    ),
    ("src", &[&["client", "config"], &["cli"]]),
];

/// The longest a function may be, in lines from its signature to its closing brace.
const MAX_FUNCTION_LINES: usize = 120;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace packages named under `[dependencies]` of a manifest.
fn internal_dependencies(manifest: &str) -> BTreeSet<String> {
    let mut in_deps = false;
    let mut out = BTreeSet::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps
            && let Some((name, _)) = line.split_once('=')
            && name.trim().starts_with("tenantplane")
        {
            out.insert(name.trim().to_string());
        }
    }
    out
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The first path segment after each `crate::`, also inside `crate::{a::…, b}` groups.
fn crate_imports(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    for (at, _) in text.match_indices("crate::") {
        let mut i = at + "crate::".len();
        if bytes.get(i) != Some(&b'{') {
            out.insert(ident(&text[i..]));
            continue;
        }
        let (mut depth, mut start) = (1, true);
        i += 1;
        while depth > 0 && i < bytes.len() {
            match bytes[i] {
                b'{' => depth += 1,
                b'}' => depth -= 1,
                b',' if depth == 1 => start = true,
                c if depth == 1 && start && !c.is_ascii_whitespace() => {
                    out.insert(ident(&text[i..]));
                    start = false;
                }
                _ => {}
            }
            i += 1;
        }
    }
    out
}

fn ident(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The top-level modules of a crate (`src/<m>.rs` or `src/<m>/`) and the files of each.
fn modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap().flatten() {
        let path = entry.path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            let files = rust_files(&path);
            if !files.is_empty() {
                out.insert(name, files);
            }
        } else if path.extension().is_some_and(|e| e == "rs") && name != "lib" && name != "main" {
            out.insert(name, vec![path]);
        }
    }
    out
}

#[test]
fn workspace_crates_depend_only_downward_and_no_production_crate_on_dev_tooling() {
    let mut graph = BTreeMap::new();
    for (dir, name, allowed) in CRATES {
        let manifest = std::fs::read_to_string(root().join(dir).join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "{dir} is not {name}"
        );
        let deps = internal_dependencies(&manifest);
        let allowed: BTreeSet<String> = allowed.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            deps, allowed,
            "[dependencies] of {name} (update CRATES only for a deliberate new arrow)"
        );
        graph.insert(name.to_string(), deps);
    }
    let members: BTreeSet<String> = rust_dirs_with_manifests();
    let listed: BTreeSet<String> = CRATES.iter().map(|(d, _, _)| d.to_string()).collect();
    assert_eq!(members, listed, "every workspace crate has its row in CRATES");
    for (name, _) in graph.iter().filter(|(n, _)| !DEV_TOOLING.contains(&n.as_str())) {
        let mut seen = BTreeSet::new();
        let mut todo = vec![name.clone()];
        while let Some(next) = todo.pop() {
            for dep in &graph[&next] {
                assert!(
                    !DEV_TOOLING.contains(&dep.as_str()),
                    "{name} depends on {dep} through {next}"
                );
                if seen.insert(dep.clone()) {
                    todo.push(dep.clone());
                }
            }
        }
        assert!(!seen.contains(name), "{name} depends on itself (a cycle)");
    }
}

fn rust_dirs_with_manifests() -> BTreeSet<String> {
    let mut out = BTreeSet::from([".".to_string()]);
    for entry in std::fs::read_dir(root().join("crates")).unwrap().flatten() {
        if entry.path().join("Cargo.toml").exists() {
            out.insert(format!("crates/{}", entry.file_name().to_string_lossy()));
        }
    }
    out
}

#[test]
fn modules_import_only_lower_layers_of_their_crate() {
    let mut wrong = Vec::new();
    for (src, layers) in LAYERS {
        let layer_of: BTreeMap<&str, usize> = layers
            .iter()
            .enumerate()
            .flat_map(|(i, mods)| mods.iter().map(move |m| (*m, i)))
            .collect();
        for (module, files) in modules(&root().join(src)) {
            let Some(&mine) = layer_of.get(module.as_str()) else {
                wrong.push(format!("{src}: module {module} has no layer in LAYERS"));
                continue;
            };
            for file in files {
                let text = std::fs::read_to_string(&file).unwrap();
                for import in crate_imports(&text) {
                    if let Some(&theirs) = layer_of.get(import.as_str())
                        && import != module
                        && theirs >= mine
                    {
                        wrong.push(format!("{}: {module} imports crate::{import}", file.display()));
                    }
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layering:\n{}",
        wrong.join("\n")
    );
}

/// Each `fn` with a body, as (file, name, first line, lines from signature to closing brace).
fn functions(file: &Path) -> Vec<(String, usize, usize)> {
    let text = std::fs::read_to_string(file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        let Some(at) = code.find("fn ") else { continue };
        let head = &code[..at];
        let is_fn = head
            .split_whitespace()
            .all(|w| matches!(w, "pub" | "async" | "const" | "unsafe" | "extern") || w.starts_with("pub("));
        if !is_fn || code.starts_with("//") {
            continue;
        }
        let name = ident(&code[at + 3..]);
        // From the signature, the first `{` opens the body unless a `;` ends a declaration first.
        let mut depth = 0i64;
        let mut opened = false;
        for (offset, body_line) in lines[start..].iter().enumerate() {
            for c in code_chars(body_line) {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    ';' if !opened => depth = -1,
                    _ => {}
                }
            }
            if depth < 0 || (opened && depth == 0) {
                if opened && depth == 0 {
                    out.push((name.clone(), start + 1, offset + 1));
                }
                break;
            }
        }
    }
    out
}

/// The characters of a line outside string and character literals and `//` comments.
fn code_chars(line: &str) -> Vec<char> {
    let line = line.replace("'{'", "").replace("'}'", "").replace("'\\\\'", "");
    let (mut out, mut in_string, mut escaped) = (Vec::new(), false, false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        } else if c == '/' && chars.peek() == Some(&'/') {
            break;
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn no_function_is_over_120_lines() {
    let mut dirs = vec![root().join("src")];
    for (dir, _, _) in CRATES.iter().filter(|(d, _, _)| *d != ".") {
        dirs.push(root().join(dir).join("src"));
    }
    let mut long = Vec::new();
    for dir in dirs {
        for file in rust_files(&dir) {
            for (name, line, len) in functions(&file) {
                if len > MAX_FUNCTION_LINES {
                    long.push(format!("{}:{line}: fn {name} has {len} lines", file.display()));
                }
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_checks_see_what_they_check() {
    let imports = crate_imports("use crate::{a::{x, y}, b};\nfn f() { crate::c::g(); }");
    assert_eq!(imports, BTreeSet::from(["a".into(), "b".into(), "c".into()]));
    let manifest = "[dependencies]\ntenantplane-pki = { workspace = true }\nserde = \"1\"\n[dev-dependencies]\ntenantplane-testkit = { workspace = true }\n";
    assert_eq!(
        internal_dependencies(manifest),
        BTreeSet::from(["tenantplane-pki".into()])
    );
    let dir = std::env::temp_dir().join(format!("structure-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("f.rs");
    std::fs::write(
        &file,
        "pub fn short() {\n    let x = \"}\";\n}\nfn decl();\nasync fn two() { }\n",
    )
    .unwrap();
    assert_eq!(
        functions(&file),
        vec![("short".to_string(), 1, 3), ("two".to_string(), 5, 1)]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
