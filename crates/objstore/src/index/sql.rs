//! The two database engines behind one small interface: SQL text in SQLite's dialect
//! with `?N` parameters (rewritten to `$N` for PostgreSQL), values of four kinds, rows
//! read by position. The index logic (`ops.rs`, `list.rs`) is written once against
//! [`Tx`]; both engines run it synchronously on the blocking thread pool.

use std::sync::Mutex;
use std::time::Duration;

use super::IndexError;

/// A parameter or column value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Null,
    Int(i64),
    Text(String),
    Blob(Vec<u8>),
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_string())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}

impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Self {
        Value::Blob(v.to_vec())
    }
}

impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Blob(v)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// One result row.
#[derive(Clone, Debug)]
pub struct Row(pub Vec<Value>);

impl Row {
    fn get(&self, i: usize) -> Result<&Value, IndexError> {
        self.0
            .get(i)
            .ok_or_else(|| IndexError::Corrupt(format!("row has no column {i}")))
    }

    pub fn int(&self, i: usize) -> Result<i64, IndexError> {
        match self.get(i)? {
            Value::Int(v) => Ok(*v),
            other => Err(IndexError::Corrupt(format!(
                "column {i}: expected an integer, got {other:?}"
            ))),
        }
    }

    pub fn text(&self, i: usize) -> Result<String, IndexError> {
        match self.get(i)? {
            Value::Text(v) => Ok(v.clone()),
            other => Err(IndexError::Corrupt(format!(
                "column {i}: expected text, got {other:?}"
            ))),
        }
    }

    pub fn opt_text(&self, i: usize) -> Result<Option<String>, IndexError> {
        match self.get(i)? {
            Value::Null => Ok(None),
            _ => self.text(i).map(Some),
        }
    }

    pub fn blob(&self, i: usize) -> Result<Vec<u8>, IndexError> {
        match self.get(i)? {
            Value::Blob(v) => Ok(v.clone()),
            other => Err(IndexError::Corrupt(format!(
                "column {i}: expected bytes, got {other:?}"
            ))),
        }
    }

    pub fn opt_blob(&self, i: usize) -> Result<Option<Vec<u8>>, IndexError> {
        match self.get(i)? {
            Value::Null => Ok(None),
            _ => self.blob(i).map(Some),
        }
    }

    /// A key column (stored as bytes so both engines order it bytewise, as S3 does).
    pub fn key(&self, i: usize) -> Result<String, IndexError> {
        String::from_utf8(self.blob(i)?)
            .map_err(|_| IndexError::Corrupt(format!("column {i}: key is not UTF-8")))
    }
}

/// One open transaction.
pub trait Tx {
    /// Runs a statement; returns the number of rows changed.
    fn exec(&mut self, sql: &str, params: &[Value]) -> Result<u64, IndexError>;
    /// Runs a query; returns all rows.
    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, IndexError>;

    fn query_opt(&mut self, sql: &str, params: &[Value]) -> Result<Option<Row>, IndexError> {
        Ok(self.query(sql, params)?.into_iter().next())
    }
}

/// The schema's words that differ between the engines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// Replaces `{id}` (an auto-increment primary key), `{blob}` and `{int}`.
    pub fn schema(self, sql: &str) -> String {
        let (id, blob, int) = match self {
            Dialect::Sqlite => ("INTEGER PRIMARY KEY AUTOINCREMENT", "BLOB", "INTEGER"),
            Dialect::Postgres => (
                "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
                "BYTEA",
                "BIGINT",
            ),
        };
        sql.replace("{id}", id)
            .replace("{blob}", blob)
            .replace("{int}", int)
    }
}

/// `?N` parameters to PostgreSQL's `$N`.
pub fn to_postgres_params(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// SQLite

impl rusqlite::types::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Int(v) => ValueRef::Integer(*v),
            Value::Text(v) => ValueRef::Text(v.as_bytes()),
            Value::Blob(v) => ValueRef::Blob(v),
        }))
    }
}

fn sqlite_error(e: rusqlite::Error) -> IndexError {
    IndexError::Database(format!("sqlite: {e}"))
}

impl Tx for rusqlite::Transaction<'_> {
    fn exec(&mut self, sql: &str, params: &[Value]) -> Result<u64, IndexError> {
        let mut stmt = self.prepare_cached(sql).map_err(sqlite_error)?;
        let n = stmt
            .execute(rusqlite::params_from_iter(params.iter()))
            .map_err(sqlite_error)?;
        Ok(n as u64)
    }

    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, IndexError> {
        use rusqlite::types::ValueRef;
        let mut stmt = self.prepare_cached(sql).map_err(sqlite_error)?;
        let columns = stmt.column_count();
        let mut rows = stmt
            .query(rusqlite::params_from_iter(params.iter()))
            .map_err(sqlite_error)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(sqlite_error)? {
            let mut values = Vec::with_capacity(columns);
            for i in 0..columns {
                values.push(match row.get_ref(i).map_err(sqlite_error)? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(v) => Value::Int(v),
                    ValueRef::Real(v) => Value::Int(v as i64),
                    ValueRef::Text(v) => Value::Text(String::from_utf8_lossy(v).into_owned()),
                    ValueRef::Blob(v) => Value::Blob(v.to_vec()),
                });
            }
            out.push(Row(values));
        }
        Ok(out)
    }
}

/// A bounded pool of SQLite connections to one database file (WAL mode: readers do
/// not wait for the writer; writers take the lock up front and queue on it).
pub struct SqlitePool {
    path: std::path::PathBuf,
    idle: Mutex<Vec<rusqlite::Connection>>,
}

impl SqlitePool {
    pub fn open(path: &std::path::Path) -> Result<Self, IndexError> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)
                .map_err(|e| IndexError::Database(format!("{}: {e}", dir.display())))?;
        }
        let pool = SqlitePool {
            path: path.to_path_buf(),
            idle: Mutex::new(Vec::new()),
        };
        let conn = pool.connect()?;
        pool.put(conn);
        Ok(pool)
    }

    fn connect(&self) -> Result<rusqlite::Connection, IndexError> {
        let conn = rusqlite::Connection::open(&self.path)
            .map_err(|e| IndexError::Database(format!("{}: {e}", self.path.display())))?;
        conn.busy_timeout(Duration::from_secs(30))
            .map_err(sqlite_error)?;
        // WAL: concurrent readers; synchronous=FULL: a commit survives power loss, which
        // an acknowledged PUT relies on.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sqlite_error)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(sqlite_error)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(sqlite_error)?;
        Ok(conn)
    }

    fn take(&self) -> Result<rusqlite::Connection, IndexError> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match idle {
            Some(c) => Ok(c),
            None => self.connect(),
        }
    }

    fn put(&self, conn: rusqlite::Connection) {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(conn);
    }

    pub fn run<R>(
        &self,
        write: bool,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<R, IndexError>,
    ) -> Result<R, IndexError> {
        let mut conn = self.take()?;
        let behavior = if write {
            rusqlite::TransactionBehavior::Immediate
        } else {
            rusqlite::TransactionBehavior::Deferred
        };
        let result = (|| {
            let mut tx = conn
                .transaction_with_behavior(behavior)
                .map_err(sqlite_error)?;
            let r = f(&mut tx)?;
            tx.commit().map_err(sqlite_error)?;
            Ok(r)
        })();
        self.put(conn);
        result
    }
}

// ---------------------------------------------------------------------------------------
// PostgreSQL

impl postgres::types::ToSql for Value {
    fn to_sql(
        &self,
        ty: &postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Value::Null => Ok(postgres::types::IsNull::Yes),
            Value::Int(v) => v.to_sql(ty, out),
            Value::Text(v) => v.to_sql(ty, out),
            Value::Blob(v) => v.to_sql(ty, out),
        }
    }

    fn accepts(_ty: &postgres::types::Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

fn pg_error(e: postgres::Error) -> IndexError {
    if e.is_closed() {
        return IndexError::Unavailable(format!("postgresql: {e}"));
    }
    match e.code() {
        Some(code) if is_retryable(code) => IndexError::Retry(format!("postgresql: {e}")),
        _ => IndexError::Database(format!("postgresql: {e}")),
    }
}

fn is_retryable(code: &postgres::error::SqlState) -> bool {
    use postgres::error::SqlState;
    *code == SqlState::T_R_SERIALIZATION_FAILURE
        || *code == SqlState::T_R_DEADLOCK_DETECTED
        || *code == SqlState::UNIQUE_VIOLATION
}

fn pg_row(row: &postgres::Row) -> Result<Row, IndexError> {
    use postgres::types::Type;
    let mut values = Vec::with_capacity(row.len());
    for (i, col) in row.columns().iter().enumerate() {
        let ty = col.type_();
        let v = if *ty == Type::INT8 {
            row.try_get::<_, Option<i64>>(i).map(|v| v.map(Value::Int))
        } else if *ty == Type::INT4 {
            row.try_get::<_, Option<i32>>(i)
                .map(|v| v.map(|v| Value::Int(v.into())))
        } else if *ty == Type::INT2 {
            row.try_get::<_, Option<i16>>(i)
                .map(|v| v.map(|v| Value::Int(v.into())))
        } else if *ty == Type::BOOL {
            row.try_get::<_, Option<bool>>(i)
                .map(|v| v.map(|v| Value::Int(v.into())))
        } else if *ty == Type::BYTEA {
            row.try_get::<_, Option<Vec<u8>>>(i)
                .map(|v| v.map(Value::Blob))
        } else {
            row.try_get::<_, Option<String>>(i)
                .map(|v| v.map(Value::Text))
        };
        values.push(v.map_err(pg_error)?.unwrap_or(Value::Null));
    }
    Ok(Row(values))
}

impl Tx for postgres::Transaction<'_> {
    fn exec(&mut self, sql: &str, params: &[Value]) -> Result<u64, IndexError> {
        let sql = to_postgres_params(sql);
        let refs: Vec<&(dyn postgres::types::ToSql + Sync)> = params
            .iter()
            .map(|p| p as &(dyn postgres::types::ToSql + Sync))
            .collect();
        self.execute(sql.as_str(), &refs).map_err(pg_error)
    }

    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, IndexError> {
        let sql = to_postgres_params(sql);
        let refs: Vec<&(dyn postgres::types::ToSql + Sync)> = params
            .iter()
            .map(|p| p as &(dyn postgres::types::ToSql + Sync))
            .collect();
        let rows = postgres::Transaction::query(self, sql.as_str(), &refs).map_err(pg_error)?;
        rows.iter().map(pg_row).collect()
    }
}

/// A pool of PostgreSQL connections; transactions are SERIALIZABLE and retried on
/// serialization failures, so two gateways writing the same key never both win.
pub struct PgPool {
    config: postgres::Config,
    idle: Mutex<Vec<postgres::Client>>,
}

impl Drop for PgPool {
    fn drop(&mut self) {
        // Closing a synchronous client blocks on its own runtime, which panics on a
        // thread that drives async tasks (where the last Index handle may be dropped).
        let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(|e| e.into_inner()));
        if !idle.is_empty() {
            std::thread::spawn(move || drop(idle));
        }
    }
}

/// How often a conflicting transaction is retried before the request fails.
const PG_RETRIES: usize = 20;

impl PgPool {
    pub fn open(url: &str) -> Result<Self, IndexError> {
        let mut config: postgres::Config = url
            .parse()
            .map_err(|e| IndexError::Database(format!("postgresql URL: {e}")))?;
        config.connect_timeout(Duration::from_secs(10));
        let pool = PgPool {
            config,
            idle: Mutex::new(Vec::new()),
        };
        let conn = pool.connect()?;
        pool.put(conn);
        Ok(pool)
    }

    fn connect(&self) -> Result<postgres::Client, IndexError> {
        self.config
            .connect(postgres::NoTls)
            .map_err(|e| IndexError::Unavailable(format!("postgresql: {e}")))
    }

    fn take(&self) -> Result<postgres::Client, IndexError> {
        loop {
            let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
            match idle {
                Some(c) if c.is_closed() => continue,
                Some(c) => return Ok(c),
                None => return self.connect(),
            }
        }
    }

    fn put(&self, conn: postgres::Client) {
        if !conn.is_closed() {
            self.idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(conn);
        }
    }

    pub fn run<R>(
        &self,
        write: bool,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<R, IndexError>,
    ) -> Result<R, IndexError> {
        let mut attempt = 0;
        loop {
            let mut conn = self.take()?;
            let result = (|| {
                let mut tx = conn
                    .build_transaction()
                    .isolation_level(postgres::IsolationLevel::Serializable)
                    .read_only(!write)
                    .start()
                    .map_err(pg_error)?;
                let r = f(&mut tx)?;
                tx.commit().map_err(pg_error)?;
                Ok(r)
            })();
            self.put(conn);
            match result {
                Err(IndexError::Retry(e)) if attempt < PG_RETRIES => {
                    attempt += 1;
                    tracing::debug!(attempt, "index transaction conflict, retrying: {e}");
                    std::thread::sleep(Duration::from_millis(2 << attempt.min(6)));
                }
                Err(IndexError::Retry(e)) => return Err(IndexError::Database(e)),
                other => return other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_for_postgres() {
        assert_eq!(
            to_postgres_params("SELECT a FROM t WHERE b = ?1 AND c > ?12"),
            "SELECT a FROM t WHERE b = $1 AND c > $12"
        );
    }
}
