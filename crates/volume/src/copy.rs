//! Proactive copy (`mdadm --replace`): a spare is filled with a copy of an active slot
//! while that slot stays in service, then takes its place. No degraded window: the
//! volume keeps its full redundancy throughout.
//!
//! 1. `copy_member` records the spare as `Replacing` slot `s` (superblock, generation
//!    bumped) and waits for the writes in flight to drain; from then on every write to
//!    slot `s` also goes to the replacement (`Inner::mwrite`).
//! 2. The copy task copies slot `s` row batch by row batch under the rows' stripe locks
//!    (so no host write interleaves), reading the member itself, or, where the member
//!    cannot read (its media errors), reconstructing the rows from the other members.
//!    The frontier is checkpointed in the superblock every `checkpoint_bytes`.
//! 3. At the end the replacement is flushed and takes slot `s` as active (new member UUID
//!    in the table, generation bumped); the old member leaves the volume.
//!
//! Crash safety: the replacement's entry and checkpoint are in every superblock; an
//! assembly resumes the copy at the checkpoint after a clean stop, from 0 otherwise
//! (writes torn by the crash may have reached only one of the two). If slot `s` fails
//! during the copy, the replacement takes it as a rebuilding member from its copied
//! part (`take_spare`); if the replacement fails, the copy is abandoned and the slot is
//! untouched.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use blockdev::{BlockDevice, WriteFlags};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};
use uuid::Uuid;

use crate::chunks::{BufPool, Pacer, chunks, rate_eta};
use crate::engine::{Faults, Inner};
use crate::error::{Result, VolumeError};
use crate::format::{MemberEntry, MemberState};
use crate::status::{CopyProgress, TaskPhase};
use crate::topology::{Dev, Replace, Slot, Spare, Topology};
use crate::volume::Volume;

/// A running copy.
pub(crate) struct CopyTask {
    pub handle: JoinHandle<()>,
    pub progress: watch::Receiver<CopyProgress>,
    pub cancel: Arc<AtomicBool>,
}

impl Volume {
    /// Starts copying slot `member` onto `device` (a new device, at least as large as a
    /// member) while the member stays active; when the copy is complete `device` takes
    /// the slot and the old member leaves. Returns the progress channel. One copy at a
    /// time; the slot must be active.
    pub async fn copy_member(
        &self,
        member: usize,
        device: Arc<dyn BlockDevice>,
    ) -> Result<watch::Receiver<CopyProgress>> {
        self.check_slot(member)?;
        self.check_device(&device)?;
        let own = crate::sbio::read_member(&*device).await?.best;
        {
            let mut sb = self.inner.meta.lock().await;
            let mut topo = (*self.inner.topo()).clone();
            check_copy_source(&topo, member)?;
            let uuid = self
                .admit_new_member(&topo, &device, own.as_ref(), &sb)
                .await?;
            let failure_domain = sb.members[member].failure_domain.clone();
            sb.members.push(MemberEntry {
                failure_domain,
                replaces: Some(member),
                ..MemberEntry::new(uuid, MemberState::Replacing, device.info().size_bytes)
            });
            topo.spares.push(Spare {
                dev: device.clone(),
                uuid,
                replaces: Some(Replace::new(member, 0)),
            });
            self.inner.set_topo(topo);
            self.inner.commit_locked(&mut sb, true).await?;
        }
        // Writes that began before the replacement was in the topology are drained: every
        // write from here on reaches it.
        self.inner.membership_barrier().await?;
        self.inner.note(format!(
            "proactive copy of member {member} onto {} started",
            device.info().name
        ));
        self.inner.spawn_copy()
    }

    /// Starts copying slot `member` onto the volume's first hot spare (what a proactive
    /// replacement policy does): as [`Volume::copy_member`] with a device already in the
    /// volume.
    pub async fn copy_member_onto_spare(
        &self,
        member: usize,
    ) -> Result<watch::Receiver<CopyProgress>> {
        self.check_slot(member)?;
        let name = {
            let mut sb = self.inner.meta.lock().await;
            let mut topo = (*self.inner.topo()).clone();
            check_copy_source(&topo, member)?;
            let Some(j) = topo.free_spare() else {
                return Err(VolumeError::Invalid(
                    "no hot spare to copy onto (add one with add-spare)".into(),
                ));
            };
            let n = self.inner.geo.members();
            let Some(e) = sb.members.get_mut(n + j) else {
                return Err(VolumeError::Invalid(
                    "spare missing from the member table".into(),
                ));
            };
            e.state = MemberState::Replacing;
            e.replaces = Some(member);
            e.rebuild_offset_bytes = 0;
            topo.spares[j].replaces = Some(Replace::new(member, 0));
            let name = topo.spares[j].dev.info().name.clone();
            self.inner.set_topo(topo);
            self.inner.commit_locked(&mut sb, true).await?;
            name
        };
        self.inner.membership_barrier().await?;
        self.inner.note(format!(
            "proactive copy of member {member} onto spare {name} started"
        ));
        self.inner.spawn_copy()
    }

    /// Waits for the running copy (if any) and returns its final progress.
    pub async fn wait_copy(&self) -> Option<CopyProgress> {
        let mut rx = self.inner.tasks().copy.as_ref()?.progress.clone();
        let _ = rx.wait_for(|p| p.phase != TaskPhase::Running).await;
        let p = rx.borrow().clone();
        Some(p)
    }

    /// The copy's progress channel, if one runs or ran.
    pub fn copy_progress(&self) -> Option<watch::Receiver<CopyProgress>> {
        self.inner.tasks().copy.as_ref().map(|c| c.progress.clone())
    }

    /// Abandons a copy: the replacement goes back to being a plain spare (its copy is
    /// lost), the slot is untouched.
    pub async fn cancel_copy(&self) -> Result<()> {
        let task = self.inner.tasks().copy.take();
        if let Some(t) = task {
            t.cancel.store(true, Ordering::Release);
            if !t.handle.is_finished() {
                let _ = t.handle.await;
            }
        }
        self.inner.abandon_copy("cancelled by the operator").await
    }
}

impl Inner {
    /// Starts (or resumes) the copy of the replacement in the topology, if there is one.
    pub(crate) fn spawn_copy(self: &Arc<Self>) -> Result<watch::Receiver<CopyProgress>> {
        let topo = self.topo();
        let Some(spare) = topo.spares.iter().find(|s| s.replaces.is_some()) else {
            return Err(VolumeError::Invalid("no copy to run".into()));
        };
        let mut tasks = self.tasks();
        if let Some(c) = &tasks.copy
            && !c.handle.is_finished()
        {
            return Ok(c.progress.clone());
        }
        let member = spare.replaces.as_ref().map_or(0, |r| r.slot);
        let (tx, rx) = watch::channel(CopyProgress {
            member,
            target: spare.dev.info().name.clone(),
            bytes_done: 0,
            bytes_total: self.geo.member_bytes(),
            rate_bytes_per_sec: 0.0,
            eta_secs: None,
            phase: TaskPhase::Running,
            bytes_reconstructed: 0,
        });
        let cancel = Arc::new(AtomicBool::new(false));
        let inner = self.clone();
        let c = cancel.clone();
        let uuid = spare.uuid;
        let handle = tokio::spawn(async move {
            let phase = match inner.copy_replacement(uuid, &c, &tx).await {
                Ok(true) => TaskPhase::Done,
                Ok(false) => TaskPhase::Stopped,
                Err(e) => {
                    warn!(volume = %inner.name, member, error = %e, "proactive copy failed");
                    if let Err(e2) = inner.abandon_copy(&e.to_string()).await {
                        warn!(volume = %inner.name, error = %e2, "cannot drop the replacement");
                    }
                    TaskPhase::Failed(e.to_string())
                }
            };
            tx.send_modify(|p| p.phase = phase);
        });
        tasks.copy = Some(CopyTask {
            handle,
            progress: rx.clone(),
            cancel,
        });
        Ok(rx)
    }

    /// The replacement `uuid` and its copy, if it is still in the topology.
    fn replacement_of(topo: &Topology, uuid: Uuid) -> Option<(usize, Dev, Replace)> {
        topo.spares.iter().enumerate().find_map(|(j, s)| {
            (s.uuid == uuid)
                .then(|| s.replaces.clone().map(|r| (j, s.dev.clone(), r)))
                .flatten()
        })
    }

    /// Copies the slot onto replacement `uuid` from its frontier; swaps it in at the end.
    /// `Ok(false)` if cancelled or the slot left meanwhile (the replacement then already
    /// took the slot or went back to the spares).
    async fn copy_replacement(
        &self,
        uuid: Uuid,
        cancel: &AtomicBool,
        tx: &watch::Sender<CopyProgress>,
    ) -> Result<bool> {
        let topo = self.topo();
        let Some((_, dev, rep)) = Self::replacement_of(&topo, uuid) else {
            return Ok(false);
        };
        let s = rep.slot;
        let su = self.su();
        let rows = self.geo.rows();
        let start_row = rep.frontier.load(Ordering::Acquire) / su;
        info!(volume = %self.name, member = s, target = %dev.info().name, from = start_row * su, "proactive copy starting");
        let clock = self.opts.clock.clone();
        let started = clock.now();
        let mut pacer = Pacer::new(self.opts.throttle, clock.clone());
        let pool = BufPool::new(self.geo.members() + 2);
        let total = (rows - start_row) * su;
        let mut done = 0u64;
        let mut reconstructed = 0u64;
        let mut last_checkpoint = start_row * su;
        for c in chunks(vec![(start_row, rows)], self.batch_rows(), rows) {
            if cancel.load(Ordering::Acquire) || self.stopped.load(Ordering::Acquire) {
                let at = rep.frontier.load(Ordering::Acquire);
                self.copy_checkpoint(uuid, &dev, at).await?;
                return Ok(false);
            }
            while !pacer.may_issue() {
                pacer.rest().await;
            }
            pacer.issue(c.rows() * su);
            let _locks = self.lock_rows(c.r0, c.r1).await;
            let now = self.topo();
            if now
                .slots
                .get(s)
                .is_none_or(|x| x.state != MemberState::Active)
                || Self::replacement_of(&now, uuid).is_none()
            {
                return Ok(false);
            }
            if rep.broken.load(Ordering::Acquire) {
                return Err(VolumeError::Invalid(format!(
                    "the replacement {} failed a mirrored write",
                    dev.info().name
                )));
            }
            let (buf, rebuilt) = self
                .with_retry(|topo| {
                    let pool = &pool;
                    async move { self.copy_rows(&topo, s, c.r0, c.r1, pool).await }
                })
                .await?;
            if rebuilt {
                reconstructed += c.rows() * su;
            }
            let at = self.data_offset_bytes + c.r0 * su;
            match self.timed(dev.write(at, buf, WriteFlags::default())).await {
                Ok(b) => pool.put(b),
                Err(e) => {
                    rep.broken.store(true, Ordering::Release);
                    return Err(VolumeError::Member {
                        member: s,
                        name: dev.info().name.clone(),
                        cause: e,
                    });
                }
            }
            drop(_locks);
            rep.frontier.store(c.next * su, Ordering::Release);
            done += c.rows() * su;
            pacer.record();
            let elapsed = clock.now().saturating_sub(started).as_secs_f64();
            let (rate, eta) = rate_eta(done, total, elapsed);
            tx.send_modify(|p| {
                p.bytes_done = start_row * su + done;
                p.rate_bytes_per_sec = rate;
                p.eta_secs = eta;
                p.bytes_reconstructed = reconstructed;
            });
            if c.next * su - last_checkpoint >= self.opts.checkpoint_bytes && c.next < rows {
                self.copy_checkpoint(uuid, &dev, c.next * su).await?;
                last_checkpoint = c.next * su;
            }
        }
        pacer.rest().await;
        self.finish_copy(uuid, &dev).await?;
        Ok(true)
    }

    /// Slot `s`'s rows `[r0, r1)`: read from the member, or (where it cannot read them)
    /// reconstructed from the others. The bool says whether they were reconstructed.
    async fn copy_rows(
        &self,
        topo: &Topology,
        s: usize,
        r0: u64,
        r1: u64,
        pool: &BufPool,
    ) -> std::result::Result<(blockdev::IoBuf, bool), Faults> {
        let len = ((r1 - r0) * self.su()) as usize;
        match self.mread(topo, s, r0 * self.su(), pool.get(len)).await {
            Ok(b) => Ok((b, false)),
            Err(f) => {
                warn!(volume = %self.name, member = s, error = %f.err,
                    "the member being copied cannot read these rows: rebuilt from the others");
                self.reconstruct_rows(topo, s, r0, r1, pool)
                    .await
                    .map(|b| (b, true))
            }
        }
    }

    async fn copy_checkpoint(&self, uuid: Uuid, dev: &Dev, offset: u64) -> Result<()> {
        if self.timed(dev.flush()).await.is_err() {
            return Ok(()); // The next mirrored write or batch finds it broken.
        }
        let mut sb = self.meta.lock().await;
        let topo = self.topo();
        let Some((j, _, rep)) = Self::replacement_of(&topo, uuid) else {
            return Ok(());
        };
        let n = self.geo.members();
        if let Some(e) = sb.members.get_mut(n + j) {
            e.rebuild_offset_bytes = offset;
        }
        self.commit_locked(&mut sb, false).await?;
        rep.checkpoint.store(offset, Ordering::Release);
        Ok(())
    }

    /// The replacement takes its slot; the old member leaves.
    async fn finish_copy(&self, uuid: Uuid, dev: &Dev) -> Result<()> {
        if let Err(e) = self.timed(dev.flush()).await {
            return Err(VolumeError::Member {
                member: self.geo.members(),
                name: dev.info().name.clone(),
                cause: e,
            });
        }
        let mut sb = self.meta.lock().await;
        let mut topo = (*self.topo()).clone();
        let Some((j, _, rep)) = Self::replacement_of(&topo, uuid) else {
            return Err(VolumeError::Invalid(
                "the replacement left during the copy".into(),
            ));
        };
        let s = rep.slot;
        if topo.slots[s].state != MemberState::Active || rep.broken.load(Ordering::Acquire) {
            return Err(VolumeError::Invalid(format!(
                "member {s} or its replacement failed during the copy"
            )));
        }
        let n = self.geo.members();
        let old = topo.slots[s].dev.as_ref().map(|d| d.info().name.clone());
        let generation = sb.generation + 1;
        let spare = topo.spares.remove(j);
        let entry = sb.members.remove(n + j);
        topo.slots[s] = Slot::new(
            Some(spare.dev.clone()),
            uuid,
            MemberState::Active,
            0,
            generation,
        );
        sb.members[s] = MemberEntry {
            state: MemberState::Active,
            state_generation: generation,
            rebuild_offset_bytes: 0,
            valid_bytes: 0,
            failed_by_operator: false,
            replaces: None,
            ..entry
        };
        self.set_topo(topo);
        self.commit_locked(&mut sb, true).await?;
        drop(sb);
        self.membership_barrier().await?;
        let msg = format!(
            "proactive copy done: {} took member {s}'s place; {} left the volume",
            dev.info().name,
            old.unwrap_or_else(|| "the old device".into())
        );
        info!(volume = %self.name, "{msg}");
        self.note(msg);
        Ok(())
    }

    /// Drops a replacement that cannot go on: it becomes a plain spare again (its copy is
    /// worthless) unless it failed, then it leaves the volume.
    pub(crate) async fn abandon_copy(&self, reason: &str) -> Result<()> {
        let mut sb = self.meta.lock().await;
        let mut topo = (*self.topo()).clone();
        let Some(j) = topo.spares.iter().position(|s| s.replaces.is_some()) else {
            return Ok(());
        };
        let n = self.geo.members();
        let broken = topo.spares[j]
            .replaces
            .as_ref()
            .is_some_and(|r| r.broken.load(Ordering::Acquire));
        let name = topo.spares[j].dev.info().name.clone();
        if broken {
            topo.spares.remove(j);
            if sb.members.len() > n + j {
                sb.members.remove(n + j);
            }
        } else {
            topo.spares[j].replaces = None;
            if let Some(e) = sb.members.get_mut(n + j) {
                e.state = MemberState::Spare;
                e.replaces = None;
                e.rebuild_offset_bytes = 0;
            }
            // A failed slot may be waiting for a spare.
            self.take_spare(&mut sb, &mut topo).await;
        }
        self.set_topo(topo);
        self.commit_locked(&mut sb, true).await?;
        drop(sb);
        self.note(format!("proactive copy onto {name} abandoned: {reason}"));
        self.kick_rebuild();
        Ok(())
    }
}

/// A replacement whose slot failed during the copy takes the slot as a rebuilding member
/// from its copied part (call with `meta` held, as `take_spare` does). True if one did.
pub(crate) fn promote_replacement(
    sb: &mut crate::format::Superblock,
    t: &mut Topology,
    slot: usize,
) -> bool {
    let n = t.slots.len();
    let Some(j) = t.spares.iter().position(|s| {
        s.replaces
            .as_ref()
            .is_some_and(|r| r.slot == slot && !r.broken.load(Ordering::Acquire))
    }) else {
        return false;
    };
    let spare = t.spares.remove(j);
    let Some(rep) = spare.replaces else {
        return false;
    };
    let entry = if sb.members.len() > n + j {
        sb.members.remove(n + j)
    } else {
        MemberEntry::new(spare.uuid, MemberState::Spare, spare.dev.info().size_bytes)
    };
    let generation = sb.generation + 1;
    let durable = rep.checkpoint.load(Ordering::Acquire);
    let mut s = Slot::new(
        Some(spare.dev),
        spare.uuid,
        MemberState::Rebuilding,
        0,
        generation,
    );
    s.frontier = Arc::new(AtomicU64::new(rep.frontier.load(Ordering::Acquire)));
    s.checkpoint = Arc::new(AtomicU64::new(durable));
    t.slots[slot] = s;
    sb.members[slot] = MemberEntry {
        state: MemberState::Rebuilding,
        rebuild_offset_bytes: durable,
        valid_bytes: 0,
        failed_by_operator: false,
        state_generation: generation,
        replaces: None,
        ..entry
    };
    true
}

/// Slot `member` can be copied: it is active and no other copy runs.
fn check_copy_source(topo: &Topology, member: usize) -> Result<()> {
    if topo.slots[member].state != MemberState::Active {
        return Err(VolumeError::Invalid(format!(
            "member {member} is {}: only an active member is copied (a failed one is replaced)",
            crate::assemble::state_name(topo.slots[member].state)
        )));
    }
    if topo.spares.iter().any(|s| s.replaces.is_some()) {
        return Err(VolumeError::Invalid(
            "a copy is already running (one at a time)".into(),
        ));
    }
    Ok(())
}
