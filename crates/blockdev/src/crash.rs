//! Crash recording: which device images could a power loss at this instant leave behind?
//!
//! Model (the usual one for a drive with a volatile write cache, as in redb's crash tests):
//! - A write is *durable* once a flush that started after the write completed has
//!   completed, or when it completes if it had FUA.
//! - Every other completed write, write_zeroes or discard is *pending*. At a crash, any
//!   subset of the pending writes may have reached the media, in any order, and each one
//!   may be torn at logical-block granularity (each block lands or not on its own). So
//!   after a crash every block holds either its durable content or the content of one of
//!   the pending writes that covered it; blocks are never torn internally.
//! - A FUA write supersedes pending writes to the same blocks: their older data can no
//!   longer appear there.
//!
//! The recorder itself is a sparse [`RamDevice`] ("live" contents, which reads see) plus a
//! second RamDevice holding the durable contents, plus the list of pending writes.

use std::sync::{Mutex, MutexGuard};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::{
    BlockDevice, BlockError, DeviceInfo, DeviceKind, DeviceStats, IoBuf, IoFuture, RamDevice,
    StatsCounters, WriteFlags, check_range,
};

/// One unflushed write as seen by [`CrashRecorder::pending_writes`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingWriteInfo {
    /// Position in issue order; what [`WriteChoice::index`] refers to.
    pub index: usize,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    /// write_zeroes or discard rather than a data write.
    pub zeroes: bool,
}

/// How one pending write lands in a crash image (see [`CrashRecorder::crash_image_with`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteChoice {
    pub index: usize,
    /// Which logical blocks of the write land (missing entries: not landed);
    /// `None` = all of them.
    pub blocks: Option<Vec<bool>>,
}

enum Data {
    Bytes(Vec<u8>),
    Zeroes,
}

struct Pending {
    offset_bytes: u64,
    len_bytes: u64,
    data: Data,
    /// Per logical block: may still land (false once superseded by a FUA write).
    live_blocks: Vec<bool>,
}

struct State {
    durable: RamDevice,
    pending: Vec<Pending>,
    frozen: bool,
}

/// A RAM device that records what a power loss could leave behind. See the module docs
/// for the crash model. All operations are serialised (it is a test backend).
pub struct CrashRecorder {
    info: DeviceInfo,
    live: RamDevice,
    state: Mutex<State>,
    stats: StatsCounters,
}

impl CrashRecorder {
    /// A zero-filled device with 512-byte blocks whose content is all durable.
    pub fn new(name: impl Into<String>, size_bytes: u64) -> CrashRecorder {
        CrashRecorder::from_image(name, &RamDevice::new("", size_bytes))
    }

    /// Starts from a copy of `image` (e.g. a previous crash image, to crash again during
    /// recovery); its content counts as durable. Keeps the image's logical block size.
    pub fn from_image(name: impl Into<String>, image: &RamDevice) -> CrashRecorder {
        let name = name.into();
        let live = image.snapshot(name.clone());
        let info = DeviceInfo {
            name,
            kind: DeviceKind::Other("crash-recorder".into()),
            volatile_write_cache: true,
            ..live.info().clone()
        };
        let durable = image.snapshot("durable");
        CrashRecorder {
            info,
            live,
            state: Mutex::new(State {
                durable,
                pending: Vec::new(),
                frozen: false,
            }),
            stats: StatsCounters::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn block_bytes(&self) -> u64 {
        u64::from(self.info.logical_block_bytes)
    }

    /// Unflushed writes in issue order.
    pub fn pending_writes(&self) -> Vec<PendingWriteInfo> {
        self.lock()
            .pending
            .iter()
            .enumerate()
            .map(|(index, p)| PendingWriteInfo {
                index,
                offset_bytes: p.offset_bytes,
                len_bytes: p.len_bytes,
                zeroes: matches!(p.data, Data::Zeroes),
            })
            .collect()
    }

    /// The image if nothing unflushed survives.
    pub fn durable_image(&self) -> RamDevice {
        self.lock()
            .durable
            .snapshot(format!("{}-durable", self.info.name))
    }

    /// The image if everything survives (what reads see now).
    pub fn current_image(&self) -> RamDevice {
        let _state = self.lock();
        self.live.snapshot(format!("{}-current", self.info.name))
    }

    /// A random possible post-crash image: pending writes shuffled, each skipped, applied
    /// whole or torn per block with equal odds. Deterministic for a given seed and history.
    pub fn crash_image(&self, seed: u64) -> RamDevice {
        let mut rng = StdRng::seed_from_u64(seed);
        let state = self.lock();
        let mut choices: Vec<WriteChoice> = Vec::new();
        for (index, p) in state.pending.iter().enumerate() {
            match rng.random_range(0..3u8) {
                0 => {}
                1 => choices.push(WriteChoice {
                    index,
                    blocks: None,
                }),
                _ => {
                    let blocks = (0..p.live_blocks.len())
                        .map(|_| rng.random_bool(0.5))
                        .collect();
                    choices.push(WriteChoice {
                        index,
                        blocks: Some(blocks),
                    });
                }
            }
        }
        choices.shuffle(&mut rng);
        self.build_image(&state, &choices, format!("{}-crash-{seed}", self.info.name))
    }

    /// The post-crash image where exactly `choices` landed, applied in the given order.
    /// Unknown indices are ignored.
    pub fn crash_image_with(&self, choices: &[WriteChoice]) -> RamDevice {
        let state = self.lock();
        self.build_image(&state, choices, format!("{}-crash", self.info.name))
    }

    /// Simulates power loss now: returns [`CrashRecorder::crash_image`]`(seed)` and makes
    /// every later operation on this recorder fail with [`BlockError::Closed`].
    pub fn crash(&self, seed: u64) -> RamDevice {
        let image = self.crash_image(seed);
        self.lock().frozen = true;
        image
    }

    /// Every content the logical block at `offset_bytes` may hold after a crash: the
    /// durable one first, then those of pending writes, deduplicated. For checking
    /// "old or new" after recovery.
    pub fn block_candidates(&self, offset_bytes: u64) -> Result<Vec<Vec<u8>>, BlockError> {
        let bb = self.block_bytes();
        check_range(&self.info, offset_bytes, bb)?;
        let state = self.lock();
        let mut block = vec![0u8; bb as usize];
        state.durable.read_at(offset_bytes, &mut block)?;
        let mut out = vec![block];
        for p in &state.pending {
            if offset_bytes < p.offset_bytes || offset_bytes >= p.offset_bytes + p.len_bytes {
                continue;
            }
            let i = ((offset_bytes - p.offset_bytes) / bb) as usize;
            if !p.live_blocks.get(i).copied().unwrap_or(false) {
                continue;
            }
            let content = match &p.data {
                Data::Bytes(d) => d[i * bb as usize..(i + 1) * bb as usize].to_vec(),
                Data::Zeroes => vec![0u8; bb as usize],
            };
            if !out.contains(&content) {
                out.push(content);
            }
        }
        Ok(out)
    }

    fn build_image(&self, state: &State, choices: &[WriteChoice], name: String) -> RamDevice {
        let image = state.durable.snapshot(name);
        for choice in choices {
            let Some(p) = state.pending.get(choice.index) else {
                continue;
            };
            apply(&image, p, self.block_bytes(), |i| match &choice.blocks {
                None => true,
                Some(mask) => mask.get(i).copied().unwrap_or(false),
            });
        }
        image
    }

    fn check(&self, state: &State, offset_bytes: u64, len_bytes: u64) -> Result<(), BlockError> {
        if state.frozen {
            return Err(BlockError::Closed);
        }
        check_range(&self.info, offset_bytes, len_bytes)
    }

    fn record(&self, state: &mut State, offset_bytes: u64, len_bytes: u64, data: Data, fua: bool) {
        let bb = self.block_bytes();
        if fua {
            // Durable now, and older pending data for these blocks can no longer land.
            let _ = match &data {
                Data::Bytes(d) => state.durable.write_at(offset_bytes, d),
                Data::Zeroes => state.durable.zero_at(offset_bytes, len_bytes),
            };
            let end = offset_bytes + len_bytes;
            for p in &mut state.pending {
                let p_end = p.offset_bytes + p.len_bytes;
                if p.offset_bytes >= end || offset_bytes >= p_end {
                    continue;
                }
                let first = (offset_bytes.max(p.offset_bytes) - p.offset_bytes) / bb;
                let last = (end.min(p_end) - p.offset_bytes) / bb;
                for i in first..last {
                    if let Some(b) = p.live_blocks.get_mut(i as usize) {
                        *b = false;
                    }
                }
            }
        } else if len_bytes > 0 {
            let blocks = (len_bytes / bb) as usize;
            state.pending.push(Pending {
                offset_bytes,
                len_bytes,
                data,
                live_blocks: vec![true; blocks],
            });
        }
    }
}

/// Writes the still-live blocks of `p` selected by `lands` onto `image`.
fn apply(image: &RamDevice, p: &Pending, block_bytes: u64, lands: impl Fn(usize) -> bool) {
    let bb = block_bytes as usize;
    for (i, &live) in p.live_blocks.iter().enumerate() {
        if !live || !lands(i) {
            continue;
        }
        let off = p.offset_bytes + (i * bb) as u64;
        // Ranges were validated when recorded, so these cannot fail.
        let _ = match &p.data {
            Data::Bytes(d) => image.write_at(off, &d[i * bb..(i + 1) * bb]),
            Data::Zeroes => image.zero_at(off, block_bytes),
        };
    }
}

impl BlockDevice for CrashRecorder {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn read(&self, offset_bytes: u64, mut buf: IoBuf) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            {
                let state = self.lock();
                self.check(&state, offset_bytes, buf.len() as u64)?;
            }
            self.live.read_at(offset_bytes, &mut buf)?;
            self.stats.record_read(buf.len() as u64);
            Ok(buf)
        })
    }

    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            let mut state = self.lock();
            self.check(&state, offset_bytes, buf.len() as u64)?;
            self.live.write_at(offset_bytes, &buf)?;
            self.record(
                &mut state,
                offset_bytes,
                buf.len() as u64,
                Data::Bytes(buf.to_vec()),
                flags.fua,
            );
            self.stats.record_write(buf.len() as u64);
            Ok(buf)
        })
    }

    fn flush(&self) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            let mut state = self.lock();
            if state.frozen {
                return Err(BlockError::Closed);
            }
            // Everything recorded so far has completed: it all becomes durable, in issue order.
            let pending = std::mem::take(&mut state.pending);
            for p in &pending {
                apply(&state.durable, p, self.block_bytes(), |_| true);
            }
            self.stats.record_flush();
            Ok(())
        })
    }

    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            let mut state = self.lock();
            self.check(&state, offset_bytes, len_bytes)?;
            self.live.zero_at(offset_bytes, len_bytes)?;
            self.record(&mut state, offset_bytes, len_bytes, Data::Zeroes, false);
            Ok(())
        })
    }

    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        self.write_zeroes(offset_bytes, len_bytes)
    }

    fn stats(&self) -> DeviceStats {
        self.stats.snapshot()
    }
}
