//! Row-batch plumbing shared by resync, rebuild and scrub: locking a run of rows, reading
//! it from every readable member in one I/O each (throttling is in `crate::chunks`).

use blockdev::IoBuf;

use super::{Faults, Inner};
use crate::layout::Family;
use crate::locks::StripeGuards;
use crate::topology::Topology;

/// Rows `[r0, r1)` of some members, read in one piece each.
pub(crate) struct Batch {
    pub r0: u64,
    pub r1: u64,
    su: u64,
    pub bufs: Vec<Option<IoBuf>>,
}

impl Batch {
    /// Member `member`'s bytes of `row` (if it was read and the row is in the batch).
    pub fn shard(&self, member: usize, row: u64) -> Option<&[u8]> {
        if row < self.r0 || row >= self.r1 {
            return None;
        }
        let at = ((row - self.r0) * self.su) as usize;
        self.bufs
            .get(member)?
            .as_ref()
            .and_then(|b| b.get(at..at + self.su as usize))
    }
}

impl Inner {
    /// Rows per batch.
    pub fn batch_rows(&self) -> u64 {
        (self.opts.batch_bytes / self.su()).max(1)
    }

    /// Locks the stripes of rows `[r0, r1)`: the rows (rotating) or every chunk with a
    /// copy in them (near).
    pub async fn lock_rows(&self, r0: u64, r1: u64) -> StripeGuards<'_> {
        match self.geo.family() {
            Family::Rotating { .. } => self.locks.lock(r0..r1).await,
            Family::Near { copies } => {
                let n = self.geo.members() as u64;
                let c = copies as u64;
                let first = r0 * n / c;
                let last = (r1 * n).div_ceil(c).min(self.geo.chunks());
                self.locks.lock(first..last).await
            }
        }
    }

    /// Reads rows `[r0, r1)` from every member `pick` selects (one I/O per member).
    pub async fn read_batch(
        &self,
        topo: &Topology,
        r0: u64,
        r1: u64,
        pick: impl Fn(usize) -> bool,
    ) -> std::result::Result<Batch, Faults> {
        let su = self.su();
        let len = ((r1 - r0) * su) as usize;
        let reads = (0..self.geo.members())
            .filter(|&i| pick(i))
            .map(|i| async move {
                self.mread(topo, i, r0 * su, IoBuf::new_zeroed(len))
                    .await
                    .map(|b| (i, b))
            });
        let mut bufs: Vec<Option<IoBuf>> = (0..self.geo.members()).map(|_| None).collect();
        let mut faults = Vec::new();
        for r in futures::future::join_all(reads).await {
            match r {
                Ok((i, b)) => bufs[i] = Some(b),
                Err(f) => faults.push(f),
            }
        }
        if faults.is_empty() {
            Ok(Batch { r0, r1, su, bufs })
        } else {
            Err(faults)
        }
    }

    /// Writes `(member, member offset, bytes)` pieces concurrently.
    pub async fn write_pieces(
        &self,
        topo: &Topology,
        pieces: Vec<(usize, u64, IoBuf)>,
    ) -> std::result::Result<(), Faults> {
        let faults: Faults = futures::future::join_all(
            pieces
                .into_iter()
                .map(|(m, off, buf)| self.mwrite(topo, m, off, buf, false)),
        )
        .await
        .into_iter()
        .filter_map(|r| r.err())
        .collect();
        if faults.is_empty() {
            Ok(())
        } else {
            Err(faults)
        }
    }
}
