//! The committer: one task that owns the head of the log. It gathers queued commands into
//! batches (group commit), writes each batch with one device write, covers completed
//! writes with one shared flush, then applies the batches to the index in log order and
//! acknowledges their commands. Conditions (only-if-exists / only-if-absent) and capacity
//! are decided here, against the index plus the effects of batches still in flight, so
//! concurrent commands on one key see each other in log order.
//!
//! Invariant: a batch is acknowledged only when it and every batch before it in the log
//! are durable, so recovery (which stops at the first invalid batch) never loses an
//! acknowledged batch.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use blockdev::{BlockDevice, BlockError, IoBuf, WriteFlags};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::sync::{mpsc, oneshot};

use crate::KvError;
use crate::bytes::align_up;
use crate::format::{
    BATCH_FLAG_RELOCATION, BatchHeader, DESCRIPTOR_BYTES, Descriptor, Entry, LogPosition,
    NO_SEGMENT, RecordKind, encode_batch_meta, meta_bytes, plan_batch, plan_batch_in_place,
};
use crate::inner::{
    Inner, RelocateOutcome, RelocateRequest, Relocation, Reply, Request, StoreMode,
};
use crate::key::Key;
use crate::state::{Relocated, SegState, State};
use crate::stats::add;

/// Most records in one batch (bounds the descriptor area to 160 KiB).
const MAX_RECORDS_PER_BATCH: usize = 4096;
/// Batch buffers kept for reuse.
const POOL_BUFFERS: usize = 8;

/// A queued command's pending effect on a key (for later commands' conditions).
#[derive(Clone, Copy, Debug)]
struct Overlay {
    exists: bool,
    footprint: u64,
    /// The batch that produced this state; removed once that batch is applied.
    batch_seq: u64,
}

/// Who waits for a batch.
enum Waiter {
    /// A store or delete in the batch, or a command answered in order with it (a refused
    /// condition, a barrier).
    User {
        reply: Reply,
        result: Result<(), KvError>,
        /// Counted as a store of this many bytes / a delete on success.
        count: Count,
        /// A Store's value buffer, given back with the answer (an in-place value's once
        /// its write returned it).
        buf: Option<IoBuf>,
    },
    Relocation(oneshot::Sender<Result<RelocateOutcome, KvError>>),
}

#[derive(Clone, Copy)]
enum Count {
    Store(u64),
    Delete,
    Nothing,
}

/// A record's effect on the index once its batch is durable.
struct Apply {
    key: Key,
    kind: RecordKind,
    seq: u64,
    len: u32,
    crc: u32,
    value_offset: u32,
}

/// A record as gathered for a user batch: key, kind, value and its crc, and the index
/// of its waiter.
type Gathered = (Key, RecordKind, Option<(IoBuf, u32)>, usize);

/// A large value written from its own buffer at `offset` in the batch.
struct InPlace {
    waiter: usize,
    offset: u32,
    /// The value's length (the buffer is extended with zeros to a whole block).
    len: usize,
    buf: IoBuf,
}

/// Which write of a batch completed.
#[derive(Clone, Copy)]
enum Part {
    /// The batch buffer: header, descriptors and small values.
    Head,
    /// An in-place value, for waiter `waiter`, `len` bytes long.
    Value { waiter: usize, len: usize },
}

/// One device write of a batch.
struct Write {
    offset: u64,
    buf: IoBuf,
    batch_seq: u64,
    part: Part,
}

/// A batch built but not yet placed in the log.
struct Built {
    /// Header, descriptors and small values (the batch's first bytes).
    buf: IoBuf,
    /// Bytes of the whole batch (`buf` plus the in-place values).
    bytes: u64,
    inplace: Vec<InPlace>,
    descs: Vec<Descriptor>,
    applies: Vec<Apply>,
    waiters: Vec<Waiter>,
    /// Overlay states replaced by this batch's records, to roll back if it is refused.
    undo: Vec<(Key, Option<Overlay>)>,
    proj_before: (u64, u64),
    relocation: bool,
    batch_seq_hint: u64,
}

struct Inflight {
    batch_seq: u64,
    segment: u32,
    offset: u32,
    bytes: u32,
    end: LogPosition,
    applies: Vec<Apply>,
    waiters: Vec<Waiter>,
    relocation: bool,
    /// Device writes of the batch not completed yet.
    writes_left: usize,
    /// The first flush started after its writes completed.
    flush: Option<u64>,
    durable: bool,
}

enum Event {
    Written {
        batch_seq: u64,
        part: Part,
        res: Result<IoBuf, BlockError>,
    },
    Flushed {
        id: u64,
        res: Result<(), BlockError>,
    },
}

pub(crate) struct Committer {
    inner: Arc<Inner>,
    rx: mpsc::Receiver<Request>,
    reloc_rx: mpsc::Receiver<RelocateRequest>,
    input_closed: bool,
    reloc_closed: bool,
    /// Where the next batch goes.
    pos: LogPosition,
    queue: VecDeque<Request>,
    pending_reloc: Option<RelocateRequest>,
    overlay: HashMap<Key, Overlay>,
    /// Key count and live bytes once every admitted command is applied.
    proj_keys: u64,
    proj_live: u64,
    inflight: VecDeque<Inflight>,
    next_flush_id: u64,
    flushes_running: usize,
    pool: Vec<IoBuf>,
    stalled: Option<Box<Built>>,
    failed: Option<String>,
    /// The open segment was entered by a relocation while the reserve was low.
    in_reserve: bool,
}

impl Committer {
    pub fn new(
        inner: Arc<Inner>,
        rx: mpsc::Receiver<Request>,
        reloc_rx: mpsc::Receiver<RelocateRequest>,
        pos: LogPosition,
    ) -> Committer {
        let (proj_keys, proj_live) = {
            let st = inner.read();
            (st.index.len() as u64, st.live_bytes)
        };
        Committer {
            inner,
            rx,
            reloc_rx,
            input_closed: false,
            reloc_closed: false,
            pos,
            queue: VecDeque::new(),
            pending_reloc: None,
            overlay: HashMap::new(),
            proj_keys,
            proj_live,
            inflight: VecDeque::new(),
            next_flush_id: 0,
            flushes_running: 0,
            pool: Vec::new(),
            stalled: None,
            failed: None,
            in_reserve: false,
        }
    }

    pub async fn run(mut self) {
        let dev = Arc::clone(&self.inner.dev);
        let dev: &dyn BlockDevice = dev.as_ref();
        let volatile = dev.info().volatile_write_cache;
        let max_inflight = self.inner.opts.max_inflight_batches.max(1);
        let max_flushes = self.inner.opts.max_inflight_flushes.max(1);
        let queue_cap = self.inner.opts.queue_capacity.max(1);
        let mut io: FuturesUnordered<BoxFuture<'_, Event>> = FuturesUnordered::new();
        loop {
            if self.apply_durable() {
                // Let the commands just answered send their next ones, so they join the
                // next batch and flush instead of waiting for the one after.
                tokio::task::yield_now().await;
                self.drain_input(queue_cap);
            }
            while self.writes_in_flight() < max_inflight {
                let Some(writes) = self.next_write() else {
                    break;
                };
                for w in writes {
                    io.push(Box::pin(async move {
                        let res = dev.write(w.offset, w.buf, WriteFlags::default()).await;
                        Event::Written {
                            batch_seq: w.batch_seq,
                            part: w.part,
                            res,
                        }
                    }));
                }
            }
            if volatile && let Some(id) = self.start_flush(max_flushes) {
                io.push(Box::pin(async move {
                    Event::Flushed {
                        id,
                        res: dev.flush().await,
                    }
                }));
            }
            if self.input_closed
                && self.queue.is_empty()
                && self.inflight.is_empty()
                && self.stalled.is_none()
                && self.pending_reloc.is_none()
            {
                break;
            }
            let want_user = !self.input_closed && self.queue.len() < queue_cap;
            let want_reloc = !self.reloc_closed && self.pending_reloc.is_none();
            tokio::select! {
                biased;
                Some(ev) = io.next(), if !io.is_empty() => self.on_event(ev, volatile),
                r = self.reloc_rx.recv(), if want_reloc => match r {
                    Some(r) => self.pending_reloc = Some(r),
                    None => self.reloc_closed = true,
                },
                r = self.rx.recv(), if want_user => match r {
                    Some(r) => {
                        self.queue.push_back(r);
                        self.drain_input(queue_cap);
                    }
                    None => self.input_closed = true,
                },
                _ = self.inner.space_wake.notified(), if self.stalled.is_some() => {}
                else => break,
            }
        }
        // Input closed with nothing in flight: answer a relocation that came too late.
        if let Some(r) = self.pending_reloc.take() {
            let _ = r.reply.send(Err(KvError::Closed));
        }
    }

    /// Moves whatever commands are waiting into the queue (up to its capacity).
    fn drain_input(&mut self, queue_cap: usize) {
        while !self.input_closed && self.queue.len() < queue_cap {
            match self.rx.try_recv() {
                Ok(r) => self.queue.push_back(r),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => self.input_closed = true,
            }
        }
    }

    fn writes_in_flight(&self) -> usize {
        self.inflight.iter().filter(|b| b.writes_left > 0).count()
    }

    /// The next batch to write: a stalled one, then relocations, then user commands.
    fn next_write(&mut self) -> Option<Vec<Write>> {
        if let Some(reason) = self.failed.clone() {
            self.reject_all(&reason);
            return None;
        }
        if let Some(b) = self.stalled.take() {
            match self.issue(*b) {
                Ok(w) => {
                    self.inner.write().stalled = false;
                    return Some(w);
                }
                Err(b) => {
                    let give_up = self.inner.read().no_progress;
                    if give_up {
                        self.refuse(b);
                    } else {
                        // Compaction freed something but not enough: ask again.
                        self.stalled = Some(b);
                        self.inner.write().stalled = true;
                        self.inner.maint_wake.notify_one();
                    }
                }
            }
        }
        if let Some(r) = self.pending_reloc.take() {
            let built = self.build_relocation(r);
            match self.issue(built) {
                Ok(w) => return Some(w),
                Err(b) => self.refuse(b),
            }
        }
        if self.stalled.is_some() {
            return None;
        }
        let built = self.build_user()?;
        match self.issue(built) {
            Ok(w) => Some(w),
            Err(b) => {
                self.stalled = Some(b);
                {
                    let mut st = self.inner.write();
                    st.stalled = true;
                    st.no_progress = false;
                }
                add(&self.inner.counters.space_stalls, 1);
                self.inner.maint_wake.notify_one();
                None
            }
        }
    }

    /// The current state of `key` as later commands must see it.
    fn current(&self, st: &State, key: &Key) -> (bool, u64) {
        match self.overlay.get(key) {
            Some(o) => (o.exists, o.footprint),
            None => match st.index.get(key) {
                Some(e) => (true, self.inner.layout.footprint(e.len)),
                None => (false, 0),
            },
        }
    }

    fn build_user(&mut self) -> Option<Built> {
        let inner = Arc::clone(&self.inner);
        let layout = &inner.layout;
        let st = inner.read();
        let limit = inner.batch_max_bytes;
        let mut est = meta_bytes(0) as u64;
        let mut records: Vec<Gathered> = Vec::new();
        let mut waiters = Vec::new();
        let mut undo = Vec::new();
        let proj_before = (self.proj_keys, self.proj_live);
        let batch_seq_hint = self.pos.next_batch_seq;
        while let Some(front) = self.queue.front() {
            let size = match front {
                Request::Put { value, .. } => (DESCRIPTOR_BYTES + value.len()) as u64,
                Request::Delete { .. } => DESCRIPTOR_BYTES as u64,
                Request::Barrier { .. } => 0,
            };
            if !records.is_empty() && (est + size > limit || records.len() >= MAX_RECORDS_PER_BATCH)
            {
                break;
            }
            let Some(req) = self.queue.pop_front() else {
                break;
            };
            match req {
                Request::Put {
                    key,
                    value,
                    crc,
                    mode,
                    reply,
                } => {
                    let (exists, old_fp) = self.current(&st, &key);
                    let new_fp = layout.footprint(value.len() as u32);
                    let keys_after = self.proj_keys + u64::from(!exists);
                    let live_after = self.proj_live - old_fp + new_fp;
                    let refused = match mode {
                        StoreMode::OnlyIfExists if !exists => Some(KvError::KeyNotFound),
                        StoreMode::OnlyIfAbsent if exists => Some(KvError::KeyExists),
                        _ if keys_after > layout.max_keys => Some(KvError::CapacityExceeded(
                            format!("the store holds its maximum of {} keys", layout.max_keys),
                        )),
                        _ if new_fp > old_fp && live_after > inner.capacity_bytes => {
                            Some(KvError::CapacityExceeded(format!(
                                "{} bytes would exceed the capacity of {} bytes ({} in use)",
                                value.len(),
                                inner.capacity_bytes,
                                self.proj_live
                            )))
                        }
                        _ => None,
                    };
                    if let Some(err) = refused {
                        add(&inner.counters.rejected, 1);
                        waiters.push(Waiter::User {
                            reply,
                            result: Err(err),
                            count: Count::Nothing,
                            buf: Some(value),
                        });
                        continue;
                    }
                    self.proj_keys = keys_after;
                    self.proj_live = live_after;
                    let prev = self.overlay.insert(
                        key,
                        Overlay {
                            exists: true,
                            footprint: new_fp,
                            batch_seq: batch_seq_hint,
                        },
                    );
                    undo.push((key, prev));
                    est += size;
                    waiters.push(Waiter::User {
                        reply,
                        result: Ok(()),
                        count: Count::Store(value.len() as u64),
                        buf: None,
                    });
                    records.push((key, RecordKind::Put, Some((value, crc)), waiters.len() - 1));
                }
                Request::Delete { key, reply } => {
                    let (exists, old_fp) = self.current(&st, &key);
                    if !exists {
                        add(&inner.counters.rejected, 1);
                        waiters.push(Waiter::User {
                            reply,
                            result: Err(KvError::KeyNotFound),
                            count: Count::Nothing,
                            buf: None,
                        });
                        continue;
                    }
                    self.proj_keys -= 1;
                    self.proj_live -= old_fp;
                    let prev = self.overlay.insert(
                        key,
                        Overlay {
                            exists: false,
                            footprint: 0,
                            batch_seq: batch_seq_hint,
                        },
                    );
                    undo.push((key, prev));
                    est += size;
                    waiters.push(Waiter::User {
                        reply,
                        result: Ok(()),
                        count: Count::Delete,
                        buf: None,
                    });
                    records.push((key, RecordKind::Tombstone, None, waiters.len() - 1));
                }
                Request::Barrier { reply } => waiters.push(Waiter::User {
                    reply,
                    result: Ok(()),
                    count: Count::Nothing,
                    buf: None,
                }),
            }
        }
        drop(st);
        if records.is_empty() {
            self.answer_in_order(waiters);
            return None;
        }
        let block = layout.block();
        let lens: Vec<u32> = records
            .iter()
            .map(|(_, _, v, _)| v.as_ref().map_or(0, |(v, _)| v.len() as u32))
            .collect();
        // Values this large are written from their own buffers (`Options::in_place_min_bytes`).
        let in_place_min = inner.opts.in_place_min_bytes.max(block as usize);
        let (offsets, head, total) = plan_batch_in_place(block, &lens, in_place_min);
        let mut buf = self.buffer(head as usize);
        let mut descs = Vec::with_capacity(records.len());
        let mut applies = Vec::with_capacity(records.len());
        let mut inplace = Vec::new();
        let mut filled = meta_bytes(records.len());
        for ((key, kind, value, waiter), offset) in records.into_iter().zip(offsets) {
            let seq = self.pos.next_record_seq;
            self.pos.next_record_seq += 1;
            let (len, crc) = match value {
                Some((mut v, crc)) => {
                    let len = v.len();
                    if len >= in_place_min {
                        // Written from its own buffer; the rest of its last block is zero
                        // (the buffer's capacity is whole pages, a multiple of any block).
                        let whole = align_up(len as u64, block) as usize;
                        v.set_len(whole);
                        v[len..].fill(0);
                        inplace.push(InPlace {
                            waiter,
                            offset,
                            len,
                            buf: v,
                        });
                    } else {
                        let at = offset as usize;
                        buf[filled..at].fill(0);
                        buf[at..at + len].copy_from_slice(&v);
                        filled = at + len;
                        if let Some(Waiter::User { buf: slot, .. }) = waiters.get_mut(waiter) {
                            *slot = Some(v);
                        }
                    }
                    (len as u32, crc)
                }
                None => (0, 0),
            };
            descs.push(Descriptor {
                key,
                kind,
                value_len: len,
                value_offset: if len == 0 { 0 } else { offset },
                value_crc: crc,
                seq,
            });
            applies.push(Apply {
                key,
                kind,
                seq,
                len,
                crc,
                value_offset: offset,
            });
        }
        buf[filled..].fill(0);
        Some(Built {
            buf,
            bytes: total,
            inplace,
            descs,
            applies,
            waiters,
            undo,
            proj_before,
            relocation: false,
            batch_seq_hint,
        })
    }

    fn build_relocation(&mut self, r: RelocateRequest) -> Built {
        let layout = &self.inner.layout;
        let lens: Vec<u32> = r.records.iter().map(|x| x.value.len() as u32).collect();
        let (offsets, total) = plan_batch(layout.block(), &lens);
        let mut buf = self.buffer(total as usize);
        let mut descs = Vec::with_capacity(r.records.len());
        let mut applies = Vec::with_capacity(r.records.len());
        let mut filled = meta_bytes(r.records.len());
        for (
            Relocation {
                key,
                seq,
                crc,
                value,
            },
            offset,
        ) in r.records.into_iter().zip(offsets)
        {
            let at = offset as usize;
            buf[filled..at].fill(0);
            buf[at..at + value.len()].copy_from_slice(&value);
            filled = at + value.len();
            let len = value.len() as u32;
            descs.push(Descriptor {
                key,
                kind: RecordKind::Relocate,
                value_len: len,
                value_offset: offset,
                value_crc: crc,
                seq,
            });
            applies.push(Apply {
                key,
                kind: RecordKind::Relocate,
                seq,
                len,
                crc,
                value_offset: offset,
            });
        }
        buf[filled..].fill(0);
        Built {
            buf,
            bytes: total,
            inplace: Vec::new(),
            descs,
            applies,
            waiters: vec![Waiter::Relocation(r.reply)],
            undo: Vec::new(),
            proj_before: (self.proj_keys, self.proj_live),
            relocation: true,
            batch_seq_hint: self.pos.next_batch_seq,
        }
    }

    fn buffer(&mut self, len: usize) -> IoBuf {
        let mut buf = match self.pool.iter().position(|b| b.capacity() >= len) {
            Some(i) => self.pool.swap_remove(i),
            None => IoBuf::new_zeroed(len),
        };
        buf.set_len(len);
        buf
    }

    /// Takes a free segment as the log's successor (any batch may: the reserve is kept
    /// by refusing user batches the switch into it, see [`Committer::place`]).
    fn take_successor(&mut self) {
        let mut st = self.inner.write();
        let Some(first) = st.free_segments().next() else {
            return;
        };
        st.segments[first as usize].state = SegState::Reserved;
        self.pos.successor = first;
        drop(st);
        self.inner.maint_wake.notify_one();
    }

    /// Where a batch of `bytes` goes: the open segment if it fits, else the successor.
    /// A user batch may move the log to the successor only while at least
    /// `reserve_segments` other segments are free, so compaction always has the
    /// successor plus the reserve to relocate into.
    fn place(&mut self, bytes: u64, relocation: bool) -> Option<(u32, u32)> {
        if self.pos.successor == NO_SEGMENT {
            self.take_successor();
        }
        let reserve_low =
            || self.inner.read().free_segments().count() < self.inner.reserve_segments as usize;
        // A segment that compaction opened from the reserve is for relocations only
        // until the reserve is back.
        if !relocation && self.in_reserve && reserve_low() {
            return None;
        }
        if u64::from(self.pos.offset) + bytes <= self.inner.layout.segment() {
            return Some((self.pos.segment, self.pos.offset));
        }
        if self.pos.successor == NO_SEGMENT {
            return None;
        }
        let low = reserve_low();
        if !relocation && low {
            return None;
        }
        self.in_reserve = relocation && low;
        self.pos.segment = self.pos.successor;
        self.pos.offset = 0;
        self.pos.successor = NO_SEGMENT;
        self.take_successor();
        Some((self.pos.segment, 0))
    }

    /// Places a built batch, encodes its header and queues it as in flight.
    fn issue(&mut self, b: Built) -> Result<Vec<Write>, Box<Built>> {
        let mut b = b;
        let bytes = b.bytes;
        let Some((segment, offset)) = self.place(bytes, b.relocation) else {
            return Err(Box::new(b));
        };
        let layout = &self.inner.layout;
        let batch_seq = self.pos.next_batch_seq;
        let header = BatchHeader {
            uuid: layout.uuid,
            record_count: b.descs.len() as u32,
            batch_seq,
            prev_crc: self.pos.prev_crc,
            batch_bytes: bytes as u32,
            segment,
            offset,
            next_segment: self.pos.successor,
            flags: if b.relocation {
                BATCH_FLAG_RELOCATION
            } else {
                0
            },
        };
        let crc = encode_batch_meta(&mut b.buf, &header, &b.descs);
        self.pos.prev_crc = crc;
        self.pos.next_batch_seq += 1;
        self.pos.offset = offset + bytes as u32;
        // Overlay entries name the batch that set them; fix the hint if batches were
        // issued in between (a stalled batch).
        if b.batch_seq_hint != batch_seq {
            for a in &b.applies {
                if let Some(o) = self.overlay.get_mut(&a.key)
                    && o.batch_seq == b.batch_seq_hint
                {
                    o.batch_seq = batch_seq;
                }
            }
        }
        self.inner
            .counters
            .record_batch(b.descs.len() as u64, bytes);
        if b.relocation {
            add(&self.inner.counters.compaction_bytes_moved, bytes);
        }
        let at = layout.device_offset(layout.addr(segment, offset));
        let mut writes = Vec::with_capacity(1 + b.inplace.len());
        writes.push(Write {
            offset: at,
            buf: b.buf,
            batch_seq,
            part: Part::Head,
        });
        for ip in b.inplace {
            writes.push(Write {
                offset: at + u64::from(ip.offset),
                buf: ip.buf,
                batch_seq,
                part: Part::Value {
                    waiter: ip.waiter,
                    len: ip.len,
                },
            });
        }
        self.inflight.push_back(Inflight {
            batch_seq,
            segment,
            offset,
            bytes: bytes as u32,
            end: self.pos,
            applies: b.applies,
            waiters: b.waiters,
            relocation: b.relocation,
            writes_left: writes.len(),
            flush: None,
            durable: false,
        });
        Ok(writes)
    }

    /// Refuses a batch that cannot be placed: its commands fail with capacity exceeded
    /// and their effects on later conditions are rolled back.
    #[allow(clippy::boxed_local)] // the stalled batch is kept boxed
    fn refuse(&mut self, b: Box<Built>) {
        let mut b = *b;
        give_back_in_place(&mut b);
        for (key, prev) in b.undo.into_iter().rev() {
            match prev {
                Some(o) => self.overlay.insert(key, o),
                None => self.overlay.remove(&key),
            };
        }
        (self.proj_keys, self.proj_live) = b.proj_before;
        self.inner.write().stalled = false;
        let reason = "no free log segment and compaction cannot reclaim space".to_string();
        for w in b.waiters {
            match w {
                Waiter::User {
                    reply, result, buf, ..
                } => {
                    let result = match result {
                        Ok(()) => Err(KvError::CapacityExceeded(reason.clone())),
                        Err(e) => Err(e),
                    };
                    let _ = reply.send((result, buf));
                }
                Waiter::Relocation(reply) => {
                    let _ = reply.send(Err(KvError::CapacityExceeded(reason.clone())));
                }
            }
        }
        if self.pool.len() < POOL_BUFFERS {
            self.pool.push(b.buf);
        }
    }

    /// Sends answers that must not overtake batches in flight: after the newest one, or
    /// now if none is in flight.
    fn answer_in_order(&mut self, waiters: Vec<Waiter>) {
        if waiters.is_empty() {
            return;
        }
        match self.inflight.back_mut() {
            Some(last) => last.waiters.extend(waiters),
            None => {
                for w in waiters {
                    self.send(w, RelocateOutcome::default());
                }
            }
        }
    }

    fn send(&self, w: Waiter, outcome: RelocateOutcome) {
        let c = &self.inner.counters;
        match w {
            Waiter::User {
                reply,
                result,
                count,
                buf,
            } => {
                if result.is_ok() {
                    match count {
                        Count::Store(bytes) => {
                            add(&c.stores, 1);
                            add(&c.store_bytes, bytes);
                        }
                        Count::Delete => add(&c.deletes, 1),
                        Count::Nothing => {}
                    }
                }
                let _ = reply.send((result, buf));
            }
            Waiter::Relocation(reply) => {
                let _ = reply.send(Ok(outcome));
            }
        }
    }

    /// Starts a flush for every batch written and not covered by a flush yet, unless
    /// `max` flushes run already.
    fn start_flush(&mut self, max: usize) -> Option<u64> {
        if self.flushes_running >= max || self.failed.is_some() {
            return None;
        }
        let id = self.next_flush_id;
        let mut any = false;
        for b in self.inflight.iter_mut() {
            if b.writes_left == 0 && b.flush.is_none() {
                b.flush = Some(id);
                any = true;
            }
        }
        if !any {
            return None;
        }
        self.next_flush_id += 1;
        self.flushes_running += 1;
        add(&self.inner.counters.flushes, 1);
        Some(id)
    }

    fn on_event(&mut self, ev: Event, volatile: bool) {
        match ev {
            Event::Written {
                batch_seq,
                part,
                res,
            } => {
                let Some(b) = self.inflight.iter_mut().find(|b| b.batch_seq == batch_seq) else {
                    return;
                };
                match res {
                    Ok(mut buf) => {
                        b.writes_left = b.writes_left.saturating_sub(1);
                        if b.writes_left == 0 {
                            b.durable = !volatile;
                        }
                        match part {
                            Part::Head => {
                                if self.pool.len() < POOL_BUFFERS {
                                    self.pool.push(buf);
                                }
                            }
                            Part::Value { waiter, len } => {
                                buf.set_len(len);
                                if let Some(Waiter::User { buf: slot, .. }) =
                                    b.waiters.get_mut(waiter)
                                {
                                    *slot = Some(buf);
                                }
                            }
                        }
                    }
                    Err(e) => self.fail(format!("log write failed: {e}")),
                }
            }
            Event::Flushed { id, res } => {
                self.flushes_running = self.flushes_running.saturating_sub(1);
                match res {
                    Ok(()) => {
                        // A flush makes every write durable that completed before it
                        // started, so also those covered by earlier flushes still running.
                        for b in self.inflight.iter_mut() {
                            if b.flush.is_some_and(|f| f <= id) {
                                b.durable = true;
                            }
                        }
                    }
                    Err(e) => self.fail(format!("log flush failed: {e}")),
                }
            }
        }
    }

    /// Applies the durable batches at the front of the log to the index and answers them
    /// (true if there were any).
    fn apply_durable(&mut self) -> bool {
        let n = self.inflight.iter().take_while(|b| b.durable).count();
        if n == 0 {
            return false;
        }
        let inner = Arc::clone(&self.inner);
        let layout = &inner.layout;
        let done: Vec<Inflight> = self.inflight.drain(..n).collect();
        let mut outcomes = Vec::with_capacity(n);
        let wake_maint = {
            let mut st = inner.write();
            let mut sealed = false;
            for b in &done {
                let mut outcome = RelocateOutcome {
                    batch_bytes: u64::from(b.bytes),
                    ..RelocateOutcome::default()
                };
                let base = layout.addr(b.segment, b.offset);
                for a in &b.applies {
                    let entry = Entry {
                        addr: base + u64::from(a.value_offset),
                        seq: a.seq,
                        len: a.len,
                        crc: a.crc,
                    };
                    match a.kind {
                        RecordKind::Put => st.put(layout, a.key, entry),
                        RecordKind::Tombstone => st.remove(layout, &a.key),
                        RecordKind::Relocate => match st.relocate(layout, a.key, entry) {
                            Relocated::Moved => outcome.moved += 1,
                            Relocated::Stale => outcome.stale += 1,
                        },
                    }
                }
                sealed |= b.segment != st.applied.segment;
                st.advance(b.segment, b.offset, b.bytes, b.end);
                outcomes.push(outcome);
            }
            let due =
                st.applied_log_bytes - st.checkpoint_log_bytes >= checkpoint_interval(&inner, &st);
            sealed || due
        };
        for (b, outcome) in done.into_iter().zip(outcomes) {
            if !b.relocation {
                for a in &b.applies {
                    if let Some(o) = self.overlay.get(&a.key)
                        && o.batch_seq == b.batch_seq
                    {
                        self.overlay.remove(&a.key);
                    }
                }
            }
            for w in b.waiters {
                self.send(w, outcome);
            }
        }
        if wake_maint {
            self.inner.maint_wake.notify_one();
        }
        true
    }

    /// Stops accepting changes after a log write or flush failed.
    fn fail(&mut self, reason: String) {
        if self.failed.is_some() {
            return;
        }
        tracing::error!(device = %self.inner.dev.info().name, %reason, "KV store stops accepting changes");
        self.inner.write().failed = Some(reason.clone());
        self.failed = Some(reason.clone());
        let err = || KvError::Failed(reason.clone());
        // Batches already durable are applied first; the rest fail.
        let _ = self.apply_durable();
        for b in self.inflight.drain(..) {
            for w in b.waiters {
                match w {
                    Waiter::User {
                        reply, result, buf, ..
                    } => {
                        let _ = reply.send((result.and(Err(err())), buf));
                    }
                    Waiter::Relocation(reply) => {
                        let _ = reply.send(Err(err()));
                    }
                }
            }
        }
        if let Some(b) = self.stalled.take() {
            let mut b = *b;
            give_back_in_place(&mut b);
            for w in b.waiters {
                match w {
                    Waiter::User { reply, buf, .. } => {
                        let _ = reply.send((Err(err()), buf));
                    }
                    Waiter::Relocation(reply) => {
                        let _ = reply.send(Err(err()));
                    }
                }
            }
        }
        self.reject_all(&reason);
    }

    fn reject_all(&mut self, reason: &str) {
        for req in self.queue.drain(..) {
            let (reply, buf) = match req {
                Request::Put { reply, value, .. } => (reply, Some(value)),
                Request::Delete { reply, .. } | Request::Barrier { reply } => (reply, None),
            };
            let _ = reply.send((Err(KvError::Failed(reason.to_string())), buf));
        }
        if let Some(r) = self.pending_reloc.take() {
            let _ = r.reply.send(Err(KvError::Failed(reason.to_string())));
        }
    }
}

/// Moves the buffers of a batch's in-place values back to their waiters (the batch is
/// answered without being written).
fn give_back_in_place(b: &mut Built) {
    for mut ip in b.inplace.drain(..) {
        ip.buf.set_len(ip.len);
        if let Some(Waiter::User { buf: slot, .. }) = b.waiters.get_mut(ip.waiter) {
            *slot = Some(ip.buf);
        }
    }
}

/// Log bytes between checkpoints: the configured interval, and at least 16 times the last
/// checkpoint so checkpoints stay a small share of the writes.
pub(crate) fn checkpoint_interval(inner: &Inner, st: &State) -> u64 {
    inner
        .opts
        .checkpoint_interval_bytes
        .max(16 * st.checkpoint_body_bytes)
}
