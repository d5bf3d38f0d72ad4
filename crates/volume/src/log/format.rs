//! On-array format of the log layout (see "Log layout" in `docs/volume-format.md`): the
//! geometry of the array space, the log root, checkpoints and segment summaries. Offsets
//! are bytes of the *array space*: the address space of the in-place rotating engine
//! underneath, so every structure here is striped and protected by parity like data.

use uuid::Uuid;

use crate::format::codec::*;

pub const ROOT_MAGIC: [u8; 8] = *b"FBLOGRT1";
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"FBLOGCP1";
pub const SUMMARY_MAGIC: [u8; 8] = *b"FBLOGSG1";
/// Version of checkpoints and segment summaries.
pub const LOG_FORMAT_VERSION: u32 = 1;
/// Version of the log root written now: 2 carries the allocation head (the segments
/// sealed while its checkpoint was written). Version 1 roots (no head) are still read.
pub const ROOT_FORMAT_VERSION: u32 = 2;
pub const DELTA_MAGIC: [u8; 8] = *b"FBLOGDL1";
/// Byte offset of the delta table in a version 2 root, and its entries' size.
const ROOT_DELTAS_AT: usize = 64;
const ROOT_DELTA_BYTES: usize = 24;
/// Most deltas chained after a base checkpoint (a version 2 root lists them all).
pub const MAX_DELTAS: usize = 32;
/// Byte offset of the head's entries in a version 2 root.
const ROOT_HEAD_AT: usize = ROOT_DELTAS_AT + MAX_DELTAS * ROOT_DELTA_BYTES;
/// Most segments a version 2 root's head lists.
pub const MAX_ROOT_HEAD: usize = (4096 - ROOT_HEAD_AT) / 4;
pub const ROOT_BYTES: usize = 4096;
pub const CHECKPOINT_HEADER_BYTES: usize = 4096;
pub const CHECKPOINT_ENTRY_BYTES: usize = 32;
pub const TRAILER_BYTES: usize = 64;
pub const SUMMARY_ENTRY_BYTES: usize = 32;
/// Segment index meaning "none" in the map.
pub const NO_SEGMENT: u32 = u32::MAX;

/// Where everything lives in the array space. Unit = one row of data (`segment_bytes` =
/// k × stripe unit): unit 0 holds the two root copies, then two checkpoint slots of
/// `checkpoint_units` each, then the segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogGeometry {
    pub segment_bytes: u64,
    pub stripe_unit_bytes: u64,
    pub checkpoint_units: u64,
    pub segments: u32,
    pub block_bytes: u32,
    pub logical_blocks: u64,
    /// The array's logical block: payloads start on multiples of it.
    pub align_bytes: u32,
}

impl LogGeometry {
    /// Checkpoint slot size for `logical_blocks` map entries.
    fn checkpoint_units_for(logical_blocks: u64, segment_bytes: u64) -> u64 {
        (CHECKPOINT_HEADER_BYTES as u64 + logical_blocks * CHECKPOINT_ENTRY_BYTES as u64)
            .div_ceil(segment_bytes)
    }

    /// Raw (incompressible) blocks one segment holds, with its summary and the rule
    /// that a block never straddles a chunk.
    pub fn raw_blocks_per_segment(
        segment_bytes: u64,
        stripe_unit_bytes: u64,
        block_bytes: u32,
        align_bytes: u32,
    ) -> u64 {
        let (bs, su, a) = (
            u64::from(block_bytes),
            stripe_unit_bytes,
            u64::from(align_bytes),
        );
        let mut fill = 0u64;
        let mut n = 0u64;
        loop {
            let mut off = fill.div_ceil(a) * a;
            if bs <= su && off / su != (off + bs - 1) / su {
                off = (off / su + 1) * su;
            }
            let summary =
                ((TRAILER_BYTES as u64 + (n + 1) * SUMMARY_ENTRY_BYTES as u64).div_ceil(a)) * a;
            if off + bs + summary > segment_bytes {
                return n;
            }
            fill = off + bs;
            n += 1;
        }
    }

    /// The logical capacity a new volume gets: `export_percent` of what the segments
    /// hold in raw blocks, so that even incompressible data leaves garbage collection
    /// sparse segments to work with.
    pub fn plan_logical_blocks(
        array_bytes: u64,
        segment_bytes: u64,
        stripe_unit_bytes: u64,
        block_bytes: u32,
        align_bytes: u32,
        export_percent: u32,
    ) -> u64 {
        let per_seg = Self::raw_blocks_per_segment(
            segment_bytes,
            stripe_unit_bytes,
            block_bytes,
            align_bytes,
        );
        let units = array_bytes / segment_bytes;
        let guess = units.saturating_sub(1) * per_seg * u64::from(export_percent) / 100;
        let ck = Self::checkpoint_units_for(guess, segment_bytes);
        let segments = units.saturating_sub(1 + 2 * ck);
        guess.min(segments * per_seg * u64::from(export_percent) / 100)
    }

    pub fn new(
        array_bytes: u64,
        segment_bytes: u64,
        stripe_unit_bytes: u64,
        block_bytes: u32,
        logical_blocks: u64,
        align_bytes: u32,
    ) -> Result<LogGeometry, String> {
        let units = array_bytes / segment_bytes;
        let checkpoint_units = Self::checkpoint_units_for(logical_blocks, segment_bytes);
        let segments = units.saturating_sub(1 + 2 * checkpoint_units);
        if segments < 16 {
            return Err(format!(
                "the array holds {segments} log segments of {segment_bytes} bytes (at least 16)"
            ));
        }
        if segment_bytes < 2 * u64::from(block_bytes) + 4096 {
            return Err(format!(
                "a stripe of {segment_bytes} data bytes is too small for {block_bytes}-byte log blocks"
            ));
        }
        if logical_blocks * u64::from(block_bytes) > segments * segment_bytes {
            return Err("logical capacity exceeds the segment space".into());
        }
        Ok(LogGeometry {
            segment_bytes,
            stripe_unit_bytes,
            checkpoint_units,
            segments: u32::try_from(segments).unwrap_or(u32::MAX - 1),
            block_bytes,
            logical_blocks,
            align_bytes,
        })
    }

    pub fn root_offset(copy: usize) -> u64 {
        (copy as u64) * ROOT_BYTES as u64
    }

    pub fn checkpoint_offset(&self, slot: usize) -> u64 {
        self.segment_bytes * (1 + slot as u64 * self.checkpoint_units)
    }

    pub fn checkpoint_capacity(&self) -> u64 {
        self.checkpoint_units * self.segment_bytes
    }

    pub fn segment_offset(&self, seg: u32) -> u64 {
        self.segment_bytes * (1 + 2 * self.checkpoint_units + u64::from(seg))
    }

    /// Bytes at the end of a segment taken by a summary of `entries` entries.
    pub fn summary_bytes(&self, entries: usize) -> u64 {
        let raw = (TRAILER_BYTES + entries * SUMMARY_ENTRY_BYTES) as u64;
        raw.div_ceil(u64::from(self.align_bytes)) * u64::from(self.align_bytes)
    }

    pub fn align_up(&self, x: u64) -> u64 {
        x.div_ceil(u64::from(self.align_bytes)) * u64::from(self.align_bytes)
    }
}

/// The log root: which checkpoint is current. Two copies at array offsets 0 and 4096;
/// checkpoint `n` goes to slot `n % 2` and its root to copy `n % 2`.
///
/// `head`: the segments allocated (in sequence order, from the checkpoint's `next_seq`
/// on) before the root was written: they were sealed while the checkpoint was written,
/// from the free list of the previous one. The allocation order that replay follows is
/// `head`, then every other segment without a live block in the checkpoint, ascending.
///
/// The checkpoint is a **base** (the whole map, at offset 0 of checkpoint slot `slot`;
/// its length and CRC are `checkpoint_bytes`/`checkpoint_crc`) followed by `deltas`:
/// pieces in the same slot, each the map entries changed since the piece before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Root {
    pub volume_uuid: Uuid,
    pub checkpoint: u64,
    pub checkpoint_bytes: u64,
    pub checkpoint_crc: u32,
    pub slot: u32,
    pub deltas: Vec<Piece>,
    pub head: Vec<u32>,
}

/// One delta of a checkpoint: where it is in its slot and its checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Byte offset in the checkpoint slot (a multiple of the array's sector).
    pub offset_bytes: u64,
    pub len_bytes: u64,
    pub crc: u32,
}

impl Root {
    /// Version 2 encoding (at most `MAX_ROOT_HEAD` head entries are kept: the engine
    /// never seals more while a checkpoint is open).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; ROOT_BYTES];
        put(&mut b, 0, &ROOT_MAGIC);
        put_u32(&mut b, 8, ROOT_FORMAT_VERSION);
        put(&mut b, 16, self.volume_uuid.as_bytes());
        put_u64(&mut b, 32, self.checkpoint);
        put_u64(&mut b, 40, self.checkpoint_bytes);
        put_u32(&mut b, 48, self.checkpoint_crc);
        let deltas = &self.deltas[..self.deltas.len().min(MAX_DELTAS)];
        put_u32(&mut b, 56, deltas.len() as u32);
        put_u32(&mut b, 60, self.slot);
        for (i, d) in deltas.iter().enumerate() {
            let at = ROOT_DELTAS_AT + ROOT_DELTA_BYTES * i;
            put_u64(&mut b, at, d.offset_bytes);
            put_u64(&mut b, at + 8, d.len_bytes);
            put_u32(&mut b, at + 16, d.crc);
        }
        let head = &self.head[..self.head.len().min(MAX_ROOT_HEAD)];
        put_u32(&mut b, 52, head.len() as u32);
        for (i, seg) in head.iter().enumerate() {
            put_u32(&mut b, ROOT_HEAD_AT + 4 * i, *seg);
        }
        let crc = crc32c::crc32c(&b);
        put_u32(&mut b, 12, crc);
        b
    }

    /// `None` for anything but a valid root (version 1 or 2) of this volume. The head's
    /// entries are checked against the geometry by the caller.
    pub fn decode(b: &[u8], volume_uuid: Uuid) -> Option<Root> {
        let b = b.get(..ROOT_BYTES)?;
        let version = u32_at(b, 8);
        if get::<8>(b, 0) != ROOT_MAGIC || !(1..=ROOT_FORMAT_VERSION).contains(&version) {
            return None;
        }
        if !crc_ok(b, 12) || Uuid::from_bytes(get(b, 16)) != volume_uuid {
            return None;
        }
        let checkpoint = u64_at(b, 32);
        let (slot, deltas, head) = if version >= 2 {
            let (h, d, slot) = (
                u32_at(b, 52) as usize,
                u32_at(b, 56) as usize,
                u32_at(b, 60),
            );
            if h > MAX_ROOT_HEAD || d > MAX_DELTAS || slot > 1 {
                return None;
            }
            let deltas = (0..d)
                .map(|i| {
                    let at = ROOT_DELTAS_AT + ROOT_DELTA_BYTES * i;
                    Piece {
                        offset_bytes: u64_at(b, at),
                        len_bytes: u64_at(b, at + 8),
                        crc: u32_at(b, at + 16),
                    }
                })
                .collect();
            let head = (0..h).map(|i| u32_at(b, ROOT_HEAD_AT + 4 * i)).collect();
            (slot, deltas, head)
        } else {
            ((checkpoint % 2) as u32, Vec::new(), Vec::new())
        };
        Some(Root {
            volume_uuid,
            checkpoint,
            checkpoint_bytes: u64_at(b, 40),
            checkpoint_crc: u32_at(b, 48),
            slot,
            deltas,
            head,
        })
    }
}

/// CRC32C of `b` with the 4 bytes at `at` taken as zero equals the value stored there.
fn crc_ok(b: &[u8], at: usize) -> bool {
    let stored = u32_at(b, at);
    let mut h = crc32c::crc32c(&b[..at]);
    h = crc32c::crc32c_append(h, &[0u8; 4]);
    h = crc32c::crc32c_append(h, b.get(at + 4..).unwrap_or(&[]));
    h == stored
}

/// Where a stored block is: the map entry, in memory and in checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loc {
    pub seg: u32,
    /// Byte offset in the segment (a multiple of the array's logical block).
    pub off: u32,
    /// Stored (possibly compressed) length.
    pub len: u32,
    /// CRC32C of the stored bytes.
    pub crc: u32,
    /// 0 raw, 1 lz4, 2 zstd.
    pub codec: u8,
}

impl Loc {
    pub const NONE: Loc = Loc {
        seg: NO_SEGMENT,
        off: 0,
        len: 0,
        crc: 0,
        codec: 0,
    };

    pub fn is_some(&self) -> bool {
        self.seg != NO_SEGMENT
    }
}

/// Encodes a checkpoint of the map: header then one entry per mapped block.
pub fn encode_checkpoint(volume_uuid: Uuid, number: u64, next_seq: u64, map: &[Loc]) -> Vec<u8> {
    let entries = map
        .iter()
        .enumerate()
        .filter(|(_, l)| l.is_some())
        .map(|(lba, l)| (lba as u64, *l));
    encode_piece(CHECKPOINT_MAGIC, volume_uuid, number, next_seq, entries)
}

/// Encodes a delta: the entries (ascending, `Loc::NONE` for a block no longer mapped)
/// changed since the checkpoint before it. Same layout as a checkpoint, magic
/// `FBLOGDL1`.
pub fn encode_delta(
    volume_uuid: Uuid,
    number: u64,
    next_seq: u64,
    entries: &[(u64, Loc)],
) -> Vec<u8> {
    encode_piece(
        DELTA_MAGIC,
        volume_uuid,
        number,
        next_seq,
        entries.iter().copied(),
    )
}

fn encode_piece(
    magic: [u8; 8],
    volume_uuid: Uuid,
    number: u64,
    next_seq: u64,
    entries: impl Iterator<Item = (u64, Loc)>,
) -> Vec<u8> {
    let mut b = vec![0u8; CHECKPOINT_HEADER_BYTES];
    let mut count = 0u64;
    for (lba, l) in entries {
        let at = b.len();
        b.resize(at + CHECKPOINT_ENTRY_BYTES, 0);
        put_u64(&mut b, at, lba);
        put_u32(&mut b, at + 8, l.seg);
        put_u32(&mut b, at + 12, l.off);
        put_u32(&mut b, at + 16, l.len);
        put_u32(&mut b, at + 20, l.crc);
        put_u8(&mut b, at + 24, l.codec);
        count += 1;
    }
    let entries_crc = crc32c::crc32c(&b[CHECKPOINT_HEADER_BYTES..]);
    put(&mut b, 0, &magic);
    put_u32(&mut b, 8, LOG_FORMAT_VERSION);
    put(&mut b, 16, volume_uuid.as_bytes());
    put_u64(&mut b, 32, number);
    put_u64(&mut b, 40, next_seq);
    put_u64(&mut b, 48, count);
    put_u32(&mut b, 56, entries_crc);
    let crc = crc32c::crc32c(&b[..CHECKPOINT_HEADER_BYTES]);
    put_u32(&mut b, 12, crc);
    b
}

/// A decoded checkpoint or delta.
pub struct Checkpoint {
    pub number: u64,
    pub next_seq: u64,
    /// Delta entries may be `Loc::NONE` (the block is no longer mapped).
    pub entries: Vec<(u64, Loc)>,
}

/// Decodes a checkpoint; every entry is checked against the geometry.
pub fn decode_checkpoint(
    b: &[u8],
    volume_uuid: Uuid,
    geo: &LogGeometry,
) -> Result<Checkpoint, String> {
    decode_piece(b, volume_uuid, geo, false)
}

/// Decodes a delta; every entry is checked against the geometry.
pub fn decode_delta(b: &[u8], volume_uuid: Uuid, geo: &LogGeometry) -> Result<Checkpoint, String> {
    decode_piece(b, volume_uuid, geo, true)
}

fn decode_piece(
    b: &[u8],
    volume_uuid: Uuid,
    geo: &LogGeometry,
    delta: bool,
) -> Result<Checkpoint, String> {
    let what = if delta {
        "checkpoint delta"
    } else {
        "checkpoint"
    };
    let magic = if delta { DELTA_MAGIC } else { CHECKPOINT_MAGIC };
    let h = b
        .get(..CHECKPOINT_HEADER_BYTES)
        .ok_or(format!("{what} too short"))?;
    if get::<8>(h, 0) != magic || u32_at(h, 8) != LOG_FORMAT_VERSION {
        return Err(format!("{what}: bad magic or version"));
    }
    if !crc_ok(h, 12) || Uuid::from_bytes(get(h, 16)) != volume_uuid {
        return Err(format!("{what}: header checksum or volume mismatch"));
    }
    let count = u64_at(h, 48);
    if count > geo.logical_blocks {
        return Err(format!("{what}: more entries than logical blocks"));
    }
    let end = CHECKPOINT_HEADER_BYTES + count as usize * CHECKPOINT_ENTRY_BYTES;
    let body = b
        .get(CHECKPOINT_HEADER_BYTES..end)
        .ok_or(format!("{what}: truncated"))?;
    if crc32c::crc32c(body) != u32_at(h, 56) {
        return Err(format!("{what}: entries checksum mismatch"));
    }
    let mut entries = Vec::with_capacity(count as usize);
    for e in body.chunks_exact(CHECKPOINT_ENTRY_BYTES) {
        let lba = u64_at(e, 0);
        let loc = Loc {
            seg: u32_at(e, 8),
            off: u32_at(e, 12),
            len: u32_at(e, 16),
            crc: u32_at(e, 20),
            codec: u8_at(e, 24),
        };
        if delta && loc == Loc::NONE {
            if lba >= geo.logical_blocks {
                return Err(format!("{what}: block beyond the volume"));
            }
        } else {
            check_loc(geo, lba, &loc).map_err(|m| format!("{what}: {m}"))?;
        }
        entries.push((lba, loc));
    }
    Ok(Checkpoint {
        number: u64_at(h, 32),
        next_seq: u64_at(h, 40),
        entries,
    })
}

fn check_loc(geo: &LogGeometry, lba: u64, l: &Loc) -> Result<(), &'static str> {
    if lba >= geo.logical_blocks {
        return Err("block beyond the volume");
    }
    if l.seg >= geo.segments
        || u64::from(l.off) + u64::from(l.len) > geo.segment_bytes
        || l.len == 0
        || l.len > geo.block_bytes
        || l.codec > 2
        || (l.codec == 0 && l.len != geo.block_bytes)
    {
        return Err("entry out of bounds");
    }
    Ok(())
}

/// One record of a segment summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// Block `lba` stored at `loc` (in this segment).
    Write { lba: u64, loc: Loc },
    /// Blocks `[lba, lba + count)` dropped (Deallocate, Write Zeroes).
    Trim { lba: u64, count: u32 },
    /// Garbage collection moved block `lba` from (`src_seg`, `src_off`) to `loc`; applies
    /// only if the map still points at the source.
    Move {
        lba: u64,
        loc: Loc,
        src_seg: u32,
        src_off: u32,
    },
}

const KIND_WRITE: u8 = 1;
const KIND_TRIM: u8 = 2;
const KIND_MOVE: u8 = 3;

/// Writes the summary (records then trailer) into the last bytes of `seg`.
pub fn encode_summary(
    seg: &mut [u8],
    geo: &LogGeometry,
    volume_uuid: Uuid,
    seq: u64,
    index: u32,
    records: &[Record],
) {
    let sb = geo.summary_bytes(records.len()) as usize;
    let len = seg.len();
    let area = &mut seg[len - sb..];
    area.fill(0);
    for (i, r) in records.iter().enumerate() {
        let at = i * SUMMARY_ENTRY_BYTES;
        let (lba, kind, loc, a, b) = match *r {
            Record::Write { lba, loc } => (lba, KIND_WRITE, loc, 0, 0),
            Record::Trim { lba, count } => (
                lba,
                KIND_TRIM,
                Loc {
                    off: count,
                    ..Loc::NONE
                },
                0,
                0,
            ),
            Record::Move {
                lba,
                loc,
                src_seg,
                src_off,
            } => (lba, KIND_MOVE, loc, src_seg, src_off),
        };
        put_u64(area, at, lba);
        put_u32(area, at + 8, loc.off);
        put_u32(area, at + 12, loc.len);
        put_u32(area, at + 16, loc.crc);
        put_u8(area, at + 20, kind);
        put_u8(area, at + 21, loc.codec);
        put_u32(area, at + 24, a);
        put_u32(area, at + 28, b);
    }
    let t = sb - TRAILER_BYTES;
    put(area, t, &SUMMARY_MAGIC);
    put_u32(area, t + 8, LOG_FORMAT_VERSION);
    put(area, t + 16, volume_uuid.as_bytes());
    put_u64(area, t + 32, seq);
    put_u32(area, t + 40, index);
    put_u32(area, t + 44, records.len() as u32);
    put_u32(area, t + 48, sb as u32);
    let crc = crc32c::crc32c(area);
    put_u32(area, t + 12, crc);
}

/// A decoded segment summary.
pub struct Summary {
    pub seq: u64,
    pub records: Vec<Record>,
}

/// Decodes the summary at the end of segment `index` (the whole segment in `seg`), or
/// `None` if it is not a valid summary of this volume and segment. Payload checksums are
/// not checked here (see `payloads_intact`).
pub fn decode_summary(
    seg: &[u8],
    geo: &LogGeometry,
    volume_uuid: Uuid,
    index: u32,
) -> Option<Summary> {
    let len = seg.len();
    let t = seg.get(len.checked_sub(TRAILER_BYTES)?..)?;
    if get::<8>(t, 0) != SUMMARY_MAGIC || u32_at(t, 8) != LOG_FORMAT_VERSION {
        return None;
    }
    if Uuid::from_bytes(get(t, 16)) != volume_uuid || u32_at(t, 40) != index {
        return None;
    }
    let count = u32_at(t, 44) as usize;
    let sb = u32_at(t, 48) as usize;
    if count > len / SUMMARY_ENTRY_BYTES || sb as u64 != geo.summary_bytes(count) || sb > len {
        return None;
    }
    let area = &seg[len - sb..];
    if !crc_ok(area, sb - TRAILER_BYTES + 12) {
        return None;
    }
    let payload_end = (len - sb) as u64;
    let mut records = Vec::with_capacity(count);
    for e in area[..count * SUMMARY_ENTRY_BYTES].chunks_exact(SUMMARY_ENTRY_BYTES) {
        let lba = u64_at(e, 0);
        let loc = Loc {
            seg: index,
            off: u32_at(e, 8),
            len: u32_at(e, 12),
            crc: u32_at(e, 16),
            codec: u8_at(e, 21),
        };
        let r = match u8_at(e, 20) {
            KIND_TRIM => {
                let count = u32_at(e, 8);
                if lba.checked_add(u64::from(count))? > geo.logical_blocks {
                    return None;
                }
                Record::Trim { lba, count }
            }
            kind @ (KIND_WRITE | KIND_MOVE) => {
                check_loc(geo, lba, &loc).ok()?;
                if u64::from(loc.off) + u64::from(loc.len) > payload_end {
                    return None;
                }
                if kind == KIND_WRITE {
                    Record::Write { lba, loc }
                } else {
                    Record::Move {
                        lba,
                        loc,
                        src_seg: u32_at(e, 24),
                        src_off: u32_at(e, 28),
                    }
                }
            }
            _ => return None,
        };
        records.push(r);
    }
    Some(Summary {
        seq: u64_at(t, 32),
        records,
    })
}

/// Every stored block of the summary matches its checksum (a segment torn by a crash
/// fails this and is ignored as a whole: none of its writes were acknowledged).
pub fn payloads_intact(seg: &[u8], s: &Summary) -> bool {
    s.records.iter().all(|r| match r {
        Record::Write { loc, .. } | Record::Move { loc, .. } => {
            let (a, b) = (loc.off as usize, loc.off as usize + loc.len as usize);
            seg.get(a..b).is_some_and(|p| crc32c::crc32c(p) == loc.crc)
        }
        Record::Trim { .. } => true,
    })
}

/// Offset of the trailer's seq field, for reading a candidate segment's trailer alone.
pub fn trailer_seq(trailer: &[u8], volume_uuid: Uuid, index: u32) -> Option<u64> {
    let t = trailer.get(trailer.len().checked_sub(TRAILER_BYTES)?..)?;
    (get::<8>(t, 0) == SUMMARY_MAGIC
        && Uuid::from_bytes(get(t, 16)) == volume_uuid
        && u32_at(t, 40) == index)
        .then(|| u64_at(t, 32))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Committed vectors (tests/vectors/log_roots.py writes them from the offsets in
    // docs/volume-format.md, independently of this encoder).
    const ROOT_V1: &[u8] = include_bytes!("../../tests/vectors/log_root_v1.bin");
    const ROOT_V2: &[u8] = include_bytes!("../../tests/vectors/log_root_v2.bin");

    fn uuid() -> Uuid {
        Uuid::from_bytes([0xA5; 16])
    }

    #[test]
    fn version_1_roots_still_decode_with_an_empty_head() {
        let r = Root::decode(ROOT_V1, uuid()).expect("a valid version 1 root");
        assert_eq!(
            r,
            Root {
                volume_uuid: uuid(),
                checkpoint: 7,
                checkpoint_bytes: 4096 + 3 * 32,
                checkpoint_crc: 0x1234_ABCD,
                slot: 1,
                deltas: vec![],
                head: vec![],
            }
        );
        assert!(Root::decode(ROOT_V1, Uuid::from_bytes([1; 16])).is_none());
        let mut bad = ROOT_V1.to_vec();
        bad[33] ^= 1;
        assert!(Root::decode(&bad, uuid()).is_none());
    }

    #[test]
    fn version_2_root_matches_its_vector_byte_for_byte() {
        let r = Root {
            volume_uuid: uuid(),
            checkpoint: 8,
            checkpoint_bytes: 4096 + 5 * 32,
            checkpoint_crc: 0x0BAD_F00D,
            slot: 0,
            deltas: vec![
                Piece {
                    offset_bytes: 8192,
                    len_bytes: 4096 + 2 * 32,
                    crc: 0x1111_2222,
                },
                Piece {
                    offset_bytes: 16384,
                    len_bytes: 4096 + 32,
                    crc: 0x3333_4444,
                },
            ],
            head: vec![17, 3, 250],
        };
        assert_eq!(r.encode(), ROOT_V2);
        assert_eq!(Root::decode(ROOT_V2, uuid()), Some(r));
        // A head count beyond the root's room is refused, not read past the end.
        let mut bad = ROOT_V2.to_vec();
        put_u32(&mut bad, 52, MAX_ROOT_HEAD as u32 + 1);
        put_u32(&mut bad, 12, 0);
        let crc = crc32c::crc32c(&bad);
        put_u32(&mut bad, 12, crc);
        assert!(Root::decode(&bad, uuid()).is_none());
        // Unknown versions are refused.
        let mut v3 = ROOT_V2.to_vec();
        put_u32(&mut v3, 8, 3);
        put_u32(&mut v3, 12, 0);
        let crc = crc32c::crc32c(&v3);
        put_u32(&mut v3, 12, crc);
        assert!(Root::decode(&v3, uuid()).is_none());
    }
}
