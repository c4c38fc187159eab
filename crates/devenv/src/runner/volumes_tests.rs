use std::{
    collections::{BTreeSet, HashMap},
    net::Ipv4Addr,
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
};

use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, Secret};
use serde_json::json;

use super::*;

const IP: Ipv4Addr = Ipv4Addr::new(127, 1, 2, 3);

/// A fresh scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("tp-volsync-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn file(path: &str, content: &str, mode: u32) -> FilePlan {
    FilePlan {
        path: PathBuf::from(path),
        content: content.as_bytes().to_vec(),
        mode,
    }
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn inode_of(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().ino()
}

#[test]
fn the_diff_writes_new_and_changed_files_removes_gone_ones_and_skips_the_rest() {
    let old = vec![
        file("/p/v/auth/config.yaml", "issuer: a", 0o644),
        file("/p/v/auth/same", "x", 0o644),
        file("/p/v/pki/ca.key", "k", 0o600),
        file("/p/v/pki/gone", "g", 0o600),
    ];
    let new = vec![
        file("/p/v/auth/config.yaml", "issuer: b", 0o644),
        file("/p/v/auth/same", "x", 0o644),
        file("/p/v/pki/ca.key", "k", 0o640),
        file("/p/v/pki/added", "n", 0o600),
    ];
    let d = diff(&old, &new);
    let written: Vec<&Path> = d.write.iter().map(|f| f.path.as_path()).collect();
    assert_eq!(
        written,
        vec![
            Path::new("/p/v/auth/config.yaml"),
            Path::new("/p/v/pki/added"),
            Path::new("/p/v/pki/ca.key"),
        ]
    );
    assert_eq!(d.remove, vec![Path::new("/p/v/pki/gone")]);
    assert_eq!(diff(&new, &new), FileDiff::default());
    // A path planned twice is its last plan, as written.
    let twice = vec![file("/p/a", "1", 0o600), file("/p/a", "2", 0o600)];
    assert_eq!(diff(&twice, &[file("/p/a", "2", 0o600)]), FileDiff::default());
}

#[test]
fn an_atomic_write_replaces_the_content_keeps_the_mode_and_leaves_no_temporary_file() {
    let scratch = Scratch::new();
    let path = scratch.0.join("sub/config.yaml");
    write_atomic(&path, b"first", 0o640).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"first");
    assert_eq!(mode_of(&path), 0o640);
    let before = inode_of(&path);
    // A reader holding the old file keeps reading the old content: the new one is renamed in.
    let held = std::fs::File::open(&path).unwrap();
    write_atomic(&path, b"second, longer", 0o640).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"second, longer");
    assert_eq!(mode_of(&path), 0o640);
    assert_ne!(
        inode_of(&path),
        before,
        "replaced by a rename, not rewritten in place"
    );
    assert_eq!(std::io::read_to_string(held).unwrap(), "first");
    write_atomic(&path, b"third", 0o400).unwrap();
    assert_eq!(mode_of(&path), 0o400);
    let entries: Vec<String> = std::fs::read_dir(scratch.0.join("sub"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries, vec!["config.yaml".to_string()]);
}

fn config_map(name: &str, data: serde_json::Value) -> (String, ConfigMap) {
    (
        name.to_string(),
        serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap(),
    )
}

fn secret(name: &str, data: serde_json::Value) -> (String, Secret) {
    (
        name.to_string(),
        serde_json::from_value(json!({"metadata": {"name": name}, "stringData": data})).unwrap(),
    )
}

fn apiserver_pod() -> PodSpec {
    serde_json::from_value(json!({
        "containers": [{
            "name": "kube-apiserver", "image": "registry.k8s.io/kube-apiserver:v1.34.4",
            "args": ["--authentication-config=/etc/auth/config.yaml"],
            "volumeMounts": [{"name": "auth", "mountPath": "/etc/auth"}, {"name": "pki", "mountPath": "/pki"}],
        }],
        "volumes": [
            {"name": "auth", "configMap": {"name": "auth", "defaultMode": 0o644}},
            {"name": "pki", "secret": {"secretName": "pki"}},
        ],
    }))
    .unwrap()
}

fn fetched(auth: Option<&str>) -> Fetched {
    Fetched {
        secrets: HashMap::from([secret("pki", json!({"ca.crt": "CA"}))]),
        config_maps: auth
            .map(|a| HashMap::from([config_map("auth", json!({"config.yaml": a, "other": "o"}))]))
            .unwrap_or_default(),
        unreadable: BTreeMap::new(),
    }
}

/// A pod's volumes as the runner starts them: planned, written, remembered.
fn started(dir: &Path) -> PodVolumes {
    let spec = apiserver_pod();
    let first = fetched(Some("issuer: a"));
    let sources = pod::Sources {
        secrets: &first.secrets,
        config_maps: &first.config_maps,
    };
    let files = pod::plan_files(&spec, &sources, dir, IP).unwrap();
    for f in &files {
        write_atomic(&f.path, &f.content, f.mode).unwrap();
    }
    let refs = (
        BTreeSet::from(["pki".to_string()]),
        BTreeSet::from(["auth".to_string()]),
    );
    PodVolumes::new(spec, refs, dir.to_path_buf(), IP, files)
}

#[test]
fn a_changed_config_map_rewrites_only_its_changed_file_in_place_of_the_old_one() {
    let scratch = Scratch::new();
    let mut volumes = started(&scratch.0);
    let config = scratch.0.join("v/auth/config.yaml");
    let other = scratch.0.join("v/auth/other");
    let ca = scratch.0.join("v/pki/ca.crt");
    let (other_inode, ca_inode) = (inode_of(&other), inode_of(&ca));
    assert_eq!(volumes.refresh(&fetched(Some("issuer: a"))), Refresh::Unchanged);

    assert_eq!(
        volumes.refresh(&fetched(Some("issuer: b"))),
        Refresh::Updated(vec![config.clone()])
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "issuer: b");
    assert_eq!(mode_of(&config), 0o644);
    assert_eq!(inode_of(&other), other_inode, "an unchanged file is not touched");
    assert_eq!(inode_of(&ca), ca_inode);
    assert_eq!(mode_of(&ca), 0o600);
    assert_eq!(volumes.refresh(&fetched(Some("issuer: b"))), Refresh::Unchanged);
}

#[test]
fn a_gone_or_unreadable_object_keeps_the_old_files_and_is_reported_once() {
    let scratch = Scratch::new();
    let mut volumes = started(&scratch.0);
    let config = scratch.0.join("v/auth/config.yaml");
    let Refresh::Kept { reason, first: true } = volumes.refresh(&fetched(None)) else {
        panic!("a missing ConfigMap keeps the files");
    };
    assert_eq!(reason, "ConfigMap auth is missing");
    assert!(matches!(
        volumes.refresh(&fetched(None)),
        Refresh::Kept { first: false, .. }
    ));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "issuer: a");

    let mut unreadable = fetched(Some("issuer: c"));
    unreadable
        .unreadable
        .insert(("Secret", "pki".to_string()), "connection refused".to_string());
    let Refresh::Kept { reason, first: true } = volumes.refresh(&unreadable) else {
        panic!("an unreadable Secret keeps the files");
    };
    assert_eq!(reason, "reading Secret pki: connection refused");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "issuer: a");

    // Back: the change lands, and a key that left the ConfigMap leaves the volume.
    let mut back = fetched(Some("issuer: c"));
    back.config_maps = HashMap::from([config_map("auth", json!({"config.yaml": "issuer: c"}))]);
    assert_eq!(
        volumes.refresh(&back),
        Refresh::Updated(vec![config.clone(), scratch.0.join("v/auth/other")])
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "issuer: c");
    assert!(!scratch.0.join("v/auth/other").exists());
}
