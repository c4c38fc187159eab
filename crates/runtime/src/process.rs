//! Child processes that never outlive their parent.
//!
//! Every child is started through `setpriv --pdeathsig KILL`, from one thread that lives as long as the
//! process. Linux sends the parent-death signal when the *thread* that forked the child exits, so
//! spawning from short-lived test or runtime threads would kill children early; the dedicated spawner
//! thread avoids that. Each child runs in its own process group and is killed when its handle drops.

use std::{
    ffi::OsString,
    fs::File,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Mutex, OnceLock, mpsc},
    time::Duration,
};

use std::os::unix::process::CommandExt;

/// What to run: a program, its arguments and environment, and optionally another user.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// Short name used in logs and errors.
    pub name: String,
    /// Path of the program.
    pub program: PathBuf,
    /// Arguments.
    pub args: Vec<OsString>,
    /// Extra environment variables.
    pub env: Vec<(OsString, OsString)>,
    /// Run as this user (needs root), e.g. `postgres`.
    pub user: Option<String>,
    /// Working directory.
    pub cwd: Option<PathBuf>,
    /// Start from an empty environment (plus `PATH` and `HOME`), as a container would.
    pub clear_env: bool,
}

impl Spec {
    /// A spec for `program` named `name`.
    pub fn new(name: impl Into<String>, program: impl Into<PathBuf>) -> Self {
        Self {
            name: name.into(),
            program: program.into(),
            ..Self::default()
        }
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Adds one environment variable.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Runs the program as `user`.
    pub fn user(mut self, user: Option<String>) -> Self {
        self.user = user;
        self
    }

    fn command(&self, log: &File) -> std::io::Result<Command> {
        let mut cmd = Command::new("setpriv");
        if let Some(user) = &self.user {
            cmd.args(["--reuid", user, "--regid", user, "--init-groups"]);
        }
        cmd.args(["--pdeathsig", "KILL", "--"])
            .arg(&self.program)
            .args(&self.args);
        if self.clear_env {
            cmd.env_clear();
            for key in ["PATH", "HOME"] {
                if let Some(value) = std::env::var_os(key) {
                    cmd.env(key, value);
                }
            }
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(cwd) = &self.cwd {
            cmd.current_dir(cwd);
        }
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log.try_clone()?)
            .process_group(0);
        Ok(cmd)
    }
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("tenantplane-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
                // The channel closes only at process exit; park so the children keep their parent thread.
                loop {
                    std::thread::park();
                }
            })
            .map(|_| ())
            .unwrap_or_else(|err| tracing::error!(%err, "cannot start the spawner thread"));
        Mutex::new(tx)
    })
}

/// A running child process; dropping it kills the process.
#[derive(Debug)]
pub struct ChildProcess {
    name: String,
    child: Child,
    log: PathBuf,
}

impl ChildProcess {
    /// Starts `spec` with stdout and stderr appended to `log`.
    pub fn spawn(spec: &Spec, log: &Path) -> std::io::Result<Self> {
        let file = File::options().create(true).append(true).open(log)?;
        let cmd = spec.command(&file)?;
        let (reply_tx, reply_rx) = mpsc::channel();
        spawner()
            .lock()
            .map_err(|_| std::io::Error::other("spawner lock poisoned"))?
            .send((cmd, reply_tx))
            .map_err(|_| std::io::Error::other("spawner thread is gone"))?;
        let child = reply_rx
            .recv()
            .map_err(|_| std::io::Error::other("spawner thread is gone"))??;
        tracing::debug!(name = %spec.name, pid = child.id(), log = %log.display(), "started child process");
        Ok(Self {
            name: spec.name.clone(),
            child,
            log: log.to_path_buf(),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Path of the log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the log, for error messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Whether the log mentions `needle` (used to detect "address already in use").
    pub fn log_contains(&self, needle: &str) -> bool {
        std::fs::read_to_string(&self.log)
            .map(|t| t.contains(needle))
            .unwrap_or(false)
    }

    /// Returns an error if the process has exited.
    pub fn check_running(&mut self) -> Result<(), ExitedEarly> {
        match self.child.try_wait() {
            Ok(Some(status)) => Err(ExitedEarly {
                name: self.name.clone(),
                status: status.to_string(),
                log_tail: self.log_tail(30),
                address_in_use: self.log_contains("address already in use")
                    || self.log_contains("Address already in use"),
            }),
            _ => Ok(()),
        }
    }

    /// Sends SIGTERM through `kill(1)` and waits up to `grace`, then SIGKILLs.
    pub fn stop(&mut self, grace: Duration) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child that exited while it should have been running.
#[derive(Debug, thiserror::Error)]
#[error("{name} exited early ({status}); last log lines:\n{log_tail}")]
pub struct ExitedEarly {
    /// The child's name.
    pub name: String,
    /// Its exit status.
    pub status: String,
    /// The end of its log.
    pub log_tail: String,
    /// Whether it failed to bind a port that another process took meanwhile.
    pub address_in_use: bool,
}

/// Runs `spec` to completion (for one-shot tools such as `initdb`); fails on a non-zero exit or timeout.
pub async fn run_to_completion(spec: &Spec, log: &Path, timeout: Duration) -> std::io::Result<()> {
    let mut child = ChildProcess::spawn(spec, log)?;
    let started = std::time::Instant::now();
    loop {
        match child.check_running() {
            Ok(()) if started.elapsed() < timeout => tokio::time::sleep(Duration::from_millis(100)).await,
            Ok(()) => {
                return Err(std::io::Error::other(format!(
                    "{} took over {}s",
                    spec.name,
                    timeout.as_secs()
                )));
            }
            Err(exited) if exited.status == "exit status: 0" => return Ok(()),
            Err(exited) => return Err(std::io::Error::other(exited.to_string())),
        }
    }
}

/// A process's command name and the CPU seconds (user + system) it has used so far, from
/// `/proc/<pid>/stat`; `None` once it is gone.
pub fn cpu_seconds(pid: u32) -> Option<(String, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let fields: Vec<&str> = stat.get(close + 2..)?.split(' ').collect();
    // After the command: state is field 3 of stat(5), utime 14 and stime 15 (clock ticks, 100/s).
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    Some((stat[open + 1..close].to_string(), ticks as f64 / 100.0))
}
