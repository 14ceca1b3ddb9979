//! Reading a row the same way on every backend: the tables here hold only
//! text and integers, so a record is read from a SQLite row and a
//! PostgreSQL row by one function ([`crate::keys`], [`crate::operators`],
//! [`crate::events`]). Apart so that the sqlx bounds saying "this row
//! decodes text and integers by column name" are written once.

use sqlx::{ColumnIndex, Decode, Row, Type};

/// A row of either backend, read by column name.
pub(crate) trait TableRow {
    /// A text column.
    fn text(&self, column: &'static str) -> Result<String, sqlx::Error>;
    /// An integer column.
    fn int(&self, column: &'static str) -> Result<i64, sqlx::Error>;
    /// An integer column that may be NULL.
    fn maybe_int(&self, column: &'static str) -> Result<Option<i64>, sqlx::Error>;
    /// A text column that may be NULL.
    fn maybe_text(&self, column: &'static str) -> Result<Option<String>, sqlx::Error>;
}

impl<R> TableRow for R
where
    R: Row,
    &'static str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
{
    fn text(&self, column: &'static str) -> Result<String, sqlx::Error> {
        self.try_get(column)
    }

    fn int(&self, column: &'static str) -> Result<i64, sqlx::Error> {
        self.try_get(column)
    }

    fn maybe_int(&self, column: &'static str) -> Result<Option<i64>, sqlx::Error> {
        self.try_get(column)
    }

    fn maybe_text(&self, column: &'static str) -> Result<Option<String>, sqlx::Error> {
        self.try_get(column)
    }
}
