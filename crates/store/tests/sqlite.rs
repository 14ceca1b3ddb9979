//! What only the SQLite backend promises: file modes, what lands on disk,
//! and safe concurrent first starts on one file.

use std::path::Path;

use plangate_core::Scope;
use plangate_store::{DataDir, open_sqlite};
use sqlx::Connection;
use sqlx::sqlite::SqliteConnection;

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
    use sha2::Digest as _;
    assert_eq!(
        hash,
        hex::encode(sha2::Sha256::digest(created.token.as_bytes()))
    );
    assert_eq!(prefix, created.token[..12]);
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
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .expect("pragma");
    assert_eq!(mode, "wal");
    let versions: Vec<i64> = sqlx::query_scalar("SELECT version FROM schema_migrations")
        .fetch_all(&mut conn)
        .await
        .expect("migrations");
    assert_eq!(versions, [1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn processes_starting_at_once_on_a_new_file_all_open_it() {
    for _ in 0..5 {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("plangate.db");
        let opens: Vec<_> = (0..6)
            .map(|i| {
                let path = path.clone();
                tokio::spawn(async move {
                    let store = open_sqlite(&path).await.expect("concurrent open");
                    store
                        .create_key(&format!("k{i}"), Scope::Read)
                        .await
                        .expect("create");
                    store
                })
            })
            .collect();
        let mut stores = Vec::new();
        for open in opens {
            stores.push(open.await.expect("task"));
        }
        for store in &stores {
            assert_eq!(store.list_keys().await.expect("list").len(), 6);
        }
        let mut conn = raw_connection(&path).await;
        let migrations: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM schema_migrations")
            .fetch_one(&mut conn)
            .await
            .expect("count");
        assert_eq!(migrations, 1);
    }
}
