//! plangate's durable state.
//!
//! This crate owns everything plangate keeps across restarts: the data dir,
//! the key material generated into it (the seal and signing keys, docs/design.md
//! §2), API keys, operator tokens (the web console's credential), and the
//! append-only event log (docs/design.md §6, module
//! [`events`]) that mode and plan are folded from. Callers see one trait,
//! [`Store`], chosen by a config enum, [`StoreConfig`], that returns
//! `Arc<dyn Store>`; they never know which database is behind it. SQLite is
//! the embedded default; PostgreSQL serves several replicas, behind the
//! same trait and the same conformance tests. Module [`seal`] seals secret
//! argument values at rest under the seal key.
//!
//! It must never store or log a token or a secret in plaintext. An API
//! token is shown once, when it is created, and kept only as its SHA-256;
//! secrets are sealed (XChaCha20-Poly1305) before they reach an event;
//! key material has a redacting `Debug`; errors describe a bad value
//! without repeating it; a database URL is shown with its password
//! replaced. It does not interpret events: their bodies are
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
//! change: every question is asked of the database. A caller that keeps
//! answers checks them against marks every process moves — the key epoch
//! ([`Credentials::key_epoch`]) and the log mark ([`EventLog::log_mark`]).
//! PostgreSQL gets the
//! same guarantees from an advisory lock around migrations and a one-row
//! counter that serializes appends (see its module for the cost).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use plangate_core::Scope;

mod credentials;
mod data_dir;
mod error;
pub mod events;
mod keys;
mod log_key;
mod operators;
mod outbox;
mod postgres;
mod private_fs;
mod random;
mod rows;
mod schema;
pub mod seal;
mod sqlite;
mod time;
mod tokens;
mod undo;
mod wal_mark;

pub use data_dir::{
    DataDir, KeyMaterial, KeysFromEnv, LOG_KEY_VAR, SEAL_KEY_VAR, SIGNING_KEY_VAR, default_data_dir,
};
pub use error::StoreError;
pub use events::{NewEvent, Seal, StoredEvent, body_text};
pub use keys::{
    ApiKey, CreatedKey, IDENTITY_PREFIX, Identity, MAX_KEY_NAME_LEN, SHOWN_PREFIX_LEN,
    TOKEN_PREFIX, validate_key_name,
};
pub use log_key::{LogKey, PUBLIC_KEY_PREFIX, PublicLogKey, verify_p256};
pub use operators::{
    CreatedOperatorToken, OPERATOR_TOKEN_PREFIX, OperatorToken, validate_operator_name,
};
pub use outbox::{AttemptEnd, Outbox, OutboxMessage, OutboxRow, OutboxState};
pub use postgres::open_postgres;
pub use random::{new_id, random_bytes};
pub use sqlite::open_sqlite;
pub use time::{format_time_ms, now_ms};
pub use undo::{KeptUndo, UndoStates};

/// What [`Credentials::key_epoch`] returns: equal values mean no key was revoked
/// in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyEpoch([u8; 16]);

/// What [`EventLog::log_mark`] returns: equal values mean no event was
/// committed in between, by any process sharing the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LogMark {
    /// The file the mark was read from (device, inode).
    file: (u64, u64),
    /// What the file said.
    header: [u8; 48],
}

impl LogMark {
    /// Whether this mark is the one right after `earlier` with exactly one
    /// commit between: the same file, and the WAL index's change counter
    /// (bytes 8–11, native order) moved by one.
    pub(crate) fn follows(&self, earlier: &LogMark) -> bool {
        let counter = |m: &LogMark| {
            u32::from_ne_bytes([m.header[8], m.header[9], m.header[10], m.header[11]])
        };
        self.file == earlier.file && counter(self) == counter(earlier).wrapping_add(1)
    }
}

/// The one storage interface: [`Credentials`], the [`EventLog`] and the
/// [`UndoStates`] kept beside it ([`Store::undo_states`]). Every backend
/// implements all three, and one conformance suite
/// (`tests/conformance.rs`) runs against each, so callers can rely on the
/// same behaviour whichever database is configured. A caller that needs
/// only one half takes that trait.
pub trait Store: Credentials + EventLog {
    /// The undo states kept beside the log, in the same database.
    fn undo_states(&self) -> &dyn UndoStates;

    /// The notification outbox kept beside the log, in the same database.
    fn outbox(&self) -> &dyn Outbox;
}

/// Who may call: API keys for agents, operator tokens for the console.
/// Nothing here changes a key's events; only
/// [`Credentials::authenticate_seen`] reads where its log stands.
#[async_trait]
pub trait Credentials: Send + Sync + 'static {
    /// Creates an API key and returns it with its token, which exists only
    /// in the returned value. `name` is 1–64 of `[A-Za-z0-9._-]`
    /// ([`StoreError::InvalidKeyName`]) and unique among keys not revoked
    /// ([`StoreError::KeyNameTaken`]).
    async fn create_key(&self, name: &str, scope: Scope) -> Result<CreatedKey, StoreError>;

    /// The row of OAuth identity `identity`, recorded (with `scope`, the
    /// one its first token carried) on its first request; an existing row
    /// is returned as it is — revoked if an operator revoked it.
    async fn ensure_identity(
        &self,
        identity: &Identity,
        scope: Scope,
    ) -> Result<ApiKey, StoreError>;

    /// Every key, revoked ones included, in order of creation.
    async fn list_keys(&self) -> Result<Vec<ApiKey>, StoreError>;

    /// The OAuth credentials held for upstream `name`, as sealed
    /// ([`seal`]) by the gateway; `None` before `plangate upstream login`.
    async fn upstream_credentials(&self, name: &str) -> Result<Option<String>, StoreError>;

    /// Replaces upstream `name`'s sealed OAuth credentials (a login, a
    /// refresh); every replica reads them from here.
    async fn save_upstream_credentials(&self, name: &str, sealed: &str) -> Result<(), StoreError>;

    /// Forgets upstream `name`'s OAuth credentials.
    async fn clear_upstream_credentials(&self, name: &str) -> Result<(), StoreError>;

    /// Revokes the active key with that name, or the key with that id, and
    /// returns it as now stored. [`StoreError::KeyNotFound`] if neither
    /// exists.
    async fn revoke_key(&self, name_or_id: &str) -> Result<ApiKey, StoreError>;

    /// The active key this token belongs to. Unknown, malformed and revoked
    /// tokens are `None`, not errors: to a caller they are all "no key".
    async fn authenticate(&self, token: &str) -> Result<Option<ApiKey>, StoreError>;

    /// [`Credentials::authenticate`], also answering the key's last
    /// key_seq in the event log as the same statement saw it (0 if it has
    /// no events), when the backend reads both at once. A gateway that
    /// holds the key's state folded up to that key_seq knows it current as
    /// of the authentication — after the request arrived — without asking
    /// the log again: one round trip fewer for a write that runs, on a
    /// backend that offers no [`EventLog::log_mark`]. `None` for the key_seq
    /// (the default) when the backend does not read it with the key.
    async fn authenticate_seen(
        &self,
        token: &str,
    ) -> Result<Option<(ApiKey, Option<i64>)>, StoreError> {
        Ok(self.authenticate(token).await?.map(|key| (key, None)))
    }

    /// Whether [`Credentials::authenticate_seen`] answers a key_seq at all
    /// (constant, and free to ask): a caller prepares what to ask with the
    /// key only when it would be answered.
    fn authenticate_sees_log(&self) -> bool {
        false
    }

    /// A cheap, synchronous token that changes whenever a key is revoked
    /// through this store, by any process sharing it. A gateway may keep
    /// keys it has authenticated while this stays the same, so a revocation
    /// still takes effect at the key's next request without a store query
    /// on every request. `None` (the default) when the backend cannot offer
    /// one: then every request asks the store.
    fn key_epoch(&self) -> Option<KeyEpoch> {
        None
    }

    /// The active key with that name, or the key (revoked or not) with that
    /// id — the same rule as [`Credentials::revoke_key`] — without changing it.
    /// `None` if neither exists.
    async fn find_key(&self, name_or_id: &str) -> Result<Option<ApiKey>, StoreError>;

    /// Creates an operator token for the web console and returns it with
    /// its token, which exists only in the returned value. `name` follows
    /// the key name rule ([`StoreError::InvalidOperatorName`]) and is
    /// unique among tokens not revoked ([`StoreError::OperatorNameTaken`]).
    async fn create_operator_token(&self, name: &str) -> Result<CreatedOperatorToken, StoreError>;

    /// Every operator token, revoked ones included, in order of creation.
    async fn list_operator_tokens(&self) -> Result<Vec<OperatorToken>, StoreError>;

    /// Revokes the active operator token with that name, or the token with
    /// that id, and returns it as now stored; every console session opened
    /// with it stops at its next request. [`StoreError::OperatorNotFound`]
    /// if neither exists.
    async fn revoke_operator_token(&self, name_or_id: &str) -> Result<OperatorToken, StoreError>;

    /// The active operator token `token` is. Unknown, malformed and revoked
    /// tokens — and API keys, which are never operator tokens — are `None`.
    async fn authenticate_operator(&self, token: &str)
    -> Result<Option<OperatorToken>, StoreError>;

    /// The operator token with that id, revoked or not (`None` if there is
    /// none): how a console session is checked on every request.
    async fn operator_token(&self, id: &str) -> Result<Option<OperatorToken>, StoreError>;

    /// Records that the console session named `session_sha256` (the
    /// SHA-256, in lowercase hex, of the session's nonce — never the
    /// cookie) was logged out: from now on
    /// [`Credentials::console_session_ended`] says so to every process
    /// sharing the store. Kept until `expires_at_ms`, when the session
    /// would have ended anyway; rows past theirs are dropped here.
    /// Idempotent. A name that is not 64 hex digits is
    /// [`StoreError::InvalidSessionId`].
    async fn end_console_session(
        &self,
        session_sha256: &str,
        expires_at_ms: i64,
    ) -> Result<(), StoreError>;

    /// Whether the console session named `session_sha256` was logged out
    /// ([`Credentials::end_console_session`]).
    async fn console_session_ended(&self, session_sha256: &str) -> Result<bool, StoreError>;
}

/// The append-only event log that mode and plan are folded from, per key
/// and in one global order.
#[async_trait]
pub trait EventLog: Send + Sync + 'static {
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
    ) -> Result<i64, StoreError> {
        Ok(self
            .append_events_marked(key_id, expected_key_seq, events)
            .await?
            .0)
    }

    /// Appends to several keys' logs in one transaction, all or nothing:
    /// each part's events (`(key_id, expected_key_seq, events)`, each key
    /// once) after the key_seq its caller expects, as
    /// [`EventLog::append_events`] checks it. If any part's log moved, or
    /// any event is refused, nothing of any part is written, and the
    /// answer is that part's [`StoreError::Conflict`] (or the refusal).
    /// Answers each part's new last key_seq, in order. For an act a person
    /// takes on several keys' plans at once (approve them all or none).
    async fn append_together(&self, parts: &[AppendPart]) -> Result<Vec<i64>, StoreError>;

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

    /// The global seq of the newest committed event (0 for none): where a
    /// process that starts following the log begins.
    async fn last_seq(&self) -> Result<i64, StoreError>;

    /// A cheap, synchronous mark that changes whenever anything is
    /// committed to the store, by any process sharing it. A state folded
    /// from events read after taking a mark is still current while the
    /// mark stays the same, so it can be answered from memory without a
    /// query. `None` (the default) when the backend cannot offer one right
    /// now: then the caller asks the store.
    fn log_mark(&self) -> Option<LogMark> {
        None
    }

    /// [`EventLog::append_events`], also answering the log mark right
    /// after the append's commit when the backend knows that no other
    /// commit came between: the caller's state with these events folded
    /// in is then current at that mark ([`EventLog::log_mark`]), and needs
    /// no read while the mark holds. `None` when it cannot tell. Every
    /// backend writes this one; [`EventLog::append_events`] is it without
    /// the mark.
    async fn append_events_marked(
        &self,
        key_id: &str,
        expected_key_seq: i64,
        events: &[NewEvent],
    ) -> Result<(i64, Option<LogMark>), StoreError>;
}

/// One key's part of [`EventLog::append_together`].
#[derive(Debug, Clone)]
pub struct AppendPart {
    /// The key whose log it goes to.
    pub key_id: String,
    /// The key's last key_seq the caller decided on.
    pub expected_key_seq: i64,
    /// The events, in order.
    pub events: Vec<NewEvent>,
}

/// Which backend holds the state. Parsing config yields this value without
/// touching a database; [`StoreConfig::open`] then builds the store.
///
/// `Debug` and `Display` never show a PostgreSQL URL's password.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreConfig {
    /// An embedded SQLite file, normally [`DataDir::sqlite_path`].
    Sqlite(PathBuf),
    /// A PostgreSQL database, by URL:
    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAMS]`.
    Postgres(String),
}

impl StoreConfig {
    /// Reads a database location as an operator writes it: a
    /// `postgres://` or `postgresql://` URL, a `sqlite:PATH` (or
    /// `sqlite://PATH`) URL, or a plain file path (SQLite). Any other
    /// `SCHEME://` is [`StoreError::InvalidDatabaseUrl`], as are an empty
    /// value, in-memory SQLite (the log must outlive the process) and
    /// query parameters on a SQLite URL (they would be ignored).
    pub fn from_url(s: &str) -> Result<StoreConfig, StoreError> {
        let invalid = |reason: String| StoreError::InvalidDatabaseUrl {
            url: redact_url(s),
            reason,
        };
        if s.trim().is_empty() {
            return Err(invalid("it is empty".to_owned()));
        }
        if let Some(rest) = s.strip_prefix("sqlite:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(invalid("it names no file".to_owned()));
            }
            if path.contains('?') {
                return Err(invalid(
                    "SQLite URL parameters are not supported; give the file path alone".to_owned(),
                ));
            }
            if path == ":memory:" {
                return Err(invalid(
                    "an in-memory SQLite database would lose the event log; give a file path"
                        .to_owned(),
                ));
            }
            return Ok(StoreConfig::Sqlite(PathBuf::from(path)));
        }
        match s.split_once("://") {
            Some((scheme, _)) if scheme == "postgres" || scheme == "postgresql" => {
                Ok(StoreConfig::Postgres(s.to_owned()))
            }
            Some((scheme, _)) => Err(invalid(format!(
                "unsupported scheme {scheme:?}; use postgres://…, sqlite:PATH or a file path"
            ))),
            None => Ok(StoreConfig::Sqlite(PathBuf::from(s))),
        }
    }

    /// Opens the configured store, creating and migrating it as needed.
    pub async fn open(&self) -> Result<Arc<dyn Store>, StoreError> {
        match self {
            StoreConfig::Sqlite(path) => open_sqlite(path).await,
            StoreConfig::Postgres(url) => open_postgres(url).await,
        }
    }
}

impl fmt::Display for StoreConfig {
    /// `SQLite file PATH` or `PostgreSQL URL`, the password replaced.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreConfig::Sqlite(path) => write!(f, "SQLite file {}", path.display()),
            StoreConfig::Postgres(url) => write!(f, "PostgreSQL {}", redact_url(url)),
        }
    }
}

impl fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreConfig::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            StoreConfig::Postgres(url) => {
                f.debug_tuple("Postgres").field(&redact_url(url)).finish()
            }
        }
    }
}

/// `url` with any password replaced by `[redacted]`: the one in the user
/// info (everything between the first `:` after `://` and the last `@`
/// before the query, so an unescaped `/` or `@` in a password cannot leak
/// part of it) and any `password=` query parameter. Errs on the side of
/// hiding too much.
fn redact_url(url: &str) -> String {
    const HIDDEN: &str = "[redacted]";
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (before_query, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let mut out = format!("{scheme}://");
    match before_query.rsplit_once('@') {
        Some((userinfo, host_and_path)) => {
            match userinfo.split_once(':') {
                Some((user, _password)) => out.push_str(&format!("{user}:{HIDDEN}")),
                None => out.push_str(userinfo),
            }
            out.push('@');
            out.push_str(host_and_path);
        }
        None => out.push_str(before_query),
    }
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((name, _)) if name.eq_ignore_ascii_case("password") => {
                    format!("{name}={HIDDEN}")
                }
                _ => param.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_pick_their_backend() {
        for (url, want) in [
            (
                "postgres://u@127.0.0.1:5432/db",
                StoreConfig::Postgres("postgres://u@127.0.0.1:5432/db".into()),
            ),
            (
                "postgresql://h/db?options=-c%20search_path%3Ds",
                StoreConfig::Postgres("postgresql://h/db?options=-c%20search_path%3Ds".into()),
            ),
            (
                "sqlite:/var/lib/p.db",
                StoreConfig::Sqlite("/var/lib/p.db".into()),
            ),
            (
                "sqlite:///var/lib/p.db",
                StoreConfig::Sqlite("/var/lib/p.db".into()),
            ),
            ("sqlite://rel/p.db", StoreConfig::Sqlite("rel/p.db".into())),
            ("sqlite:p.db", StoreConfig::Sqlite("p.db".into())),
            (
                "/srv/plangate/plangate.db",
                StoreConfig::Sqlite("/srv/plangate/plangate.db".into()),
            ),
            ("./p.db", StoreConfig::Sqlite("./p.db".into())),
        ] {
            assert_eq!(StoreConfig::from_url(url).expect(url), want, "{url}");
        }
    }

    #[test]
    fn bad_urls_are_refused_clearly_without_the_password() {
        for (url, needle) in [
            (
                "mysql://root:hunter2@db/plangate",
                "unsupported scheme \"mysql\"",
            ),
            ("", "empty"),
            ("sqlite:", "no file"),
            ("sqlite::memory:", "in-memory"),
            ("sqlite://p.db?mode=rwc", "parameters"),
        ] {
            let err = StoreConfig::from_url(url).expect_err(url);
            assert_eq!(err.code(), "invalid_database_url");
            let msg = err.to_string();
            assert!(msg.contains(needle), "{msg}");
            assert!(!msg.contains("hunter2"), "{msg}");
        }
    }

    #[test]
    fn a_postgres_url_is_shown_without_its_password() {
        for (url, shown) in [
            (
                "postgres://plangate:hunter2@db:5432/p",
                "postgres://plangate:[redacted]@db:5432/p",
            ),
            ("postgres://plangate@db/p", "postgres://plangate@db/p"),
            (
                "postgres://u:hun/ter@2@db/p?sslmode=prefer&password=hunter2",
                "postgres://u:[redacted]@db/p?sslmode=prefer&password=[redacted]",
            ),
            (
                "postgres://db/p?PASSWORD=hunter2",
                "postgres://db/p?PASSWORD=[redacted]",
            ),
        ] {
            let config = StoreConfig::Postgres(url.to_owned());
            assert_eq!(config.to_string(), format!("PostgreSQL {shown}"));
            let debug = format!("{config:?}");
            assert!(
                !debug.contains("hunter2") && !debug.contains("ter@2"),
                "{debug}"
            );
        }
    }
}
