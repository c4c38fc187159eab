//! Private files written atomically: a temporary file (mode 0600) in the same directory, then a rename;
//! and the lock file that keeps two read-modify-write cycles of one file apart.

use std::{
    io::Write as _,
    os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

/// How long [`lock`] waits for another writer before giving up.
pub const LOCK_WAIT: Duration = Duration::from_secs(10);

/// A held lock of a file: `<file>.lock`, removed when dropped.
#[derive(Debug)]
pub struct Lock {
    path: PathBuf,
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Takes the lock of `path`: creates `<path>.lock` exclusively, as kubectl (client-go) does for the
/// kubeconfig, so the two keep out of each other's way. Retries every 50 ms for up to `wait`, then fails
/// naming the lock file (a writer that died leaves it behind: remove it if no writer runs).
pub fn lock(path: &Path, wait: Duration) -> std::io::Result<Lock> {
    make_parent(path)?;
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    let lock = PathBuf::from(name);
    let deadline = Instant::now() + wait;
    loop {
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&lock);
        match created {
            Ok(_) => return Ok(Lock { path: lock }),
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    format!(
                        "{} is held by another writer (kubectl or tenantplane); if none is running, remove it",
                        lock.display()
                    ),
                ));
            }
        }
    }
}

/// Makes the missing directories above `path`, with mode 0700.
fn make_parent(path: &Path) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    if !dir.as_os_str().is_empty() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    Ok(())
}

/// Writes `content` to `path` (mode 0600) atomically: readers see the old file or the new one, never a
/// part. Missing directories are made with mode 0700; a symlink at `path` is followed.
pub fn write_private(path: &Path, content: &[u8]) -> std::io::Result<()> {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    make_parent(&path)?;
    let tmp = temp_path(&path);
    let _ = std::fs::remove_file(&tmp);
    let written = write_then_rename(&tmp, &path, content);
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Writes `content` to the new file `tmp` (mode 0600), syncs it and renames it to `path`.
fn write_then_rename(tmp: &Path, path: &Path, content: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(tmp)?;
    file.write_all(content)?;
    file.sync_all()?;
    std::fs::rename(tmp, path)
}

/// `.<name>.tmp-<pid>` beside `path`.
fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tp-client-fs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_new_file_is_0600_in_a_new_0700_directory_and_no_temporary_file_stays() {
        let dir = scratch("new");
        let path = dir.join("sub/config.yaml");
        write_private(&path, b"a: 1\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a: 1\n");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&path), mode(&dir.join("sub"))), (0o600, 0o700));
        let names: Vec<String> = std::fs::read_dir(dir.join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["config.yaml".to_string()]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn writers_that_take_the_lock_lose_no_update() {
        let dir = scratch("lock");
        let path = dir.join("config");
        let writers: Vec<_> = (0..8)
            .map(|i| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let _held = lock(&path, LOCK_WAIT).unwrap();
                    let mut text = std::fs::read_to_string(&path).unwrap_or_default();
                    std::thread::sleep(Duration::from_millis(20));
                    text.push_str(&format!("writer {i}\n"));
                    write_private(&path, text.as_bytes()).unwrap();
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let mut lines: Vec<String> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        lines.sort();
        let expected: Vec<String> = (0..8).map(|i| format!("writer {i}")).collect();
        assert_eq!(lines, expected);
        assert!(!dir.join("config.lock").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_lock_left_behind_fails_after_the_wait_naming_the_lock_file() {
        let dir = scratch("stale");
        let path = dir.join("config");
        let held = lock(&path, LOCK_WAIT).unwrap();
        let err = lock(&path, Duration::from_millis(120)).unwrap_err();
        assert_eq!(
            (err.kind(), err.to_string()),
            (
                std::io::ErrorKind::WouldBlock,
                format!(
                    "{}.lock is held by another writer (kubectl or tenantplane); if none is running, remove it",
                    path.display()
                )
            )
        );
        drop(held);
        drop(lock(&path, Duration::ZERO).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_existing_file_is_replaced_and_becomes_0600() {
        let dir = scratch("old");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&path, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
