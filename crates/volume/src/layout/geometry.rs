//! Pure layout math: volume byte offsets to member positions and back.
//!
//! The volume is cut into chunks of one stripe unit (`su`); chunk `c` holds volume bytes
//! `[c*su, (c+1)*su)`. Member space (after the member's data offset) is cut into rows of
//! `su` bytes; row `r` is member bytes `[r*su, (r+1)*su)` on every member.
//!
//! - Near (raid0/1/10, md's "near" layout with `copies` copies): copy `j` of chunk `c`
//!   sits in slot `t = c*copies + j`, on member `t % n`, row `t / n`.
//! - Rotating (raid5/6, k+m): row `r` holds chunks `r*k .. r*k+k`. Parity sits on
//!   members `p0, p0+1, .. p0+m-1 (mod n)` with `p0 = n-1 - r % n`, and data chunk `d` on
//!   member `(p0 + m + d) % n`: md's left-symmetric layout (raid5 = m 1, raid6 = m 2).

use super::params::{Family, LayoutError, LayoutParams};

/// Volume-space piece inside one chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub vol_offset_bytes: u64,
    pub len_bytes: u64,
    /// Global chunk index (`vol_offset / su`).
    pub chunk: u64,
    /// Offset inside the chunk (and inside the member row).
    pub col_bytes: u64,
}

/// What a member row holds in a rotating layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Data(usize),
    Parity(usize),
}

/// A member byte range (offsets relative to the member's data area).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MemberExtent {
    pub member: usize,
    pub member_offset_bytes: u64,
    pub len_bytes: u64,
}

/// What a member byte is, see [`Geometry::unmap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmapped {
    /// Copy `copy` of volume byte `vol_offset_bytes`.
    Data { vol_offset_bytes: u64, copy: usize },
    /// Parity `index` of `row`, at `col_bytes` in the row.
    Parity {
        row: u64,
        index: usize,
        col_bytes: u64,
    },
    /// Past the last whole chunk of a near layout with `n*rows` not a multiple of copies.
    Unused,
}

/// A validated layout over members of `member_bytes` usable bytes each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    params: LayoutParams,
    rows: u64,
}

impl Geometry {
    /// `member_bytes` is rounded down to whole stripe units. Refused when the volume's
    /// byte count would not fit in a u64 (so every offset derived from it does).
    pub fn new(params: LayoutParams, member_bytes: u64) -> Result<Geometry, LayoutError> {
        params.validate()?;
        let rows = member_bytes / params.stripe_unit_bytes;
        if rows == 0 {
            return Err(LayoutError::TooSmall { member_bytes });
        }
        let n = params.members as u64;
        let chunks = match params.family() {
            Family::Near { copies } => n.checked_mul(rows).map(|s| s / copies as u64),
            Family::Rotating { k, .. } => (k as u64).checked_mul(rows),
        };
        if chunks
            .and_then(|c| c.checked_mul(params.stripe_unit_bytes))
            .is_none()
        {
            return Err(LayoutError::TooLarge {
                members: params.members,
                member_bytes,
            });
        }
        Ok(Geometry { params, rows })
    }

    pub fn params(&self) -> &LayoutParams {
        &self.params
    }

    pub fn members(&self) -> usize {
        self.params.members
    }

    pub fn stripe_unit_bytes(&self) -> u64 {
        self.params.stripe_unit_bytes
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Usable bytes per member (whole rows).
    pub fn member_bytes(&self) -> u64 {
        self.rows * self.params.stripe_unit_bytes
    }

    pub fn family(&self) -> Family {
        self.params.family()
    }

    /// Number of copies of each chunk (1 for rotating layouts).
    pub fn copies(&self) -> usize {
        match self.family() {
            Family::Near { copies } => copies,
            Family::Rotating { .. } => 1,
        }
    }

    pub fn chunks(&self) -> u64 {
        let n = self.params.members as u64;
        match self.family() {
            Family::Near { copies } => n * self.rows / copies as u64,
            Family::Rotating { k, .. } => k as u64 * self.rows,
        }
    }

    pub fn volume_bytes(&self) -> u64 {
        self.chunks() * self.params.stripe_unit_bytes
    }

    /// Splits `[offset, offset+len)` (clamped to the volume) into per-chunk pieces.
    pub fn pieces(&self, offset_bytes: u64, len_bytes: u64) -> impl Iterator<Item = Piece> + use<> {
        let su = self.params.stripe_unit_bytes;
        let end = offset_bytes
            .saturating_add(len_bytes)
            .min(self.volume_bytes());
        let mut pos = offset_bytes;
        std::iter::from_fn(move || {
            if pos >= end {
                return None;
            }
            let chunk = pos / su;
            let col_bytes = pos % su;
            let len_bytes = (su - col_bytes).min(end - pos);
            let piece = Piece {
                vol_offset_bytes: pos,
                len_bytes,
                chunk,
                col_bytes,
            };
            pos += len_bytes;
            Some(piece)
        })
    }

    /// Member and row of copy `copy` of `chunk` (`copy < copies()`).
    pub fn chunk_location(&self, chunk: u64, copy: usize) -> (usize, u64) {
        let n = self.params.members as u64;
        match self.family() {
            Family::Near { copies } => {
                let slot = chunk * copies as u64 + copy as u64;
                ((slot % n) as usize, slot / n)
            }
            Family::Rotating { k, .. } => {
                let row = chunk / k as u64;
                (self.data_member(row, (chunk % k as u64) as usize), row)
            }
        }
    }

    /// Rotating layouts: first parity member of `row`.
    fn parity_start(&self, row: u64) -> usize {
        let n = self.params.members as u64;
        (n - 1 - row % n) as usize
    }

    /// Rotating layouts: member holding parity `j` of `row`.
    pub fn parity_member(&self, row: u64, j: usize) -> usize {
        (self.parity_start(row) + j) % self.params.members
    }

    /// Rotating layouts: member holding data chunk `d` of `row`.
    pub fn data_member(&self, row: u64, d: usize) -> usize {
        (self.parity_start(row) + self.params.m + d) % self.params.members
    }

    /// Rotating layouts: what `member` holds in `row`.
    pub fn role(&self, row: u64, member: usize) -> Role {
        let n = self.params.members;
        let q = (member + n - self.parity_start(row)) % n;
        if q < self.params.m {
            Role::Parity(q)
        } else {
            Role::Data(q - self.params.m)
        }
    }

    /// Rotating layouts: the member of each shard of `row`, data `0..k` then parity
    /// `0..m` (the erasure coder's shard order).
    pub fn row_shard_members(&self, row: u64) -> impl Iterator<Item = usize> + use<> {
        let g = *self;
        let (k, m) = (self.params.k, self.params.m);
        (0..k)
            .map(move |d| g.data_member(row, d))
            .chain((0..m).map(move |j| g.parity_member(row, j)))
    }

    /// The inverse mapping: what lives at `member_offset_bytes` of `member`.
    /// `None` if the position is outside the layout.
    pub fn unmap(&self, member: usize, member_offset_bytes: u64) -> Option<Unmapped> {
        let su = self.params.stripe_unit_bytes;
        let n = self.params.members;
        if member >= n || member_offset_bytes >= self.member_bytes() {
            return None;
        }
        let row = member_offset_bytes / su;
        let col = member_offset_bytes % su;
        Some(match self.family() {
            Family::Near { copies } => {
                let slot = row * n as u64 + member as u64;
                let chunk = slot / copies as u64;
                if chunk >= self.chunks() {
                    Unmapped::Unused
                } else {
                    Unmapped::Data {
                        vol_offset_bytes: chunk * su + col,
                        copy: (slot % copies as u64) as usize,
                    }
                }
            }
            Family::Rotating { k, .. } => match self.role(row, member) {
                Role::Parity(index) => Unmapped::Parity {
                    row,
                    index,
                    col_bytes: col,
                },
                Role::Data(d) => Unmapped::Data {
                    vol_offset_bytes: (row * k as u64 + d as u64) * su + col,
                    copy: 0,
                },
            },
        })
    }

    /// Every member byte range holding data of `[offset, offset+len)` (all copies), merged
    /// where adjacent on a member, sorted by member then offset.
    pub fn member_extents(&self, offset_bytes: u64, len_bytes: u64) -> Vec<MemberExtent> {
        let su = self.params.stripe_unit_bytes;
        let mut out: Vec<MemberExtent> = Vec::new();
        for piece in self.pieces(offset_bytes, len_bytes) {
            for copy in 0..self.copies() {
                let (member, row) = self.chunk_location(piece.chunk, copy);
                out.push(MemberExtent {
                    member,
                    member_offset_bytes: row * su + piece.col_bytes,
                    len_bytes: piece.len_bytes,
                });
            }
        }
        out.sort_unstable();
        let mut merged: Vec<MemberExtent> = Vec::with_capacity(out.len());
        for e in out {
            match merged.last_mut() {
                Some(last)
                    if last.member == e.member
                        && last.member_offset_bytes + last.len_bytes == e.member_offset_bytes =>
                {
                    last.len_bytes += e.len_bytes;
                }
                _ => merged.push(e),
            }
        }
        merged
    }

    /// Whether every byte is still readable with `failed[i]` members gone.
    pub fn survives(&self, failed: &[bool]) -> bool {
        let is_failed = |i: usize| failed.get(i).copied().unwrap_or(false);
        match self.family() {
            Family::Rotating { m, .. } => {
                (0..self.params.members).filter(|&i| is_failed(i)).count() <= m
            }
            Family::Near { copies } => {
                // Copy sets repeat with period n chunks (n*copies slots = copies rows).
                let period = (self.params.members as u64).min(self.chunks());
                (0..period)
                    .all(|chunk| (0..copies).any(|j| !is_failed(self.chunk_location(chunk, j).0)))
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SU: u64 = 4096;

    fn geo(p: LayoutParams, rows: u64) -> Geometry {
        Geometry::new(p.with_stripe_unit(SU), rows * SU).unwrap()
    }

    /// md's left-symmetric raid5 on 4 disks (drivers/md/raid5.c, ALGORITHM_LEFT_SYMMETRIC).
    #[test]
    fn raid5_matches_md_left_symmetric() {
        let g = geo(LayoutParams::raid5(4), 8);
        // Rows: "D0 D1 D2 P", "D4 D5 P D3", "D8 P D6 D7", "P D9 D10 D11".
        let want: [[Option<u64>; 4]; 4] = [
            [Some(0), Some(1), Some(2), None],
            [Some(4), Some(5), None, Some(3)],
            [Some(8), None, Some(6), Some(7)],
            [None, Some(9), Some(10), Some(11)],
        ];
        for (row, members) in want.iter().enumerate() {
            for (member, chunk) in members.iter().enumerate() {
                let got = g.unmap(member, row as u64 * SU).unwrap();
                match chunk {
                    Some(c) => assert_eq!(
                        got,
                        Unmapped::Data {
                            vol_offset_bytes: c * SU,
                            copy: 0
                        },
                        "row {row} member {member}"
                    ),
                    None => assert!(matches!(got, Unmapped::Parity { index: 0, .. })),
                }
            }
        }
    }

    /// md raid6 left-symmetric: Q follows P.
    #[test]
    fn raid6_q_follows_p() {
        let g = geo(LayoutParams::raid6(5), 10);
        assert_eq!(g.parity_member(0, 0), 4);
        assert_eq!(g.parity_member(0, 1), 0);
        assert_eq!(g.data_member(0, 0), 1);
        assert_eq!(g.parity_member(1, 0), 3);
        assert_eq!(g.parity_member(1, 1), 4);
        assert_eq!(g.data_member(1, 0), 0);
        assert_eq!(g.volume_bytes(), 3 * 10 * SU);
    }

    #[test]
    fn raid10_near_odd_members() {
        // md near, 3 disks, 2 copies: "A A B / B C C / D D E".
        let g = geo(LayoutParams::raid10(3, 2), 4);
        let chunk_at = |m, row| match g.unmap(m, row * SU).unwrap() {
            Unmapped::Data {
                vol_offset_bytes, ..
            } => Some(vol_offset_bytes / SU),
            _ => None,
        };
        assert_eq!(
            [chunk_at(0, 0), chunk_at(1, 0), chunk_at(2, 0)],
            [Some(0), Some(0), Some(1)]
        );
        assert_eq!(
            [chunk_at(0, 1), chunk_at(1, 1), chunk_at(2, 1)],
            [Some(1), Some(2), Some(2)]
        );
        assert_eq!(g.chunks(), 6);
        assert!(g.survives(&[true, false, false]));
        assert!(!g.survives(&[true, true, false]));
        assert!(!g.survives(&[false, true, true]));
        // 4 disks, 2 copies: pairs (0,1) and (2,3).
        let g = geo(LayoutParams::raid10(4, 2), 4);
        assert!(g.survives(&[true, false, true, false]));
        assert!(!g.survives(&[false, false, true, true]));
    }

    #[test]
    fn raid1_and_raid0_shapes() {
        let g = geo(LayoutParams::raid1(3), 5);
        assert_eq!(g.volume_bytes(), 5 * SU);
        assert_eq!(g.member_extents(0, 5 * SU).len(), 3);
        assert!(g.survives(&[true, true, false]));
        assert!(!g.survives(&[true, true, true]));
        let g = geo(LayoutParams::raid0(3), 5);
        assert_eq!(g.volume_bytes(), 15 * SU);
        assert!(!g.survives(&[false, true, false]));
        assert!(g.survives(&[false, false, false]));
    }

    #[test]
    fn unequal_rounding_and_errors() {
        let p = LayoutParams::raid5(3).with_stripe_unit(SU);
        let g = Geometry::new(p, 10 * SU + 100).unwrap();
        assert_eq!(g.member_bytes(), 10 * SU);
        assert!(matches!(
            Geometry::new(p, SU - 1),
            Err(LayoutError::TooSmall { .. })
        ));
        assert_eq!(g.unmap(3, 0), None);
        assert_eq!(g.unmap(0, 10 * SU), None);
    }

    fn any_params() -> impl Strategy<Value = LayoutParams> {
        prop_oneof![
            (1usize..7).prop_map(LayoutParams::raid0),
            (2usize..5).prop_map(LayoutParams::raid1),
            (2usize..4, 0usize..4).prop_map(|(c, extra)| LayoutParams::raid10(c + extra, c)),
            (3usize..8).prop_map(LayoutParams::raid5),
            (4usize..9).prop_map(LayoutParams::raid6),
            (1usize..9, 1usize..5).prop_map(|(k, m)| LayoutParams::erasure(k, m)),
        ]
    }

    proptest! {
        #[test]
        fn pieces_tile_the_range(p in any_params(), rows in 1u64..20, a in 0u64..1_000_000, l in 0u64..400_000) {
            let g = geo(p, rows);
            let vb = g.volume_bytes();
            let off = a % (vb + 1);
            let len = l.min(vb - off);
            let mut pos = off;
            for piece in g.pieces(off, len) {
                prop_assert_eq!(piece.vol_offset_bytes, pos);
                prop_assert!(piece.len_bytes > 0);
                prop_assert!(piece.col_bytes + piece.len_bytes <= SU);
                prop_assert_eq!(piece.chunk * SU + piece.col_bytes, pos);
                pos += piece.len_bytes;
            }
            prop_assert_eq!(pos, off + len);
        }

        #[test]
        fn map_then_unmap_is_identity(p in any_params(), rows in 1u64..20, x in 0u64..u64::MAX) {
            let g = geo(p, rows);
            let vol = x % g.volume_bytes();
            let chunk = vol / SU;
            let mut members = Vec::new();
            for copy in 0..g.copies() {
                let (member, row) = g.chunk_location(chunk, copy);
                prop_assert!(row < g.rows());
                members.push(member);
                let back = g.unmap(member, row * SU + vol % SU);
                prop_assert_eq!(back, Some(Unmapped::Data { vol_offset_bytes: vol, copy }));
            }
            // Copies of one chunk live on distinct members.
            members.sort_unstable();
            members.dedup();
            prop_assert_eq!(members.len(), g.copies());
        }

        #[test]
        fn unmap_then_map_is_identity(p in any_params(), rows in 1u64..20, member in 0usize..16, y in 0u64..u64::MAX) {
            let g = geo(p, rows);
            let member = member % g.members();
            let off = y % g.member_bytes();
            match g.unmap(member, off).unwrap() {
                Unmapped::Data { vol_offset_bytes, copy } => {
                    prop_assert!(vol_offset_bytes < g.volume_bytes());
                    let (m2, row) = g.chunk_location(vol_offset_bytes / SU, copy);
                    prop_assert_eq!((m2, row * SU + vol_offset_bytes % SU), (member, off));
                }
                Unmapped::Parity { row, index, col_bytes } => {
                    prop_assert_eq!(g.parity_member(row, index), member);
                    prop_assert_eq!(row * SU + col_bytes, off);
                }
                Unmapped::Unused => {
                    let Family::Near { copies } = g.family() else {
                        return Err(TestCaseError::fail("unused in rotating layout"));
                    };
                    // Only the tail slots of the last row(s) are unused.
                    let slot = (off / SU) * g.members() as u64 + member as u64;
                    prop_assert!(slot >= g.chunks() * copies as u64);
                }
            }
        }

        #[test]
        fn rotating_rows_are_permutations(p in any_params(), row in 0u64..1000) {
            let g = geo(p, 1);
            if let Family::Rotating { .. } = g.family() {
                let mut seen: Vec<usize> = g.row_shard_members(row).collect();
                for (i, &member) in seen.iter().enumerate() {
                    let want = if i < p.k { Role::Data(i) } else { Role::Parity(i - p.k) };
                    prop_assert_eq!(g.role(row, member), want);
                }
                seen.sort_unstable();
                prop_assert_eq!(seen, (0..g.members()).collect::<Vec<_>>());
            }
        }

        #[test]
        fn member_extents_cover_every_copy(p in any_params(), rows in 1u64..12, a in 0u64..u64::MAX, l in 0u64..200_000) {
            let g = geo(p, rows);
            let vb = g.volume_bytes();
            let off = (a % vb) / 512 * 512;
            let len = (l / 512 * 512).min(vb - off);
            let extents = g.member_extents(off, len);
            let total: u64 = extents.iter().map(|e| e.len_bytes).sum();
            prop_assert_eq!(total, len * g.copies() as u64);
            for w in extents.windows(2) {
                // Sorted, disjoint and merged.
                prop_assert!(w[0].member < w[1].member
                    || w[0].member_offset_bytes + w[0].len_bytes < w[1].member_offset_bytes);
            }
            for e in &extents {
                for probe in [e.member_offset_bytes, e.member_offset_bytes + e.len_bytes - 1] {
                    match g.unmap(e.member, probe) {
                        Some(Unmapped::Data { vol_offset_bytes, .. }) => {
                            prop_assert!(vol_offset_bytes >= off && vol_offset_bytes < off + len);
                        }
                        other => return Err(TestCaseError::fail(format!("{other:?}"))),
                    }
                }
            }
        }

        #[test]
        fn tolerance_is_honoured(p in any_params(), mask in 0u32..(1 << 12)) {
            let g = geo(p, 4);
            let failed: Vec<bool> = (0..g.members()).map(|i| mask & (1 << i) != 0).collect();
            let count = failed.iter().filter(|&&f| f).count();
            if count <= p.tolerance() {
                prop_assert!(g.survives(&failed));
            }
            if count > p.tolerance() && matches!(g.family(), Family::Rotating { .. }) {
                prop_assert!(!g.survives(&failed));
            }
            if count == g.members() {
                prop_assert!(!g.survives(&failed));
            }
        }
    }
}
