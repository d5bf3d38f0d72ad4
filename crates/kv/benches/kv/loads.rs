//! The loads: raw device loads (the yardstick) and the same loads through the KV engine.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use blockdev::{BlockDevice, IoBuf, WriteFlags};
use kv::{Kv, StoreMode};

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Operations and bytes done in some seconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Done {
    pub ops: u64,
    pub bytes: u64,
    pub secs: f64,
}

impl Done {
    pub fn mb_per_sec(&self) -> f64 {
        self.bytes as f64 / self.secs.max(1e-9) / 1e6
    }
    pub fn iops(&self) -> f64 {
        self.ops as f64 / self.secs.max(1e-9)
    }
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Whether each raw write is durable on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// One flush at the end of the run.
    FlushAtEnd,
    /// Each write followed by its own flush, as a store acknowledged only when durable
    /// must be (the concurrent workers' flushes overlap).
    FlushEach,
}

/// Sequential writes of `io` bytes from `qd` workers sharing one cursor over `region`,
/// until the region is written or `limit` passes; one flush at the end is included.
pub async fn raw_seq_write(
    dev: &Arc<dyn BlockDevice>,
    region: (u64, u64),
    io: usize,
    qd: usize,
    durability: Durability,
    limit: Duration,
) -> Result<Done, Error> {
    let next = Arc::new(AtomicU64::new(region.0));
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..qd {
        let (dev, next) = (dev.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut buf = IoBuf::from_slice(&vec![w as u8 | 1; io]);
            let mut done = 0u64;
            loop {
                let off = next.fetch_add(io as u64, Ordering::Relaxed);
                if off + io as u64 > region.1 || t.elapsed() > limit {
                    return Ok::<u64, blockdev::BlockError>(done);
                }
                buf = dev.write(off, buf, WriteFlags::default()).await?;
                if durability == Durability::FlushEach {
                    dev.flush().await?;
                }
                done += 1;
            }
        }));
    }
    let mut ops = 0;
    for task in tasks {
        ops += task.await??;
    }
    dev.flush().await?;
    Ok(Done {
        ops,
        bytes: ops * io as u64,
        secs: t.elapsed().as_secs_f64(),
    })
}

/// Random aligned reads of `io` bytes inside `region` from `qd` workers.
pub async fn raw_rand_read(
    dev: &Arc<dyn BlockDevice>,
    region: (u64, u64),
    io: usize,
    qd: usize,
    limit: Duration,
) -> Result<Done, Error> {
    let slots = (region.1 - region.0) / io as u64;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..qd {
        let dev = dev.clone();
        tasks.push(tokio::spawn(async move {
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (w as u64 + 1);
            let mut buf = IoBuf::new_zeroed(io);
            let mut done = 0u64;
            while t.elapsed() < limit {
                let off = region.0 + xorshift(&mut x) % slots * io as u64;
                buf = dev.read(off, buf).await?;
                done += 1;
            }
            Ok::<u64, blockdev::BlockError>(done)
        }));
    }
    let mut ops = 0;
    for task in tasks {
        ops += task.await??;
    }
    Ok(Done {
        ops,
        bytes: ops * io as u64,
        secs: t.elapsed().as_secs_f64(),
    })
}

/// Groups of `qd` concurrent sequential writes of `io` bytes, each group followed by a
/// flush: the device's share of what a group commit needs per batch.
pub async fn raw_seq_write_flushed(
    dev: &Arc<dyn BlockDevice>,
    region: (u64, u64),
    io: usize,
    qd: usize,
    limit: Duration,
) -> Result<Done, Error> {
    let t = Instant::now();
    let mut off = region.0;
    let mut bufs: Vec<IoBuf> = (0..qd).map(|_| IoBuf::from_slice(&vec![7u8; io])).collect();
    let mut ops = 0u64;
    while t.elapsed() < limit && off + (qd * io) as u64 <= region.1 {
        let writes = bufs.drain(..).enumerate().map(|(i, b)| {
            let dev = dev.clone();
            let at = off + (i * io) as u64;
            async move { dev.write(at, b, WriteFlags::default()).await }
        });
        for r in futures::future::join_all(writes).await {
            bufs.push(r?);
        }
        dev.flush().await?;
        off += (qd * io) as u64;
        ops += qd as u64;
    }
    Ok(Done {
        ops,
        bytes: ops * io as u64,
        secs: t.elapsed().as_secs_f64(),
    })
}

pub fn key(prefix: u8, i: u64) -> [u8; 9] {
    let mut k = [prefix; 9];
    k[1..].copy_from_slice(&i.to_be_bytes());
    k
}

/// Stores of `len`-byte values under new keys `prefix`+0.. from `qd` workers, until
/// `max_ops` stores or `limit`.
pub async fn kv_store(
    kv: &Kv,
    prefix: u8,
    len: usize,
    qd: usize,
    max_ops: u64,
    limit: Duration,
) -> Result<Done, Error> {
    let next = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..qd {
        let (kv, next) = (kv.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let value = vec![w as u8 ^ 0x5a; len];
            let mut done = 0u64;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= max_ops || t.elapsed() > limit {
                    return Ok::<u64, kv::KvError>(done);
                }
                kv.store(&key(prefix, i), &value, StoreMode::Upsert).await?;
                done += 1;
            }
        }));
    }
    let mut ops = 0;
    for task in tasks {
        ops += task.await??;
    }
    Ok(Done {
        ops,
        bytes: ops * len as u64,
        secs: t.elapsed().as_secs_f64(),
    })
}

/// Random retrieves of keys `prefix`+0..`keys` into `len`-byte buffers from `qd` workers.
pub async fn kv_retrieve(
    kv: &Kv,
    prefix: u8,
    keys: u64,
    len: usize,
    qd: usize,
    limit: Duration,
) -> Result<Done, Error> {
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..qd {
        let kv = kv.clone();
        tasks.push(tokio::spawn(async move {
            let mut x = 0x2545_f491_4f6c_dd1du64 ^ (w as u64 + 1);
            let mut buf = vec![0u8; len];
            let mut done = 0u64;
            while t.elapsed() < limit {
                let i = xorshift(&mut x) % keys;
                kv.retrieve(&key(prefix, i), &mut buf).await?;
                done += 1;
            }
            Ok::<u64, kv::KvError>(done)
        }));
    }
    let mut ops = 0;
    for task in tasks {
        ops += task.await??;
    }
    Ok(Done {
        ops,
        bytes: ops * len as u64,
        secs: t.elapsed().as_secs_f64(),
    })
}

/// Overwrites random keys among `prefix`+0..`keys` with `len`-byte values from `qd`
/// workers until `total_bytes` were stored.
pub async fn kv_overwrite(
    kv: &Kv,
    prefix: u8,
    keys: u64,
    len: usize,
    qd: usize,
    total_bytes: u64,
) -> Result<Done, Error> {
    let per_worker = total_bytes / len as u64 / qd as u64;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..qd {
        let kv = kv.clone();
        tasks.push(tokio::spawn(async move {
            let mut x = 0x853c_49e6_748f_ea9bu64 ^ (w as u64 + 1);
            let value = vec![w as u8; len];
            for _ in 0..per_worker {
                let i = xorshift(&mut x) % keys;
                kv.store(&key(prefix, i), &value, StoreMode::Upsert).await?;
            }
            Ok::<u64, kv::KvError>(per_worker)
        }));
    }
    let mut ops = 0;
    for task in tasks {
        ops += task.await??;
    }
    Ok(Done {
        ops,
        bytes: ops * len as u64,
        secs: t.elapsed().as_secs_f64(),
    })
}
