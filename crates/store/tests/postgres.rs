//! What only the PostgreSQL backend promises: tokens stored as hashes, an
//! append-only log even against raw SQL, safe concurrent first starts of
//! several replicas, appends serialized so `seq` is readable in commit
//! order, and a URL whose password never reaches an error.
//!
//! Each test runs in a fresh schema of the database named by
//! `PLANGATE_TEST_POSTGRES_URL` (see `support`).

mod support;

use std::time::Duration;

use plangate_core::Scope;
use plangate_store::{NewEvent, StoreConfig, open_postgres};
use serde_json::json;
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use support::{
    REFUSED_BY_THE_LOG, assert_stored_as_hash, events, on_fresh_schema, open_six_at_once,
    postgres_url, with_schema,
};

async fn raw(url: &str) -> PgConnection {
    PgConnection::connect(url).await.expect("raw connection")
}

/// A raw connection (another replica, as slow as it likes) that has
/// inserted `key_id`'s first event and not committed: its row holds the
/// counter's lock and the next seq until it commits.
async fn uncommitted_first_event(url: &str, key_id: &str) -> PgConnection {
    let mut conn = raw(url).await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "BEGIN; INSERT INTO events (key_id, key_seq, at_ms, type, body)
         VALUES ('{key_id}', 1, 0, 'mode_set', '{{}}')"
    )))
    .execute(&mut conn)
    .await
    .expect("uncommitted insert");
    conn
}

#[tokio::test]
async fn the_database_holds_the_token_hash_and_never_the_token() {
    on_fresh_schema(|url| async move {
        let store = open_postgres(&url).await.expect("open");
        let created = store.create_key("ci", Scope::Write).await.expect("create");
        let mut conn = raw(&url).await;
        let (hash, prefix, whole_row): (String, String, String) = sqlx::query_as(
            "SELECT token_sha256, prefix, row_to_json(k)::text FROM api_keys k WHERE id = $1",
        )
        .bind(&created.key.id)
        .fetch_one(&mut conn)
        .await
        .expect("row");
        assert_stored_as_hash(&hash, &prefix, &created.token);
        assert!(!whole_row.contains(&created.token[12..]), "{whole_row}");
        // The schema itself refuses anything but a SHA-256 in hex.
        let err = sqlx::query(
            "INSERT INTO api_keys (id, name, scope, token_sha256, prefix, created_at_ms)
             VALUES ('key_0000000000000001', 'raw', 'read', $1, 'pgk_', 0)",
        )
        .bind(&created.token)
        .execute(&mut conn)
        .await
        .expect_err("a token is not a hash");
        assert!(err.as_database_error().is_some(), "{err}");
        conn.close().await.expect("close");
    })
    .await;
}

#[tokio::test]
async fn the_event_log_refuses_updates_deletes_truncation_and_gaps_even_from_raw_sql() {
    on_fresh_schema(|url| async move {
        let store = open_postgres(&url).await.expect("open");
        store
            .append_events("key_a", 0, &events(2))
            .await
            .expect("append");
        let before = store.export_events(None, None).await.expect("export");

        let mut conn = raw(&url).await;
        let also_refused = [
            "TRUNCATE events",
            // The counter that numbers events only moves forward.
            "UPDATE event_seq SET last_seq = 0",
            "DELETE FROM event_seq",
            "TRUNCATE event_seq",
            "INSERT INTO event_seq (only_row, last_seq) VALUES (FALSE, 0)",
        ];
        for sql in REFUSED_BY_THE_LOG.into_iter().chain(also_refused) {
            let err = sqlx::query(sql).execute(&mut conn).await.expect_err(sql);
            assert!(err.as_database_error().is_some(), "{sql}: {err}");
        }
        for (sql, word) in [
            ("DELETE FROM events", "deleted"),
            ("UPDATE events SET at_ms = 0", "updated"),
            ("TRUNCATE events", "truncated"),
        ] {
            let err = sqlx::query(sql).execute(&mut conn).await.expect_err(sql);
            let msg = err.to_string();
            assert!(msg.contains("append-only") && msg.contains(word), "{msg}");
        }
        assert_eq!(
            store.export_events(None, None).await.expect("export"),
            before
        );

        // A raw writer cannot choose its seq: the counter numbers its row
        // after the last one, as for any append.
        sqlx::query(
            "INSERT INTO events (seq, key_id, key_seq, at_ms, type, body)
             VALUES (1, 'key_b', 1, 0, 'x', '{}')",
        )
        .execute(&mut conn)
        .await
        .expect("an in-order raw insert");
        conn.close().await.expect("close");
        let after = store.export_events(None, None).await.expect("export");
        assert_eq!(after.len(), 3);
        assert_eq!(after[2].key_id, "key_b");
        assert_eq!(after[2].seq, before[1].seq + 1);
        // The next append in order still works.
        assert_eq!(
            store
                .append_events("key_a", 2, &events(1))
                .await
                .expect("append"),
            3
        );
    })
    .await;
}

#[tokio::test]
async fn bodies_come_back_as_the_exact_json_written() {
    on_fresh_schema(|url| async move {
        let store = open_postgres(&url).await.expect("open");
        // Key order, big integers, floats, escapes and NUL survive as
        // written (jsonb would reorder keys and refuse \u0000).
        let body =
            json!({"z": 1, "a": [1.5, 9007199254740993_u64, -0.0], "nul": "a\u{0}b", "ü": "\"q\""});
        store
            .append_events(
                "key_a",
                0,
                &[NewEvent {
                    at_ms: 1,
                    kind: "step_planned".to_owned(),
                    body: body.clone(),
                    seal: None,
                }],
            )
            .await
            .expect("append");
        let loaded = store.load_events("key_a", 0).await.expect("load");
        assert_eq!(loaded[0].body, body);
        let mut conn = raw(&url).await;
        let text: String = sqlx::query_scalar("SELECT body::text FROM events")
            .fetch_one(&mut conn)
            .await
            .expect("body");
        assert_eq!(text, serde_json::to_string(&body).expect("json"));
        conn.close().await.expect("close");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_starting_at_once_on_a_new_schema_all_open_it() {
    let Some(server) = postgres_url() else { return };
    for _ in 0..3 {
        with_schema(&server, |url| async move {
            open_six_at_once(|| {
                let url = url.clone();
                async move { open_postgres(&url).await.expect("concurrent open") }
            })
            .await;
            let mut conn = raw(&url).await;
            let versions: Vec<i64> =
                sqlx::query_scalar("SELECT version FROM schema_migrations ORDER BY version")
                    .fetch_all(&mut conn)
                    .await
                    .expect("migrations");
            assert_eq!(versions, [1, 2, 3, 4, 5, 6, 7, 8, 9]);
            conn.close().await.expect("close");
        })
        .await;
    }
}

#[tokio::test]
async fn a_schema_from_a_newer_plangate_is_refused() {
    on_fresh_schema(|url| async move {
        drop(open_postgres(&url).await.expect("open"));
        let mut conn = raw(&url).await;
        sqlx::query("INSERT INTO schema_migrations (version, applied_at_ms) VALUES (999, 0)")
            .execute(&mut conn)
            .await
            .expect("insert");
        conn.close().await.expect("close");
        let err = open_postgres(&url).await.err().expect("too new");
        assert_eq!(err.code(), "schema_too_new");
        assert!(err.to_string().contains("999"), "{err}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_uncommitted_append_holds_back_later_ones_so_a_follower_skips_nothing() {
    on_fresh_schema(|url| async move {
        let writer = open_postgres(&url).await.expect("open");
        let follower = open_postgres(&url).await.expect("open");

        // A writer (here raw SQL, as slow as it likes) inserts and has not
        // committed yet: its row has taken the next seq.
        let mut slow = uncommitted_first_event(&url, "key_slow").await;

        // Another append must wait: were it to commit first with a larger
        // seq, a follower reading now would pass the slow one's seq and
        // never see it.
        let fast = tokio::spawn(async move {
            writer
                .append_events("key_fast", 0, &events(1))
                .await
                .expect("append")
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!fast.is_finished(), "the later append waited");
        assert!(follower.events_since(0, 10).await.expect("tail").is_empty());

        sqlx::raw_sql("COMMIT")
            .execute(&mut slow)
            .await
            .expect("commit");
        assert_eq!(fast.await.expect("task"), 1);
        let tail = follower.events_since(0, 10).await.expect("tail");
        let order: Vec<_> = tail.iter().map(|e| (e.key_id.as_str(), e.seq)).collect();
        assert_eq!(order, [("key_slow", 1), ("key_fast", 2)]);
        slow.close().await.expect("close");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lone_append_that_loses_a_race_on_its_key_is_a_conflict_not_an_error() {
    on_fresh_schema(|url| async move {
        let store = open_postgres(&url).await.expect("open");

        // Another replica (raw SQL) has appended the key's first event and
        // not committed: the store's guard, reading a snapshot from before
        // that commit, finds the key empty, as expected.
        let mut other = uncommitted_first_event(&url, "key_race").await;

        let racing = tokio::spawn({
            let store = store.clone();
            async move { store.append_events("key_race", 0, &events(2)).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!racing.is_finished(), "the append waited for the lock");
        sqlx::raw_sql("COMMIT")
            .execute(&mut other)
            .await
            .expect("commit");

        let err = racing
            .await
            .expect("task")
            .expect_err("the key moved on meanwhile");
        assert!(
            matches!(
                err,
                plangate_store::StoreError::Conflict {
                    expected: 0,
                    found: 1,
                    ..
                }
            ),
            "{err:?}"
        );
        // Nothing of the losing append was written, no seq was used up,
        // and the store goes on appending.
        assert_eq!(
            store
                .append_events("key_race", 1, &events(1))
                .await
                .expect("append"),
            2
        );
        let tail = store.events_since(0, 10).await.expect("tail");
        let rows: Vec<_> = tail.iter().map(|e| (e.seq, e.key_seq)).collect();
        assert_eq!(rows, [(1, 1), (2, 2)]);
        other.close().await.expect("close");
    })
    .await;
}

#[tokio::test]
async fn a_password_in_the_url_never_reaches_an_error_message() {
    // No server needed: nothing listens on port 1, and the other URLs do
    // not parse.
    for url in [
        "postgres://plangate:hunter2@127.0.0.1:1/plangate",
        "postgres://plangate:hunter2@127.0.0.1:notaport/plangate",
        "postgresql://plangate@127.0.0.1:1/plangate?password=hunter2",
        "postgres://plangate:hunter2@127.0.0.1:1/plangate?sslmode=bogus",
    ] {
        let config = StoreConfig::from_url(url).expect("a postgres url");
        let err = config.open().await.err().expect("unreachable");
        for shown in [
            err.to_string(),
            format!("{err:?}"),
            config.to_string(),
            format!("{config:?}"),
        ] {
            assert!(!shown.contains("hunter2"), "{url}: {shown}");
        }
    }
}

/// When the server ends plangate's connections (a restart, an
/// administrator), a pooled connection idle for a second or more is
/// pinged and replaced before use, and the committer's own connection
/// fails one batch at most, then is replaced: nothing is lost and nothing
/// is written twice.
#[tokio::test]
async fn connections_the_server_ended_are_replaced() {
    on_fresh_schema(|url| async move {
        let app = plangate_store::new_id("plangate_kill_").expect("name");
        let url = support::with_param(&url, &format!("application_name={app}"));
        let store = open_postgres(&url).await.expect("open");
        let key = store.create_key("agent", Scope::Write).await.expect("key");
        store
            .append_events("key_a", 0, &events(1))
            .await
            .expect("first append");

        let mut admin = raw(&url).await;
        let ended: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()",
        )
        .bind(&app)
        .fetch_all(&mut admin)
        .await
        .expect("terminate");
        assert!(ended.len() >= 2, "pool and committer connections: {ended:?}");
        tokio::time::sleep(Duration::from_millis(1200)).await;

        // Idle for more than a second: pinged, found dead, replaced.
        let found = store.find_key(&key.key.id).await.expect("read after the kill");
        assert_eq!(found.map(|k| k.name), Some("agent".to_owned()));
        // The committer's connection: at most one batch fails, unwritten.
        let mut last = 1;
        let mut failures = 0;
        while last < 3 {
            match store.append_events("key_a", last, &events(1)).await {
                Ok(n) => last = n,
                Err(e) => {
                    failures += 1;
                    assert!(failures <= 1, "a second failure: {e}");
                    assert_eq!(store.last_key_seq("key_a").await.expect("last"), last);
                }
            }
        }
        assert_eq!(store.load_events("key_a", 0).await.expect("load").len(), 3);
    })
    .await;
}
