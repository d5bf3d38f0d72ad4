//! Opening a store: load the newest valid checkpoint, then replay the log from its
//! position. Replay follows the chain batch by batch and stops at the first place where
//! no valid batch continues it (see `docs/kv.md`, "Recovery"): a batch is valid when its
//! magic, store id, sequence number, chain link (the previous batch's meta checksum),
//! position, size, meta checksum and every value checksum match. At a segment's end the
//! log continues at offset 0 of the successor named by the segment's batches.

use blockdev::{BlockDevice, BlockError, IoBuf};

use crate::KvError;
use crate::checkpoint;
use crate::format::{
    BATCH_HEADER_BYTES, DESCRIPTOR_BYTES, Descriptor, Entry, Layout, LogPosition, NO_SEGMENT,
    RecordKind, decode_batch_header, decode_batch_meta,
};
use crate::state::{SegState, State};

/// What opening a store found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The checkpoint recovery started from.
    pub checkpoint_generation: u64,
    /// Its slot (0 or 1).
    pub checkpoint_slot: usize,
    /// Why the newest checkpoint was not used, if it was not (damaged body).
    pub checkpoint_fallback: Option<String>,
    pub replayed_batches: u64,
    pub replayed_records: u64,
    pub replayed_bytes: u64,
    /// Where the log ends (the next batch goes here).
    pub log_end_segment: u32,
    pub log_end_offset: u32,
    /// Why replay stopped there (normally: no batch continues the chain).
    pub stop_reason: String,
    pub key_count: u64,
}

pub(crate) struct Recovered {
    pub state: State,
    pub pos: LogPosition,
    pub report: RecoveryReport,
    pub generation: u64,
}

/// A batch that continues the chain.
struct Batch {
    bytes: u32,
    next_segment: u32,
    meta_crc: u32,
    descs: Vec<Descriptor>,
}

pub(crate) async fn recover(dev: &dyn BlockDevice, layout: &Layout) -> Result<Recovered, KvError> {
    let loaded = checkpoint::load(dev, layout).await?;
    let mut st = loaded.state;
    st.checkpoint_body_bytes = loaded.header.body_bytes;
    let mut pos = loaded.header.log;
    let mut report = RecoveryReport {
        checkpoint_generation: loaded.header.generation,
        checkpoint_slot: loaded.slot,
        checkpoint_fallback: loaded.fallback,
        ..RecoveryReport::default()
    };
    let stop_reason = loop {
        let here = try_batch(dev, layout, &st, &pos, pos.segment, pos.offset).await?;
        let (segment, offset, batch) = match here {
            Ok(b) => (pos.segment, pos.offset, b),
            Err(here_reason) => {
                if pos.successor == NO_SEGMENT {
                    break here_reason;
                }
                match try_batch(dev, layout, &st, &pos, pos.successor, 0).await? {
                    Ok(b) => (pos.successor, 0, b),
                    Err(next_reason) => break format!("{here_reason}; {next_reason}"),
                }
            }
        };
        if st.index.len() as u64 + batch.descs.len() as u64 > layout.max_keys
            && would_exceed_keys(&st, &batch, layout.max_keys)
        {
            break format!(
                "batch {} at segment {segment} offset {offset} would exceed {} keys",
                pos.next_batch_seq, layout.max_keys
            );
        }
        let base = layout.addr(segment, offset);
        let mut next_record_seq = pos.next_record_seq;
        for d in &batch.descs {
            let entry = Entry {
                addr: base + u64::from(d.value_offset),
                seq: d.seq,
                len: d.value_len,
                crc: d.value_crc,
            };
            match d.kind {
                RecordKind::Put => st.put(layout, d.key, entry),
                RecordKind::Tombstone => st.remove(layout, &d.key),
                RecordKind::Relocate => {
                    st.relocate(layout, d.key, entry);
                }
            }
            next_record_seq = next_record_seq.max(d.seq.saturating_add(1));
        }
        let end = LogPosition {
            segment,
            offset: offset + batch.bytes,
            successor: batch.next_segment,
            prev_crc: batch.meta_crc,
            next_batch_seq: pos.next_batch_seq + 1,
            next_record_seq,
        };
        st.advance(segment, offset, batch.bytes, end);
        pos = end;
        report.replayed_batches += 1;
        report.replayed_records += batch.descs.len() as u64;
        report.replayed_bytes += u64::from(batch.bytes);
    };
    // Replay may have sealed segments after the checkpoint: they are not covered.
    st.checkpoint_log_bytes = 0;
    st.applied_log_bytes = report.replayed_bytes;
    report.log_end_segment = pos.segment;
    report.log_end_offset = pos.offset;
    report.stop_reason = stop_reason;
    report.key_count = st.index.len() as u64;
    Ok(Recovered {
        state: st,
        pos,
        report,
        generation: loaded.header.generation,
    })
}

fn would_exceed_keys(st: &State, batch: &Batch, max_keys: u64) -> bool {
    let mut keys = st.index.len() as i64;
    let mut seen = std::collections::HashMap::new();
    for d in &batch.descs {
        let exists = *seen
            .entry(d.key)
            .or_insert_with(|| st.index.contains_key(&d.key));
        match d.kind {
            RecordKind::Put if !exists => {
                keys += 1;
                seen.insert(d.key, true);
            }
            RecordKind::Tombstone if exists => {
                keys -= 1;
                seen.insert(d.key, false);
            }
            _ => {}
        }
        if keys > max_keys as i64 {
            return true;
        }
    }
    false
}

/// Reads and validates the batch that would continue the chain at (`segment`,
/// `offset`). `Ok(Err(reason))`: no valid batch there. `Err`: the device failed in a way
/// that makes opening impossible (not a media error, which just ends the log).
async fn try_batch(
    dev: &dyn BlockDevice,
    layout: &Layout,
    st: &State,
    pos: &LogPosition,
    segment: u32,
    offset: u32,
) -> Result<Result<Batch, String>, KvError> {
    let at = format!("segment {segment} offset {offset}");
    let block = layout.block();
    let seg_bytes = layout.segment();
    if u64::from(offset) + block > seg_bytes {
        return Ok(Err(format!("{at}: segment full")));
    }
    let dev_off = layout.device_offset(layout.addr(segment, offset));
    let first = match read(dev, dev_off, block).await? {
        Ok(b) => b,
        Err(r) => return Ok(Err(format!("{at}: {r}"))),
    };
    let Some((h, meta_crc)) = decode_batch_header(&first) else {
        return Ok(Err(format!("{at}: no batch (end of log)")));
    };
    if h.uuid != layout.uuid {
        return Ok(Err(format!("{at}: batch of another store")));
    }
    if h.batch_seq != pos.next_batch_seq {
        return Ok(Err(format!(
            "{at}: batch sequence {} where {} continues the log",
            h.batch_seq, pos.next_batch_seq
        )));
    }
    if h.prev_crc != pos.prev_crc {
        return Ok(Err(format!(
            "{at}: batch {} does not link to the previous batch",
            h.batch_seq
        )));
    }
    let bytes = u64::from(h.batch_bytes);
    let max_records = bytes.saturating_sub(BATCH_HEADER_BYTES as u64) / DESCRIPTOR_BYTES as u64;
    if h.segment != segment
        || h.offset != offset
        || bytes < block
        || !bytes.is_multiple_of(block)
        || u64::from(offset) + bytes > seg_bytes
        || u64::from(h.record_count) > max_records
    {
        return Ok(Err(format!(
            "{at}: batch {} header fields are impossible",
            h.batch_seq
        )));
    }
    if !next_segment_ok(st, pos, segment, h.next_segment) {
        return Ok(Err(format!(
            "{at}: batch {} names segment {} as successor, which is in use",
            h.batch_seq, h.next_segment
        )));
    }
    let whole = if bytes == block {
        first
    } else {
        match read(dev, dev_off, bytes).await? {
            Ok(b) => b,
            Err(r) => return Ok(Err(format!("{at}: {r}"))),
        }
    };
    let Some(descs) = decode_batch_meta(&whole, &h, meta_crc, layout.max_value_bytes) else {
        return Ok(Err(format!(
            "{at}: batch {} meta checksum mismatch (torn or damaged)",
            h.batch_seq
        )));
    };
    for d in &descs {
        if d.kind == RecordKind::Tombstone {
            continue;
        }
        let start = d.value_offset as usize;
        let value = &whole[start..start + d.value_len as usize];
        if crc32c::crc32c(value) != d.value_crc {
            return Ok(Err(format!(
                "{at}: batch {} value of key {:?} fails its checksum (torn or damaged)",
                h.batch_seq, d.key
            )));
        }
    }
    Ok(Ok(Batch {
        bytes: h.batch_bytes,
        next_segment: h.next_segment,
        meta_crc,
        descs,
    }))
}

/// The successor a batch names must be the one already chosen, or (if none was) a free
/// segment other than its own.
fn next_segment_ok(st: &State, pos: &LogPosition, segment: u32, next: u32) -> bool {
    // The successor known in the batch's own segment: when the batch starts the
    // successor segment, its own successor is not chosen yet.
    let known = if segment == pos.segment {
        pos.successor
    } else {
        NO_SEGMENT
    };
    if next == known {
        return true;
    }
    if known != NO_SEGMENT {
        return false;
    }
    next == NO_SEGMENT
        || (next != segment
            && next != pos.segment
            && st
                .segments
                .get(next as usize)
                .is_some_and(|s| s.state == SegState::Free))
}

async fn read(
    dev: &dyn BlockDevice,
    offset: u64,
    len: u64,
) -> Result<Result<IoBuf, String>, KvError> {
    match dev.read(offset, IoBuf::new_zeroed(len as usize)).await {
        Ok(b) => Ok(Ok(b)),
        Err(BlockError::Media { offset_bytes }) => {
            Ok(Err(format!("media error at device offset {offset_bytes}")))
        }
        Err(e) => Err(KvError::Device(e)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use blockdev::{RamDevice, WriteFlags};
    use proptest::prelude::*;

    use super::*;
    use crate::bytes::put_u32;
    use crate::checkpoint::{decode_state, initial_prev_crc};
    use crate::format::{FormatOptions, SEGMENT_ENTRY_BYTES, meta_bytes};

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    async fn formatted() -> (Arc<dyn BlockDevice>, Layout) {
        let dev: Arc<dyn BlockDevice> = Arc::new(RamDevice::new("kv", 4 << 20));
        let opts = FormatOptions {
            segment_bytes: 64 << 10,
            max_value_bytes: 8 << 10,
            max_keys: Some(64),
        };
        let info = crate::Kv::format(&dev, &opts).await.unwrap();
        let b = dev.read(0, IoBuf::new_zeroed(4096)).await.unwrap();
        let layout = Layout::decode(&b, 4 << 20).unwrap();
        assert_eq!(layout.segment_count, info.segment_count);
        (dev, layout)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Batches that pass every checksum but carry arbitrary fields and descriptors:
        /// replay never panics and never indexes a value outside the written log.
        #[test]
        fn forged_batches_never_panic(
            batch_blocks in 1u32..40,
            next_segment in prop_oneof![Just(NO_SEGMENT), 0u32..80],
            descs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 40), 0..6),
            kinds in proptest::collection::vec(0u8..5, 6),
            fix_crcs in any::<bool>(),
            seed in any::<u8>(),
        ) {
            rt().block_on(async {
                let (dev, layout) = formatted().await;
                let bytes = batch_blocks as usize * 512;
                let mut buf = vec![seed; bytes.max(meta_bytes(descs.len()))];
                buf[..BATCH_HEADER_BYTES].fill(0);
                buf[0..8].copy_from_slice(b"FBKVLOG1");
                put_u32(&mut buf, 12, descs.len() as u32);
                buf[16..24].copy_from_slice(&1u64.to_le_bytes());
                put_u32(&mut buf, 24, initial_prev_crc(&layout));
                put_u32(&mut buf, 28, bytes as u32);
                put_u32(&mut buf, 40, next_segment);
                buf[48..64].copy_from_slice(&layout.uuid);
                for (i, d) in descs.iter().enumerate() {
                    let at = BATCH_HEADER_BYTES + i * DESCRIPTOR_BYTES;
                    buf[at..at + DESCRIPTOR_BYTES].copy_from_slice(d);
                    buf[at + 16] %= 18;
                    buf[at + 17] = kinds[i];
                    if fix_crcs {
                        // Make the value checksum match whatever the descriptor points at.
                        let len = u32::from_le_bytes(buf[at + 20..at + 24].try_into().unwrap()) % 600;
                        let off = u32::from_le_bytes(buf[at + 24..at + 28].try_into().unwrap()) % bytes as u32;
                        put_u32(&mut buf, at + 20, len);
                        put_u32(&mut buf, at + 24, off);
                        let end = (off + len) as usize;
                        if end <= buf.len() {
                            let crc = crc32c::crc32c(&buf[off as usize..end]);
                            put_u32(&mut buf, at + 28, crc);
                        }
                    }
                }
                let meta = meta_bytes(descs.len());
                let crc = crc32c::crc32c(&buf[12..meta]);
                put_u32(&mut buf, 8, crc);
                buf.resize(buf.len().div_ceil(512) * 512, 0);
                dev.write(layout.device_offset(0), IoBuf::from_slice(&buf), WriteFlags::default())
                    .await
                    .unwrap();
                if let Ok(r) = recover(dev.as_ref(), &layout).await {
                    for e in r.state.index.values() {
                        let seg = layout.segment_of(e.addr) as usize;
                        let in_seg = e.addr % layout.segment();
                        prop_assert!(in_seg + u64::from(e.len) <= u64::from(r.state.segments[seg].written));
                        prop_assert!(e.len >= 1 && e.len <= layout.max_value_bytes);
                    }
                }
                Ok(())
            })?;
        }

        /// Checkpoint bodies that pass their checksum but hold arbitrary bytes.
        #[test]
        fn forged_checkpoint_bodies_never_panic(
            body in proptest::collection::vec(any::<u8>(), 0..4096),
            segment in 0u32..100,
            successor in prop_oneof![Just(NO_SEGMENT), 0u32..100],
            offset in 0u32..70_000,
        ) {
            rt().block_on(async {
                let (_dev, layout) = formatted().await;
                let mut body = body;
                // A plausible segment table so decoding reaches the entries sometimes.
                let table = layout.segment_count as usize * SEGMENT_ENTRY_BYTES;
                if body.len() > table {
                    for i in 0..layout.segment_count as usize {
                        body[i * 8 + 4] &= 1;
                        body[i * 8 + 5..i * 8 + 8].fill(0);
                    }
                }
                let log = LogPosition {
                    segment,
                    offset,
                    successor,
                    prev_crc: 0,
                    next_batch_seq: 1,
                    next_record_seq: 1,
                };
                let _ = decode_state(&layout, log, &body);
            });
        }
    }
}
