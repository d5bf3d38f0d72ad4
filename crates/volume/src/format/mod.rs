//! The on-disk format (see `docs/volume-format.md`): superblocks and member areas.

mod areas;
pub(crate) mod codec;
mod superblock;

pub use areas::{
    AreaPlan, BITMAP_OFFSET_BYTES, DATA_ALIGN_BYTES, DEFAULT_REGION_BYTES, MAX_REGIONS, plan_areas,
};
pub use superblock::{
    BitmapGeometry, DOMAIN_MAX_BYTES, FORMAT_VERSION, FormatError, MAX_ENTRIES, MemberEntry,
    MemberState, NAME_MAX_BYTES, SUPERBLOCK_BYTES, SUPERBLOCK_MAGIC, SUPERBLOCK_OFFSETS,
    Superblock,
};

#[cfg(test)]
mod tests;
