//! A KV namespace as a directory of files: one file per key under a 256-way fan-out
//! (`ab/abcdef...`), written to a temporary name, synced and renamed into place, so a
//! crash leaves either the old value or the new one. The directory's identity file
//! (`ferrobay-store.json`) pins the store id, so a directory given under the wrong id is
//! refused instead of serving another store's shards.
//!
//! This is the stand-in until the log-structured KV engine (`crates/kv`) and remote KV
//! namespaces take over; it is durable but not fast for small values.

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;

use super::{ShardError, ShardKey, ShardStore, StoreMode, check_value_size};

const IDENTITY_FILE: &str = "ferrobay-store.json";

pub struct DirShardStore {
    inner: Arc<Inner>,
}

struct Inner {
    id: String,
    failure_domain: String,
    root: PathBuf,
    capacity_bytes: Option<u64>,
    used_bytes: AtomicU64,
    /// Serializes conditional stores and deletes against each other (check + rename).
    write_lock: std::sync::Mutex<()>,
    tmp_counter: AtomicU64,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Identity {
    store_id: String,
}

impl DirShardStore {
    /// Opens (creating if needed) the store in `root`. `capacity_bytes` limits the sum of
    /// value sizes (None: the file system's limit, reported as capacity exceeded).
    pub fn open(
        root: impl Into<PathBuf>,
        id: impl Into<String>,
        failure_domain: impl Into<String>,
        capacity_bytes: Option<u64>,
    ) -> std::io::Result<Self> {
        let root = root.into();
        let id = id.into();
        std::fs::create_dir_all(&root)?;
        let identity_path = root.join(IDENTITY_FILE);
        match std::fs::read(&identity_path) {
            Ok(bytes) => {
                let identity: Identity = serde_json::from_slice(&bytes).map_err(|e| {
                    std::io::Error::other(format!("{}: {e}", identity_path.display()))
                })?;
                if identity.store_id != id {
                    return Err(std::io::Error::other(format!(
                        "{} belongs to shard store {:?}, not {:?}",
                        root.display(),
                        identity.store_id,
                        id
                    )));
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let body = serde_json::to_vec(&Identity {
                    store_id: id.clone(),
                })
                .map_err(std::io::Error::other)?;
                write_durably(&root, &identity_path, &root.join(".identity.tmp"), &body)?;
            }
            Err(e) => return Err(e),
        }
        let used_bytes = match capacity_bytes {
            Some(_) => used_bytes_in(&root)?,
            None => 0,
        };
        Ok(DirShardStore {
            inner: Arc::new(Inner {
                id,
                failure_domain: failure_domain.into(),
                root,
                capacity_bytes,
                used_bytes: AtomicU64::new(used_bytes),
                write_lock: std::sync::Mutex::new(()),
                tmp_counter: AtomicU64::new(0),
            }),
        })
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    async fn blocking<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<R, ShardError> + Send + 'static,
    ) -> Result<R, ShardError> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| ShardError::Unrecovered(format!("store task failed: {e}")))?
    }
}

fn io_error(e: std::io::Error) -> ShardError {
    match e.kind() {
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded => ShardError::CapacityExceeded,
        _ => ShardError::Unrecovered(e.to_string()),
    }
}

fn used_bytes_in(root: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for fan in std::fs::read_dir(root)? {
        let fan = fan?;
        if !fan.file_type()?.is_dir() {
            continue;
        }
        for entry in std::fs::read_dir(fan.path())? {
            let entry = entry?;
            if parse_key(&entry.file_name().to_string_lossy()).is_some() {
                total += entry.metadata()?.len();
            }
        }
    }
    Ok(total)
}

fn parse_key(name: &str) -> Option<ShardKey> {
    let mut key = [0u8; 16];
    hex::decode_to_slice(name, &mut key).ok()?;
    Some(ShardKey(key))
}

fn write_durably(dir: &Path, path: &Path, tmp: &Path, body: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(tmp)?;
    f.write_all(body)?;
    f.sync_all()?;
    std::fs::rename(tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

impl Inner {
    fn fan_dir(&self, key: &ShardKey) -> PathBuf {
        self.root.join(hex::encode(&key.0[..1]))
    }

    fn path(&self, key: &ShardKey) -> PathBuf {
        self.fan_dir(key).join(key.to_hex())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.write_lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn old_len(&self, path: &Path) -> Result<Option<u64>, ShardError> {
        match std::fs::metadata(path) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error(e)),
        }
    }

    fn store(&self, key: ShardKey, value: &[u8], mode: StoreMode) -> Result<(), ShardError> {
        let dir = self.fan_dir(&key);
        std::fs::create_dir_all(&dir).map_err(io_error)?;
        let path = self.path(&key);
        let tmp = dir.join(format!(
            ".tmp.{}.{}",
            key.to_hex(),
            self.tmp_counter.fetch_add(1, Ordering::Relaxed)
        ));
        // Write the new value before taking the lock; only the check and rename are
        // serialized.
        let written = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(value)?;
            f.sync_all()
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_error(e));
        }
        let _guard = self.lock();
        let result = (|| {
            let old = self.old_len(&path)?;
            match (mode, old) {
                (StoreMode::OnlyIfAbsent, Some(_)) => return Err(ShardError::KeyExists),
                (StoreMode::OnlyIfExists, None) => return Err(ShardError::KeyNotFound),
                _ => {}
            }
            let new_len = value.len() as u64;
            if let Some(cap) = self.capacity_bytes {
                let used = self.used_bytes.load(Ordering::Relaxed) - old.unwrap_or(0) + new_len;
                if used > cap {
                    return Err(ShardError::CapacityExceeded);
                }
            }
            std::fs::rename(&tmp, &path).map_err(io_error)?;
            std::fs::File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(io_error)?;
            self.used_bytes
                .fetch_add(new_len.wrapping_sub(old.unwrap_or(0)), Ordering::Relaxed);
            Ok(())
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    fn retrieve(&self, key: ShardKey, max: usize) -> Result<(Vec<u8>, usize), ShardError> {
        use std::io::Read;
        let mut f = match std::fs::File::open(self.path(&key)) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Err(ShardError::KeyNotFound),
            Err(e) => return Err(io_error(e)),
        };
        let size = f.metadata().map_err(io_error)?.len();
        let size =
            usize::try_from(size).map_err(|_| ShardError::Unrecovered("huge file".into()))?;
        let mut data = vec![0u8; size.min(max)];
        f.read_exact(&mut data).map_err(io_error)?;
        Ok((data, size))
    }

    fn delete(&self, key: ShardKey) -> Result<(), ShardError> {
        let path = self.path(&key);
        let _guard = self.lock();
        let old = self.old_len(&path)?.ok_or(ShardError::KeyNotFound)?;
        std::fs::remove_file(&path).map_err(io_error)?;
        self.used_bytes.fetch_sub(old, Ordering::Relaxed);
        Ok(())
    }

    fn list(&self, from: ShardKey, max: usize) -> Result<Vec<ShardKey>, ShardError> {
        let mut out = Vec::new();
        for fan in from.0[0]..=0xff {
            if out.len() >= max {
                break;
            }
            let dir = self.root.join(hex::encode([fan]));
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(io_error(e)),
            };
            let mut keys = Vec::new();
            for entry in entries {
                let entry = entry.map_err(io_error)?;
                if let Some(k) = parse_key(&entry.file_name().to_string_lossy())
                    && k >= from
                {
                    keys.push(k);
                }
            }
            keys.sort_unstable();
            out.extend(keys.into_iter().take(max - out.len()));
        }
        Ok(out)
    }
}

#[async_trait]
impl ShardStore for DirShardStore {
    fn id(&self) -> &str {
        &self.inner.id
    }

    fn failure_domain(&self) -> &str {
        &self.inner.failure_domain
    }

    async fn store(&self, key: ShardKey, value: Bytes, mode: StoreMode) -> Result<(), ShardError> {
        check_value_size(&value)?;
        self.blocking(move |s| s.store(key, &value, mode)).await
    }

    async fn retrieve(&self, key: ShardKey, buf: &mut [u8]) -> Result<usize, ShardError> {
        let max = buf.len();
        let (data, size) = self.blocking(move |s| s.retrieve(key, max)).await?;
        buf[..data.len()].copy_from_slice(&data);
        Ok(size)
    }

    async fn delete(&self, key: ShardKey) -> Result<(), ShardError> {
        self.blocking(move |s| s.delete(key)).await
    }

    async fn exist(&self, key: ShardKey) -> Result<bool, ShardError> {
        self.blocking(move |s| Ok(s.old_len(&s.path(&key))?.is_some()))
            .await
    }

    async fn list(&self, from: ShardKey, max: usize) -> Result<Vec<ShardKey>, ShardError> {
        self.blocking(move |s| s.list(from, max)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::contract;

    #[tokio::test]
    async fn meets_the_contract() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = DirShardStore::open(dir.path(), "s1", "n1", Some(64 << 20)).expect("open");
        contract::check(&s).await;
    }

    #[tokio::test]
    async fn values_survive_reopen_and_capacity_is_recounted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let k = ShardKey([9; 16]);
        {
            let s = DirShardStore::open(dir.path(), "s1", "n1", Some(10)).expect("open");
            s.store(k, Bytes::from_static(b"12345678"), StoreMode::Upsert)
                .await
                .expect("store");
        }
        let s = DirShardStore::open(dir.path(), "s1", "n1", Some(10)).expect("reopen");
        let mut buf = [0u8; 8];
        assert_eq!(s.retrieve(k, &mut buf).await, Ok(8));
        assert_eq!(&buf, b"12345678");
        assert_eq!(
            s.store(
                ShardKey([1; 16]),
                Bytes::from_static(b"123"),
                StoreMode::Upsert
            )
            .await,
            Err(ShardError::CapacityExceeded)
        );
    }

    #[test]
    fn a_directory_keeps_its_store_id() {
        let dir = tempfile::tempdir().expect("tempdir");
        DirShardStore::open(dir.path(), "s1", "n1", None).expect("open");
        let err = DirShardStore::open(dir.path(), "s2", "n1", None)
            .err()
            .expect("wrong id refused");
        assert!(
            err.to_string().contains("belongs to shard store \"s1\""),
            "{err}"
        );
    }
}
