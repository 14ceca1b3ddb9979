//! The one error type of the store.
//!
//! Messages are lowercase and name the value at fault. No variant ever
//! carries a token or key material: a bad environment value is described
//! (its length, its encoding), never echoed.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong in the store, so callers (the CLI, the
/// gateway) can map each case to one exit code or one answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A file or directory in the data dir could not be created, read or
    /// written.
    #[error("i/o error on {path}: {source}", path = path.display())]
    Io {
        /// The file or directory being worked on.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },
    /// The database refused or failed a statement. Only hashes are ever
    /// bound into statements, so the text never includes a token.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Another key that is not revoked already has this name.
    #[error("an active key named {0:?} already exists; revoke it or choose another name")]
    KeyNameTaken(String),
    /// No active key has this name and no key has this id.
    #[error("no active key named {0:?} and no key with that id")]
    KeyNotFound(String),
    /// A key name outside the allowed alphabet or length.
    #[error(
        "invalid key name {0:?}: use 1 to 64 letters, digits, '.', '_' or '-', not shaped like a key id (key_ + 16 hex)"
    )]
    InvalidKeyName(String),
    /// Key material given through the environment (or config) is unusable.
    /// The reason describes the value without repeating it.
    #[error("{var} is not usable key material: {reason}")]
    BadKeyMaterial {
        /// The variable at fault: `PLANGATE_SEAL_KEY` or `PLANGATE_SIGNING_KEY`.
        var: &'static str,
        /// Why it was refused (never the value itself).
        reason: String,
    },
    /// A key file in the data dir exists but does not hold a key.
    #[error("key file {path} is not usable: {reason}", path = path.display())]
    KeyFileInvalid {
        /// The key file at fault.
        path: PathBuf,
        /// Why it was refused (never its contents).
        reason: String,
    },
    /// The operating system's random number generator failed.
    #[error("the operating system's random number generator failed: {0}")]
    Random(String),
    /// SQLite would not switch the database to write-ahead logging, which
    /// several processes sharing one data dir depend on.
    #[error("{path} cannot use write-ahead logging (journal mode stayed {mode:?}); put the data dir on a local file system", path = path.display())]
    WalUnavailable {
        /// The database file.
        path: PathBuf,
        /// The journal mode SQLite reported instead of `wal`.
        mode: String,
    },
    /// The database was migrated by a newer plangate than this one.
    #[error(
        "database schema version {found} is newer than this plangate supports ({supported}); upgrade plangate"
    )]
    SchemaTooNew {
        /// The highest migration recorded in the database.
        found: i64,
        /// The highest migration this build knows.
        supported: i64,
    },
    /// A stored row holds a value this build cannot read.
    #[error("stored row in {table} is not valid: {reason}")]
    CorruptRow {
        /// The table holding the row.
        table: &'static str,
        /// What was wrong with it.
        reason: String,
    },
}

impl StoreError {
    /// A stable, machine-readable name for the error, for JSON output and
    /// exit-code mapping; unlike the message it never changes wording.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Io { .. } => "io",
            StoreError::Database(_) => "database",
            StoreError::KeyNameTaken(_) => "key_name_taken",
            StoreError::KeyNotFound(_) => "key_not_found",
            StoreError::InvalidKeyName(_) => "invalid_key_name",
            StoreError::BadKeyMaterial { .. } => "bad_key_material",
            StoreError::KeyFileInvalid { .. } => "key_file_invalid",
            StoreError::Random(_) => "random_unavailable",
            StoreError::WalUnavailable { .. } => "wal_unavailable",
            StoreError::SchemaTooNew { .. } => "schema_too_new",
            StoreError::CorruptRow { .. } => "corrupt_row",
        }
    }

    /// Wraps an I/O error with the path it happened on.
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        StoreError::Io {
            path: path.into(),
            source,
        }
    }
}
