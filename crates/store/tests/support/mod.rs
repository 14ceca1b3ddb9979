//! A fresh PostgreSQL schema per test, so tests run in parallel on one
//! database without seeing each other, and are dropped afterwards.
//!
//! The server comes from `PLANGATE_TEST_POSTGRES_URL`. Unset, the
//! PostgreSQL runs return early with a note — but never in CI (`CI` set),
//! where that is a failure, as is a server that cannot be reached.

#![allow(dead_code)] // each test crate uses part of it

use std::future::Future;

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
