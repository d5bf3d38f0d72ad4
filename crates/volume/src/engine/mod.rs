//! The I/O engine: shared state of an assembled volume and member I/O helpers.
//!
//! Submodules: `read` and `write` (the data paths), `meta` (superblock commits and member
//! failure handling), `bitmap_io` (write-intent bitmap persistence), `rows` (row-batch
//! work shared by resync, rebuild and scrub).

mod bitmap_io;
mod fence;
mod journal_io;
mod meta;
pub(crate) use meta::{FailedBy, valid_when_leaving};
mod read;
mod rows;
mod write;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use blockdev::{BlockError, DeviceInfo, IoBuf, StatsCounters, WriteFlags};
use uuid::Uuid;

use crate::config::EngineOptions;
use crate::error::{Result, VolumeError};
use crate::format::Superblock;
use crate::intent::WriteIntent;
use crate::layout::{Family, Geometry};
use crate::locks::StripeLocks;
use crate::topology::{Dev, Topology};

/// A failed member I/O, with the device it was issued to (a slot may have been given a
/// new device since; faults of the old one must not fail the new one).
pub(crate) struct MemberFault {
    pub member: usize,
    pub dev: Option<Dev>,
    pub err: BlockError,
}

pub(crate) type Faults = Vec<MemberFault>;

/// Everything an assembled volume shares between its handle, its I/O and its tasks.
pub(crate) struct Inner {
    pub name: String,
    pub uuid: Uuid,
    pub info: DeviceInfo,
    pub geo: Geometry,
    pub rs: Option<erasure::ReedSolomon>,
    pub data_offset_bytes: u64,
    topo: RwLock<Arc<Topology>>,
    /// Authoritative superblock; its lock serialises membership changes.
    pub meta: tokio::sync::Mutex<Superblock>,
    pub intent: WriteIntent,
    pub locks: StripeLocks,
    pub opts: EngineOptions,
    pub stats: StatsCounters,
    pub stopped: AtomicBool,
    pub failed: AtomicBool,
    /// Background-task state (rebuild handle, last scrub report, notes).
    pub tasks: Mutex<crate::volume::TaskState>,
    /// Itself, for spawning background work from failure handling.
    pub me: std::sync::OnceLock<std::sync::Weak<Inner>>,
    /// Stripe journal (rotating layouts with a journal area).
    pub journal: Option<crate::journal::Journal>,
    /// Held shared by every row write in flight, exclusively by the barrier that drains
    /// them before a flush (journal wrap, membership change).
    pub inflight: tokio::sync::RwLock<()>,
    /// Set when the volume must stop touching its members (see `fence`).
    pub fence: fence::Fence,
    /// The layout above the array, when it knows which rows hold data (the log
    /// layout): a rebuild reconstructs only those.
    pub rows_in_use: std::sync::OnceLock<std::sync::Weak<dyn crate::rebuild::RowsInUse>>,
}

impl Inner {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        sb: Superblock,
        info: DeviceInfo,
        geo: Geometry,
        topo: Topology,
        opts: EngineOptions,
    ) -> Result<Inner> {
        let rs = match geo.family() {
            Family::Rotating { k, m } => Some(erasure::ReedSolomon::new(k, m)?),
            Family::Near { .. } => None,
        };
        let redundant = geo.params().tolerance() > 0;
        let intent = WriteIntent::new(sb.bitmap, redundant, !topo.all_active());
        let failed = !topo.survives(&geo);
        let journal = (rs.is_some() && sb.journal_bytes > 0)
            .then(|| crate::journal::Journal::new(sb.journal_offset_bytes, sb.journal_bytes, 1));
        Ok(Inner {
            name: sb.name.clone(),
            uuid: sb.volume_uuid,
            info,
            geo,
            rs,
            data_offset_bytes: sb.data_offset_bytes,
            topo: RwLock::new(Arc::new(topo)),
            meta: tokio::sync::Mutex::new(sb),
            intent,
            locks: StripeLocks::new(),
            opts,
            stats: StatsCounters::new(),
            stopped: AtomicBool::new(false),
            failed: AtomicBool::new(failed),
            tasks: Mutex::new(Default::default()),
            me: std::sync::OnceLock::new(),
            journal,
            inflight: tokio::sync::RwLock::new(()),
            fence: fence::Fence::new(),
            rows_in_use: std::sync::OnceLock::new(),
        })
    }

    pub fn topo(&self) -> Arc<Topology> {
        self.topo.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Publishes a new member set (call with `meta` held).
    pub fn set_topo(&self, topo: Topology) {
        self.intent.set_keep(!topo.all_active());
        self.failed
            .store(!topo.survives(&self.geo), Ordering::Release);
        *self.topo.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(topo);
    }

    pub fn su(&self) -> u64 {
        self.geo.stripe_unit_bytes()
    }

    pub fn tasks(&self) -> std::sync::MutexGuard<'_, crate::volume::TaskState> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fails fast when the volume cannot serve I/O.
    pub fn check_usable(&self) -> Result<()> {
        if self.is_halted() {
            return Err(self.fenced_error());
        }
        if self.stopped.load(Ordering::Acquire) {
            return Err(VolumeError::Stopped);
        }
        if self.failed.load(Ordering::Acquire) {
            return Err(self.failed_error(&self.topo()));
        }
        Ok(())
    }

    pub fn failed_error(&self, topo: &Topology) -> VolumeError {
        VolumeError::Failed {
            name: self.name.clone(),
            lost: topo.lost_mask().iter().filter(|&&l| l).count(),
            members: self.geo.members(),
            tolerance: self.geo.params().tolerance(),
        }
    }

    fn fault(member: usize, dev: Option<&Dev>, err: BlockError) -> MemberFault {
        MemberFault {
            member,
            dev: dev.cloned(),
            err,
        }
    }

    /// Runs a member I/O with the member timeout. Nothing is issued once the volume is
    /// fenced; a reservation conflict fences it.
    pub(crate) async fn timed<T>(
        &self,
        fut: impl std::future::Future<Output = std::result::Result<T, BlockError>>,
    ) -> std::result::Result<T, BlockError> {
        self.timed_member(None, "a member", fut).await
    }

    /// `timed` for member `member` (device `name`), named if it fences the volume.
    async fn timed_member<T>(
        &self,
        member: Option<usize>,
        name: &str,
        fut: impl std::future::Future<Output = std::result::Result<T, BlockError>>,
    ) -> std::result::Result<T, BlockError> {
        self.member_io_allowed()?;
        let r = match tokio::time::timeout(self.opts.member_timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(BlockError::Timeout),
        };
        if let Err(e) = &r {
            self.fence_on_conflict(member, name, e);
        }
        r
    }

    /// A member I/O on `dev` of slot `member`: not issued once fenced, timed.
    async fn member_io<'d, T, F>(
        &self,
        member: usize,
        dev: &'d Dev,
        op: impl FnOnce(&'d Dev) -> F,
    ) -> std::result::Result<T, MemberFault>
    where
        F: std::future::Future<Output = std::result::Result<T, BlockError>>,
    {
        if let Err(e) = self.member_io_allowed() {
            return Err(Self::fault(member, Some(dev), e));
        }
        self.timed_member(Some(member), &dev.info().name, op(dev))
            .await
            .map_err(|e| Self::fault(member, Some(dev), e))
    }

    /// Reads `len` member data bytes at `offset` (relative to the data area).
    pub async fn mread(
        &self,
        topo: &Topology,
        member: usize,
        offset_bytes: u64,
        buf: IoBuf,
    ) -> std::result::Result<IoBuf, MemberFault> {
        let dev = topo.dev(member);
        let Some(d) = dev else {
            return Err(Self::fault(member, None, BlockError::Closed));
        };
        let at = self.data_offset_bytes + offset_bytes;
        self.member_io(member, d, |d| d.read(at, buf)).await
    }

    pub async fn mwrite(
        &self,
        topo: &Topology,
        member: usize,
        offset_bytes: u64,
        buf: IoBuf,
        fua: bool,
    ) -> std::result::Result<IoBuf, MemberFault> {
        let dev = topo.dev(member);
        let Some(d) = dev else {
            return Err(Self::fault(member, None, BlockError::Closed));
        };
        let at = self.data_offset_bytes + offset_bytes;
        let buf = self
            .member_io(member, d, |d| d.write(at, buf, WriteFlags { fua }))
            .await?;
        // A proactive copy of this member in progress: the replacement gets every write
        // too (after the member: the member's data stays authoritative). Its failure is
        // not the volume's: the copy is abandoned, the write succeeded.
        match topo.replacement(member) {
            Some((rdev, rep)) if !rep.broken.load(Ordering::Acquire) => {
                let len = buf.len();
                match self.timed(rdev.write(at, buf, WriteFlags { fua })).await {
                    Ok(b) => Ok(b),
                    Err(e) => {
                        rep.broken.store(true, Ordering::Release);
                        tracing::warn!(volume = %self.name, member, replacement = %rdev.info().name,
                            error = %e, "write to the replacement failed: the copy is abandoned");
                        Ok(IoBuf::new_zeroed(len))
                    }
                }
            }
            _ => Ok(buf),
        }
    }

    /// Raw write at an absolute member offset (bitmap blocks).
    pub async fn mwrite_raw(
        &self,
        member: usize,
        dev: &Dev,
        offset_bytes: u64,
        buf: IoBuf,
        fua: bool,
    ) -> std::result::Result<IoBuf, MemberFault> {
        self.member_io(member, dev, |d| {
            d.write(offset_bytes, buf, WriteFlags { fua })
        })
        .await
    }

    /// Flushes every writable member concurrently.
    pub async fn flush_members(&self, topo: &Topology) -> Faults {
        let futs = (0..topo.slots.len())
            .filter(|&i| topo.writable(i))
            .filter_map(|i| topo.dev(i).map(|d| (i, d)))
            .map(|(i, d)| async move { self.member_io(i, d, |d| d.flush()).await });
        // Replacements being copied hold mirrored writes: flushed too; a failure only
        // abandons that copy.
        let replacements = topo.spares.iter().filter_map(|s| {
            let r = s.replaces.as_ref()?;
            Some(async move {
                if self.timed(s.dev.flush()).await.is_err() {
                    r.broken.store(true, Ordering::Release);
                }
            })
        });
        let (slots, _) = futures::future::join(
            futures::future::join_all(futs),
            futures::future::join_all(replacements),
        )
        .await;
        slots.into_iter().filter_map(|r| r.err()).collect()
    }

    /// Runs `op` against fresh topology snapshots until it succeeds, failing the members
    /// it reports (at most once per member: the loop is bounded by the member count).
    pub async fn with_retry<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut(Arc<Topology>) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, Faults>>,
    {
        let mut attempts = 0;
        loop {
            self.check_usable()?;
            let topo = self.topo();
            match op(topo).await {
                Ok(v) => return Ok(v),
                Err(faults) => {
                    self.handle_faults(faults).await?;
                    attempts += 1;
                    if attempts > 2 * self.geo.members() + 2 {
                        return Err(VolumeError::Invalid(
                            "member I/O kept failing without members being failed".into(),
                        ));
                    }
                }
            }
        }
    }
}
