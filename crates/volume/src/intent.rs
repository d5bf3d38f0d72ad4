//! The write-intent bitmap: one bit per region of member space, set durably on the
//! bitmap members before any data of the region is written, cleared lazily once the
//! region has been quiet for a while and every member was flushed. While any slot is not
//! active (failed, missing or rebuilding) bits are kept, so the bitmap also records
//! "dirty since member X left" for partial rebuilds.
//!
//! Three bit sets are kept: `want` (regions that must be dirty on disk), `durable` (set
//! bits known durable on every bitmap member) and `written` (what was last written, FUA or
//! not). Setting writes whole 4 KiB bitmap blocks with FUA; clearing writes them without
//! FUA (a late clear is harmless: the data was flushed before).

use std::ops::RangeInclusive;
use std::sync::{Mutex, MutexGuard};

use blockdev::IoBuf;

use crate::format::BitmapGeometry;

/// Bytes per bitmap write.
pub(crate) const BITMAP_BLOCK_BYTES: usize = 4096;
const WORDS_PER_BLOCK: usize = BITMAP_BLOCK_BYTES / 8;

struct State {
    inflight: Vec<u32>,
    /// A write started in the region since the last sweep.
    touched: Vec<bool>,
    want: Vec<u64>,
    durable: Vec<u64>,
    written: Vec<u64>,
    /// No clearing (some slot is not active).
    keep: bool,
    /// Dirty regions a background resync has not finished yet: never cleared, so a
    /// crash meanwhile still finds them dirty.
    pending: Vec<bool>,
    pending_count: usize,
}

/// In-memory side of the bitmap. Member I/O is done by the caller (see `engine`).
pub(crate) struct WriteIntent {
    geom: BitmapGeometry,
    /// False for layouts without redundancy (raid0): nothing to resync.
    enabled: bool,
    state: Mutex<State>,
    /// Serialises bitmap writes (set batches and clear sweeps).
    pub io: tokio::sync::Mutex<()>,
}

/// A block image to write: block index and its bytes.
pub(crate) struct BlockImage {
    pub block: usize,
    pub bytes: IoBuf,
    words: Vec<u64>,
}

fn bit(words: &[u64], r: usize) -> bool {
    words.get(r / 64).is_some_and(|w| w & (1 << (r % 64)) != 0)
}

fn set_bit(words: &mut [u64], r: usize, on: bool) {
    if let Some(w) = words.get_mut(r / 64) {
        if on {
            *w |= 1 << (r % 64);
        } else {
            *w &= !(1 << (r % 64));
        }
    }
}

impl WriteIntent {
    pub fn new(geom: BitmapGeometry, enabled: bool, keep: bool) -> WriteIntent {
        let regions = geom.region_count as usize;
        let words = regions.div_ceil(64);
        WriteIntent {
            geom,
            enabled,
            state: Mutex::new(State {
                inflight: vec![0; regions],
                touched: vec![false; regions],
                want: vec![0; words],
                durable: vec![0; words],
                written: vec![0; words],
                keep,
                pending: vec![false; regions],
                pending_count: 0,
            }),
            io: tokio::sync::Mutex::new(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn geometry(&self) -> &BitmapGeometry {
        &self.geom
    }

    /// Bytes of bitmap blocks on disk (whole blocks covering all regions).
    pub fn block_count(&self) -> usize {
        (self.geom.region_count as usize)
            .div_ceil(8)
            .div_ceil(BITMAP_BLOCK_BYTES)
    }

    /// Regions covering member data bytes `[start, end)`.
    pub fn regions_of(&self, start_bytes: u64, end_bytes: u64) -> RangeInclusive<usize> {
        let rb = self.geom.region_bytes;
        let first = (start_bytes / rb) as usize;
        let last = (end_bytes.max(start_bytes + 1) - 1) / rb;
        first..=(last as usize).min((self.geom.region_count as usize).saturating_sub(1))
    }

    /// Member data byte range of a region.
    pub fn region_range(&self, region: usize) -> (u64, u64) {
        let rb = self.geom.region_bytes;
        (region as u64 * rb, (region as u64 + 1) * rb)
    }

    /// Registers a write to `regions`; true if every bit is already durable (no I/O needed).
    pub fn begin(&self, regions: RangeInclusive<usize>) -> bool {
        if !self.enabled {
            return true;
        }
        let mut st = self.lock();
        let mut all_durable = true;
        for r in regions {
            if let Some(c) = st.inflight.get_mut(r) {
                *c += 1;
            }
            if let Some(t) = st.touched.get_mut(r) {
                *t = true;
            }
            if !bit(&st.durable, r) {
                all_durable = false;
                set_bit(&mut st.want, r, true);
            }
        }
        all_durable
    }

    pub fn end(&self, regions: RangeInclusive<usize>) {
        if !self.enabled {
            return;
        }
        let mut st = self.lock();
        for r in regions {
            if let Some(c) = st.inflight.get_mut(r) {
                *c = c.saturating_sub(1);
            }
        }
    }

    #[cfg(test)]
    pub fn all_durable(&self, regions: RangeInclusive<usize>) -> bool {
        let st = self.lock();
        regions.into_iter().all(|r| bit(&st.durable, r))
    }

    /// Marks regions dirty and durable as found on disk at assembly.
    pub fn load(&self, dirty: &[u64]) {
        let mut st = self.lock();
        let regions = self.geom.region_count as usize;
        for r in 0..regions {
            if bit(dirty, r) {
                set_bit(&mut st.want, r, true);
                set_bit(&mut st.durable, r, true);
                set_bit(&mut st.written, r, true);
            }
        }
    }

    /// A sweep failed half-way: the regions are dirty again and must be re-persisted.
    pub fn remark(&self, regions: &[usize]) {
        let mut st = self.lock();
        for &r in regions {
            set_bit(&mut st.want, r, true);
            set_bit(&mut st.durable, r, false);
        }
    }

    pub fn set_keep(&self, keep: bool) {
        self.lock().keep = keep;
    }

    /// Marks regions as waiting for the background resync (the sweeper skips them).
    pub fn set_pending(&self, regions: &[usize]) {
        let mut st = self.lock();
        for &r in regions {
            if let Some(p) = st.pending.get_mut(r)
                && !*p
            {
                *p = true;
                st.pending_count += 1;
            }
        }
    }

    /// The resync of `region` is done: the sweeper may clear it again.
    pub fn clear_pending(&self, region: usize) {
        let mut st = self.lock();
        if let Some(p) = st.pending.get_mut(region)
            && *p
        {
            *p = false;
            st.pending_count -= 1;
        }
    }

    /// Regions still waiting for the background resync.
    pub fn pending_count(&self) -> usize {
        self.lock().pending_count
    }

    /// Whether `region` still waits for the background resync.
    pub fn is_pending(&self, region: usize) -> bool {
        let st = self.lock();
        st.pending_count > 0 && st.pending.get(region).copied().unwrap_or(false)
    }

    pub fn is_dirty(&self, region: usize) -> bool {
        bit(&self.lock().want, region)
    }

    pub fn dirty_regions(&self) -> Vec<usize> {
        let st = self.lock();
        (0..self.geom.region_count as usize)
            .filter(|&r| bit(&st.want, r))
            .collect()
    }

    fn image(words: &[u64], block: usize) -> BlockImage {
        let start = block * WORDS_PER_BLOCK;
        let slice: Vec<u64> = (start..start + WORDS_PER_BLOCK)
            .map(|i| words.get(i).copied().unwrap_or(0))
            .collect();
        let mut bytes = IoBuf::new_zeroed(BITMAP_BLOCK_BYTES);
        for (chunk, w) in bytes.chunks_exact_mut(8).zip(&slice) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        BlockImage {
            block,
            bytes,
            words: slice,
        }
    }

    /// Blocks holding wanted bits that are not durable yet (call with `io` held).
    pub fn set_images(&self) -> Vec<BlockImage> {
        let st = self.lock();
        (0..self.block_count())
            .filter(|&b| {
                let range = b * WORDS_PER_BLOCK..((b + 1) * WORDS_PER_BLOCK).min(st.want.len());
                range.into_iter().any(|i| st.want[i] & !st.durable[i] != 0)
            })
            .map(|b| Self::image(&st.want, b))
            .collect()
    }

    /// Every block (for initialising a new member's bitmap).
    pub fn all_images(&self) -> Vec<BlockImage> {
        let st = self.lock();
        (0..self.block_count())
            .map(|b| Self::image(&st.want, b))
            .collect()
    }

    /// The images were written with FUA to every bitmap member.
    pub fn images_durable(&self, images: &[BlockImage]) {
        let mut st = self.lock();
        for img in images {
            let start = img.block * WORDS_PER_BLOCK;
            for (i, w) in img.words.iter().enumerate() {
                if let Some(d) = st.durable.get_mut(start + i) {
                    *d = *w;
                }
                if let Some(d) = st.written.get_mut(start + i) {
                    *d = *w;
                }
            }
        }
    }

    /// Sweep step 1 (with `io` held): picks regions quiet since the last sweep, clears them
    /// in memory (so new writers must set them again, which waits for `io`), and ages the
    /// rest. Returns the picked regions; the caller then flushes every member and writes
    /// [`WriteIntent::clear_images`].
    pub fn sweep_select(&self, force: bool) -> Vec<usize> {
        let mut st = self.lock();
        let mut picked = Vec::new();
        if st.keep {
            return picked;
        }
        for r in 0..self.geom.region_count as usize {
            if !bit(&st.want, r) {
                continue;
            }
            let quiet = st.inflight[r] == 0 && (force || !st.touched[r]) && !st.pending[r];
            if quiet {
                set_bit(&mut st.want, r, false);
                set_bit(&mut st.durable, r, false);
                picked.push(r);
            }
            st.touched[r] = false;
        }
        picked
    }

    /// Sweep step 2: blocks whose on-disk image has bits the memory no longer wants.
    pub fn clear_images(&self) -> Vec<BlockImage> {
        let st = self.lock();
        (0..self.block_count())
            .filter(|&b| {
                let range = b * WORDS_PER_BLOCK..((b + 1) * WORDS_PER_BLOCK).min(st.want.len());
                range.into_iter().any(|i| st.written[i] & !st.want[i] != 0)
            })
            .map(|b| Self::image(&st.want, b))
            .collect()
    }

    /// The clear images were written (not necessarily durable; that is fine).
    pub fn images_written(&self, images: &[BlockImage]) {
        let mut st = self.lock();
        for img in images {
            let start = img.block * WORDS_PER_BLOCK;
            for (i, w) in img.words.iter().enumerate() {
                if let Some(d) = st.written.get_mut(start + i) {
                    *d = *w;
                }
            }
        }
    }

    /// Byte offset of a bitmap block on a member.
    pub fn block_offset(&self, block: usize) -> u64 {
        self.geom.offset_bytes + (block * BITMAP_BLOCK_BYTES) as u64
    }
}

/// Decodes an on-disk bitmap area into words (bits past `region_count` dropped).
pub(crate) fn decode_bitmap(bytes: &[u8], region_count: u64) -> Vec<u64> {
    let words = (region_count as usize).div_ceil(64);
    let mut out: Vec<u64> = bytes
        .chunks(8)
        .take(words)
        .map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(w)
        })
        .collect();
    out.resize(words, 0);
    if let Some(last) = out.last_mut() {
        let tail = region_count % 64;
        if tail != 0 {
            *last &= (1u64 << tail) - 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geom(regions: u64) -> BitmapGeometry {
        BitmapGeometry {
            offset_bytes: 8192,
            area_bytes: 4096 * regions.div_ceil(32768),
            region_bytes: 1 << 20,
            region_count: regions,
        }
    }

    #[test]
    fn set_then_durable_then_sweep() {
        let wi = WriteIntent::new(geom(100), true, false);
        assert_eq!(wi.regions_of(0, 1), 0..=0);
        assert_eq!(wi.regions_of((1 << 20) - 512, (1 << 20) + 512), 0..=1);
        assert!(!wi.begin(3..=4));
        let imgs = wi.set_images();
        assert_eq!(imgs.len(), 1);
        assert_eq!(imgs[0].bytes[0], 0b11000);
        wi.images_durable(&imgs);
        assert!(wi.begin(3..=3), "already durable");
        assert!(wi.set_images().is_empty());
        // In flight: never picked.
        assert!(wi.sweep_select(true).is_empty());
        wi.end(3..=4);
        wi.end(3..=3);
        assert!(wi.begin(4..=4));
        wi.end(4..=4);
        // Region 4 was touched since the last sweep: aged, not picked yet.
        assert_eq!(wi.sweep_select(false), vec![3]);
        assert_eq!(wi.sweep_select(false), vec![4]);
        assert!(wi.dirty_regions().is_empty());
        let clears = wi.clear_images();
        assert_eq!(clears.len(), 1);
        assert_eq!(clears[0].bytes[0], 0);
        wi.images_written(&clears);
        assert!(wi.clear_images().is_empty());
        assert!(!wi.all_durable(3..=3));
    }

    #[test]
    fn keep_blocks_clearing() {
        let wi = WriteIntent::new(geom(10), true, true);
        wi.load(&[0b101]);
        assert_eq!(wi.dirty_regions(), vec![0, 2]);
        assert!(wi.sweep_select(true).is_empty());
        wi.set_keep(false);
        assert_eq!(wi.sweep_select(true), vec![0, 2]);
        wi.remark(&[2]);
        assert_eq!(wi.dirty_regions(), vec![2]);
        assert_eq!(wi.set_images().len(), 1);
    }

    #[test]
    fn pending_regions_are_never_swept() {
        let wi = WriteIntent::new(geom(10), true, false);
        wi.load(&[0b1011]);
        wi.set_pending(&[1, 3]);
        assert_eq!(wi.pending_count(), 2);
        assert!(wi.is_pending(3));
        assert_eq!(wi.sweep_select(true), vec![0]);
        wi.clear_pending(1);
        wi.clear_pending(1);
        assert_eq!(wi.pending_count(), 1);
        assert_eq!(wi.sweep_select(true), vec![1]);
        assert_eq!(wi.dirty_regions(), vec![3]);
        wi.clear_pending(3);
        assert_eq!(wi.sweep_select(true), vec![3]);
        assert!(!wi.is_pending(3));
    }

    #[test]
    fn disabled_needs_no_io() {
        let wi = WriteIntent::new(geom(10), false, false);
        assert!(wi.begin(0..=9));
        assert!(wi.set_images().is_empty());
    }

    #[test]
    fn decode_masks_tail() {
        let bytes = [0xFFu8; 16];
        assert_eq!(decode_bitmap(&bytes, 70), vec![u64::MAX, 0x3F]);
        assert_eq!(decode_bitmap(&bytes[..3], 70), vec![0xFF_FFFF, 0]);
    }
}
