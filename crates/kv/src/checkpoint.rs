//! Index checkpoints: two slots used in turn (generation `g` goes to slot `g % 2`). A
//! checkpoint is the index, the segment table and the log position they correspond to;
//! recovery loads the newest valid one and replays the log from its position.
//!
//! Writing: body to the slot, flush, header block, flush. The header (with the body's
//! checksum) is written only once the body is durable, so a torn checkpoint has an old or
//! invalid header and the other slot is used.

use blockdev::{BlockDevice, BlockError, IoBuf, WriteFlags};

use crate::KvError;
use crate::bytes::{align_up, get_u32, put_u32};
use crate::format::{
    CheckpointHeader, INDEX_ENTRY_BYTES, Layout, LogPosition, NO_SEGMENT, SEGMENT_ENTRY_BYTES,
    checkpoint_body_bytes, decode_index_entry, encode_index_entry,
};
use crate::inner::Inner;
use crate::state::{SegState, Segment, State};
use crate::stats::add;

/// Largest single I/O of checkpoint writes and reads.
const CHUNK_BYTES: usize = 1 << 20;

/// A consistent copy of the state, ready to write.
pub(crate) struct Snapshot {
    pub header: CheckpointHeader,
    /// Body padded to whole blocks.
    pub body: Vec<u8>,
    /// Segments this checkpoint frees once durable.
    pub pending_free: Vec<u32>,
    /// Segments this checkpoint covers once durable.
    pub sealed: Vec<u32>,
    pub log_bytes: u64,
}

/// Serialises `st` (segment table, then index entries in key order).
pub(crate) fn encode_state(
    layout: &Layout,
    st: &State,
    generation: u64,
) -> Result<Snapshot, KvError> {
    let entries = st.index.len() as u64;
    if entries > layout.max_keys {
        return Err(KvError::CapacityExceeded(format!(
            "{entries} keys do not fit a checkpoint of {} keys",
            layout.max_keys
        )));
    }
    let body_len = checkpoint_body_bytes(u64::from(layout.segment_count), entries)
        .ok_or_else(|| KvError::Corrupt("checkpoint size overflows".into()))?;
    let mut body = vec![0u8; align_up(body_len, layout.block()) as usize];
    let mut pending_free = Vec::new();
    let mut sealed = Vec::new();
    for (i, s) in st.segments.iter().enumerate() {
        let i = i as u32;
        let used = match s.state {
            SegState::Sealed => {
                if !s.covered {
                    sealed.push(i);
                }
                true
            }
            SegState::Open => true,
            SegState::Reserved => i == st.applied.successor,
            SegState::PendingFree => {
                pending_free.push(i);
                false
            }
            SegState::Free => false,
        };
        let at = i as usize * SEGMENT_ENTRY_BYTES;
        put_u32(&mut body, at, if used { s.written } else { 0 });
        put_u32(&mut body, at + 4, u32::from(used));
    }
    let mut at = layout.segment_count as usize * SEGMENT_ENTRY_BYTES;
    for (key, e) in &st.index {
        encode_index_entry(&mut body[at..at + INDEX_ENTRY_BYTES], key, e);
        at += INDEX_ENTRY_BYTES;
    }
    let header = CheckpointHeader {
        uuid: layout.uuid,
        generation,
        body_bytes: body_len,
        body_crc: crc32c::crc32c(&body[..body_len as usize]),
        segment_count: layout.segment_count,
        entry_count: entries,
        log: st.applied,
    };
    Ok(Snapshot {
        header,
        body,
        pending_free,
        sealed,
        log_bytes: st.applied_log_bytes,
    })
}

/// Writes a snapshot to its slot: body, flush, header, flush.
pub(crate) async fn write(
    dev: &dyn BlockDevice,
    layout: &Layout,
    snap: &Snapshot,
) -> Result<u64, BlockError> {
    let slot = layout.checkpoint_offsets[(snap.header.generation % 2) as usize];
    let block = layout.block();
    let mut written = 0u64;
    for (i, chunk) in snap.body.chunks(CHUNK_BYTES).enumerate() {
        let off = slot + block + (i * CHUNK_BYTES) as u64;
        dev.write(off, IoBuf::from_slice(chunk), WriteFlags::default())
            .await?;
        written += chunk.len() as u64;
    }
    dev.flush().await?;
    let header = snap.header.encode(block as usize);
    dev.write(slot, IoBuf::from_slice(&header), WriteFlags::default())
        .await?;
    dev.flush().await?;
    Ok(written + block)
}

/// Takes a snapshot under the state's read lock and writes it; once durable, frees the
/// segments it no longer needs and marks the sealed ones covered.
pub(crate) async fn checkpoint(inner: &Inner, generation: u64) -> Result<CheckpointDone, KvError> {
    let snap = {
        let st = inner.read();
        if let Some(reason) = &st.failed {
            return Err(KvError::Failed(reason.clone()));
        }
        encode_state(&inner.layout, &st, generation)?
    };
    let bytes = write(inner.dev.as_ref(), &inner.layout, &snap)
        .await
        .map_err(KvError::Device)?;
    let mut freed = 0u64;
    {
        let mut st = inner.write();
        st.checkpoint_log_bytes = snap.log_bytes;
        st.checkpoint_body_bytes = snap.header.body_bytes;
        for &s in &snap.sealed {
            let seg = &mut st.segments[s as usize];
            if seg.state == SegState::Sealed {
                seg.covered = true;
            }
        }
        for &s in &snap.pending_free {
            if st.segments[s as usize].state == SegState::PendingFree {
                // Readers that looked this segment up before see the change and retry.
                inner.bump_generation(s);
                st.segments[s as usize] = Segment::free();
                freed += 1;
            }
        }
    }
    let c = &inner.counters;
    add(&c.checkpoints, 1);
    add(&c.checkpoint_bytes_written, bytes);
    add(&c.segments_reclaimed, freed);
    add(
        &c.compaction_bytes_reclaimed,
        freed * inner.layout.segment(),
    );
    if freed > 0 {
        inner.space_wake.notify_one();
    }
    Ok(CheckpointDone {
        segments_freed: freed,
    })
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CheckpointDone {
    pub segments_freed: u64,
}

/// A checkpoint read back at open.
pub(crate) struct Loaded {
    pub header: CheckpointHeader,
    pub state: State,
    pub slot: usize,
    /// Set when the newest checkpoint was unusable and an older one was used.
    pub fallback: Option<String>,
}

async fn read(dev: &dyn BlockDevice, offset: u64, len: u64) -> Result<IoBuf, BlockError> {
    let mut out = IoBuf::new_zeroed(len as usize);
    let mut done = 0usize;
    while done < out.len() {
        let n = CHUNK_BYTES.min(out.len() - done);
        let buf = dev.read(offset + done as u64, IoBuf::new_zeroed(n)).await?;
        out[done..done + n].copy_from_slice(&buf);
        done += n;
    }
    Ok(out)
}

/// Loads the newest checkpoint whose header and body check out.
pub(crate) async fn load(dev: &dyn BlockDevice, layout: &Layout) -> Result<Loaded, KvError> {
    let block = layout.block();
    let mut headers = Vec::new();
    let mut reasons = Vec::new();
    for (slot, &off) in layout.checkpoint_offsets.iter().enumerate() {
        let h = match dev.read(off, IoBuf::new_zeroed(block as usize)).await {
            Ok(b) => CheckpointHeader::decode(&b),
            Err(e) => Err(format!("read error: {e}")),
        };
        match h {
            Ok(h) if h.uuid != layout.uuid => {
                reasons.push(format!("slot {slot}: from another store"));
            }
            Ok(h) if h.generation % 2 != slot as u64 => {
                reasons.push(format!(
                    "slot {slot}: generation {} belongs to the other slot",
                    h.generation
                ));
            }
            Ok(h) => headers.push((slot, h)),
            Err(r) => reasons.push(format!("slot {slot}: {r}")),
        }
    }
    headers.sort_by_key(|(_, h)| std::cmp::Reverse(h.generation));
    let mut fallback = None;
    for (slot, h) in headers {
        match load_body(dev, layout, slot, &h).await {
            Ok(state) => {
                return Ok(Loaded {
                    header: h,
                    state,
                    slot,
                    fallback,
                });
            }
            Err(r) => {
                let why = format!("slot {slot} (generation {}): {r}", h.generation);
                tracing::warn!(device = %dev.info().name, "KV checkpoint unusable: {why}");
                fallback.get_or_insert_with(|| why.clone());
                reasons.push(why);
            }
        }
    }
    Err(KvError::Corrupt(format!(
        "no valid checkpoint ({})",
        reasons.join("; ")
    )))
}

async fn load_body(
    dev: &dyn BlockDevice,
    layout: &Layout,
    slot: usize,
    h: &CheckpointHeader,
) -> Result<State, String> {
    if h.segment_count != layout.segment_count {
        return Err(format!(
            "{} segments, format has {}",
            h.segment_count, layout.segment_count
        ));
    }
    if h.entry_count > layout.max_keys {
        return Err(format!(
            "{} keys, format allows {}",
            h.entry_count, layout.max_keys
        ));
    }
    let expect = checkpoint_body_bytes(u64::from(h.segment_count), h.entry_count);
    if expect != Some(h.body_bytes) {
        return Err("body size does not match its counts".into());
    }
    let block = layout.block();
    let padded = align_up(h.body_bytes, block);
    if padded + block > layout.checkpoint_slot_bytes {
        return Err("body larger than the slot".into());
    }
    let body = read(dev, layout.checkpoint_offsets[slot] + block, padded)
        .await
        .map_err(|e| format!("read error: {e}"))?;
    let body = &body[..h.body_bytes as usize];
    if crc32c::crc32c(body) != h.body_crc {
        return Err("body checksum mismatch".into());
    }
    decode_state(layout, h.log, body)
}

/// Rebuilds the state from a checksummed body, checking that it is self-consistent.
pub(crate) fn decode_state(
    layout: &Layout,
    log: LogPosition,
    body: &[u8],
) -> Result<State, String> {
    let count = layout.segment_count;
    let seg_bytes = layout.segment();
    let block = layout.block();
    if log.segment >= count
        || u64::from(log.offset) > seg_bytes
        || !u64::from(log.offset).is_multiple_of(block)
        || (log.successor != NO_SEGMENT && (log.successor >= count || log.successor == log.segment))
    {
        return Err(format!(
            "log position segment {} offset {} successor {} is impossible",
            log.segment, log.offset, log.successor
        ));
    }
    let mut st = State::new(count, log);
    for i in 0..count {
        let at = i as usize * SEGMENT_ENTRY_BYTES;
        let (Some(written), Some(used)) = (get_u32(body, at), get_u32(body, at + 4)) else {
            return Err("short segment table".into());
        };
        if used > 1 || u64::from(written) > seg_bytes || !u64::from(written).is_multiple_of(block) {
            return Err(format!("segment {i}: impossible entry"));
        }
        let seg = &mut st.segments[i as usize];
        if used == 1 {
            seg.written = written;
            seg.state = SegState::Sealed;
            seg.covered = true;
        }
    }
    {
        let open = &mut st.segments[log.segment as usize];
        if open.state != SegState::Sealed || open.written != log.offset {
            return Err(format!(
                "log segment {} not in use at its offset",
                log.segment
            ));
        }
        open.state = SegState::Open;
        open.covered = false;
    }
    if log.successor != NO_SEGMENT {
        let succ = &mut st.segments[log.successor as usize];
        if succ.state != SegState::Sealed || succ.written != 0 {
            return Err(format!("successor segment {} not reserved", log.successor));
        }
        succ.state = SegState::Reserved;
        succ.covered = false;
    }
    let entries = body
        .get(count as usize * SEGMENT_ENTRY_BYTES..)
        .ok_or("short body")?;
    for raw in entries.chunks_exact(INDEX_ENTRY_BYTES) {
        let (key, e) = decode_index_entry(raw).ok_or("entry with an impossible key")?;
        let seg = layout.segment_of(e.addr);
        let in_seg = e.addr % seg_bytes;
        let ok = e.len >= 1
            && e.len <= layout.max_value_bytes
            && seg < count
            && matches!(
                st.segments[seg as usize].state,
                SegState::Sealed | SegState::Open
            )
            && in_seg + u64::from(e.len) <= u64::from(st.segments[seg as usize].written);
        if !ok {
            return Err(format!("entry {key:?} points outside the written log"));
        }
        if st.index.contains_key(&key) {
            return Err(format!("key {key:?} twice"));
        }
        st.put(layout, key, e);
    }
    Ok(st)
}

/// The checkpoint a freshly formatted store starts from: empty index, log at segment 0
/// offset 0 with segment 1 as its successor.
pub(crate) fn initial(layout: &Layout) -> Result<Snapshot, KvError> {
    let log = LogPosition {
        segment: 0,
        offset: 0,
        successor: 1,
        prev_crc: initial_prev_crc(layout),
        next_batch_seq: 1,
        next_record_seq: 1,
    };
    let mut st = State::new(layout.segment_count, log);
    st.segments[0].state = SegState::Open;
    st.segments[1].state = SegState::Reserved;
    encode_state(layout, &st, 1)
}

/// The chain value the first batch links to (derived from the store's identity, so a
/// batch left by an earlier format never links).
pub(crate) fn initial_prev_crc(layout: &Layout) -> u32 {
    crc32c::crc32c(&layout.uuid)
}
