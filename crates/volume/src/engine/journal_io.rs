//! Stripe journal I/O: appending before degraded row writes, the drain-and-flush barrier,
//! and replay at assembly.

use std::collections::BTreeMap;

use blockdev::IoBuf;
use tokio::sync::RwLockReadGuard;
use tracing::warn;

use super::{Faults, Inner};
use crate::journal::{Entry, scan};
use crate::topology::Topology;

impl Inner {
    /// Waits until no row write is in flight, then flushes every member: everything
    /// written so far is durable and consistent. Returns the members that failed to flush.
    pub async fn write_barrier(&self) -> Faults {
        let _drain = self.inflight.write().await;
        let topo = self.topo();
        self.flush_members(&topo).await
    }

    /// Starts a new journal epoch after a barrier: older entries are obsolete.
    pub async fn journal_reset(&self) -> Faults {
        let Some(j) = self.journal.as_ref() else {
            return Vec::new();
        };
        let mut ring = j.ring.lock().await;
        let faults = self.write_barrier().await;
        if faults.is_empty() {
            ring.pos = 0;
            ring.floor = ring.next_seq;
        }
        faults
    }

    /// Marks a row write in flight (for the barrier).
    pub async fn row_write_guard(&self) -> Option<RwLockReadGuard<'_, ()>> {
        match self.journal {
            Some(_) => Some(self.inflight.read().await),
            None => None,
        }
    }

    /// Appends `entry` (seq assigned here) to every writable member with FUA; the row
    /// write may start once this returns. The guard keeps the write in flight.
    pub async fn journal_append(
        &self,
        topo: &Topology,
        mut entry: Entry,
    ) -> std::result::Result<RwLockReadGuard<'_, ()>, Faults> {
        let Some(j) = self.journal.as_ref() else {
            return Err(Vec::new());
        };
        let size = entry.encoded_len();
        if size > j.bytes {
            return Err(Vec::new());
        }
        let mut ring = j.ring.lock().await;
        if ring.pos + size > j.bytes {
            // Wrap: once every journaled row is durable the old entries are obsolete.
            let faults = self.write_barrier().await;
            if !faults.is_empty() {
                return Err(faults);
            }
            ring.pos = 0;
            ring.floor = ring.next_seq;
        }
        let guard = self.inflight.read().await;
        entry.seq = ring.next_seq;
        entry.floor = ring.floor;
        let buf = entry.encode(self.uuid);
        let at = j.offset_bytes + ring.pos;
        let writes = (0..topo.slots.len())
            .filter(|&i| topo.writable(i))
            .filter_map(|i| topo.dev(i).map(|d| (i, d)))
            .map(|(i, d)| {
                let b = buf.clone();
                async move { self.mwrite_raw(i, d, at, b, true).await }
            });
        let faults: Faults = futures::future::join_all(writes)
            .await
            .into_iter()
            .filter_map(|r| r.err())
            .collect();
        if !faults.is_empty() {
            // Not advanced: the retry overwrites this slot, keeping the chain intact.
            return Err(faults);
        }
        ring.next_seq += 1;
        ring.pos += size;
        Ok(guard)
    }

    /// Reads the journal at assembly and, after an unclean stop (`replay`), recomputes
    /// the parity of every live entry's range from the readable data and the journaled
    /// chunks. `absent_gen` is each slot's `state_generation` in the authoritative
    /// superblock (an entry's chunk is only trusted for the same absence). The next epoch
    /// starts above every seq found. Returns the rows fixed and the number of entries
    /// that could not be applied.
    pub async fn replay_journal(&self, absent_gen: &[u64], replay: bool) -> (Vec<u64>, u64) {
        let Some(j) = self.journal.as_ref() else {
            return (Vec::new(), 0);
        };
        let topo = self.topo();
        let mut entries: BTreeMap<u64, Entry> = BTreeMap::new();
        for i in 0..topo.slots.len() {
            if !topo.writable(i) {
                continue;
            }
            let Some(dev) = topo.dev(i) else { continue };
            match dev
                .read(j.offset_bytes, IoBuf::new_zeroed(j.bytes as usize))
                .await
            {
                Ok(ring) => {
                    for e in scan(&ring, self.uuid) {
                        entries.entry(e.seq).or_insert(e);
                    }
                }
                Err(e) => warn!(member = i, error = %e, "journal unreadable"),
            }
        }
        let floor = entries.values().map(|e| e.floor).max().unwrap_or(0);
        let max_seq = entries.keys().next_back().copied().unwrap_or(0);
        let mut fixed = Vec::new();
        let mut skipped = 0;
        for e in entries.into_values().filter(|e| replay && e.seq >= floor) {
            match self.replay_entry(&topo, &e, absent_gen).await {
                Ok(true) => fixed.push(e.row),
                Ok(false) => skipped += 1,
                Err(_) => skipped += 1,
            }
        }
        let mut ring = j.ring.lock().await;
        ring.next_seq = ring.next_seq.max(max_seq + 1);
        ring.floor = ring.next_seq;
        ring.pos = 0;
        (fixed, skipped)
    }

    async fn replay_entry(
        &self,
        topo: &Topology,
        e: &Entry,
        absent_gen: &[u64],
    ) -> std::result::Result<bool, Faults> {
        let su = self.su();
        let (k, m) = (self.geo.params().k, self.geo.params().m);
        let (lo, len) = (u64::from(e.lo), e.len as usize);
        if e.row >= self.geo.rows() || lo + len as u64 > su {
            return Ok(false);
        }
        let _lock = self.locks.lock([e.row]).await;
        let members: Vec<usize> = self.geo.row_shard_members(e.row).collect();
        let mend = e.row * su + lo + len as u64;
        let mut data: Vec<IoBuf> = Vec::with_capacity(k);
        for (d, &member) in members.iter().enumerate().take(k) {
            if topo.readable(member, mend) {
                let b = self
                    .mread(topo, member, e.row * su + lo, IoBuf::new_zeroed(len))
                    .await
                    .map_err(|f| vec![f])?;
                data.push(b);
                continue;
            }
            // Unreadable: the journal must hold it, for this very absence.
            let Some(pos) = e
                .missing
                .iter()
                .position(|&(md, g)| md == d && absent_gen.get(member).copied() == Some(g))
            else {
                return Ok(false);
            };
            data.push(IoBuf::from_slice(&e.payload[pos * len..(pos + 1) * len]));
        }
        let Some(rs) = self.rs.as_ref() else {
            return Ok(false);
        };
        let mut parity: Vec<IoBuf> = (0..m).map(|_| IoBuf::new_zeroed(len)).collect();
        let ins: Vec<&[u8]> = data.iter().map(|b| b.as_slice()).collect();
        let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
        if rs.encode(&ins, &mut outs).is_err() {
            return Ok(false);
        }
        let writes = parity
            .into_iter()
            .enumerate()
            .filter(|(j, _)| topo.writable(members[k + j]))
            .map(|(j, p)| (members[k + j], e.row * su + lo, p))
            .collect();
        self.write_pieces(topo, writes).await?;
        Ok(true)
    }
}
