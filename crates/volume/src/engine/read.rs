//! The read path: direct member reads where the data is readable, row reconstruction
//! (under the row lock) where it is not.

use blockdev::{IO_ALIGN_BYTES, IoBuf, check_range};

use super::{Faults, Inner};
use crate::error::{Result, VolumeError};
use crate::layout::{Family, Piece};
use crate::topology::Topology;

/// A member buffer and where its bytes go in the caller's buffer.
pub(crate) struct Scatter {
    pub buf: IoBuf,
    /// (offset in `buf`, offset in the destination, length)
    pub segs: Vec<(usize, usize, usize)>,
}

/// One member read covering one or more pieces.
struct Direct {
    member: usize,
    member_offset_bytes: u64,
    len: usize,
    segs: Vec<(usize, usize, usize)>,
}

impl Inner {
    /// Near layouts: some copy of `chunk` lies in a region the background resync has not
    /// finished.
    fn chunk_resync_pending(&self, chunk: u64, copies: usize) -> bool {
        let su = self.su();
        (0..copies).any(|j| {
            let (_, row) = self.geo.chunk_location(chunk, j);
            self.intent
                .is_pending(*self.intent.regions_of(row * su, row * su + 1).start())
        })
    }

    /// Where `p` can be read directly: a readable member and the offset on it, or None.
    /// Near layouts try the copies from `pref` (from copy 0 where the resync has not made
    /// them equal yet: the one it copies, as md does); rotating ones the data chunk.
    fn locate(
        &self,
        topo: &Topology,
        p: &Piece,
        pref: usize,
        resync_pending: bool,
    ) -> Option<(usize, u64)> {
        let su = self.su();
        let at = |copy: usize| {
            let (member, row) = self.geo.chunk_location(p.chunk, copy);
            let moff = row * su + p.col_bytes;
            topo.readable(member, moff + p.len_bytes)
                .then_some((member, moff))
        };
        match self.geo.family() {
            Family::Near { copies } => {
                let pref = if resync_pending && self.chunk_resync_pending(p.chunk, copies) {
                    0
                } else {
                    pref
                };
                (0..copies).map(|t| (pref + t) % copies).find_map(at)
            }
            Family::Rotating { .. } => at(0),
        }
    }

    pub async fn read_volume(&self, offset_bytes: u64, buf: IoBuf) -> Result<IoBuf> {
        check_range(&self.info, offset_bytes, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(buf);
        }
        let len = buf.len();
        let mut buf = Some(buf);
        for _ in 0..=2 * self.geo.members() + 2 {
            self.check_usable()?;
            let topo = self.topo();
            let b = buf.take().unwrap_or_else(|| IoBuf::new_zeroed(len));
            match self.try_read(&topo, offset_bytes, b).await {
                Ok(b) => {
                    self.stats.record_read(len as u64);
                    return Ok(b);
                }
                Err((b, faults)) => {
                    buf = b;
                    self.handle_faults(faults).await?;
                }
            }
        }
        Err(VolumeError::Invalid("read kept failing".into()))
    }

    /// Plans and runs one read attempt. On failure the buffer comes back if it still can.
    async fn try_read(
        &self,
        topo: &Topology,
        offset_bytes: u64,
        mut buf: IoBuf,
    ) -> std::result::Result<IoBuf, (Option<IoBuf>, Faults)> {
        // Near layouts: one preferred copy per request, so big reads stay on one member
        // per chunk set and small random reads spread over the copies.
        let (pref, resync_pending) = match self.geo.family() {
            Family::Near { copies } => (
                ((offset_bytes / self.su()) % copies as u64) as usize,
                self.intent.pending_count() > 0,
            ),
            Family::Rotating { .. } => (0, false),
        };
        let mut all = self.geo.pieces(offset_bytes, buf.len() as u64);
        let (first, second) = (all.next(), all.next());
        // Whole request on one readable member (the common small read): straight into the
        // caller's buffer, no plan to allocate.
        if let (Some(p), None) = (&first, &second)
            && let Some((member, moff)) = self.locate(topo, p, pref, resync_pending)
        {
            return self
                .mread(topo, member, moff, buf)
                .await
                .map_err(|f| (None, vec![f]));
        }
        let mut pieces: Vec<(usize, u64, usize, usize)> = Vec::new(); // member, moff, len, dst
        let mut degraded: Vec<(u64, u64, u64)> = Vec::new(); // row, vol start, vol end
        for p in first.into_iter().chain(second).chain(all) {
            if let Some((member, moff)) = self.locate(topo, &p, pref, resync_pending) {
                let dst = (p.vol_offset_bytes - offset_bytes) as usize;
                pieces.push((member, moff, p.len_bytes as usize, dst));
                continue;
            }
            match self.geo.family() {
                // No readable copy.
                Family::Near { .. } => return Err((Some(buf), Vec::new())),
                // Rebuilt from the rest of its row.
                Family::Rotating { .. } => {
                    let (_, row) = self.geo.chunk_location(p.chunk, 0);
                    let end = p.vol_offset_bytes + p.len_bytes;
                    match degraded.last_mut() {
                        Some(last) if last.0 == row => last.2 = end,
                        _ => degraded.push((row, p.vol_offset_bytes, end)),
                    }
                }
            }
        }

        if degraded.is_empty() && zero_copy_fits(&pieces) {
            return self.read_split(topo, &pieces, buf).await;
        }

        let directs = merge(pieces);
        let direct_futs = directs.into_iter().map(|d| async move {
            let b = self
                .mread(
                    topo,
                    d.member,
                    d.member_offset_bytes,
                    IoBuf::new_zeroed(d.len),
                )
                .await?;
            Ok::<_, super::MemberFault>(Scatter {
                buf: b,
                segs: d.segs,
            })
        });
        let degraded_futs = degraded
            .into_iter()
            .map(|(row, start, end)| self.read_row_reconstruct(row, start, end, offset_bytes));
        let (direct, recon) = futures::join!(
            futures::future::join_all(direct_futs),
            futures::future::join_all(degraded_futs)
        );
        let mut faults: Faults = Vec::new();
        let mut failed_plan = false;
        let mut scatters = Vec::new();
        for r in direct {
            match r {
                Ok(s) => scatters.push(s),
                Err(f) => faults.push(f),
            }
        }
        for r in recon {
            match r {
                Ok(s) => scatters.extend(s),
                Err(f) if f.is_empty() => failed_plan = true,
                Err(f) => faults.extend(f),
            }
        }
        if !faults.is_empty() || failed_plan {
            return Err((Some(buf), faults));
        }
        for s in scatters {
            for (src, dst, len) in s.segs {
                buf[dst..dst + len].copy_from_slice(&s.buf[src..src + len]);
            }
        }
        Ok(buf)
    }

    /// Reads `pieces` (which [`zero_copy_fits`]) from their members concurrently, each
    /// straight into its part of `buf` ([`IoBuf::split_off`]): no bounce buffer, no copy.
    async fn read_split(
        &self,
        topo: &Topology,
        pieces: &[(usize, u64, usize, usize)],
        mut buf: IoBuf,
    ) -> std::result::Result<IoBuf, (Option<IoBuf>, Faults)> {
        let mut parts = Vec::with_capacity(pieces.len());
        for &(_, _, len, _) in &pieces[..pieces.len() - 1] {
            let rest = buf.split_off(len);
            parts.push(std::mem::replace(&mut buf, rest));
        }
        parts.push(buf);
        let reads = pieces
            .iter()
            .zip(parts)
            .map(|(&(member, moff, _, _), part)| self.mread(topo, member, moff, part));
        let mut faults: Faults = Vec::new();
        let mut filled = Vec::with_capacity(pieces.len());
        for r in futures::future::join_all(reads).await {
            match r {
                Ok(b) => filled.push(b),
                Err(f) => faults.push(f),
            }
        }
        if !faults.is_empty() {
            // The parts that came back are dropped; a retry reads into a new buffer.
            return Err((None, faults));
        }
        Ok(join_parts(filled))
    }

    /// Reads volume bytes `[start, end)` (inside `row`) by reconstruction from the row's
    /// readable shards, under the row lock. `dst_base` is the volume offset of the
    /// destination buffer. `Err(empty)` = not enough readable shards.
    async fn read_row_reconstruct(
        &self,
        row: u64,
        start: u64,
        end: u64,
        dst_base: u64,
    ) -> std::result::Result<Vec<Scatter>, Faults> {
        let _lock = self.locks.lock([row]).await;
        // Snapshot after locking: no write of this row can be between it and our reads.
        let topo = self.topo();
        let su = self.su();
        let (k, m) = (self.geo.params().k, self.geo.params().m);
        let row_base = row * k as u64 * su;
        // Column span of the request inside the row.
        let (mut lo, mut hi) = (su, 0);
        for d in 0..k {
            let cs = row_base + d as u64 * su;
            let (s, e) = (start.max(cs), end.min(cs + su));
            if s < e {
                lo = lo.min(s - cs);
                hi = hi.max(e - cs);
            }
        }
        let wanted_data: Vec<usize> = (0..k)
            .filter(|&d| {
                let cs = row_base + d as u64 * su;
                start.max(cs) < end.min(cs + su)
            })
            .collect();
        let shards = self.read_shards(&topo, row, lo, hi, &wanted_data).await?;
        let mut out = Vec::new();
        for (d, buf) in shards.into_iter().enumerate().take(k) {
            let cs = row_base + d as u64 * su;
            let (s, e) = (start.max(cs), end.min(cs + su));
            if s >= e || !wanted_data.contains(&d) {
                continue;
            }
            let src = (s - cs - lo) as usize;
            let dst = (s - dst_base) as usize;
            out.push(Scatter {
                buf,
                segs: vec![(src, dst, (e - s) as usize)],
            });
        }
        let _ = m;
        Ok(out)
    }

    /// Reads `k` readable shards of `row` over columns `[lo, hi)` (data first) and
    /// reconstructs the data shards in `want` that were not readable. Returns all k + m
    /// shard buffers (unread, unwanted ones empty). `Err(empty)` = fewer than k readable.
    pub(crate) async fn read_shards(
        &self,
        topo: &Topology,
        row: u64,
        lo: u64,
        hi: u64,
        want: &[usize],
    ) -> std::result::Result<Vec<IoBuf>, Faults> {
        let su = self.su();
        let (k, m) = (self.geo.params().k, self.geo.params().m);
        let len = (hi - lo) as usize;
        let mend = row * su + hi;
        let members: Vec<usize> = self.geo.row_shard_members(row).collect();
        let mut present = vec![false; k + m];
        let mut chosen = 0;
        for s in 0..k + m {
            if chosen == k {
                break;
            }
            if topo.readable(members[s], mend) {
                present[s] = true;
                chosen += 1;
            }
        }
        if chosen < k {
            return Err(Vec::new());
        }
        let reads = (0..k + m).filter(|&s| present[s]).map(|s| {
            let member = members[s];
            async move {
                self.mread(topo, member, row * su + lo, IoBuf::new_zeroed(len))
                    .await
                    .map(|b| (s, b))
            }
        });
        let mut bufs: Vec<IoBuf> = (0..k + m).map(|_| IoBuf::new_zeroed(0)).collect();
        let mut faults = Vec::new();
        for r in futures::future::join_all(reads).await {
            match r {
                Ok((s, b)) => bufs[s] = b,
                Err(f) => faults.push(f),
            }
        }
        if !faults.is_empty() {
            return Err(faults);
        }
        let missing: Vec<usize> = want.iter().copied().filter(|&d| !present[d]).collect();
        if !missing.is_empty() {
            for &d in &missing {
                bufs[d] = IoBuf::new_zeroed(len);
            }
            let rs = self.rs.as_ref().ok_or_else(Vec::new)?;
            let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
            if rs.reconstruct_some(&mut refs, &present, &missing).is_err() {
                return Err(Vec::new());
            }
        }
        Ok(bufs)
    }
}

/// Whether a healthy multi-piece read goes straight into parts of the caller's buffer:
/// every piece is a read of its own anyway (merging would not join any two on one
/// member), and each boundary between pieces is aligned so the buffer can be split there
/// (pieces come in volume order and cover the buffer).
fn zero_copy_fits(pieces: &[(usize, u64, usize, usize)]) -> bool {
    // Large reads over many chunks merge per member instead (fewer, larger member reads).
    if !(2..=MAX_SPLIT_PIECES).contains(&pieces.len()) {
        return false;
    }
    let mut next_dst = 0;
    for (i, &(member, moff, len, dst)) in pieces.iter().enumerate() {
        if dst != next_dst || (i > 0 && !dst.is_multiple_of(IO_ALIGN_BYTES)) {
            return false;
        }
        let joins_another = pieces[..i]
            .iter()
            .any(|&(m, o, l, _)| m == member && (o + l as u64 == moff || moff + len as u64 == o));
        if joins_another {
            return false;
        }
        next_dst = dst + len;
    }
    true
}

/// Most parts a read is split into (bounds the quadratic check above).
const MAX_SPLIT_PIECES: usize = 32;

/// The parts of a split buffer, back in one piece. A device may give back another
/// buffer than the part it was handed (the trait allows it): then the bytes are copied.
fn join_parts(parts: Vec<IoBuf>) -> IoBuf {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut parts = parts.into_iter();
    let Some(mut whole) = parts.next() else {
        return IoBuf::new_zeroed(0);
    };
    let mut copied: Option<IoBuf> = None;
    for p in parts {
        if let Some(c) = copied.as_mut() {
            let at = c.len();
            c.set_len(at + p.len());
            c[at..].copy_from_slice(&p);
            continue;
        }
        if let Err(p) = whole.unsplit(p) {
            let mut c = IoBuf::new_zeroed(total);
            let at = whole.len();
            c.set_len(at + p.len());
            c[..at].copy_from_slice(&whole);
            c[at..].copy_from_slice(&p);
            copied = Some(c);
        }
    }
    copied.unwrap_or(whole)
}

/// Merges pieces into one read per contiguous member range.
fn merge(mut pieces: Vec<(usize, u64, usize, usize)>) -> Vec<Direct> {
    pieces.sort_by_key(|&(member, moff, _, _)| (member, moff));
    let mut out: Vec<Direct> = Vec::new();
    for (member, moff, len, dst) in pieces {
        match out.last_mut() {
            Some(d) if d.member == member && d.member_offset_bytes + d.len as u64 == moff => {
                d.segs.push((d.len, dst, len));
                d.len += len;
            }
            _ => out.push(Direct {
                member,
                member_offset_bytes: moff,
                len,
                segs: vec![(0, dst, len)],
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: usize = IO_ALIGN_BYTES;

    #[test]
    fn split_only_where_every_piece_is_its_own_aligned_read() {
        // RAID-5 style: two chunks on two members, back to back in the buffer.
        assert!(zero_copy_fits(&[(0, 0, 16 * P, 0), (1, 0, 16 * P, 16 * P)]));
        // A last piece of any length is fine (the buffer is not split after it).
        assert!(zero_copy_fits(&[(0, 0, P, 0), (1, 0, 100, P)]));
        // One piece: the plain single read, not this path.
        assert!(!zero_copy_fits(&[(0, 0, P, 0)]));
        // A boundary off alignment cannot be split.
        assert!(!zero_copy_fits(&[(0, 0, 512, 0), (1, 0, P, 512)]));
        // Two pieces adjacent on one member merge into one read instead.
        assert!(!zero_copy_fits(&[
            (0, 0, P, 0),
            (1, 0, P, P),
            (0, P as u64, P, 2 * P)
        ]));
        assert!(!zero_copy_fits(&[
            (0, P as u64, P, 0),
            (1, 0, P, P),
            (0, 0, P, 2 * P)
        ]));
        // Pieces on one member that do not touch stay separate reads.
        assert!(zero_copy_fits(&[(0, 0, P, 0), (0, 4 * P as u64, P, P)]));
        // Not covering the buffer in order.
        assert!(!zero_copy_fits(&[(0, 0, P, P), (1, 0, P, 0)]));
    }

    #[test]
    fn parts_join_back_without_a_copy_or_with_one_when_a_device_swapped_its_buffer() {
        let mut whole = IoBuf::new_zeroed(3 * P);
        let base = whole.as_ptr();
        let mut b = whole.split_off(P);
        let c = b.split_off(P);
        let mut parts = vec![whole, b, c];
        for (i, p) in parts.iter_mut().enumerate() {
            p.fill(i as u8 + 1);
        }
        let joined = join_parts(parts);
        assert_eq!(joined.as_ptr(), base, "joined in place");
        let want: Vec<u8> = [1u8, 2, 3].iter().flat_map(|&v| vec![v; P]).collect();
        assert_eq!(&joined[..], &want[..]);

        // The middle part came back as a buffer of the device's own.
        let mut whole = IoBuf::new_zeroed(3 * P);
        let mut b = whole.split_off(P);
        let c = b.split_off(P);
        drop(b);
        let parts = vec![whole, IoBuf::from_slice(&[7u8; P]), c];
        let joined = join_parts(parts);
        assert_eq!(joined.len(), 3 * P);
        assert!(joined[..P].iter().all(|&v| v == 0));
        assert!(joined[P..2 * P].iter().all(|&v| v == 7));
        assert!(joined[2 * P..].iter().all(|&v| v == 0));
    }
}
