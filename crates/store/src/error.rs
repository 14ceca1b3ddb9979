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
    /// Another operator token that is not revoked already has this name.
    #[error(
        "an active operator token named {0:?} already exists; revoke it or choose another name"
    )]
    OperatorNameTaken(String),
    /// No active operator token has this name and none has this id.
    #[error("no active operator token named {0:?} and none with that id")]
    OperatorNotFound(String),
    /// An operator name outside the allowed alphabet or length.
    #[error(
        "invalid operator name {0:?}: use 1 to 64 letters, digits, '.', '_' or '-', not shaped like an operator id (opr_ + 16 hex)"
    )]
    InvalidOperatorName(String),
    /// A console session named by anything but a SHA-256 in lowercase hex
    /// (the console's own mistake: a session is never named by its cookie).
    #[error("a console session is named by the SHA-256 of its nonce, 64 lowercase hex digits")]
    InvalidSessionId,
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
    /// A data dir, or a file plangate keeps in it, that another user could
    /// have planted, replaced or read: owned by someone else, a symbolic
    /// link, or (for a key file) open to the group or others. plangate
    /// refuses to trust it rather than act on it.
    #[error("{path} cannot be trusted: {reason}", path = path.display())]
    Untrusted {
        /// The directory or file at fault.
        path: PathBuf,
        /// What is wrong and what to do about it.
        reason: String,
    },
    /// The data dir names a file, or lies under one: a data dir is a
    /// directory (created when missing).
    #[error("{path} is a file, not a directory: the data dir must be a directory (plangate creates it when it does not exist); pass another --data-dir or PLANGATE_DATA_DIR", path = path.display())]
    NotADirectory {
        /// The file in the way.
        path: PathBuf,
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
    /// A database location (`--database`, `PLANGATE_DATABASE_URL`) that
    /// names no store plangate can open. `url` has its password replaced.
    #[error("database URL {url:?} is not usable: {reason}")]
    InvalidDatabaseUrl {
        /// The URL as given, password redacted.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A stored row holds a value this build cannot read.
    #[error("stored row in {table} is not valid: {reason}")]
    CorruptRow {
        /// The table holding the row.
        table: &'static str,
        /// What was wrong with it.
        reason: String,
    },
    /// An append expected the key's log to end at `expected`, but another
    /// writer had already appended: it ends at `found`. Nothing was
    /// written; the caller re-reads the key's events and retries.
    #[error(
        "events of key {key_id} end at key_seq {found}, not {expected}: another writer appended first; re-read and retry"
    )]
    Conflict {
        /// The key whose log was appended to.
        key_id: String,
        /// The last key_seq the caller had seen.
        expected: i64,
        /// The last key_seq actually stored.
        found: i64,
    },
    /// An event handed to the store cannot be recorded as given.
    #[error("event cannot be appended: {0}")]
    InvalidEvent(String),
    /// Sealing a secret failed (the input is beyond what the cipher
    /// accepts). The message never includes the secret.
    #[error("sealing a secret failed: the value is too large to seal")]
    SealFailed,
    /// A sealed value is not in the sealed format at all. The reason
    /// describes the value without repeating it.
    #[error("sealed value is malformed: {0}")]
    SealedMalformed(&'static str),
    /// A sealed value does not authenticate: another seal key, altered
    /// bytes, other associated data, or cut short.
    #[error(
        "sealed value does not open: wrong seal key, altered or truncated value, or sealed for something else"
    )]
    UnsealFailed,
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
            StoreError::OperatorNameTaken(_) => "operator_name_taken",
            StoreError::OperatorNotFound(_) => "operator_not_found",
            StoreError::InvalidOperatorName(_) => "invalid_operator_name",
            StoreError::InvalidSessionId => "invalid_session_id",
            StoreError::BadKeyMaterial { .. } => "bad_key_material",
            StoreError::KeyFileInvalid { .. } => "key_file_invalid",
            StoreError::Untrusted { .. } => "untrusted_data_dir",
            StoreError::NotADirectory { .. } => "data_dir_not_a_directory",
            StoreError::Random(_) => "random_unavailable",
            StoreError::WalUnavailable { .. } => "wal_unavailable",
            StoreError::SchemaTooNew { .. } => "schema_too_new",
            StoreError::InvalidDatabaseUrl { .. } => "invalid_database_url",
            StoreError::CorruptRow { .. } => "corrupt_row",
            StoreError::Conflict { .. } => "conflict",
            StoreError::InvalidEvent(_) => "invalid_event",
            StoreError::SealFailed => "seal_failed",
            StoreError::SealedMalformed(_) => "sealed_malformed",
            StoreError::UnsealFailed => "unseal_failed",
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
