//! Write-intent bitmap persistence: setting bits durably before data writes, lazy
//! clearing after a flush of every member.

use std::ops::RangeInclusive;

use blockdev::IoBuf;

use super::{Faults, Inner, MemberFault};
use crate::error::Result;
use crate::intent::BlockImage;
use crate::topology::Dev;

/// Keeps a write registered in the bitmap until dropped.
pub(crate) struct IntentGuard<'a> {
    inner: &'a Inner,
    regions: RangeInclusive<usize>,
}

impl Drop for IntentGuard<'_> {
    fn drop(&mut self) {
        self.inner.intent.end(self.regions.clone());
    }
}

impl Inner {
    /// Registers a write to member data bytes `[start, end)` and returns once the bits of
    /// its regions are durable on every bitmap member.
    pub async fn intent_begin(&self, start_bytes: u64, end_bytes: u64) -> Result<IntentGuard<'_>> {
        let regions = self.intent.regions_of(start_bytes, end_bytes);
        let guard = IntentGuard {
            inner: self,
            regions: regions.clone(),
        };
        if !self.intent.begin(regions) {
            self.persist_bitmap().await?;
        }
        Ok(guard)
    }

    async fn write_images(
        &self,
        targets: &[(usize, Dev)],
        images: &[BlockImage],
        fua: bool,
    ) -> std::result::Result<(), Faults> {
        let futs = targets.iter().flat_map(|(i, dev)| {
            images.iter().map(move |img| {
                let off = self.intent.block_offset(img.block);
                self.mwrite_raw(*i, dev, off, img.bytes.clone(), fua)
            })
        });
        let faults: Faults = futures::future::join_all(futs)
            .await
            .into_iter()
            .filter_map(|r| r.err())
            .collect();
        if faults.is_empty() {
            Ok(())
        } else {
            Err(faults)
        }
    }

    /// Writes the whole current bitmap to a member joining the volume (FUA).
    pub async fn init_member_bitmap(
        &self,
        member: usize,
        dev: &Dev,
    ) -> std::result::Result<(), MemberFault> {
        let _io = self.intent.io.lock().await;
        let area = self.intent.geometry().area_bytes as usize;
        // Blocks past the used ones are zeroed too, so stale bits never linger.
        let mut buf = IoBuf::new_zeroed(area);
        for img in self.intent.all_images() {
            let at = img.block * crate::intent::BITMAP_BLOCK_BYTES;
            if let Some(dst) = buf.get_mut(at..at + img.bytes.len()) {
                dst.copy_from_slice(&img.bytes);
            }
        }
        let off = self.intent.geometry().offset_bytes;
        self.mwrite_raw(member, dev, off, buf, true)
            .await
            .map(|_| ())
    }

    /// Writes every wanted-but-not-durable bit (FUA) to the bitmap members.
    pub async fn persist_bitmap(&self) -> Result<()> {
        self.with_retry(|topo| async move {
            let _io = self.intent.io.lock().await;
            let images = self.intent.set_images();
            if images.is_empty() {
                return Ok(());
            }
            let targets: Vec<(usize, Dev)> = topo
                .metadata_targets()
                .into_iter()
                .filter(|(i, _)| *i < topo.slots.len())
                .collect();
            self.write_images(&targets, &images, true).await?;
            self.intent.images_durable(&images);
            Ok(())
        })
        .await
    }

    /// One lazy-clear pass: regions without writes since the previous pass (all dirty
    /// regions if `force`) are cleared after every member was flushed. Returns whether
    /// anything was cleared.
    pub async fn sweep_bitmap(&self, force: bool) -> Result<bool> {
        if !self.intent.enabled() {
            return Ok(false);
        }
        let io = self.intent.io.lock().await;
        if self.is_halted() {
            // A fenced volume's bitmap stays as it is on the members: the next owner
            // resyncs from it.
            return Err(self.fenced_error());
        }
        let picked = self.intent.sweep_select(force);
        if picked.is_empty() {
            return Ok(false);
        }
        let topo = self.topo();
        let mut faults = self.flush_members(&topo).await;
        if faults.is_empty() {
            let images = self.intent.clear_images();
            let targets: Vec<(usize, Dev)> = topo
                .metadata_targets()
                .into_iter()
                .filter(|(i, _)| *i < topo.slots.len())
                .collect();
            match self.write_images(&targets, &images, false).await {
                Ok(()) => self.intent.images_written(&images),
                Err(f) => faults = f,
            }
        }
        drop(io);
        if faults.is_empty() {
            return Ok(true);
        }
        // A member did not flush (its cache may have lost data of these regions) or took
        // only part of the clear: the regions stay dirty, now also for its rebuild.
        self.intent.remark(&picked);
        self.handle_faults(faults).await?;
        self.persist_bitmap().await?;
        Ok(false)
    }
}
