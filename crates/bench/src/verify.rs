//! Checking what reads return against the stamps writes left (stamp.rs).
//!
//! Each sector is checked on its own (lost, misdirected, corrupt). Tears need more: a
//! write is torn when the sectors of its extent do not all come from it. Since a stamp
//! names its write's extent, the checker follows writes across the sectors it sees in
//! device order ([`ExtentTracker`]), so any block size can verify what another wrote:
//! blocks of a sequential pass are checked in order even when their reads complete out
//! of order ([`InOrder`]); a block read at random is checked on its own.

use std::collections::BTreeMap;

use blockdev::IoBuf;

use crate::config::BenchConfig;
use crate::report::VerifyReport;
use crate::stamp::{Extent, SECTOR_BYTES, StampCheck, check_sector};

pub(crate) const MAX_FIRST_ERRORS: usize = 8;
/// Writes whose extents overlap one sector that the tracker follows at once; more only
/// happens when runs of many block sizes overwrote each other, and the oldest is let go.
const MAX_OPEN_EXTENTS: usize = 16;

fn note(v: &mut VerifyReport, msg: String) {
    if v.first_errors.len() < MAX_FIRST_ERRORS {
        v.first_errors.push(msg);
    }
}

struct OpenExtent {
    extent: Extent,
    generation: u32,
    write_id: u32,
    /// Reported torn already (a write is counted once).
    torn: bool,
}

/// The writes seen in the sectors checked so far whose extents reach further.
#[derive(Default)]
pub(crate) struct ExtentTracker {
    open: Vec<OpenExtent>,
}

impl ExtentTracker {
    /// Forgets every write: the next sector does not follow the last one.
    pub fn reset(&mut self) {
        self.open.clear();
    }

    /// Feeds the sector at `offset_bytes` (after the one before it, in device order).
    /// Returns the extent of a write this sector shows torn, once per write: a sector
    /// inside the extent of a write seen before that holds another write of the same
    /// extent, or nothing. (A write of another extent there is a later or earlier
    /// overwrite with another block size, not a tear.)
    pub fn sector(&mut self, offset_bytes: u64, check: &StampCheck) -> Option<Extent> {
        self.open.retain(|e| e.extent.end_bytes() > offset_bytes);
        match *check {
            StampCheck::Ok {
                generation,
                write_id,
                extent: Some(extent),
            } => {
                if let Some(e) = self.open.iter_mut().find(|e| e.extent == extent) {
                    if (e.generation, e.write_id) != (generation, write_id) && !e.torn {
                        e.torn = true;
                        return Some(extent);
                    }
                    return None;
                }
                if self.open.len() == MAX_OPEN_EXTENTS {
                    self.open.remove(0);
                }
                self.open.push(OpenExtent {
                    extent,
                    generation,
                    write_id,
                    torn: false,
                });
                None
            }
            StampCheck::Unwritten => {
                let e = self
                    .open
                    .iter_mut()
                    .find(|e| e.extent.contains(offset_bytes) && !e.torn)?;
                e.torn = true;
                Some(e.extent)
            }
            _ => None,
        }
    }
}

/// Checks every sector of a block read at `offset_bytes`. `expected_write_id` is the
/// last write acknowledged for it in this run (0 when none: any stamp is fine).
pub(crate) fn check_block(
    buf: &[u8],
    offset_bytes: u64,
    expected_write_id: u32,
    cfg: &BenchConfig,
    tracker: &mut ExtentTracker,
    v: &mut VerifyReport,
) {
    let mut failed = false;
    v.blocks_checked += 1;
    for (i, sector) in buf.chunks_exact(SECTOR_BYTES).enumerate() {
        let off = offset_bytes + (SECTOR_BYTES * i) as u64;
        v.sectors_checked += 1;
        let check = check_sector(sector, off);
        if let Some(e) = tracker.sector(off, &check) {
            v.torn += 1;
            failed = true;
            note(
                v,
                format!(
                    "write of {} bytes at {}: torn, the sector at {off} holds {}",
                    e.len_bytes,
                    e.offset_bytes,
                    if check == StampCheck::Unwritten {
                        "nothing"
                    } else {
                        "another write"
                    }
                ),
            );
        }
        match check {
            StampCheck::Unwritten => {
                v.sectors_unwritten += 1;
                if expected_write_id != 0 {
                    v.lost += 1;
                    failed = true;
                    note(
                        v,
                        format!(
                            "sector at {off}: reads as never written, but a write was acknowledged"
                        ),
                    );
                }
            }
            StampCheck::Corrupt => {
                v.corrupt += 1;
                failed = true;
                note(v, format!("sector at {off}: not a valid stamp (corrupt)"));
            }
            StampCheck::Misdirected { found_offset_bytes } => {
                v.misdirected += 1;
                failed = true;
                note(
                    v,
                    format!("sector at {off}: holds data written for offset {found_offset_bytes}"),
                );
            }
            StampCheck::Ok {
                generation,
                write_id,
                ..
            } => {
                if expected_write_id != 0 && write_id != expected_write_id {
                    v.lost += 1;
                    failed = true;
                    note(
                        v,
                        format!(
                            "sector at {off}: write {write_id:#x} found, {expected_write_id:#x} was acknowledged last"
                        ),
                    );
                } else if cfg.verify_only && generation > cfg.generation {
                    v.corrupt += 1;
                    failed = true;
                    note(
                        v,
                        format!(
                            "sector at {off}: generation {generation} is newer than {}",
                            cfg.generation
                        ),
                    );
                }
            }
        }
    }
    if failed {
        v.blocks_failed += 1;
    }
}

/// Checks one block read back at `offset_bytes` on its own, outside a run: every sector
/// against the stamps, and against `expected_write_id`, the last write acknowledged for
/// it (0: any stamp will do). Adds to `v` as a run's verification would (a tear shows
/// only within the block). For checkers that track acknowledged writes themselves, e.g.
/// across a failover.
pub fn check_read_block(
    buf: &[u8],
    offset_bytes: u64,
    expected_write_id: u32,
    v: &mut VerifyReport,
) {
    let cfg = BenchConfig {
        verify: true,
        ..BenchConfig::default()
    };
    check_block(
        buf,
        offset_bytes,
        expected_write_id,
        &cfg,
        &mut ExtentTracker::default(),
        v,
    );
}

/// A read done, waiting for its turn to be checked.
struct Held {
    offset_bytes: u64,
    expected_write_id: u32,
    /// None: the read failed (counted where it completed).
    buf: Option<IoBuf>,
}

/// Blocks of a sequential pass, checked in the order they were issued (`seq` 0, 1, 2,
/// ...) whatever order their reads complete in. Holds at most the reads in flight.
#[derive(Default)]
pub(crate) struct InOrder {
    next_seq: u64,
    held: BTreeMap<u64, Held>,
    tracker: ExtentTracker,
    /// Where the last block checked ended: a block elsewhere starts afresh.
    last_end_bytes: Option<u64>,
}

impl InOrder {
    /// A read of pass position `seq` completed; checks it and every held one after it
    /// that is now in order, giving their buffers back to `pool`.
    #[allow(clippy::too_many_arguments)]
    pub fn done(
        &mut self,
        seq: u64,
        offset_bytes: u64,
        expected_write_id: u32,
        buf: Option<IoBuf>,
        cfg: &BenchConfig,
        v: &mut VerifyReport,
        pool: &mut Vec<IoBuf>,
    ) {
        self.held.insert(
            seq,
            Held {
                offset_bytes,
                expected_write_id,
                buf,
            },
        );
        while let Some(h) = self.held.remove(&self.next_seq) {
            self.next_seq += 1;
            if self.last_end_bytes != Some(h.offset_bytes) {
                self.tracker.reset();
            }
            match h.buf {
                Some(buf) => {
                    check_block(
                        &buf,
                        h.offset_bytes,
                        h.expected_write_id,
                        cfg,
                        &mut self.tracker,
                        v,
                    );
                    self.last_end_bytes = Some(h.offset_bytes + buf.len() as u64);
                    pool.push(buf);
                }
                None => self.last_end_bytes = None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stamp::stamp_block;

    fn cfg() -> BenchConfig {
        BenchConfig {
            verify: true,
            verify_only: true,
            ..BenchConfig::default()
        }
    }

    /// 64 KiB written as 8 KiB writes, one of which (at 16 KiB) is torn: its second half
    /// holds another write of the same extent.
    fn image() -> Vec<u8> {
        let mut img = vec![0u8; 64 << 10];
        for (i, w) in img.chunks_exact_mut(8192).enumerate() {
            stamp_block(w, i as u64 * 8192, 1, 10 + i as u32);
        }
        let mut other = vec![0u8; 8192];
        stamp_block(&mut other, 16384, 1, 99);
        img[16384 + 4096..16384 + 8192].copy_from_slice(&other[4096..]);
        img
    }

    fn verify_in_order(img: &[u8], bs: usize, reverse: bool) -> VerifyReport {
        let mut v = VerifyReport::default();
        let mut order = InOrder::default();
        let mut pool = Vec::new();
        let mut blocks: Vec<(u64, IoBuf)> = img
            .chunks(bs)
            .enumerate()
            .map(|(i, b)| (i as u64, IoBuf::from_slice(b)))
            .collect();
        if reverse {
            blocks.reverse();
        }
        for (seq, buf) in blocks {
            order.done(
                seq,
                seq * bs as u64,
                0,
                Some(buf),
                &cfg(),
                &mut v,
                &mut pool,
            );
        }
        v
    }

    #[test]
    fn any_block_size_finds_the_one_torn_write_and_nothing_else() {
        let img = image();
        for bs in [512, 4096, 8192, 12288, 65536] {
            for reverse in [false, true] {
                let v = verify_in_order(&img, bs, reverse);
                assert_eq!(v.torn, 1, "bs {bs} reverse {reverse}: {v:?}");
                assert_eq!(v.blocks_failed, 1, "bs {bs}: {v:?}");
                assert_eq!(v.lost + v.corrupt + v.misdirected, 0, "bs {bs}: {v:?}");
                assert_eq!(v.sectors_checked, 128, "bs {bs}");
                assert!(
                    v.first_errors[0].contains("write of 8192 bytes at 16384"),
                    "{v:?}"
                );
            }
        }
    }

    #[test]
    fn whole_writes_read_with_another_block_size_are_good() {
        let mut img = vec![0u8; 64 << 10];
        for (i, w) in img.chunks_exact_mut(8192).enumerate() {
            stamp_block(w, i as u64 * 8192, 1, 10 + i as u32);
        }
        // A later run with 4 KiB writes over part of it: an overwrite, not a tear.
        stamp_block(&mut img[20480..24576], 20480, 1, 500);
        for bs in [512, 4096, 12288, 65536] {
            let v = verify_in_order(&img, bs, false);
            assert_eq!(v.mismatches(), 0, "bs {bs}: {v:?}");
        }
    }

    #[test]
    fn half_a_write_never_written_is_a_tear() {
        let mut img = vec![0u8; 16384];
        stamp_block(&mut img[..8192], 0, 1, 1);
        img[4096..8192].fill(0);
        let v = verify_in_order(&img, 4096, false);
        assert_eq!((v.torn, v.sectors_unwritten), (1, 8 + 16), "{v:?}");
    }

    #[test]
    fn a_failed_read_breaks_the_sequence() {
        let img = image();
        let mut v = VerifyReport::default();
        let mut order = InOrder::default();
        let mut pool = Vec::new();
        for (seq, b) in img.chunks(4096).enumerate() {
            // The read of the torn write's first half failed: its second half alone
            // cannot tell.
            let buf = (seq != 4).then(|| IoBuf::from_slice(b));
            order.done(
                seq as u64,
                seq as u64 * 4096,
                0,
                buf,
                &cfg(),
                &mut v,
                &mut pool,
            );
        }
        assert_eq!((v.torn, v.blocks_checked), (0, 15), "{v:?}");
    }

    #[test]
    fn one_block_against_its_last_acknowledged_write() {
        let mut block = vec![0u8; 4096];
        stamp_block(&mut block, 8192, 3, 5);
        let check = |buf: &[u8], off: u64, id: u32| {
            let mut v = VerifyReport::default();
            check_read_block(buf, off, id, &mut v);
            v
        };
        let ok = check(&block, 8192, 5);
        assert_eq!(
            (ok.blocks_checked, ok.sectors_checked, ok.mismatches()),
            (1, 8, 0)
        );
        assert_eq!(check(&block, 8192, 0).mismatches(), 0, "any stamp will do");
        assert_eq!(
            check(&block, 8192, 6).lost,
            8,
            "an older write than acknowledged"
        );
        assert_eq!(check(&block, 4096, 5).misdirected, 8);
        let zeroes = vec![0u8; 4096];
        assert_eq!(
            check(&zeroes, 8192, 5).lost,
            8,
            "acknowledged, reads as never written"
        );
        assert_eq!(check(&zeroes, 8192, 0).mismatches(), 0);
        let mut flipped = block.clone();
        flipped[600] ^= 1;
        let v = check(&flipped, 8192, 5);
        assert_eq!((v.corrupt, v.blocks_failed), (1, 1));
    }
}
