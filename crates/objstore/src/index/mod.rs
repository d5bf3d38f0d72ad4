//! The object index: buckets, object versions with their shard maps, multipart uploads,
//! listings, piece bookkeeping (deletion queue, degraded pieces) and access keys, in an
//! existing SQL engine: SQLite in a file (`sqlite:PATH`, the embedded default) or
//! PostgreSQL (`postgres://...`, shared by several gateways). One schema and one set of
//! queries serve both (`sql.rs`); every operation is one transaction.

mod list;
pub mod ops;
mod schema;
pub mod sql;
mod types;

pub use ops::ListParams;
pub use types::*;

use std::sync::Arc;

use sql::{Dialect, PgPool, SqlitePool, Tx};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error("index database: {0}")]
    Database(String),
    #[error("index database unreachable: {0}")]
    Unavailable(String),
    /// A transaction conflict (PostgreSQL); retried internally.
    #[error("index transaction conflict: {0}")]
    Retry(String),
    #[error("index row damaged: {0}")]
    Corrupt(String),
    #[error("unsupported index URL {0:?}: expected sqlite:PATH or postgres://USER@HOST:PORT/DB")]
    BadUrl(String),
    #[error("no such bucket")]
    NoSuchBucket,
    #[error("bucket exists")]
    BucketExists,
    #[error("bucket not empty")]
    BucketNotEmpty,
    #[error("no such key")]
    NoSuchKey,
    #[error("no such version")]
    NoSuchVersion,
    #[error("no such upload")]
    NoSuchUpload,
    #[error("precondition failed")]
    PreconditionFailed,
    #[error("method not allowed on a delete marker")]
    MethodNotAllowed,
    /// A write outlived its grace period and its pieces were reclaimed.
    #[error("write of piece {0} took longer than the grace period; its shards were reclaimed")]
    IntentLost(String),
}

enum Backend {
    Sqlite(SqlitePool),
    Postgres(Box<PgPool>),
}

/// A handle on the index; cheap to clone. Operations run on the blocking thread pool.
#[derive(Clone)]
pub struct Index {
    backend: Arc<Backend>,
    /// Bounds the transactions in flight (and so the connections and blocking threads).
    permits: Arc<tokio::sync::Semaphore>,
}

/// Most transactions in flight per gateway.
const MAX_CONCURRENT_TRANSACTIONS: usize = 16;

impl Index {
    /// Opens (and creates or upgrades the schema of) the index at `url`.
    pub async fn open(url: &str) -> Result<Index, IndexError> {
        let url = url.to_string();
        let backend = tokio::task::spawn_blocking(move || -> Result<Backend, IndexError> {
            let backend = if let Some(path) = url.strip_prefix("sqlite:") {
                if path.is_empty() {
                    return Err(IndexError::BadUrl(url));
                }
                Backend::Sqlite(SqlitePool::open(std::path::Path::new(path))?)
            } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
                Backend::Postgres(Box::new(PgPool::open(&url)?))
            } else {
                return Err(IndexError::BadUrl(url));
            };
            create_schema(&backend)?;
            Ok(backend)
        })
        .await
        .map_err(|e| IndexError::Database(format!("index task failed: {e}")))??;
        Ok(Index {
            backend: Arc::new(backend),
            permits: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_TRANSACTIONS)),
        })
    }

    /// Which engine this is (`sqlite` or `postgresql`).
    pub fn engine(&self) -> &'static str {
        match *self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgresql",
        }
    }

    async fn run<R: Send + 'static>(
        &self,
        write: bool,
        mut f: impl FnMut(&mut dyn Tx) -> Result<R, IndexError> + Send + 'static,
    ) -> Result<R, IndexError> {
        let _permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| IndexError::Database("index closed".into()))?;
        let backend = self.backend.clone();
        tokio::task::spawn_blocking(move || run_on(&backend, write, &mut f))
            .await
            .map_err(|e| IndexError::Database(format!("index task failed: {e}")))?
    }

    /// Runs `f` in one read-write transaction.
    pub async fn write<R: Send + 'static>(
        &self,
        f: impl FnMut(&mut dyn Tx) -> Result<R, IndexError> + Send + 'static,
    ) -> Result<R, IndexError> {
        self.run(true, f).await
    }

    /// Runs `f` in one read-only transaction.
    pub async fn read<R: Send + 'static>(
        &self,
        f: impl FnMut(&mut dyn Tx) -> Result<R, IndexError> + Send + 'static,
    ) -> Result<R, IndexError> {
        self.run(false, f).await
    }

    pub async fn bucket(&self, name: &str) -> Result<Option<Bucket>, IndexError> {
        let name = name.to_string();
        self.read(move |tx| ops::bucket(tx, &name)).await
    }
}

fn run_on<R>(
    backend: &Backend,
    write: bool,
    f: &mut dyn FnMut(&mut dyn Tx) -> Result<R, IndexError>,
) -> Result<R, IndexError> {
    match backend {
        Backend::Sqlite(p) => p.run(write, f),
        Backend::Postgres(p) => p.run(write, f),
    }
}

fn create_schema(backend: &Backend) -> Result<(), IndexError> {
    let dialect = match backend {
        Backend::Sqlite(_) => Dialect::Sqlite,
        Backend::Postgres(_) => Dialect::Postgres,
    };
    run_on(backend, true, &mut |tx| {
        if dialect == Dialect::Postgres {
            // Gateways starting together: one creates the schema, the others wait.
            tx.exec("SELECT pg_advisory_xact_lock(4609428054921234567)", &[])?;
        }
        for stmt in schema::TABLES {
            tx.exec(&dialect.schema(stmt), &[])?;
        }
        let found = tx
            .query_opt("SELECT version FROM schema_version", &[])?
            .map(|r| r.int(0))
            .transpose()?;
        match found {
            None => {
                tx.exec(
                    "INSERT INTO schema_version (version) VALUES (?1)",
                    &[schema::SCHEMA_VERSION.into()],
                )?;
            }
            Some(v) if v == schema::SCHEMA_VERSION => {}
            Some(v) => {
                return Err(IndexError::Database(format!(
                    "index schema version {v}, this gateway knows {}",
                    schema::SCHEMA_VERSION
                )));
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests;
