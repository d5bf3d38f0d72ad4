//! Fault injection: a wrapper that makes any device misbehave on command.

use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::{BlockDevice, BlockError, DeviceInfo, DeviceStats, IoBuf, IoFuture, WriteFlags};

/// Which operations a [`FaultRule`] applies to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FaultOps {
    pub read: bool,
    pub write: bool,
    pub flush: bool,
    pub write_zeroes: bool,
    pub discard: bool,
}

impl FaultOps {
    pub const NONE: FaultOps = FaultOps {
        read: false,
        write: false,
        flush: false,
        write_zeroes: false,
        discard: false,
    };
    pub const READ: FaultOps = FaultOps {
        read: true,
        ..FaultOps::NONE
    };
    pub const WRITE: FaultOps = FaultOps {
        write: true,
        ..FaultOps::NONE
    };
    pub const FLUSH: FaultOps = FaultOps {
        flush: true,
        ..FaultOps::NONE
    };
    /// Everything that modifies data: write, write_zeroes, discard.
    pub const MODIFY: FaultOps = FaultOps {
        write: true,
        write_zeroes: true,
        discard: true,
        ..FaultOps::NONE
    };
    pub const ALL: FaultOps = FaultOps {
        read: true,
        write: true,
        flush: true,
        write_zeroes: true,
        discard: true,
    };

    pub fn union(self, other: FaultOps) -> FaultOps {
        FaultOps {
            read: self.read || other.read,
            write: self.write || other.write,
            flush: self.flush || other.flush,
            write_zeroes: self.write_zeroes || other.write_zeroes,
            discard: self.discard || other.discard,
        }
    }

    fn contains(self, op: Op) -> bool {
        match op {
            Op::Read => self.read,
            Op::Write => self.write,
            Op::Flush => self.flush,
            Op::WriteZeroes => self.write_zeroes,
            Op::Discard => self.discard,
        }
    }
}

/// What happens when a rule fires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// Fail with `BlockError::Io` carrying this errno (e.g. `libc::EIO`, `libc::ENOSPC`).
    IoError(i32),
    /// Fail with `BlockError::Media` at the first offset of the rule's range inside the I/O
    /// (counted in the wrapper's `media_errors`).
    Media,
    /// Wait this long, then go on (other rules may still fire).
    Delay(Duration),
    /// Wait this long, then fail with `BlockError::Timeout` without doing the I/O.
    Hang(Duration),
    /// Reads only: after a successful read, XOR with `xor_mask` the first byte of every
    /// logical block whose first byte lies in the rule's range (every block if no range).
    FlipBits { xor_mask: u8 },
    /// Data-modifying ops only: report success without touching the device.
    DropWrite,
    /// Fail with `BlockError::Closed` (a pulled drive).
    Offline,
}

/// A programmable fault. Built with [`FaultRule::new`] and the chained setters.
///
/// A rule *matches* an operation of one of its `ops` that overlaps `range_bytes` (flushes
/// have no range and match whenever `ops.flush` is set). The first `skip_matches` matches
/// pass through untouched ("fail after N ops"); after that the rule fires on each match, at
/// most `max_hits` times if set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultRule {
    pub ops: FaultOps,
    pub range_bytes: Option<Range<u64>>,
    pub skip_matches: u64,
    pub max_hits: Option<u64>,
    pub action: FaultAction,
}

impl FaultRule {
    pub fn new(ops: FaultOps, action: FaultAction) -> FaultRule {
        FaultRule {
            ops,
            range_bytes: None,
            skip_matches: 0,
            max_hits: None,
            action,
        }
    }

    /// Restrict to operations overlapping `[range.start, range.end)` bytes.
    pub fn in_range(mut self, range_bytes: Range<u64>) -> FaultRule {
        self.range_bytes = Some(range_bytes);
        self
    }

    /// Let the first `n` matching operations through.
    pub fn after(mut self, n: u64) -> FaultRule {
        self.skip_matches = n;
        self
    }

    /// Fire at most `n` times.
    pub fn times(mut self, n: u64) -> FaultRule {
        self.max_hits = Some(n);
        self
    }
}

/// Identifies a rule added through a [`FaultHandle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(u64);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Read,
    Write,
    Flush,
    WriteZeroes,
    Discard,
}

struct ActiveRule {
    id: RuleId,
    rule: FaultRule,
    matches: u64,
    hits: u64,
}

#[derive(Default)]
struct FaultState {
    next_id: u64,
    rules: Vec<ActiveRule>,
}

/// Runtime control of a [`FaultyDevice`]; cheap to clone, usable from any thread.
#[derive(Clone, Default)]
pub struct FaultHandle {
    state: Arc<Mutex<FaultState>>,
}

impl FaultHandle {
    pub fn add(&self, rule: FaultRule) -> RuleId {
        let mut st = self.lock();
        let id = RuleId(st.next_id);
        st.next_id += 1;
        st.rules.push(ActiveRule {
            id,
            rule,
            matches: 0,
            hits: 0,
        });
        id
    }

    /// Removes a rule; false if it was not there.
    pub fn remove(&self, id: RuleId) -> bool {
        let mut st = self.lock();
        let before = st.rules.len();
        st.rules.retain(|r| r.id != id);
        st.rules.len() != before
    }

    /// Removes every rule: the device behaves normally again.
    pub fn clear(&self) {
        self.lock().rules.clear();
    }

    /// How many times the rule fired (0 if unknown).
    pub fn hits(&self, id: RuleId) -> u64 {
        self.lock()
            .rules
            .iter()
            .find(|r| r.id == id)
            .map_or(0, |r| r.hits)
    }

    fn lock(&self) -> MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decides, under the lock, what happens to one operation.
    fn plan(&self, op: Op, offset_bytes: u64, len_bytes: u64) -> Plan {
        let mut plan = Plan::default();
        let mut st = self.lock();
        for active in st.rules.iter_mut() {
            let rule = &active.rule;
            if !rule.ops.contains(op) {
                continue;
            }
            let overlap = match (&rule.range_bytes, op) {
                (_, Op::Flush) | (None, _) => Some(offset_bytes..offset_bytes + len_bytes),
                (Some(r), _) => {
                    let start = r.start.max(offset_bytes);
                    let end = r.end.min(offset_bytes.saturating_add(len_bytes));
                    (start < end).then_some(start..end)
                }
            };
            let Some(overlap) = overlap else { continue };
            active.matches += 1;
            if active.matches <= rule.skip_matches
                || rule.max_hits.is_some_and(|max| active.hits >= max)
            {
                continue;
            }
            // Actions that do not apply to this op type do not count as hits.
            let applies = match &rule.action {
                FaultAction::FlipBits { .. } => op == Op::Read,
                FaultAction::DropWrite => matches!(op, Op::Write | Op::WriteZeroes | Op::Discard),
                _ => true,
            };
            if !applies {
                continue;
            }
            active.hits += 1;
            match &rule.action {
                FaultAction::Delay(d) => plan.delay += *d,
                FaultAction::FlipBits { xor_mask } => plan.flips.push((overlap, *xor_mask)),
                action => {
                    if plan.terminal.is_none() {
                        plan.terminal = Some((action.clone(), overlap.start));
                    }
                }
            }
        }
        plan
    }
}

#[derive(Default)]
struct Plan {
    delay: Duration,
    terminal: Option<(FaultAction, u64)>,
    flips: Vec<(Range<u64>, u8)>,
}

enum Outcome {
    Proceed,
    Skip,
}

/// Wraps a device and injects the faults programmed through its [`FaultHandle`].
/// With no rules it is a transparent pass-through. Its `stats()` are the inner device's,
/// plus the media errors it injected.
pub struct FaultyDevice {
    inner: Arc<dyn BlockDevice>,
    handle: FaultHandle,
    injected_media_errors: std::sync::atomic::AtomicU64,
}

impl FaultyDevice {
    pub fn new(inner: Arc<dyn BlockDevice>) -> FaultyDevice {
        FaultyDevice {
            inner,
            handle: FaultHandle::default(),
            injected_media_errors: Default::default(),
        }
    }

    pub fn handle(&self) -> FaultHandle {
        self.handle.clone()
    }

    pub fn inner(&self) -> &Arc<dyn BlockDevice> {
        &self.inner
    }

    /// Applies delay and terminal action; Ok(Skip) means "pretend success".
    async fn before(&self, plan: &Plan) -> Result<Outcome, BlockError> {
        if !plan.delay.is_zero() {
            tokio::time::sleep(plan.delay).await;
        }
        match &plan.terminal {
            None => Ok(Outcome::Proceed),
            Some((action, at)) => match action {
                FaultAction::IoError(errno) => {
                    Err(BlockError::Io(std::io::Error::from_raw_os_error(*errno)))
                }
                FaultAction::Media => {
                    self.injected_media_errors
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    Err(BlockError::Media { offset_bytes: *at })
                }
                FaultAction::Hang(d) => {
                    tokio::time::sleep(*d).await;
                    Err(BlockError::Timeout)
                }
                FaultAction::DropWrite => Ok(Outcome::Skip),
                FaultAction::Offline => Err(BlockError::Closed),
                FaultAction::Delay(_) | FaultAction::FlipBits { .. } => Ok(Outcome::Proceed),
            },
        }
    }

    /// Range checks come first so that faults never hide contract violations.
    fn check(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), BlockError> {
        crate::check_range(self.inner.info(), offset_bytes, len_bytes)
    }

    /// write_zeroes/discard: checks, faults, then (unless dropped) the inner call, which is
    /// only made when it is really going to run.
    async fn modify<'a>(
        &'a self,
        op: Op,
        offset_bytes: u64,
        len_bytes: u64,
        run: impl FnOnce(&'a dyn BlockDevice) -> IoFuture<'a, ()>,
    ) -> Result<(), BlockError> {
        self.check(offset_bytes, len_bytes)?;
        let plan = self.handle.plan(op, offset_bytes, len_bytes);
        match self.before(&plan).await? {
            Outcome::Skip => Ok(()),
            Outcome::Proceed => run(&*self.inner).await,
        }
    }
}

impl BlockDevice for FaultyDevice {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }

    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            self.check(offset_bytes, buf.len() as u64)?;
            let plan = self.handle.plan(Op::Read, offset_bytes, buf.len() as u64);
            self.before(&plan).await?;
            let mut buf = self.inner.read(offset_bytes, buf).await?;
            let block = u64::from(self.inner.info().logical_block_bytes.max(1));
            for (range, mask) in &plan.flips {
                let mut pos = range.start.next_multiple_of(block);
                while pos < range.end {
                    if let Some(b) = buf.get_mut((pos - offset_bytes) as usize) {
                        *b ^= mask;
                    }
                    pos += block;
                }
            }
            Ok(buf)
        })
    }

    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            self.check(offset_bytes, buf.len() as u64)?;
            let plan = self.handle.plan(Op::Write, offset_bytes, buf.len() as u64);
            match self.before(&plan).await? {
                Outcome::Skip => Ok(buf),
                Outcome::Proceed => self.inner.write(offset_bytes, buf, flags).await,
            }
        })
    }

    fn flush(&self) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            let plan = self.handle.plan(Op::Flush, 0, 0);
            self.before(&plan).await?;
            self.inner.flush().await
        })
    }

    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(
            self.modify(Op::WriteZeroes, offset_bytes, len_bytes, move |d| {
                d.write_zeroes(offset_bytes, len_bytes)
            }),
        )
    }

    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(self.modify(Op::Discard, offset_bytes, len_bytes, move |d| {
            d.discard(offset_bytes, len_bytes)
        }))
    }

    fn stats(&self) -> DeviceStats {
        let mut stats = self.inner.stats();
        stats.media_errors += self
            .injected_media_errors
            .load(std::sync::atomic::Ordering::Relaxed);
        stats
    }
}
