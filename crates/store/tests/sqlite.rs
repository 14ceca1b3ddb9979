//! What only the SQLite backend promises: file modes, what lands on disk,
//! and safe concurrent first starts on one file.

mod support;

use std::path::Path;

use plangate_core::Scope;
use plangate_store::{DataDir, NewEvent, open_sqlite};
use serde_json::json;
use sqlx::Connection;
use sqlx::sqlite::SqliteConnection;
use support::{REFUSED_BY_THE_LOG, assert_stored_as_hash, events, open_six_at_once};

async fn raw_connection(path: &Path) -> SqliteConnection {
    SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .expect("raw connection")
}

#[tokio::test]
async fn the_database_holds_the_token_hash_and_never_the_token() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("plangate.db");
    let store = open_sqlite(&path).await.expect("open");
    let created = store.create_key("ci", Scope::Write).await.expect("create");
    let body = &created.token[4..];

    let mut conn = raw_connection(&path).await;
    let (hash, prefix): (String, String) =
        sqlx::query_as("SELECT token_sha256, prefix FROM api_keys WHERE id = ?")
            .bind(&created.key.id)
            .fetch_one(&mut conn)
            .await
            .expect("row");
    assert_stored_as_hash(&hash, &prefix, &created.token);
    conn.close().await.expect("close");

    // No file SQLite wrote (main file, write-ahead log) holds the token, or
    // even the part of it after the shown prefix.
    let mut seen_hash = false;
    for entry in std::fs::read_dir(tmp.path()).expect("read_dir") {
        let bytes = std::fs::read(entry.expect("entry").path()).expect("read");
        assert!(!contains(&bytes, created.token.as_bytes()));
        assert!(!contains(&bytes, body.as_bytes()));
        assert!(!contains(&bytes, &created.token.as_bytes()[12..]));
        seen_hash |= contains(&bytes, hash.as_bytes());
    }
    assert!(seen_hash, "the hash should be on disk, so the scan is real");
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The database file is in WAL mode, as a raw connection reads it.
async fn assert_wal_mode(conn: &mut SqliteConnection) {
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(conn)
        .await
        .expect("pragma");
    assert_eq!(mode, "wal");
}

#[cfg(unix)]
#[tokio::test]
async fn the_data_dir_is_0700_and_the_database_0600() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;

    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = DataDir::open(tmp.path().join("state")).expect("data dir");
    let store = open_sqlite(&dir.sqlite_path()).await.expect("open");
    store.create_key("k", Scope::Read).await.expect("create");

    assert_eq!(mode(dir.path()), 0o700);
    assert_eq!(mode(&dir.sqlite_path()), 0o600);
    let wal = dir.path().join("plangate.db-wal");
    assert!(wal.exists(), "the database should be in WAL mode");
    assert_eq!(mode(&wal), 0o600);
}

#[tokio::test]
async fn the_file_is_left_in_wal_mode() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("plangate.db");
    drop(open_sqlite(&path).await.expect("open"));
    let mut conn = raw_connection(&path).await;
    assert_wal_mode(&mut conn).await;
    let versions: Vec<i64> = sqlx::query_scalar("SELECT version FROM schema_migrations")
        .fetch_all(&mut conn)
        .await
        .expect("migrations");
    assert_eq!(versions, [1, 2, 3, 4, 5, 6, 7, 8, 9]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn processes_starting_at_once_on_a_new_file_all_open_it() {
    for _ in 0..5 {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("plangate.db");
        open_six_at_once(|| {
            let path = path.clone();
            async move { open_sqlite(&path).await.expect("concurrent open") }
        })
        .await;
        let mut conn = raw_connection(&path).await;
        let migrations: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM schema_migrations")
            .fetch_one(&mut conn)
            .await
            .expect("count");
        assert_eq!(migrations, 9);
    }
}

#[tokio::test]
async fn the_event_log_refuses_updates_deletes_and_gaps_even_from_raw_sql() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("plangate.db");
    let store = open_sqlite(&path).await.expect("open");
    let events = events(2);
    store
        .append_events("key_a", 0, &events)
        .await
        .expect("append");
    let before = store.export_events(None, None).await.expect("export");

    let mut conn = raw_connection(&path).await;
    for sql in REFUSED_BY_THE_LOG {
        let err = sqlx::query(sql).execute(&mut conn).await.expect_err(sql);
        assert!(err.as_database_error().is_some(), "{sql}: {err}");
    }
    let err = sqlx::query("DELETE FROM events")
        .execute(&mut conn)
        .await
        .expect_err("delete");
    assert!(err.to_string().contains("append-only"), "{err}");
    conn.close().await.expect("close");

    assert_eq!(
        store.export_events(None, None).await.expect("export"),
        before
    );
    // The next append in order still works.
    assert_eq!(
        store
            .append_events("key_a", 2, &events[..1])
            .await
            .expect("append"),
        3
    );
}

#[tokio::test]
async fn the_file_is_still_in_wal_mode_after_events_are_appended() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("plangate.db");
    let store = open_sqlite(&path).await.expect("open");
    store
        .append_events(
            "key_a",
            0,
            &[NewEvent {
                at_ms: 1,
                kind: "session_begun".to_owned(),
                body: json!({}),
                seal: None,
            }],
        )
        .await
        .expect("append");
    drop(store);
    assert!(tmp.path().join("plangate.db-wal").exists());
    let mut conn = raw_connection(&path).await;
    assert_wal_mode(&mut conn).await;
    let bodies: Vec<(String, String)> = sqlx::query_as("SELECT type, body FROM events")
        .fetch_all(&mut conn)
        .await
        .expect("rows");
    assert_eq!(bodies, [("session_begun".to_owned(), "{}".to_owned())]);
}

#[tokio::test]
async fn the_key_epoch_moves_with_every_revocation_as_every_process_sees_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("plangate.db");
    // Two handles on one file stand for two processes.
    let gateway = open_sqlite(&path).await.expect("open");
    let cli = open_sqlite(&path).await.expect("open again");
    let first = gateway.key_epoch().expect("SQLite offers an epoch");
    cli.create_key("a", Scope::Write).await.expect("create");
    cli.create_key("b", Scope::Write).await.expect("create");
    assert_eq!(
        gateway.key_epoch(),
        Some(first),
        "creating keys revokes none"
    );

    cli.revoke_key("a").await.expect("revoke");
    let second = gateway.key_epoch().expect("epoch");
    assert_ne!(second, first, "a revocation moves the epoch");
    assert_eq!(gateway.key_epoch(), Some(second), "and it stays put after");

    // Even a revocation that finds nothing moves it: the epoch says "look
    // again", never "nothing changed" by mistake.
    assert!(cli.revoke_key("nobody").await.is_err());
    let third = gateway.key_epoch().expect("epoch");
    assert_ne!(third, second);
    cli.revoke_key("b").await.expect("revoke");
    assert_ne!(gateway.key_epoch(), Some(third));
}

#[cfg(unix)]
#[tokio::test]
async fn a_revocation_never_writes_through_a_planted_link() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("plangate.db");
    let store = open_sqlite(&path).await.expect("open");
    store.create_key("k", Scope::Read).await.expect("create");
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, "precious").expect("victim");
    // Links where the revocation writes: the temporary name it used to
    // write through, and the epoch file itself.
    std::os::unix::fs::symlink(&victim, tmp.path().join("plangate.db-keys.tmp")).expect("link");
    let before = store.key_epoch();
    store.revoke_key("k").await.expect("revoke");
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious"
    );
    assert_ne!(store.key_epoch(), before, "the revocation was marked");

    store.create_key("k2", Scope::Read).await.expect("create");
    let epoch = tmp.path().join("plangate.db-keys");
    std::fs::remove_file(&epoch).expect("remove");
    std::os::unix::fs::symlink(&victim, &epoch).expect("link");
    store.revoke_key("k2").await.expect("revoke");
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious"
    );
    let meta = std::fs::symlink_metadata(&epoch).expect("epoch");
    assert!(
        meta.file_type().is_file(),
        "the link was replaced, not followed"
    );
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
}
