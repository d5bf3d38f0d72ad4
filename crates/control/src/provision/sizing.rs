//! How big each member must be for a volume of a given usable size: the inverse of
//! `Volume::create`'s layout (superblocks, bitmap, stripe journal, data area rounded to
//! stripe units, whole rows). Sizes come from users: all arithmetic is checked, and a size
//! no member can hold is an error naming it, never a panic or a wrapped value.

use volume::format::{DATA_ALIGN_BYTES, DEFAULT_REGION_BYTES, plan_areas};
use volume::layout::{Family, Geometry, LayoutParams};
use volume::{LevelSpec, VolumeConfig};

use crate::error::ControlError;

/// Members are sized in these units (a whole number of 4 KiB blocks).
pub const MEMBER_ALIGN_BYTES: u64 = 1 << 20;

/// The journal `Volume::create` reserves with the default configuration.
fn journal_bytes(params: &LayoutParams) -> u64 {
    let default = VolumeConfig::new(LevelSpec::Raid5).journal_bytes;
    match params.family() {
        Family::Rotating { m, .. } if default > 0 => {
            default.max(4096 + m as u64 * params.stripe_unit_bytes)
        }
        Family::Rotating { .. } => 0,
        Family::Near { .. } => 0,
    }
}

/// The usable volume size that members of `member_bytes` give (default configuration).
pub fn volume_bytes_for(params: &LayoutParams, member_bytes: u64) -> Result<u64, ControlError> {
    let plan = plan_areas(
        member_bytes,
        params.stripe_unit_bytes,
        DEFAULT_REGION_BYTES,
        journal_bytes(params),
    )
    .map_err(|e| ControlError::Invalid(format!("member of {member_bytes} bytes: {e}")))?;
    let geo = Geometry::new(*params, plan.usable_member_bytes)
        .map_err(|e| ControlError::Invalid(e.to_string()))?;
    Ok(geo.volume_bytes())
}

/// The smallest member size (a multiple of [`MEMBER_ALIGN_BYTES`]) whose volume holds at
/// least `size_bytes`.
pub fn member_bytes_for(params: &LayoutParams, size_bytes: u64) -> Result<u64, ControlError> {
    if size_bytes == 0 {
        return Err(ControlError::Invalid("volume size must be above 0".into()));
    }
    let too_large = || {
        ControlError::Invalid(format!(
            "volume size {size_bytes} bytes is too large: {} members of a {} volume \
             cannot hold it",
            params.members, params.level
        ))
    };
    let su = params.stripe_unit_bytes.max(1);
    let n = params.members as u64;
    // Stripe units of data each member must hold.
    let chunks = size_bytes.div_ceil(su);
    let rows = match params.family() {
        Family::Rotating { k, .. } => chunks.div_ceil((k as u64).max(1)),
        Family::Near { copies } => chunks
            .checked_mul(copies as u64)
            .ok_or_else(too_large)?
            .div_ceil(n.max(1)),
    };
    let data = rows.checked_mul(su).ok_or_else(too_large)?;
    // Superblocks, bitmap and journal come first, aligned to DATA_ALIGN_BYTES: a first
    // guess above the need, then down while a smaller member still fits (the overhead
    // grows a little with the member: the bitmap), or up until one does.
    let fits = |m: u64| volume_bytes_for(params, m).is_ok_and(|v| v >= size_bytes);
    let step = DATA_ALIGN_BYTES.max(MEMBER_ALIGN_BYTES);
    let overhead = (4 << 20) + journal_bytes(params);
    let mut member = data
        .checked_add(overhead)
        .and_then(|m| m.checked_next_multiple_of(step))
        .ok_or_else(too_large)?;
    for _ in 0..SEARCH_STEPS {
        if fits(member) {
            while member > step && fits(member - step) {
                member -= step;
            }
            return Ok(member);
        }
        member = member.checked_add(step).ok_or_else(too_large)?;
    }
    Err(too_large())
}

/// Bound of the sizing search (each step is 1 MiB; the first guess is within a few).
const SEARCH_STEPS: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_hold_the_requested_size_with_little_waste() {
        for (level, n) in [
            ("raid5", 3),
            ("raid5", 5),
            ("raid6", 4),
            ("raid1", 2),
            ("raid0", 3),
            ("raid10", 4),
            ("4+2", 6),
        ] {
            let spec: LevelSpec = level.parse().expect("level");
            for su in [4096, 64 << 10, 1 << 20] {
                let p = spec.params(n, su).expect("params");
                for size in [1, 16 << 20, (1 << 30) + 4096, 100 << 30] {
                    let m = member_bytes_for(&p, size).expect("size");
                    let v = volume_bytes_for(&p, m).expect("volume");
                    assert!(v >= size, "{level} su {su} size {size}: {v}");
                    // One step less would not do: the members are as small as they can be.
                    let smaller = volume_bytes_for(&p, m - MEMBER_ALIGN_BYTES).unwrap_or(0);
                    assert!(
                        smaller < size,
                        "{level} su {su} size {size}: {m} is oversized"
                    );
                }
            }
        }
        assert!(member_bytes_for(&LevelSpec::Raid5.params(3, 65536).expect("p"), 0).is_err());
    }

    /// `volume create --level raid1 --size 18446744073709420544` overflowed here (a panic
    /// in debug builds, a wrapped member size in release).
    #[test]
    fn sizes_no_member_can_hold_are_errors() {
        let raid1 = LevelSpec::Raid1.params(2, 65536).expect("params");
        let e = member_bytes_for(&raid1, 18_446_744_073_709_420_544).expect_err("too large");
        assert_eq!(
            e.to_string(),
            "volume size 18446744073709420544 bytes is too large: 2 members of a raid1 \
             volume cannot hold it"
        );
        for (level, n) in [
            ("raid0", 32),
            ("raid1", 2),
            ("raid10", 4),
            ("raid5", 3),
            ("10+4", 14),
        ] {
            let spec: LevelSpec = level.parse().expect("level");
            for su in [4096, 16 << 20] {
                let p = spec.params(n, su).expect("params");
                for size in [u64::MAX, u64::MAX - 4095, 1 << 63, (1 << 63) + 1] {
                    match member_bytes_for(&p, size) {
                        Ok(m) => assert!(volume_bytes_for(&p, m).expect("volume") >= size),
                        Err(e) => assert!(e.to_string().contains("too large"), "{e}"),
                    }
                }
            }
        }
    }
}
