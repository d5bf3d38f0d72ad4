//! Checkpoints (the map made durable in one piece), the log root, formatting a new log
//! and replay at assembly.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use blockdev::IoBuf;
use tracing::info;

use super::engine::{LogEngine, REPLAY_MISS_LIMIT};
use super::format::{
    CHECKPOINT_ENTRY_BYTES, CHECKPOINT_HEADER_BYTES, Loc, LogGeometry, MAX_DELTAS, Piece,
    ROOT_BYTES, Root, decode_checkpoint, decode_delta, decode_summary, encode_checkpoint,
    encode_delta, payloads_intact,
};
use super::params::LogParams;
use super::state::Space;
use crate::engine::Inner;
use crate::error::{Result, VolumeError};

/// The pieces of the current checkpoint: a base (the whole map) at offset 0 of `slot`,
/// then deltas. The next checkpoint appends a delta at `tail` when there is room and it is
/// small beside the map, else writes a base into the other slot.
pub(super) struct Chain {
    pub slot: u32,
    pub base: Piece,
    pub deltas: Vec<Piece>,
    /// Where the next delta goes in the slot; `None`: the next checkpoint is a base
    /// (after assembly: the blocks changed since the chain's pieces are not tracked).
    pub tail: Option<u64>,
}

/// Most entries in a delta, as a share of the mapped blocks (beyond that a base is about
/// as cheap to write and cheaper to read back).
const DELTA_MAX_PERCENT_OF_BASE: u64 = 50;

impl LogEngine {
    /// Writes a checkpoint piece (base or delta) at `offset` of checkpoint slot `slot`
    /// (not FUA: the member flush before its root makes it durable).
    async fn write_piece(
        inner: &Inner,
        geo: &LogGeometry,
        slot: u32,
        offset: u64,
        mut bytes: Vec<u8>,
    ) -> Result<Piece> {
        let len = bytes.len() as u64;
        if offset + geo.align_up(len) > geo.checkpoint_capacity() {
            return Err(VolumeError::Invalid(format!(
                "log checkpoint piece of {len} bytes at {offset} exceeds its slot ({})",
                geo.checkpoint_capacity()
            )));
        }
        let crc = crc32c::crc32c(&bytes);
        bytes.resize(geo.align_up(len) as usize, 0);
        inner
            .write_volume(
                geo.checkpoint_offset(slot as usize) + offset,
                IoBuf::from_slice(&bytes),
                false,
            )
            .await?;
        Ok(Piece {
            offset_bytes: offset,
            len_bytes: len,
            crc,
        })
    }

    /// Writes the root of checkpoint `root.checkpoint` to copy `number % 2`, FUA. The
    /// previous checkpoint and its root stay intact until this write is durable.
    async fn write_root(inner: &Inner, root: &Root) -> Result<()> {
        let copy = (root.checkpoint % 2) as usize;
        inner
            .write_volume(
                LogGeometry::root_offset(copy),
                IoBuf::from_slice(&root.encode()),
                true,
            )
            .await?;
        Ok(())
    }

    /// Lays out an empty log on a new volume: checkpoint 1 with an empty map (a base in
    /// slot 1).
    pub(crate) async fn format(inner: &Inner, geo: &LogGeometry) -> Result<()> {
        // The other root copy may hold anything (assume_clean): make it invalid.
        inner
            .write_volume(
                LogGeometry::root_offset(0),
                IoBuf::new_zeroed(ROOT_BYTES),
                true,
            )
            .await?;
        let bytes = encode_checkpoint(inner.uuid, 1, 1, &[]);
        let base = Self::write_piece(inner, geo, 1, 0, bytes).await?;
        inner.flush_volume().await?;
        let root = Root {
            volume_uuid: inner.uuid,
            checkpoint: 1,
            checkpoint_bytes: base.len_bytes,
            checkpoint_crc: base.crc,
            slot: 1,
            deltas: Vec::new(),
            head: Vec::new(),
        };
        Self::write_root(inner, &root).await
    }

    /// Writes a checkpoint of the current map without pausing the write pipeline:
    ///
    /// 1. Under the state lock: the map as of `A` = every segment below `A` applied (a
    ///    delta: only the blocks changed since the last checkpoint; a base: the whole
    ///    map), the segments empty in it, and the open checkpoint's head = the segments in
    ///    flight (sequences `A..`). Segments sealed from now on join the head.
    /// 2. The piece is written (a delta after the chain's last piece, a base into the
    ///    other slot: nothing the current root names is overwritten) and the members are
    ///    flushed (every segment below `A` is applied, so written: now durable), while
    ///    segment writes go on from the previous checkpoint's free list.
    /// 3. Sealing pauses for the root write alone: the root (its head = every segment
    ///    allocated since `A`, in sequence order) is written FUA.
    /// 4. The segments empty in the map and not in the head become the free list
    ///    (ascending): exactly the order replay derives from the root.
    pub async fn checkpoint(self: &Arc<Self>) -> Result<()> {
        let _one = self.ckpt_lock.lock().await;
        let (number, next_seq, piece, map, dirty, empty, delta_at, slot) = {
            let mut st = self.st();
            let head: Vec<u32> = st.flights.values().map(|f| f.seg).collect();
            st.ckpt_head = Some(head);
            let number = st.checkpoint_no + 1;
            let next_seq = st.apply_seq;
            let dirty = st.space.take_dirty();
            let delta_bytes =
                (CHECKPOINT_HEADER_BYTES + dirty.len() * CHECKPOINT_ENTRY_BYTES) as u64;
            let chain = &st.chain;
            let delta_at = chain.tail.filter(|&t| {
                chain.deltas.len() < MAX_DELTAS
                    && t + self.geo.align_up(delta_bytes) <= self.geo.checkpoint_capacity()
                    && dirty.len() as u64 * 100
                        <= st.space.mapped_blocks * DELTA_MAX_PERCENT_OF_BASE
            });
            let (slot, piece) = match delta_at {
                Some(_) => {
                    let entries: Vec<(u64, Loc)> = dirty
                        .iter()
                        .map(|&lba| (lba, st.space.map[lba as usize]))
                        .collect();
                    (
                        chain.slot,
                        encode_delta(self.uuid, number, next_seq, &entries),
                    )
                }
                // The whole map: copied here, encoded outside the lock.
                None => (1 - chain.slot, Vec::new()),
            };
            let map = delta_at.is_none().then(|| st.space.map.clone());
            let empty = st.space.empty_segments();
            (number, next_seq, piece, map, dirty, empty, delta_at, slot)
        };
        // Whatever ends the checkpoint (an error, or the keeper aborted at stop), sealing
        // resumes and no head is kept open.
        let close = CloseCheckpoint {
            log: self,
            dirty: Some(dirty),
        };
        let r = async {
            let piece = match map {
                Some(map) => encode_checkpoint(self.uuid, number, next_seq, &map),
                None => piece,
            };
            let written =
                Self::write_piece(&self.inner, &self.geo, slot, delta_at.unwrap_or(0), piece)
                    .await?;
            self.inner.flush_volume().await?;
            let (head, chain) = {
                let mut st = self.st();
                st.flushed_seq = st.flushed_seq.max(next_seq);
                st.ckpt_blocking = true;
                let head = st.ckpt_head.clone().unwrap_or_default();
                let mut chain = Chain {
                    slot,
                    base: written,
                    deltas: Vec::new(),
                    tail: None,
                };
                if delta_at.is_some() {
                    chain.base = st.chain.base;
                    chain.deltas = st.chain.deltas.clone();
                    chain.deltas.push(written);
                }
                chain.tail = Some(written.offset_bytes + self.geo.align_up(written.len_bytes));
                (head, chain)
            };
            let root = Root {
                volume_uuid: self.uuid,
                checkpoint: number,
                checkpoint_bytes: chain.base.len_bytes,
                checkpoint_crc: chain.base.crc,
                slot,
                deltas: chain.deltas.clone(),
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
            st.chain = chain;
            st.segs_since_ckpt = root.head.len() as u64;
            self.counters
                .checkpoint_head_segments
                .fetch_add(root.head.len() as u64, Ordering::Relaxed);
            if delta_at.is_some() {
                self.counters
                    .checkpoint_deltas
                    .fetch_add(1, Ordering::Relaxed);
            }
            st.space.install_free(&empty, &root.head);
            Ok(())
        }
        .await;
        let mut close = close;
        if r.is_ok() {
            close.dirty = None;
            self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        }
        drop(close);
        r
    }

    /// Reads and checks the checkpoint `root` names (its base, then its deltas in
    /// order) into a map. `Ok(Err(why))`: this root's checkpoint is not usable.
    async fn load_checkpoint(
        inner: &Inner,
        geo: &LogGeometry,
        root: &Root,
    ) -> Result<std::result::Result<(u64, Space), String>> {
        let read = |offset: u64, len: u64| async move {
            if offset + geo.align_up(len) > geo.checkpoint_capacity() {
                return Ok(None);
            }
            let mut buf = inner
                .read_volume(
                    geo.checkpoint_offset(root.slot as usize) + offset,
                    IoBuf::new_zeroed(geo.align_up(len) as usize),
                )
                .await?;
            buf.set_len(len as usize);
            Ok::<_, VolumeError>(Some(buf))
        };
        let Some(bytes) = read(0, root.checkpoint_bytes).await? else {
            return Ok(Err(
                "log root names a checkpoint larger than its slot".into()
            ));
        };
        if crc32c::crc32c(&bytes) != root.checkpoint_crc {
            return Ok(Err(format!(
                "log checkpoint {} checksum mismatch",
                root.checkpoint
            )));
        }
        let base = match decode_checkpoint(&bytes, inner.uuid, geo) {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        let mut space = Space::new(geo);
        for (lba, loc) in &base.entries {
            space.load_entry(*lba, *loc);
        }
        let (mut number, mut next_seq) = (base.number, base.next_seq);
        for (i, d) in root.deltas.iter().enumerate() {
            let Some(bytes) = read(d.offset_bytes, d.len_bytes).await? else {
                return Ok(Err(format!(
                    "log checkpoint delta {i} lies outside its slot"
                )));
            };
            if crc32c::crc32c(&bytes) != d.crc {
                return Ok(Err(format!("log checkpoint delta {i} checksum mismatch")));
            }
            let delta = match decode_delta(&bytes, inner.uuid, geo) {
                Ok(c) => c,
                Err(e) => return Ok(Err(e)),
            };
            if delta.number <= number || delta.next_seq < next_seq {
                return Ok(Err(format!("log checkpoint delta {i} out of order")));
            }
            for (lba, loc) in &delta.entries {
                space.load_entry(*lba, *loc);
            }
            (number, next_seq) = (delta.number, delta.next_seq);
        }
        if number != root.checkpoint {
            return Ok(Err("log checkpoint number differs from its root".into()));
        }
        Ok(Ok((next_seq, space)))
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
            match Self::load_checkpoint(&inner, &geo, &root).await? {
                Ok((next_seq, space)) => match space.allocation_order(&root.head) {
                    Some(order) => {
                        found = Some((root, next_seq, space, order));
                        break;
                    }
                    None => why = "log root's head does not fit its checkpoint".into(),
                },
                Err(e) => why = e,
            }
        }
        let (root, ck_next_seq, mut space, free) =
            found.ok_or_else(|| VolumeError::Invalid(format!("volume {}: {why}", inner.name)))?;
        space.set_free_order(&free);
        // Blocks the replay changes are not tracked for a delta: the first checkpoint
        // is a base.
        let chain = Chain {
            slot: root.slot,
            base: Piece {
                offset_bytes: 0,
                len_bytes: root.checkpoint_bytes,
                crc: root.checkpoint_crc,
            },
            deltas: root.deltas.clone(),
            tail: None,
        };
        let mut replayed = 0u64;
        let mut misses = 0usize;
        let mut next_seq = ck_next_seq;
        for (j, &seg) in free.iter().enumerate() {
            let expected = ck_next_seq + j as u64;
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
        let checkpoint_no = root.checkpoint;
        space.take_dirty();
        let log = Arc::new(LogEngine::new(
            inner.clone(),
            geo,
            params,
            space,
            checkpoint_no,
            next_seq,
            chain,
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

/// Closes an open checkpoint when dropped: the head is forgotten, the blocks it took
/// as changed are changed again unless it succeeded, and sealing resumes.
struct CloseCheckpoint<'a> {
    log: &'a Arc<LogEngine>,
    dirty: Option<Vec<u64>>,
}

impl Drop for CloseCheckpoint<'_> {
    fn drop(&mut self) {
        {
            let mut st = self.log.st();
            st.ckpt_blocking = false;
            st.ckpt_head = None;
            if let Some(d) = self.dirty.take() {
                st.space.restore_dirty(&d);
            }
        }
        self.log.bump();
        // What gathered while the root was written goes out.
        self.log.kick_seal(true);
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
