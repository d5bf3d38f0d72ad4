//! Where things go on a member: superblocks, bitmap, data.

use super::superblock::{BitmapGeometry, SUPERBLOCK_BYTES, SUPERBLOCK_OFFSETS};
use crate::layout::LayoutError;

/// Default write-intent bitmap region: member data bytes per bit.
pub const DEFAULT_REGION_BYTES: u64 = 64 << 20;
/// Most write-intent bitmap regions a member has: bigger members get bigger regions (the
/// region doubles until they fit), so the bitmap's memory stays bounded (~6 bytes each).
/// At the default 64 MiB regions that is members up to 1 PiB.
pub const MAX_REGIONS: u64 = 1 << 24;
/// Member data starts at a multiple of this.
pub const DATA_ALIGN_BYTES: u64 = 1 << 20;
/// The bitmap starts right after the second superblock copy.
pub const BITMAP_OFFSET_BYTES: u64 = SUPERBLOCK_OFFSETS[1] + SUPERBLOCK_BYTES as u64;
const _: () = assert!(BITMAP_OFFSET_BYTES.is_multiple_of(4096));

/// The member areas of a new volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AreaPlan {
    pub bitmap: BitmapGeometry,
    /// Stripe journal (0, 0 when there is none).
    pub journal_offset_bytes: u64,
    pub journal_bytes: u64,
    pub data_offset_bytes: u64,
    /// Whole stripe units.
    pub usable_member_bytes: u64,
}

/// Plans the areas for members of at least `min_member_bytes`. `region_bytes` is rounded
/// up to a multiple of the stripe unit (and doubled while the member would have more than
/// [`MAX_REGIONS`]), `journal_bytes` (0 = no journal) to 4 KiB.
pub fn plan_areas(
    min_member_bytes: u64,
    stripe_unit_bytes: u64,
    region_bytes: u64,
    journal_bytes: u64,
) -> Result<AreaPlan, LayoutError> {
    let su = stripe_unit_bytes.max(1);
    let too_large = LayoutError::TooLarge {
        members: 1,
        member_bytes: min_member_bytes,
    };
    let mut region_bytes = region_bytes
        .max(su)
        .checked_next_multiple_of(su)
        .ok_or(too_large.clone())?;
    while min_member_bytes.div_ceil(region_bytes) > MAX_REGIONS {
        region_bytes = region_bytes.checked_mul(2).ok_or(too_large.clone())?;
    }
    // Size the bitmap for the whole device (an upper bound), then fit the data after it.
    let max_regions = min_member_bytes.div_ceil(region_bytes);
    let area_bytes = max_regions.div_ceil(8).max(1).div_ceil(4096) * 4096;
    let journal_bytes = journal_bytes
        .checked_next_multiple_of(4096)
        .ok_or(too_large)?;
    let journal_offset_bytes = if journal_bytes > 0 {
        BITMAP_OFFSET_BYTES + area_bytes
    } else {
        0
    };
    let data_offset_bytes = (BITMAP_OFFSET_BYTES + area_bytes + journal_bytes)
        .div_ceil(DATA_ALIGN_BYTES)
        * DATA_ALIGN_BYTES;
    let usable_member_bytes = min_member_bytes.saturating_sub(data_offset_bytes) / su * su;
    if usable_member_bytes == 0 {
        return Err(LayoutError::TooSmall {
            member_bytes: min_member_bytes,
        });
    }
    Ok(AreaPlan {
        bitmap: BitmapGeometry {
            offset_bytes: BITMAP_OFFSET_BYTES,
            area_bytes,
            region_bytes,
            region_count: usable_member_bytes.div_ceil(region_bytes),
        },
        journal_offset_bytes,
        journal_bytes,
        data_offset_bytes,
        usable_member_bytes,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn small_and_large_members() {
        let p = plan_areas(64 << 20, 64 << 10, DEFAULT_REGION_BYTES, 0).unwrap();
        assert_eq!(p.data_offset_bytes, 1 << 20);
        assert_eq!(p.usable_member_bytes, 63 << 20);
        assert_eq!(p.bitmap.region_count, 1);
        assert_eq!(p.bitmap.area_bytes, 4096);
        // 16 TiB: 262144 regions -> 32 KiB of bitmap.
        let p = plan_areas(16 << 40, 64 << 10, DEFAULT_REGION_BYTES, 0).unwrap();
        assert_eq!(p.bitmap.area_bytes, 32 << 10);
        assert_eq!(p.data_offset_bytes, 1 << 20);
        assert!(plan_areas(1 << 20, 64 << 10, DEFAULT_REGION_BYTES, 0).is_err());
        // Region rounded up to the stripe unit.
        let p = plan_areas(64 << 20, 12 << 10, 100 << 10, 0).unwrap();
        assert_eq!(p.bitmap.region_bytes, 108 << 10);
        // Past 1 PiB the region grows: the bitmap (and its memory) stays bounded.
        let p = plan_areas(1 << 50, 64 << 10, DEFAULT_REGION_BYTES, 0).unwrap();
        assert_eq!(p.bitmap.region_bytes, DEFAULT_REGION_BYTES);
        let p = plan_areas(u64::MAX, 64 << 10, DEFAULT_REGION_BYTES, 0).unwrap();
        assert_eq!(p.bitmap.region_bytes, 1 << 40);
        assert!(p.bitmap.region_count <= MAX_REGIONS);
        // A journal goes between the bitmap and the data.
        let p = plan_areas(64 << 20, 64 << 10, DEFAULT_REGION_BYTES, (8 << 20) + 1).unwrap();
        assert_eq!(p.journal_offset_bytes, 8192 + 4096);
        assert_eq!(p.journal_bytes, (8 << 20) + 4096);
        assert_eq!(p.data_offset_bytes, 9 << 20);
    }

    proptest! {
        #[test]
        fn areas_never_overlap(size in 0u64..(1 << 44), su_units in 1u64..64, region in 1u64..(1 << 30), journal in 0u64..(1 << 26)) {
            let su = su_units * 4096;
            if let Ok(p) = plan_areas(size, su, region, journal) {
                prop_assert!(p.bitmap.offset_bytes + p.bitmap.area_bytes <= p.data_offset_bytes);
                if p.journal_bytes > 0 {
                    prop_assert!(p.bitmap.offset_bytes + p.bitmap.area_bytes <= p.journal_offset_bytes);
                    prop_assert!(p.journal_offset_bytes + p.journal_bytes <= p.data_offset_bytes);
                    prop_assert!(p.journal_bytes >= journal);
                }
                prop_assert!(p.data_offset_bytes + p.usable_member_bytes <= size);
                prop_assert!(p.bitmap.region_count.div_ceil(8) <= p.bitmap.area_bytes);
                prop_assert_eq!(p.usable_member_bytes % su, 0);
                prop_assert_eq!(p.bitmap.region_bytes % su, 0);
            }
        }
    }
}
