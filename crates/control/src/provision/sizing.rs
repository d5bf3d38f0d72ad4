//! How big each member must be for a volume of a given usable size: the inverse of
//! `Volume::create`'s layout (superblocks, bitmap, stripe journal, data area rounded to
//! stripe units, whole rows). Sizes come from users: all arithmetic is checked, and a size
//! no member can hold is an error naming it, never a panic or a wrapped value.

use volume::format::{DATA_ALIGN_BYTES, DEFAULT_REGION_BYTES, plan_areas};
use volume::layout::{Family, Geometry, LayoutParams};
use volume::log::format::LogGeometry;
use volume::{LevelSpec, LogConfig, VolumeConfig};

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

/// The bytes a volume exports from members of `member_bytes`: the usable size in place,
/// or with `log` the logical capacity of the log layout over that space (`align_bytes`:
/// the members' logical block).
pub fn exported_bytes_for(
    params: &LayoutParams,
    member_bytes: u64,
    log: Option<&LogConfig>,
    align_bytes: u32,
) -> Result<u64, ControlError> {
    let array = volume_bytes_for(params, member_bytes)?;
    let Some(log) = log else {
        return Ok(array);
    };
    let Family::Rotating { k, .. } = params.family() else {
        return Err(ControlError::Invalid(format!(
            "the log layout needs a parity level, not {}",
            params.level
        )));
    };
    let segment = k as u64 * params.stripe_unit_bytes;
    let blocks = LogGeometry::plan_logical_blocks(
        array,
        segment,
        params.stripe_unit_bytes,
        log.block_bytes,
        align_bytes,
        log.export_percent,
    );
    // What `Volume::create` would refuse (too few segments) exports nothing here.
    LogGeometry::new(
        array,
        segment,
        params.stripe_unit_bytes,
        log.block_bytes,
        blocks,
        align_bytes,
    )
    .map_err(ControlError::Invalid)?;
    Ok(blocks.saturating_mul(u64::from(log.block_bytes)))
}

/// The smallest member size (a multiple of [`MEMBER_ALIGN_BYTES`]) whose volume exports
/// at least `size_bytes`, in place or with the log layout `log` (sized for 4 KiB member
/// blocks, the larger alignment).
pub fn member_bytes_for(
    params: &LayoutParams,
    size_bytes: u64,
    log: Option<&LogConfig>,
) -> Result<u64, ControlError> {
    let in_place = in_place_member_bytes_for(params, size_bytes)?;
    let Some(log) = log else {
        return Ok(in_place);
    };
    // A stripe must hold two blocks and a segment summary, whatever the size.
    let segment = match params.family() {
        Family::Rotating { k, .. } => k as u64 * params.stripe_unit_bytes,
        Family::Near { .. } => 0,
    };
    if segment < 2 * u64::from(log.block_bytes) + 4096 {
        return Err(ControlError::Invalid(format!(
            "a stripe of {segment} data bytes is too small for {}-byte log blocks: use a \
             larger stripe unit or a smaller log block",
            log.block_bytes
        )));
    }
    // The log exports a share of the array (its segments less summaries, checkpoints and
    // the room garbage collection needs): at least the in-place size, and less than
    // twice the share's inverse. Binary search in member units between the two.
    let fits = |m: u64| {
        exported_bytes_for(params, m, Some(log), LOG_SIZING_ALIGN_BYTES)
            .is_ok_and(|v| v >= size_bytes)
    };
    let too_large = || {
        ControlError::Invalid(format!(
            "volume size {size_bytes} bytes is too large for the log layout on {} members of \
             a {} volume",
            params.members, params.level
        ))
    };
    let percent = u64::from(log.export_percent.max(1));
    let guess = size_bytes
        .checked_mul(200)
        .map(|b| b / percent)
        .and_then(|b| b.checked_add(LOG_SIZING_SLACK_BYTES))
        .ok_or_else(too_large)?;
    let mut hi = in_place_member_bytes_for(params, guess)?;
    if !fits(hi) {
        // Small volumes: the fixed parts (root, checkpoints, 16 segments) dominate.
        for _ in 0..SEARCH_STEPS {
            hi = hi.checked_mul(2).ok_or_else(too_large)?;
            if fits(hi) {
                break;
            }
        }
        if !fits(hi) {
            return Err(too_large());
        }
    }
    let step = MEMBER_ALIGN_BYTES;
    if fits(in_place) {
        return Ok(in_place);
    }
    let (mut lo, mut hi) = (in_place / step, hi / step);
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if fits(mid * step) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(hi * step)
}

/// Members are sized for this array block (the larger of 512 and 4096: payloads align to
/// it, so it gives the smaller log capacity).
const LOG_SIZING_ALIGN_BYTES: u32 = 4096;
/// Added to the log's first upper guess: root, checkpoints and the minimum of segments.
const LOG_SIZING_SLACK_BYTES: u64 = 64 << 20;

/// [`member_bytes_for`] with data in place.
fn in_place_member_bytes_for(params: &LayoutParams, size_bytes: u64) -> Result<u64, ControlError> {
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
                    let m = member_bytes_for(&p, size, None).expect("size");
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
        assert!(member_bytes_for(&LevelSpec::Raid5.params(3, 65536).expect("p"), 0, None).is_err());
    }

    /// The log layout exports a share of the array: its members hold the size asked
    /// for with the log's overhead, a little above the in-place members.
    fn k_su(p: &LayoutParams) -> u64 {
        match p.family() {
            Family::Rotating { k, .. } => k as u64 * p.stripe_unit_bytes,
            Family::Near { .. } => 0,
        }
    }

    #[test]
    fn log_members_hold_the_logical_size() {
        for (level, n) in [("raid5", 3), ("raid6", 4), ("4+2", 6)] {
            let spec: LevelSpec = level.parse().expect("level");
            for su in [16 << 10, 64 << 10] {
                let p = spec.params(n, su).expect("params");
                for block in [4096, 16 << 10, 64 << 10] {
                    let mut log = LogConfig::new(volume::Compression::Lz4);
                    log.block_bytes = block;
                    if k_su(&p) < 2 * u64::from(block) + 4096 {
                        let e = member_bytes_for(&p, 1 << 30, Some(&log)).expect_err("small");
                        assert!(e.to_string().contains("too small for"), "{e}");
                        continue;
                    }
                    for size in [1, 16 << 20, (1 << 30) + 4096, 100 << 30] {
                        let m = member_bytes_for(&p, size, Some(&log)).expect("size");
                        let v = exported_bytes_for(&p, m, Some(&log), 4096).expect("volume");
                        assert!(v >= size, "{level} su {su} block {block} size {size}: {v}");
                        let smaller =
                            exported_bytes_for(&p, m - MEMBER_ALIGN_BYTES, Some(&log), 4096)
                                .unwrap_or(0);
                        assert!(
                            smaller < size,
                            "{level} su {su} block {block} size {size}: {m} is oversized"
                        );
                        let in_place = member_bytes_for(&p, size, None).expect("in place");
                        assert!(m >= in_place, "{m} < {in_place}");
                    }
                }
            }
        }
        let raid5 = LevelSpec::Raid5.params(3, 65536).expect("params");
        let log = LogConfig::new(volume::Compression::Off);
        let e = member_bytes_for(&raid5, u64::MAX / 2, Some(&log)).expect_err("too large");
        assert!(e.to_string().contains("too large"), "{e}");
    }

    /// `volume create --level raid1 --size 18446744073709420544` overflowed here (a panic
    /// in debug builds, a wrapped member size in release).
    #[test]
    fn sizes_no_member_can_hold_are_errors() {
        let raid1 = LevelSpec::Raid1.params(2, 65536).expect("params");
        let e = member_bytes_for(&raid1, 18_446_744_073_709_420_544, None).expect_err("too large");
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
                    match member_bytes_for(&p, size, None) {
                        Ok(m) => assert!(volume_bytes_for(&p, m).expect("volume") >= size),
                        Err(e) => assert!(e.to_string().contains("too large"), "{e}"),
                    }
                }
            }
        }
    }
}
