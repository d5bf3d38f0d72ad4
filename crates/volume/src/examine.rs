//! `Volume::examine`: a volume as its devices describe it, and what the next assembly
//! would do, without writing anything (like `mdadm --examine` over all the members).

use std::sync::Arc;

use blockdev::BlockDevice;

use crate::assemble::{Finding, Survey, read_bitmap_union, state_name};
use crate::create::volume_info;
use crate::error::Result;
use crate::format::MemberState;
use crate::shortfall::Shortfall;
use crate::status::{MemberStatus, VolumeState, VolumeStatus};
use crate::volume::Volume;

/// What [`Volume::examine`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct Examination {
    pub status: VolumeStatus,
    /// Assembly would refuse: why.
    pub shortfall: Option<Shortfall>,
}

impl Volume {
    /// Reads the superblocks and bitmaps of `devices` (members and spares, any order) and
    /// reports the volume as the newest superblock records it: member states, which
    /// members have a device here, the clean flag, dirty regions, and in the notes what
    /// the next assembly would do. Writes nothing, starts nothing; `state` is `Healthy`,
    /// `Degraded` or `Failed` (assembly would refuse, and `shortfall` says why).
    pub async fn examine(devices: Vec<Arc<dyn BlockDevice>>) -> Result<Examination> {
        let survey = Survey::read(devices).await?;
        let auth = &survey.auth;
        let geo = survey.geo;
        let n = auth.layout.members;
        let mut notes = survey.notes.clone();

        let members: Vec<MemberStatus> = (0..n)
            .map(|i| {
                let e = &auth.members[i];
                MemberStatus {
                    index: i,
                    uuid: e.uuid,
                    device: survey.device_name(i),
                    state: e.state,
                    failure_domain: e.failure_domain.clone(),
                    rebuild_offset_bytes: if e.state == MemberState::Rebuilding {
                        e.rebuild_offset_bytes
                    } else {
                        0
                    },
                    valid_bytes: e.valid_bytes,
                    failed_by_operator: e.failed_by_operator,
                    missing: survey.findings[i] == Finding::Missing,
                    replaces: None,
                }
            })
            .collect();
        for (i, f) in survey.findings.iter().enumerate() {
            let e = &auth.members[i];
            let name = survey.device_name(i).unwrap_or_default();
            match *f {
                Finding::InService {
                    behind: Some(own_generation),
                } => notes.push(format!(
                    "member {i} ({name}) missed a superblock update (generation \
                     {own_generation} < {}): the next assembly rewrites it",
                    auth.generation
                )),
                Finding::InService { .. } if e.state == MemberState::Rebuilding => {
                    notes.push(format!(
                        "member {i} ({name}) is {}: {:.1}% done, the rebuild resumes from there",
                        state_name(e.state),
                        e.rebuild_offset_bytes as f64 * 100.0 / geo.member_bytes().max(1) as f64
                    ))
                }
                Finding::InService { .. } | Finding::Away => {}
                Finding::Missing => notes.push(format!(
                    "member {i} is missing: the next assembly marks it failed"
                )),
                Finding::Returning { .. } => notes.push(format!(
                    "member {i} ({name}) failed by an error at generation {} and is back: the \
                     next assembly re-adds it (rebuild of the regions dirtied since it left)",
                    e.state_generation
                )),
                Finding::KeptOut => notes.push(format!(
                    "member {i} ({name}) was failed by the operator: it stays out until it is \
                     re-added or replaced"
                )),
            }
        }
        let spares: Vec<MemberStatus> = (n..auth.members.len())
            .filter_map(|j| {
                let e = &auth.members[j];
                let Some(device) = survey.device_name(j) else {
                    notes.push(format!(
                        "spare {} is missing: the next assembly drops it",
                        e.uuid
                    ));
                    return None;
                };
                Some(MemberStatus {
                    index: j - n,
                    uuid: e.uuid,
                    device: Some(device),
                    state: e.state,
                    failure_domain: e.failure_domain.clone(),
                    rebuild_offset_bytes: if e.state == MemberState::Replacing {
                        e.rebuild_offset_bytes
                    } else {
                        0
                    },
                    valid_bytes: 0,
                    failed_by_operator: false,
                    missing: false,
                    replaces: e.replaces,
                })
            })
            .collect();

        let lost = survey.lost_mask(&vec![false; n]);
        let shortfall = (!geo.survives(&lost)).then(|| survey.shortfall(&lost));
        let state = if shortfall.is_some() {
            VolumeState::Failed
        } else if lost.iter().any(|l| *l) {
            VolumeState::Degraded
        } else {
            VolumeState::Healthy
        };

        // Dirty regions as the next assembly would see them (every member it would use).
        let bitmap_devs: Vec<(usize, &crate::topology::Dev)> = (0..n)
            .filter(|&i| {
                matches!(
                    survey.findings[i],
                    Finding::InService { .. } | Finding::Returning { .. }
                )
            })
            .filter_map(|i| survey.by_entry[i].as_ref().map(|(d, _)| (i, d)))
            .collect();
        if let Some(l) = &auth.log {
            notes.push(format!(
                "log layout, compression {}, {} KiB blocks: the compression ratio, map and \
                 free stripes are reported by the assembled volume (assemble)",
                l.compression,
                l.block_bytes / 1024
            ));
        }
        let dirty = read_bitmap_union(auth, &bitmap_devs).await;
        let info = volume_info(&auth.name, &geo, auth.logical_block_bytes);
        let status = VolumeStatus {
            name: auth.name.clone(),
            uuid: auth.volume_uuid,
            layout: auth.layout,
            size_bytes: auth.log.map_or(info.size_bytes, |l| {
                l.logical_blocks * u64::from(l.block_bytes)
            }),
            logical_block_bytes: auth.logical_block_bytes,
            member_data_bytes: geo.member_bytes(),
            data_offset_bytes: auth.data_offset_bytes,
            state,
            generation: auth.generation,
            clean: auth.clean,
            members,
            spares,
            region_bytes: auth.bitmap.region_bytes,
            region_count: auth.bitmap.region_count,
            dirty_regions: dirty.iter().map(|w| u64::from(w.count_ones())).sum(),
            rebuild: None,
            copy: None,
            last_scrub: None,
            scrub: None,
            last_resync: None,
            resync: None,
            notes,
            read_bytes: 0,
            write_bytes: 0,
            log: None,
        };
        Ok(Examination { status, shortfall })
    }
}
