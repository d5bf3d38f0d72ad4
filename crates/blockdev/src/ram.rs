//! Sparse in-memory device: the benchmark backend and the base of crash images.
//!
//! Memory policy: a RAM drive is sparse (1 MiB chunks allocated on first write, freed by
//! whole-chunk discard or write-zeroes), but it must fit in the machine: [`RamDevice::open`]
//! (the path of `ram:SIZE` drive specs) refuses a size above the physical memory with a
//! one-line error, so a typo like `ram:1P` for `ram:1G` is caught at start. Several drives
//! together may still outgrow memory; then a write whose chunk cannot be allocated fails
//! with an out-of-memory I/O error instead of aborting the process (the kernel's OOM
//! killer may act first under overcommit, which no allocator can prevent).

use std::io;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::{
    BlockDevice, BlockError, DEFAULT_MAX_IO_BYTES, DeviceInfo, DeviceKind, DeviceStats, IoBuf,
    IoFuture, SECTOR_SIZE_BYTES, StatsCounters, WriteFlags, check_range,
};

/// Chunks are allocated on first write, so `ram:64G` costs only its chunk table up front.
const CHUNK_BYTES: usize = 1 << 20;
const _: () = assert!(CHUNK_BYTES.is_power_of_two() && CHUNK_BYTES >= crate::IO_ALIGN_BYTES);

/// An `IoBuf`, not a `Box<[u8]>`: page-aligned, so copies in and out are aligned on both
/// sides (a `Box` from malloc sits 16 bytes into its pages, and a 4 KiB copy to such an
/// address took 3.6x as long as to an aligned one on an AMD EPYC VM).
type Chunk = RwLock<Option<IoBuf>>;

/// A sparse RAM disk. Unwritten, discarded and zeroed ranges read as zeroes; discarding or
/// zeroing a whole 1 MiB chunk frees its memory. Each chunk has its own lock, so I/O to
/// different chunks never contends; reads of one chunk share a read lock.
/// Writes are durable on completion (`volatile_write_cache = false`).
pub struct RamDevice {
    info: DeviceInfo,
    chunks: Box<[Chunk]>,
    stats: StatsCounters,
}

impl RamDevice {
    /// A zero-filled device with 512-byte logical blocks. `size_bytes` is rounded down to a
    /// multiple of 512. For sizes a program chooses (tests, benchmarks); sizes from users go
    /// through [`RamDevice::open`].
    ///
    /// # Panics
    /// If its chunk table (32 bytes per MiB) cannot be allocated.
    pub fn new(name: impl Into<String>, size_bytes: u64) -> RamDevice {
        RamDevice::with_block_size(name, size_bytes, SECTOR_SIZE_BYTES as u32)
    }

    /// A device for a size a user asked for: as [`RamDevice::new`], but a size above this
    /// machine's physical memory, or a chunk table that cannot be allocated, is an error.
    pub fn open(name: impl Into<String>, size_bytes: u64) -> Result<RamDevice, BlockError> {
        RamDevice::open_within(name.into(), size_bytes, physical_memory_bytes())
    }

    /// [`RamDevice::open`] on a machine with `memory_bytes` of memory (None: unknown).
    fn open_within(
        name: String,
        size_bytes: u64,
        memory_bytes: Option<u64>,
    ) -> Result<RamDevice, BlockError> {
        if let Some(memory_bytes) = memory_bytes
            && size_bytes > memory_bytes
        {
            return Err(BlockError::Io(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!(
                    "{name}: {size_bytes} bytes do not fit in this machine's memory \
                     ({memory_bytes} bytes, {:.1} GiB); a RAM drive must fit in memory",
                    memory_bytes as f64 / f64::from(1u32 << 30)
                ),
            )));
        }
        RamDevice::try_with_block_size(name, size_bytes, SECTOR_SIZE_BYTES as u32)
    }

    /// As [`RamDevice::new`] with another logical block size (a power of two, 512..=4096,
    /// else 512 is used). `size_bytes` is rounded down to a multiple of it.
    ///
    /// # Panics
    /// As [`RamDevice::new`].
    pub fn with_block_size(
        name: impl Into<String>,
        size_bytes: u64,
        logical_block_bytes: u32,
    ) -> RamDevice {
        RamDevice::try_with_block_size(name.into(), size_bytes, logical_block_bytes)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_with_block_size(
        name: String,
        size_bytes: u64,
        logical_block_bytes: u32,
    ) -> Result<RamDevice, BlockError> {
        let lb = if logical_block_bytes.is_power_of_two()
            && (512..=crate::IO_ALIGN_BYTES as u32).contains(&logical_block_bytes)
        {
            logical_block_bytes
        } else {
            SECTOR_SIZE_BYTES as u32
        };
        let size_bytes = size_bytes - size_bytes % u64::from(lb);
        let table_error = || {
            BlockError::Io(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("{name}: cannot allocate the chunk table of a {size_bytes}-byte RAM drive"),
            ))
        };
        let chunk_count =
            usize::try_from(size_bytes.div_ceil(CHUNK_BYTES as u64)).map_err(|_| table_error())?;
        let mut chunks = Vec::new();
        chunks
            .try_reserve_exact(chunk_count)
            .map_err(|_| table_error())?;
        chunks.resize_with(chunk_count, || RwLock::new(None));
        Ok(RamDevice {
            info: DeviceInfo {
                name,
                kind: DeviceKind::Ram,
                size_bytes,
                logical_block_bytes: lb,
                optimal_io_bytes: 0,
                max_io_bytes: DEFAULT_MAX_IO_BYTES,
                volatile_write_cache: false,
                supports_discard: true,
                supports_write_zeroes: true,
                rotational: false,
            },
            chunks: chunks.into_boxed_slice(),
            stats: StatsCounters::new(),
        })
    }

    /// Bytes of chunk memory currently allocated.
    pub fn allocated_bytes(&self) -> u64 {
        let used = self
            .chunks
            .iter()
            .filter(|c| read_lock(c).is_some())
            .count();
        used as u64 * CHUNK_BYTES as u64
    }

    /// Synchronous read (same checks as [`BlockDevice::read`], not counted in stats).
    pub fn read_at(&self, offset_bytes: u64, dst: &mut [u8]) -> Result<(), BlockError> {
        check_range(&self.info, offset_bytes, dst.len() as u64)?;
        let mut done = 0;
        for (idx, in_chunk, n) in chunk_spans(offset_bytes, dst.len()) {
            let out = &mut dst[done..done + n];
            match read_lock(&self.chunks[idx]).as_deref() {
                Some(chunk) => out.copy_from_slice(&chunk[in_chunk..in_chunk + n]),
                None => out.fill(0),
            }
            done += n;
        }
        Ok(())
    }

    /// Synchronous write (same checks as [`BlockDevice::write`], not counted in stats).
    pub fn write_at(&self, offset_bytes: u64, src: &[u8]) -> Result<(), BlockError> {
        check_range(&self.info, offset_bytes, src.len() as u64)?;
        let mut done = 0;
        for (idx, in_chunk, n) in chunk_spans(offset_bytes, src.len()) {
            let mut guard = write_lock(&self.chunks[idx]);
            let chunk = match &mut *guard {
                Some(chunk) => chunk,
                empty => empty.insert(new_chunk(offset_bytes + done as u64)?),
            };
            chunk[in_chunk..in_chunk + n].copy_from_slice(&src[done..done + n]);
            done += n;
        }
        Ok(())
    }

    /// Synchronously zeroes a range, freeing chunks it covers completely.
    pub fn zero_at(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), BlockError> {
        check_range(&self.info, offset_bytes, len_bytes)?;
        let len = usize::try_from(len_bytes).map_err(|_| BlockError::OutOfRange {
            offset_bytes,
            len_bytes,
            size_bytes: self.info.size_bytes,
        })?;
        for (idx, in_chunk, n) in chunk_spans(offset_bytes, len) {
            let mut guard = write_lock(&self.chunks[idx]);
            if n == CHUNK_BYTES {
                *guard = None;
            } else if let Some(chunk) = guard.as_deref_mut() {
                chunk[in_chunk..in_chunk + n].fill(0);
            }
        }
        Ok(())
    }

    /// A deep copy of the contents (sparse: only allocated chunks are copied), with fresh
    /// stats and the given name.
    pub fn snapshot(&self, name: impl Into<String>) -> RamDevice {
        let copy =
            RamDevice::with_block_size(name, self.info.size_bytes, self.info.logical_block_bytes);
        for (src, dst) in self.chunks.iter().zip(copy.chunks.iter()) {
            if let Some(chunk) = read_lock(src).as_deref() {
                *write_lock(dst) = Some(chunk.into());
            }
        }
        copy
    }
}

/// A zeroed chunk, or an out-of-memory error (not an abort) when the allocator refuses.
fn new_chunk(offset_bytes: u64) -> Result<IoBuf, BlockError> {
    IoBuf::try_new_zeroed(CHUNK_BYTES).ok_or_else(|| {
        BlockError::Io(io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!("out of memory for the RAM drive's data at offset {offset_bytes}"),
        ))
    })
}

/// This machine's physical memory, if the OS says.
fn physical_memory_bytes() -> Option<u64> {
    // SAFETY: sysconf has no preconditions; it returns -1 for an unknown name.
    #[allow(unsafe_code)]
    let (pages, page_bytes) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let pages = u64::try_from(pages).ok().filter(|&p| p > 0)?;
    let page_bytes = u64::try_from(page_bytes).ok().filter(|&p| p > 0)?;
    pages.checked_mul(page_bytes)
}

/// Splits `[offset, offset+len)` into (chunk index, offset in chunk, length) pieces.
/// Callers have validated the range, so indices are in bounds.
fn chunk_spans(offset_bytes: u64, len: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    let mut pos = offset_bytes;
    let mut left = len;
    std::iter::from_fn(move || {
        if left == 0 {
            return None;
        }
        let idx = (pos / CHUNK_BYTES as u64) as usize;
        let in_chunk = (pos % CHUNK_BYTES as u64) as usize;
        let n = left.min(CHUNK_BYTES - in_chunk);
        pos += n as u64;
        left -= n;
        Some((idx, in_chunk, n))
    })
}

// A panic while holding a chunk lock cannot leave the bytes inconsistent (plain copies), so
// poisoning is ignored.
fn read_lock(chunk: &Chunk) -> RwLockReadGuard<'_, Option<IoBuf>> {
    chunk.read().unwrap_or_else(|e| e.into_inner())
}

fn write_lock(chunk: &Chunk) -> RwLockWriteGuard<'_, Option<IoBuf>> {
    chunk.write().unwrap_or_else(|e| e.into_inner())
}

impl BlockDevice for RamDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn read(&self, offset_bytes: u64, mut buf: IoBuf) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            self.read_at(offset_bytes, &mut buf)?;
            self.stats.record_read(buf.len() as u64);
            Ok(buf)
        })
    }

    fn write(&self, offset_bytes: u64, buf: IoBuf, _flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            self.write_at(offset_bytes, &buf)?;
            self.stats.record_write(buf.len() as u64);
            Ok(buf)
        })
    }

    fn flush(&self) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.stats.record_flush();
            Ok(())
        })
    }

    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move { self.zero_at(offset_bytes, len_bytes) })
    }

    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move { self.zero_at(offset_bytes, len_bytes) })
    }

    fn stats(&self) -> DeviceStats {
        self.stats.snapshot()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sparse_large_device_and_roundtrip() {
        let dev = RamDevice::new("ram0", 64 << 30);
        assert_eq!(dev.info().size_bytes, 64 << 30);
        assert_eq!(dev.allocated_bytes(), 0);
        // A write straddling a chunk boundary allocates exactly two chunks.
        let off = CHUNK_BYTES as u64 * 7 - 512;
        let data: Vec<u8> = (0..1024u32).map(|i| i as u8).collect();
        dev.write(off, IoBuf::from_slice(&data), WriteFlags::default())
            .await
            .unwrap();
        assert_eq!(dev.allocated_bytes(), 2 * CHUNK_BYTES as u64);
        let back = dev.read(off, IoBuf::new_zeroed(1024)).await.unwrap();
        assert_eq!(&back[..], &data[..]);
        // Untouched space reads as zeroes, even into a dirty buffer.
        let back = dev.read(0, IoBuf::from_slice(&[9u8; 512])).await.unwrap();
        assert!(back.iter().all(|&b| b == 0));
        let s = dev.stats();
        assert_eq!(
            (s.read_ops, s.write_ops, s.read_bytes, s.write_bytes),
            (2, 1, 1536, 1024)
        );
    }

    #[tokio::test]
    async fn discard_frees_whole_chunks_and_zeroes_partial() {
        let dev = RamDevice::new("ram0", 4 * CHUNK_BYTES as u64);
        let ones = IoBuf::from_slice(&vec![1u8; 2 * CHUNK_BYTES]);
        dev.write(0, ones, WriteFlags::default()).await.unwrap();
        assert_eq!(dev.allocated_bytes(), 2 * CHUNK_BYTES as u64);
        dev.discard(0, CHUNK_BYTES as u64).await.unwrap();
        assert_eq!(dev.allocated_bytes(), CHUNK_BYTES as u64);
        dev.write_zeroes(CHUNK_BYTES as u64 + 512, 512)
            .await
            .unwrap();
        let back = dev
            .read(CHUNK_BYTES as u64 - 512, IoBuf::new_zeroed(2048))
            .await
            .unwrap();
        assert!(back[..512].iter().all(|&b| b == 0));
        assert_eq!(&back[512..1024], &[1u8; 512][..]);
        assert!(back[1024..1536].iter().all(|&b| b == 0));
        assert!(back[1536..].iter().all(|&b| b == 1));
    }

    #[tokio::test]
    async fn range_errors() {
        let dev = RamDevice::new("ram0", 1 << 20);
        let err = dev.read(1 << 20, IoBuf::new_zeroed(512)).await.unwrap_err();
        assert!(matches!(err, BlockError::OutOfRange { .. }));
        let err = dev
            .write(100, IoBuf::new_zeroed(512), WriteFlags::default())
            .await
            .unwrap_err();
        assert!(matches!(err, BlockError::Misaligned { .. }));
        let err = dev.discard(0, (1 << 20) + 512).await.unwrap_err();
        assert!(matches!(err, BlockError::OutOfRange { .. }));
        let dev4k = RamDevice::with_block_size("r", 1 << 20, 4096);
        let err = dev4k.read(0, IoBuf::new_zeroed(512)).await.unwrap_err();
        assert!(matches!(
            err,
            BlockError::Misaligned {
                align_bytes: 4096,
                ..
            }
        ));
        assert_eq!(dev.stats(), DeviceStats::default());
    }

    #[test]
    fn sizes_beyond_memory_are_refused_not_aborted() {
        // ram:1P on any machine: its dense chunk table alone would be 32 GiB.
        let e = RamDevice::open("ram:1P", 1 << 50)
            .err()
            .expect("1 PiB refused");
        let msg = e.to_string();
        assert!(
            msg.contains("ram:1P: 1125899906842624 bytes do not fit in this machine's memory"),
            "{msg}"
        );
        assert!(!msg.contains('\n'), "{msg}");
        for size in [u64::MAX, u64::MAX - 511, 16383 << 50] {
            assert!(RamDevice::open("r", size).is_err(), "{size}");
        }
        // The limit is the machine's memory: just above is refused, up to it is sparse.
        let memory = 4 << 30;
        assert!(RamDevice::open_within("r".into(), memory + 512, Some(memory)).is_err());
        let dev = RamDevice::open_within("r".into(), memory, Some(memory)).expect("fits");
        assert_eq!((dev.info().size_bytes, dev.allocated_bytes()), (memory, 0));
        // Unknown memory: only what cannot be allocated is refused.
        assert!(RamDevice::open_within("r".into(), u64::MAX, None).is_err());
        assert!(RamDevice::open("r", 1 << 20).is_ok());
    }

    #[test]
    fn snapshot_is_independent() {
        let dev = RamDevice::new("a", 1 << 22);
        dev.write_at(4096, &[5u8; 512]).unwrap();
        let snap = dev.snapshot("b");
        dev.write_at(4096, &[6u8; 512]).unwrap();
        let mut out = [0u8; 512];
        snap.read_at(4096, &mut out).unwrap();
        assert_eq!(out, [5u8; 512]);
        assert_eq!(snap.allocated_bytes(), CHUNK_BYTES as u64);
    }
}
