//! plangate's durable state.
//!
//! This crate owns everything plangate keeps across restarts: the data dir,
//! the key material generated into it (the seal and signing keys, DESIGN
//! §2), API keys, and — next — the append-only event log (DESIGN §6, module
//! [`events`]). Callers see one trait, [`Store`], chosen by a config enum,
//! [`StoreConfig`], that returns `Arc<dyn Store>`; they never know which
//! database is behind it. SQLite is the embedded default; PostgreSQL joins
//! later for replicas, behind the same trait and the same tests.
//!
//! It must never store or log a token or a secret in plaintext. An API
//! token is shown once, when it is created, and kept only as its SHA-256;
//! key material has a redacting `Debug`; errors describe a bad value
//! without repeating it.
//!
//! Why it is built this way: the event log will be the source of truth, so
//! what is written must be durable before an answer goes out (SQLite runs
//! with `synchronous = FULL`). Several processes share one data dir — every
//! stdio client window starts its own plangate — so SQLite runs in WAL mode
//! with a busy timeout, migrations and key files are safe against a
//! concurrent first start, and nothing is cached in memory that another
//! process could change: every question is asked of the database.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use plangate_core::Scope;

mod data_dir;
mod error;
pub mod events;
mod keys;
mod private_fs;
mod sqlite;
mod time;

pub use data_dir::{DataDir, KeyMaterial, SEAL_KEY_VAR, SIGNING_KEY_VAR, default_data_dir};
pub use error::StoreError;
pub use keys::{
    ApiKey, CreatedKey, MAX_KEY_NAME_LEN, SHOWN_PREFIX_LEN, TOKEN_PREFIX, validate_key_name,
};
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
