//! Reference line: fjall (LSM tree with key-value separation) on the same filesystem as
//! the drive file, with the same loads. Durability like the KV engine: every insert is
//! followed by `persist(SyncData)` (fdatasync of the journal) before it counts.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, KvSeparationOptions, PersistMode};

use crate::loads::{Done, Error, key};

pub const NAME: &str =
    "fjall 3.1.13, key-value separation (blobs >= 1 KiB), persist(SyncData) per insert";

pub struct Reference {
    db: Database,
    ks: Keyspace,
}

impl Reference {
    pub fn open(dir: &Path) -> Result<Reference, Error> {
        let _ = std::fs::remove_dir_all(dir);
        let db = Database::builder(dir).open()?;
        let ks = db.keyspace("kv", || {
            KeyspaceCreateOptions::default().with_kv_separation(Some(
                KvSeparationOptions::default().separation_threshold(1024),
            ))
        })?;
        Ok(Reference { db, ks })
    }

    /// Inserts of `len`-byte values under new keys from `threads` threads.
    pub fn store(
        self: &Arc<Self>,
        prefix: u8,
        len: usize,
        threads: usize,
        max_ops: u64,
        limit: Duration,
    ) -> Result<Done, Error> {
        let next = Arc::new(AtomicU64::new(0));
        let t = Instant::now();
        let handles: Vec<_> = (0..threads)
            .map(|w| {
                let (me, next) = (self.clone(), next.clone());
                std::thread::spawn(move || -> Result<u64, fjall::Error> {
                    let value = vec![w as u8 ^ 0x5a; len];
                    let mut done = 0;
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= max_ops || t.elapsed() > limit {
                            return Ok(done);
                        }
                        me.ks.insert(key(prefix, i), value.as_slice())?;
                        me.db.persist(PersistMode::SyncData)?;
                        done += 1;
                    }
                })
            })
            .collect();
        let mut ops = 0;
        for h in handles {
            ops += h.join().map_err(|_| "fjall thread panicked")??;
        }
        Ok(Done {
            ops,
            bytes: ops * len as u64,
            secs: t.elapsed().as_secs_f64(),
        })
    }

    /// Random gets of keys `prefix`+0..`keys` from `threads` threads.
    pub fn retrieve(
        self: &Arc<Self>,
        prefix: u8,
        keys: u64,
        threads: usize,
        limit: Duration,
    ) -> Result<Done, Error> {
        let t = Instant::now();
        let handles: Vec<_> = (0..threads)
            .map(|w| {
                let me = self.clone();
                std::thread::spawn(move || -> Result<(u64, u64), Error> {
                    let mut x = 0x2545_f491_4f6c_dd1du64 ^ (w as u64 + 1);
                    let (mut done, mut bytes) = (0, 0);
                    while t.elapsed() < limit {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let v = me
                            .ks
                            .get(key(prefix, x % keys))?
                            .ok_or("fjall lost a key")?;
                        bytes += v.len() as u64;
                        done += 1;
                    }
                    Ok((done, bytes))
                })
            })
            .collect();
        let (mut ops, mut bytes) = (0, 0);
        for h in handles {
            let (o, b) = h.join().map_err(|_| "fjall thread panicked")??;
            ops += o;
            bytes += b;
        }
        Ok(Done {
            ops,
            bytes,
            secs: t.elapsed().as_secs_f64(),
        })
    }
}
