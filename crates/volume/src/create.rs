//! `Volume::create`: lay out a new volume on blank devices.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use blockdev::{BlockDevice, DeviceInfo, DeviceKind};
use tracing::info;
use uuid::Uuid;

use crate::config::VolumeConfig;
use crate::engine::Inner;
use crate::error::{Result, VolumeError};
use crate::format::{
    DOMAIN_MAX_BYTES, MemberEntry, MemberState, NAME_MAX_BYTES, Superblock, plan_areas,
};
use crate::layout::{Family, Geometry};
use crate::sbio;
use crate::topology::{Dev, Slot, Spare, Topology};
use crate::volume::Volume;

impl Volume {
    /// Creates a volume on `members` (in slot order) with hot `spares`, writing fresh
    /// superblocks and bitmaps. Member data areas are zeroed (so parity and copies start
    /// consistent) unless `config.assume_clean`. Devices already carrying a volume
    /// superblock are refused unless `config.force`.
    pub async fn create(
        name: &str,
        config: VolumeConfig,
        members: Vec<Arc<dyn BlockDevice>>,
        spares: Vec<Arc<dyn BlockDevice>>,
    ) -> Result<Volume> {
        if name.is_empty() || name.len() > NAME_MAX_BYTES {
            return Err(VolumeError::Invalid(format!(
                "volume name must be 1 to {NAME_MAX_BYTES} bytes"
            )));
        }
        let params = config
            .level
            .params(members.len(), config.stripe_unit_bytes)?;
        if members.len() + spares.len() > crate::format::MAX_ENTRIES {
            return Err(VolumeError::Invalid(format!(
                "at most {} members and spares in all",
                crate::format::MAX_ENTRIES
            )));
        }
        if config
            .failure_domains
            .iter()
            .any(|d| d.len() > DOMAIN_MAX_BYTES)
        {
            return Err(VolumeError::Invalid(format!(
                "failure domains are at most {DOMAIN_MAX_BYTES} bytes"
            )));
        }
        let all: Vec<&Dev> = members.iter().chain(spares.iter()).collect();
        if !config.force {
            for dev in &all {
                if let Some(sb) = sbio::read_member(&***dev).await?.best {
                    return Err(VolumeError::InUse {
                        name: dev.info().name.clone(),
                        volume: sb.volume_uuid,
                    });
                }
            }
        }
        let min_bytes = members
            .iter()
            .map(|d| d.info().size_bytes)
            .min()
            .unwrap_or(0);
        let journal_bytes = match params.family() {
            Family::Rotating { m, .. } if config.journal_bytes > 0 => config
                .journal_bytes
                .max(4096 + m as u64 * params.stripe_unit_bytes),
            _ => 0,
        };
        let plan = plan_areas(
            min_bytes,
            params.stripe_unit_bytes,
            config.region_bytes,
            journal_bytes,
        )?;
        let geo = Geometry::new(params, plan.usable_member_bytes)?;
        let need = plan.data_offset_bytes + plan.usable_member_bytes;
        for dev in &spares {
            if dev.info().size_bytes < need {
                return Err(VolumeError::TooSmall {
                    name: dev.info().name.clone(),
                    size_bytes: dev.info().size_bytes,
                    need_bytes: need,
                });
            }
        }
        let logical_block_bytes = all
            .iter()
            .map(|d| d.info().logical_block_bytes)
            .max()
            .unwrap_or(512)
            .max(512);
        if logical_block_bytes > 4096 {
            return Err(VolumeError::Invalid(format!(
                "member logical block of {logical_block_bytes} bytes (at most 4096)"
            )));
        }
        let domain = |i: usize| config.failure_domains.get(i).cloned().unwrap_or_default();
        let entries: Vec<MemberEntry> = all
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let state = if i < members.len() {
                    MemberState::Active
                } else {
                    MemberState::Spare
                };
                MemberEntry {
                    failure_domain: domain(i),
                    ..MemberEntry::new(Uuid::new_v4(), state, d.info().size_bytes)
                }
            })
            .collect();
        let mut sb = Superblock {
            volume_uuid: Uuid::new_v4(),
            name: name.to_owned(),
            member_uuid: Uuid::nil(),
            member_index: 0,
            generation: 1,
            seq: 0,
            created_unix_secs: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            clean: false,
            layout: params,
            logical_block_bytes,
            data_offset_bytes: plan.data_offset_bytes,
            usable_member_bytes: plan.usable_member_bytes,
            bitmap: plan.bitmap,
            journal_offset_bytes: plan.journal_offset_bytes,
            journal_bytes: plan.journal_bytes,
            log: None,
            members: entries,
        };

        // Old superblocks go first, so a crash during creation leaves no half volume.
        let wipes = all.iter().map(|d| sbio::wipe_member(&***d));
        for r in futures::future::join_all(wipes).await {
            r?;
        }
        if !config.assume_clean {
            let zeroes = members
                .iter()
                .map(|d| d.write_zeroes(plan.data_offset_bytes, plan.usable_member_bytes));
            for r in futures::future::join_all(zeroes).await {
                r?;
            }
        }
        // Zeroes must be durable before a superblock makes the parity trusted.
        for r in futures::future::join_all(all.iter().map(|d| d.flush())).await {
            r?;
        }
        let topo = Topology {
            slots: members
                .iter()
                .zip(&sb.members)
                .map(|(d, e)| {
                    Slot::new(
                        Some(d.clone()),
                        e.uuid,
                        MemberState::Active,
                        0,
                        e.state_generation,
                    )
                })
                .collect(),
            spares: spares
                .iter()
                .zip(sb.members.iter().skip(members.len()))
                .map(|(d, e)| Spare {
                    dev: d.clone(),
                    uuid: e.uuid,
                    replaces: None,
                })
                .collect(),
        };
        if let Some(lc) = &config.log {
            let Family::Rotating { k, .. } = params.family() else {
                return Err(VolumeError::Invalid(
                    "the log layout needs a parity level (raid5, raid6 or k+m)".into(),
                ));
            };
            if !crate::log::LogParams::block_bytes_valid(lc.block_bytes) {
                return Err(VolumeError::Invalid(format!(
                    "log block of {} bytes: a power of two from 4 KiB to 64 KiB",
                    lc.block_bytes
                )));
            }
            if !(1..=95).contains(&lc.export_percent) {
                return Err(VolumeError::Invalid(
                    "log export percentage must be 1..=95".into(),
                ));
            }
            let row = k as u64 * params.stripe_unit_bytes;
            let logical_blocks = crate::log::format::LogGeometry::plan_logical_blocks(
                geo.volume_bytes(),
                row,
                params.stripe_unit_bytes,
                lc.block_bytes,
                logical_block_bytes,
                lc.export_percent,
            );
            crate::log::format::LogGeometry::new(
                geo.volume_bytes(),
                row,
                params.stripe_unit_bytes,
                lc.block_bytes,
                logical_blocks,
                logical_block_bytes,
            )
            .map_err(VolumeError::Invalid)?;
            sb.log = Some(crate::log::LogParams {
                compression: lc.compression,
                block_bytes: lc.block_bytes,
                logical_blocks,
            });
        }
        let info = volume_info(name, &geo, logical_block_bytes);
        let inner = Arc::new(Inner::new(sb.clone(), info, geo, topo, config.options)?);
        for (i, d) in all.iter().enumerate() {
            inner
                .init_member_bitmap(i, d)
                .await
                .map_err(|f| VolumeError::Member {
                    member: i,
                    name: d.info().name.clone(),
                    cause: f.err,
                })?;
        }
        {
            let mut meta = inner.meta.lock().await;
            inner.commit_locked(&mut meta, false).await?;
            sb = meta.clone();
        }
        let log = match sb.log {
            Some(p) => {
                let geo = crate::log::geometry(&inner, &p)?;
                crate::log::LogEngine::format(&inner, &geo).await?;
                Some(crate::log::LogEngine::open(inner.clone(), p).await?)
            }
            None => None,
        };
        info!(volume = name, uuid = %sb.volume_uuid, layout = %params, log = ?sb.log, "created");
        Ok(Volume::start_with_log(inner, log))
    }
}

/// The `DeviceInfo` a volume presents.
pub(crate) fn volume_info(name: &str, geo: &Geometry, logical_block_bytes: u32) -> DeviceInfo {
    let su = geo.stripe_unit_bytes();
    let full_stripe = match geo.family() {
        Family::Rotating { k, .. } => k as u64 * su,
        Family::Near { copies } => (geo.members() / copies).max(1) as u64 * su,
    };
    let max_io = (blockdev::DEFAULT_MAX_IO_BYTES as u64).max(full_stripe);
    let max_io = max_io.div_ceil(full_stripe) * full_stripe;
    DeviceInfo {
        name: name.to_owned(),
        kind: DeviceKind::Other("volume".into()),
        size_bytes: geo.volume_bytes(),
        logical_block_bytes,
        optimal_io_bytes: u32::try_from(full_stripe).unwrap_or(u32::MAX),
        max_io_bytes: u32::try_from(max_io).unwrap_or(u32::MAX),
        volatile_write_cache: true,
        supports_discard: true,
        supports_write_zeroes: true,
        rotational: false,
    }
}
