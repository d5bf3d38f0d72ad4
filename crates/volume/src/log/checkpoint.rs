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
    /// Writes checkpoint `number` of `map` into slot `number % 2` (not FUA: the member
    /// flush before its root makes it durable). Returns its length and CRC for the root.
    async fn write_checkpoint_body(
        inner: &Inner,
        geo: &LogGeometry,
        number: u64,
        next_seq: u64,
        map: &[super::format::Loc],
    ) -> Result<(u64, u32)> {
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
            .write_volume(
                geo.checkpoint_offset(slot),
                IoBuf::from_slice(&bytes),
                false,
            )
            .await?;
        Ok((len, crc))
    }

    /// Writes the root of checkpoint `root.checkpoint` to copy `number % 2`, FUA. The
    /// previous checkpoint and its root stay intact until this write is durable.
    async fn write_root(inner: &Inner, root: &Root) -> Result<()> {
        let slot = (root.checkpoint % 2) as usize;
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
        let (len, crc) = Self::write_checkpoint_body(inner, geo, 1, 1, &map).await?;
        inner.flush_volume().await?;
        let root = Root {
            volume_uuid: inner.uuid,
            checkpoint: 1,
            checkpoint_bytes: len,
            checkpoint_crc: crc,
            head: Vec::new(),
        };
        Self::write_root(inner, &root).await
    }

    /// Writes a checkpoint of the current map without pausing the write pipeline:
    ///
    /// 1. Under the state lock: the map as of `A` = every segment below `A` applied, the
    ///    segments empty in it, and the open checkpoint's head = the segments in flight
    ///    (sequences `A..`). Segments sealed from now on join the head.
    /// 2. The map is written to the checkpoint slot and the members are flushed (every
    ///    segment below `A` is applied, so written: now durable), while segment writes
    ///    go on from the previous checkpoint's free list.
    /// 3. Sealing pauses for the root write alone: the root (its head = every segment
    ///    allocated since `A`, in sequence order) is written FUA.
    /// 4. The segments empty in the map and not in the head become the free list
    ///    (ascending): exactly the order replay derives from the root.
    pub async fn checkpoint(self: &Arc<Self>) -> Result<()> {
        let _one = self.ckpt_lock.lock().await;
        let (number, next_seq, map, empty) = {
            let mut st = self.st();
            let head: Vec<u32> = st.flights.values().map(|f| f.seg).collect();
            st.ckpt_head = Some(head);
            (
                st.checkpoint_no + 1,
                st.apply_seq,
                st.space.map.clone(),
                st.space.empty_segments(),
            )
        };
        // Whatever ends the checkpoint (an error, or the keeper aborted at stop), sealing
        // resumes and no head is kept open.
        let _close = CloseCheckpoint(self);
        let r = async {
            let (len, crc) =
                Self::write_checkpoint_body(&self.inner, &self.geo, number, next_seq, &map).await?;
            drop(map);
            self.inner.flush_volume().await?;
            let head = {
                let mut st = self.st();
                st.flushed_seq = st.flushed_seq.max(next_seq);
                st.ckpt_blocking = true;
                st.ckpt_head.clone().unwrap_or_default()
            };
            let root = Root {
                volume_uuid: self.uuid,
                checkpoint: number,
                checkpoint_bytes: len,
                checkpoint_crc: crc,
                head,
            };
            if let Err(e) = Self::write_root(&self.inner, &root).await {
                // The root may or may not be on the members: which allocation order
                // replay follows is unknown, so no segment may be allocated again.
                self.st().failed.get_or_insert_with(|| e.to_string());
                return Err(e);
            }
            let mut st = self.st();
            st.checkpoint_no = number;
            st.segs_since_ckpt = root.head.len() as u64;
            self.counters
                .checkpoint_head_segments
                .fetch_add(root.head.len() as u64, Ordering::Relaxed);
            st.space.install_free(&empty, &root.head);
            Ok(())
        }
        .await;
        drop(_close);
        if r.is_ok() {
            self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        }
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
            let ck = match decode_checkpoint(bytes, inner.uuid, &geo) {
                Ok(c) if c.number == root.checkpoint => c,
                Ok(_) => {
                    why = "log checkpoint number differs from its root".into();
                    continue;
                }
                Err(e) => {
                    why = e;
                    continue;
                }
            };
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
            match space.allocation_order(&root.head) {
                Some(order) => {
                    found = Some((ck, space, order));
                    break;
                }
                None => why = "log root's head does not fit its checkpoint".into(),
            }
        }
        let (ck, mut space, free) =
            found.ok_or_else(|| VolumeError::Invalid(format!("volume {}: {why}", inner.name)))?;
        space.set_free_order(&free);
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
            // Nothing after the checkpoint: allocation resumes in its order (the root's
            // head first).
            log.st().space.set_free_order(&free);
        }
        info!(volume = %inner.name, checkpoint = checkpoint_no, replayed, "log layout opened");
        Ok(log)
    }
}

/// Closes an open checkpoint when dropped: the head is forgotten and sealing resumes.
struct CloseCheckpoint<'a>(&'a Arc<LogEngine>);

impl Drop for CloseCheckpoint<'_> {
    fn drop(&mut self) {
        {
            let mut st = self.0.st();
            st.ckpt_blocking = false;
            st.ckpt_head = None;
        }
        self.0.bump();
        // What gathered while the root was written goes out.
        self.0.kick_seal();
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
