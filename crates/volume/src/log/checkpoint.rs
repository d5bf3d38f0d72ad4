//! Checkpoints (the map made durable in one piece), the log root, formatting a new log
//! and replay at assembly.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use blockdev::IoBuf;
use tracing::info;

use super::engine::{LogEngine, REPLAY_MISS_LIMIT};
use super::format::{
    LogGeometry, ROOT_BYTES, Root, decode_checkpoint, decode_summary, encode_checkpoint,
    payloads_intact,
};
use super::params::LogParams;
use super::state::Space;
use crate::engine::Inner;
use crate::error::{Result, VolumeError};

impl LogEngine {
    /// Writes checkpoint `number` of `map` and then its root, both with FUA. Checkpoint
    /// `n` goes to slot `n % 2` and its root to copy `n % 2`, so the previous pair stays
    /// intact until the new root is durable.
    async fn write_checkpoint(
        inner: &Inner,
        geo: &LogGeometry,
        number: u64,
        next_seq: u64,
        map: &[super::format::Loc],
    ) -> Result<()> {
        let mut bytes = encode_checkpoint(inner.uuid, number, next_seq, map);
        let len = bytes.len() as u64;
        if len > geo.checkpoint_capacity() {
            return Err(VolumeError::Invalid(format!(
                "log checkpoint of {len} bytes exceeds its slot ({})",
                geo.checkpoint_capacity()
            )));
        }
        let crc = crc32c::crc32c(&bytes);
        bytes.resize(geo.align_up(len) as usize, 0);
        let slot = (number % 2) as usize;
        inner
            .write_volume(geo.checkpoint_offset(slot), IoBuf::from_slice(&bytes), true)
            .await?;
        let root = Root {
            volume_uuid: inner.uuid,
            checkpoint: number,
            checkpoint_bytes: len,
            checkpoint_crc: crc,
        };
        inner
            .write_volume(
                LogGeometry::root_offset(slot),
                IoBuf::from_slice(&root.encode()),
                true,
            )
            .await?;
        Ok(())
    }

    /// Lays out an empty log on a new volume: checkpoint 1 with an empty map.
    pub(crate) async fn format(inner: &Inner, geo: &LogGeometry) -> Result<()> {
        let map = vec![super::format::Loc::NONE; 0];
        // The other root copy may hold anything (assume_clean): make it invalid.
        inner
            .write_volume(
                LogGeometry::root_offset(0),
                IoBuf::new_zeroed(ROOT_BYTES),
                true,
            )
            .await?;
        Self::write_checkpoint(inner, geo, 1, 1, &map).await
    }

    /// Writes a checkpoint of the current map: drains the segment writes in flight,
    /// flushes the members, writes the checkpoint and its root, then turns every segment
    /// emptied since the last checkpoint into a free one.
    pub async fn checkpoint(self: &Arc<Self>) -> Result<()> {
        let _one = self.ckpt_lock.lock().await;
        let mut rx = self.progress.subscribe();
        self.st().ckpt_blocking = true;
        let r = async {
            loop {
                if self.st().inflight == 0 {
                    break;
                }
                let _ = rx.changed().await;
            }
            self.inner.flush_volume().await?;
            let (number, next_seq, map) = {
                let st = self.st();
                (st.checkpoint_no + 1, st.next_seq, st.space.map.clone())
            };
            Self::write_checkpoint(&self.inner, &self.geo, number, next_seq, &map).await?;
            let mut st = self.st();
            st.checkpoint_no = number;
            st.flushed_seq = st.flushed_seq.max(next_seq);
            st.segs_since_ckpt = 0;
            st.space.reset_free();
            Ok(())
        }
        .await;
        self.st().ckpt_blocking = false;
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        self.bump();
        self.kick_seal();
        r
    }

    /// Brings the log up from the array: the newest valid root and its checkpoint, then
    /// the segments written since, in allocation order. Writes a checkpoint if it
    /// replayed anything, so allocation starts from a clean free list.
    pub(crate) async fn open(inner: Arc<Inner>, params: LogParams) -> Result<Arc<LogEngine>> {
        let geo = geometry(&inner, &params)?;
        let roots = inner
            .read_volume(0, IoBuf::new_zeroed(2 * ROOT_BYTES))
            .await?;
        let mut candidates: Vec<Root> = (0..2)
            .filter_map(|c| Root::decode(&roots[c * ROOT_BYTES..(c + 1) * ROOT_BYTES], inner.uuid))
            .collect();
        candidates.sort_by_key(|r| std::cmp::Reverse(r.checkpoint));
        let mut found = None;
        let mut why = String::from("no valid log root");
        for root in candidates {
            let slot = (root.checkpoint % 2) as usize;
            if root.checkpoint_bytes > geo.checkpoint_capacity() {
                why = "log root names a checkpoint larger than its slot".into();
                continue;
            }
            let len = geo.align_up(root.checkpoint_bytes) as usize;
            let bytes = inner
                .read_volume(geo.checkpoint_offset(slot), IoBuf::new_zeroed(len))
                .await?;
            let bytes = &bytes[..root.checkpoint_bytes as usize];
            if crc32c::crc32c(bytes) != root.checkpoint_crc {
                why = format!("log checkpoint {} checksum mismatch", root.checkpoint);
                continue;
            }
            match decode_checkpoint(bytes, inner.uuid, &geo) {
                Ok(c) if c.number == root.checkpoint => {
                    found = Some(c);
                    break;
                }
                Ok(_) => why = "log checkpoint number differs from its root".into(),
                Err(e) => why = e,
            }
        }
        let ck =
            found.ok_or_else(|| VolumeError::Invalid(format!("volume {}: {why}", inner.name)))?;
        let mut space = Space::new(&geo);
        for (lba, loc) in &ck.entries {
            space.apply(
                loc.seg,
                &[super::format::Record::Write {
                    lba: *lba,
                    loc: *loc,
                }],
            );
        }
        space.reset_free();
        let free: Vec<u32> = space.free.iter().copied().collect();
        let mut replayed = 0u64;
        let mut misses = 0usize;
        let mut next_seq = ck.next_seq;
        for (j, &seg) in free.iter().enumerate() {
            let expected = ck.next_seq + j as u64;
            let data = inner
                .read_volume(
                    geo.segment_offset(seg),
                    IoBuf::new_zeroed(geo.segment_bytes as usize),
                )
                .await?;
            match decode_summary(&data, &geo, inner.uuid, seg) {
                Some(s) if s.seq == expected && payloads_intact(&data, &s) => {
                    space.apply(seg, &s.records);
                    replayed += 1;
                    misses = 0;
                    next_seq = expected + 1;
                }
                _ => {
                    misses += 1;
                    if misses > REPLAY_MISS_LIMIT {
                        break;
                    }
                }
            }
        }
        let checkpoint_no = ck.number;
        let log = Arc::new(LogEngine::new(
            inner.clone(),
            geo,
            params,
            space,
            checkpoint_no,
            next_seq,
        ));
        if replayed > 0 {
            // Replayed segments become part of a checkpoint; torn ones are forgotten.
            {
                let mut st = log.st();
                st.next_seq = next_seq;
                st.apply_seq = next_seq;
            }
            log.checkpoint().await?;
        } else {
            // Nothing after the checkpoint: allocation resumes at its free list.
            log.st().space.reset_free();
        }
        info!(volume = %inner.name, checkpoint = checkpoint_no, replayed, "log layout opened");
        Ok(log)
    }
}

/// The log geometry of an array (from the superblock's parameters).
pub(crate) fn geometry(inner: &Inner, params: &LogParams) -> Result<LogGeometry> {
    LogGeometry::new(
        inner.geo.volume_bytes(),
        inner.row_data_bytes(),
        inner.su(),
        params.block_bytes,
        params.logical_blocks,
        inner.info.logical_block_bytes,
    )
    .map_err(VolumeError::Invalid)
}
