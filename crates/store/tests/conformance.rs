//! The store contract, run against every backend.
//!
//! Each test is an async fn taking a [`Fixture`]; the `conformance!` macro
//! runs it on SQLite (and, once it exists, on PostgreSQL when a database URL
//! is set). A fixture can open several handles on one store, like several
//! plangate processes sharing a data dir.

use std::sync::Arc;

use plangate_core::Scope;
use plangate_store::{Store, StoreConfig, StoreError};

struct Fixture {
    _dir: tempfile::TempDir,
    config: StoreConfig,
}

impl Fixture {
    fn sqlite() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = StoreConfig::Sqlite(dir.path().join("plangate.db"));
        Fixture { _dir: dir, config }
    }

    /// A new, independent handle on the same store.
    async fn open(&self) -> Arc<dyn Store> {
        self.config.open().await.expect("open store")
    }
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Fixture::sqlite()).await;
                }
            )*
        }
    };
}

conformance!(
    create_list_revoke_authenticate_round_trip,
    a_revoked_key_no_longer_authenticates,
    names_are_unique_among_active_keys_and_reusable_after_revoke,
    malformed_and_unknown_tokens_are_none_not_errors,
    invalid_names_are_refused_and_nothing_is_stored,
    revoke_finds_by_name_or_id_and_reports_unknown,
    keys_are_listed_in_creation_order,
    two_handles_on_one_store_see_each_others_keys,
    keys_survive_reopening,
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
    let keep = store
        .create_key("keep", Scope::Write)
        .await
        .expect("create");
    let gone = store
        .create_key("gone", Scope::Write)
        .await
        .expect("create");
    store.revoke_key(&gone.key.id).await.expect("revoke");
    assert_eq!(store.authenticate(&gone.token).await.expect("auth"), None);
    assert_eq!(
        store.authenticate(&keep.token).await.expect("auth"),
        Some(keep.key)
    );
}

async fn names_are_unique_among_active_keys_and_reusable_after_revoke(f: Fixture) {
    let store = f.open().await;
    let first = store
        .create_key("laptop", Scope::Read)
        .await
        .expect("create");
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
    let real = store
        .create_key("real", Scope::Write)
        .await
        .expect("create");
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
