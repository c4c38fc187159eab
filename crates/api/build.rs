//! Embeds the portal's built files (`assets/portal`, written by `make portal` from `web/portal`): writes
//! `$OUT_DIR/portal_files.rs`, one `(path, bytes)` entry per file, so their hashed names need no list kept
//! by hand. A missing directory embeds nothing.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

/// Every file under `dir`, as paths relative to `root` with `/` separators, sorted.
fn files(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            files(root, &path, out)?;
        } else if let Ok(relative) = path.strip_prefix(root) {
            let name = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            out.push((name, path));
        }
    }
    Ok(())
}

fn main() -> std::io::Result<()> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").map_err(std::io::Error::other)?);
    let root = manifest.join("assets").join("portal");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut found = Vec::new();
    if root.is_dir() {
        files(&root, &root, &mut found)?;
    }
    found.sort();
    let mut code = String::from("&[\n");
    for (name, path) in &found {
        println!("cargo:rerun-if-changed={}", path.display());
        let _ = writeln!(
            code,
            "    ({name:?}, include_bytes!({:?})),",
            path.display().to_string()
        );
    }
    code.push(']');
    let out = PathBuf::from(std::env::var("OUT_DIR").map_err(std::io::Error::other)?);
    std::fs::write(out.join("portal_files.rs"), code)
}
