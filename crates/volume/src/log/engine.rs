//! The log engine: writes gather into the open segment (one full row of the rotating
//! array below) and go out as full-stripe writes; reads look blocks up in the map and
//! read their stored bytes (one member read when the array is healthy, a reconstruction
//! when it is degraded: the array engine does both).
//!
//! Ordering rules (see "Log layout" in `docs/volume-format.md`):
//! - A write is acknowledged once its segment is written *and* applied to the map;
//!   segments are applied in sequence order, so a later write to a block always wins.
//! - Segments are allocated from the free list of the last checkpoint in ascending order,
//!   with consecutive sequence numbers, so replay finds them without any other index.
//! - Before segment `s` is written, every segment below `s - FLUSH_WINDOW` is durable (a
//!   member flush), so replay can stop after a bounded run of segments that are not the
//!   expected ones.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use blockdev::{BlockError, DeviceInfo, DeviceKind, IoBuf, check_range};
use tokio::sync::watch;
use uuid::Uuid;

use super::compress::{self, CODEC_RAW};
use super::format::{Loc, LogGeometry, MAX_ROOT_HEAD, Record, encode_summary};
use super::params::LogParams;
use super::state::Space;
use crate::engine::Inner;
use crate::error::{Result, VolumeError};
use crate::locks::StripeLocks;

/// Segment writes in flight at once.
pub const MAX_INFLIGHT: usize = 8;
/// Segments that may be written past the last member flush.
pub const FLUSH_WINDOW: u64 = 32;
/// Replay stops after this many consecutive free segments that do not hold the
/// expected sequence number.
pub const REPLAY_MISS_LIMIT: usize = FLUSH_WINDOW as usize + MAX_INFLIGHT + 2;
/// Free segments only garbage collection may take (host writes wait below it).
pub const GC_RESERVE: usize = 6;
/// Group commit: after a segment write acknowledged N host records, the next seal waits
/// (at most this long) for N records to gather, since those writers usually come straight
/// back; sealing at once would send a nearly empty segment and leave the next one to
/// carry the rest (batches of 1 and 31 at queue depth 32, not 32).
pub const GATHER_WAIT: std::time::Duration = std::time::Duration::from_millis(1);
/// After a gather that ran out of time with fewer than half of the writers back (they do
/// not come straight back: not worth waiting for), this many seals go without gathering.
const GATHER_BACKOFF_SEALS: u32 = 16;

/// Completion of one segment: `None` until written and applied.
pub type Ticket = watch::Sender<Option<std::result::Result<(), String>>>;

pub(super) struct Open {
    pub data: IoBuf,
    pub fill: u64,
    pub records: Vec<Record>,
    pub ticket: Arc<Ticket>,
    pub fua: bool,
    pub gc: bool,
    /// Host records (writes, trims) in it. With none, it holds garbage collection's
    /// moves alone, which wait for the collector's own seal (so its destinations go out
    /// full).
    pub host_records: usize,
}

impl Open {
    /// Holds a host write or trim.
    pub fn has_host(&self) -> bool {
        self.host_records > 0
    }

    fn new(segment_bytes: u64) -> Open {
        Open {
            data: IoBuf::new_zeroed(segment_bytes as usize),
            fill: 0,
            records: Vec::new(),
            ticket: Arc::new(watch::channel(None).0),
            fua: false,
            gc: false,
            host_records: 0,
        }
    }
}

pub(super) struct Flight {
    pub seg: u32,
    records: Vec<Record>,
    /// Host records among them (what group commit waits to see again).
    host_records: usize,
    ticket: Arc<Ticket>,
    result: Option<std::result::Result<(), String>>,
}

pub(super) struct State {
    pub space: Space,
    pub open: Open,
    /// Sequence number of the next segment allocated.
    pub next_seq: u64,
    /// Every segment below this one is written (or failed) and applied.
    pub apply_seq: u64,
    /// Every segment below this one is durable.
    pub flushed_seq: u64,
    pub(super) flights: BTreeMap<u64, Flight>,
    pub inflight: usize,
    /// A checkpoint's root is being written: no segment may be allocated.
    pub ckpt_blocking: bool,
    /// A checkpoint is open (its map taken, its root not written yet): the segments
    /// allocated since its map was taken, in sequence order (its root's head).
    pub ckpt_head: Option<Vec<u32>>,
    pub checkpoint_no: u64,
    /// The current checkpoint's base and deltas (where the next delta goes).
    pub chain: super::checkpoint::Chain,
    pub segs_since_ckpt: u64,
    /// Set when a segment write failed: the log takes no more writes.
    pub failed: Option<String>,
    /// Group commit waits for this many host records before it seals (0: seal at once).
    pub gather_for: usize,
    /// Bumped when a gather starts (its timer ends that gather only).
    pub gather_gen: u64,
    /// Seals left without gathering (after a gather ran out of time).
    pub gather_backoff: u32,
    /// The collector or a checkpoint asked for a seal that could not go (the pipeline
    /// was full, say): the next completion sends the open segment. Nothing else would
    /// when it holds moves alone, and host writers may all be waiting for that space.
    pub gc_seal_owed: bool,
}

/// Counters for status and benchmarks.
#[derive(Default)]
pub struct LogCounters {
    pub host_write_bytes: AtomicU64,
    pub stored_write_bytes: AtomicU64,
    pub segments_written: AtomicU64,
    pub gc_segments: AtomicU64,
    pub gc_moved_bytes: AtomicU64,
    pub checkpoints: AtomicU64,
    /// Segments sealed while a checkpoint was being written (the heads of its roots):
    /// writes the checkpoints did not pause.
    pub checkpoint_head_segments: AtomicU64,
    /// Checkpoints written as a delta after the last one (the others wrote the whole map).
    pub checkpoint_deltas: AtomicU64,
}

/// A sealed segment, ready to be written.
struct SealJob {
    seq: u64,
    seg: u32,
    buf: IoBuf,
    fua: bool,
    flush_first: bool,
}

pub struct LogEngine {
    pub(super) inner: Arc<Inner>,
    pub(super) geo: LogGeometry,
    pub(super) params: LogParams,
    pub(super) uuid: Uuid,
    pub info: DeviceInfo,
    pub(super) state: Mutex<State>,
    /// Bumped whenever space or sealing conditions change (waiters re-check).
    pub(super) progress: watch::Sender<u64>,
    block_locks: StripeLocks,
    pub(super) ckpt_lock: tokio::sync::Mutex<()>,
    pub(super) gc_kick: tokio::sync::Notify,
    pub counters: LogCounters,
}

/// One thing to append to the open segment.
#[derive(Clone, Copy)]
pub(super) enum Item<'a> {
    Block {
        lba: u64,
        codec: u8,
        stored: &'a [u8],
        crc: u32,
        /// Garbage collection: the source (segment, offset) it moves from.
        moved_from: Option<(u32, u32)>,
    },
    Trim {
        lba: u64,
        count: u32,
    },
}

impl LogEngine {
    pub(super) fn new(
        inner: Arc<Inner>,
        geo: LogGeometry,
        params: LogParams,
        space: Space,
        checkpoint_no: u64,
        next_seq: u64,
        chain: super::checkpoint::Chain,
    ) -> LogEngine {
        let info = DeviceInfo {
            name: inner.name.clone(),
            kind: DeviceKind::Other("volume".into()),
            size_bytes: geo.logical_blocks * u64::from(geo.block_bytes),
            logical_block_bytes: inner.info.logical_block_bytes,
            optimal_io_bytes: geo.block_bytes,
            max_io_bytes: blockdev::DEFAULT_MAX_IO_BYTES.max(geo.block_bytes),
            volatile_write_cache: true,
            supports_discard: true,
            supports_write_zeroes: true,
            rotational: false,
        };
        LogEngine {
            uuid: inner.uuid,
            info,
            state: Mutex::new(State {
                space,
                open: Open::new(geo.segment_bytes),
                next_seq,
                apply_seq: next_seq,
                flushed_seq: next_seq,
                flights: BTreeMap::new(),
                inflight: 0,
                ckpt_blocking: false,
                ckpt_head: None,
                checkpoint_no,
                chain,
                segs_since_ckpt: 0,
                failed: None,
                gather_for: 0,
                gather_gen: 0,
                gather_backoff: 0,
                gc_seal_owed: false,
            }),
            progress: watch::channel(0).0,
            block_locks: StripeLocks::new(),
            ckpt_lock: tokio::sync::Mutex::new(()),
            gc_kick: tokio::sync::Notify::new(),
            counters: LogCounters::default(),
            inner,
            geo,
            params,
        }
    }

    pub(super) fn st(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn bump(&self) {
        self.progress.send_modify(|v| *v += 1);
    }

    fn usable(&self) -> Result<()> {
        self.inner.check_usable()?;
        if let Some(e) = &self.st().failed {
            return Err(VolumeError::Io(BlockError::Unavailable(format!(
                "log layout failed: {e}"
            ))));
        }
        Ok(())
    }

    // ---- appending and sealing ------------------------------------------------------

    /// Offset the item would get in the open segment, if it fits.
    fn place(&self, open: &Open, item: &Item<'_>) -> Option<u64> {
        let s = self.geo.segment_bytes;
        let summary_after = self.geo.summary_bytes(open.records.len() + 1);
        match item {
            Item::Trim { .. } => (open.fill + summary_after <= s).then_some(open.fill),
            Item::Block { stored, .. } => {
                let len = stored.len() as u64;
                let su = self.geo.stripe_unit_bytes;
                let mut off = self.geo.align_up(open.fill);
                // A block never straddles a chunk: one member read per block.
                if len <= su && off / su != (off + len - 1) / su {
                    off = (off / su + 1) * su;
                }
                (self.geo.align_up(off + len) + summary_after <= s).then_some(off)
            }
        }
    }

    /// Appends `item`, sealing and waiting for space as needed. Returns the ticket of the
    /// segment that holds it. `more`: the same request appends more items right after
    /// this one (the group commit waits for its last).
    pub(super) async fn append(
        self: &Arc<Self>,
        item: Item<'_>,
        fua: bool,
        gc: bool,
        more: bool,
    ) -> Result<Arc<Ticket>> {
        loop {
            let mut rx = self.progress.subscribe();
            let (ticket, job) = {
                let mut st = self.st();
                if let Some(e) = &st.failed {
                    return Err(VolumeError::Io(BlockError::Unavailable(format!(
                        "log layout failed: {e}"
                    ))));
                }
                // Space is short: the last free segments are the collector's, and host
                // blocks must not fill the segments it seals with them.
                let host_waits = !gc && st.space.free.len() <= GC_RESERVE;
                // The collector never waits for space only it can make (a checkpoint): with
                // the last free segment it seals what it appended (those moves complete,
                // their victims empty) and stops; with none left, the open segment waits
                // for the checkpoint that its earlier destinations' victims allow.
                if gc && st.space.free.len() <= 1 && self.place(&st.open, &item).is_none() {
                    st.open.gc = true;
                    if let Some(job) = self.seal(&mut st, true) {
                        self.spawn_write(job);
                    }
                    return Err(VolumeError::Io(BlockError::Unavailable(
                        "log layout: no free segment for garbage collection".into(),
                    )));
                }
                let placed = if host_waits {
                    None
                } else {
                    self.place(&st.open, &item)
                };
                match placed {
                    Some(off) => {
                        let open = &mut st.open;
                        let rec = match item {
                            Item::Trim { lba, count } => Record::Trim { lba, count },
                            Item::Block {
                                lba,
                                codec,
                                stored,
                                crc,
                                moved_from,
                            } => {
                                let o = off as usize;
                                open.data[o..o + stored.len()].copy_from_slice(stored);
                                open.fill = off + stored.len() as u64;
                                let loc = Loc {
                                    seg: 0,
                                    off: off as u32,
                                    len: stored.len() as u32,
                                    crc,
                                    codec,
                                };
                                self.counters
                                    .stored_write_bytes
                                    .fetch_add(stored.len() as u64, Ordering::Relaxed);
                                match moved_from {
                                    None => Record::Write { lba, loc },
                                    Some((src_seg, src_off)) => Record::Move {
                                        lba,
                                        loc,
                                        src_seg,
                                        src_off,
                                    },
                                }
                            }
                        };
                        open.records.push(rec);
                        open.fua |= fua;
                        open.gc |= gc;
                        if !gc {
                            open.host_records += 1;
                        }
                        let ticket = open.ticket.clone();
                        // Group commit: go now if nothing is being written and the
                        // writers the last segment acknowledged are back (not for the
                        // collector's moves: a destination sealed after each victim would
                        // be the next round's sparse victim).
                        let job = if st.inflight == 0
                            && !gc
                            && !more
                            && st.open.host_records >= st.gather_for
                        {
                            self.seal(&mut st, false)
                        } else {
                            None
                        };
                        (Some(ticket), job)
                    }
                    None if host_waits => (None, None),
                    None => {
                        st.open.gc |= gc;
                        (None, self.seal(&mut st, gc))
                    }
                }
            };
            let sealed = job.is_some();
            if let Some(job) = job {
                self.spawn_write(job);
            }
            if let Some(t) = ticket {
                return Ok(t);
            }
            if !sealed {
                // No room and the open segment cannot go out yet: wait for a segment
                // write, a checkpoint or garbage collection.
                self.gc_kick.notify_one();
                let _ = rx.changed().await;
            }
        }
    }

    /// Seals the open segment if it has records and may go out now. Only the collector
    /// (`by_gc`) may take the last `GC_RESERVE` free segments, for destinations its
    /// round budgeted: a seal for host writes leaves them even when the open segment
    /// holds moves too (else host writes would eat the room a round needs to gain).
    fn seal(&self, st: &mut State, by_gc: bool) -> Option<SealJob> {
        let job = self.try_seal(st, by_gc);
        if job.is_some() {
            st.gc_seal_owed = false;
        } else if by_gc && !st.open.records.is_empty() {
            st.gc_seal_owed = true;
        }
        job
    }

    fn try_seal(&self, st: &mut State, by_gc: bool) -> Option<SealJob> {
        if st.open.records.is_empty() || st.ckpt_blocking || st.inflight >= MAX_INFLIGHT {
            return None;
        }
        // An open checkpoint's root lists what is allocated meanwhile: it has room for
        // `MAX_ROOT_HEAD` (a bound never met in practice: the checkpoint is one write).
        if st
            .ckpt_head
            .as_ref()
            .is_some_and(|h| h.len() >= MAX_ROOT_HEAD)
        {
            return None;
        }
        let reserve = if by_gc && st.open.gc { 0 } else { GC_RESERVE };
        if st.space.free.len() <= reserve {
            self.gc_kick.notify_one();
            return None;
        }
        let seg = st.space.free.pop_front()?;
        st.gather_for = 0;
        st.space.seg_state[seg as usize] = super::state::SegState::Writing;
        if let Some(head) = &mut st.ckpt_head {
            head.push(seg);
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        let mut open = std::mem::replace(&mut st.open, Open::new(self.geo.segment_bytes));
        encode_summary(
            &mut open.data,
            &self.geo,
            self.uuid,
            seq,
            seg,
            &open.records,
        );
        st.flights.insert(
            seq,
            Flight {
                seg,
                records: open.records,
                host_records: open.host_records,
                ticket: open.ticket,
                result: None,
            },
        );
        st.inflight += 1;
        st.segs_since_ckpt += 1;
        let flush_first = seq >= st.flushed_seq + FLUSH_WINDOW;
        Some(SealJob {
            seq,
            seg,
            buf: open.data,
            fua: open.fua,
            flush_first,
        })
    }

    /// Seals the open segment now (FUA writes, garbage collection, checkpoint ends) if
    /// it can go; otherwise the next completion takes it.
    pub(super) fn kick_seal(self: &Arc<Self>, by_gc: bool) {
        let job = {
            let mut st = self.st();
            self.seal(&mut st, by_gc)
        };
        if let Some(job) = job {
            self.spawn_write(job);
        }
    }

    fn spawn_write(self: &Arc<Self>, job: SealJob) {
        let me = self.clone();
        tokio::spawn(async move {
            let r = async {
                if job.flush_first {
                    let upto = me.st().apply_seq;
                    me.inner.flush_volume().await?;
                    let mut st = me.st();
                    st.flushed_seq = st.flushed_seq.max(upto);
                }
                me.inner
                    .write_volume(me.geo.segment_offset(job.seg), job.buf, job.fua)
                    .await
                    .map(|_| ())
            }
            .await;
            me.complete(job.seq, r.map_err(|e| e.to_string()));
        });
    }

    /// A segment write ended: apply every segment that can be applied in order, notify
    /// their writers, and send out what gathered meanwhile.
    fn complete(self: &Arc<Self>, seq: u64, r: std::result::Result<(), String>) {
        let mut gather = None;
        let job = {
            let mut st = self.st();
            let mut acked_host_records = 0;
            st.inflight -= 1;
            if let Some(f) = st.flights.get_mut(&seq) {
                f.result = Some(r);
            }
            while let Some(entry) = st.flights.first_entry() {
                if entry.get().result.is_none() {
                    break;
                }
                let (seq, f) = entry.remove_entry();
                let result = f.result.unwrap_or(Ok(()));
                acked_host_records += f.host_records;
                match &result {
                    Ok(()) => {
                        st.space.apply(f.seg, &f.records);
                        self.counters
                            .segments_written
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        tracing::error!(volume = %self.inner.name, seq, error = %e,
                            "log segment write failed: the volume takes no more writes");
                        st.failed.get_or_insert_with(|| e.clone());
                    }
                }
                st.apply_seq = seq + 1;
                f.ticket.send_replace(Some(result));
            }
            // Group commit: what gathered goes out once the pipeline is empty (a full
            // segment went out already, from `append`), or, when the writers just
            // acknowledged are not all back yet, once they are (`append`) or after
            // `GATHER_WAIT`; moves alone wait for the collector's seal at the end of
            // its round (owed, if it could not go then).
            if st.gc_seal_owed {
                self.seal(&mut st, true)
            } else if st.inflight > 0 {
                None
            } else if acked_host_records == 0 || st.gather_backoff > 0 {
                st.gather_backoff = st.gather_backoff.saturating_sub(1);
                if st.open.has_host() {
                    self.seal(&mut st, false)
                } else {
                    None
                }
            } else {
                // Those just acknowledged and those already waiting go out together.
                st.gather_for = st.open.host_records + acked_host_records;
                st.gather_gen += 1;
                gather = Some(st.gather_gen);
                None
            }
        };
        self.bump();
        if let Some(job) = job {
            self.spawn_write(job);
        }
        if let Some(generation) = gather {
            self.spawn_gather_timer(generation);
        }
        self.gc_kick.notify_one();
    }

    /// Ends a group-commit gather that is still waiting after `GATHER_WAIT`: what
    /// gathered goes out (and the next seals do not wait if most writers stayed away).
    fn spawn_gather_timer(self: &Arc<Self>, generation: u64) {
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(GATHER_WAIT).await;
            let job = {
                let mut st = me.st();
                if st.gather_for == 0 || st.gather_gen != generation {
                    // Sealed meanwhile: the writers came back.
                    None
                } else {
                    if st.open.host_records < st.gather_for / 2 {
                        st.gather_backoff = GATHER_BACKOFF_SEALS;
                    }
                    st.gather_for = 0;
                    if st.inflight == 0 && st.open.has_host() {
                        me.seal(&mut st, false)
                    } else {
                        None
                    }
                }
            };
            if let Some(job) = job {
                me.spawn_write(job);
            }
        });
    }

    async fn wait(t: &Ticket) -> Result<()> {
        let mut rx = t.subscribe();
        let r = rx
            .wait_for(|v| v.is_some())
            .await
            .map_err(|_| VolumeError::Io(BlockError::Closed))?
            .clone();
        match r {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(VolumeError::Io(BlockError::Unavailable(e))),
            None => Err(VolumeError::Io(BlockError::Closed)),
        }
    }

    async fn wait_all(tickets: &[Arc<Ticket>]) -> Result<()> {
        for t in tickets {
            Self::wait(t).await?;
        }
        Ok(())
    }

    fn push_ticket(tickets: &mut Vec<Arc<Ticket>>, t: Arc<Ticket>) {
        if !tickets.iter().any(|x| Arc::ptr_eq(x, &t)) {
            tickets.push(t);
        }
    }

    // ---- reads ------------------------------------------------------------------------

    /// The stored bytes of a mapped block, checked against the map's checksum.
    pub(super) async fn read_stored(&self, loc: &Loc) -> Result<IoBuf> {
        let start = self.geo.segment_offset(loc.seg) + u64::from(loc.off);
        let len = self.geo.align_up(u64::from(loc.len)) as usize;
        let mut buf = self
            .inner
            .read_volume(start, IoBuf::new_zeroed(len))
            .await?;
        buf.set_len(loc.len as usize);
        Ok(buf)
    }

    /// Block `lba` decompressed, or `None` if it is not mapped (reads as zeroes).
    pub(super) async fn read_block(&self, lba: u64) -> Result<Option<Vec<u8>>> {
        let bs = self.geo.block_bytes as usize;
        for _ in 0..4 {
            let loc = self.st().space.map[lba as usize];
            if !loc.is_some() {
                return Ok(None);
            }
            let stored = self.read_stored(&loc).await?;
            if crc32c::crc32c(&stored) != loc.crc {
                // Moved by garbage collection and its segment reused meanwhile: look again.
                if self.st().space.map[lba as usize] != loc {
                    continue;
                }
                tracing::error!(volume = %self.inner.name, lba, seg = loc.seg, off = loc.off,
                    "log block checksum mismatch");
                return Err(VolumeError::Io(BlockError::Media {
                    offset_bytes: lba * bs as u64,
                }));
            }
            let mut out = vec![0u8; bs];
            compress::decompress(loc.codec, &stored, &mut out).map_err(|e| {
                tracing::error!(volume = %self.inner.name, lba, error = %e, "log block does not decompress");
                VolumeError::Io(BlockError::Media {
                    offset_bytes: lba * bs as u64,
                })
            })?;
            return Ok(Some(out));
        }
        Err(VolumeError::Invalid(
            "log block kept moving during a read".into(),
        ))
    }

    pub async fn read(&self, offset_bytes: u64, mut buf: IoBuf) -> Result<IoBuf> {
        check_range(&self.info, offset_bytes, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(buf);
        }
        self.usable()?;
        let bs = u64::from(self.geo.block_bytes);
        let end = offset_bytes + buf.len() as u64;
        let first = offset_bytes / bs;
        let last = (end - 1) / bs;
        let blocks = futures::future::join_all((first..=last).map(|b| self.read_block(b))).await;
        for (b, content) in (first..=last).zip(blocks) {
            let (bstart, bend) = (b * bs, (b + 1) * bs);
            let (s, e) = (offset_bytes.max(bstart), end.min(bend));
            let dst = &mut buf[(s - offset_bytes) as usize..(e - offset_bytes) as usize];
            match content? {
                Some(c) => dst.copy_from_slice(&c[(s - bstart) as usize..(e - bstart) as usize]),
                None => dst.fill(0),
            }
        }
        self.inner.stats.record_read(buf.len() as u64);
        Ok(buf)
    }

    // ---- writes -----------------------------------------------------------------------

    /// Compresses and appends one whole block.
    async fn append_block(
        self: &Arc<Self>,
        lba: u64,
        raw: &[u8],
        fua: bool,
        more: bool,
    ) -> Result<Arc<Ticket>> {
        let align = self.geo.align_bytes as usize;
        let (codec, packed) = compress::compress(self.params.compression, raw, align);
        let stored: &[u8] = packed.as_deref().unwrap_or(raw);
        debug_assert!(codec != CODEC_RAW || stored.len() == raw.len());
        let crc = crc32c::crc32c(stored);
        self.append(
            Item::Block {
                lba,
                codec,
                stored,
                crc,
                moved_from: None,
            },
            fua,
            false,
            more,
        )
        .await
    }

    pub async fn write(
        self: &Arc<Self>,
        offset_bytes: u64,
        buf: IoBuf,
        fua: bool,
    ) -> Result<IoBuf> {
        check_range(&self.info, offset_bytes, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(buf);
        }
        self.usable()?;
        let bs = u64::from(self.geo.block_bytes);
        let end = offset_bytes + buf.len() as u64;
        let (first, last) = (offset_bytes / bs, (end - 1) / bs);
        let _locks = self.block_locks.lock(first..=last).await;
        let mut tickets = Vec::new();
        for b in first..=last {
            let (bstart, bend) = (b * bs, (b + 1) * bs);
            let (s, e) = (offset_bytes.max(bstart), end.min(bend));
            let src = &buf[(s - offset_bytes) as usize..(e - offset_bytes) as usize];
            let t = if s == bstart && e == bend {
                self.append_block(b, src, fua, b != last).await?
            } else {
                // Part of a block: read-modify-write under the block's lock.
                let mut block = self
                    .read_block(b)
                    .await?
                    .unwrap_or_else(|| vec![0u8; bs as usize]);
                block[(s - bstart) as usize..(e - bstart) as usize].copy_from_slice(src);
                self.append_block(b, &block, fua, b != last).await?
            };
            Self::push_ticket(&mut tickets, t);
        }
        if fua {
            self.kick_seal(false);
        }
        Self::wait_all(&tickets).await?;
        self.counters
            .host_write_bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.inner.stats.record_write(buf.len() as u64);
        Ok(buf)
    }

    /// Deallocate / Write Zeroes: whole blocks leave the map (one trim record per run);
    /// the partial blocks at either end get zeroes written into them.
    pub async fn trim(self: &Arc<Self>, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        check_range(&self.info, offset_bytes, len_bytes)?;
        if len_bytes == 0 {
            return Ok(());
        }
        self.usable()?;
        let bs = u64::from(self.geo.block_bytes);
        let end = offset_bytes + len_bytes;
        let (first, last) = (offset_bytes / bs, (end - 1) / bs);
        let _locks = self.block_locks.lock(first..=last).await;
        let mut tickets = Vec::new();
        let mut whole = Vec::new();
        for b in first..=last {
            let (bstart, bend) = (b * bs, (b + 1) * bs);
            let (s, e) = (offset_bytes.max(bstart), end.min(bend));
            if s == bstart && e == bend {
                whole.push(b);
                continue;
            }
            if let Some(mut block) = self.read_block(b).await? {
                block[(s - bstart) as usize..(e - bstart) as usize].fill(0);
                let t = self.append_block(b, &block, false, false).await?;
                Self::push_ticket(&mut tickets, t);
            }
        }
        // Runs of mapped blocks only: trimming what is not mapped writes nothing.
        let runs = {
            let st = self.st();
            let mut runs: Vec<(u64, u32)> = Vec::new();
            for &b in &whole {
                if !st.space.map[b as usize].is_some() {
                    continue;
                }
                match runs.last_mut() {
                    Some((start, count))
                        if *start + u64::from(*count) == b && *count < u32::MAX =>
                    {
                        *count += 1
                    }
                    _ => runs.push((b, 1)),
                }
            }
            runs
        };
        let n = runs.len();
        for (i, (lba, count)) in runs.into_iter().enumerate() {
            let t = self
                .append(Item::Trim { lba, count }, false, false, i + 1 < n)
                .await?;
            Self::push_ticket(&mut tickets, t);
        }
        Self::wait_all(&tickets).await
    }

    /// Every acknowledged write is applied, so its segment is written: a member flush
    /// makes them all durable.
    pub async fn flush(&self) -> Result<()> {
        self.usable()?;
        let upto = self.st().apply_seq;
        self.inner.flush_volume().await?;
        let mut st = self.st();
        st.flushed_seq = st.flushed_seq.max(upto);
        Ok(())
    }
}
