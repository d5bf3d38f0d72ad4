//! [`Kv`]: the store's command interface (what an NVMe KV namespace or the S3 gateway
//! calls), and formatting/opening.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use blockdev::{BlockDevice, BlockError, IoBuf, WriteFlags};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::KvError;
use crate::buffers::Buffers;
use crate::bytes::align_up;
use crate::checkpoint;
use crate::committer::Committer;
use crate::compactor::{CompactionReport, MaintCommand, Maintenance};
use crate::format::{Entry, FormatOptions, Layout, SUPERBLOCK_BYTES};
use crate::inner::{Done, Inner, Reply, Request, StoreMode};
use crate::key::{Key, MAX_KEY_BYTES};
use crate::options::Options;
use crate::recovery::{self, RecoveryReport};
use crate::stats::{Counters, Stats, Usage, add};

/// Segments kept back for compaction: user stores never take the last ones.
pub const RESERVE_SEGMENTS: u32 = 4;
/// Attempts of a Retrieve whose segment was reused under it (compaction moved the value).
const READ_ATTEMPTS: usize = 8;

/// Fixed parameters of a formatted store (for Identify).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatInfo {
    pub uuid: uuid::Uuid,
    pub logical_block_bytes: u32,
    pub segment_bytes: u32,
    pub segment_count: u32,
    pub max_key_bytes: u32,
    pub max_value_bytes: u32,
    pub max_keys: u64,
    /// Bytes of the data area (all segments).
    pub data_bytes: u64,
    /// Bytes before the data area (superblock and two checkpoint slots).
    pub metadata_bytes: u64,
}

impl FormatInfo {
    fn from_layout(l: &Layout) -> FormatInfo {
        FormatInfo {
            uuid: uuid::Uuid::from_bytes(l.uuid),
            logical_block_bytes: l.block_bytes,
            segment_bytes: l.segment_bytes,
            segment_count: l.segment_count,
            max_key_bytes: MAX_KEY_BYTES as u32,
            max_value_bytes: l.max_value_bytes,
            max_keys: l.max_keys,
            data_bytes: l.data_bytes(),
            metadata_bytes: l.data_offset,
        }
    }
}

/// Result of a Retrieve into a caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retrieved {
    /// Size of the stored value (NVMe Retrieve returns it in completion DW0).
    pub value_bytes: u32,
    /// Bytes copied into the buffer: the whole value, or the buffer's size if smaller.
    pub copied_bytes: usize,
}

impl Retrieved {
    /// The buffer was smaller than the value (only its first `copied_bytes` were copied).
    pub fn is_truncated(&self) -> bool {
        self.copied_bytes < self.value_bytes as usize
    }
}

struct Shared {
    inner: Arc<Inner>,
    tx: mpsc::Sender<Request>,
    maint_tx: mpsc::Sender<MaintCommand>,
    closed: AtomicBool,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Without `close`: stop the background tasks (in-flight commands have no one
        // waiting any more; what is durable is recovered at the next open).
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }
}

/// A KV store on a block device. Cheap to clone; all clones share one store. Needs a
/// tokio runtime (it runs a committer and a maintenance task).
#[derive(Clone)]
pub struct Kv {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Kv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kv")
            .field("device", &self.shared.inner.dev.info().name)
            .finish_non_exhaustive()
    }
}

impl Kv {
    /// Formats `dev` as an empty store (any previous content is ignored from now on).
    pub async fn format(
        dev: &Arc<dyn BlockDevice>,
        opts: &FormatOptions,
    ) -> Result<FormatInfo, KvError> {
        let info = dev.info();
        let layout = Layout::compute(
            info.size_bytes,
            info.logical_block_bytes,
            opts,
            *uuid::Uuid::new_v4().as_bytes(),
        )?;
        let block = layout.block() as usize;
        // Slot 0: no checkpoint. Slot 1: generation 1, the empty store.
        dev.write(
            layout.checkpoint_offsets[0],
            IoBuf::new_zeroed(block),
            WriteFlags::default(),
        )
        .await?;
        let snap = checkpoint::initial(&layout)?;
        checkpoint::write(dev.as_ref(), &layout, &snap).await?;
        dev.write(
            0,
            IoBuf::from_slice(&layout.encode()),
            WriteFlags::default(),
        )
        .await?;
        dev.flush().await?;
        Ok(FormatInfo::from_layout(&layout))
    }

    /// Reads the format of `dev` without opening it.
    pub async fn probe(dev: &Arc<dyn BlockDevice>) -> Result<FormatInfo, KvError> {
        Ok(FormatInfo::from_layout(&read_layout(dev.as_ref()).await?))
    }

    /// Opens a formatted store: loads the newest checkpoint and replays the log after it.
    pub async fn open(
        dev: Arc<dyn BlockDevice>,
        opts: Options,
    ) -> Result<(Kv, RecoveryReport), KvError> {
        let layout = read_layout(dev.as_ref()).await?;
        let recovered = recovery::recover(dev.as_ref(), &layout).await?;
        if opts.fill_percent == 0 || opts.fill_percent > 100 {
            return Err(KvError::InvalidOptions(format!(
                "fill of {}% (1 to 100)",
                opts.fill_percent
            )));
        }
        let usable_segments = u64::from(layout.segment_count.saturating_sub(RESERVE_SEGMENTS + 2));
        let capacity_bytes =
            usable_segments * layout.segment() * u64::from(opts.fill_percent) / 100;
        let batch_max_bytes =
            u64::from(opts.batch_max_bytes).clamp(layout.block(), layout.segment() / 4);
        let inner = Arc::new(Inner {
            seg_gen: (0..layout.segment_count)
                .map(|_| AtomicU64::new(0))
                .collect(),
            dev,
            layout,
            opts,
            state: RwLock::new(recovered.state),
            counters: Counters::default(),
            maint_wake: Notify::new(),
            space_wake: Notify::new(),
            capacity_bytes,
            reserve_segments: RESERVE_SEGMENTS,
            batch_max_bytes,
            buffers: Buffers::default(),
        });
        let (tx, rx) = mpsc::channel(inner.opts.queue_capacity.max(1));
        let (reloc_tx, reloc_rx) = mpsc::channel(1);
        let (maint_tx, maint_rx) = mpsc::channel(4);
        let committer = Committer::new(Arc::clone(&inner), rx, reloc_rx, recovered.pos);
        let maintenance =
            Maintenance::new(Arc::clone(&inner), maint_rx, reloc_tx, recovered.generation);
        let tasks = vec![
            tokio::spawn(committer.run()),
            tokio::spawn(maintenance.run()),
        ];
        // Space may already be low (or a checkpoint due) after replay.
        inner.maint_wake.notify_one();
        tracing::info!(
            device = %inner.dev.info().name,
            keys = recovered.report.key_count,
            replayed_batches = recovered.report.replayed_batches,
            checkpoint = recovered.report.checkpoint_generation,
            stop = %recovered.report.stop_reason,
            "KV store opened"
        );
        let kv = Kv {
            shared: Arc::new(Shared {
                inner,
                tx,
                maint_tx,
                closed: AtomicBool::new(false),
                tasks: Mutex::new(tasks),
            }),
        };
        Ok((kv, recovered.report))
    }

    fn inner(&self) -> &Inner {
        &self.shared.inner
    }

    fn check_open(&self) -> Result<(), KvError> {
        if self.shared.closed.load(Ordering::Acquire) {
            Err(KvError::Closed)
        } else {
            Ok(())
        }
    }

    async fn submit(&self, make: impl FnOnce(Reply) -> Request) -> Result<(), KvError> {
        self.submit_done(make).await.0
    }

    /// Sends a command to the committer and waits for its answer (and the Store's buffer).
    async fn submit_done(&self, make: impl FnOnce(Reply) -> Request) -> Done {
        let (reply, rx) = oneshot::channel();
        let req = make(reply);
        if let Err(e) = self.check_open() {
            return (Err(e), req.into_value());
        }
        if let Err(mpsc::error::SendError(req)) = self.shared.tx.send(req).await {
            return (Err(KvError::Closed), req.into_value());
        }
        rx.await.unwrap_or((Err(KvError::Closed), None))
    }

    /// Checks a Store's key and value size.
    fn check_store(&self, key: &[u8], len: usize) -> Result<Key, KvError> {
        let key = Key::new(key)?;
        let max = self.inner().layout.max_value_bytes;
        if len == 0 || len > max as usize {
            add(&self.inner().counters.rejected, 1);
            return Err(KvError::InvalidValueSize {
                len,
                max_bytes: max,
            });
        }
        Ok(key)
    }

    /// Stores `value` under `key`; durable when it returns `Ok`. Concurrent calls share
    /// log writes and flushes (group commit). The value is copied once (into a reused
    /// buffer); [`Kv::store_buf`] takes a buffer instead.
    pub async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<(), KvError> {
        let key = self.check_store(key, value.len())?;
        let crc = crc32c::crc32c(value);
        let value = self.inner().buffers.value_copy(value);
        let (r, buf) = self
            .submit_done(|reply| Request::Put {
                key,
                value,
                crc,
                mode,
                reply,
            })
            .await;
        if let Some(b) = buf {
            self.inner().buffers.give_back_read(b);
        }
        r
    }

    /// Stores the whole of `value` (its length is the value's) under `key`, as
    /// [`Kv::store`] does, without copying it first: a value of 64 KiB or more is written
    /// to the log from this buffer, a smaller one is copied into the batch. The buffer
    /// comes back with the result (its length unchanged, its content the value); only a
    /// failed device write may keep it (`None`).
    pub async fn store_buf(
        &self,
        key: &[u8],
        value: IoBuf,
        mode: StoreMode,
    ) -> (Result<(), KvError>, Option<IoBuf>) {
        let key = match self.check_store(key, value.len()) {
            Ok(k) => k,
            Err(e) => return (Err(e), Some(value)),
        };
        let crc = crc32c::crc32c(&value);
        self.submit_done(|reply| Request::Put {
            key,
            value,
            crc,
            mode,
            reply,
        })
        .await
    }

    /// Deletes `key` (a durable tombstone when it returns `Ok`).
    pub async fn delete(&self, key: &[u8]) -> Result<(), KvError> {
        let key = Key::new(key)?;
        self.submit(|reply| Request::Delete { key, reply }).await
    }

    /// Waits until every command sent before is durable.
    pub async fn sync(&self) -> Result<(), KvError> {
        self.submit(|reply| Request::Barrier { reply }).await
    }

    /// Reads the value of `key` into `out` with one device read, verifying its checksum.
    /// A buffer smaller than the value gets the value's first bytes and
    /// [`Retrieved::is_truncated`]; `value_bytes` is the full size either way.
    pub async fn retrieve(&self, key: &[u8], out: &mut [u8]) -> Result<Retrieved, KvError> {
        let key = Key::new(key)?;
        self.check_open()?;
        let inner = self.inner();
        let layout = &inner.layout;
        for _ in 0..READ_ATTEMPTS {
            let (e, generation) = {
                let st = inner.read();
                let e = *st.index.get(&key).ok_or(KvError::KeyNotFound)?;
                (e, inner.generation(layout.segment_of(e.addr)))
            };
            let block = layout.block();
            let dev_off = layout.device_offset(e.addr);
            let start = dev_off / block * block;
            let end = align_up(dev_off + u64::from(e.len), block);
            let res = inner
                .dev
                .read(start, inner.buffers.read_buffer((end - start) as usize))
                .await;
            if inner.generation(layout.segment_of(e.addr)) != generation {
                if let Ok(buf) = res {
                    inner.buffers.give_back_read(buf);
                }
                continue; // compaction moved the value and its segment was reused
            }
            let buf = res.map_err(|err| read_error(inner, &e, err))?;
            let skip = (dev_off - start) as usize;
            let value = &buf[skip..skip + e.len as usize];
            if crc32c::crc32c(value) != e.crc {
                let err = checksum_error(inner, &key, &e);
                inner.buffers.give_back_read(buf);
                return Err(err);
            }
            let n = out.len().min(value.len());
            out[..n].copy_from_slice(&value[..n]);
            inner.buffers.give_back_read(buf);
            add(&inner.counters.retrieves, 1);
            add(&inner.counters.retrieve_bytes, n as u64);
            return Ok(Retrieved {
                value_bytes: e.len,
                copied_bytes: n,
            });
        }
        Err(moving_error())
    }

    /// Reads the value of `key` into `buf`, the buffer that goes out to the host: like
    /// [`Kv::retrieve`] into `buf[..]`, and the bytes after the copied ones are zero.
    /// When `buf` can hold the blocks the value spans (its capacity is whole pages), the
    /// device reads straight into it and nothing is copied (a value that does not start
    /// on a block is moved to the front). The buffer comes back with its length unchanged
    /// (a fresh zeroed one after a failed device read, which keeps the buffer).
    pub async fn retrieve_buf(
        &self,
        key: &[u8],
        buf: IoBuf,
    ) -> (Result<Retrieved, KvError>, IoBuf) {
        let want = buf.len();
        let key = match Key::new(key).and_then(|k| self.check_open().map(|()| k)) {
            Ok(k) => k,
            Err(e) => return (Err(e), buf),
        };
        let inner = self.inner();
        let layout = &inner.layout;
        let block = layout.block();
        let mut buf = buf;
        for _ in 0..READ_ATTEMPTS {
            let (e, generation) = {
                let st = inner.read();
                let Some(e) = st.index.get(&key).copied() else {
                    return (Err(KvError::KeyNotFound), buf);
                };
                (e, inner.generation(layout.segment_of(e.addr)))
            };
            let dev_off = layout.device_offset(e.addr);
            let start = dev_off / block * block;
            let span = (align_up(dev_off + u64::from(e.len), block) - start) as usize;
            let skip = (dev_off - start) as usize;
            let len = e.len as usize;
            if span > buf.capacity() {
                // Too small for the blocks (a short buffer): read elsewhere and copy.
                let r = self.retrieve(key.as_bytes(), &mut buf).await;
                if let Ok(got) = &r {
                    buf[got.copied_bytes..].fill(0);
                }
                return (r, buf);
            }
            buf.set_len(span);
            let res = inner.dev.read(start, buf).await;
            let moved = inner.generation(layout.segment_of(e.addr)) != generation;
            let mut b = match res {
                Ok(b) => b,
                Err(err) => {
                    let fresh = IoBuf::new_zeroed(want);
                    if moved {
                        buf = fresh;
                        continue;
                    }
                    return (Err(read_error(inner, &e, err)), fresh);
                }
            };
            if moved {
                b.set_len(want);
                buf = b;
                continue; // compaction moved the value and its segment was reused
            }
            if crc32c::crc32c(&b[skip..skip + len]) != e.crc {
                b.set_len(want);
                return (Err(checksum_error(inner, &key, &e)), b);
            }
            let n = want.min(len);
            if skip > 0 {
                b.copy_within(skip..skip + n, 0);
            }
            b.set_len(want);
            b[n..].fill(0);
            add(&inner.counters.retrieves, 1);
            add(&inner.counters.retrieve_bytes, n as u64);
            return (
                Ok(Retrieved {
                    value_bytes: e.len,
                    copied_bytes: n,
                }),
                b,
            );
        }
        (Err(moving_error()), buf)
    }

    /// The whole value of `key`.
    pub async fn get(&self, key: &[u8]) -> Result<Vec<u8>, KvError> {
        let len = self.value_len(key)?;
        let mut out = vec![0u8; len as usize];
        loop {
            let r = self.retrieve(key, &mut out).await?;
            if r.value_bytes as usize == out.len() {
                return Ok(out);
            }
            // Overwritten with another size meanwhile.
            out.resize(r.value_bytes as usize, 0);
        }
    }

    /// Size of the value of `key`, from memory.
    pub fn value_len(&self, key: &[u8]) -> Result<u32, KvError> {
        let key = Key::new(key)?;
        self.check_open()?;
        let st = self.inner().read();
        st.index
            .get(&key)
            .map(|e| e.len)
            .ok_or(KvError::KeyNotFound)
    }

    /// Whether `key` has a value (from memory: no device I/O).
    pub fn exists(&self, key: &[u8]) -> Result<bool, KvError> {
        let key = Key::new(key)?;
        self.check_open()?;
        add(&self.inner().counters.exists, 1);
        Ok(self.inner().read().index.contains_key(&key))
    }

    /// Up to `max` keys in order, starting at `from` (inclusive; empty = from the first).
    pub fn list(&self, from: &[u8], max: usize) -> Result<Vec<Key>, KvError> {
        self.check_open()?;
        add(&self.inner().counters.lists, 1);
        let st = self.inner().read();
        if from.is_empty() {
            return Ok(st.index.keys().take(max).copied().collect());
        }
        let from = Key::new(from)?;
        Ok(st.index.range(from..).take(max).map(|(k, _)| *k).collect())
    }

    pub fn usage(&self) -> Usage {
        let inner = self.inner();
        inner.read().usage(&inner.layout, inner.capacity_bytes)
    }

    pub fn stats(&self) -> Stats {
        self.inner().counters.snapshot()
    }

    pub fn format_info(&self) -> FormatInfo {
        FormatInfo::from_layout(&self.inner().layout)
    }

    /// Why the store stopped accepting changes, if it did (a log write failed).
    pub fn failure(&self) -> Option<String> {
        self.inner().read().failed.clone()
    }

    async fn maint<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> MaintCommand,
    ) -> Result<T, KvError> {
        self.check_open()?;
        let (reply, rx) = oneshot::channel();
        self.shared
            .maint_tx
            .send(make(reply))
            .await
            .map_err(|_| KvError::Closed)?;
        rx.await.map_err(|_| KvError::Closed)
    }

    /// Compacts every segment with garbage now (unthrottled by size, still paced by the
    /// throttle) and reports what moved.
    pub async fn compact(&self) -> Result<CompactionReport, KvError> {
        self.maint(|reply| MaintCommand::Compact { reply }).await?
    }

    /// Writes a checkpoint now (shortens the next open's replay).
    pub async fn checkpoint(&self) -> Result<(), KvError> {
        self.maint(|reply| MaintCommand::Checkpoint { reply })
            .await?
    }

    /// Finishes what was acknowledged, writes a checkpoint and stops the background
    /// tasks. Every handle then answers `Closed`.
    pub async fn close(&self) -> Result<(), KvError> {
        self.check_open()?;
        let synced = self.sync().await;
        let checkpointed = self.checkpoint().await;
        let _ = self.maint(|reply| MaintCommand::Shutdown { reply }).await;
        self.shared.closed.store(true, Ordering::Release);
        let tasks: Vec<JoinHandle<()>> = self
            .shared
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        for t in tasks {
            t.abort();
            let _ = t.await;
        }
        synced.and(checkpointed)
    }
}

/// A failed value read.
fn read_error(inner: &Inner, e: &Entry, err: BlockError) -> KvError {
    match err {
        BlockError::Media { offset_bytes } => {
            add(&inner.counters.media_errors, 1);
            KvError::Unrecovered {
                addr: e.addr,
                reason: format!("media error at device offset {offset_bytes}"),
            }
        }
        err => KvError::Device(err),
    }
}

/// A value read whose bytes fail their checksum.
fn checksum_error(inner: &Inner, key: &Key, e: &Entry) -> KvError {
    add(&inner.counters.checksum_errors, 1);
    tracing::error!(device = %inner.dev.info().name, ?key, addr = e.addr,
        "KV value fails its checksum");
    KvError::Unrecovered {
        addr: e.addr,
        reason: "value checksum mismatch".into(),
    }
}

fn moving_error() -> KvError {
    KvError::Unrecovered {
        addr: 0,
        reason: "the value kept moving during the read".into(),
    }
}

async fn read_layout(dev: &dyn BlockDevice) -> Result<Layout, KvError> {
    let info = dev.info();
    if info.size_bytes < SUPERBLOCK_BYTES {
        return Err(KvError::NotFormatted(format!(
            "device of {} bytes is too small",
            info.size_bytes
        )));
    }
    let b = dev
        .read(0, IoBuf::new_zeroed(SUPERBLOCK_BYTES as usize))
        .await?;
    let layout = Layout::decode(&b, info.size_bytes)?;
    let dev_block = info.logical_block_bytes.max(1);
    if !layout.block_bytes.is_multiple_of(dev_block) {
        return Err(KvError::InvalidOptions(format!(
            "store formatted with {}-byte blocks, device has {dev_block}-byte blocks",
            layout.block_bytes
        )));
    }
    Ok(layout)
}
