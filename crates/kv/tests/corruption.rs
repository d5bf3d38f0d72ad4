//! Damaged media and garbage images: checksums catch flipped bits (Retrieve fails with an
//! unrecovered error, never wrong bytes), recovery stops at the last good batch, a
//! damaged checkpoint falls back to the other slot, a stale log tail is never taken for
//! new records, and no on-disk content makes open or a command panic.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use blockdev::{
    BlockDevice, CrashRecorder, DeviceInfo, DeviceStats, FaultAction, FaultOps, FaultRule,
    FaultyDevice, IoBuf, IoFuture, RamDevice, WriteChoice, WriteFlags,
};
use common::*;
use kv::{ErrorKind, Kv, KvError, StoreMode};
use proptest::prelude::*;

/// Overwrites bytes at any offset (RamDevice wants whole blocks).
fn poke(ram: &RamDevice, off: u64, bytes: &[u8]) {
    let start = off / 512 * 512;
    let end = (off + bytes.len() as u64).div_ceil(512) * 512;
    let mut buf = vec![0u8; (end - start) as usize];
    ram.read_at(start, &mut buf).unwrap();
    let at = (off - start) as usize;
    buf[at..at + bytes.len()].copy_from_slice(bytes);
    ram.write_at(start, &buf).unwrap();
}

/// XORs one byte at any offset.
fn flip(ram: &RamDevice, off: u64, mask: u8) {
    let start = off / 512 * 512;
    let mut buf = vec![0u8; 512];
    ram.read_at(start, &mut buf).unwrap();
    buf[(off - start) as usize] ^= mask;
    ram.write_at(start, &buf).unwrap();
}

/// Where `needle` is on the device (values are pseudo-random, so unique).
fn find(ram: &RamDevice, needle: &[u8]) -> u64 {
    let size = ram.info().size_bytes;
    let mut buf = vec![0u8; size as usize];
    ram.read_at(0, &mut buf).unwrap();
    let pos = buf
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("value not on the device");
    pos as u64
}

/// The device offset of a key's value, found by flipping reads until Retrieve fails.
async fn value_offset(kv: &Kv, handle: &blockdev::FaultHandle, key: &[u8], dev_bytes: u64) -> u64 {
    // Binary search over the device for the block holding the value's first byte.
    let (mut lo, mut hi) = (0u64, dev_bytes / 512);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        let id = handle.add(
            FaultRule::new(FaultOps::READ, FaultAction::FlipBits { xor_mask: 1 })
                .in_range(lo * 512..mid * 512),
        );
        let failed = kv.get(key).await.is_err();
        handle.remove(id);
        if failed {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    lo * 512
}

#[tokio::test]
async fn flipped_bits_in_a_value_fail_the_retrieve_never_return_wrong_bytes() {
    let ram = ram(8 << 20);
    let faulty = Arc::new(FaultyDevice::new(ram.clone()));
    let handle = faulty.handle();
    let dev: Arc<dyn BlockDevice> = faulty;
    let kv = fresh(&dev).await;
    for (k, len) in [
        (&b"small"[..], 100usize),
        (b"aligned", 4096),
        (b"odd", 3001),
    ] {
        kv.store(k, &value(len as u64, len), StoreMode::Upsert)
            .await
            .unwrap();
    }
    // FlipBits flips the first byte of each block: it hits values that start a block
    // (all values of a block or more); small packed values are damaged on the media in
    // `damaged_bytes_on_the_media_...`.
    for (k, len) in [(&b"aligned"[..], 4096usize), (b"odd", 3001)] {
        // Flip every read of the whole device: each block's first byte.
        let id = handle.add(FaultRule::new(
            FaultOps::READ,
            FaultAction::FlipBits { xor_mask: 0x40 },
        ));
        let err = kv.get(k).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unrecovered, "{err}");
        assert!(err.to_string().contains("checksum"), "{err}");
        let mut buf = vec![0u8; len];
        assert!(kv.retrieve(k, &mut buf).await.is_err());
        handle.remove(id);
        assert_eq!(kv.get(k).await.unwrap(), value(len as u64, len));
    }
    // A flip only inside the value's block, found by bisection; other values unaffected.
    let off = value_offset(&kv, &handle, b"aligned", 8 << 20).await;
    let id = handle.add(
        FaultRule::new(FaultOps::READ, FaultAction::FlipBits { xor_mask: 0x80 })
            .in_range(off..off + 512),
    );
    assert_eq!(
        kv.get(b"aligned").await.unwrap_err().kind(),
        ErrorKind::Unrecovered
    );
    assert_eq!(kv.get(b"small").await.unwrap(), value(100, 100));
    assert_eq!(kv.get(b"odd").await.unwrap(), value(3001, 3001));
    handle.remove(id);
    // A media error on the read is an unrecovered error too.
    let id = handle.add(FaultRule::new(FaultOps::READ, FaultAction::Media));
    let err = kv.get(b"odd").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unrecovered);
    assert!(err.to_string().contains("media error"), "{err}");
    handle.remove(id);
    let s = kv.stats();
    assert!(s.checksum_errors >= 4, "{s:?}");
    assert!(s.media_errors >= 1, "{s:?}");
}

#[tokio::test]
async fn damaged_bytes_on_the_media_are_caught_and_compaction_keeps_their_segment() {
    let ram_dev = Arc::new(RamDevice::new("kv", 4 << 20));
    let dev: Arc<dyn BlockDevice> = ram_dev.clone();
    let kv = fresh(&dev).await;
    for i in 0..40u64 {
        kv.store(&i.to_be_bytes(), &value(i, 2000), StoreMode::Upsert)
            .await
            .unwrap();
    }
    kv.store(b"tiny", &value(77, 60), StoreMode::Upsert)
        .await
        .unwrap();
    kv.close().await.unwrap();
    drop(kv);
    // Damage key 5's value (block-aligned) and the small packed value on the media.
    flip(&ram_dev, find(&ram_dev, &value(5, 2000)) + 7, 0x10);
    flip(&ram_dev, find(&ram_dev, &value(77, 60)) + 59, 0x01);
    let (kv, _) = Kv::open(dev.clone(), small_options()).await.unwrap();
    assert_eq!(
        kv.get(&5u64.to_be_bytes()).await.unwrap_err().kind(),
        ErrorKind::Unrecovered
    );
    let err = kv.get(b"tiny").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unrecovered, "{err}");
    assert_eq!(kv.get(&4u64.to_be_bytes()).await.unwrap(), value(4, 2000));
    // Overwrite the others so compaction wants that segment; the damaged value stays
    // detectably damaged, everything else moves and reads back.
    for i in (0..40u64).filter(|i| *i != 5) {
        kv.store(&i.to_be_bytes(), &value(i + 100, 1500), StoreMode::Upsert)
            .await
            .unwrap();
    }
    let report = kv.compact().await.unwrap();
    assert!(report.damaged_segments >= 1, "{report:?}");
    assert_eq!(
        kv.get(&5u64.to_be_bytes()).await.unwrap_err().kind(),
        ErrorKind::Unrecovered
    );
    for i in (0..40u64).filter(|i| *i != 5) {
        assert_eq!(
            kv.get(&i.to_be_bytes()).await.unwrap(),
            value(i + 100, 1500)
        );
    }
}

/// Passes everything to a crash recorder but never flushes it: every write stays
/// pending, so a test can pick exactly which ones a power cut leaves.
struct NoFlush(Arc<CrashRecorder>);

impl BlockDevice for NoFlush {
    fn info(&self) -> &DeviceInfo {
        self.0.info()
    }
    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        self.0.read(offset_bytes, buf)
    }
    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        self.0.write(offset_bytes, buf, flags)
    }
    fn flush(&self) -> IoFuture<'_, ()> {
        IoFuture::new(async { Ok(()) })
    }
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        self.0.write_zeroes(offset_bytes, len_bytes)
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        self.0.discard(offset_bytes, len_bytes)
    }
    fn stats(&self) -> DeviceStats {
        self.0.stats()
    }
}

fn landed(indices: &[usize]) -> Vec<WriteChoice> {
    indices
        .iter()
        .map(|&index| WriteChoice {
            index,
            blocks: None,
        })
        .collect()
}

async fn open_no_flush(image: &RamDevice) -> (Kv, Arc<CrashRecorder>) {
    open_no_flush_with(image, small_options()).await
}

async fn open_no_flush_with(image: &RamDevice, opts: kv::Options) -> (Kv, Arc<CrashRecorder>) {
    let rec = Arc::new(CrashRecorder::from_image("r", image));
    let dev: Arc<dyn BlockDevice> = Arc::new(NoFlush(rec.clone()));
    (Kv::open(dev, opts).await.unwrap().0, rec)
}

#[tokio::test]
async fn a_stale_batch_at_the_log_head_is_never_replayed_as_a_new_one() {
    let rec = Arc::new(CrashRecorder::new("kv", 4 << 20));
    let dev: Arc<dyn BlockDevice> = rec.clone();
    Kv::format(&dev, &small_format()).await.unwrap();
    let base = rec.durable_image();
    // Two one-block batches, neither durable: x1 at block P, x2 at block P+1.
    let (kv, rec) = open_no_flush(&base).await;
    kv.store(b"k", b"x1", StoreMode::Upsert).await.unwrap();
    kv.store(b"k2", b"x2", StoreMode::Upsert).await.unwrap();
    assert_eq!(rec.pending_writes().len(), 2);
    // Power cut: only the second landed. Recovery ends the log at P.
    let img = rec.crash_image_with(&landed(&[1]));
    drop(kv);
    let (kv, rec) = open_no_flush(&img).await;
    assert!(!kv.exists(b"k").unwrap() && !kv.exists(b"k2").unwrap());
    // Same-size batches land on the same blocks: y1 at P (takes x1's place), y2 at P+1.
    kv.store(b"k2", b"y1", StoreMode::Upsert).await.unwrap();
    kv.store(b"k", b"y2", StoreMode::Upsert).await.unwrap();
    let pending = rec.pending_writes();
    assert_eq!(pending.len(), 2);
    assert_eq!(pending[1].offset_bytes, pending[0].offset_bytes + 512);
    // y1 is durable, y2 is not: block P+1 still holds the stale x2 batch, which has the
    // sequence number the log expects next but does not link to y1.
    let img = rec.crash_image_with(&landed(&[0]));
    drop(kv);
    let rec = Arc::new(CrashRecorder::from_image("r", &img));
    let dev: Arc<dyn BlockDevice> = rec;
    let (kv, report) = Kv::open(dev, small_options()).await.unwrap();
    assert_eq!(kv.get(b"k2").await.unwrap(), b"y1", "{report:?}");
    assert!(!kv.exists(b"k").unwrap());
    assert!(report.stop_reason.contains("does not link"), "{report:?}");
}

#[tokio::test]
async fn recovery_stops_at_a_torn_batch_and_keeps_everything_before() {
    let rec = Arc::new(CrashRecorder::new("kv", 4 << 20));
    let dev: Arc<dyn BlockDevice> = rec.clone();
    Kv::format(&dev, &small_format()).await.unwrap();
    let image = rec.durable_image();
    // Each value in its batch's one write, or b's value in place (a second write).
    for in_place in [false, true] {
        let mut opts = small_options();
        if !in_place {
            opts.in_place_min_bytes = usize::MAX;
        }
        torn_batch_ends_the_log(&image, opts, in_place).await;
    }
}

async fn torn_batch_ends_the_log(image: &RamDevice, opts: kv::Options, in_place: bool) {
    let (kv, rec) = open_no_flush_with(image, opts).await;
    kv.store(b"a", &value(1, 1500), StoreMode::Upsert)
        .await
        .unwrap();
    kv.store(b"b", &value(2, 3000), StoreMode::Upsert)
        .await
        .unwrap();
    kv.store(b"c", &value(3, 100), StoreMode::Upsert)
        .await
        .unwrap();
    let pending = rec.pending_writes();
    let img = if in_place {
        // b's head (header, descriptor) landed, its value write did not.
        assert_eq!(pending.len(), 4);
        assert_eq!(pending[2].len_bytes, 3072);
        assert_eq!(
            pending[2].offset_bytes,
            pending[1].offset_bytes + pending[1].len_bytes
        );
        rec.crash_image_with(&[0, 1, 3].map(|index| WriteChoice {
            index,
            blocks: None,
        }))
    } else {
        assert_eq!(pending.len(), 3);
        // Batch b torn: its header block landed, one value block did not.
        let blocks = (pending[1].len_bytes / 512) as usize;
        let mut mask = vec![true; blocks];
        mask[blocks - 1] = false;
        rec.crash_image_with(&[
            WriteChoice {
                index: 0,
                blocks: None,
            },
            WriteChoice {
                index: 1,
                blocks: Some(mask),
            },
            WriteChoice {
                index: 2,
                blocks: None,
            },
        ])
    };
    drop(kv);
    let rec = Arc::new(CrashRecorder::from_image("r", &img));
    let dev: Arc<dyn BlockDevice> = rec;
    let (kv, report) = Kv::open(dev, small_options()).await.unwrap();
    assert_eq!(kv.get(b"a").await.unwrap(), value(1, 1500));
    // b is torn: not there (never an unrecovered error for an unacknowledged store);
    // c came after it, so the log ended before it.
    assert!(!kv.exists(b"b").unwrap(), "{report:?}");
    assert!(!kv.exists(b"c").unwrap(), "{report:?}");
    assert_eq!(report.replayed_batches, 1);
    assert!(
        report.stop_reason.contains("fails its checksum"),
        "{report:?}"
    );
}

#[tokio::test]
async fn a_damaged_newest_checkpoint_falls_back_to_the_other_slot() {
    let ram_dev = Arc::new(RamDevice::new("kv", 4 << 20));
    let dev: Arc<dyn BlockDevice> = ram_dev.clone();
    let kv = fresh(&dev).await;
    kv.store(b"a", b"1", StoreMode::Upsert).await.unwrap();
    kv.checkpoint().await.unwrap();
    kv.store(b"b", b"2", StoreMode::Upsert).await.unwrap();
    kv.close().await.unwrap();
    drop(kv);
    let (kv, report) = Kv::open(dev.clone(), small_options()).await.unwrap();
    let newest = report.checkpoint_generation;
    let slot = report.checkpoint_slot;
    drop(kv);
    // Damage the newest checkpoint's body (the first index entry).
    let info = Kv::probe(&dev).await.unwrap();
    let slot_bytes = (info.metadata_bytes - 4096) / 2;
    let body = 4096 + slot as u64 * slot_bytes + 512;
    let entry = body + u64::from(info.segment_count) * 8;
    flip(&ram_dev, entry, 1);
    let (kv, report) = Kv::open(dev.clone(), small_options()).await.unwrap();
    assert_eq!(report.checkpoint_generation, newest - 1, "{report:?}");
    let why = report.checkpoint_fallback.clone().unwrap();
    assert!(why.contains("body checksum mismatch"), "{why}");
    // The older checkpoint plus the log still give everything.
    assert_eq!(kv.get(b"a").await.unwrap(), b"1");
    assert_eq!(kv.get(b"b").await.unwrap(), b"2");
    drop(kv);
    // Both damaged: open refuses with the reasons.
    let other = 4096 + (1 - slot as u64) * slot_bytes;
    flip(&ram_dev, other + 20, 0xff);
    let e = Kv::open(dev.clone(), small_options()).await.unwrap_err();
    assert!(matches!(e, KvError::Corrupt(_)), "{e}");
    assert!(e.to_string().contains("no valid checkpoint"), "{e}");
}

#[tokio::test]
async fn a_write_error_stops_changes_but_reads_go_on() {
    let ram = ram(8 << 20);
    let faulty = Arc::new(FaultyDevice::new(ram.clone()));
    let handle = faulty.handle();
    let dev: Arc<dyn BlockDevice> = faulty;
    let kv = fresh(&dev).await;
    kv.store(b"a", b"1", StoreMode::Upsert).await.unwrap();
    handle.add(FaultRule::new(FaultOps::WRITE, FaultAction::Media).times(1));
    let e = kv.store(b"b", b"2", StoreMode::Upsert).await.unwrap_err();
    assert!(matches!(e, KvError::Failed(_)), "{e}");
    assert!(e.to_string().contains("reopen"), "{e}");
    let e = kv.store(b"c", b"3", StoreMode::Upsert).await.unwrap_err();
    assert!(matches!(e, KvError::Failed(_)), "{e}");
    assert!(kv.failure().is_some());
    assert_eq!(kv.get(b"a").await.unwrap(), b"1");
    drop(kv);
    let (kv, _) = Kv::open(dev, small_options()).await.unwrap();
    assert_eq!(kv.get(b"a").await.unwrap(), b"1");
    kv.store(b"c", b"3", StoreMode::Upsert).await.unwrap();
}

/// A formatted store holding a few keys (and every value each key ever had).
async fn populated() -> (Arc<RamDevice>, BTreeMap<Vec<u8>, Vec<Vec<u8>>>) {
    let ram_dev = Arc::new(RamDevice::new("kv", 2 << 20));
    let dev: Arc<dyn BlockDevice> = ram_dev.clone();
    let kv = fresh(&dev).await;
    let mut history: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = BTreeMap::new();
    for i in 0..120u64 {
        let k = vec![b'k', (i % 17) as u8];
        let v = value(i, 1 + (i as usize * 131) % 5000);
        kv.store(&k, &v, StoreMode::Upsert).await.unwrap();
        history.entry(k).or_default().push(v);
        if i == 60 {
            kv.compact().await.unwrap();
        }
    }
    drop(kv);
    (ram_dev, history)
}

async fn open_and_read_everything(image: RamDevice, history: &BTreeMap<Vec<u8>, Vec<Vec<u8>>>) {
    let dev: Arc<dyn BlockDevice> = Arc::new(image);
    let Ok((kv, _)) = Kv::open(dev, small_options()).await else {
        return;
    };
    for k in kv.list(b"", usize::MAX).unwrap() {
        let k = k.as_bytes().to_vec();
        match kv.get(&k).await {
            // Any value returned is one the key really had: never made-up bytes.
            Ok(v) => assert!(
                history.get(&k).is_some_and(|h| h.contains(&v)),
                "key {k:?}: {} bytes never stored",
                v.len()
            ),
            Err(e) => assert!(
                matches!(e.kind(), ErrorKind::Unrecovered | ErrorKind::KeyNotFound),
                "{e}"
            ),
        }
    }
    let _ = kv.store(b"new", b"value", StoreMode::Upsert).await;
    let _ = kv.compact().await;
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Damage anywhere (superblock, checkpoints, log): open and commands never panic and
    /// never return bytes that were not stored under that key.
    #[test]
    fn damaged_images_never_panic_or_lie(
        damage in proptest::collection::vec((0u64..(2 << 20), any::<u8>(), 1usize..600), 1..12)
    ) {
        rt().block_on(async {
            let (ram_dev, history) = populated().await;
            for (off, byte, len) in damage {
                let len = len.min(((2 << 20) - off) as usize);
                let junk: Vec<u8> = (0..len).map(|i| byte.wrapping_add((i as u8).wrapping_mul(7))).collect();
                poke(&ram_dev, off, &junk);
            }
            let run = open_and_read_everything(ram_dev.snapshot("damaged"), &history);
            tokio::time::timeout(std::time::Duration::from_secs(20), run)
                .await
                .expect("open or a command hung on a damaged image");
        });
    }

    /// Pure garbage: refused as not formatted, no panic.
    #[test]
    fn garbage_devices_are_refused(seed in any::<u64>()) {
        rt().block_on(async {
            let img = RamDevice::new("junk", 1 << 20);
            img.write_at(0, &value(seed, 1 << 20)).unwrap();
            let dev: Arc<dyn BlockDevice> = Arc::new(img);
            let e = Kv::open(dev, small_options()).await.unwrap_err();
            prop_assert!(matches!(e, KvError::NotFormatted(_)), "{}", e);
            Ok(())
        })?;
    }
}
