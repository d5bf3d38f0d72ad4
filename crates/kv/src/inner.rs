//! What the command path, the committer and the compactor share.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use blockdev::{BlockDevice, IoBuf};
use tokio::sync::{Notify, oneshot};

use crate::KvError;
use crate::buffers::Buffers;
use crate::format::Layout;
use crate::key::Key;
use crate::options::Options;
use crate::state::State;
use crate::stats::Counters;

/// Store options of the NVMe KV Store command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StoreMode {
    /// Create or overwrite.
    #[default]
    Upsert,
    /// Overwrite only: fails with `KeyNotFound` if the key has no value.
    OnlyIfExists,
    /// Create only: fails with `KeyExists` if the key has a value.
    OnlyIfAbsent,
}

/// A command's answer, with the value buffer of a Store given back (`None` for other
/// commands, and when a failed device write kept it).
pub(crate) type Done = (Result<(), KvError>, Option<IoBuf>);
pub(crate) type Reply = oneshot::Sender<Done>;

/// A command for the committer.
pub(crate) enum Request {
    Put {
        key: Key,
        /// The value (its length is the value's): copied into the batch when small,
        /// written from here in place when large.
        value: IoBuf,
        crc: u32,
        mode: StoreMode,
        reply: Reply,
    },
    Delete {
        key: Key,
        reply: Reply,
    },
    /// Answers once everything sent before it is durable (or failed).
    Barrier {
        reply: Reply,
    },
}

impl Request {
    /// The value buffer of a Store that is not sent.
    pub(crate) fn into_value(self) -> Option<IoBuf> {
        match self {
            Request::Put { value, .. } => Some(value),
            Request::Delete { .. } | Request::Barrier { .. } => None,
        }
    }
}

/// A value compaction moves (one relocation request is at most a batch).
pub(crate) struct Relocation {
    pub key: Key,
    pub seq: u64,
    pub crc: u32,
    pub value: Vec<u8>,
}

pub(crate) struct RelocateRequest {
    pub records: Vec<Relocation>,
    pub reply: oneshot::Sender<Result<RelocateOutcome, KvError>>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RelocateOutcome {
    pub moved: u64,
    pub stale: u64,
    pub batch_bytes: u64,
}

pub(crate) struct Inner {
    pub dev: Arc<dyn BlockDevice>,
    pub layout: Layout,
    pub opts: Options,
    pub state: RwLock<State>,
    /// Bumped each time a segment becomes free: a read that raced with the reuse of its
    /// segment sees a different generation afterwards and is retried.
    pub seg_gen: Box<[AtomicU64]>,
    pub counters: Counters,
    /// Wakes the compactor (space low, stall, checkpoint due).
    pub maint_wake: Notify,
    /// Wakes a stalled committer (segments were freed, or compaction gave up).
    pub space_wake: Notify,
    pub capacity_bytes: u64,
    /// Segments only relocations may take.
    pub reserve_segments: u32,
    pub batch_max_bytes: u64,
    /// Reused value copies and read buffers.
    pub buffers: Buffers,
}

impl Inner {
    pub fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn generation(&self, segment: u32) -> u64 {
        self.seg_gen
            .get(segment as usize)
            .map_or(0, |g| g.load(Ordering::SeqCst))
    }

    pub fn bump_generation(&self, segment: u32) {
        if let Some(g) = self.seg_gen.get(segment as usize) {
            g.fetch_add(1, Ordering::SeqCst);
        }
    }
}
