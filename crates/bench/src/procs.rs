//! Processes the benchmark starts: each in its own process group (so a
//! bridge's children stop with it), stderr appended to a log file of the
//! run, stopped with SIGTERM then SIGKILL — and killed when dropped, so no
//! process outlives the run even when a phase fails.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tokio::process::{Child, Command};

static LOG_DIR: OnceLock<PathBuf> = OnceLock::new();

/// Where every started process's stderr goes (`LABEL.log`).
pub fn set_log_dir(dir: &Path) {
    let _ = LOG_DIR.set(dir.to_path_buf());
}

fn log_file(label: &str) -> Result<std::fs::File> {
    let dir = LOG_DIR.get().cloned().unwrap_or_else(std::env::temp_dir);
    let safe: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let path = dir.join(format!("{safe}.log"));
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("cannot open log file {}", path.display()))
}

/// A started process (the leader of its own process group).
pub struct Proc {
    /// The child; its stdio handles may be taken.
    pub child: Child,
    /// The `host:port` it serves HTTP at, for a server.
    pub serves: Option<String>,
    label: String,
    pid: u32,
    stopped: bool,
}

impl Proc {
    /// Starts `cmd` in a new process group with stderr to the run's log.
    /// stdin/stdout are as `cmd` set them (default: inherited — callers
    /// set them).
    pub fn spawn(label: &str, mut cmd: Command) -> Result<Proc> {
        cmd.process_group(0)
            .stderr(Stdio::from(log_file(label)?))
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {label}"))?;
        let pid = child.id().context("started process has no pid")?;
        Ok(Proc {
            child,
            serves: None,
            label: label.to_owned(),
            pid,
            stopped: false,
        })
    }

    /// Starts a server: no stdin, stdout and stderr to the run's log.
    pub fn spawn_server(label: &str, mut cmd: Command) -> Result<Proc> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log_file(label)?));
        Proc::spawn(label, cmd)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Resident set size of the process itself (not its children), KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib(self.pid)
    }

    /// SIGTERM to the group, up to 3 s to exit, then SIGKILL.
    pub async fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        if let Ok(Some(_)) = self.child.try_wait() {
            // Already exited; its group may still hold children.
            signal_group(self.pid, "KILL");
            return;
        }
        signal_group(self.pid, "TERM");
        let exited = tokio::time::timeout(Duration::from_secs(3), self.child.wait()).await;
        // The group may hold children that outlive the leader.
        signal_group(self.pid, "KILL");
        if exited.is_err() {
            let _ = self.child.kill().await;
        }
    }

    /// Fails if the process has already exited (with its log's name).
    pub fn check_alive(&mut self) -> Result<()> {
        if let Ok(Some(status)) = self.child.try_wait() {
            bail!(
                "{} exited early ({status}); see {}.log in the run's log dir",
                self.label,
                self.label
            );
        }
        Ok(())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.stopped {
            signal_group(self.pid, "KILL");
        }
    }
}

fn signal_group(pgid: u32, signal: &str) {
    // By id only: the group of a process this run started.
    let _ = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg("--")
        .arg(format!("-{pgid}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// `VmRSS` of a process, KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Waits until `GET http://addr{path}` answers `want` (any 2xx–4xx when
/// `want` is 0), the process still running; returns how long it took.
pub async fn wait_http(
    proc: &mut Proc,
    addr: &str,
    path: &str,
    want: u16,
    limit: Duration,
) -> Result<Duration> {
    let start = Instant::now();
    loop {
        proc.check_alive()?;
        let mut conn = crate::http1::HttpConn::new(addr);
        if let Ok(Ok(r)) = tokio::time::timeout(
            Duration::from_millis(500),
            conn.request("GET", path, &[("Accept", "*/*")], b""),
        )
        .await
        {
            let ok = if want == 0 {
                (200..500).contains(&r.status)
            } else {
                r.status == want
            };
            if ok {
                return Ok(start.elapsed());
            }
        }
        if start.elapsed() > limit {
            bail!("{addr}{path} not ready within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
