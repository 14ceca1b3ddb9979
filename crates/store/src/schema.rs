//! Schema versions, the part of migrating that every backend shares.
//!
//! Each backend keeps its own ordered list of (version, SQL) — the
//! dialects differ — and applies the pending ones inside one transaction
//! that also records them in `schema_migrations`, under a lock that makes
//! concurrent first starts safe. Entries are only ever appended, never
//! edited, and both backends use the same version numbers for the same
//! tables, so "schema version N" means the same thing on either.
//!
//! Why not `sqlx::migrate!`: every data dir and database already in use
//! records its schema in `schema_migrations`; sqlx's migrator keeps its own
//! table and checksums, so switching would need a translation step for
//! each of them and gain no behaviour (both refuse a newer schema and
//! apply pending steps under a lock). The sqlx `migrate` feature is off.

use sqlx::{Database, Encode, Executor, FromRow, IntoArguments, Type};

use crate::{StoreError, now_ms};

/// One schema step: its version and the SQL that makes it.
pub(crate) type Migration = (i64, &'static str);

/// The migrations of `all` newer than `current`, the highest version the
/// database records, in order. A database recording a version this build
/// does not know was migrated by a newer plangate:
/// [`StoreError::SchemaTooNew`].
fn pending(
    current: i64,
    all: &'static [Migration],
) -> Result<impl Iterator<Item = &'static Migration>, StoreError> {
    let supported = all.last().map_or(0, |(v, _)| *v);
    if current > supported {
        return Err(StoreError::SchemaTooNew {
            found: current,
            supported,
        });
    }
    Ok(all.iter().filter(move |(v, _)| *v > current))
}

/// How a backend keeps `schema_migrations`, in its dialect.
pub(crate) struct VersionTable {
    /// Creates the table unless it exists.
    pub(crate) create: &'static str,
    /// The highest version recorded (0 for none), as a 64-bit integer.
    pub(crate) current: &'static str,
}

/// Brings the schema up to date on `conn`, inside the transaction the
/// backend opened under its migration lock (the caller commits): creates
/// `table` if needed, then applies each migration of `all` newer than the
/// version it records, recording each in the same transaction.
pub(crate) async fn apply_pending<DB>(
    conn: &mut DB::Connection,
    table: &VersionTable,
    all: &'static [Migration],
) -> Result<(), StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    (i64,): for<'r> FromRow<'r, DB::Row>,
{
    sqlx::query(table.create).execute(&mut *conn).await?;
    let current: i64 = sqlx::query_scalar(table.current)
        .fetch_one(&mut *conn)
        .await?;
    for (version, sql) in pending(current, all)? {
        sqlx::raw_sql(*sql).execute(&mut *conn).await?;
        sqlx::query("INSERT INTO schema_migrations (version, applied_at_ms) VALUES ($1, $2)")
            .bind(version)
            .bind(now_ms())
            .execute(&mut *conn)
            .await?;
        tracing::info!(version, "applied database migration");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &[Migration] = &[(1, "a"), (2, "b"), (3, "c")];

    #[test]
    fn only_newer_migrations_are_pending_in_order() {
        let versions = |current| {
            pending(current, ALL)
                .expect("pending")
                .map(|(v, _)| *v)
                .collect::<Vec<_>>()
        };
        assert_eq!(versions(0), [1, 2, 3]);
        assert_eq!(versions(2), [3]);
        assert!(versions(3).is_empty());
    }

    #[test]
    fn a_newer_database_is_refused() {
        let err = pending(4, ALL).err().expect("too new");
        assert!(
            matches!(
                err,
                StoreError::SchemaTooNew {
                    found: 4,
                    supported: 3
                }
            ),
            "{err}"
        );
    }
}
