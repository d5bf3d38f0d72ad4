//! Superblock commits and membership changes: failing members, spares taking over.

use std::sync::atomic::Ordering;

use tracing::{error, info, warn};

use super::{Faults, Inner};
use crate::error::{Result, VolumeError};
use crate::format::{MemberEntry, MemberState, Superblock};
use crate::sbio;
use crate::topology::{Dev, Slot, Topology, same_dev};

/// Who took a member out: it decides whether the member comes back by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FailedBy {
    /// An I/O error, a timeout, a failed superblock write, or missing at assembly: the
    /// member returns (partial rebuild) when its device is offered again.
    Error,
    /// `Volume::fail_member`: it stays out until it is re-added or replaced.
    Operator,
}

impl Inner {
    /// Marks the members behind `faults` failed (each durably, in every surviving
    /// superblock) before the caller retries or acknowledges anything. Errors if the
    /// volume can no longer serve I/O.
    ///
    /// A reservation conflict fails no member: it fences the whole volume (another host
    /// owns it now), and nothing is written. Any other error, `BlockError::Unavailable`
    /// included (a member not served where this host reaches it), fails the member like
    /// an unreachable one: the volume goes on within its tolerance and the member comes
    /// back through a (partial) rebuild.
    pub async fn handle_faults(&self, faults: Faults) -> Result<()> {
        for f in &faults {
            let name = f
                .dev
                .as_ref()
                .map_or_else(String::new, |d| d.info().name.clone());
            self.fence_on_conflict(Some(f.member), &name, &f.err);
        }
        if self.is_halted() {
            // Errors of I/O not issued because of the fence are no member's fault.
            return Err(self.fenced_error());
        }
        if faults.is_empty() {
            // An operation found too few readable members without a member error.
            return Err(self.failed_error(&self.topo()));
        }
        let mut faults = faults;
        for _ in 0..=self.geo.members() {
            for f in faults {
                warn!(volume = %self.name, member = f.member, error = %f.err, "member I/O failed");
                self.fail_member_dev(
                    f.member,
                    f.dev.as_ref(),
                    &f.err.to_string(),
                    FailedBy::Error,
                )
                .await?;
            }
            // Rows written before the change are made durable before any write relies on
            // the new member set, and the journal starts over (new members hold no chain).
            faults = self.journal_reset().await;
            if faults.is_empty() {
                break;
            }
        }
        self.kick_rebuild();
        self.check_usable()
    }

    /// Fails slot `member` if it still holds `dev` (any device if `None`).
    pub async fn fail_member_dev(
        &self,
        member: usize,
        dev: Option<&Dev>,
        reason: &str,
        by: FailedBy,
    ) -> Result<()> {
        if self.is_halted() {
            return Err(self.fenced_error());
        }
        let mut sb = self.meta.lock().await;
        if self.is_halted() {
            return Err(self.fenced_error());
        }
        let topo = self.topo();
        let Some(slot) = topo.slots.get(member) else {
            return Ok(());
        };
        let current = match (&slot.dev, dev) {
            (Some(cur), Some(d)) => same_dev(cur, d),
            (Some(_), None) => true,
            (None, _) => slot.state != MemberState::Failed,
        };
        if !current || slot.state == MemberState::Failed {
            return Ok(());
        }
        match by {
            FailedBy::Error => error!(volume = %self.name, member, reason, "marking member failed"),
            FailedBy::Operator => {
                info!(volume = %self.name, member, reason, "marking member failed")
            }
        }
        let mut t = (*topo).clone();
        Self::mark_failed(&mut sb, &mut t, member, by);
        self.take_spare(&mut sb, &mut t).await;
        self.set_topo(t);
        let pending = self.intent.pending_count();
        if pending > 0 {
            self.note(format!(
                "member {member} failed while the background resync still had {pending} dirty \
                 regions pending: stripes there torn by the earlier crash cannot be \
                 reconstructed correctly (crash + member loss, a double fault)"
            ));
        }
        self.commit_locked(&mut sb, true).await
    }

    /// Marks an already failed slot as taken out by the operator (it no longer comes
    /// back by itself). `false` if the slot is not failed.
    pub async fn keep_out(&self, member: usize) -> Result<bool> {
        let mut sb = self.meta.lock().await;
        let failed = self
            .topo()
            .slots
            .get(member)
            .is_some_and(|s| s.state == MemberState::Failed);
        let Some(e) = sb.members.get_mut(member).filter(|_| failed) else {
            return Ok(false);
        };
        if !e.failed_by_operator {
            e.failed_by_operator = true;
            self.commit_locked(&mut sb, true).await?;
        }
        Ok(true)
    }

    fn mark_failed(sb: &mut Superblock, t: &mut Topology, member: usize, by: FailedBy) {
        let was = t.slots.get(member).map(|s| s.state);
        let generation = sb.generation + 1;
        if let Some(slot) = t.slots.get_mut(member) {
            slot.state = MemberState::Failed;
            slot.dev = None;
            slot.state_generation = generation;
        }
        let member_bytes = sb.usable_member_bytes;
        if let Some(e) = sb.members.get_mut(member) {
            e.valid_bytes = valid_when_leaving(e, was, member_bytes);
            e.state = MemberState::Failed;
            e.state_generation = generation;
            e.rebuild_offset_bytes = 0;
            e.failed_by_operator = by == FailedBy::Operator;
        }
    }

    /// Puts the first spare into the first failed slot (state rebuilding, from 0).
    pub(crate) async fn take_spare(&self, sb: &mut Superblock, t: &mut Topology) {
        let n = t.slots.len();
        // A slot that failed while being copied: its replacement already holds the copied
        // part and takes the slot from there.
        for i in 0..n {
            if t.slots[i].state == MemberState::Failed && crate::copy::promote_replacement(sb, t, i)
            {
                info!(volume = %self.name, slot = i, "the replacement being copied takes the failed slot");
                self.tasks().rebuild_wanted = true;
            }
        }
        while let Some(j) = t.free_spare() {
            let Some(slot) = (0..n).find(|&i| t.slots[i].state == MemberState::Failed) else {
                return;
            };
            let spare = t.spares.remove(j);
            let entry = if sb.members.len() > n + j {
                sb.members.remove(n + j)
            } else {
                MemberEntry::new(spare.uuid, MemberState::Spare, spare.dev.info().size_bytes)
            };
            // The new member's bitmap must be current before it is trusted.
            if let Err(f) = self.init_member_bitmap(slot, &spare.dev).await {
                warn!(volume = %self.name, error = %f.err, "spare failed while joining; dropped");
                continue;
            }
            info!(volume = %self.name, slot, spare = %spare.uuid, "spare takes over failed slot");
            t.slots[slot] = Slot::new(
                Some(spare.dev),
                spare.uuid,
                MemberState::Rebuilding,
                0,
                sb.generation + 1,
            );
            sb.members[slot] = MemberEntry {
                state: MemberState::Rebuilding,
                rebuild_offset_bytes: 0,
                valid_bytes: 0,
                failed_by_operator: false,
                state_generation: sb.generation + 1,
                ..entry
            };
            self.tasks().rebuild_wanted = true;
            return;
        }
    }

    /// After a membership change made outside `handle_faults`: barrier and new journal
    /// epoch (members failing the flush are failed in turn).
    pub async fn membership_barrier(&self) -> Result<()> {
        let faults = self.journal_reset().await;
        if faults.is_empty() {
            Ok(())
        } else {
            self.handle_faults(faults).await
        }
    }

    /// Starts a rebuild in the background if one is wanted and allowed.
    pub fn kick_rebuild(&self) {
        if self.is_halted() || !self.opts.auto_rebuild {
            return;
        }
        {
            // A background resync first makes the dirty rows consistent (the resync task
            // kicks the rebuild when it ends), as a resync at assembly would.
            let t = self.tasks();
            if !t.rebuild_wanted || t.resync_running {
                return;
            }
        }
        if let Some(me) = self.me.get().and_then(|w| w.upgrade())
            && let Err(e) = me.spawn_rebuild()
        {
            warn!(volume = %self.name, error = %e, "could not start rebuild");
        }
    }

    /// Writes the superblock to every writable slot and every spare (call with `meta`
    /// held). Members failing the write are failed in turn (generation bumped again).
    /// Once the volume is fenced nothing is written; a write answered with a reservation
    /// conflict fences it and fails no member.
    pub async fn commit_locked(&self, sb: &mut Superblock, bump_generation: bool) -> Result<()> {
        let mut bump = bump_generation;
        for _ in 0..=sb.members.len() {
            if self.is_halted() {
                return Err(self.fenced_error());
            }
            if bump {
                sb.generation += 1;
            }
            sb.seq += 1;
            let topo = self.topo();
            let targets = topo.metadata_targets();
            let futs = targets.iter().map(|(idx, dev)| {
                let mut copy = sb.clone();
                copy.member_index = *idx;
                copy.member_uuid = sb.members.get(*idx).map(|e| e.uuid).unwrap_or_default();
                async move {
                    let name = dev.info().name.clone();
                    let r = self
                        .timed_member(Some(*idx), &name, sbio::write_member(&**dev, &copy))
                        .await;
                    (*idx, dev.clone(), r)
                }
            });
            let results = futures::future::join_all(futs).await;
            if self.is_halted() {
                // A member refused the write as fenced (or the owner let go meanwhile):
                // the members that took it stay as they are, nobody is failed.
                return Err(self.fenced_error());
            }
            let written = results.iter().filter(|(_, _, r)| r.is_ok()).count();
            let failures: Vec<(usize, Dev)> = results
                .into_iter()
                .filter(|(_, _, r)| r.is_err())
                .map(|(i, d, _)| (i, d))
                .collect();
            if failures.is_empty() {
                self.tasks().sb = Some(sb.clone());
                return Ok(());
            }
            if written == 0 {
                self.failed.store(true, Ordering::Release);
                return Err(self.failed_error(&topo));
            }
            let n = topo.slots.len();
            let mut t = (*topo).clone();
            // Spares are removed from the table, slots failed; highest index first so
            // spare indices stay valid.
            let mut failures = failures;
            failures.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
            for (idx, dev) in failures {
                warn!(volume = %self.name, member = idx, "superblock write failed");
                if idx >= n {
                    let j = idx - n;
                    if t.spares.get(j).is_some_and(|s| same_dev(&s.dev, &dev)) {
                        t.spares.remove(j);
                        if sb.members.len() > idx {
                            sb.members.remove(idx);
                        }
                    }
                } else {
                    Self::mark_failed(sb, &mut t, idx, FailedBy::Error);
                }
            }
            self.take_spare(sb, &mut t).await;
            self.set_topo(t);
            bump = true;
        }
        Err(VolumeError::Invalid(
            "superblock commit did not converge".into(),
        ))
    }

    /// Writes the superblock (no membership change), e.g. clean flag or checkpoint.
    pub async fn commit(&self, mutate: impl FnOnce(&mut Superblock)) -> Result<()> {
        let mut sb = self.meta.lock().await;
        mutate(&mut sb);
        self.commit_locked(&mut sb, false).await
    }
}

/// How much of a member leaving in state `was` is still current (see
/// `MemberEntry::valid_bytes`): all of an active member; of a rebuilding one, its durable
/// checkpoint or what it held when it left before, whichever is more.
pub(crate) fn valid_when_leaving(
    e: &MemberEntry,
    was: Option<MemberState>,
    member_bytes: u64,
) -> u64 {
    match was {
        Some(MemberState::Active) => member_bytes,
        Some(MemberState::Rebuilding) => {
            e.valid_bytes.max(e.rebuild_offset_bytes).min(member_bytes)
        }
        _ => e.valid_bytes,
    }
}
