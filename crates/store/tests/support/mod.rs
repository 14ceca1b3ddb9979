//! A fresh PostgreSQL schema per test, so tests run in parallel on one
//! database without seeing each other, and are dropped afterwards; and
//! the checks the SQLite and PostgreSQL suites both make of their backend.
//!
//! The server comes from `PLANGATE_TEST_POSTGRES_URL`. Unset, the
//! PostgreSQL runs return early with a note — but never in CI (`CI` set),
//! where that is a failure, as is a server that cannot be reached.

#![allow(dead_code)] // each test crate uses part of it

use std::future::Future;
use std::sync::Arc;

use plangate_core::Scope;
use plangate_store::{NewEvent, Store};
use serde_json::json;
use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// The variable naming the PostgreSQL server tests use.
pub const URL_VAR: &str = "PLANGATE_TEST_POSTGRES_URL";

/// The test server's URL, or `None` (with a note) when none is configured
/// outside CI.
pub fn postgres_url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!("{URL_VAR} must be set in CI: PostgreSQL tests never skip there")
        }
        _ => {
            eprintln!("{URL_VAR} is not set: the PostgreSQL run of this test is skipped");
            None
        }
    }
}

/// A uniquely named schema in the test database.
pub struct PgSchema {
    server_url: String,
    name: String,
}

impl PgSchema {
    /// Creates a new empty schema on the server at `server_url`.
    pub async fn create(server_url: &str) -> PgSchema {
        let name = plangate_store::new_id("plangate_test_").expect("random schema name");
        let mut conn = connect(server_url).await;
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE SCHEMA {name}")))
            .execute(&mut conn)
            .await
            .expect("create schema");
        conn.close().await.expect("close");
        PgSchema {
            server_url: server_url.to_owned(),
            name,
        }
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A URL whose connections create and find tables in this schema only.
    pub fn url(&self) -> String {
        with_param(
            &self.server_url,
            &format!("options=-c%20search_path%3D{}", self.name),
        )
    }

    /// A raw connection with this schema as its search_path.
    pub async fn connect(&self) -> PgConnection {
        connect(&self.url()).await
    }

    /// Drops the schema and everything in it.
    pub async fn drop_schema(self) {
        let mut conn = connect(&self.server_url).await;
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            self.name
        )))
        .execute(&mut conn)
        .await
        .expect("drop schema");
        conn.close().await.expect("close");
    }
}

/// Runs `test` with the URL of a fresh schema on `server_url`, then drops
/// the schema — also when the test panics, whose panic then goes on.
pub async fn with_schema<F, Fut>(server_url: &str, test: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let schema = PgSchema::create(server_url).await;
    let outcome = tokio::spawn(test(schema.url())).await;
    schema.drop_schema().await;
    if let Err(e) = outcome {
        match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(e) => panic!("test task failed: {e}"),
        }
    }
}

/// [`with_schema`] on the test server, or nothing (with a note) when there is none.
pub async fn on_fresh_schema<F, Fut>(test: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(server) = postgres_url() else { return };
    with_schema(&server, test).await;
}

/// `n` `mode_set` events, numbered by `at_ms` and in their bodies.
pub fn events(n: i64) -> Vec<NewEvent> {
    (0..n)
        .map(|i| NewEvent {
            at_ms: i,
            kind: "mode_set".to_owned(),
            body: json!({"mode": "plan", "i": i}),
            seal: None,
        })
        .collect()
}

/// Raw SQL every backend's event log refuses: updates, deletes, gaps and bad rows.
pub const REFUSED_BY_THE_LOG: [&str; 8] = [
    "UPDATE events SET body = '{}' WHERE key_seq = 1",
    "UPDATE events SET key_seq = key_seq + 10",
    "DELETE FROM events WHERE key_seq = 2",
    "DELETE FROM events",
    "INSERT INTO events (key_id, key_seq, at_ms, type, body) VALUES ('key_a', 4, 0, 'x', '{}')",
    "INSERT INTO events (key_id, key_seq, at_ms, type, body) VALUES ('key_a', 2, 0, 'x', '{}')",
    "INSERT INTO events (key_id, key_seq, at_ms, type, body) VALUES ('key_b', 0, 0, 'x', '{}')",
    "INSERT INTO events (key_id, key_seq, at_ms, type, body) VALUES ('key_b', 1, 0, 'x', 'not json')",
];

/// A key row stores `token` only as its SHA-256 (`hash`) and shown `prefix`.
pub fn assert_stored_as_hash(hash: &str, prefix: &str, token: &str) {
    use sha2::Digest as _;
    assert_eq!(hash, hex::encode(sha2::Sha256::digest(token.as_bytes())));
    assert_eq!(prefix, &token[..12]);
}

/// Six handles opened at once by `open`, each adding a key: each then sees all six.
pub async fn open_six_at_once<F, Fut>(open: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Store>> + Send + 'static,
{
    let opens: Vec<_> = (0..6)
        .map(|i| {
            let opening = open();
            tokio::spawn(async move {
                let store = opening.await;
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
}

/// `url` with one more query parameter.
pub fn with_param(url: &str, param: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{param}")
}

async fn connect(url: &str) -> PgConnection {
    match PgConnection::connect(url).await {
        Ok(conn) => conn,
        Err(e) => panic!(
            "cannot reach the test PostgreSQL ({URL_VAR}): {e}; start it, or unset {URL_VAR} to skip these tests outside CI"
        ),
    }
}
