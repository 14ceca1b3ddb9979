//! The embedded SQLite backend.
//!
//! Several plangate processes may open the same file at once (every stdio
//! client window starts its own), so the database runs in WAL mode with a
//! busy timeout, migrations and event appends take the write lock (`BEGIN
//! IMMEDIATE`) before looking at what they depend on, and no query result
//! is cached in memory. With one writer at a time, `events.seq` is assigned
//! in commit order, which is what lets a follower page by seq.

mod committer;
mod migrations;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

use self::committer::{Append, committer};
use self::migrations::migrate;
use crate::credentials::{SqlCredentials, forward_credentials};
use crate::events::group_commit::committer_stopped;
use crate::events::reads::{EventSql, SqlEvents, forward_event_reads};
use crate::events::{checked_body_text, event_columns};
use crate::private_fs::create_new_private_file;
use crate::wal_mark::WalMark;
use crate::{ApiKey, KeyEpoch, LogMark, NewEvent, Store, StoreError};

/// How long a statement waits for another process's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The log's reads in SQLite's dialect.
static EVENT_SQL: EventSql = EventSql {
    load: concat!(
        "SELECT ",
        event_columns!(),
        " FROM events WHERE key_id = ? AND key_seq > ? ORDER BY key_seq"
    ),
    last_key_seq: "SELECT COALESCE(MAX(key_seq), 0) FROM events WHERE key_id = ?",
    export_all: concat!("SELECT ", event_columns!(), " FROM events ORDER BY seq"),
    export_key: concat!(
        "SELECT ",
        event_columns!(),
        " FROM events WHERE key_id = ? ORDER BY seq"
    ),
    export_since: concat!(
        "SELECT ",
        event_columns!(),
        " FROM events WHERE at_ms >= ? ORDER BY seq"
    ),
    export_key_since: concat!(
        "SELECT ",
        event_columns!(),
        " FROM events WHERE key_id = ? AND at_ms >= ? ORDER BY seq"
    ),
    since: concat!(
        "SELECT ",
        event_columns!(),
        " FROM events WHERE seq > ? ORDER BY seq LIMIT ?"
    ),
    last_seq: "SELECT COALESCE(MAX(seq), 0) FROM events",
};

/// Opens (creating if needed) the SQLite database at `path` and brings its
/// schema up to date. The parent directory must exist; a new file is
/// created owner-only (0600) before SQLite touches it, and its WAL and
/// shared-memory files inherit that mode.
pub async fn open_sqlite(path: &Path) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Arc::new(SqliteStore::open(path).await?))
}

/// The SQLite implementation of [`Store`].
#[derive(Debug, Clone)]
pub(crate) struct SqliteStore {
    pool: SqlitePool,
    /// Keys and operator tokens, in SQL shared with PostgreSQL.
    credentials: SqlCredentials<sqlx::Sqlite>,
    /// `<database>-keys`: replaced with fresh random contents on every
    /// revocation, so every process on the file sees it with one read.
    epoch_file: PathBuf,
    /// Appends go to one committer task ([`committer()`]), which writes
    /// every append waiting at that moment in one transaction — one fsync
    /// for many keys' events (group commit) — instead of each waiting in
    /// SQLite's busy handler, which polls with growing sleeps. (Other
    /// processes on the file still meet the busy handler.)
    appends: tokio::sync::mpsc::UnboundedSender<Append>,
    /// The WAL index's change mark ([`crate::wal_mark`]).
    mark: Option<Arc<WalMark>>,
}

impl SqliteStore {
    /// Marks that a key was revoked: the epoch file is replaced by one with
    /// fresh random contents, written aside under a fresh random name that
    /// must not exist yet (so a planted file or link there is never
    /// written through), owner-only, then renamed into place — a reader
    /// sees the old or the new contents, never a mix.
    fn bump_key_epoch(&self) {
        let written = crate::random::random_bytes::<16>().and_then(|bytes| {
            crate::private_fs::replace_private_file(&self.epoch_file, &bytes)
                .map_err(|e| StoreError::io(&self.epoch_file, e))
        });
        if let Err(e) = written {
            tracing::warn!(path = %self.epoch_file.display(), "cannot mark a key revocation: {e}");
        }
    }
}

impl SqliteStore {
    pub(crate) async fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        match create_new_private_file(path) {
            Ok(_) => tracing::info!(path = %path.display(), "created new database"),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(StoreError::io(path, e)),
        }

        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(false)
            .busy_timeout(BUSY_TIMEOUT)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            // 512 KiB of page cache per connection, not SQLite's 2 MB: with
            // eight connections the default grows to 16 MB as the store
            // does, a copy of pages the OS caches anyway. Reads of a key's
            // events touch a few index and table pages; a miss is a read
            // from the OS cache. Scale phase: memory per open plan 3.7 ->
            // 3.3 KB, `get_plan` at 10,000 keys no slower.
            .pragma("cache_size", "-512");
        // journal_mode is set once below, not per connection: switching
        // modes takes a lock the busy timeout does not wait for, and WAL is
        // a persistent property of the file anyway.
        // No ping before handing out a pooled connection (sqlx's default):
        // a SQLite connection cannot have been hung up on, and the ping is
        // a round trip to the connection's thread on every use.
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .test_before_acquire(false)
            .connect_with(options)
            .await?;

        enable_wal(&pool, path).await?;
        migrate(&pool).await?;
        let mark = Some(Arc::new(WalMark::new(path)));
        let mut epoch_file = path.as_os_str().to_owned();
        epoch_file.push("-keys");
        let (appends, jobs) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(committer(pool.clone(), mark.clone(), jobs));
        Ok(SqliteStore {
            credentials: SqlCredentials::new(pool.clone()),
            pool,
            epoch_file: PathBuf::from(epoch_file),
            appends,
            mark,
        })
    }
}

/// Switches the file to WAL, retrying while another process holds the lock
/// that the switch needs.
async fn enable_wal(pool: &SqlitePool, path: &Path) -> Result<(), StoreError> {
    let deadline = Instant::now() + BUSY_TIMEOUT;
    loop {
        match sqlx::query_scalar::<_, String>("PRAGMA journal_mode = WAL")
            .fetch_one(pool)
            .await
        {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(mode) => {
                return Err(StoreError::WalUnavailable {
                    path: PathBuf::from(path),
                    mode,
                });
            }
            Err(e) if is_busy(&e) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Whether SQLite answered SQLITE_BUSY or SQLITE_LOCKED (any extended code).
fn is_busy(e: &sqlx::Error) -> bool {
    let Some(db) = e.as_database_error() else {
        return false;
    };
    db.code()
        .and_then(|c| c.parse::<i32>().ok())
        .is_some_and(|code| matches!(code & 0xff, 5 | 6))
}

// === impl Store for SqliteStore ===

forward_credentials!(SqliteStore {
    async fn revoke_key(&self, name_or_id: &str) -> Result<ApiKey, StoreError> {
        // The epoch moves before and after the change: a gateway that
        // re-filled its cache in between sees the second move.
        self.bump_key_epoch();
        let revoked = self.credentials.revoke_key(name_or_id).await;
        self.bump_key_epoch();
        revoked
    }

    fn key_epoch(&self) -> Option<KeyEpoch> {
        match std::fs::read(&self.epoch_file) {
            Ok(bytes) => <[u8; 16]>::try_from(bytes.as_slice()).ok().map(KeyEpoch),
            // No revocation yet: the file appears with the first one.
            Err(e) if e.kind() == io::ErrorKind::NotFound => Some(KeyEpoch([0; 16])),
            Err(_) => None,
        }
    }
});

forward_event_reads!(SqliteStore, sqlx::Sqlite {
    async fn append_events_marked(
        &self,
        key_id: &str,
        expected_key_seq: i64,
        events: &[NewEvent],
    ) -> Result<(i64, Option<LogMark>), StoreError> {
        let rows = rows_of(events)?;
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.appends
            .send(Append {
                key_id: key_id.to_owned(),
                expected: expected_key_seq,
                rows,
                mark: None,
                reply,
            })
            .map_err(|_| committer_stopped())?;
        answer.await.map_err(|_| committer_stopped())?
    }

    async fn append_together(
        &self,
        parts: &[crate::AppendPart],
    ) -> Result<Vec<i64>, StoreError> {
        let jobs = parts
            .iter()
            .map(|p| Ok((p.key_id.as_str(), p.expected_key_seq, rows_of(&p.events)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        committer::append_together(&self.pool, &jobs).await
    }

    fn log_mark(&self) -> Option<LogMark> {
        self.mark.as_ref()?.read()
    }
});

/// `events` as the committer's rows, each checked as every backend does.
fn rows_of(events: &[NewEvent]) -> Result<Vec<committer::Row>, StoreError> {
    events
        .iter()
        .map(|e| {
            checked_body_text(e).map(|body| committer::Row {
                at_ms: e.at_ms,
                kind: e.kind.clone(),
                body,
                hash: e.seal.as_ref().map(|s| s.hash.clone()),
                sig: e.seal.as_ref().and_then(|s| s.sig.clone()),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EventLog;

    #[tokio::test]
    async fn every_connection_is_durable_waits_for_locks_and_checks_foreign_keys() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(&tmp.path().join("plangate.db"))
            .await
            .expect("open");
        // Hold several connections at once so more than the first is checked.
        let mut conns = Vec::new();
        for _ in 0..3 {
            conns.push(store.pool.acquire().await.expect("acquire"));
        }
        for conn in &mut conns {
            let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
                .fetch_one(&mut **conn)
                .await
                .expect("synchronous");
            assert_eq!(synchronous, 2, "synchronous must be FULL");
            let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
                .fetch_one(&mut **conn)
                .await
                .expect("busy_timeout");
            assert_eq!(busy, 5000);
            let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
                .fetch_one(&mut **conn)
                .await
                .expect("foreign_keys");
            assert_eq!(fk, 1);
            let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
                .fetch_one(&mut **conn)
                .await
                .expect("journal_mode");
            assert_eq!(mode, "wal");
        }
    }

    #[test]
    fn a_pool_timeout_is_not_a_busy_database() {
        // Only database errors count; a pool timeout is not "busy".
        assert!(!is_busy(&sqlx::Error::PoolTimedOut));
    }

    pub(super) fn one_event() -> Vec<crate::NewEvent> {
        vec![crate::NewEvent {
            at_ms: 1,
            kind: "session_begun".to_owned(),
            body: serde_json::json!({}),
            seal: None,
        }]
    }

    #[tokio::test]
    async fn the_log_mark_moves_with_every_commit_by_anyone_and_holds_still_otherwise() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("plangate.db");
        // Two stores on one file: two processes, as far as the file knows.
        let a = SqliteStore::open(&path).await.expect("open a");
        let b = SqliteStore::open(&path).await.expect("open b");
        let start = a.log_mark().expect("a WAL database has a mark");
        assert_eq!(b.log_mark(), Some(start), "one file, one mark");

        // Reads commit nothing.
        a.load_events("key_a", 0).await.expect("load");
        b.last_seq().await.expect("last seq");
        assert_eq!(a.log_mark(), Some(start));

        // Every commit moves it, whoever makes it, and never back.
        let mut seen = vec![start];
        for (i, store) in [&b, &a, &b].into_iter().enumerate() {
            store
                .append_events("key_a", i as i64, &one_event())
                .await
                .expect("append");
            let now = a.log_mark().expect("mark");
            assert!(!seen.contains(&now), "commit {i} left the mark at {now:?}");
            seen.push(now);
        }
        // A refused append (stale expectation) commits no event.
        let before = a.log_mark();
        let refused = a.append_events("key_a", 0, &one_event()).await;
        assert!(
            matches!(refused, Err(StoreError::Conflict { .. })),
            "{refused:?}"
        );
        let after_refusal = a.log_mark();
        assert!(
            after_refusal == before || !seen.contains(&after_refusal.expect("mark")),
            "a mark never comes back"
        );

        // A checkpoint that restarts the log, then a commit: still a new mark.
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&a.pool)
            .await
            .expect("checkpoint");
        b.append_events("key_a", 3, &one_event())
            .await
            .expect("append after checkpoint");
        let now = a.log_mark().expect("mark after checkpoint");
        assert!(!seen.contains(&now));

        // The other "process" going away leaves this one's mark readable
        // and unchanged (and its connections' locks on the file in place:
        // the mark's descriptor is never closed).
        drop(b);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(a.log_mark(), Some(now));
        a.append_events("key_a", 4, &one_event())
            .await
            .expect("append alone");
        assert_ne!(a.log_mark(), Some(now));
    }
}
