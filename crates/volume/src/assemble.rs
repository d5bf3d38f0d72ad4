//! `Volume::assemble`: find the newest superblock among the devices, fence stale members,
//! resync dirty bitmap regions, start.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use blockdev::{BlockDevice, IoBuf};
use tracing::warn;

use crate::config::EngineOptions;
use crate::create::volume_info;
use crate::engine::Inner;
use crate::error::{Result, VolumeError};
use crate::format::{MemberState, Superblock};
use crate::intent::decode_bitmap;
use crate::layout::Geometry;
use crate::sbio::{self, MemberRead};
use crate::topology::{Dev, Slot, Spare, Topology};
use crate::volume::Volume;

/// One device as found at assembly.
struct Found {
    dev: Dev,
    read: MemberRead,
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
    /// - a device listed as failed (older generation, fenced) is never trusted: it comes
    ///   back as a rebuilding member that gets only the regions dirtied since it left
    ///   (partial rebuild), or a full rebuild if the bitmap cannot tell;
    /// - slots without a device are marked failed; a spare takes the first failed slot;
    /// - a damaged superblock copy is rewritten from the good one;
    /// - dirty bitmap regions are resynced before this returns.
    ///
    /// Fails if more members are missing than the layout tolerates.
    pub async fn assemble_with(
        devices: Vec<Arc<dyn BlockDevice>>,
        opts: EngineOptions,
    ) -> Result<Volume> {
        let count = devices.len();
        let mut found = Vec::new();
        let mut notes = Vec::new();
        for dev in devices {
            match sbio::read_member(&*dev).await {
                Ok(read) => found.push(Found { dev, read }),
                Err(e) => notes.push(format!("{}: superblock unreadable: {e}", dev.info().name)),
            }
        }
        let auth = found
            .iter()
            .filter_map(|f| f.read.best.as_ref())
            .max_by_key(|sb| sb.version_key())
            .cloned()
            .ok_or(VolumeError::NoSuperblock(count))?;
        for f in &found {
            if let Some(sb) = &f.read.best
                && sb.volume_uuid != auth.volume_uuid
            {
                return Err(VolumeError::MixedVolumes(auth.volume_uuid, sb.volume_uuid));
            }
        }
        let geo = Geometry::new(auth.layout, auth.usable_member_bytes)?;
        let n = auth.layout.members;
        let mut sb = auth.clone();
        let mut membership_changed = false;

        // Match devices to table entries by their own member UUID.
        let mut by_entry: Vec<Option<(Dev, Superblock)>> = vec![None; sb.members.len()];
        for f in found {
            let Some(own) = f.read.best.clone() else {
                notes.push(format!(
                    "{}: no valid superblock, ignored",
                    f.dev.info().name
                ));
                continue;
            };
            let Some(idx) = sb.members.iter().position(|e| e.uuid == own.member_uuid) else {
                notes.push(format!(
                    "{}: member {} is no longer part of the volume (replaced), ignored",
                    f.dev.info().name,
                    own.member_uuid
                ));
                continue;
            };
            let info = f.dev.info();
            if info.size_bytes < sb.min_member_bytes()
                || info.logical_block_bytes > sb.logical_block_bytes
            {
                notes.push(format!(
                    "{}: too small or wrong block size, ignored",
                    info.name
                ));
                continue;
            }
            if f.read.needs_repair() {
                let why: Vec<String> = (0..2)
                    .filter(|&i| !f.read.copy_current[i])
                    .map(|i| match &f.read.errors[i] {
                        Some(e) => format!("copy {i}: {e}"),
                        None => format!("copy {i}: older"),
                    })
                    .collect();
                notes.push(format!(
                    "{}: superblock copy rewritten from the good one ({})",
                    info.name,
                    why.join(", ")
                ));
            }
            if by_entry[idx].is_some() {
                notes.push(format!("{}: duplicate of member {idx}, ignored", info.name));
                continue;
            }
            by_entry[idx] = Some((f.dev, own));
        }

        let mut slots = Vec::with_capacity(n);
        let mut rebuild_wanted = false;
        for (i, found) in by_entry.iter().enumerate().take(n) {
            let entry = &mut sb.members[i];
            let frontier = Arc::new(AtomicU64::new(0));
            let (dev, state) = match (found, entry.state) {
                (Some((dev, own)), MemberState::Active | MemberState::Rebuilding) => {
                    if own.generation < auth.generation {
                        notes.push(format!(
                            "member {i} ({}) missed a superblock update (generation {} < {}); \
                             listed {:?} by the newest superblock, superblock rewritten",
                            dev.info().name,
                            own.generation,
                            auth.generation,
                            entry.state
                        ));
                    }
                    if entry.state == MemberState::Rebuilding {
                        frontier.store(
                            entry.rebuild_offset_bytes.min(geo.member_bytes()),
                            std::sync::atomic::Ordering::Release,
                        );
                        rebuild_wanted = true;
                    }
                    (Some(dev.clone()), entry.state)
                }
                (Some((dev, own)), MemberState::Failed) => {
                    // Fenced member back: trust nothing it holds beyond what the bitmap
                    // says was not written while it was away.
                    notes.push(format!(
                        "member {i} ({}) is stale (generation {}, failed at {}): re-added; \
                         rebuild of regions dirtied since it left ({} of its bytes were current)",
                        dev.info().name,
                        own.generation,
                        entry.state_generation,
                        entry.valid_bytes
                    ));
                    entry.state_generation = sb.generation + 1;
                    entry.state = MemberState::Rebuilding;
                    entry.rebuild_offset_bytes = 0;
                    membership_changed = true;
                    rebuild_wanted = true;
                    (Some(dev.clone()), MemberState::Rebuilding)
                }
                (None, MemberState::Active | MemberState::Rebuilding) => {
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
                    entry.state_generation = sb.generation + 1;
                    entry.rebuild_offset_bytes = 0;
                    membership_changed = true;
                    (None, MemberState::Failed)
                }
                (_, _) => (None, MemberState::Failed),
            };
            let mut slot = Slot::new(dev, entry.uuid, state, 0, entry.state_generation);
            slot.frontier = frontier;
            slot.checkpoint = Arc::new(AtomicU64::new(
                slot.frontier.load(std::sync::atomic::Ordering::Acquire),
            ));
            slots.push(slot);
        }
        // Spares: keep those present, drop the rest from the table.
        let mut spares = Vec::new();
        let mut kept = sb.members[..n].to_vec();
        for (j, entry) in sb.members.iter().enumerate().skip(n) {
            match &by_entry[j] {
                Some((dev, _)) => {
                    spares.push(Spare {
                        dev: dev.clone(),
                        uuid: entry.uuid,
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
        if !topo.survives(&geo) {
            let lost = topo.lost_mask().iter().filter(|&&l| l).count();
            return Err(VolumeError::Failed {
                name: sb.name.clone(),
                lost,
                members: n,
                tolerance: geo.params().tolerance(),
            });
        }

        // The bitmap: union over every current member (a bit on any of them counts).
        let mut dirty = vec![0u64; (sb.bitmap.region_count as usize).div_ceil(64)];
        for (i, slot) in topo.slots.iter().enumerate() {
            // Extra bits (e.g. from a stale member's old bitmap) only cost resync time.
            let Some(dev) = &slot.dev else { continue };
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
            // Stale members re-added: their bitmap is rewritten from the union.
            for (i, slot) in inner.topo().slots.iter().enumerate() {
                let re_added = slot.state == MemberState::Rebuilding
                    && by_entry[i]
                        .as_ref()
                        .is_some_and(|(_, own)| own.generation < auth.generation)
                    && auth.members[i].state == MemberState::Failed;
                if let (Some(dev), true) = (&slot.dev, re_added)
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
        Ok(Volume::start(inner))
    }
}
