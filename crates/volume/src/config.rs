//! Creation parameters (persisted in the superblock) and runtime options (not persisted).

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, TokioClock};
use crate::format::DEFAULT_REGION_BYTES;
use crate::layout::{DEFAULT_STRIPE_UNIT_BYTES, LevelSpec};

/// Default stripe journal per member.
pub const DEFAULT_JOURNAL_BYTES: u64 = 8 << 20;

/// How fast a rebuild or scrub may go.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Throttle {
    /// As fast as the members allow.
    Unlimited,
    /// At most this many member bytes per second.
    BytesPerSec(u64),
    /// Keep the members busy with background work this fraction of the time (0 < f <= 1):
    /// every `t` of work adds `t * (1 - f) / f` to a sleep debt, carried across batches and
    /// paid in rests of at least 100 ms with nothing in flight (and at the end). 0.2 = 20 %
    /// of their bandwidth.
    Fraction(f64),
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::Fraction(0.2)
    }
}

/// Runtime knobs of an assembled volume.
#[derive(Clone)]
pub struct EngineOptions {
    /// A member I/O taking longer fails the member.
    pub member_timeout: Duration,
    /// Rebuild and scrub speed.
    pub throttle: Throttle,
    /// A bitmap region is cleared after being this long without writes (with a flush of
    /// every member first).
    pub bitmap_quiet: Duration,
    /// The rebuild checkpoint is written to the superblocks every this many member bytes.
    pub checkpoint_bytes: u64,
    /// Start a rebuild by itself when a spare takes over a failed slot or a stale member
    /// comes back.
    pub auto_rebuild: bool,
    /// Member bytes per rebuild/scrub/resync batch (rounded to whole rows).
    pub batch_bytes: u64,
    /// Rebuild/scrub/resync batches in flight at once (at least 1).
    pub inflight_batches: usize,
    /// Assembly bumps the generation even when the membership did not change: set by a
    /// new owner taking the volume over, so that every change of owner is a generation
    /// in the superblocks. (It does not stop a stale owner: reservations and leases do.)
    pub bump_generation_on_assemble: bool,
    /// Assembly starts serving I/O before the dirty-region resync and runs the resync in
    /// the background (a node taking a volume over, so hosts wait only for assembly).
    /// Off: the resync finishes before assembly returns (local assembly, like mdadm).
    pub background_resync: bool,
    /// Assembly only, like `mdadm --assemble --force`: when too few current members are
    /// present, count present out-of-date members (failed earlier, by an error or by the
    /// operator, and fully current when they left) as current, as few as needed, the
    /// last to leave first. Regions written since they left may then read stale data.
    pub force_stale: bool,
    pub clock: Arc<dyn Clock>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            member_timeout: Duration::from_secs(30),
            throttle: Throttle::default(),
            bitmap_quiet: Duration::from_secs(5),
            checkpoint_bytes: 256 << 20,
            auto_rebuild: true,
            batch_bytes: 1 << 20,
            inflight_batches: 4,
            bump_generation_on_assemble: false,
            background_resync: false,
            force_stale: false,
            clock: Arc::new(TokioClock::new()),
        }
    }
}

impl std::fmt::Debug for EngineOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineOptions")
            .field("member_timeout", &self.member_timeout)
            .field("throttle", &self.throttle)
            .field("bitmap_quiet", &self.bitmap_quiet)
            .field("checkpoint_bytes", &self.checkpoint_bytes)
            .field("auto_rebuild", &self.auto_rebuild)
            .field("batch_bytes", &self.batch_bytes)
            .field("inflight_batches", &self.inflight_batches)
            .field(
                "bump_generation_on_assemble",
                &self.bump_generation_on_assemble,
            )
            .field("background_resync", &self.background_resync)
            .field("force_stale", &self.force_stale)
            .finish_non_exhaustive()
    }
}

/// What `Volume::create` needs besides the name and the devices.
#[derive(Clone, Debug)]
pub struct VolumeConfig {
    pub level: LevelSpec,
    /// Default 64 KiB; a multiple of 4 KiB.
    pub stripe_unit_bytes: u64,
    /// Write-intent bitmap granularity in member bytes (default 64 MiB).
    pub region_bytes: u64,
    /// Failure-domain hint per member (e.g. the storage node); empty = none. Spares follow
    /// the members in this list.
    pub failure_domains: Vec<String>,
    /// Stripe journal size per member (rotating layouts; at least one stripe unit per
    /// parity member plus 4 KiB). It protects rows written while degraded against a
    /// crash; 0 disables it. Default 8 MiB.
    pub journal_bytes: u64,
    /// Overwrite devices that already carry a volume superblock.
    pub force: bool,
    /// Skip zeroing the members' data areas (only if they are known to be zero, e.g. new
    /// sparse files): parity is then assumed consistent.
    pub assume_clean: bool,
    /// Log-structured layout with inline compression (rotating levels only); `None`:
    /// data in place (the default).
    pub log: Option<crate::log::LogConfig>,
    pub options: EngineOptions,
}

impl VolumeConfig {
    pub fn new(level: LevelSpec) -> VolumeConfig {
        VolumeConfig {
            level,
            stripe_unit_bytes: DEFAULT_STRIPE_UNIT_BYTES,
            region_bytes: DEFAULT_REGION_BYTES,
            failure_domains: Vec::new(),
            journal_bytes: DEFAULT_JOURNAL_BYTES,
            force: false,
            assume_clean: false,
            log: None,
            options: EngineOptions::default(),
        }
    }
}
