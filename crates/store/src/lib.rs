//! plangate's durable state.
//!
//! This crate owns everything plangate keeps across restarts: the data dir,
//! the key material generated into it (the seal and signing keys, DESIGN
//! §2), API keys, and the append-only event log (DESIGN §6, module
//! [`events`]) that mode and plan are folded from. Callers see one trait,
//! [`Store`], chosen by a config enum, [`StoreConfig`], that returns
//! `Arc<dyn Store>`; they never know which database is behind it. SQLite is
//! the embedded default; PostgreSQL joins later for replicas, behind the
//! same trait and the same tests. Module [`seal`] seals secret argument
//! values at rest under the seal key.
//!
//! It must never store or log a token or a secret in plaintext. An API
//! token is shown once, when it is created, and kept only as its SHA-256;
//! secrets are sealed (XChaCha20-Poly1305) before they reach an event;
//! key material has a redacting `Debug`; errors describe a bad value
//! without repeating it. It does not interpret events: their bodies are
//! JSON owned by `plangate-core` and the gateway.
//!
//! Why it is built this way: the event log is the source of truth, so
//! what is written must be durable before an answer goes out (SQLite runs
//! with `synchronous = FULL`). Several processes share one data dir — every
//! stdio client window starts its own plangate — so SQLite runs in WAL mode
//! with a busy timeout, migrations and key files are safe against a
//! concurrent first start, appends are compare-and-set on the key's last
//! sequence number (the loser of a race gets [`StoreError::Conflict`] and
//! re-reads), and nothing is cached in memory that another process could
//! change: every question is asked of the database.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use plangate_core::Scope;

mod data_dir;
mod error;
pub mod events;
mod keys;
mod private_fs;
pub mod seal;
mod sqlite;
mod time;

pub use data_dir::{DataDir, KeyMaterial, SEAL_KEY_VAR, SIGNING_KEY_VAR, default_data_dir};
pub use error::StoreError;
pub use events::{NewEvent, StoredEvent};
pub use keys::{
    ApiKey, CreatedKey, MAX_KEY_NAME_LEN, SHOWN_PREFIX_LEN, TOKEN_PREFIX, validate_key_name,
};
pub use private_fs::new_id;
pub use sqlite::open_sqlite;
pub use time::{format_time_ms, now_ms};

/// The one storage interface. Every backend implements it, and one
/// conformance suite (`tests/conformance.rs`) runs against each, so callers
/// can rely on the same behaviour whichever database is configured.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Creates an API key and returns it with its token, which exists only
    /// in the returned value. `name` is 1–64 of `[A-Za-z0-9._-]`
    /// ([`StoreError::InvalidKeyName`]) and unique among keys not revoked
    /// ([`StoreError::KeyNameTaken`]).
    async fn create_key(&self, name: &str, scope: Scope) -> Result<CreatedKey, StoreError>;

    /// Every key, revoked ones included, in order of creation.
    async fn list_keys(&self) -> Result<Vec<ApiKey>, StoreError>;

    /// Revokes the active key with that name, or the key with that id, and
    /// returns it as now stored. [`StoreError::KeyNotFound`] if neither
    /// exists.
    async fn revoke_key(&self, name_or_id: &str) -> Result<ApiKey, StoreError>;

    /// The active key this token belongs to. Unknown, malformed and revoked
    /// tokens are `None`, not errors: to a caller they are all "no key".
    async fn authenticate(&self, token: &str) -> Result<Option<ApiKey>, StoreError>;

    /// The active key with that name, or the key (revoked or not) with that
    /// id — the same rule as [`Store::revoke_key`] — without changing it.
    /// `None` if neither exists.
    async fn find_key(&self, name_or_id: &str) -> Result<Option<ApiKey>, StoreError>;

    /// Appends `events` to the log of `key_id`, all or nothing, as key_seq
    /// `expected_key_seq + 1`, `+ 2`, …, but only if the key's last key_seq
    /// is exactly `expected_key_seq` (0: the key has no events yet).
    /// Returns the new last key_seq. If another writer appended first —
    /// in this process or another sharing the store — nothing is written
    /// and the answer is [`StoreError::Conflict`]; the caller re-reads and
    /// retries. An empty batch writes nothing but still checks.
    ///
    /// Durable (committed and synced) before it returns. An event with an
    /// empty type is [`StoreError::InvalidEvent`] and fails the batch.
    async fn append_events(
        &self,
        key_id: &str,
        expected_key_seq: i64,
        events: &[NewEvent],
    ) -> Result<i64, StoreError>;

    /// The events of `key_id` with key_seq greater than `after_key_seq`,
    /// in key_seq order (0: all of them).
    async fn load_events(
        &self,
        key_id: &str,
        after_key_seq: i64,
    ) -> Result<Vec<StoredEvent>, StoreError>;

    /// The last key_seq of `key_id`, 0 if it has no events.
    async fn last_key_seq(&self, key_id: &str) -> Result<i64, StoreError>;

    /// Every key id that has at least one event, sorted, each once.
    async fn keys_with_events(&self) -> Result<Vec<String>, StoreError>;

    /// Events for an audit export, in global seq order: only those of
    /// `key_id` if given, and only those with `at_ms >= since_ms` if given.
    async fn export_events(
        &self,
        key_id: Option<&str>,
        since_ms: Option<i64>,
    ) -> Result<Vec<StoredEvent>, StoreError>;

    /// Up to `limit` events of any key with seq greater than `after_seq`,
    /// in seq order: the global tail, for a process following changes that
    /// others made. Pass the last seq seen to get the next page; a page
    /// shorter than `limit` means the tail was reached. A `limit` of 0 or
    /// less returns nothing. An event is visible here only once committed,
    /// and a later commit never gets a smaller seq, so following by seq
    /// misses nothing.
    async fn events_since(
        &self,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StoreError>;
}

/// Which backend holds the state. Parsing config yields this value without
/// touching a database; [`StoreConfig::open`] then builds the store.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreConfig {
    /// An embedded SQLite file, normally [`DataDir::sqlite_path`].
    Sqlite(PathBuf),
}

impl StoreConfig {
    /// Opens the configured store, creating and migrating it as needed.
    pub async fn open(&self) -> Result<Arc<dyn Store>, StoreError> {
        match self {
            StoreConfig::Sqlite(path) => open_sqlite(path).await,
        }
    }
}
