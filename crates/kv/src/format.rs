//! The on-disk format (specified with offsets in `docs/kv.md`): superblock, checkpoint
//! header and body, log batches and their record descriptors. Encoding and decoding only;
//! every decoder validates checksums and ranges and never panics on disk content.

use crate::KvError;
use crate::bytes::{align_up, get_array, get_u32, get_u64, put_u32, put_u64};
use crate::key::{Key, MAX_KEY_BYTES};

pub const FORMAT_VERSION: u32 = 1;

pub(crate) const SUPERBLOCK_MAGIC: [u8; 8] = *b"FBKVSUP1";
pub(crate) const CHECKPOINT_MAGIC: [u8; 8] = *b"FBKVCKP1";
pub(crate) const BATCH_MAGIC: [u8; 8] = *b"FBKVLOG1";

/// The superblock region at offset 0 (one 4 KiB I/O on any supported logical block).
pub(crate) const SUPERBLOCK_BYTES: u64 = 4096;
/// Bytes of the superblock covered by its checksum.
const SUPERBLOCK_USED_BYTES: usize = 128;
pub(crate) const CHECKPOINT_HEADER_BYTES: usize = 128;
pub(crate) const BATCH_HEADER_BYTES: usize = 64;
pub(crate) const DESCRIPTOR_BYTES: usize = 40;
pub(crate) const SEGMENT_ENTRY_BYTES: usize = 8;
pub(crate) const INDEX_ENTRY_BYTES: usize = 48;
/// "No segment" in a batch's `next_segment` and a position's `successor`.
pub(crate) const NO_SEGMENT: u32 = u32::MAX;
/// Every region starts at a multiple of this (O_DIRECT alignment for any block size).
pub(crate) const REGION_ALIGN_BYTES: u64 = 4096;
/// Fewest segments a store works with: the open one, its successor, the compaction
/// reserve and room to compact.
pub(crate) const MIN_SEGMENTS: u32 = 8;
/// Largest supported value (the batch offsets are u32 and a value must fit a segment).
pub const MAX_VALUE_BYTES_LIMIT: u32 = 64 << 20;

const _: () = assert!(BATCH_HEADER_BYTES + DESCRIPTOR_BYTES <= 512);
const _: () = assert!(CHECKPOINT_HEADER_BYTES <= 512);
const _: () = assert!(SUPERBLOCK_USED_BYTES <= SUPERBLOCK_BYTES as usize);
const _: () = assert!(INDEX_ENTRY_BYTES >= MAX_KEY_BYTES + 1 + 4 + 4 + 8 + 8);

/// Parameters fixed when a device is formatted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatOptions {
    /// Unit of log allocation and compaction (a multiple of the logical block, at least
    /// twice the largest value's footprint). Default 8 MiB.
    pub segment_bytes: u32,
    /// Largest value. Default 2 MiB.
    pub max_value_bytes: u32,
    /// Most keys the store holds (sizes the checkpoint slots: 48 bytes per key each).
    /// Default: one per 8 KiB of device.
    pub max_keys: Option<u64>,
}

impl Default for FormatOptions {
    fn default() -> FormatOptions {
        FormatOptions {
            segment_bytes: 8 << 20,
            max_value_bytes: 2 << 20,
            max_keys: None,
        }
    }
}

/// Where everything is: the superblock's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub uuid: [u8; 16],
    pub block_bytes: u32,
    pub max_value_bytes: u32,
    pub segment_bytes: u32,
    pub segment_count: u32,
    pub max_keys: u64,
    pub checkpoint_offsets: [u64; 2],
    pub checkpoint_slot_bytes: u64,
    pub data_offset: u64,
}

/// Bytes a checkpoint body needs.
pub(crate) fn checkpoint_body_bytes(segment_count: u64, entries: u64) -> Option<u64> {
    segment_count
        .checked_mul(SEGMENT_ENTRY_BYTES as u64)?
        .checked_add(entries.checked_mul(INDEX_ENTRY_BYTES as u64)?)
}

/// Bytes one batch holding a single record of `value_len` bytes needs (the largest
/// single-record batch must fit a segment twice).
fn single_record_batch_bytes(block: u64, value_len: u64) -> u64 {
    align_up((BATCH_HEADER_BYTES + DESCRIPTOR_BYTES) as u64, block) + align_up(value_len, block)
}

impl Layout {
    /// Lays out a device of `device_bytes` with logical blocks of `block_bytes`.
    pub fn compute(
        device_bytes: u64,
        block_bytes: u32,
        opts: &FormatOptions,
        uuid: [u8; 16],
    ) -> Result<Layout, KvError> {
        let bad = |m: String| Err(KvError::InvalidOptions(m));
        if !block_bytes.is_power_of_two() || !(512..=4096).contains(&block_bytes) {
            return bad(format!(
                "logical block of {block_bytes} bytes (supported: 512 to 4096)"
            ));
        }
        let block = u64::from(block_bytes);
        if opts.max_value_bytes == 0 || opts.max_value_bytes > MAX_VALUE_BYTES_LIMIT {
            return bad(format!(
                "max value of {} bytes (1 to {MAX_VALUE_BYTES_LIMIT})",
                opts.max_value_bytes
            ));
        }
        let seg = u64::from(opts.segment_bytes);
        let need = 2 * single_record_batch_bytes(block, u64::from(opts.max_value_bytes));
        if !seg.is_multiple_of(block) || seg < need {
            return bad(format!(
                "segment of {seg} bytes (a multiple of {block} of at least {need} for values up to {} bytes)",
                opts.max_value_bytes
            ));
        }
        let max_keys = opts
            .max_keys
            .unwrap_or_else(|| (device_bytes / 8192).max(1024));
        if max_keys == 0 {
            return bad("max keys of 0".into());
        }
        let segments_upper = device_bytes / seg;
        let slot = checkpoint_body_bytes(segments_upper, max_keys)
            .map(|b| {
                align_up(
                    b + block.max(CHECKPOINT_HEADER_BYTES as u64),
                    REGION_ALIGN_BYTES,
                )
            })
            .filter(|s| *s < device_bytes);
        let Some(slot) = slot else {
            return bad(format!(
                "{max_keys} keys need more checkpoint space than the device's {device_bytes} bytes"
            ));
        };
        let ckpt0 = SUPERBLOCK_BYTES;
        let ckpt1 = ckpt0 + slot;
        let data_offset = ckpt1 + slot;
        let segment_count = device_bytes.saturating_sub(data_offset) / seg;
        if segment_count < u64::from(MIN_SEGMENTS) {
            return bad(format!(
                "device of {device_bytes} bytes holds {segment_count} segments of {seg} bytes after the checkpoint slots (need {MIN_SEGMENTS})"
            ));
        }
        let segment_count =
            u32::try_from(segment_count.min(u64::from(NO_SEGMENT - 1))).unwrap_or(NO_SEGMENT - 1);
        Ok(Layout {
            uuid,
            block_bytes,
            max_value_bytes: opts.max_value_bytes,
            segment_bytes: opts.segment_bytes,
            segment_count,
            max_keys,
            checkpoint_offsets: [ckpt0, ckpt1],
            checkpoint_slot_bytes: slot,
            data_offset,
        })
    }

    pub fn block(&self) -> u64 {
        u64::from(self.block_bytes)
    }

    pub fn segment(&self) -> u64 {
        u64::from(self.segment_bytes)
    }

    /// Bytes of the data area (all segments).
    pub fn data_bytes(&self) -> u64 {
        u64::from(self.segment_count) * self.segment()
    }

    /// Device offset of a log address (bytes from the start of segment 0).
    pub fn device_offset(&self, addr: u64) -> u64 {
        self.data_offset + addr
    }

    pub fn segment_of(&self, addr: u64) -> u32 {
        (addr / self.segment()) as u32
    }

    pub fn addr(&self, segment: u32, offset: u32) -> u64 {
        u64::from(segment) * self.segment() + u64::from(offset)
    }

    /// Bytes one value of `len` bytes takes in the log (with its descriptor): small values
    /// pack, values of a block or more start on a block boundary.
    pub fn footprint(&self, len: u32) -> u64 {
        let len = u64::from(len);
        let value = if len >= self.block() {
            align_up(len, self.block())
        } else {
            len
        };
        DESCRIPTOR_BYTES as u64 + value
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; SUPERBLOCK_BYTES as usize];
        b[0..8].copy_from_slice(&SUPERBLOCK_MAGIC);
        put_u32(&mut b, 12, FORMAT_VERSION);
        b[16..32].copy_from_slice(&self.uuid);
        put_u32(&mut b, 32, self.block_bytes);
        put_u32(&mut b, 36, MAX_KEY_BYTES as u32);
        put_u32(&mut b, 40, self.max_value_bytes);
        put_u32(&mut b, 44, self.segment_bytes);
        put_u32(&mut b, 48, self.segment_count);
        put_u64(&mut b, 56, self.max_keys);
        put_u64(&mut b, 64, self.checkpoint_offsets[0]);
        put_u64(&mut b, 72, self.checkpoint_offsets[1]);
        put_u64(&mut b, 80, self.checkpoint_slot_bytes);
        put_u64(&mut b, 88, self.data_offset);
        put_u64(&mut b, 96, self.data_offset + self.data_bytes());
        let crc = crc32c::crc32c(&b[12..SUPERBLOCK_USED_BYTES]);
        put_u32(&mut b, 8, crc);
        b
    }

    /// Decodes and validates a superblock read from a device of `device_bytes`.
    pub fn decode(b: &[u8], device_bytes: u64) -> Result<Layout, KvError> {
        let nf = |m: &str| KvError::NotFormatted(m.to_string());
        if b.len() < SUPERBLOCK_USED_BYTES || b[0..8] != SUPERBLOCK_MAGIC {
            return Err(nf("no KV superblock at offset 0"));
        }
        let crc = get_u32(b, 8).ok_or_else(|| nf("short superblock"))?;
        if crc32c::crc32c(&b[12..SUPERBLOCK_USED_BYTES]) != crc {
            return Err(nf("superblock checksum mismatch"));
        }
        let corrupt = |m: String| KvError::Corrupt(format!("superblock: {m}"));
        let u32_at = |at| get_u32(b, at).ok_or_else(|| corrupt("short".into()));
        let u64_at = |at| get_u64(b, at).ok_or_else(|| corrupt("short".into()));
        let version = u32_at(12)?;
        if version != FORMAT_VERSION {
            return Err(corrupt(format!(
                "format version {version} (this build reads {FORMAT_VERSION})"
            )));
        }
        let layout = Layout {
            uuid: get_array(b, 16).ok_or_else(|| corrupt("short".into()))?,
            block_bytes: u32_at(32)?,
            max_value_bytes: u32_at(40)?,
            segment_bytes: u32_at(44)?,
            segment_count: u32_at(48)?,
            max_keys: u64_at(56)?,
            checkpoint_offsets: [u64_at(64)?, u64_at(72)?],
            checkpoint_slot_bytes: u64_at(80)?,
            data_offset: u64_at(88)?,
        };
        if u32_at(36)? != MAX_KEY_BYTES as u32 {
            return Err(corrupt("max key size is not 16".into()));
        }
        layout
            .validate(device_bytes, u64_at(96)?)
            .map_err(corrupt)?;
        Ok(layout)
    }

    /// Checks that the fields describe a layout this code can use without overflow.
    fn validate(&self, device_bytes: u64, end: u64) -> Result<(), String> {
        let block = u64::from(self.block_bytes);
        if !self.block_bytes.is_power_of_two() || !(512..=4096).contains(&self.block_bytes) {
            return Err(format!("logical block of {block} bytes"));
        }
        if self.max_value_bytes == 0 || self.max_value_bytes > MAX_VALUE_BYTES_LIMIT {
            return Err(format!("max value of {} bytes", self.max_value_bytes));
        }
        let seg = self.segment();
        if !seg.is_multiple_of(block)
            || seg < 2 * single_record_batch_bytes(block, u64::from(self.max_value_bytes))
        {
            return Err(format!("segment of {seg} bytes"));
        }
        if self.segment_count < MIN_SEGMENTS || self.segment_count == NO_SEGMENT {
            return Err(format!("{} segments", self.segment_count));
        }
        if self.max_keys == 0 {
            return Err("max keys of 0".into());
        }
        let need = checkpoint_body_bytes(u64::from(self.segment_count), self.max_keys)
            .and_then(|b| b.checked_add(block));
        let [c0, c1] = self.checkpoint_offsets;
        let slot = self.checkpoint_slot_bytes;
        let aligned = |v: u64| v.is_multiple_of(REGION_ALIGN_BYTES);
        let ok = need.is_some_and(|n| n <= slot)
            && aligned(c0)
            && aligned(c1)
            && aligned(slot)
            && aligned(self.data_offset)
            && c0 >= SUPERBLOCK_BYTES
            && c0.checked_add(slot).is_some_and(|e| e <= c1)
            && c1.checked_add(slot).is_some_and(|e| e <= self.data_offset);
        if !ok {
            return Err("checkpoint slots overlap or are too small".into());
        }
        let data_end = u64::from(self.segment_count)
            .checked_mul(seg)
            .and_then(|d| d.checked_add(self.data_offset));
        if data_end != Some(end) {
            return Err("data area end does not match its segments".into());
        }
        if end > device_bytes {
            return Err(format!(
                "store needs {end} bytes but the device has {device_bytes}"
            ));
        }
        Ok(())
    }
}

/// A place in the log and the chain state there: where the next batch goes and what it
/// must carry. Recorded in checkpoints (where replay starts) and advanced by replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogPosition {
    pub segment: u32,
    pub offset: u32,
    /// The segment the log continues in when this one is full ([`NO_SEGMENT`]: not chosen).
    pub successor: u32,
    /// `meta_crc` of the batch before this position (the chain link).
    pub prev_crc: u32,
    pub next_batch_seq: u64,
    pub next_record_seq: u64,
}

/// Decoded checkpoint header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CheckpointHeader {
    pub uuid: [u8; 16],
    pub generation: u64,
    pub body_bytes: u64,
    pub body_crc: u32,
    pub segment_count: u32,
    pub entry_count: u64,
    pub log: LogPosition,
}

impl CheckpointHeader {
    /// Encodes into a zeroed block of `block` bytes.
    pub fn encode(&self, block: usize) -> Vec<u8> {
        let mut b = vec![0u8; block.max(CHECKPOINT_HEADER_BYTES)];
        b[0..8].copy_from_slice(&CHECKPOINT_MAGIC);
        put_u32(&mut b, 12, FORMAT_VERSION);
        b[16..32].copy_from_slice(&self.uuid);
        put_u64(&mut b, 32, self.generation);
        put_u64(&mut b, 40, self.body_bytes);
        put_u32(&mut b, 48, self.body_crc);
        put_u32(&mut b, 52, self.segment_count);
        put_u64(&mut b, 56, self.entry_count);
        put_u32(&mut b, 64, self.log.segment);
        put_u32(&mut b, 68, self.log.successor);
        put_u32(&mut b, 72, self.log.offset);
        put_u32(&mut b, 76, self.log.prev_crc);
        put_u64(&mut b, 80, self.log.next_batch_seq);
        put_u64(&mut b, 88, self.log.next_record_seq);
        let crc = crc32c::crc32c(&b[12..CHECKPOINT_HEADER_BYTES]);
        put_u32(&mut b, 8, crc);
        b
    }

    /// Decodes a header; `Err` says why the slot is unusable (it is then ignored).
    pub fn decode(b: &[u8]) -> Result<CheckpointHeader, String> {
        if b.len() < CHECKPOINT_HEADER_BYTES || b[0..8] != CHECKPOINT_MAGIC {
            return Err("no checkpoint header".into());
        }
        let crc = get_u32(b, 8).ok_or("short")?;
        if crc32c::crc32c(&b[12..CHECKPOINT_HEADER_BYTES]) != crc {
            return Err("header checksum mismatch".into());
        }
        let version = get_u32(b, 12).ok_or("short")?;
        if version != FORMAT_VERSION {
            return Err(format!("format version {version}"));
        }
        let f32 = |at| get_u32(b, at).ok_or("short");
        let f64 = |at| get_u64(b, at).ok_or("short");
        Ok(CheckpointHeader {
            uuid: get_array(b, 16).ok_or("short")?,
            generation: f64(32)?,
            body_bytes: f64(40)?,
            body_crc: f32(48)?,
            segment_count: f32(52)?,
            entry_count: f64(56)?,
            log: LogPosition {
                segment: f32(64)?,
                successor: f32(68)?,
                offset: f32(72)?,
                prev_crc: f32(76)?,
                next_batch_seq: f64(80)?,
                next_record_seq: f64(88)?,
            },
        })
    }
}

/// One index entry: where the value of a key is and how to check it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Log address of the first value byte.
    pub addr: u64,
    /// Sequence number of the record that stored this value (relocation keeps it).
    pub seq: u64,
    pub len: u32,
    /// crc32c of the value.
    pub crc: u32,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 24);

pub(crate) fn encode_index_entry(out: &mut [u8], key: &Key, e: &Entry) {
    out[..INDEX_ENTRY_BYTES].fill(0);
    out[0..16].copy_from_slice(key.padded());
    out[16] = key.len() as u8;
    put_u32(out, 20, e.len);
    put_u32(out, 24, e.crc);
    put_u64(out, 32, e.addr);
    put_u64(out, 40, e.seq);
}

/// Decodes an index entry; `None` for an impossible key length.
pub(crate) fn decode_index_entry(b: &[u8]) -> Option<(Key, Entry)> {
    let len = usize::from(*b.get(16)?);
    let key = Key::new(b.get(..len)?).ok()?;
    Some((
        key,
        Entry {
            len: get_u32(b, 20)?,
            crc: get_u32(b, 24)?,
            addr: get_u64(b, 32)?,
            seq: get_u64(b, 40)?,
        },
    ))
}

/// What a log record does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecordKind {
    /// Store: the key now has this value.
    Put = 1,
    /// Delete: the key has no value.
    Tombstone = 2,
    /// Compaction moved the value of record `seq` here; applies only if the key still
    /// holds exactly that record.
    Relocate = 3,
}

impl RecordKind {
    fn from_u8(v: u8) -> Option<RecordKind> {
        match v {
            1 => Some(RecordKind::Put),
            2 => Some(RecordKind::Tombstone),
            3 => Some(RecordKind::Relocate),
            _ => None,
        }
    }
}

/// A record descriptor in a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Descriptor {
    pub key: Key,
    pub kind: RecordKind,
    pub value_len: u32,
    /// Offset of the value from the start of the batch.
    pub value_offset: u32,
    pub value_crc: u32,
    pub seq: u64,
}

impl Descriptor {
    fn encode(&self, out: &mut [u8]) {
        out[..DESCRIPTOR_BYTES].fill(0);
        out[0..16].copy_from_slice(self.key.padded());
        out[16] = self.key.len() as u8;
        out[17] = self.kind as u8;
        put_u32(out, 20, self.value_len);
        put_u32(out, 24, self.value_offset);
        put_u32(out, 28, self.value_crc);
        put_u64(out, 32, self.seq);
    }

    fn decode(b: &[u8]) -> Option<Descriptor> {
        let len = usize::from(*b.get(16)?);
        Some(Descriptor {
            key: Key::new(b.get(..len)?).ok()?,
            kind: RecordKind::from_u8(*b.get(17)?)?,
            value_len: get_u32(b, 20)?,
            value_offset: get_u32(b, 24)?,
            value_crc: get_u32(b, 28)?,
            seq: get_u64(b, 32)?,
        })
    }
}

/// A batch header (the fields besides the descriptors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BatchHeader {
    pub uuid: [u8; 16],
    pub record_count: u32,
    pub batch_seq: u64,
    pub prev_crc: u32,
    pub batch_bytes: u32,
    pub segment: u32,
    pub offset: u32,
    pub next_segment: u32,
    pub flags: u32,
}

/// `BatchHeader::flags`: the batch holds compaction's relocations.
pub(crate) const BATCH_FLAG_RELOCATION: u32 = 1;

/// Bytes of header and descriptors of a batch of `n` records.
pub(crate) fn meta_bytes(n: usize) -> usize {
    BATCH_HEADER_BYTES + n * DESCRIPTOR_BYTES
}

/// Places values of the given lengths after the descriptors of a batch: a value of a
/// block or more starts on a block boundary; a smaller one packs after the previous value
/// unless it would cross a block boundary. Returns each value's offset and the batch's
/// length (a multiple of `block`). So every value spans the fewest blocks possible and a
/// Retrieve reads only them.
pub(crate) fn plan_batch(block: u64, value_lens: &[u32]) -> (Vec<u32>, u64) {
    let mut pos = meta_bytes(value_lens.len()) as u64;
    let mut offsets = Vec::with_capacity(value_lens.len());
    for &len in value_lens {
        let len = u64::from(len);
        if len == 0 {
            offsets.push(0);
            continue;
        }
        let in_block = pos % block;
        if len >= block || in_block + len > block {
            pos = align_up(pos, block);
        }
        offsets.push(pos as u32);
        pos += len;
    }
    (offsets, align_up(pos, block))
}

/// Like [`plan_batch`], but values of `in_place_min` bytes or more go after all the
/// smaller ones, each at a block boundary and taking whole blocks, so each can be written
/// from its own buffer: the offsets (in descriptor order), the bytes of the batch's head
/// (header, descriptors and the smaller values, whole blocks) and of the whole batch.
/// The format is the same: descriptors give each value's offset, in any order.
pub(crate) fn plan_batch_in_place(
    block: u64,
    value_lens: &[u32],
    in_place_min: usize,
) -> (Vec<u32>, u64, u64) {
    let large = |len: u32| len as usize >= in_place_min;
    let mut pos = meta_bytes(value_lens.len()) as u64;
    let mut offsets = vec![0u32; value_lens.len()];
    for (o, &len) in offsets.iter_mut().zip(value_lens) {
        if len == 0 || large(len) {
            continue;
        }
        let len = u64::from(len);
        let in_block = pos % block;
        if len >= block || in_block + len > block {
            pos = align_up(pos, block);
        }
        *o = pos as u32;
        pos += len;
    }
    let head = align_up(pos, block);
    let mut end = head;
    for (o, &len) in offsets.iter_mut().zip(value_lens) {
        if len != 0 && large(len) {
            *o = end as u32;
            end += align_up(u64::from(len), block);
        }
    }
    (offsets, head, end)
}

/// Writes header and descriptors into the front of `buf` (values already in place) and
/// returns the batch's `meta_crc`.
pub(crate) fn encode_batch_meta(buf: &mut [u8], h: &BatchHeader, descs: &[Descriptor]) -> u32 {
    let meta = meta_bytes(descs.len());
    buf[..BATCH_HEADER_BYTES].fill(0);
    buf[0..8].copy_from_slice(&BATCH_MAGIC);
    put_u32(buf, 12, descs.len() as u32);
    put_u64(buf, 16, h.batch_seq);
    put_u32(buf, 24, h.prev_crc);
    put_u32(buf, 28, h.batch_bytes);
    put_u32(buf, 32, h.segment);
    put_u32(buf, 36, h.offset);
    put_u32(buf, 40, h.next_segment);
    put_u32(buf, 44, h.flags);
    buf[48..64].copy_from_slice(&h.uuid);
    for (i, d) in descs.iter().enumerate() {
        let at = BATCH_HEADER_BYTES + i * DESCRIPTOR_BYTES;
        d.encode(&mut buf[at..at + DESCRIPTOR_BYTES]);
    }
    let crc = crc32c::crc32c(&buf[12..meta]);
    put_u32(buf, 8, crc);
    crc
}

/// Decodes the fixed header of a batch from its first bytes. Only the magic is checked
/// here; [`decode_batch_meta`] checks the rest once the whole meta area is read.
pub(crate) fn decode_batch_header(b: &[u8]) -> Option<(BatchHeader, u32)> {
    if b.get(0..8)? != BATCH_MAGIC {
        return None;
    }
    Some((
        BatchHeader {
            uuid: get_array(b, 48)?,
            record_count: get_u32(b, 12)?,
            batch_seq: get_u64(b, 16)?,
            prev_crc: get_u32(b, 24)?,
            batch_bytes: get_u32(b, 28)?,
            segment: get_u32(b, 32)?,
            offset: get_u32(b, 36)?,
            next_segment: get_u32(b, 40)?,
            flags: get_u32(b, 44)?,
        },
        get_u32(b, 8)?,
    ))
}

/// Checks the meta checksum over the whole meta area in `b` (which starts at the batch)
/// and decodes the descriptors, checking that every value lies inside the batch and after
/// the descriptors. `None`: not a valid batch.
pub(crate) fn decode_batch_meta(
    b: &[u8],
    h: &BatchHeader,
    meta_crc: u32,
    max_value_bytes: u32,
) -> Option<Vec<Descriptor>> {
    let n = h.record_count as usize;
    let meta = meta_bytes(n);
    if meta > h.batch_bytes as usize {
        return None;
    }
    if crc32c::crc32c(b.get(12..meta)?) != meta_crc {
        return None;
    }
    let mut descs = Vec::with_capacity(n);
    for i in 0..n {
        let at = BATCH_HEADER_BYTES + i * DESCRIPTOR_BYTES;
        let d = Descriptor::decode(b.get(at..at + DESCRIPTOR_BYTES)?)?;
        match d.kind {
            RecordKind::Tombstone => {}
            RecordKind::Put | RecordKind::Relocate => {
                let end = u64::from(d.value_offset) + u64::from(d.value_len);
                if d.value_len == 0
                    || d.value_len > max_value_bytes
                    || (d.value_offset as usize) < meta
                    || end > u64::from(h.batch_bytes)
                {
                    return None;
                }
            }
        }
        descs.push(d);
    }
    Some(descs)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        let opts = FormatOptions {
            segment_bytes: 64 << 10,
            max_value_bytes: 8 << 10,
            max_keys: Some(1000),
        };
        Layout::compute(4 << 20, 512, &opts, [7; 16]).unwrap()
    }

    #[test]
    fn superblock_round_trips_and_rejects_damage() {
        let l = layout();
        let enc = l.encode();
        assert_eq!(Layout::decode(&enc, 4 << 20).unwrap(), l);
        for i in [0usize, 8, 13, 40, 100] {
            let mut bad = enc.clone();
            bad[i] ^= 1;
            assert!(Layout::decode(&bad, 4 << 20).is_err(), "byte {i}");
        }
        // A device that shrank.
        assert!(matches!(
            Layout::decode(&enc, 1 << 20),
            Err(KvError::Corrupt(_))
        ));
        assert!(l.data_offset.is_multiple_of(REGION_ALIGN_BYTES));
        assert!(l.segment_count >= MIN_SEGMENTS);
    }

    #[test]
    fn layout_rejects_impossible_options() {
        // 2 MiB values need 4 MiB + 2 blocks per segment.
        let opts = FormatOptions {
            segment_bytes: 4 << 20,
            ..FormatOptions::default()
        };
        assert!(Layout::compute(1 << 30, 4096, &opts, [0; 16]).is_err());
        // Too small a device.
        assert!(Layout::compute(16 << 20, 4096, &FormatOptions::default(), [0; 16]).is_err());
        assert!(Layout::compute(1 << 30, 4096, &FormatOptions::default(), [0; 16]).is_ok());
        assert!(Layout::compute(1 << 30, 1000, &FormatOptions::default(), [0; 16]).is_err());
    }

    #[test]
    fn placement_spans_fewest_blocks() {
        // 3 records: meta = 64 + 120 = 184 bytes.
        let (offs, total) = plan_batch(512, &[100, 512, 300]);
        assert_eq!(offs, vec![184, 512, 1024]);
        assert_eq!(total, 1536);
        // A small value that would cross a block boundary moves to the next block.
        let (offs, total) = plan_batch(512, &[300, 300]);
        assert_eq!(offs, vec![144, 512]);
        assert_eq!(total, 1024);
        // Every value spans ceil(len / block) blocks.
        let lens = [1u32, 511, 512, 513, 4096, 7, 1000, 200, 200, 200];
        let (offs, total) = plan_batch(512, &lens);
        for (o, l) in offs.iter().zip(lens) {
            let first = u64::from(*o) / 512;
            let last = (u64::from(*o) + u64::from(l) - 1) / 512;
            assert_eq!(
                last - first + 1,
                u64::from(l).div_ceil(512),
                "len {l} at {o}"
            );
            assert!(u64::from(*o) + u64::from(l) <= total);
        }
    }

    #[test]
    fn in_place_values_follow_the_small_ones_block_aligned() {
        // meta = 64 + 4 * 40 = 224; the 100-byte values pack after it, the large ones
        // follow the head in descriptor order, each in whole blocks.
        let (offs, head, total) = plan_batch_in_place(4096, &[70_000, 100, 0, 100], 65_536);
        assert_eq!(offs, vec![4096, 224, 0, 324]);
        assert_eq!((head, total), (4096, 4096 + 73_728));
        let (offs, head, total) = plan_batch_in_place(512, &[1 << 20, 65_536, 5000], 65_536);
        assert_eq!(head, 512 + 5120);
        assert_eq!(offs, vec![5632, 5632 + (1 << 20), 512]);
        assert_eq!(total, 5632 + (1 << 20) + 65_536);
        // No large value: the same as plan_batch.
        let lens = [1u32, 511, 512, 513, 4096, 7, 1000];
        let (offs, head, total) = plan_batch_in_place(512, &lens, 65_536);
        assert_eq!((offs, total), plan_batch(512, &lens));
        assert_eq!(head, total);
    }

    #[test]
    fn batch_meta_round_trips_and_checks() {
        let key = Key::new(b"k1").unwrap();
        let (offs, total) = plan_batch(512, &[10, 0]);
        let descs = vec![
            Descriptor {
                key,
                kind: RecordKind::Put,
                value_len: 10,
                value_offset: offs[0],
                value_crc: 5,
                seq: 9,
            },
            Descriptor {
                key,
                kind: RecordKind::Tombstone,
                value_len: 0,
                value_offset: 0,
                value_crc: 0,
                seq: 10,
            },
        ];
        let h = BatchHeader {
            uuid: [1; 16],
            record_count: 2,
            batch_seq: 3,
            prev_crc: 4,
            batch_bytes: total as u32,
            segment: 1,
            offset: 512,
            next_segment: 2,
            flags: 0,
        };
        let mut buf = vec![0u8; total as usize];
        let crc = encode_batch_meta(&mut buf, &h, &descs);
        let (h2, crc2) = decode_batch_header(&buf).unwrap();
        assert_eq!((h2, crc2), (h, crc));
        assert_eq!(decode_batch_meta(&buf, &h2, crc2, 100).unwrap(), descs);
        // Value larger than the format allows.
        assert!(decode_batch_meta(&buf, &h2, crc2, 5).is_none());
        let mut bad = buf.clone();
        bad[70] ^= 0x10;
        assert!(decode_batch_meta(&bad, &h2, crc2, 100).is_none());
    }

    #[test]
    fn checkpoint_header_round_trips() {
        let h = CheckpointHeader {
            uuid: [3; 16],
            generation: 7,
            body_bytes: 4096,
            body_crc: 11,
            segment_count: 60,
            entry_count: 12,
            log: LogPosition {
                segment: 5,
                offset: 1024,
                successor: 6,
                prev_crc: 99,
                next_batch_seq: 100,
                next_record_seq: 1000,
            },
        };
        let enc = h.encode(512);
        assert_eq!(CheckpointHeader::decode(&enc).unwrap(), h);
        let mut bad = enc.clone();
        bad[90] ^= 1;
        assert!(CheckpointHeader::decode(&bad).is_err());
    }

    #[test]
    fn index_entries_round_trip() {
        let k = Key::new(b"0123456789abcdef").unwrap();
        let e = Entry {
            addr: 1 << 40,
            seq: 77,
            len: 2 << 20,
            crc: 0xdead_beef,
        };
        let mut b = [0u8; INDEX_ENTRY_BYTES];
        encode_index_entry(&mut b, &k, &e);
        assert_eq!(decode_index_entry(&b), Some((k, e)));
        b[16] = 0;
        assert_eq!(decode_index_entry(&b), None);
        b[16] = 17;
        assert_eq!(decode_index_entry(&b), None);
    }
}
