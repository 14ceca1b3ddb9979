//! The PostgreSQL schema and how it is brought up to date: kept apart
//! from the store because the DDL (tables, the triggers that keep the log
//! append-only and number it in commit order) is long and changes only by
//! appending a version.

use sqlx::Connection;
use sqlx::postgres::PgConnection;

use crate::StoreError;
use crate::schema::{Migration, VersionTable, apply_pending};

/// The advisory lock key migrations hold: "plangate" in ASCII. It is
/// database-wide, so two plangate schemas in one database migrate one after
/// the other, which costs nothing worth avoiding.
pub(super) const MIGRATION_LOCK: i64 = 0x706c_616e_6761_7465;

/// The schema, as an ordered list of (version, SQL), with the same version
/// numbers as SQLite's for the same tables. Entries are only ever appended.
pub(super) const MIGRATIONS: &[Migration] = &[
    (
        1,
        "CREATE TABLE api_keys (
        seq            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id             TEXT   NOT NULL UNIQUE,
        name           TEXT   NOT NULL,
        scope          TEXT   NOT NULL CHECK (scope IN ('read', 'plan', 'write')),
        token_sha256   TEXT   NOT NULL UNIQUE CHECK (token_sha256 ~ '^[0-9a-f]{64}$'),
        prefix         TEXT   NOT NULL,
        created_at_ms  BIGINT NOT NULL,
        revoked_at_ms  BIGINT
    );
    CREATE UNIQUE INDEX api_keys_active_name ON api_keys (name) WHERE revoked_at_ms IS NULL;",
    ),
    // The event log. `event_seq` is the one-row counter that hands out
    // `seq` in commit order (see the module docs); the triggers make the
    // log append-only and gap-free per key, and pin their search_path so a
    // connection with another one cannot point them at other tables.
    // `key_id` sorts bytewise (COLLATE "C"), as in SQLite.
    (
        2,
        "CREATE TABLE event_seq (
        only_row  BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
        last_seq  BIGINT  NOT NULL CHECK (last_seq >= 0)
    );
    INSERT INTO event_seq (last_seq) VALUES (0);
    CREATE TABLE events (
        seq      BIGINT PRIMARY KEY,
        key_id   TEXT COLLATE \"C\" NOT NULL,
        key_seq  BIGINT NOT NULL CHECK (key_seq >= 1),
        at_ms    BIGINT NOT NULL,
        type     TEXT   NOT NULL CHECK (type <> ''),
        body     JSON   NOT NULL,
        UNIQUE (key_id, key_seq)
    );
    CREATE INDEX events_at_ms ON events (at_ms);

    CREATE FUNCTION events_number() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
    BEGIN
        UPDATE event_seq SET last_seq = last_seq + 1 RETURNING last_seq INTO NEW.seq;
        IF NEW.key_seq <> COALESCE(
            (SELECT MAX(key_seq) FROM events WHERE key_id = NEW.key_id), 0) + 1 THEN
            RAISE EXCEPTION 'events key_seq must follow the key''s last one';
        END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER events_number BEFORE INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION events_number();

    CREATE FUNCTION events_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'events are append-only: rows cannot be %', lower(TG_OP) || 'd';
    END $$;
    CREATE TRIGGER events_no_update_or_delete BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_refuse_change();
    CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_change();

    CREATE FUNCTION event_seq_only_forward() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP <> 'UPDATE' OR NEW.last_seq < OLD.last_seq THEN
            RAISE EXCEPTION 'event_seq only moves forward';
        END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER event_seq_only_forward BEFORE UPDATE OR DELETE ON event_seq
    FOR EACH ROW EXECUTE FUNCTION event_seq_only_forward();
    CREATE TRIGGER event_seq_no_truncate BEFORE TRUNCATE ON event_seq
    FOR EACH STATEMENT EXECUTE FUNCTION event_seq_only_forward();",
    ),
    // Operator tokens: the web console's credential, kept apart from API
    // keys so neither can ever stand in for the other.
    (
        3,
        "CREATE TABLE operator_tokens (
        seq            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id             TEXT   NOT NULL UNIQUE,
        name           TEXT   NOT NULL,
        token_sha256   TEXT   NOT NULL UNIQUE CHECK (token_sha256 ~ '^[0-9a-f]{64}$'),
        prefix         TEXT   NOT NULL,
        created_at_ms  BIGINT NOT NULL,
        revoked_at_ms  BIGINT
    );
    CREATE UNIQUE INDEX operator_tokens_active_name ON operator_tokens (name) WHERE revoked_at_ms IS NULL;",
    ),
    // OAuth credentials plangate holds for upstreams behind OAuth
    // (`plangate upstream login`), sealed with the seal key: one row per
    // upstream, shared by every replica.
    (
        4,
        "CREATE TABLE upstream_credentials (
        name           TEXT    NOT NULL PRIMARY KEY,
        sealed         TEXT    NOT NULL,
        updated_at_ms  BIGINT NOT NULL
    );",
    ),
    // The event log without its `at_ms` index, as in SQLite's version 5:
    // one index fewer to write per append; `audit export --since` reads
    // the log in seq order and filters by time.
    (5, "DROP INDEX events_at_ms;"),
    // Web console sessions ended by a logout, as in SQLite's version 6.
    (
        6,
        "CREATE TABLE console_sessions_ended (
        session_sha256  TEXT   NOT NULL PRIMARY KEY CHECK (session_sha256 ~ '^[0-9a-f]{64}$'),
        expires_at_ms   BIGINT NOT NULL
    );",
    ),
    // Each event's link and signature, as in SQLite's version 7.
    (
        7,
        "ALTER TABLE events ADD COLUMN hash TEXT;
    ALTER TABLE events ADD COLUMN sig TEXT;",
    ),
    // Undo states, as in SQLite's version 8.
    (
        8,
        "CREATE TABLE undo_states (
        key_id      TEXT   NOT NULL,
        step_id     TEXT   NOT NULL,
        digest      TEXT   NOT NULL,
        sealed      TEXT   NOT NULL,
        kept_at_ms  BIGINT NOT NULL,
        PRIMARY KEY (key_id, step_id)
    );
    CREATE INDEX undo_states_kept_at ON undo_states (kept_at_ms);",
    ),
    // The notification outbox, as in SQLite's version 9.
    (
        9,
        "CREATE TABLE notify_outbox (
        receiver       TEXT    NOT NULL,
        msg_id         TEXT    NOT NULL,
        event          TEXT    NOT NULL,
        notice         TEXT    NOT NULL,
        created_at_ms  BIGINT  NOT NULL,
        next_at_ms     BIGINT  NOT NULL,
        attempts       BIGINT  NOT NULL,
        state          TEXT    NOT NULL CHECK (state IN ('pending', 'delivered', 'given_up')),
        last_status    TEXT,
        PRIMARY KEY (receiver, msg_id)
    );
    CREATE INDEX notify_outbox_due ON notify_outbox (state, next_at_ms);
    CREATE INDEX notify_outbox_created ON notify_outbox (created_at_ms);
    CREATE TABLE notify_attempts (
        receiver  TEXT    NOT NULL,
        msg_id    TEXT    NOT NULL,
        attempt   BIGINT  NOT NULL,
        at_ms     BIGINT  NOT NULL,
        status    TEXT    NOT NULL,
        PRIMARY KEY (receiver, msg_id, attempt)
    );
    CREATE TABLE notify_cursor (
        name  TEXT    NOT NULL PRIMARY KEY,
        seq   BIGINT  NOT NULL
    );",
    ),
];

/// `schema_migrations` in PostgreSQL's dialect.
const VERSION_TABLE: VersionTable = VersionTable {
    create: "CREATE TABLE IF NOT EXISTS schema_migrations (
            version        BIGINT PRIMARY KEY,
            applied_at_ms  BIGINT NOT NULL
        )",
    current: "SELECT COALESCE(MAX(version), 0)::BIGINT FROM schema_migrations",
};

/// Applies every migration newer than the recorded version, in one
/// transaction that first takes [`MIGRATION_LOCK`]: replicas starting at
/// once queue on it, and each then sees what the first one did.
pub(super) async fn migrate(conn: &mut PgConnection) -> Result<(), StoreError> {
    let mut tx = conn.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await?;
    apply_pending::<sqlx::Postgres>(&mut tx, &VERSION_TABLE, MIGRATIONS).await?;
    tx.commit().await?;
    Ok(())
}
