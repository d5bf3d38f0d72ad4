//! `Volume::assemble`: find the newest superblock among the devices, fence stale members,
//! resync dirty bitmap regions, start. Reading the devices and matching them to the
//! member table ([`Survey`]) is shared with `Volume::examine`, which reports what it
//! finds without writing anything.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use blockdev::{BlockDevice, IoBuf};
use tracing::warn;

use crate::config::EngineOptions;
use crate::create::volume_info;
use crate::engine::Inner;
use crate::error::{Result, VolumeError};
use crate::format::{MemberState, Superblock};
use crate::intent::decode_bitmap;
use crate::layout::Geometry;
use crate::sbio;
use crate::shortfall::{Shortfall, SlotReport};
use crate::topology::{Dev, Replace, Slot, Spare, Topology};
use crate::volume::Volume;

/// What the devices say about one slot of the authoritative member table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Finding {
    /// Listed active or rebuilding, its device present. `behind`: the generation of its
    /// own superblock when that missed the last superblock write.
    InService { behind: Option<u64> },
    /// Listed active or rebuilding, no usable device: assembly marks it failed.
    Missing,
    /// Failed by an error or a timeout, and its device is back: assembly re-adds it
    /// (rebuild of the regions dirtied since it left).
    Returning { own_generation: u64 },
    /// Failed by the operator, its device present: it stays out.
    KeptOut,
    /// Failed, no device.
    Away,
}

/// The devices read and matched to the authoritative member table; nothing written.
pub(crate) struct Survey {
    /// The newest valid superblock over all devices.
    pub auth: Superblock,
    pub geo: Geometry,
    /// Per table entry (slots, then spares): its device and the device's own superblock.
    pub by_entry: Vec<Option<(Dev, Superblock)>>,
    /// Per slot.
    pub findings: Vec<Finding>,
    /// About single devices: unreadable, ignored, superblock copies to repair.
    pub notes: Vec<String>,
}

impl Survey {
    /// Reads both superblock copies of every device and matches the devices to the
    /// entries of the newest superblock by their own member UUID.
    pub async fn read(devices: Vec<Dev>) -> Result<Survey> {
        let count = devices.len();
        let mut found = Vec::new();
        let mut notes = Vec::new();
        for dev in devices {
            match sbio::read_member(&*dev).await {
                Ok(read) => found.push((dev, read)),
                Err(e) => notes.push(format!("{}: superblock unreadable: {e}", dev.info().name)),
            }
        }
        let auth = found
            .iter()
            .filter_map(|(_, read)| read.best.as_ref())
            .max_by_key(|sb| sb.version_key())
            .cloned()
            .ok_or(VolumeError::NoSuperblock(count))?;
        for (_, read) in &found {
            if let Some(sb) = &read.best
                && sb.volume_uuid != auth.volume_uuid
            {
                return Err(VolumeError::MixedVolumes(auth.volume_uuid, sb.volume_uuid));
            }
        }
        let geo = Geometry::new(auth.layout, auth.usable_member_bytes)?;

        let mut by_entry: Vec<Option<(Dev, Superblock)>> = vec![None; auth.members.len()];
        for (dev, read) in found {
            let name = dev.info().name.clone();
            let Some(own) = read.best.clone() else {
                notes.push(format!("{name}: no valid superblock, ignored"));
                continue;
            };
            let Some(idx) = auth.members.iter().position(|e| e.uuid == own.member_uuid) else {
                notes.push(format!(
                    "{name}: member {} is no longer part of the volume (replaced), ignored",
                    own.member_uuid
                ));
                continue;
            };
            let info = dev.info();
            if info.size_bytes < auth.min_member_bytes()
                || info.logical_block_bytes > auth.logical_block_bytes
            {
                notes.push(format!("{name}: too small or wrong block size, ignored"));
                continue;
            }
            if read.needs_repair() {
                let why: Vec<String> = (0..2)
                    .filter(|&i| !read.copy_current[i])
                    .map(|i| match &read.errors[i] {
                        Some(e) => format!("copy {i}: {e}"),
                        None => format!("copy {i}: older"),
                    })
                    .collect();
                notes.push(format!(
                    "{name}: superblock copy rewritten from the good one ({})",
                    why.join(", ")
                ));
            }
            if by_entry[idx].is_some() {
                notes.push(format!("{name}: duplicate of member {idx}, ignored"));
                continue;
            }
            by_entry[idx] = Some((dev, own));
        }

        let n = auth.layout.members;
        let findings = (0..n)
            .map(|i| {
                let entry = &auth.members[i];
                match (&by_entry[i], entry.state) {
                    (Some((_, own)), MemberState::Active | MemberState::Rebuilding) => {
                        Finding::InService {
                            behind: (own.generation < auth.generation).then_some(own.generation),
                        }
                    }
                    (None, MemberState::Active | MemberState::Rebuilding) => Finding::Missing,
                    (Some(_), _) if entry.failed_by_operator => Finding::KeptOut,
                    (Some((_, own)), _) => Finding::Returning {
                        own_generation: own.generation,
                    },
                    (None, _) => Finding::Away,
                }
            })
            .collect();
        Ok(Survey {
            auth,
            geo,
            by_entry,
            findings,
            notes,
        })
    }

    pub fn device_name(&self, entry: usize) -> Option<String> {
        self.by_entry
            .get(entry)?
            .as_ref()
            .map(|(d, _)| d.info().name.clone())
    }

    /// Present but out of date, and fully current when it left: forcing may count it.
    pub fn forceable(&self, slot: usize) -> bool {
        matches!(
            self.findings[slot],
            Finding::Returning { .. } | Finding::KeptOut
        ) && self.auth.members[slot].valid_bytes >= self.geo.member_bytes()
    }

    /// Per slot: not current after assembly, with the slots in `forced` counted as
    /// current.
    pub fn lost_mask(&self, forced: &[bool]) -> Vec<bool> {
        self.findings
            .iter()
            .enumerate()
            .map(|(i, f)| match f {
                Finding::InService { .. } => self.auth.members[i].state != MemberState::Active,
                Finding::Returning { .. } | Finding::KeptOut => !forced[i],
                Finding::Missing | Finding::Away => true,
            })
            .collect()
    }

    /// The out-of-date members to count as current so that the volume starts (the ones
    /// that left last first), or none if that would not be enough.
    pub fn members_to_force(&self) -> Vec<bool> {
        let n = self.findings.len();
        let mut forced = vec![false; n];
        let mut candidates: Vec<usize> = (0..n).filter(|&i| self.forceable(i)).collect();
        candidates.sort_by_key(|&i| std::cmp::Reverse(self.auth.members[i].state_generation));
        for i in candidates {
            if self.geo.survives(&self.lost_mask(&forced)) {
                break;
            }
            forced[i] = true;
        }
        if self.geo.survives(&self.lost_mask(&forced)) {
            forced
        } else {
            vec![false; n]
        }
    }

    /// Why a slot does not count, for people.
    pub fn problem(&self, slot: usize) -> Option<String> {
        let e = &self.auth.members[slot];
        Some(match self.findings[slot] {
            Finding::InService { .. } if e.state == MemberState::Rebuilding => format!(
                "rebuilding, {:.1}% done",
                e.rebuild_offset_bytes as f64 * 100.0 / self.geo.member_bytes().max(1) as f64
            ),
            Finding::InService { .. } => return None,
            Finding::Missing => "no device holding its superblock".to_string(),
            Finding::Returning { .. } => {
                format!("out of date: failed at generation {}", e.state_generation)
            }
            Finding::KeptOut => "failed by the operator".to_string(),
            Finding::Away => format!("failed at generation {}, no device", e.state_generation),
        })
    }

    /// The report of a volume that cannot start with `lost` slots.
    pub fn shortfall(&self, lost: &[bool]) -> Shortfall {
        let n = self.findings.len();
        let forceable: Vec<bool> = (0..n).map(|i| self.forceable(i)).collect();
        let with_forced: Vec<bool> = (0..n).map(|i| lost[i] && !forceable[i]).collect();
        Shortfall {
            name: self.auth.name.clone(),
            layout: self.auth.layout,
            slots: (0..n)
                .map(|i| SlotReport {
                    index: i,
                    uuid: self.auth.members[i].uuid,
                    device: self.device_name(i),
                    current: !lost[i],
                    problem: if lost[i] { self.problem(i) } else { None },
                    forceable: forceable[i],
                })
                .collect(),
            force_helps: forceable.iter().any(|f| *f) && self.geo.survives(&with_forced),
        }
    }
}

/// The union of the write-intent bitmaps of `devs` (a bit on any of them counts).
pub(crate) async fn read_bitmap_union(sb: &Superblock, devs: &[(usize, &Dev)]) -> Vec<u64> {
    let mut dirty = vec![0u64; (sb.bitmap.region_count as usize).div_ceil(64)];
    for (i, dev) in devs {
        // Extra bits (e.g. from a stale member's old bitmap) only cost resync time.
        let area = IoBuf::new_zeroed(sb.bitmap.area_bytes as usize);
        match dev.read(sb.bitmap.offset_bytes, area).await {
            Ok(buf) => {
                for (w, b) in dirty
                    .iter_mut()
                    .zip(decode_bitmap(&buf, sb.bitmap.region_count))
                {
                    *w |= b;
                }
            }
            Err(e) => warn!(member = i, error = %e, "bitmap unreadable"),
        }
    }
    dirty
}

impl Volume {
    /// Assembles a volume from its devices (members and spares, any order) with default
    /// options. See [`Volume::assemble_with`].
    pub async fn assemble(devices: Vec<Arc<dyn BlockDevice>>) -> Result<Volume> {
        Volume::assemble_with(devices, EngineOptions::default()).await
    }

    /// Assembles a volume from its devices alone:
    /// - the valid superblock copy with the highest (generation, seq) is authoritative;
    /// - a device listed as active there is used (if it missed the last superblock write
    ///   it is noted and rewritten; the bitmap resync covers what it may have missed);
    /// - a device listed as failed by an error or a timeout (older generation, fenced)
    ///   is never trusted: it comes back as a rebuilding member that gets only the
    ///   regions dirtied since it left (partial rebuild), or a full rebuild if the
    ///   bitmap cannot tell;
    /// - a device listed as failed by the operator stays out (until
    ///   [`Volume::re_add_member`] or [`Volume::replace_member`]);
    /// - slots without a device are marked failed; a spare takes the first failed slot;
    /// - a damaged superblock copy is rewritten from the good one;
    /// - dirty bitmap regions are resynced before this returns.
    ///
    /// Fails with [`VolumeError::TooFewMembers`] (writing nothing) if more members are
    /// missing or out of date than the layout tolerates; with
    /// [`EngineOptions::force_stale`] out-of-date members that left fully current are
    /// then counted as current, as far as needed.
    pub async fn assemble_with(
        devices: Vec<Arc<dyn BlockDevice>>,
        opts: EngineOptions,
    ) -> Result<Volume> {
        let survey = Survey::read(devices).await?;
        let n = survey.auth.layout.members;
        let forced = if opts.force_stale {
            survey.members_to_force()
        } else {
            vec![false; n]
        };
        let lost = survey.lost_mask(&forced);
        if !survey.geo.survives(&lost) {
            return Err(VolumeError::TooFewMembers(Box::new(
                survey.shortfall(&lost),
            )));
        }
        let auth = &survey.auth;
        let meta_log = auth.log;
        let geo = survey.geo;
        let mut notes = survey.notes.clone();
        let mut sb = auth.clone();
        let mut membership_changed = false;

        let mut slots = Vec::with_capacity(n);
        let mut rebuild_wanted = false;
        let generation = sb.generation;
        for (i, entry) in sb.members.iter_mut().enumerate().take(n) {
            let dev = survey.by_entry[i].as_ref().map(|(d, _)| d.clone());
            let name = survey.device_name(i).unwrap_or_default();
            let frontier = Arc::new(AtomicU64::new(0));
            let (dev, state) = match survey.findings[i] {
                _ if forced[i] => {
                    notes.push(format!(
                        "member {i} ({name}) forced back as current (it left at generation \
                         {}): regions written since then may read stale data",
                        entry.state_generation
                    ));
                    entry.state = MemberState::Active;
                    entry.state_generation = generation + 1;
                    entry.failed_by_operator = false;
                    entry.rebuild_offset_bytes = 0;
                    entry.valid_bytes = 0;
                    membership_changed = true;
                    (dev, MemberState::Active)
                }
                Finding::InService { behind } => {
                    if let Some(own) = behind {
                        notes.push(format!(
                            "member {i} ({name}) missed a superblock update (generation {own} \
                             < {}); listed {} by the newest superblock, superblock rewritten",
                            auth.generation,
                            state_name(entry.state)
                        ));
                    }
                    if entry.state == MemberState::Rebuilding {
                        frontier.store(
                            entry.rebuild_offset_bytes.min(geo.member_bytes()),
                            Ordering::Release,
                        );
                        rebuild_wanted = true;
                    }
                    (dev, entry.state)
                }
                Finding::Returning { own_generation } => {
                    // Fenced member back: trust nothing it holds beyond what the bitmap
                    // says was not written while it was away.
                    notes.push(format!(
                        "member {i} ({name}) is stale (generation {own_generation}, failed at {}): \
                         re-added; rebuild of regions dirtied since it left ({} of its bytes \
                         were current)",
                        entry.state_generation, entry.valid_bytes
                    ));
                    entry.state_generation = generation + 1;
                    entry.state = MemberState::Rebuilding;
                    entry.rebuild_offset_bytes = 0;
                    membership_changed = true;
                    rebuild_wanted = true;
                    (dev, MemberState::Rebuilding)
                }
                Finding::KeptOut => {
                    notes.push(format!(
                        "member {i} ({name}) was failed by the operator: it stays out until it \
                         is re-added or replaced"
                    ));
                    (None, MemberState::Failed)
                }
                Finding::Missing => {
                    notes.push(format!(
                        "member {i} ({}) is missing: marked failed",
                        entry.uuid
                    ));
                    entry.valid_bytes = crate::engine::valid_when_leaving(
                        entry,
                        Some(entry.state),
                        geo.member_bytes(),
                    );
                    entry.state = MemberState::Failed;
                    entry.state_generation = generation + 1;
                    entry.rebuild_offset_bytes = 0;
                    membership_changed = true;
                    (None, MemberState::Failed)
                }
                Finding::Away => (None, MemberState::Failed),
            };
            let mut slot = Slot::new(dev, entry.uuid, state, 0, entry.state_generation);
            slot.checkpoint = Arc::new(AtomicU64::new(frontier.load(Ordering::Acquire)));
            slot.frontier = frontier;
            slots.push(slot);
        }
        // Spares: keep those present, drop the rest from the table.
        let mut spares = Vec::new();
        let mut kept = sb.members[..n].to_vec();
        for (j, entry) in sb.members.iter().enumerate().skip(n) {
            match &survey.by_entry[j] {
                Some((dev, _)) => {
                    // A copy in progress resumes at its checkpoint after a clean stop;
                    // after a crash a write may have reached only one of the two: from 0.
                    let replaces = entry
                        .replaces
                        .filter(|_| entry.state == MemberState::Replacing)
                        .map(|slot| {
                            Replace::new(
                                slot,
                                if sb.clean {
                                    entry.rebuild_offset_bytes
                                } else {
                                    0
                                },
                            )
                        });
                    spares.push(Spare {
                        dev: dev.clone(),
                        uuid: entry.uuid,
                        replaces,
                    });
                    kept.push(entry.clone());
                }
                None => {
                    notes.push(format!("spare {} is missing: dropped", entry.uuid));
                    membership_changed = true;
                }
            }
        }
        sb.members = kept;
        let topo = Topology { slots, spares };
        debug_assert_eq!(topo.lost_mask(), lost, "survey and topology disagree");
        if !topo.survives(&geo) {
            return Err(VolumeError::TooFewMembers(Box::new(
                survey.shortfall(&topo.lost_mask()),
            )));
        }

        // The bitmap: union over every member in the layout now.
        let bitmap_devs: Vec<(usize, &Dev)> = topo
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.dev.as_ref().map(|d| (i, d)))
            .collect();
        let dirty = read_bitmap_union(&sb, &bitmap_devs).await;
        let dirty_count: u32 = dirty.iter().map(|w| w.count_ones()).sum();
        if !sb.clean && dirty_count > 0 {
            notes.push(format!(
                "not cleanly stopped: {dirty_count} dirty bitmap regions to resync"
            ));
        }

        sb.clean = false;
        let info = volume_info(&sb.name, &geo, sb.logical_block_bytes);
        let inner = Inner::new(sb.clone(), info, geo, topo.clone(), opts)?;
        let inner = Arc::new(inner);
        inner.intent.load(&dirty);
        // The stripe journal first (rows written while degraded), before this assembly
        // changes any state generation the entries refer to.
        let absent_gen: Vec<u64> = auth.members[..n]
            .iter()
            .map(|e| e.state_generation)
            .collect();
        let (journaled, skipped) = inner.replay_journal(&absent_gen, !auth.clean).await;
        if !journaled.is_empty() || skipped > 0 {
            inner.note(format!(
                "journal: {} degraded row writes replayed, {skipped} entries not applicable",
                journaled.len()
            ));
            let faults = inner.write_barrier().await;
            if !faults.is_empty() {
                inner.handle_faults(faults).await?;
            }
        }
        {
            let mut meta = inner.meta.lock().await;
            // A spare takes a failed slot right away.
            let mut topo = (*inner.topo()).clone();
            if !topo.spares.is_empty() && topo.slots.iter().any(|s| s.state == MemberState::Failed)
            {
                inner.take_spare(&mut meta, &mut topo).await;
                inner.set_topo(topo);
                membership_changed = true;
            }
            // Stale members re-added or forced in: their bitmap is rewritten from the union.
            for (i, slot) in inner.topo().slots.iter().enumerate() {
                let back = matches!(survey.findings[i], Finding::Returning { .. }) || forced[i];
                if let (Some(dev), true) = (&slot.dev, back)
                    && slot.uuid == auth.members[i].uuid
                    && let Err(f) = inner.init_member_bitmap(i, dev).await
                {
                    warn!(member = i, error = %f.err, "re-added member failed");
                }
            }
            let bump = membership_changed || inner.opts.bump_generation_on_assemble;
            inner.commit_locked(&mut meta, bump).await?;
        }
        {
            let mut t = inner.tasks();
            t.rebuild_wanted |= rebuild_wanted;
        }
        for n in notes {
            inner.note(n);
        }
        let journaled: std::collections::HashSet<u64> = journaled.into_iter().collect();
        if inner.opts.background_resync {
            if !inner.spawn_resync(journaled) {
                // Nothing dirty: the (empty) report at once.
                inner.resync_dirty(&Default::default()).await?;
            }
        } else {
            inner.resync_dirty(&journaled).await?;
        }
        let copying = inner.topo().spares.iter().any(|s| s.replaces.is_some());
        let log = match meta_log {
            Some(p) => Some(crate::log::LogEngine::open(inner.clone(), p).await?),
            None => None,
        };
        let volume = Volume::start_with_log(inner, log);
        if copying && volume.inner.opts.auto_rebuild {
            volume.inner.note("resuming the proactive copy".into());
            volume.inner.spawn_copy()?;
        }
        Ok(volume)
    }
}

/// `active`, `failed`, ... as in the JSON status.
pub(crate) fn state_name(s: MemberState) -> &'static str {
    match s {
        MemberState::Active => "active",
        MemberState::Failed => "failed",
        MemberState::Spare => "spare",
        MemberState::Rebuilding => "rebuilding",
        MemberState::Replacing => "replacing",
    }
}
