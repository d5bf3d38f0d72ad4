//! Membership administration: fail, replace, add spares.

use std::sync::Arc;

use blockdev::BlockDevice;
use uuid::Uuid;

use crate::engine::FailedBy;
use crate::error::{Result, VolumeError};
use crate::format::{MemberEntry, MemberState, Superblock};
use crate::sbio;
use crate::topology::{Dev, Slot, Spare, same_dev};
use crate::volume::Volume;

impl Volume {
    /// Takes slot `member` out, as an operator does (`mdadm --fail`): it is marked failed
    /// by the operator in every surviving superblock (generation bumped) and stays out,
    /// also across assemblies, until [`Volume::re_add_member`] or
    /// [`Volume::replace_member`]. A spare, if any, takes its place. A member that is
    /// already failed (by an error) is marked as taken out by the operator, so it no
    /// longer comes back by itself. Fails if that would lose data.
    pub async fn fail_member(&self, member: usize) -> Result<()> {
        self.check_slot(member)?;
        let topo = self.inner.topo();
        if topo.slots[member].state == MemberState::Failed {
            self.inner.keep_out(member).await?;
            return Ok(());
        }
        let mut lost = topo.lost_mask();
        lost[member] = true;
        if !self.inner.geo.survives(&lost) {
            return Err(VolumeError::Invalid(format!(
                "failing member {member} would lose data (the volume tolerates {})",
                self.inner.geo.params().tolerance()
            )));
        }
        self.inner
            .fail_member_dev(member, None, "failed by the operator", FailedBy::Operator)
            .await?;
        self.inner.membership_barrier().await?;
        self.inner.kick_rebuild();
        Ok(())
    }

    /// Puts a failed member's own device back into its slot (`mdadm --re-add`): only the
    /// regions written since it left are rebuilt. `device` must hold this member's
    /// superblock (same volume, same member UUID); another device goes in with
    /// [`Volume::replace_member`].
    pub async fn re_add_member(&self, member: usize, device: Arc<dyn BlockDevice>) -> Result<()> {
        self.check_slot(member)?;
        let state = self.inner.topo().slots[member].state;
        if state != MemberState::Failed {
            return Err(VolumeError::Invalid(format!(
                "member {member} is {}, not failed: nothing to re-add",
                crate::assemble::state_name(state)
            )));
        }
        let own = sbio::read_member(&*device).await?.best;
        let (volume_uuid, member_uuid) = {
            let sb = self.inner.meta.lock().await;
            (sb.volume_uuid, sb.members[member].uuid)
        };
        let name = device.info().name.clone();
        match own {
            Some(o) if o.volume_uuid == volume_uuid && o.member_uuid == member_uuid => {}
            Some(o) if o.volume_uuid == volume_uuid => {
                return Err(VolumeError::Invalid(format!(
                    "{name} is not member {member} of this volume (it holds member {}): put a                      new device in with replace-member",
                    o.member_uuid
                )));
            }
            Some(o) => {
                return Err(VolumeError::Invalid(format!(
                    "{name} belongs to volume {} {}, not to this one",
                    o.name, o.volume_uuid
                )));
            }
            None => {
                return Err(VolumeError::Invalid(format!(
                    "{name} holds no volume superblock: it is not member {member}; put a new                      device in with replace-member"
                )));
            }
        }
        self.replace_member(member, device).await
    }

    /// Puts `device` into slot `member` (failing the slot first if it is still active).
    /// If `device` is the member that used to be there (same member UUID, e.g. a drive
    /// that was away), only the regions dirtied since it left are rebuilt; otherwise the
    /// whole member is. The rebuild starts by itself with `auto_rebuild`, else with
    /// [`Volume::start_rebuild`].
    pub async fn replace_member(&self, member: usize, device: Arc<dyn BlockDevice>) -> Result<()> {
        self.check_slot(member)?;
        self.check_device(&device)?;
        if self.inner.topo().slots[member].state != MemberState::Failed {
            self.fail_member(member).await?;
        }
        let own = sbio::read_member(&*device).await?.best;
        let mut sb = self.inner.meta.lock().await;
        let mut topo = (*self.inner.topo()).clone();
        if self.in_use(&topo, &device, own.as_ref(), &sb) {
            return Err(VolumeError::Invalid(format!(
                "{} is already part of the volume",
                device.info().name
            )));
        }
        if topo.slots[member].state != MemberState::Failed {
            // A spare took the slot meanwhile.
            return Err(VolumeError::Invalid(format!(
                "slot {member} is no longer failed (a spare took it)"
            )));
        }
        let entry = &sb.members[member];
        let returning = own
            .as_ref()
            .is_some_and(|o| o.volume_uuid == sb.volume_uuid && o.member_uuid == entry.uuid);
        let valid_bytes = if returning { entry.valid_bytes } else { 0 };
        let uuid = if returning {
            entry.uuid
        } else {
            Uuid::new_v4()
        };
        self.inner
            .init_member_bitmap(member, &device)
            .await
            .map_err(|f| VolumeError::Member {
                member,
                name: device.info().name.clone(),
                cause: f.err,
            })?;
        topo.slots[member] = Slot::new(
            Some(device.clone()),
            uuid,
            MemberState::Rebuilding,
            0,
            sb.generation + 1,
        );
        sb.members[member] = MemberEntry {
            uuid,
            state: MemberState::Rebuilding,
            failure_domain: sb.members[member].failure_domain.clone(),
            device_bytes: device.info().size_bytes,
            state_generation: sb.generation + 1,
            rebuild_offset_bytes: 0,
            valid_bytes,
            failed_by_operator: false,
            replaces: None,
        };
        self.inner.set_topo(topo);
        self.inner.commit_locked(&mut sb, true).await?;
        drop(sb);
        self.inner.note(format!(
            "member {member} replaced by {} ({} rebuild)",
            device.info().name,
            if valid_bytes > 0 { "partial" } else { "full" }
        ));
        self.inner.tasks().rebuild_wanted = true;
        self.inner.membership_barrier().await?;
        self.inner.kick_rebuild();
        Ok(())
    }

    /// Adds a hot spare (it takes a failed slot at once if there is one).
    pub async fn add_spare(
        &self,
        device: Arc<dyn BlockDevice>,
        failure_domain: &str,
    ) -> Result<()> {
        self.check_device(&device)?;
        let own = sbio::read_member(&*device).await?.best;
        let mut sb = self.inner.meta.lock().await;
        let mut topo = (*self.inner.topo()).clone();
        let uuid = self
            .admit_new_member(&topo, &device, own.as_ref(), &sb)
            .await?;
        sb.members.push(MemberEntry {
            failure_domain: failure_domain
                .chars()
                .take(crate::format::DOMAIN_MAX_BYTES)
                .collect(),
            ..MemberEntry::new(uuid, MemberState::Spare, device.info().size_bytes)
        });
        topo.spares.push(Spare {
            dev: device.clone(),
            uuid,
            replaces: None,
        });
        self.inner.take_spare(&mut sb, &mut topo).await;
        self.inner.set_topo(topo);
        self.inner.commit_locked(&mut sb, true).await?;
        drop(sb);
        self.inner.membership_barrier().await?;
        self.inner.kick_rebuild();
        Ok(())
    }

    /// Checks that `device` may join the volume as a new member-table entry (not in use
    /// already, room in the table) and prepares its bitmap; returns the new entry's UUID.
    /// The caller pushes the entry at index `sb.members.len()`.
    pub(crate) async fn admit_new_member(
        &self,
        topo: &crate::topology::Topology,
        device: &Dev,
        own: Option<&Superblock>,
        sb: &Superblock,
    ) -> Result<Uuid> {
        if self.in_use(topo, device, own, sb) {
            return Err(VolumeError::Invalid(format!(
                "{} is already part of the volume",
                device.info().name
            )));
        }
        if sb.members.len() >= crate::format::MAX_ENTRIES {
            return Err(VolumeError::Invalid("member table full".into()));
        }
        let index = sb.members.len();
        self.inner
            .init_member_bitmap(index, device)
            .await
            .map_err(|f| VolumeError::Member {
                member: index,
                name: device.info().name.clone(),
                cause: f.err,
            })?;
        Ok(Uuid::new_v4())
    }

    pub(crate) fn check_slot(&self, member: usize) -> Result<()> {
        self.inner.check_usable()?;
        if member >= self.inner.geo.members() {
            return Err(VolumeError::Invalid(format!(
                "member {member} out of range (the volume has {} slots)",
                self.inner.geo.members()
            )));
        }
        Ok(())
    }

    pub(crate) fn check_device(&self, device: &Dev) -> Result<()> {
        let info = device.info();
        let sb_need = self.inner.data_offset_bytes + self.inner.geo.member_bytes();
        if info.size_bytes < sb_need {
            return Err(VolumeError::TooSmall {
                name: info.name.clone(),
                size_bytes: info.size_bytes,
                need_bytes: sb_need,
            });
        }
        if info.logical_block_bytes > self.inner.info.logical_block_bytes {
            return Err(VolumeError::BlockSize {
                name: info.name.clone(),
                block_bytes: info.logical_block_bytes,
                volume_block_bytes: self.inner.info.logical_block_bytes,
            });
        }
        Ok(())
    }

    /// The device object or its member UUID is already in use in this volume.
    fn in_use(
        &self,
        topo: &crate::topology::Topology,
        device: &Dev,
        own: Option<&Superblock>,
        sb: &Superblock,
    ) -> bool {
        let same_object = topo
            .slots
            .iter()
            .filter_map(|s| s.dev.as_ref())
            .chain(topo.spares.iter().map(|s| &s.dev))
            .any(|d| same_dev(d, device));
        let same_member = own.is_some_and(|o| {
            o.volume_uuid == sb.volume_uuid
                && sb
                    .members
                    .iter()
                    .any(|e| e.uuid == o.member_uuid && e.state != MemberState::Failed)
        });
        same_object || same_member
    }
}
