//! The store contract, run against every backend.
//!
//! Each test is an async fn taking a [`Fixture`]; the `conformance!` macro
//! runs it on SQLite, and on PostgreSQL when `PLANGATE_TEST_POSTGRES_URL`
//! is set (always in CI), each PostgreSQL run in a fresh schema of its own
//! so tests run in parallel. A fixture can open several handles on one
//! store, like several plangate processes (or replicas) sharing it.

mod support;

use std::sync::Arc;

use plangate_core::Scope;
use plangate_store::{CreatedKey, NewEvent, Store, StoreConfig, StoreError, StoredEvent};
use serde_json::json;

struct Fixture {
    _dir: Option<tempfile::TempDir>,
    config: StoreConfig,
}

impl Fixture {
    fn sqlite() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = StoreConfig::Sqlite(dir.path().join("plangate.db"));
        Fixture {
            _dir: Some(dir),
            config,
        }
    }

    /// The PostgreSQL database at `url` (a fresh schema, see `support`).
    fn postgres(url: String) -> Fixture {
        Fixture {
            _dir: None,
            config: StoreConfig::Postgres(url),
        }
    }

    /// A new, independent handle on the same store.
    async fn open(&self) -> Arc<dyn Store> {
        self.config.open().await.expect("open store")
    }
}

/// Creates the key `name`, which must succeed.
async fn new_key(store: &Arc<dyn Store>, name: &str, scope: Scope) -> CreatedKey {
    store.create_key(name, scope).await.expect("create")
}

/// Spawns `tasks` tasks of `task(t, handle)` on alternate `handles`, all released at once.
fn at_once<T, Fut>(
    handles: &[Arc<dyn Store>; 2],
    tasks: usize,
    task: impl Fn(usize, Arc<dyn Store>) -> Fut,
) -> Vec<tokio::task::JoinHandle<T>>
where
    T: Send + 'static,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let barrier = Arc::new(tokio::sync::Barrier::new(tasks));
    (0..tasks)
        .map(|t| {
            let run = task(t, handles[t % 2].clone());
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                run.await
            })
        })
        .collect()
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                // Several worker threads, so tasks in a test really race.
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name(super::Fixture::sqlite()).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::support::on_fresh_schema(|url| {
                        super::$name(super::Fixture::postgres(url))
                    })
                    .await;
                }
            )*
        }
    };
}

conformance!(
    create_list_revoke_authenticate_round_trip,
    a_revoked_key_no_longer_authenticates,
    authenticating_with_the_log_seen_answers_the_same_key_and_where_its_log_stands,
    names_are_unique_among_active_keys_and_reusable_after_revoke,
    malformed_and_unknown_tokens_are_none_not_errors,
    invalid_names_are_refused_and_nothing_is_stored,
    revoke_finds_by_name_or_id_and_reports_unknown,
    keys_are_listed_in_creation_order,
    two_handles_on_one_store_see_each_others_keys,
    keys_survive_reopening,
    find_key_finds_by_name_or_id_without_revoking,
    appended_events_load_back_in_key_seq_order,
    an_append_with_a_stale_expected_seq_is_a_conflict,
    a_conflicting_batch_writes_nothing,
    an_empty_batch_checks_without_writing,
    a_long_append_lands_whole_and_is_checked_as_one,
    an_event_without_a_type_is_refused_and_fails_its_batch,
    keys_have_independent_sequences,
    two_handles_racing_for_the_same_key_seq_have_exactly_one_winner,
    two_handles_appending_with_retries_lose_nothing,
    two_handles_appending_to_many_keys_at_once_lose_nothing,
    appends_to_many_keys_waiting_together_each_keep_their_own_check,
    export_filters_by_key_and_time_in_global_order,
    events_since_pages_through_the_global_tail,
    a_follower_polling_during_concurrent_appends_misses_nothing,
    events_survive_reopening,
    operator_tokens_create_list_authenticate_and_revoke,
    operator_tokens_and_api_keys_never_stand_in_for_each_other,
    operator_names_are_unique_among_active_tokens_and_invalid_ones_store_nothing,
    an_operator_token_revoked_through_one_handle_fails_through_another,
    a_console_session_logged_out_through_one_handle_is_ended_through_another,
    many_writers_on_many_keys_keep_each_compare_and_set_and_every_append_whole,
    an_oauth_identity_is_recorded_once_found_by_name_and_revocable,
    upstream_credentials_are_saved_replaced_and_cleared,
    undo_states_are_kept_replaced_read_and_dropped_by_age,
    the_outbox_holds_each_message_once_claims_it_for_one_handle_and_records_every_attempt,
    the_notifiers_position_only_moves_forward,
    appending_to_several_keys_together_writes_all_or_nothing,
);

async fn create_list_revoke_authenticate_round_trip(f: Fixture) {
    let store = f.open().await;
    let created = store.create_key("ci", Scope::Plan).await.expect("create");
    assert_eq!(created.key.name, "ci");
    assert_eq!(created.key.scope, Scope::Plan);
    assert!(created.key.id.starts_with("key_") && created.key.id.len() == 20);
    assert!(created.token.starts_with("pgk_"));
    assert_eq!(created.key.prefix, created.token[..12]);
    assert!(created.key.is_active());

    assert_eq!(
        store.authenticate(&created.token).await.expect("auth"),
        Some(created.key.clone())
    );
    assert_eq!(
        store.list_keys().await.expect("list"),
        vec![created.key.clone()]
    );

    let revoked = store.revoke_key("ci").await.expect("revoke");
    assert_eq!(revoked.id, created.key.id);
    assert!(revoked.revoked_at_ms.is_some());
    assert_eq!(store.list_keys().await.expect("list"), vec![revoked]);
}

async fn a_revoked_key_no_longer_authenticates(f: Fixture) {
    let store = f.open().await;
    let keep = new_key(&store, "keep", Scope::Write).await;
    let gone = new_key(&store, "gone", Scope::Write).await;
    store.revoke_key(&gone.key.id).await.expect("revoke");
    assert_eq!(store.authenticate(&gone.token).await.expect("auth"), None);
    assert_eq!(
        store.authenticate(&keep.token).await.expect("auth"),
        Some(keep.key)
    );
}

async fn names_are_unique_among_active_keys_and_reusable_after_revoke(f: Fixture) {
    let store = f.open().await;
    let first = new_key(&store, "laptop", Scope::Read).await;
    let err = store
        .create_key("laptop", Scope::Write)
        .await
        .expect_err("duplicate name");
    assert!(
        matches!(&err, StoreError::KeyNameTaken(n) if n == "laptop"),
        "{err}"
    );
    assert_eq!(err.code(), "key_name_taken");
    assert!(err.to_string().contains("\"laptop\""), "{err}");

    store.revoke_key("laptop").await.expect("revoke");
    let second = store
        .create_key("laptop", Scope::Write)
        .await
        .expect("reuse");
    assert_ne!(first.key.id, second.key.id);
    assert_eq!(store.list_keys().await.expect("list").len(), 2);
    // The name now means the new key.
    let revoked = store.revoke_key("laptop").await.expect("revoke again");
    assert_eq!(revoked.id, second.key.id);
}

async fn malformed_and_unknown_tokens_are_none_not_errors(f: Fixture) {
    let store = f.open().await;
    let real = new_key(&store, "real", Scope::Write).await;
    let mut flipped = real.token.clone().into_bytes();
    let last = flipped.len() - 2;
    flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).expect("utf8");
    for token in [
        String::new(),
        "pgk_".to_owned(),
        "Bearer x".to_owned(),
        "pgk_' OR 1=1 --".to_owned(),
        format!("{} ", real.token),
        real.token.to_uppercase(),
        real.token[..real.token.len() - 1].to_owned(),
        flipped,
        "pgk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".to_owned(),
    ] {
        assert_eq!(
            store.authenticate(&token).await.expect("no error"),
            None,
            "{token:?}"
        );
    }
}

async fn invalid_names_are_refused_and_nothing_is_stored(f: Fixture) {
    let store = f.open().await;
    for name in ["", "a b", "x/y", &"n".repeat(65), "key_0123456789abcdef"] {
        let err = store.create_key(name, Scope::Read).await.expect_err(name);
        assert!(
            matches!(&err, StoreError::InvalidKeyName(n) if n == name),
            "{err}"
        );
    }
    assert!(store.list_keys().await.expect("list").is_empty());
}

async fn revoke_finds_by_name_or_id_and_reports_unknown(f: Fixture) {
    let store = f.open().await;
    let a = store.create_key("a", Scope::Read).await.expect("create");
    let by_id = store.revoke_key(&a.key.id).await.expect("revoke by id");
    assert_eq!(by_id.name, "a");
    let when = by_id.revoked_at_ms.expect("revoked");

    // The name no longer names an active key...
    let err = store.revoke_key("a").await.expect_err("no active key");
    assert!(
        matches!(&err, StoreError::KeyNotFound(n) if n == "a"),
        "{err}"
    );
    assert_eq!(err.code(), "key_not_found");
    // ...but the id still finds the key, and its revocation time stays.
    let again = store
        .revoke_key(&a.key.id)
        .await
        .expect("revoke by id again");
    assert_eq!(again.revoked_at_ms, Some(when));

    let err = store
        .revoke_key("key_0000000000000000")
        .await
        .expect_err("unknown id");
    assert!(matches!(err, StoreError::KeyNotFound(_)));
    let err = store.revoke_key("nobody").await.expect_err("unknown name");
    assert!(matches!(err, StoreError::KeyNotFound(_)));
}

async fn keys_are_listed_in_creation_order(f: Fixture) {
    let store = f.open().await;
    let names = ["zeta", "alpha", "mid", "beta"];
    for name in names {
        store.create_key(name, Scope::Read).await.expect("create");
    }
    store.revoke_key("alpha").await.expect("revoke");
    let listed: Vec<_> = store
        .list_keys()
        .await
        .expect("list")
        .into_iter()
        .map(|k| k.name)
        .collect();
    assert_eq!(listed, names);
}

async fn two_handles_on_one_store_see_each_others_keys(f: Fixture) {
    let one = f.open().await;
    let two = f.open().await;
    let created = one.create_key("shared", Scope::Plan).await.expect("create");
    assert_eq!(
        two.authenticate(&created.token).await.expect("auth"),
        Some(created.key.clone())
    );
    let err = two
        .create_key("shared", Scope::Read)
        .await
        .expect_err("taken across handles");
    assert!(matches!(err, StoreError::KeyNameTaken(_)));

    // A revocation through one handle takes effect at once in the other:
    // nothing is cached.
    two.revoke_key("shared").await.expect("revoke");
    assert_eq!(one.authenticate(&created.token).await.expect("auth"), None);
    assert_eq!(
        one.list_keys().await.expect("list"),
        two.list_keys().await.expect("list")
    );
}

async fn keys_survive_reopening(f: Fixture) {
    let created = {
        let store = f.open().await;
        store
            .create_key("durable", Scope::Write)
            .await
            .expect("create")
    };
    let store = f.open().await;
    assert_eq!(
        store.authenticate(&created.token).await.expect("auth"),
        Some(created.key)
    );
}

async fn find_key_finds_by_name_or_id_without_revoking(f: Fixture) {
    let store = f.open().await;
    let a = store.create_key("a", Scope::Plan).await.expect("create");
    assert_eq!(
        store.find_key("a").await.expect("by name"),
        Some(a.key.clone())
    );
    assert_eq!(
        store.find_key(&a.key.id).await.expect("by id"),
        Some(a.key.clone())
    );
    // Finding changed nothing.
    assert_eq!(
        store.authenticate(&a.token).await.expect("auth"),
        Some(a.key.clone())
    );

    let revoked = store.revoke_key("a").await.expect("revoke");
    // A revoked key is found by id, not by name.
    assert_eq!(store.find_key("a").await.expect("by name"), None);
    assert_eq!(
        store.find_key(&a.key.id).await.expect("by id"),
        Some(revoked)
    );
    // A new key with the reused name is what the name finds.
    let b = store.create_key("a", Scope::Read).await.expect("reuse");
    assert_eq!(store.find_key("a").await.expect("by name"), Some(b.key));

    assert_eq!(store.find_key("nobody").await.expect("unknown"), None);
    assert_eq!(
        store
            .find_key("key_0000000000000000")
            .await
            .expect("unknown id"),
        None
    );
}

fn event(kind: &str, at_ms: i64, body: serde_json::Value) -> NewEvent {
    NewEvent {
        at_ms,
        kind: kind.to_owned(),
        body,
        seal: None,
    }
}

/// Checks that `events` are exactly `key_id`'s key_seq 1..=n, in order.
fn assert_gap_free(key_id: &str, events: &[StoredEvent]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.key_id, key_id);
        assert_eq!(e.key_seq, i64::try_from(i).expect("index") + 1, "{e:?}");
    }
}

async fn authenticating_with_the_log_seen_answers_the_same_key_and_where_its_log_stands(
    f: Fixture,
) {
    let store = f.open().await;
    let other = f.open().await;
    let mine = new_key(&store, "mine", Scope::Write).await;
    let theirs = new_key(&store, "theirs", Scope::Write).await;
    let seen = |token: String| {
        let store = store.clone();
        async move { store.authenticate_seen(&token).await.expect("auth") }
    };
    // PostgreSQL reads the log with the key and says where it stands;
    // SQLite (which has its log mark) says nothing. Never another key.
    let says = store.authenticate_sees_log();
    assert_eq!(says, matches!(f.config, StoreConfig::Postgres(_)));
    let (key, at) = seen(mine.token.clone()).await.expect("active key");
    assert_eq!(key, mine.key);
    assert_eq!(at, says.then_some(0));

    // Another handle (another replica) appends to this key and to
    // another: the key's own last key_seq, read fresh.
    let batch = [
        event("mode_set", 1, json!({"mode": "plan"})),
        event("mode_set", 2, json!({"mode": "act"})),
    ];
    other
        .append_events(&mine.key.id, 0, &batch)
        .await
        .expect("append");
    other
        .append_events(&theirs.key.id, 0, &batch[..1])
        .await
        .expect("append");
    let (_, at) = seen(mine.token.clone()).await.expect("active key");
    assert_eq!(at, says.then_some(2));
    let (_, at) = seen(theirs.token.clone()).await.expect("active key");
    assert_eq!(at, says.then_some(1));

    // Revoked, malformed and unknown tokens are none, as `authenticate`.
    other.revoke_key("mine").await.expect("revoke");
    assert_eq!(seen(mine.token.clone()).await, None);
    assert_eq!(seen("pgk_nope".to_owned()).await, None);
    assert_eq!(seen(String::new()).await, None);
}

async fn appended_events_load_back_in_key_seq_order(f: Fixture) {
    let store = f.open().await;
    assert_eq!(store.last_key_seq("key_a").await.expect("last"), 0);
    assert!(
        store
            .load_events("key_a", 0)
            .await
            .expect("load")
            .is_empty()
    );
    assert!(store.keys_with_events().await.expect("keys").is_empty());

    let first = [
        event("session_begun", 1_000, json!({"mode": "plan"})),
        event(
            "mode_set",
            1_001,
            json!({"mode": "plan", "nested": {"list": [1, 2.5, null, "ü"], "big": 9007199254740991_i64}}),
        ),
    ];
    assert_eq!(
        store
            .append_events("key_a", 0, &first)
            .await
            .expect("append"),
        2
    );
    let second = [event("step_planned", 900, json!({"step_id": "step_1"}))];
    assert_eq!(
        store
            .append_events("key_a", 2, &second)
            .await
            .expect("append"),
        3
    );
    assert_eq!(store.last_key_seq("key_a").await.expect("last"), 3);

    let loaded = store.load_events("key_a", 0).await.expect("load");
    assert_gap_free("key_a", &loaded);
    let as_new: Vec<NewEvent> = loaded
        .iter()
        .map(|e| event(&e.kind, e.at_ms, e.body.value()))
        .collect();
    assert_eq!(as_new, [&first[..], &second[..]].concat());
    // Global seq increases with each append, whatever at_ms says.
    assert!(loaded.windows(2).all(|w| w[0].seq < w[1].seq));

    // Loading after a key_seq returns only what follows it.
    let tail = store.load_events("key_a", 2).await.expect("load tail");
    assert_eq!(tail, loaded[2..]);
    assert!(
        store
            .load_events("key_a", 3)
            .await
            .expect("load none")
            .is_empty()
    );
    assert!(
        store
            .load_events("key_b", 0)
            .await
            .expect("other key")
            .is_empty()
    );
    assert_eq!(
        store.keys_with_events().await.expect("keys"),
        ["key_a".to_owned()]
    );
}

async fn an_append_with_a_stale_expected_seq_is_a_conflict(f: Fixture) {
    let store = f.open().await;
    store
        .append_events("key_a", 0, &[event("mode_set", 1, json!({"n": 1}))])
        .await
        .expect("append");
    for stale in [0, 2, 5, -1] {
        let err = store
            .append_events("key_a", stale, &[event("mode_set", 2, json!({"n": 2}))])
            .await
            .expect_err("stale");
        match &err {
            StoreError::Conflict {
                key_id,
                expected,
                found,
            } => {
                assert_eq!(key_id, "key_a");
                assert_eq!(*expected, stale);
                assert_eq!(*found, 1);
            }
            other => panic!("expected a conflict, got {other}"),
        }
        assert_eq!(err.code(), "conflict");
        assert!(err.to_string().contains("key_a"), "{err}");
    }
    assert_eq!(store.load_events("key_a", 0).await.expect("load").len(), 1);
    // Re-reading and retrying succeeds.
    let last = store.last_key_seq("key_a").await.expect("last");
    assert_eq!(
        store
            .append_events("key_a", last, &[event("mode_set", 2, json!({"n": 2}))])
            .await
            .expect("retry"),
        2
    );
}

async fn a_conflicting_batch_writes_nothing(f: Fixture) {
    let one = f.open().await;
    let two = f.open().await;
    one.append_events("key_a", 0, &[event("session_begun", 1, json!({}))])
        .await
        .expect("append");
    // Both writers saw key_seq 1; `two` wins, then `one`'s batch of three
    // must leave no trace.
    two.append_events(
        "key_a",
        1,
        &[event("step_planned", 2, json!({"by": "two"}))],
    )
    .await
    .expect("winner");
    let batch: Vec<NewEvent> = (0..3)
        .map(|i| event("step_planned", 3 + i, json!({"by": "one", "i": i})))
        .collect();
    let err = one
        .append_events("key_a", 1, &batch)
        .await
        .expect_err("loser");
    assert!(
        matches!(
            err,
            StoreError::Conflict {
                expected: 1,
                found: 2,
                ..
            }
        ),
        "{err}"
    );
    let loaded = two.load_events("key_a", 0).await.expect("load");
    assert_eq!(loaded.len(), 2);
    assert_eq!(loaded[1].body, json!({"by": "two"}));
    assert_eq!(
        one.export_events(None, None).await.expect("export").len(),
        2
    );
}

async fn an_empty_batch_checks_without_writing(f: Fixture) {
    let store = f.open().await;
    assert_eq!(
        store.append_events("key_a", 0, &[]).await.expect("empty"),
        0
    );
    store
        .append_events("key_a", 0, &[event("mode_set", 1, json!({}))])
        .await
        .expect("append");
    assert_eq!(
        store.append_events("key_a", 1, &[]).await.expect("empty"),
        1
    );
    let err = store
        .append_events("key_a", 0, &[])
        .await
        .expect_err("stale");
    assert!(
        matches!(err, StoreError::Conflict { found: 1, .. }),
        "{err}"
    );
    assert_eq!(store.last_key_seq("key_a").await.expect("last"), 1);
    assert!(store.keys_with_events().await.expect("keys").len() == 1);
}

async fn an_event_without_a_type_is_refused_and_fails_its_batch(f: Fixture) {
    let store = f.open().await;
    let err = store
        .append_events(
            "key_a",
            0,
            &[event("mode_set", 1, json!({})), event("", 2, json!({}))],
        )
        .await
        .expect_err("empty type");
    assert_eq!(err.code(), "invalid_event");
    assert_eq!(store.last_key_seq("key_a").await.expect("last"), 0);
    assert!(store.keys_with_events().await.expect("keys").is_empty());
}

/// Past a thousand events an append is written in several statements
/// (SQLite); it is refused whole when one event is bad, lands whole with
/// gap-free sequence numbers, and a stale one is a conflict.
async fn a_long_append_lands_whole_and_is_checked_as_one(f: Fixture) {
    let store = f.open().await;
    let long: Vec<NewEvent> = (0..2500)
        .map(|i| event("mode_set", i, json!({"i": i})))
        .collect();
    let mut bad = long.clone();
    bad.push(event("", 2500, json!({})));
    let err = store
        .append_events("key_a", 0, &bad)
        .await
        .expect_err("empty type at the end");
    assert_eq!(err.code(), "invalid_event");
    assert_eq!(store.last_key_seq("key_a").await.expect("last"), 0);
    assert_eq!(
        store
            .append_events("key_a", 0, &long)
            .await
            .expect("append"),
        2500
    );
    let loaded = store.load_events("key_a", 0).await.expect("load");
    assert_eq!(loaded.len(), 2500);
    assert_gap_free("key_a", &loaded);
    assert_eq!(loaded[2499].body, json!({"i": 2499}));
    let err = store
        .append_events("key_a", 2499, &long)
        .await
        .expect_err("stale");
    assert!(
        matches!(err, StoreError::Conflict { found: 2500, .. }),
        "{err}"
    );
}

async fn keys_have_independent_sequences(f: Fixture) {
    let store = f.open().await;
    for (key, n) in [("key_b", 3), ("key_a", 2), ("key_c", 1), ("key_a", 1)] {
        let last = store.last_key_seq(key).await.expect("last");
        let batch: Vec<NewEvent> = (0..n)
            .map(|i| event("mode_set", i, json!({"k": key})))
            .collect();
        store
            .append_events(key, last, &batch)
            .await
            .expect("append");
    }
    for (key, n) in [("key_a", 3), ("key_b", 3), ("key_c", 1)] {
        let loaded = store.load_events(key, 0).await.expect("load");
        assert_eq!(loaded.len(), n, "{key}");
        assert_gap_free(key, &loaded);
        assert!(loaded.iter().all(|e| e.body == json!({"k": key})));
    }
    assert_eq!(
        store.keys_with_events().await.expect("keys"),
        ["key_a", "key_b", "key_c"]
    );
}

async fn two_handles_racing_for_the_same_key_seq_have_exactly_one_winner(f: Fixture) {
    const TASKS: usize = 16;
    for round in 0..5 {
        let key = format!("key_race{round}");
        let handles = [f.open().await, f.open().await];
        let tasks = at_once(&handles, TASKS, |t, store| {
            let key = key.clone();
            async move {
                store
                    .append_events(&key, 0, &[event("mode_set", 1, json!({"task": t}))])
                    .await
            }
        });
        let mut winners = Vec::new();
        for (t, task) in tasks.into_iter().enumerate() {
            match task.await.expect("task") {
                Ok(last) => {
                    assert_eq!(last, 1);
                    winners.push(t);
                }
                Err(StoreError::Conflict {
                    expected: 0,
                    found: 1,
                    ..
                }) => {}
                Err(e) => panic!("task {t}: unexpected error {e}"),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one append wins: {winners:?}");
        let loaded = handles[0].load_events(&key, 0).await.expect("load");
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded[0].body, json!({"task": winners[0]}));
    }
}

async fn two_handles_appending_with_retries_lose_nothing(f: Fixture) {
    const TASKS: usize = 12;
    const PER_TASK: usize = 8;
    let handles = [f.open().await, f.open().await];
    let tasks = at_once(&handles, TASKS, |t, store| async move {
        let mut successes = Vec::new();
        let mut conflicts = 0usize;
        for i in 0..PER_TASK {
            // Half the appends are batches of two.
            let batch: Vec<NewEvent> = (0..1 + i % 2)
                .map(|j| event("step_planned", 0, json!({"task": t, "i": i, "j": j})))
                .collect();
            loop {
                let last = store.last_key_seq("key_shared").await.expect("last");
                match store.append_events("key_shared", last, &batch).await {
                    Ok(new_last) => {
                        assert_eq!(new_last, last + i64::try_from(batch.len()).expect("len"));
                        successes.push((last, batch.clone()));
                        break;
                    }
                    Err(StoreError::Conflict { found, .. }) => {
                        assert_ne!(found, last);
                        conflicts += 1;
                    }
                    Err(e) => panic!("task {t}: unexpected error {e}"),
                }
            }
        }
        (successes, conflicts)
    });

    let mut successes = Vec::new();
    for task in tasks {
        let (mine, _conflicts) = task.await.expect("task");
        successes.extend(mine);
    }
    let appended_rows: usize = successes.iter().map(|(_, batch)| batch.len()).sum();

    let loaded = handles[1].load_events("key_shared", 0).await.expect("load");
    assert_eq!(loaded.len(), appended_rows, "one row per appended event");
    assert_gap_free("key_shared", &loaded);
    // Every successful append is where it said it would be, intact.
    for (after, batch) in &successes {
        let start = usize::try_from(*after).expect("seq");
        let stored: Vec<NewEvent> = loaded[start..start + batch.len()]
            .iter()
            .map(|e| event(&e.kind, e.at_ms, e.body.value()))
            .collect();
        assert_eq!(&stored, batch);
    }
    assert_eq!(
        handles[0].last_key_seq("key_shared").await.expect("last"),
        i64::try_from(appended_rows).expect("rows")
    );
}

/// Many keys at once through two handles (two replicas): within a handle
/// the appends waiting together are each to a different key (PostgreSQL
/// commits such a batch as one statement), and every key is written by
/// both handles, so a batch meets the other handle's commits to its keys.
/// Every append lands whole where it said, or is a conflict that moved.
async fn two_handles_appending_to_many_keys_at_once_lose_nothing(f: Fixture) {
    const KEYS: usize = 16;
    const PER_TASK: usize = 10;
    let handles = [f.open().await, f.open().await];
    // Task t writes key t / 2 through handle t % 2.
    let tasks = at_once(&handles, 2 * KEYS, |t, store| async move {
        let key = format!("key_many{}", t / 2);
        let mut successes = Vec::new();
        for i in 0..PER_TASK {
            let batch: Vec<NewEvent> = (0..1 + i % 2)
                .map(|j| event("step_planned", 0, json!({"task": t, "i": i, "j": j})))
                .collect();
            loop {
                let last = store.last_key_seq(&key).await.expect("last");
                match store.append_events(&key, last, &batch).await {
                    Ok(new_last) => {
                        assert_eq!(new_last, last + i64::try_from(batch.len()).expect("len"));
                        successes.push((last, batch.clone()));
                        break;
                    }
                    Err(StoreError::Conflict { found, .. }) => assert_ne!(found, last),
                    Err(e) => panic!("task {t}: unexpected error {e}"),
                }
            }
        }
        (key, successes)
    });
    let mut by_key: std::collections::BTreeMap<String, Vec<(i64, Vec<NewEvent>)>> =
        std::collections::BTreeMap::new();
    for task in tasks {
        let (key, mine) = task.await.expect("task");
        by_key.entry(key).or_default().extend(mine);
    }
    assert_eq!(by_key.len(), KEYS);
    for (key, successes) in &by_key {
        let loaded = handles[1].load_events(key, 0).await.expect("load");
        let rows: usize = successes.iter().map(|(_, batch)| batch.len()).sum();
        assert_eq!(loaded.len(), rows, "{key}: one row per appended event");
        assert_gap_free(key, &loaded);
        for (after, batch) in successes {
            let start = usize::try_from(*after).expect("seq");
            let stored: Vec<NewEvent> = loaded[start..start + batch.len()]
                .iter()
                .map(|e| event(&e.kind, e.at_ms, e.body.value()))
                .collect();
            assert_eq!(&stored, batch, "{key}");
        }
    }
    // The global order has no gaps either: a follower paging by seq sees
    // every event once.
    let all = handles[0].events_since(0, 100_000).await.expect("since");
    let seqs: Vec<i64> = all.iter().map(|e| e.seq).collect();
    let mut sorted = seqs.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(seqs, sorted, "seq strictly increasing");
    assert_eq!(
        all.len(),
        by_key
            .values()
            .flatten()
            .map(|(_, batch)| batch.len())
            .sum::<usize>()
    );
}

/// Appends to several keys sent at once (so they usually share one commit,
/// which PostgreSQL writes as one statement): each is checked against its
/// own key — a stale one is a conflict and writes nothing, the others land
/// whole, one of several events included.
async fn appends_to_many_keys_waiting_together_each_keep_their_own_check(f: Fixture) {
    let store = f.open().await;
    for round in 0..20 {
        let key = |name: &str| format!("key_together{round}_{name}");
        store
            .append_events(&key("stale"), 0, &[numbered(0)])
            .await
            .expect("first append");
        let three = [numbered(1), numbered(2), numbered(3)];
        let (ka, kb, kstale, kd) = (key("a"), key("b"), key("stale"), key("d"));
        let (one, two, four) = ([numbered(10)], [numbered(20)], [numbered(30)]);
        let (a, b, stale, d) = tokio::join!(
            store.append_events(&ka, 0, &one),
            store.append_events(&kb, 0, &three),
            store.append_events(&kstale, 0, &two),
            store.append_events(&kd, 0, &four),
        );
        assert_eq!(a.expect("a"), 1);
        assert_eq!(b.expect("b"), 3);
        assert_eq!(d.expect("d"), 1);
        match stale {
            Err(StoreError::Conflict {
                expected: 0,
                found: 1,
                ..
            }) => {}
            other => panic!("expected a conflict, got {other:?}"),
        }
        let stale_events = store.load_events(&key("stale"), 0).await.expect("load");
        assert_eq!(stale_events.len(), 1, "the stale append wrote nothing");
        let b_events = store.load_events(&key("b"), 0).await.expect("load");
        assert_gap_free(&key("b"), &b_events);
        let bodies: Vec<serde_json::Value> = b_events.iter().map(|e| e.body.value()).collect();
        assert_eq!(
            bodies,
            three.iter().map(|e| e.body.clone()).collect::<Vec<_>>()
        );
    }
}

async fn export_filters_by_key_and_time_in_global_order(f: Fixture) {
    let store = f.open().await;
    // Interleave keys, with times out of order, so global seq order is
    // distinguishable from key order and from time order.
    let plan = [
        ("key_b", 300),
        ("key_a", 100),
        ("key_b", 50),
        ("key_a", 400),
        ("key_a", 200),
    ];
    for (i, (key, at)) in plan.iter().enumerate() {
        let last = store.last_key_seq(key).await.expect("last");
        store
            .append_events(key, last, &[event("mode_set", *at, json!({"i": i}))])
            .await
            .expect("append");
    }
    let order = |events: Vec<StoredEvent>| -> Vec<i64> {
        assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
        events
            .iter()
            .map(|e| e.body.value()["i"].as_i64().expect("i"))
            .collect()
    };
    assert_eq!(
        order(store.export_events(None, None).await.expect("all")),
        [0, 1, 2, 3, 4]
    );
    assert_eq!(
        order(store.export_events(Some("key_a"), None).await.expect("key")),
        [1, 3, 4]
    );
    // `since_ms` is inclusive.
    assert_eq!(
        order(store.export_events(None, Some(200)).await.expect("since")),
        [0, 3, 4]
    );
    assert_eq!(
        order(
            store
                .export_events(Some("key_b"), Some(300))
                .await
                .expect("both")
        ),
        [0]
    );
    assert!(
        store
            .export_events(Some("key_c"), None)
            .await
            .expect("unknown key")
            .is_empty()
    );
    assert!(
        store
            .export_events(None, Some(401))
            .await
            .expect("future")
            .is_empty()
    );
}

async fn events_since_pages_through_the_global_tail(f: Fixture) {
    let writer = f.open().await;
    let follower = f.open().await;
    assert!(
        follower
            .events_since(0, 10)
            .await
            .expect("empty")
            .is_empty()
    );

    for i in 0..7_i64 {
        let key = if i % 2 == 0 { "key_a" } else { "key_b" };
        let last = writer.last_key_seq(key).await.expect("last");
        writer
            .append_events(key, last, &[event("mode_set", i, json!({"i": i}))])
            .await
            .expect("append");
    }

    // Page through with a limit of 3, as a follower would.
    let mut seen = Vec::new();
    let mut after = 0;
    let mut pages = 0;
    loop {
        let page = follower.events_since(after, 3).await.expect("page");
        pages += 1;
        assert!(page.len() <= 3);
        seen.extend(
            page.iter()
                .map(|e| e.body.value()["i"].as_i64().expect("i")),
        );
        match page.last() {
            Some(last) if page.len() == 3 => after = last.seq,
            _ => break,
        }
    }
    assert_eq!(seen, (0..7).collect::<Vec<_>>());
    assert_eq!(pages, 3);
    let all = follower.export_events(None, None).await.expect("export");
    assert_eq!(
        follower
            .events_since(all[2].seq, 100)
            .await
            .expect("from the middle"),
        all[3..]
    );
    // The follower sees new events from the writer on its next poll.
    let tail_seq = all.last().expect("events").seq;
    assert!(
        follower
            .events_since(tail_seq, 10)
            .await
            .expect("tail")
            .is_empty()
    );
    writer
        .append_events("key_c", 0, &[event("mode_set", 8, json!({"i": 7}))])
        .await
        .expect("append");
    let new = follower.events_since(tail_seq, 10).await.expect("new");
    assert_eq!(new.len(), 1);
    assert_eq!(new[0].key_id, "key_c");
    assert!(new[0].seq > tail_seq);

    assert!(follower.events_since(0, 0).await.expect("zero").is_empty());
    assert!(
        follower
            .events_since(0, -1)
            .await
            .expect("negative")
            .is_empty()
    );
}

async fn a_follower_polling_during_concurrent_appends_misses_nothing(f: Fixture) {
    const WRITERS: usize = 6;
    const PER_WRITER: usize = 10;
    let follower = f.open().await;
    let handles = [f.open().await, f.open().await];
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));

    // The follower pages by seq while the writers race; it must end up with
    // exactly the log, in order: no event may appear behind its back with a
    // smaller seq than one it has already passed.
    let following = {
        let done = done.clone();
        tokio::spawn(async move {
            let mut seen: Vec<StoredEvent> = Vec::new();
            loop {
                let finished = done.load(std::sync::atomic::Ordering::SeqCst);
                let after = seen.last().map_or(0, |e| e.seq);
                let page = follower.events_since(after, 5).await.expect("page");
                let short = page.len() < 5;
                seen.extend(page);
                if finished && short {
                    return seen;
                }
                tokio::task::yield_now().await;
            }
        })
    };
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = handles[w % 2].clone();
            tokio::spawn(async move {
                let key = format!("key_w{}", w % 3);
                for i in 0..PER_WRITER {
                    let batch: Vec<NewEvent> = (0..1 + i % 2)
                        .map(|j| event("step_planned", 0, json!({"w": w, "i": i, "j": j})))
                        .collect();
                    loop {
                        let last = store.last_key_seq(&key).await.expect("last");
                        match store.append_events(&key, last, &batch).await {
                            Ok(_) => break,
                            Err(StoreError::Conflict { .. }) => {}
                            Err(e) => panic!("writer {w}: unexpected error {e}"),
                        }
                    }
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.expect("writer");
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = following.await.expect("follower");

    let all = handles[0].export_events(None, None).await.expect("export");
    assert_eq!(all.len(), WRITERS * PER_WRITER * 3 / 2);
    assert_eq!(seen, all, "the follower saw exactly the log, in seq order");
}

async fn events_survive_reopening(f: Fixture) {
    let appended = {
        let store = f.open().await;
        store
            .append_events("key_a", 0, &[event("mode_set", 5, json!({"mode": "plan"}))])
            .await
            .expect("append");
        store.load_events("key_a", 0).await.expect("load")
    };
    let store = f.open().await;
    assert_eq!(store.load_events("key_a", 0).await.expect("load"), appended);
    assert_eq!(store.last_key_seq("key_a").await.expect("last"), 1);
}

async fn operator_tokens_create_list_authenticate_and_revoke(f: Fixture) {
    let store = f.open().await;
    let created = store.create_operator_token("ana").await.expect("create");
    let op = created.operator.clone();
    assert!(created.token.starts_with("pgo_") && created.token.len() == 47);
    assert!(op.id.starts_with("opr_") && op.id.len() == 20);
    assert_eq!(op.name, "ana");
    assert_eq!(op.prefix, created.token[..12]);
    assert!(op.is_active());
    assert_eq!(
        store
            .authenticate_operator(&created.token)
            .await
            .expect("auth"),
        Some(op.clone())
    );
    assert_eq!(
        store.operator_token(&op.id).await.expect("by id"),
        Some(op.clone())
    );
    assert_eq!(
        store.list_operator_tokens().await.expect("list"),
        vec![op.clone()]
    );
    // A near miss is no token at all.
    let mut wrong = created.token.clone();
    wrong.pop();
    wrong.push(if created.token.ends_with('A') {
        'B'
    } else {
        'A'
    });
    assert_eq!(
        store.authenticate_operator(&wrong).await.expect("auth"),
        None
    );
    assert_eq!(
        store
            .operator_token("opr_0000000000000000")
            .await
            .expect("id"),
        None
    );

    let revoked = store.revoke_operator_token("ana").await.expect("revoke");
    assert_eq!(revoked.id, op.id);
    let at = revoked.revoked_at_ms.expect("revoked");
    assert_eq!(
        store
            .authenticate_operator(&created.token)
            .await
            .expect("auth"),
        None
    );
    assert_eq!(
        store.operator_token(&op.id).await.expect("by id"),
        Some(revoked.clone())
    );
    // By id, again: the first revocation time stays.
    let again = store.revoke_operator_token(&op.id).await.expect("by id");
    assert_eq!(again.revoked_at_ms, Some(at));
    let err = store.revoke_operator_token("ana").await.expect_err("gone");
    assert_eq!(err.code(), "operator_not_found");
    assert!(err.to_string().contains("\"ana\""), "{err}");
}

async fn operator_tokens_and_api_keys_never_stand_in_for_each_other(f: Fixture) {
    let store = f.open().await;
    let key = store.create_key("ana", Scope::Write).await.expect("key");
    let op = store.create_operator_token("ana").await.expect("operator");
    assert_eq!(
        store.authenticate_operator(&key.token).await.expect("auth"),
        None
    );
    assert_eq!(store.authenticate(&op.token).await.expect("auth"), None);
    // Same name, separate tables: revoking one leaves the other.
    store.revoke_operator_token("ana").await.expect("revoke");
    assert_eq!(
        store.authenticate(&key.token).await.expect("auth"),
        Some(key.key.clone())
    );
    assert!(store.list_keys().await.expect("keys").len() == 1);
}

async fn operator_names_are_unique_among_active_tokens_and_invalid_ones_store_nothing(f: Fixture) {
    let store = f.open().await;
    let first = store.create_operator_token("ops").await.expect("first");
    let err = store.create_operator_token("ops").await.expect_err("taken");
    assert_eq!(err.code(), "operator_name_taken");
    for bad in ["", "with space", "opr_0123456789abcdef"] {
        let err = store.create_operator_token(bad).await.expect_err(bad);
        assert_eq!(err.code(), "invalid_operator_name", "{bad:?}");
    }
    store.revoke_operator_token("ops").await.expect("revoke");
    let second = store.create_operator_token("ops").await.expect("reuse");
    assert_ne!(first.operator.id, second.operator.id);
    let listed = store.list_operator_tokens().await.expect("list");
    assert_eq!(
        listed.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(),
        [first.operator.id.as_str(), second.operator.id.as_str()]
    );
    assert!(!listed[0].is_active() && listed[1].is_active());
}

async fn an_operator_token_revoked_through_one_handle_fails_through_another(f: Fixture) {
    let a = f.open().await;
    let b = f.open().await;
    let created = a.create_operator_token("ana").await.expect("create");
    assert!(
        b.authenticate_operator(&created.token)
            .await
            .expect("auth")
            .is_some()
    );
    b.revoke_operator_token(&created.operator.id)
        .await
        .expect("revoke");
    assert_eq!(
        a.authenticate_operator(&created.token).await.expect("auth"),
        None
    );
    assert!(
        !a.operator_token(&created.operator.id)
            .await
            .expect("by id")
            .expect("kept")
            .is_active()
    );
}

async fn a_console_session_logged_out_through_one_handle_is_ended_through_another(f: Fixture) {
    let a = f.open().await;
    let b = f.open().await;
    let (one, two) = ("1".repeat(64), "2".repeat(64));
    let later = plangate_store::now_ms() + 3_600_000;
    assert!(!b.console_session_ended(&one).await.expect("ask"));
    a.end_console_session(&one, later).await.expect("end");
    a.end_console_session(&one, later)
        .await
        .expect("again: idempotent");
    assert!(b.console_session_ended(&one).await.expect("ask"));
    assert!(
        !b.console_session_ended(&two)
            .await
            .expect("another session")
    );
    // A row past its session's expiry goes at the next logout; the cookie
    // is refused by its own expiry by then.
    b.end_console_session(&two, 1).await.expect("end");
    a.end_console_session(&"3".repeat(64), later)
        .await
        .expect("end");
    assert!(!a.console_session_ended(&two).await.expect("pruned"));
    assert!(a.console_session_ended(&one).await.expect("kept"));
    for bad in [
        "",
        "cookie.value.with.mac",
        &"A".repeat(64),
        &"1".repeat(63),
    ] {
        let err = a.end_console_session(bad, later).await.expect_err(bad);
        assert_eq!(err.code(), "invalid_session_id", "{bad:?}");
    }
}

fn numbered(i: i64) -> NewEvent {
    NewEvent {
        at_ms: i,
        kind: "mode_set".to_owned(),
        body: json!({"mode": "plan", "i": i}),
        seal: None,
    }
}

/// Appends of many tasks share transactions (group commit); each keeps its
/// own compare-and-set, none is split, and in one batch a stale append
/// fails alone while the others commit.
async fn many_writers_on_many_keys_keep_each_compare_and_set_and_every_append_whole(f: Fixture) {
    let store = f.open().await;
    let mut tasks = Vec::new();
    for w in 0..200_i64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("key_{}", w % 8);
            loop {
                let last = store.last_key_seq(&key).await.expect("read");
                match store
                    .append_events(&key, last, &[numbered(w), numbered(w)])
                    .await
                {
                    Ok(now) => {
                        assert_eq!(now, last + 2);
                        return;
                    }
                    Err(StoreError::Conflict { .. }) => {}
                    Err(e) => panic!("append failed: {e}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    for k in 0..8 {
        let events = store
            .load_events(&format!("key_{k}"), 0)
            .await
            .expect("load");
        let seqs: Vec<i64> = events.iter().map(|e| e.key_seq).collect();
        assert_eq!(seqs, (1..=50).collect::<Vec<_>>(), "key_{k}");
        for pair in events.chunks(2) {
            assert_eq!(
                pair[0].body.value()["i"],
                pair[1].body.value()["i"],
                "an append was split"
            );
        }
    }
    let (one, two) = ([numbered(1)], [numbered(2)]);
    let (stale, fresh) = tokio::join!(
        store.append_events("key_0", 3, &one),
        store.append_events("key_1", 50, &two),
    );
    match stale {
        Err(StoreError::Conflict { found, .. }) => assert_eq!(found, 50),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(fresh.expect("fresh append"), 51);
    assert_eq!(store.last_key_seq("key_0").await.expect("read"), 50);
    assert_eq!(store.last_key_seq("key_1").await.expect("read"), 51);
}

async fn an_oauth_identity_is_recorded_once_found_by_name_and_revocable(f: Fixture) {
    use plangate_store::Identity;
    let store = f.open().await;
    let alice = Identity::new("https://id.example.com", "alice");
    assert_eq!(alice.name, "https://id.example.com#alice");
    assert!(alice.id.starts_with("key_") && alice.id.len() == 20);
    assert_eq!(alice, Identity::new("https://id.example.com", "alice"));
    assert_ne!(alice.id, Identity::new("https://other.example", "alice").id);

    let first = store
        .ensure_identity(&alice, Scope::Plan)
        .await
        .expect("store");
    assert_eq!(
        (first.id.as_str(), first.name.as_str()),
        (alice.id.as_str(), alice.name.as_str())
    );
    assert!(first.is_identity() && first.is_active());
    assert_eq!(first.scope, Scope::Plan);
    // Seen again (with a wider token): the same row, unchanged.
    let again = store
        .ensure_identity(&alice, Scope::Write)
        .await
        .expect("store");
    assert_eq!(again, first);
    assert_eq!(
        store.find_key(&alice.name).await.expect("store"),
        Some(first.clone())
    );
    assert_eq!(
        store.find_key(&alice.id).await.expect("store"),
        Some(first.clone())
    );
    // No token authenticates as it.
    assert_eq!(store.authenticate("pgk_").await.expect("store"), None);
    // Revoked, it stays revoked.
    store.revoke_key(&alice.name).await.expect("store");
    let after = store
        .ensure_identity(&alice, Scope::Plan)
        .await
        .expect("store");
    assert!(!after.is_active());
    // Keys keep their own rule: no key may take an identity's name.
    assert!(store.create_key(&alice.name, Scope::Read).await.is_err());
}

async fn upstream_credentials_are_saved_replaced_and_cleared(f: Fixture) {
    let store = f.open().await;
    assert_eq!(store.upstream_credentials("gh").await.expect("load"), None);
    store
        .save_upstream_credentials("gh", "v1.first")
        .await
        .expect("save");
    store
        .save_upstream_credentials("other", "v1.x")
        .await
        .expect("save");
    store
        .save_upstream_credentials("gh", "v1.second")
        .await
        .expect("replace");
    assert_eq!(
        store
            .upstream_credentials("gh")
            .await
            .expect("load")
            .as_deref(),
        Some("v1.second")
    );
    store.clear_upstream_credentials("gh").await.expect("clear");
    assert_eq!(store.upstream_credentials("gh").await.expect("load"), None);
    assert_eq!(
        store
            .upstream_credentials("other")
            .await
            .expect("load")
            .as_deref(),
        Some("v1.x")
    );
}

/// What an applied step replaced, kept beside the log: kept once per step
/// (again replaces it), read back from another handle, and dropped by age,
/// naming what was dropped.
async fn undo_states_are_kept_replaced_read_and_dropped_by_age(f: Fixture) {
    let one = f.open().await;
    let two = f.open().await;
    assert_eq!(
        one.undo_states()
            .undo_state("key_a", "step_1")
            .await
            .expect("read"),
        None
    );
    one.undo_states()
        .keep_undo("key_a", "step_1", "sha256:01", "v1.first")
        .await
        .expect("keep");
    one.undo_states()
        .keep_undo("key_a", "step_1", "sha256:02", "v1.second")
        .await
        .expect("keep again");
    one.undo_states()
        .keep_undo("key_b", "step_1", "sha256:03", "v1.other")
        .await
        .expect("keep");
    let kept = two
        .undo_states()
        .undo_state("key_a", "step_1")
        .await
        .expect("read")
        .expect("kept");
    assert_eq!(
        (kept.digest.as_str(), kept.sealed.as_str()),
        ("sha256:02", "v1.second")
    );
    assert!(kept.kept_at_ms > 0);
    // Nothing is older than the first keep.
    assert!(
        two.undo_states()
            .drop_undo_before(kept.kept_at_ms - 60_000)
            .await
            .expect("drop")
            .is_empty()
    );
    let mut dropped = two
        .undo_states()
        .drop_undo_before(plangate_store::now_ms() + 1)
        .await
        .expect("drop");
    dropped.sort();
    assert_eq!(
        dropped,
        [
            ("key_a".to_owned(), "step_1".to_owned()),
            ("key_b".to_owned(), "step_1".to_owned())
        ]
    );
    assert_eq!(
        one.undo_states()
            .undo_state("key_b", "step_1")
            .await
            .expect("read"),
        None
    );
}

fn message(receiver: &str, msg_id: &str, created_at_ms: i64) -> plangate_store::OutboxMessage {
    plangate_store::OutboxMessage {
        receiver: receiver.to_owned(),
        msg_id: msg_id.to_owned(),
        event: "plan.review_needed".to_owned(),
        notice: r#"{"type":"plan.review_needed"}"#.to_owned(),
        created_at_ms,
        attempts: 0,
    }
}

/// The notification outbox: a message enqueued twice (two replicas
/// noticing one event) is one row; a due message is claimed by one handle
/// of two racing; a failed attempt makes it due again later, a delivered
/// one never; every attempt is on the record; done rows are dropped by age.
async fn the_outbox_holds_each_message_once_claims_it_for_one_handle_and_records_every_attempt(
    f: Fixture,
) {
    use plangate_store::{AttemptEnd, OutboxState};
    let one = f.open().await;
    let two = f.open().await;
    let t0 = plangate_store::now_ms();
    let m = message("ops", "msg_1", t0);
    let other = message("chat", "msg_1", t0);
    assert_eq!(
        one.outbox()
            .enqueue(&[m.clone(), other.clone()])
            .await
            .expect("enqueue"),
        2
    );
    assert_eq!(
        two.outbox()
            .enqueue(std::slice::from_ref(&m))
            .await
            .expect("again"),
        0
    );

    let (a, b) = tokio::join!(
        one.outbox().claim_due(t0, 30_000, 10),
        two.outbox().claim_due(t0, 30_000, 10)
    );
    let (a, b) = (a.expect("claim"), b.expect("claim"));
    assert_eq!(
        a.len() + b.len(),
        2,
        "each message claimed once: {a:?} {b:?}"
    );
    // Claimed: not due again while held.
    assert!(
        one.outbox()
            .claim_due(t0 + 1_000, 30_000, 10)
            .await
            .expect("claim")
            .is_empty()
    );

    one.outbox()
        .record_attempt(&m, 1, t0 + 10, "HTTP 503", AttemptEnd::RetryAt(t0 + 5_000))
        .await
        .expect("record");
    one.outbox()
        .record_attempt(&other, 1, t0 + 10, "HTTP 204", AttemptEnd::Delivered)
        .await
        .expect("record");
    let again = two
        .outbox()
        .claim_due(t0 + 5_000, 30_000, 10)
        .await
        .expect("claim");
    assert_eq!(
        again
            .iter()
            .map(|m| (m.receiver.as_str(), m.attempts))
            .collect::<Vec<_>>(),
        [("ops", 1)]
    );
    two.outbox()
        .record_attempt(&again[0], 2, t0 + 5_010, "HTTP 200", AttemptEnd::Delivered)
        .await
        .expect("record");
    // A late report on a message already delivered changes nothing.
    one.outbox()
        .record_attempt(
            &m,
            2,
            t0 + 5_020,
            "connection refused",
            AttemptEnd::RetryAt(t0 + 9_000),
        )
        .await
        .expect("record");
    assert!(
        one.outbox()
            .claim_due(t0 + 60_000, 30_000, 10)
            .await
            .expect("claim")
            .is_empty()
    );

    let recent = one.outbox().recent(10).await.expect("recent");
    let ops = recent
        .iter()
        .find(|r| r.message.receiver == "ops")
        .expect("ops");
    assert_eq!(
        (ops.state, ops.message.attempts, ops.last_status.as_deref()),
        (OutboxState::Delivered, 2, Some("HTTP 200"))
    );
    assert_eq!(
        two.outbox()
            .attempts("ops", "msg_1")
            .await
            .expect("attempts"),
        [
            (1, t0 + 10, "HTTP 503".to_owned()),
            (2, t0 + 5_010, "HTTP 200".to_owned())
        ]
    );

    assert_eq!(one.outbox().drop_done_before(t0).await.expect("drop"), 0);
    assert_eq!(
        one.outbox()
            .drop_done_before(t0 + 60_000)
            .await
            .expect("drop"),
        2
    );
    assert!(one.outbox().recent(10).await.expect("recent").is_empty());
    assert!(
        one.outbox()
            .attempts("ops", "msg_1")
            .await
            .expect("attempts")
            .is_empty()
    );
}

/// Where the notifier has handled the log up to: 0 before any, moved by
/// one handle, never back by another (a replica that read less).
async fn the_notifiers_position_only_moves_forward(f: Fixture) {
    let one = f.open().await;
    let two = f.open().await;
    assert_eq!(one.outbox().notify_cursor().await.expect("cursor"), 0);
    one.outbox()
        .advance_notify_cursor(40)
        .await
        .expect("advance");
    two.outbox()
        .advance_notify_cursor(12)
        .await
        .expect("not back");
    assert_eq!(two.outbox().notify_cursor().await.expect("cursor"), 40);
}

/// Several keys' appends in one transaction: all land, each after its
/// expected key_seq; when one key's log moved, nothing of any lands and
/// the answer names that key.
async fn appending_to_several_keys_together_writes_all_or_nothing(f: Fixture) {
    use plangate_store::AppendPart;
    let one = f.open().await;
    let two = f.open().await;
    one.append_events("key_a", 0, &[event("a1", 1, json!({}))])
        .await
        .expect("a");
    let part = |key: &str, expected, kind: &str| AppendPart {
        key_id: key.to_owned(),
        expected_key_seq: expected,
        events: vec![
            event(kind, 2, json!({"n": 1})),
            event(kind, 3, json!({"n": 2})),
        ],
    };
    let lasts = two
        .append_together(&[part("key_a", 1, "a2"), part("key_b", 0, "b1")])
        .await
        .expect("together");
    assert_eq!(lasts, [3, 2]);
    // key_b moved on (another writer): nothing of the batch lands.
    one.append_events("key_b", 2, &[event("b2", 4, json!({}))])
        .await
        .expect("b");
    let err = two
        .append_together(&[part("key_a", 3, "a3"), part("key_b", 2, "b3")])
        .await
        .expect_err("key_b moved");
    assert!(
        matches!(&err, StoreError::Conflict { key_id, expected: 2, found: 3 } if key_id == "key_b"),
        "{err}"
    );
    assert_eq!(one.last_key_seq("key_a").await.expect("a"), 3);
    assert_eq!(one.last_key_seq("key_b").await.expect("b"), 3);
    let kinds: Vec<String> = one
        .load_events("key_a", 0)
        .await
        .expect("load")
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["a1", "a2", "a2"]);
    // A refused event fails the whole batch too.
    let bad = AppendPart {
        key_id: "key_c".to_owned(),
        expected_key_seq: 0,
        events: vec![event("", 5, json!({}))],
    };
    assert!(
        two.append_together(&[part("key_a", 3, "a3"), bad])
            .await
            .is_err()
    );
    assert_eq!(one.last_key_seq("key_a").await.expect("a"), 3);
    // The global tail sees the landed ones in order.
    let tail = one.events_since(0, 100).await.expect("tail");
    assert_eq!(tail.len(), 6);
}
