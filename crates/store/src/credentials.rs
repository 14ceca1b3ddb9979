//! API keys and operator tokens, written once for every SQL backend.
//!
//! The two tables are the same shape (a name unique among active rows, the
//! token's SHA-256, a shown prefix, created and revoked times) and both
//! backends speak the same SQL for them: sqlx binds `$1`, `$2`, … on SQLite
//! as on PostgreSQL. So the queries and the row mapping live here, generic
//! over the sqlx database; each backend holds a [`SqlCredentials`] and its
//! [`crate::Credentials`] impl only forwards (SQLite adds its revocation
//! epoch file around `revoke_key`).

use plangate_core::Scope;
use sqlx::error::ErrorKind;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Type};

use crate::keys::{
    ApiKey, CreatedKey, is_well_formed_token, key_columns, key_from_row, looks_like_key_id,
    new_key_id, new_token, token_hash, validate_key_name,
};
use crate::operators::{
    CreatedOperatorToken, OperatorToken, is_well_formed_operator_token, looks_like_operator_id,
    new_operator_id, new_operator_token, operator_columns, operator_from_row,
    validate_operator_name,
};
use crate::tokens::shown_prefix;
use crate::{StoreError, now_ms};

/// Keys and operator tokens in the pool's database.
#[derive(Debug)]
pub(crate) struct SqlCredentials<DB: Database> {
    pool: Pool<DB>,
}

impl<DB: Database> Clone for SqlCredentials<DB> {
    fn clone(&self) -> Self {
        SqlCredentials {
            pool: self.pool.clone(),
        }
    }
}

impl<DB: Database> SqlCredentials<DB> {
    /// Credentials kept in `pool`'s database (its tables already migrated).
    pub(crate) fn new(pool: Pool<DB>) -> Self {
        SqlCredentials { pool }
    }

    /// The pool, for the other tables kept the same way ([`crate::undo`]).
    pub(crate) fn pool(&self) -> &Pool<DB> {
        &self.pool
    }
}

/// A unique-name violation as the backend-neutral error `taken` builds.
fn insert_error(e: sqlx::Error, taken: impl FnOnce() -> StoreError) -> StoreError {
    match e {
        sqlx::Error::Database(db) if db.kind() == ErrorKind::UniqueViolation => taken(),
        other => other.into(),
    }
}

/// Whether `s` is a SHA-256 in lowercase hex, as a session's name must be.
fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Revoke by id keeps a revoked row's first revocation time; revoke by name
/// takes only the active row of that name. Names can never look like ids
/// (see `validate_key_name`), so the shape alone says which one is meant.
macro_rules! revoke_sql {
    ($table:literal, $columns:ident) => {
        (
            concat!(
                "UPDATE ",
                $table,
                " SET revoked_at_ms = COALESCE(revoked_at_ms, $1) WHERE id = $2 RETURNING ",
                $columns!()
            ),
            concat!(
                "UPDATE ",
                $table,
                " SET revoked_at_ms = $1 WHERE name = $2 AND revoked_at_ms IS NULL RETURNING ",
                $columns!()
            ),
        )
    };
}

impl<DB> SqlCredentials<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB>,
    for<'r> i64: Decode<'r, DB>,
    &'static str: ColumnIndex<DB::Row>,
{
    pub(crate) async fn create_key(
        &self,
        name: &str,
        scope: Scope,
    ) -> Result<CreatedKey, StoreError> {
        validate_key_name(name)?;
        let token = new_token()?;
        let key = ApiKey {
            id: new_key_id()?,
            name: name.to_owned(),
            scope,
            prefix: shown_prefix(&token),
            created_at_ms: now_ms(),
            revoked_at_ms: None,
        };
        sqlx::query(
            "INSERT INTO api_keys (id, name, scope, token_sha256, prefix, created_at_ms)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(key.id.clone())
        .bind(key.name.clone())
        .bind(key.scope.as_str())
        .bind(token_hash(&token))
        .bind(key.prefix.clone())
        .bind(key.created_at_ms)
        .execute(&self.pool)
        .await
        .map_err(|e| insert_error(e, || StoreError::KeyNameTaken(name.to_owned())))?;
        tracing::info!(key_id = %key.id, name = %key.name, scope = %key.scope, "created api key");
        Ok(CreatedKey { key, token })
    }

    pub(crate) async fn ensure_identity(
        &self,
        identity: &crate::keys::Identity,
        scope: Scope,
    ) -> Result<ApiKey, StoreError> {
        // A row no token can match: the SHA-256 of random bytes nobody
        // keeps (the column is unique and required).
        let never = hex::encode(crate::random::random_bytes::<32>()?);
        let sql = concat!(
            "INSERT INTO api_keys (id, name, scope, token_sha256, prefix, created_at_ms)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING RETURNING ",
            key_columns!()
        );
        let inserted = sqlx::query(sql)
            .bind(identity.id.clone())
            .bind(identity.name.clone())
            .bind(scope.as_str())
            .bind(never)
            .bind(crate::keys::IDENTITY_PREFIX)
            .bind(now_ms())
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| insert_error(e, || StoreError::KeyNameTaken(identity.name.clone())))?;
        if let Some(row) = inserted {
            tracing::info!(key_id = %identity.id, name = %identity.name, "first request of an OAuth identity: recorded");
            return key_from_row(&row);
        }
        let sql = concat!("SELECT ", key_columns!(), " FROM api_keys WHERE id = $1");
        let row = sqlx::query(sql)
            .bind(identity.id.clone())
            .fetch_one(&self.pool)
            .await?;
        key_from_row(&row)
    }

    pub(crate) async fn upstream_credentials(
        &self,
        name: &str,
    ) -> Result<Option<String>, StoreError> {
        let row = sqlx::query("SELECT sealed FROM upstream_credentials WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match row {
            Some(row) => Some(sqlx::Row::try_get::<String, _>(&row, "sealed")?),
            None => None,
        })
    }

    pub(crate) async fn save_upstream_credentials(
        &self,
        name: &str,
        sealed: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO upstream_credentials (name, sealed, updated_at_ms) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO UPDATE SET sealed = excluded.sealed, updated_at_ms = excluded.updated_at_ms",
        )
        .bind(name)
        .bind(sealed)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub(crate) async fn clear_upstream_credentials(&self, name: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM upstream_credentials WHERE name = $1")
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub(crate) async fn list_keys(&self) -> Result<Vec<ApiKey>, StoreError> {
        let sql = concat!("SELECT ", key_columns!(), " FROM api_keys ORDER BY seq");
        self.fetch_every(sql, key_from_row).await
    }

    pub(crate) async fn revoke_key(&self, name_or_id: &str) -> Result<ApiKey, StoreError> {
        let sqls = revoke_sql!("api_keys", key_columns);
        let key = self
            .revoke(
                sqls,
                looks_like_key_id(name_or_id),
                name_or_id,
                key_from_row,
            )
            .await?
            .ok_or_else(|| StoreError::KeyNotFound(name_or_id.to_owned()))?;
        tracing::info!(key_id = %key.id, name = %key.name, "revoked api key");
        Ok(key)
    }

    pub(crate) async fn authenticate(&self, token: &str) -> Result<Option<ApiKey>, StoreError> {
        let sql = concat!(
            "SELECT ",
            key_columns!(),
            " FROM api_keys WHERE token_sha256 = $1 AND revoked_at_ms IS NULL"
        );
        self.by_api_token(sql, token, key_from_row).await
    }

    /// What `sql` finds by the hash of API token `token`, read by
    /// `from_row`: [`SqlCredentials::authenticate`], and PostgreSQL's
    /// `authenticate_seen`, which reads the key's log beside it. A token
    /// not shaped like an API key's finds nothing, without a query.
    pub(crate) async fn by_api_token<T>(
        &self,
        sql: &'static str,
        token: &str,
        from_row: impl Fn(&DB::Row) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        if !is_well_formed_token(token) {
            return Ok(None);
        }
        self.fetch_by(sql, &token_hash(token), from_row).await
    }

    pub(crate) async fn find_key(&self, name_or_id: &str) -> Result<Option<ApiKey>, StoreError> {
        // The same rule as `revoke_key`: the shape says name or id.
        let sql = if looks_like_key_id(name_or_id) {
            concat!("SELECT ", key_columns!(), " FROM api_keys WHERE id = $1")
        } else {
            concat!(
                "SELECT ",
                key_columns!(),
                " FROM api_keys WHERE name = $1 AND revoked_at_ms IS NULL"
            )
        };
        self.fetch_by(sql, name_or_id, key_from_row).await
    }

    pub(crate) async fn create_operator_token(
        &self,
        name: &str,
    ) -> Result<CreatedOperatorToken, StoreError> {
        validate_operator_name(name)?;
        let token = new_operator_token()?;
        let operator = OperatorToken {
            id: new_operator_id()?,
            name: name.to_owned(),
            prefix: shown_prefix(&token),
            created_at_ms: now_ms(),
            revoked_at_ms: None,
        };
        sqlx::query(
            "INSERT INTO operator_tokens (id, name, token_sha256, prefix, created_at_ms)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(operator.id.clone())
        .bind(operator.name.clone())
        .bind(token_hash(&token))
        .bind(operator.prefix.clone())
        .bind(operator.created_at_ms)
        .execute(&self.pool)
        .await
        .map_err(|e| insert_error(e, || StoreError::OperatorNameTaken(name.to_owned())))?;
        tracing::info!(operator_id = %operator.id, name = %operator.name, "created operator token");
        Ok(CreatedOperatorToken { operator, token })
    }

    pub(crate) async fn list_operator_tokens(&self) -> Result<Vec<OperatorToken>, StoreError> {
        let sql = concat!(
            "SELECT ",
            operator_columns!(),
            " FROM operator_tokens ORDER BY seq"
        );
        self.fetch_every(sql, operator_from_row).await
    }

    pub(crate) async fn revoke_operator_token(
        &self,
        name_or_id: &str,
    ) -> Result<OperatorToken, StoreError> {
        let sqls = revoke_sql!("operator_tokens", operator_columns);
        let is_id = looks_like_operator_id(name_or_id);
        let operator = self
            .revoke(sqls, is_id, name_or_id, operator_from_row)
            .await?
            .ok_or_else(|| StoreError::OperatorNotFound(name_or_id.to_owned()))?;
        tracing::info!(operator_id = %operator.id, name = %operator.name, "revoked operator token");
        Ok(operator)
    }

    pub(crate) async fn authenticate_operator(
        &self,
        token: &str,
    ) -> Result<Option<OperatorToken>, StoreError> {
        if !is_well_formed_operator_token(token) {
            return Ok(None);
        }
        let sql = concat!(
            "SELECT ",
            operator_columns!(),
            " FROM operator_tokens WHERE token_sha256 = $1 AND revoked_at_ms IS NULL"
        );
        self.fetch_by(sql, &token_hash(token), operator_from_row)
            .await
    }

    pub(crate) async fn operator_token(
        &self,
        id: &str,
    ) -> Result<Option<OperatorToken>, StoreError> {
        let sql = concat!(
            "SELECT ",
            operator_columns!(),
            " FROM operator_tokens WHERE id = $1"
        );
        self.fetch_by(sql, id, operator_from_row).await
    }

    pub(crate) async fn end_console_session(
        &self,
        session_sha256: &str,
        expires_at_ms: i64,
    ) -> Result<(), StoreError> {
        if !is_sha256_hex(session_sha256) {
            return Err(StoreError::InvalidSessionId);
        }
        // Sessions past their own expiry are refused without a row: their
        // rows go, so the table holds at most the logouts of one session
        // lifetime.
        sqlx::query("DELETE FROM console_sessions_ended WHERE expires_at_ms <= $1")
            .bind(now_ms())
            .execute(&self.pool)
            .await?;
        sqlx::query(
            "INSERT INTO console_sessions_ended (session_sha256, expires_at_ms) VALUES ($1, $2)
             ON CONFLICT (session_sha256) DO NOTHING",
        )
        .bind(session_sha256)
        .bind(expires_at_ms)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub(crate) async fn console_session_ended(
        &self,
        session_sha256: &str,
    ) -> Result<bool, StoreError> {
        let row = sqlx::query(
            "SELECT session_sha256 FROM console_sessions_ended WHERE session_sha256 = $1",
        )
        .bind(session_sha256)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.is_some())
    }

    /// The row `sql` finds by its one bound value, read by `from_row`:
    /// every lookup of a key or an operator token by id, name or token
    /// hash.
    async fn fetch_by<T>(
        &self,
        sql: &'static str,
        value: &str,
        from_row: impl Fn(&DB::Row) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        let row = sqlx::query(sql)
            .bind(value)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(from_row).transpose()
    }

    /// Every row `sql` (which binds nothing) returns, read by `from_row`.
    async fn fetch_every<T>(
        &self,
        sql: &'static str,
        from_row: impl Fn(&DB::Row) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let rows = sqlx::query(sql).fetch_all(&self.pool).await?;
        rows.iter().map(from_row).collect()
    }

    /// Revokes the row `name_or_id` names with one of `revoke_sql!`'s pair:
    /// by id when it has the shape of an id (`is_id`), else the active row
    /// of that name. `None` when no row matched.
    async fn revoke<T>(
        &self,
        (by_id, by_name): (&'static str, &'static str),
        is_id: bool,
        name_or_id: &str,
        from_row: impl Fn(&DB::Row) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        let sql = if is_id { by_id } else { by_name };
        let row = sqlx::query(sql)
            .bind(now_ms())
            .bind(name_or_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(from_row).transpose()
    }

    // === undo states ([`crate::undo`]): the same pool, the same bounds ===

    pub(crate) async fn keep_undo_sql(
        &self,
        key_id: &str,
        step_id: &str,
        digest: &str,
        sealed: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO undo_states (key_id, step_id, digest, sealed, kept_at_ms) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (key_id, step_id) DO UPDATE SET digest = excluded.digest, sealed = excluded.sealed, kept_at_ms = excluded.kept_at_ms",
        )
        .bind(key_id)
        .bind(step_id)
        .bind(digest)
        .bind(sealed)
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    pub(crate) async fn undo_state_sql(
        &self,
        key_id: &str,
        step_id: &str,
    ) -> Result<Option<crate::KeptUndo>, StoreError> {
        let row = sqlx::query(
            "SELECT digest, sealed, kept_at_ms FROM undo_states WHERE key_id = $1 AND step_id = $2",
        )
        .bind(key_id)
        .bind(step_id)
        .fetch_optional(self.pool())
        .await?;
        row.map(|row| {
            Ok(crate::KeptUndo {
                digest: sqlx::Row::try_get(&row, "digest")?,
                sealed: sqlx::Row::try_get(&row, "sealed")?,
                kept_at_ms: sqlx::Row::try_get(&row, "kept_at_ms")?,
            })
        })
        .transpose()
    }

    pub(crate) async fn drop_undo_before_sql(
        &self,
        before_ms: i64,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let rows =
            sqlx::query("DELETE FROM undo_states WHERE kept_at_ms < $1 RETURNING key_id, step_id")
                .bind(before_ms)
                .fetch_all(self.pool())
                .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    sqlx::Row::try_get(row, "key_id")?,
                    sqlx::Row::try_get(row, "step_id")?,
                ))
            })
            .collect()
    }
}

/// The [`crate::UndoStates`] impl of a backend's `SqlCredentials` (the same
/// pool as its log): every method runs the SQL written once in
/// [`crate::credentials`].
macro_rules! forward_undo_states {
    ($db:ty) => {
        #[async_trait::async_trait]
        impl $crate::UndoStates for $crate::credentials::SqlCredentials<$db> {
            async fn keep_undo(
                &self,
                key_id: &str,
                step_id: &str,
                digest: &str,
                sealed: &str,
            ) -> Result<(), $crate::StoreError> {
                self.keep_undo_sql(key_id, step_id, digest, sealed).await
            }

            async fn undo_state(
                &self,
                key_id: &str,
                step_id: &str,
            ) -> Result<Option<$crate::KeptUndo>, $crate::StoreError> {
                self.undo_state_sql(key_id, step_id).await
            }

            async fn drop_undo_before(
                &self,
                before_ms: i64,
            ) -> Result<Vec<(String, String)>, $crate::StoreError> {
                self.drop_undo_before_sql(before_ms).await
            }
        }
    };
}
pub(crate) use forward_undo_states;

/// The [`crate::Credentials`] impl of a store whose `credentials` field is
/// a [`SqlCredentials`]: every method forwards to it, but `revoke_key` —
/// each backend writes its own (SQLite moves its key epoch around it) —
/// and what the backend answers itself (`key_epoch`, `authenticate_seen`),
/// which are given as the macro's items.
macro_rules! forward_credentials {
    ($store:ty { $($own:tt)* }) => {
        #[async_trait::async_trait]
        impl $crate::Credentials for $store {
            $($own)*

            async fn create_key(
                &self,
                name: &str,
                scope: plangate_core::Scope,
            ) -> Result<$crate::CreatedKey, $crate::StoreError> {
                self.credentials.create_key(name, scope).await
            }

            async fn ensure_identity(
                &self,
                identity: &$crate::Identity,
                scope: plangate_core::Scope,
            ) -> Result<$crate::ApiKey, $crate::StoreError> {
                self.credentials.ensure_identity(identity, scope).await
            }

            async fn list_keys(&self) -> Result<Vec<$crate::ApiKey>, $crate::StoreError> {
                self.credentials.list_keys().await
            }

            async fn upstream_credentials(
                &self,
                name: &str,
            ) -> Result<Option<String>, $crate::StoreError> {
                self.credentials.upstream_credentials(name).await
            }

            async fn save_upstream_credentials(
                &self,
                name: &str,
                sealed: &str,
            ) -> Result<(), $crate::StoreError> {
                self.credentials.save_upstream_credentials(name, sealed).await
            }

            async fn clear_upstream_credentials(&self, name: &str) -> Result<(), $crate::StoreError> {
                self.credentials.clear_upstream_credentials(name).await
            }

            async fn authenticate(
                &self,
                token: &str,
            ) -> Result<Option<$crate::ApiKey>, $crate::StoreError> {
                self.credentials.authenticate(token).await
            }

            async fn find_key(
                &self,
                name_or_id: &str,
            ) -> Result<Option<$crate::ApiKey>, $crate::StoreError> {
                self.credentials.find_key(name_or_id).await
            }

            async fn create_operator_token(
                &self,
                name: &str,
            ) -> Result<$crate::CreatedOperatorToken, $crate::StoreError> {
                self.credentials.create_operator_token(name).await
            }

            async fn list_operator_tokens(
                &self,
            ) -> Result<Vec<$crate::OperatorToken>, $crate::StoreError> {
                self.credentials.list_operator_tokens().await
            }

            async fn revoke_operator_token(
                &self,
                name_or_id: &str,
            ) -> Result<$crate::OperatorToken, $crate::StoreError> {
                self.credentials.revoke_operator_token(name_or_id).await
            }

            async fn authenticate_operator(
                &self,
                token: &str,
            ) -> Result<Option<$crate::OperatorToken>, $crate::StoreError> {
                self.credentials.authenticate_operator(token).await
            }

            async fn operator_token(
                &self,
                id: &str,
            ) -> Result<Option<$crate::OperatorToken>, $crate::StoreError> {
                self.credentials.operator_token(id).await
            }

            async fn end_console_session(
                &self,
                session_sha256: &str,
                expires_at_ms: i64,
            ) -> Result<(), $crate::StoreError> {
                self.credentials
                    .end_console_session(session_sha256, expires_at_ms)
                    .await
            }

            async fn console_session_ended(
                &self,
                session_sha256: &str,
            ) -> Result<bool, $crate::StoreError> {
                self.credentials.console_session_ended(session_sha256).await
            }
        }
    };
}
pub(crate) use forward_credentials;
