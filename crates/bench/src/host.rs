//! Where the run happens, as the report records it: the commit checked
//! out, the machine and its load, what one fsync costs on its disk, and
//! the durability the stores run with (the PostgreSQL database set up
//! anew, the journal mode SQLite recorded). Apart from `main` because none
//! of it measures plangate: it says what the measurements stand on.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::{report, stats};

/// The commit checked out, read from `.git` without running git: a
/// repository's own, or a worktree's (`.git` a file naming its git dir,
/// whose branches live in the main repository's, its `commondir`).
pub(crate) fn git_commit(repo: &Path) -> Option<String> {
    let mut git = repo.join(".git");
    if let Ok(pointer) = std::fs::read_to_string(&git)
        && let Some(dir) = pointer.trim().strip_prefix("gitdir: ")
    {
        git = repo.join(dir);
    }
    let common = std::fs::read_to_string(git.join("commondir"))
        .map(|c| git.join(c.trim()))
        .unwrap_or_else(|_| git.clone());
    let head = std::fs::read_to_string(git.join("HEAD")).ok()?;
    let head = head.trim();
    let Some(reference) = head.strip_prefix("ref: ") else {
        return Some(head.to_owned());
    };
    for dir in [&git, &common] {
        if let Ok(c) = std::fs::read_to_string(dir.join(reference)) {
            return Some(c.trim().to_owned());
        }
    }
    let packed = std::fs::read_to_string(common.join("packed-refs")).ok()?;
    packed
        .lines()
        .find(|l| l.ends_with(reference))
        .and_then(|l| l.split_whitespace().next())
        .map(str::to_owned)
}

/// The 1, 5 and 15 minute load averages: how busy the machine was, since
/// the figures are taken on a shared one.
pub(crate) fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The machine the run measured on: cores, memory, CPU, kernel, and its
/// load at the start.
pub(crate) fn machine() -> report::Machine {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        .unwrap_or_default();
    report::Machine {
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        memory_gib: mem_kib / 1024.0 / 1024.0,
        cpu,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_owned(),
        load_avg_start: load_avg(),
        load_avg_end: String::new(),
    }
}

/// p50 of 200 synced 4 KiB writes, ms: what one durable commit costs here
/// at least.
pub(crate) fn fsync_probe(dir: &Path) -> Result<f64> {
    use std::io::Write;
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path)?;
    let block = [7u8; 4096];
    let mut v = Vec::with_capacity(200);
    for _ in 0..200 {
        let t = Instant::now();
        f.write_all(&block)?;
        f.sync_data()?;
        v.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    drop(f);
    let _ = std::fs::remove_file(path);
    Ok(stats::median(&v))
}

/// Creates the `plangate_bench` database anew; returns its URL and a line
/// on the server's durability settings.
pub(crate) async fn setup_postgres(admin: &str) -> Result<(String, String)> {
    use sqlx::Connection;
    let mut conn = tokio::time::timeout(Duration::from_secs(5), sqlx::PgConnection::connect(admin))
        .await
        .context("PostgreSQL did not answer within 5 s")?
        .with_context(|| format!("cannot connect to PostgreSQL at {}", strip_password(admin)))?;
    sqlx::query("DROP DATABASE IF EXISTS plangate_bench WITH (FORCE)")
        .execute(&mut conn)
        .await?;
    sqlx::query("CREATE DATABASE plangate_bench")
        .execute(&mut conn)
        .await?;
    let mut values = Vec::new();
    for name in [
        "server_version",
        "fsync",
        "synchronous_commit",
        "wal_sync_method",
        "full_page_writes",
    ] {
        let v: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SHOW {name}")))
            .fetch_one(&mut conn)
            .await?;
        values.push((name, v));
    }
    conn.close().await?;
    let get = |n: &str| {
        values
            .iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    if get("fsync") != "on" {
        bail!(
            "the PostgreSQL server runs with fsync = {}: its numbers would not count",
            get("fsync")
        );
    }
    let base = admin.rsplit_once('/').map_or(admin, |(b, _)| b);
    let url = format!("{base}/plangate_bench");
    let line = format!(
        "PostgreSQL {}: fsync = {}, full_page_writes = {}, wal_sync_method = {}; plangate sets synchronous_commit = on for each of its connections (server default: {})",
        get("server_version"),
        get("fsync"),
        get("full_page_writes"),
        get("wal_sync_method"),
        get("synchronous_commit")
    );
    Ok((url, line))
}

/// `url` with its password shown as `[redacted]`, for error messages.
fn strip_password(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if s < at => match url[s + 3..at].split_once(':') {
            Some((user, _)) => format!("{}{}:[redacted]{}", &url[..s + 3], user, &url[at..]),
            None => url.to_owned(),
        },
        _ => url.to_owned(),
    }
}

/// The journal mode recorded in one of the run's SQLite files.
pub(crate) async fn sqlite_journal_mode(run_dir: &Path) -> Option<String> {
    use sqlx::Connection;
    let file = run_dir.join("planning-sqlite-0/plangate.db");
    if !file.exists() {
        return None;
    }
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&file)
        .read_only(true);
    let mut conn = sqlx::SqliteConnection::connect_with(&options).await.ok()?;
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .ok()?;
    let _ = conn.close().await;
    Some(mode)
}
