//! The write path: bitmap first, then per-stripe locked writes. Rotating layouts pick,
//! per row, full-stripe encode (no reads), read-modify-write or reconstruct-write by the
//! bytes they must read, or a degraded reconstruction when members are missing.

use blockdev::{IoBuf, check_range};

use super::{Faults, Inner, MemberFault};
use crate::error::Result;
use crate::layout::{Family, Unmapped};
use crate::topology::Topology;

/// Largest piece of a request processed under one set of stripe locks.
const SEGMENT_BYTES: u64 = 8 << 20;

/// Most shards of a row (k + m).
const MAX_SHARDS: usize = erasure::MAX_DATA_SHARDS + erasure::MAX_PARITY_SHARDS;

impl Inner {
    pub async fn write_volume(&self, offset_bytes: u64, buf: IoBuf, fua: bool) -> Result<IoBuf> {
        check_range(&self.info, offset_bytes, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(buf);
        }
        self.check_usable()?;
        // Segments end on full-row boundaries so a segment never splits a row.
        let row_bytes = self.row_data_bytes();
        let seg = SEGMENT_BYTES.div_ceil(row_bytes) * row_bytes;
        let end = offset_bytes + buf.len() as u64;
        let mut pos = offset_bytes;
        while pos < end {
            let seg_end = ((pos / seg + 1) * seg).min(end);
            let src = &buf[(pos - offset_bytes) as usize..(seg_end - offset_bytes) as usize];
            self.write_segment(pos, src, fua).await?;
            pos = seg_end;
        }
        self.stats.record_write(buf.len() as u64);
        Ok(buf)
    }

    /// Volume bytes of one row (rotating: k chunks) or one chunk (near).
    pub fn row_data_bytes(&self) -> u64 {
        match self.geo.family() {
            Family::Rotating { k, .. } => k as u64 * self.su(),
            Family::Near { .. } => self.su(),
        }
    }

    /// Member data byte span (whole rows) touched by volume bytes `[start, end)`.
    pub fn member_span(&self, start: u64, end: u64) -> (u64, u64) {
        let su = self.su();
        let n = self.geo.members() as u64;
        match self.geo.family() {
            Family::Rotating { k, .. } => {
                let rb = k as u64 * su;
                ((start / rb) * su, ((end - 1) / rb + 1) * su)
            }
            Family::Near { copies } => {
                let c = copies as u64;
                let first_slot = (start / su) * c;
                let last_slot = ((end - 1) / su) * c + c - 1;
                ((first_slot / n) * su, (last_slot / n + 1) * su)
            }
        }
    }

    /// Lock units (rows or chunks) of volume bytes `[start, end)`.
    pub fn lock_units(&self, start: u64, end: u64) -> std::ops::RangeInclusive<u64> {
        let unit = self.row_data_bytes();
        (start / unit)..=((end - 1) / unit)
    }

    async fn write_segment(&self, offset_bytes: u64, src: &[u8], fua: bool) -> Result<()> {
        let end = offset_bytes + src.len() as u64;
        let (ms, me) = self.member_span(offset_bytes, end);
        let _intent = self.intent_begin(ms, me).await?;
        let _locks = self.locks.lock(self.lock_units(offset_bytes, end)).await;
        self.with_retry(|topo| async move {
            match self.geo.family() {
                Family::Near { .. } => self.write_near(&topo, offset_bytes, src, fua).await,
                Family::Rotating { .. } => self.write_rotating(&topo, offset_bytes, src, fua).await,
            }
        })
        .await
    }

    async fn write_near(
        &self,
        topo: &Topology,
        offset_bytes: u64,
        src: &[u8],
        fua: bool,
    ) -> std::result::Result<(), Faults> {
        let su = self.su();
        let extents = self.geo.member_extents(offset_bytes, src.len() as u64);
        let writes = extents
            .into_iter()
            .filter(|e| topo.writable(e.member))
            .map(|e| {
                let mut buf = IoBuf::new_zeroed(e.len_bytes as usize);
                let mut done = 0u64;
                while done < e.len_bytes {
                    let moff = e.member_offset_bytes + done;
                    let n = (su - moff % su).min(e.len_bytes - done);
                    if let Some(Unmapped::Data {
                        vol_offset_bytes, ..
                    }) = self.geo.unmap(e.member, moff)
                    {
                        let s = (vol_offset_bytes - offset_bytes) as usize;
                        buf[done as usize..(done + n) as usize]
                            .copy_from_slice(&src[s..s + n as usize]);
                    }
                    done += n;
                }
                self.mwrite(topo, e.member, e.member_offset_bytes, buf, fua)
            });
        let faults: Faults = futures::future::join_all(writes)
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

    async fn write_rotating(
        &self,
        topo: &Topology,
        offset_bytes: u64,
        src: &[u8],
        fua: bool,
    ) -> std::result::Result<(), Faults> {
        let rb = self.row_data_bytes();
        let end = offset_bytes + src.len() as u64;
        let first = offset_bytes / rb;
        let last = (end - 1) / rb;
        let rows = (first..=last).map(|row| {
            let (s, e) = (offset_bytes.max(row * rb), end.min((row + 1) * rb));
            let piece = &src[(s - offset_bytes) as usize..(e - offset_bytes) as usize];
            self.write_row(topo, row, s, piece, fua)
        });
        let mut faults = Vec::new();
        let mut impossible = false;
        for r in futures::future::join_all(rows).await {
            if let Err(f) = r {
                impossible |= f.is_empty();
                faults.extend(f);
            }
        }
        if faults.is_empty() && !impossible {
            Ok(())
        } else {
            Err(faults)
        }
    }

    /// Writes volume bytes `[start, start + src.len())`, all inside `row`.
    async fn write_row(
        &self,
        topo: &Topology,
        row: u64,
        start: u64,
        src: &[u8],
        fua: bool,
    ) -> std::result::Result<(), Faults> {
        let su = self.su();
        let (k, m) = (self.geo.params().k, self.geo.params().m);
        let Some(rs) = self.rs.as_ref() else {
            return Err(Vec::new());
        };
        let row_base = row * k as u64 * su;
        let end = start + src.len() as u64;
        // Column range [a, b) written in data chunk d, and its bytes.
        let piece = |d: usize| -> Option<(u64, u64, &[u8])> {
            let cs = row_base + d as u64 * su;
            let (s, e) = (start.max(cs), end.min(cs + su));
            (s < e).then(|| {
                let bytes = &src[(s - start) as usize..(e - start) as usize];
                (s - cs, e - cs, bytes)
            })
        };
        let (mut lo, mut hi) = (su, 0);
        for d in 0..k {
            if let Some((a, b, _)) = piece(d) {
                lo = lo.min(a);
                hi = hi.max(b);
            }
        }
        let len = (hi - lo) as usize;
        let mut members = [0usize; MAX_SHARDS];
        for (slot, member) in members.iter_mut().zip(self.geo.row_shard_members(row)) {
            *slot = member;
        }
        let mbase = row * su;
        let readable = |s: usize| topo.readable(members[s], mbase + hi);
        let writable = |s: usize| topo.writable(members[s]);
        let covers = |d: usize| piece(d).is_some_and(|(a, b, _)| a == lo && b == hi);

        // Old data needed per strategy.
        // A data chunk a crash could leave underivable: journal the row (degraded path).
        let journaled: Vec<usize> = match self.journal {
            Some(_) => (0..k)
                .filter(|&d| !topo.durably_readable(members[d], mbase + hi))
                .collect(),
            None => Vec::new(),
        };
        let plain = journaled.is_empty();
        let rmw_ok = plain
            && (0..k).all(|d| piece(d).is_none() || readable(d))
            && (k..k + m).all(|p| !writable(p) || readable(p));
        let rcw_ok = plain && (0..k).all(|d| covers(d) || readable(d));
        let rmw_cost: u64 = (0..k)
            .filter_map(|d| piece(d).map(|(a, b, _)| b - a))
            .sum::<u64>()
            + (k..k + m).filter(|&p| writable(p)).count() as u64 * len as u64;
        let rcw_cost = (0..k).filter(|&d| !covers(d)).count() as u64 * len as u64;

        // Data shard contents over [lo, hi) for encoding (RCW / full / degraded).
        let mut data: Vec<IoBuf>;
        let mut parity: Vec<IoBuf>;
        // A row the background resync has not reached may be torn (parity not matching
        // the data): reconstruct-write makes it consistent at once, where read-modify-write
        // would carry the old mismatch over (until the resync gets there).
        let torn = rcw_ok
            && self
                .intent
                .is_pending(*self.intent.regions_of(mbase, mbase + 1).start());
        if rmw_ok && !torn && (!rcw_ok || rmw_cost < rcw_cost) {
            // Read-modify-write: old data of the written chunks and old parity.
            let reads = (0..k + m)
                .filter(|&s| {
                    if s < k {
                        piece(s).is_some()
                    } else {
                        writable(s)
                    }
                })
                .map(|s| {
                    let (a, b) = if s < k {
                        piece(s).map(|(a, b, _)| (a, b)).unwrap_or((lo, hi))
                    } else {
                        (lo, hi)
                    };
                    async move {
                        self.mread(
                            topo,
                            members[s],
                            mbase + a,
                            IoBuf::new_zeroed((b - a) as usize),
                        )
                        .await
                        .map(|buf| (s, buf))
                    }
                });
            let mut old: Vec<Option<IoBuf>> = (0..k + m).map(|_| None).collect();
            let mut faults = Vec::new();
            for r in futures::future::join_all(reads).await {
                match r {
                    Ok((s, b)) => old[s] = Some(b),
                    Err(f) => faults.push(f),
                }
            }
            if !faults.is_empty() {
                return Err(faults);
            }
            parity = (k..k + m)
                .map(|s| old[s].take().unwrap_or_else(|| IoBuf::new_zeroed(len)))
                .collect();
            for (d, old_d) in old.iter().enumerate().take(k) {
                let (Some((a, b, new)), Some(old_d)) = (piece(d), old_d.as_ref()) else {
                    continue;
                };
                let (pa, pb) = ((a - lo) as usize, (b - lo) as usize);
                let mut outs: [&mut [u8]; erasure::MAX_PARITY_SHARDS] = Default::default();
                for (o, p) in outs.iter_mut().zip(parity.iter_mut()) {
                    *o = &mut p[pa..pb];
                }
                if rs.update_parity(d, old_d, new, &mut outs[..m]).is_err() {
                    return Err(Vec::new());
                }
            }
            data = Vec::new();
        } else {
            data = Vec::with_capacity(k);
            let full = (0..k).all(covers);
            if full {
                // Every data chunk overwritten over [lo, hi): nothing to read, even degraded.
                data.extend((0..k).map(|_| IoBuf::new_zeroed(len)));
            } else if rcw_ok {
                // Reconstruct-write: read what is not overwritten, encode.
                let reads = (0..k).filter(|&d| !covers(d)).map(|d| async move {
                    self.mread(topo, members[d], mbase + lo, IoBuf::new_zeroed(len))
                        .await
                        .map(|b| (d, b))
                });
                let mut got: Vec<Option<IoBuf>> = (0..k).map(|_| None).collect();
                let mut faults = Vec::new();
                for r in futures::future::join_all(reads).await {
                    match r {
                        Ok((d, b)) => got[d] = Some(b),
                        Err(f) => faults.push(f),
                    }
                }
                if !faults.is_empty() {
                    return Err(faults);
                }
                data.extend(
                    got.into_iter()
                        .map(|g| g.unwrap_or_else(|| IoBuf::new_zeroed(len))),
                );
            } else {
                // Degraded: reconstruct the unreadable data shards first.
                let want: Vec<usize> = (0..k).collect();
                let mut shards = self.read_shards(topo, row, lo, hi, &want).await?;
                shards.truncate(k);
                data = shards;
            }
            for (d, buf) in data.iter_mut().enumerate() {
                if let Some((a, b, new)) = piece(d) {
                    buf[(a - lo) as usize..(b - lo) as usize].copy_from_slice(new);
                }
            }
            parity = (0..m).map(|_| IoBuf::new_zeroed(len)).collect();
            let mut ins: [&[u8]; erasure::MAX_DATA_SHARDS] = [&[]; erasure::MAX_DATA_SHARDS];
            for (i, d) in ins.iter_mut().zip(data.iter()) {
                *i = d.as_slice();
            }
            let mut outs: [&mut [u8]; erasure::MAX_PARITY_SHARDS] = Default::default();
            for (o, p) in outs.iter_mut().zip(parity.iter_mut()) {
                *o = p.as_mut_slice();
            }
            if rs.encode(&ins[..k], &mut outs[..m]).is_err() {
                return Err(Vec::new());
            }
        }

        // In flight from here (the barrier waits for us); journaled first if needed.
        let _in_flight = if plain {
            self.row_write_guard().await
        } else {
            let mut payload = Vec::with_capacity(journaled.len() * len);
            let mut missing = Vec::with_capacity(journaled.len());
            for &d in &journaled {
                payload.extend_from_slice(&data[d]);
                missing.push((d, topo.slots[members[d]].state_generation));
            }
            let entry = crate::journal::Entry {
                seq: 0,
                floor: 0,
                row,
                lo: lo as u32,
                len: len as u32,
                missing,
                payload,
            };
            Some(self.journal_append(topo, entry).await?)
        };

        // Data: the written pieces (whole shard buffers when they cover [lo, hi)).
        let mut writes: Vec<(usize, u64, IoBuf)> = Vec::with_capacity(k + m);
        let mut data = data.into_iter().map(Some).collect::<Vec<_>>();
        for (d, &member) in members.iter().enumerate().take(k) {
            let Some((a, b, new)) = piece(d) else {
                continue;
            };
            if !writable(d) {
                continue;
            }
            let buf = match data.get_mut(d).and_then(Option::take) {
                Some(buf) if a == lo && b == hi => buf,
                _ => IoBuf::from_slice(new),
            };
            writes.push((member, mbase + a, buf));
        }
        for (j, buf) in parity.into_iter().enumerate() {
            if writable(k + j) {
                writes.push((members[k + j], mbase + lo, buf));
            }
        }
        let faults: Vec<MemberFault> = futures::future::join_all(
            writes
                .into_iter()
                .map(|(member, off, buf)| self.mwrite(topo, member, off, buf, fua)),
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

    pub async fn flush_volume(&self) -> Result<()> {
        self.with_retry(|topo| async move {
            let faults = self.flush_members(&topo).await;
            if faults.is_empty() {
                Ok(())
            } else {
                Err(faults)
            }
        })
        .await?;
        self.stats.record_flush();
        Ok(())
    }

    /// Writes zeroes through the normal path (keeps parity and copies consistent).
    pub async fn zero_volume(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        check_range(&self.info, offset_bytes, len_bytes)?;
        let chunk = SEGMENT_BYTES.div_ceil(self.row_data_bytes()) * self.row_data_bytes();
        let mut zero = IoBuf::new_zeroed(chunk as usize);
        let end = offset_bytes + len_bytes;
        let mut pos = offset_bytes;
        while pos < end {
            let n = ((pos / chunk + 1) * chunk).min(end) - pos;
            zero.set_len(n as usize);
            self.write_segment(pos, &zero, false).await?;
            pos += n;
        }
        Ok(())
    }
}
