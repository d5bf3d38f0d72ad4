//! The member superblock: encode/decode of the 4 KiB block described in
//! `docs/volume-format.md`.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::codec::*;
use crate::layout::{LayoutParams, Level, MAX_SLOTS};

pub const SUPERBLOCK_MAGIC: [u8; 8] = *b"FBVOLUME";
pub const FORMAT_VERSION: u32 = 1;
/// Version of a superblock that describes a log-layout volume (header bytes 232..256
/// used); in-place volumes keep writing version 1, byte for byte as before. A reader
/// that knows only version 1 refuses a log volume instead of serving its raw log.
pub const FORMAT_VERSION_LOG: u32 = 2;
pub const SUPERBLOCK_BYTES: usize = 4096;
/// Byte offsets of the two copies on every member.
pub const SUPERBLOCK_OFFSETS: [u64; 2] = [0, SUPERBLOCK_BYTES as u64];
/// Member table entries: slots then spares.
pub const MAX_ENTRIES: usize = 40;
pub const NAME_MAX_BYTES: usize = 64;
pub const DOMAIN_MAX_BYTES: usize = 32;

const HEADER_BYTES: usize = 256;
const ENTRY_BYTES: usize = 96;
const _: () = assert!(HEADER_BYTES + MAX_ENTRIES * ENTRY_BYTES == SUPERBLOCK_BYTES);
const _: () = assert!(MAX_SLOTS <= MAX_ENTRIES);

// Header field offsets (see docs/volume-format.md).
const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_CRC: usize = 12;
const OFF_SB_BYTES: usize = 16;
const OFF_FLAGS: usize = 20;
const OFF_VOLUME_UUID: usize = 24;
const OFF_MEMBER_UUID: usize = 40;
const OFF_GENERATION: usize = 56;
const OFF_SEQ: usize = 64;
const OFF_CREATED: usize = 72;
const OFF_LEVEL: usize = 80;
const OFF_NAME_LEN: usize = 81;
const OFF_SLOTS: usize = 82;
const OFF_K: usize = 84;
const OFF_M: usize = 86;
const OFF_COPIES: usize = 88;
const OFF_ENTRY_COUNT: usize = 90;
const OFF_MEMBER_INDEX: usize = 92;
const OFF_STRIPE_UNIT: usize = 96;
const OFF_LOGICAL_BLOCK: usize = 100;
const OFF_DATA_OFFSET: usize = 104;
const OFF_USABLE: usize = 112;
const OFF_BITMAP_OFFSET: usize = 120;
const OFF_BITMAP_AREA: usize = 128;
const OFF_REGION_BYTES: usize = 136;
const OFF_REGION_COUNT: usize = 144;
const OFF_JOURNAL_OFFSET: usize = 152;
const OFF_JOURNAL_BYTES: usize = 160;
const OFF_NAME: usize = 168;
// Version 2 only (log layout); reserved and zero in version 1.
const OFF_DATA_LAYOUT: usize = 232;
const OFF_LOG_CODEC: usize = 233;
const OFF_LOG_LEVEL: usize = 234;
const OFF_LOG_BLOCK_SHIFT: usize = 235;
const OFF_LOG_BLOCKS: usize = 240;
const DATA_LAYOUT_LOG: u8 = 1;
const _: () = assert!(OFF_LOG_BLOCKS + 8 <= HEADER_BYTES);
const _: () = assert!(OFF_NAME + NAME_MAX_BYTES <= HEADER_BYTES);

// Entry field offsets, relative to the entry.
const E_UUID: usize = 0;
const E_STATE: usize = 16;
const E_FLAGS: usize = 17;
const E_DOMAIN_LEN: usize = 18;
/// Replacing: the slot index the entry copies (byte 19, reserved and zero before).
const E_REPLACES: usize = 19;
const E_DEVICE_BYTES: usize = 24;
const E_STATE_GENERATION: usize = 32;
const E_REBUILD_OFFSET: usize = 40;
const E_DOMAIN: usize = 48;
const E_VALID_BYTES: usize = 80;
const _: () = assert!(E_DOMAIN + DOMAIN_MAX_BYTES <= E_VALID_BYTES);
const _: () = assert!(E_VALID_BYTES + 8 <= ENTRY_BYTES);

const FLAG_CLEAN: u32 = 1;
/// Entry flags (byte 17 of an entry, reserved and zero before it had a meaning): the
/// member was failed by the operator. Readers that ignore it re-add such a member like
/// one that failed by an error (the behaviour before the flag), which is data-safe.
const ENTRY_FLAG_OPERATOR_FAILED: u8 = 1;

/// State of a member table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum MemberState {
    /// In service: holds current data.
    Active,
    /// Out of service: its data is not trusted (may come back through a rebuild).
    Failed,
    /// Hot spare: not part of the layout yet.
    Spare,
    /// Being rebuilt: rows below `rebuild_offset_bytes` are current.
    Rebuilding,
    /// A spare-area entry being filled with a copy of slot `replaces` while that slot
    /// stays active (a proactive replacement: no degraded window). Every write to the
    /// slot goes to it too; rows below `rebuild_offset_bytes` are copied. When the copy
    /// completes it takes the slot and the old member leaves.
    Replacing,
}

impl MemberState {
    fn code(self) -> u8 {
        match self {
            MemberState::Active => 1,
            MemberState::Failed => 2,
            MemberState::Spare => 3,
            MemberState::Rebuilding => 4,
            MemberState::Replacing => 5,
        }
    }

    fn from_code(code: u8) -> Option<MemberState> {
        Some(match code {
            1 => MemberState::Active,
            2 => MemberState::Failed,
            3 => MemberState::Spare,
            4 => MemberState::Rebuilding,
            5 => MemberState::Replacing,
            _ => return None,
        })
    }
}

/// One entry of the member table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberEntry {
    pub uuid: Uuid,
    pub state: MemberState,
    /// Placement hint ("rack3/node7"); at most [`DOMAIN_MAX_BYTES`] bytes of UTF-8.
    pub failure_domain: String,
    /// Size of the device when it joined (for status; the layout uses the superblock's
    /// usable size).
    pub device_bytes: u64,
    /// Generation at which the entry entered its current state (failed, rebuilding or
    /// active again after a rebuild; 0 = since creation). Identifies an absence of the
    /// member for the stripe journal.
    pub state_generation: u64,
    /// Rebuilding: member data bytes `[0, rebuild_offset_bytes)` are current (the
    /// durable rebuild checkpoint).
    pub rebuild_offset_bytes: u64,
    /// Failed or rebuilding: member data bytes `[0, valid_bytes)` held current data when
    /// the member left; since then only regions dirty in the bitmap can differ. A member
    /// coming back rebuilds only dirty regions below it and everything above it (0 = a
    /// full rebuild).
    pub valid_bytes: u64,
    /// Failed: taken out by the operator (`fail_member`), so it stays out until it is
    /// re-added or replaced. A member failed by an I/O error or a timeout (or missing at
    /// assembly) has `false` and comes back by itself when its device is offered again.
    #[serde(default)]
    pub failed_by_operator: bool,
    /// Replacing: the slot this entry is a copy of.
    #[serde(default)]
    pub replaces: Option<usize>,
}

impl MemberEntry {
    pub fn new(uuid: Uuid, state: MemberState, device_bytes: u64) -> MemberEntry {
        MemberEntry {
            uuid,
            state,
            failure_domain: String::new(),
            device_bytes,
            state_generation: 0,
            rebuild_offset_bytes: 0,
            valid_bytes: 0,
            failed_by_operator: false,
            replaces: None,
        }
    }
}

/// Where the write-intent bitmap lives on each member, and its granularity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BitmapGeometry {
    pub offset_bytes: u64,
    /// Space reserved for it (a multiple of 4096).
    pub area_bytes: u64,
    /// Member data bytes per bit (a multiple of the stripe unit).
    pub region_bytes: u64,
    pub region_count: u64,
}

/// Decoded superblock (one member's copy).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub volume_uuid: Uuid,
    pub name: String,
    /// The member this copy was written to.
    pub member_uuid: Uuid,
    /// Its position in `members`.
    pub member_index: usize,
    /// Membership epoch: bumped on every membership change; fences stale members.
    pub generation: u64,
    /// Bumped on every superblock write (orders copies of one generation).
    pub seq: u64,
    pub created_unix_secs: u64,
    pub clean: bool,
    pub layout: LayoutParams,
    /// Logical block of the volume (the largest of its members').
    pub logical_block_bytes: u32,
    /// Where member data starts on every member.
    pub data_offset_bytes: u64,
    /// Member data bytes used by the layout (whole stripe units).
    pub usable_member_bytes: u64,
    pub bitmap: BitmapGeometry,
    /// Stripe journal area (0, 0 if none), rotating layouts only.
    pub journal_offset_bytes: u64,
    pub journal_bytes: u64,
    /// `layout.members` slots, then spares.
    pub members: Vec<MemberEntry>,
    /// Log-structured layout (format version 2); `None`: data in place (version 1).
    pub log: Option<crate::log::LogParams>,
}

/// Why a superblock copy was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("no volume superblock (bad magic)")]
    BadMagic,
    #[error("unsupported superblock format version {0}")]
    Version(u32),
    #[error("superblock checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum { stored: u32, computed: u32 },
    #[error("superblock buffer is {0} bytes, need {SUPERBLOCK_BYTES}")]
    Short(usize),
    #[error("invalid superblock field: {0}")]
    Field(&'static str),
    #[error("invalid layout in superblock: {0}")]
    Layout(crate::layout::LayoutError),
}

impl From<crate::layout::LayoutError> for FormatError {
    fn from(e: crate::layout::LayoutError) -> Self {
        FormatError::Layout(e)
    }
}

impl Superblock {
    /// The 4096-byte encoding with its checksum.
    pub fn encode(&self) -> [u8; SUPERBLOCK_BYTES] {
        let mut b = [0u8; SUPERBLOCK_BYTES];
        put(&mut b, OFF_MAGIC, &SUPERBLOCK_MAGIC);
        let version = if self.log.is_some() {
            FORMAT_VERSION_LOG
        } else {
            FORMAT_VERSION
        };
        put_u32(&mut b, OFF_VERSION, version);
        if let Some(log) = &self.log {
            let (codec, level) = log.compression.code();
            put_u8(&mut b, OFF_DATA_LAYOUT, DATA_LAYOUT_LOG);
            put_u8(&mut b, OFF_LOG_CODEC, codec);
            put_u8(&mut b, OFF_LOG_LEVEL, level);
            put_u8(
                &mut b,
                OFF_LOG_BLOCK_SHIFT,
                log.block_bytes.trailing_zeros() as u8,
            );
            put_u64(&mut b, OFF_LOG_BLOCKS, log.logical_blocks);
        }
        put_u32(&mut b, OFF_SB_BYTES, SUPERBLOCK_BYTES as u32);
        put_u32(&mut b, OFF_FLAGS, if self.clean { FLAG_CLEAN } else { 0 });
        put(&mut b, OFF_VOLUME_UUID, self.volume_uuid.as_bytes());
        put(&mut b, OFF_MEMBER_UUID, self.member_uuid.as_bytes());
        put_u64(&mut b, OFF_GENERATION, self.generation);
        put_u64(&mut b, OFF_SEQ, self.seq);
        put_u64(&mut b, OFF_CREATED, self.created_unix_secs);
        put_u8(&mut b, OFF_LEVEL, self.layout.level.code());
        let name = truncate_utf8(&self.name, NAME_MAX_BYTES);
        put_u8(&mut b, OFF_NAME_LEN, name.len() as u8);
        put_u16(&mut b, OFF_SLOTS, self.layout.members as u16);
        put_u16(&mut b, OFF_K, self.layout.k as u16);
        put_u16(&mut b, OFF_M, self.layout.m as u16);
        put_u16(&mut b, OFF_COPIES, self.layout.copies as u16);
        let entries = self.members.len().min(MAX_ENTRIES);
        put_u16(&mut b, OFF_ENTRY_COUNT, entries as u16);
        put_u16(&mut b, OFF_MEMBER_INDEX, self.member_index as u16);
        put_u32(
            &mut b,
            OFF_STRIPE_UNIT,
            self.layout.stripe_unit_bytes as u32,
        );
        put_u32(&mut b, OFF_LOGICAL_BLOCK, self.logical_block_bytes);
        put_u64(&mut b, OFF_DATA_OFFSET, self.data_offset_bytes);
        put_u64(&mut b, OFF_USABLE, self.usable_member_bytes);
        put_u64(&mut b, OFF_BITMAP_OFFSET, self.bitmap.offset_bytes);
        put_u64(&mut b, OFF_BITMAP_AREA, self.bitmap.area_bytes);
        put_u64(&mut b, OFF_REGION_BYTES, self.bitmap.region_bytes);
        put_u64(&mut b, OFF_REGION_COUNT, self.bitmap.region_count);
        put_u64(&mut b, OFF_JOURNAL_OFFSET, self.journal_offset_bytes);
        put_u64(&mut b, OFF_JOURNAL_BYTES, self.journal_bytes);
        put(&mut b, OFF_NAME, name.as_bytes());
        for (i, e) in self.members.iter().take(MAX_ENTRIES).enumerate() {
            let at = HEADER_BYTES + i * ENTRY_BYTES;
            put(&mut b, at + E_UUID, e.uuid.as_bytes());
            put_u8(&mut b, at + E_STATE, e.state.code());
            if e.failed_by_operator {
                put_u8(&mut b, at + E_FLAGS, ENTRY_FLAG_OPERATOR_FAILED);
            }
            let domain = truncate_utf8(&e.failure_domain, DOMAIN_MAX_BYTES);
            put_u8(&mut b, at + E_DOMAIN_LEN, domain.len() as u8);
            if let Some(r) = e.replaces {
                put_u8(&mut b, at + E_REPLACES, r as u8);
            }
            put_u64(&mut b, at + E_DEVICE_BYTES, e.device_bytes);
            put_u64(&mut b, at + E_STATE_GENERATION, e.state_generation);
            put_u64(&mut b, at + E_REBUILD_OFFSET, e.rebuild_offset_bytes);
            put_u64(&mut b, at + E_VALID_BYTES, e.valid_bytes);
            put(&mut b, at + E_DOMAIN, domain.as_bytes());
        }
        let crc = crc32c::crc32c(&b);
        put_u32(&mut b, OFF_CRC, crc);
        b
    }

    /// Decodes and validates one copy. Never panics, whatever the bytes.
    pub fn decode(buf: &[u8]) -> Result<Superblock, FormatError> {
        if buf.len() < SUPERBLOCK_BYTES {
            return Err(FormatError::Short(buf.len()));
        }
        let b = &buf[..SUPERBLOCK_BYTES];
        if get::<8>(b, OFF_MAGIC) != SUPERBLOCK_MAGIC {
            return Err(FormatError::BadMagic);
        }
        let version = u32_at(b, OFF_VERSION);
        if version != FORMAT_VERSION && version != FORMAT_VERSION_LOG {
            return Err(FormatError::Version(version));
        }
        let stored = u32_at(b, OFF_CRC);
        let mut copy = [0u8; SUPERBLOCK_BYTES];
        copy.copy_from_slice(b);
        put_u32(&mut copy, OFF_CRC, 0);
        let computed = crc32c::crc32c(&copy);
        if stored != computed {
            return Err(FormatError::Checksum { stored, computed });
        }
        if u32_at(b, OFF_SB_BYTES) != SUPERBLOCK_BYTES as u32 {
            return Err(FormatError::Field("superblock size"));
        }
        let level = Level::from_code(u8_at(b, OFF_LEVEL)).ok_or(FormatError::Field("level"))?;
        let layout = LayoutParams {
            level,
            members: usize::from(u16_at(b, OFF_SLOTS)),
            k: usize::from(u16_at(b, OFF_K)),
            m: usize::from(u16_at(b, OFF_M)),
            copies: usize::from(u16_at(b, OFF_COPIES)),
            stripe_unit_bytes: u64::from(u32_at(b, OFF_STRIPE_UNIT)),
        };
        layout.validate()?;
        let name = str_at(
            b,
            OFF_NAME,
            usize::from(u8_at(b, OFF_NAME_LEN)),
            NAME_MAX_BYTES,
        )
        .ok_or(FormatError::Field("name"))?;
        let entry_count = usize::from(u16_at(b, OFF_ENTRY_COUNT));
        if entry_count < layout.members || entry_count > MAX_ENTRIES {
            return Err(FormatError::Field("entry count"));
        }
        let member_index = usize::from(u16_at(b, OFF_MEMBER_INDEX));
        if member_index >= entry_count {
            return Err(FormatError::Field("member index"));
        }
        let mut members = Vec::with_capacity(entry_count);
        for i in 0..entry_count {
            let at = HEADER_BYTES + i * ENTRY_BYTES;
            let state = MemberState::from_code(u8_at(b, at + E_STATE))
                .ok_or(FormatError::Field("member state"))?;
            let is_slot = i < layout.members;
            let spare_state = matches!(state, MemberState::Spare | MemberState::Replacing);
            if is_slot == spare_state {
                return Err(FormatError::Field(
                    "spare in a slot or slot state on a spare",
                ));
            }
            let replaces =
                (state == MemberState::Replacing).then(|| usize::from(u8_at(b, at + E_REPLACES)));
            if replaces.is_some_and(|r| r >= layout.members) {
                return Err(FormatError::Field("replacing an entry that is not a slot"));
            }
            // Bits other than the operator flag are reserved: written zero, ignored.
            let failed_by_operator = u8_at(b, at + E_FLAGS) & ENTRY_FLAG_OPERATOR_FAILED != 0;
            if failed_by_operator && state != MemberState::Failed {
                return Err(FormatError::Field(
                    "operator-failed flag on a member not failed",
                ));
            }
            let failure_domain = str_at(
                b,
                at + E_DOMAIN,
                usize::from(u8_at(b, at + E_DOMAIN_LEN)),
                DOMAIN_MAX_BYTES,
            )
            .ok_or(FormatError::Field("failure domain"))?;
            members.push(MemberEntry {
                uuid: Uuid::from_bytes(get(b, at + E_UUID)),
                state,
                failure_domain,
                device_bytes: u64_at(b, at + E_DEVICE_BYTES),
                state_generation: u64_at(b, at + E_STATE_GENERATION),
                rebuild_offset_bytes: u64_at(b, at + E_REBUILD_OFFSET),
                valid_bytes: u64_at(b, at + E_VALID_BYTES),
                failed_by_operator,
                replaces,
            });
        }
        let member_uuid = Uuid::from_bytes(get(b, OFF_MEMBER_UUID));
        if members.get(member_index).map(|e| e.uuid) != Some(member_uuid) {
            return Err(FormatError::Field("member uuid does not match its entry"));
        }
        let logical_block_bytes = u32_at(b, OFF_LOGICAL_BLOCK);
        if !logical_block_bytes.is_power_of_two() || !(512..=4096).contains(&logical_block_bytes) {
            return Err(FormatError::Field("logical block size"));
        }
        let bitmap = BitmapGeometry {
            offset_bytes: u64_at(b, OFF_BITMAP_OFFSET),
            area_bytes: u64_at(b, OFF_BITMAP_AREA),
            region_bytes: u64_at(b, OFF_REGION_BYTES),
            region_count: u64_at(b, OFF_REGION_COUNT),
        };
        let log = if version == FORMAT_VERSION_LOG {
            if u8_at(b, OFF_DATA_LAYOUT) != DATA_LAYOUT_LOG {
                return Err(FormatError::Field("data layout"));
            }
            let compression = crate::log::Compression::from_code(
                u8_at(b, OFF_LOG_CODEC),
                u8_at(b, OFF_LOG_LEVEL),
            )
            .ok_or(FormatError::Field("log compression"))?;
            let shift = u32::from(u8_at(b, OFF_LOG_BLOCK_SHIFT));
            let block_bytes = 1u32.checked_shl(shift).unwrap_or(0);
            if !crate::log::LogParams::block_bytes_valid(block_bytes) {
                return Err(FormatError::Field("log block size"));
            }
            if matches!(layout.family(), crate::layout::Family::Near { .. }) {
                return Err(FormatError::Field("log layout on a mirror"));
            }
            Some(crate::log::LogParams {
                compression,
                block_bytes,
                logical_blocks: u64_at(b, OFF_LOG_BLOCKS),
            })
        } else {
            None
        };
        let sb = Superblock {
            log,
            volume_uuid: Uuid::from_bytes(get(b, OFF_VOLUME_UUID)),
            name,
            member_uuid,
            member_index,
            generation: u64_at(b, OFF_GENERATION),
            seq: u64_at(b, OFF_SEQ),
            created_unix_secs: u64_at(b, OFF_CREATED),
            clean: u32_at(b, OFF_FLAGS) & FLAG_CLEAN != 0,
            layout,
            logical_block_bytes,
            data_offset_bytes: u64_at(b, OFF_DATA_OFFSET),
            usable_member_bytes: u64_at(b, OFF_USABLE),
            bitmap,
            journal_offset_bytes: u64_at(b, OFF_JOURNAL_OFFSET),
            journal_bytes: u64_at(b, OFF_JOURNAL_BYTES),
            members,
        };
        sb.check_areas()?;
        Ok(sb)
    }

    /// The on-member areas do not overlap and the bitmap covers the data.
    fn check_areas(&self) -> Result<(), FormatError> {
        let su = self.layout.stripe_unit_bytes;
        let bm = &self.bitmap;
        let fields_ok = self.usable_member_bytes >= su
            && self.usable_member_bytes.is_multiple_of(su)
            && bm.region_bytes >= su
            && bm.region_bytes.is_multiple_of(su)
            && bm.offset_bytes >= SUPERBLOCK_OFFSETS[1] + SUPERBLOCK_BYTES as u64
            && bm.offset_bytes.is_multiple_of(4096)
            && bm.area_bytes.is_multiple_of(4096)
            && bm.region_count == self.usable_member_bytes.div_ceil(bm.region_bytes)
            && bm.region_count <= super::areas::MAX_REGIONS
            && bm.region_count.div_ceil(8) <= bm.area_bytes
            && self.data_offset_bytes.is_multiple_of(4096);
        if !fields_ok {
            return Err(FormatError::Field("bitmap or data area geometry"));
        }
        let bitmap_end = bm
            .offset_bytes
            .checked_add(bm.area_bytes)
            .ok_or(FormatError::Field("bitmap area"))?;
        let journal_end = self
            .journal_offset_bytes
            .checked_add(self.journal_bytes)
            .ok_or(FormatError::Field("journal area"))?;
        let journal_ok = self.journal_bytes == 0
            || (self.journal_offset_bytes >= bitmap_end
                && self.journal_offset_bytes.is_multiple_of(4096)
                && self.journal_bytes.is_multiple_of(4096)
                && self.journal_bytes >= 4096 + self.layout.m as u64 * su);
        if !journal_ok {
            return Err(FormatError::Field("journal area"));
        }
        if bitmap_end > self.data_offset_bytes
            || journal_end > self.data_offset_bytes
            || self
                .data_offset_bytes
                .checked_add(self.usable_member_bytes)
                .is_none()
        {
            return Err(FormatError::Field("areas overlap"));
        }
        Ok(())
    }

    /// The entry of the member this copy belongs to.
    pub fn own_entry(&self) -> Option<&MemberEntry> {
        self.members.get(self.member_index)
    }

    /// Ordering of copies: higher generation wins, then higher seq.
    pub fn version_key(&self) -> (u64, u64) {
        (self.generation, self.seq)
    }

    /// Smallest member device size this layout fits on.
    pub fn min_member_bytes(&self) -> u64 {
        self.data_offset_bytes + self.usable_member_bytes
    }
}

fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
