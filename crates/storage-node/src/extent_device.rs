//! A [`BlockDevice`] made of extents of another device, concatenated: how a namespace that
//! was carved from fragmented free space looks to the target (which wants one range).

use std::sync::Arc;

use blockdev::{
    BlockDevice, BlockError, DeviceInfo, DeviceStats, IoBuf, IoFuture, WriteFlags, check_range,
};

use crate::state::Extent;

/// Extents of `inner` seen as one device of their total length.
pub struct ExtentDevice {
    inner: Arc<dyn BlockDevice>,
    extents: Vec<Extent>,
    /// Logical start of each extent (prefix sums of the lengths).
    starts: Vec<u64>,
    info: DeviceInfo,
}

/// One piece of a logical range: (physical offset, position in the buffer, length).
type Piece = (u64, usize, u64);

impl ExtentDevice {
    /// Fails if an extent is empty, misaligned to the device block, beyond the device, or
    /// the total overflows.
    pub fn new(
        inner: Arc<dyn BlockDevice>,
        extents: Vec<Extent>,
    ) -> Result<ExtentDevice, BlockError> {
        let mut starts = Vec::with_capacity(extents.len());
        let mut total_bytes: u64 = 0;
        for e in &extents {
            if e.len_bytes == 0 {
                return Err(BlockError::OutOfRange {
                    offset_bytes: e.offset_bytes,
                    len_bytes: 0,
                    size_bytes: 0,
                });
            }
            check_range(inner.info(), e.offset_bytes, e.len_bytes)?;
            starts.push(total_bytes);
            total_bytes = total_bytes
                .checked_add(e.len_bytes)
                .ok_or(BlockError::OutOfRange {
                    offset_bytes: e.offset_bytes,
                    len_bytes: e.len_bytes,
                    size_bytes: u64::MAX,
                })?;
        }
        let mut info = inner.info().clone();
        info.name = format!("{}[{} extents]", info.name, extents.len());
        info.size_bytes = total_bytes;
        Ok(ExtentDevice {
            inner,
            extents,
            starts,
            info,
        })
    }

    /// The physical offset of a valid range that lies inside one extent (the common
    /// case: most namespaces are one extent), so the I/O can go straight to the drive
    /// without a wrapper future or a piece list.
    fn single_extent(&self, offset_bytes: u64, len_bytes: u64) -> Option<u64> {
        check_range(&self.info, offset_bytes, len_bytes).ok()?;
        let i = self
            .starts
            .partition_point(|&s| s <= offset_bytes)
            .checked_sub(1)?;
        let e = self.extents.get(i)?;
        let within = offset_bytes - self.starts.get(i)?;
        (within.checked_add(len_bytes)? <= e.len_bytes).then_some(e.offset_bytes + within)
    }

    /// Splits a checked logical range into physical pieces.
    fn pieces(&self, offset_bytes: u64, len_bytes: u64) -> Vec<Piece> {
        let mut out = Vec::new();
        // Index of the extent holding `offset_bytes`.
        let mut i = self
            .starts
            .partition_point(|&s| s <= offset_bytes)
            .saturating_sub(1);
        let (mut pos, mut left) = (offset_bytes, len_bytes);
        while left > 0 && i < self.extents.len() {
            let e = self.extents[i];
            let within = pos - self.starts[i];
            let take = (e.len_bytes - within).min(left);
            out.push((e.offset_bytes + within, (pos - offset_bytes) as usize, take));
            pos += take;
            left -= take;
            i += 1;
        }
        out
    }
}

impl BlockDevice for ExtentDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn read(&self, offset_bytes: u64, mut buf: IoBuf) -> IoFuture<'_, IoBuf> {
        if let Some(phys) = self.single_extent(offset_bytes, buf.len() as u64) {
            return self.inner.read(phys, buf);
        }
        IoFuture::new(async move {
            check_range(&self.info, offset_bytes, buf.len() as u64)?;
            let pieces = self.pieces(offset_bytes, buf.len() as u64);
            if let [(phys, _, _)] = pieces[..] {
                return self.inner.read(phys, buf).await;
            }
            for (phys, at, len) in pieces {
                let part = self
                    .inner
                    .read(phys, IoBuf::new_zeroed(len as usize))
                    .await?;
                buf.as_mut_slice()[at..at + len as usize].copy_from_slice(part.as_slice());
            }
            Ok(buf)
        })
    }

    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        if let Some(phys) = self.single_extent(offset_bytes, buf.len() as u64) {
            return self.inner.write(phys, buf, flags);
        }
        IoFuture::new(async move {
            check_range(&self.info, offset_bytes, buf.len() as u64)?;
            let pieces = self.pieces(offset_bytes, buf.len() as u64);
            if let [(phys, _, _)] = pieces[..] {
                return self.inner.write(phys, buf, flags).await;
            }
            for (phys, at, len) in pieces {
                let part = IoBuf::from_slice(&buf.as_slice()[at..at + len as usize]);
                self.inner.write(phys, part, flags).await?;
            }
            Ok(buf)
        })
    }

    fn flush(&self) -> IoFuture<'_, ()> {
        self.inner.flush()
    }

    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            check_range(&self.info, offset_bytes, len_bytes)?;
            for (phys, _, len) in self.pieces(offset_bytes, len_bytes) {
                self.inner.write_zeroes(phys, len).await?;
            }
            Ok(())
        })
    }

    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            check_range(&self.info, offset_bytes, len_bytes)?;
            for (phys, _, len) in self.pieces(offset_bytes, len_bytes) {
                self.inner.discard(phys, len).await?;
            }
            Ok(())
        })
    }

    /// The whole drive's counters (shared with its other namespaces).
    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use blockdev::RamDevice;
    use proptest::prelude::*;

    use super::*;

    const UNIT: u64 = 4096;

    fn ext(o: u64, l: u64) -> Extent {
        Extent {
            offset_bytes: o * UNIT,
            len_bytes: l * UNIT,
        }
    }

    #[tokio::test]
    async fn maps_and_splits() {
        let ram: Arc<dyn BlockDevice> = Arc::new(RamDevice::new("r", 16 * UNIT));
        let dev = ExtentDevice::new(ram.clone(), vec![ext(10, 2), ext(2, 3)]).unwrap();
        assert_eq!(dev.info().size_bytes, 5 * UNIT);
        // A write across the boundary lands in both extents.
        let data: Vec<u8> = (0..2 * UNIT).map(|i| (i % 251) as u8).collect();
        dev.write(UNIT, IoBuf::from_slice(&data), WriteFlags::default())
            .await
            .unwrap();
        let a = ram
            .read(11 * UNIT, IoBuf::new_zeroed(UNIT as usize))
            .await
            .unwrap();
        let b = ram
            .read(2 * UNIT, IoBuf::new_zeroed(UNIT as usize))
            .await
            .unwrap();
        assert_eq!(a.as_slice(), &data[..UNIT as usize]);
        assert_eq!(b.as_slice(), &data[UNIT as usize..]);
        let back = dev
            .read(UNIT, IoBuf::new_zeroed(2 * UNIT as usize))
            .await
            .unwrap();
        assert_eq!(back.as_slice(), &data[..]);
        dev.write_zeroes(UNIT + 512, UNIT).await.unwrap();
        let back = dev
            .read(UNIT, IoBuf::new_zeroed(2 * UNIT as usize))
            .await
            .unwrap();
        assert!(
            back.as_slice()[512..UNIT as usize + 512]
                .iter()
                .all(|&b| b == 0)
        );
        assert_eq!(
            back.as_slice()[UNIT as usize + 512..],
            data[UNIT as usize + 512..]
        );
        assert!(matches!(
            dev.read(4 * UNIT, IoBuf::new_zeroed(2 * UNIT as usize))
                .await,
            Err(BlockError::OutOfRange { .. })
        ));
        assert!(ExtentDevice::new(ram.clone(), vec![ext(15, 2)]).is_err());
        assert!(ExtentDevice::new(ram, vec![ext(1, 0)]).is_err());
    }

    proptest! {
        /// The one-extent fast path agrees with the piece list: it is taken exactly when
        /// the range is valid and one piece covers it, at that piece's offset.
        #[test]
        fn single_extent_matches_pieces(lens in proptest::collection::vec(1u64..5, 1..6), a in 0u64..48, b in 0u64..48) {
            let ram: Arc<dyn BlockDevice> = Arc::new(RamDevice::new("r", 64 * UNIT));
            let mut at = 0;
            let extents: Vec<Extent> = lens.iter().map(|&l| { let e = ext(at, l); at += l + 1; e }).collect();
            let dev = ExtentDevice::new(ram, extents).unwrap();
            let (off, len) = (a * 512, b * 512);
            let fast = dev.single_extent(off, len);
            if check_range(dev.info(), off, len).is_err() {
                prop_assert_eq!(fast, None);
            } else {
                let pieces = dev.pieces(off, len);
                match pieces[..] {
                    [(phys, 0, l)] if l == len => prop_assert_eq!(fast, Some(phys)),
                    [] => prop_assert!(len == 0),
                    _ => prop_assert_eq!(fast, None),
                }
            }
        }

        /// Every logical range maps to pieces that tile it exactly, in order, inside the
        /// extents.
        #[test]
        fn pieces_tile_the_range(lens in proptest::collection::vec(1u64..5, 1..6), a in 0u64..40, b in 0u64..40) {
            let total: u64 = lens.iter().sum();
            let mut extents = Vec::new();
            let mut phys = 0;
            for l in &lens {
                extents.push(ext(phys + 1, *l)); // leave a gap before each
                phys += l + 1;
            }
            let ram: Arc<dyn BlockDevice> = Arc::new(RamDevice::new("r", (phys + 1) * UNIT));
            let dev = ExtentDevice::new(ram, extents.clone()).unwrap();
            let (lo, hi) = (a.min(b) % (total + 1), a.max(b) % (total + 1));
            let (lo, hi) = (lo.min(hi), lo.max(hi));
            let pieces = dev.pieces(lo * 512, (hi - lo) * 512);
            let mut at = 0usize;
            for (p, pos, len) in &pieces {
                prop_assert_eq!(*pos, at);
                prop_assert!(*len > 0);
                prop_assert!(extents.iter().any(|e| *p >= e.offset_bytes && p + len <= e.end_bytes().unwrap()));
                at += *len as usize;
            }
            prop_assert_eq!(at as u64, (hi - lo) * 512);
        }
    }
}
