//! Fault injection rules over a RAM device.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::sync::Arc;
use std::time::Duration;

use blockdev::{
    BlockDevice, BlockError, FaultAction, FaultOps, FaultRule, FaultyDevice, IoBuf, RamDevice,
    WriteFlags,
};

fn setup() -> (Arc<RamDevice>, FaultyDevice) {
    let ram = Arc::new(RamDevice::new("ram", 1 << 20));
    ram.write_at(0, &vec![0x11; 1 << 20]).unwrap();
    let faulty = FaultyDevice::new(ram.clone());
    (ram, faulty)
}

async fn write(dev: &dyn BlockDevice, off: u64, byte: u8, len: usize) -> Result<(), BlockError> {
    dev.write(
        off,
        IoBuf::from_slice(&vec![byte; len]),
        WriteFlags::default(),
    )
    .await
    .map(|_| ())
}

async fn read(dev: &dyn BlockDevice, off: u64, len: usize) -> Result<Vec<u8>, BlockError> {
    dev.read(off, IoBuf::new_zeroed(len))
        .await
        .map(|b| b.to_vec())
}

#[tokio::test]
async fn no_rules_is_transparent() {
    let (ram, dev) = setup();
    assert_eq!(dev.info(), ram.info());
    write(&dev, 4096, 0x22, 4096).await.unwrap();
    assert_eq!(read(&dev, 4096, 4096).await.unwrap(), vec![0x22; 4096]);
    dev.flush().await.unwrap();
    dev.write_zeroes(0, 512).await.unwrap();
    assert_eq!(read(&*ram, 0, 512).await.unwrap(), vec![0; 512]);
    assert_eq!(dev.stats().write_ops, 1);
}

#[tokio::test]
async fn media_errors_in_a_range() {
    let (_ram, dev) = setup();
    let h = dev.handle();
    let id = h.add(FaultRule::new(FaultOps::READ, FaultAction::Media).in_range(8192..12288));
    // Overlapping reads fail at the first bad offset inside the I/O.
    let err = read(&dev, 4096, 8192).await.unwrap_err();
    assert!(
        matches!(err, BlockError::Media { offset_bytes: 8192 }),
        "{err}"
    );
    let err = read(&dev, 10240, 4096).await.unwrap_err();
    assert!(
        matches!(
            err,
            BlockError::Media {
                offset_bytes: 10240
            }
        ),
        "{err}"
    );
    // Outside the range, and writes inside it, are fine.
    assert_eq!(read(&dev, 12288, 512).await.unwrap(), vec![0x11; 512]);
    assert_eq!(read(&dev, 0, 8192).await.unwrap(), vec![0x11; 8192]);
    write(&dev, 8192, 0x33, 512).await.unwrap();
    assert_eq!(h.hits(id), 2);
    assert_eq!(dev.stats().media_errors, 2);
    assert!(h.remove(id));
    assert!(!h.remove(id));
    assert_eq!(read(&dev, 8192, 512).await.unwrap(), vec![0x33; 512]);
}

#[tokio::test]
async fn io_errors_after_n_ops_and_limited_times() {
    let (ram, dev) = setup();
    let h = dev.handle();
    h.add(
        FaultRule::new(FaultOps::WRITE, FaultAction::IoError(libc::ENOSPC))
            .after(3)
            .times(2),
    );
    for i in 0..3 {
        write(&dev, i * 512, 0x44, 512).await.unwrap();
    }
    for _ in 0..2 {
        match write(&dev, 0, 0x55, 512).await.unwrap_err() {
            BlockError::Io(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOSPC)),
            other => panic!("unexpected {other}"),
        }
    }
    // The failed writes did not reach the device; after two hits the rule is spent.
    assert_eq!(read(&*ram, 0, 512).await.unwrap(), vec![0x44; 512]);
    write(&dev, 0, 0x66, 512).await.unwrap();
    assert_eq!(read(&*ram, 0, 512).await.unwrap(), vec![0x66; 512]);
}

#[tokio::test]
async fn flush_failures_and_offline() {
    let (_ram, dev) = setup();
    let h = dev.handle();
    h.add(FaultRule::new(FaultOps::FLUSH, FaultAction::IoError(libc::EIO)).times(1));
    assert!(matches!(dev.flush().await, Err(BlockError::Io(_))));
    dev.flush().await.unwrap();
    h.add(FaultRule::new(FaultOps::ALL, FaultAction::Offline));
    assert!(matches!(read(&dev, 0, 512).await, Err(BlockError::Closed)));
    assert!(matches!(dev.flush().await, Err(BlockError::Closed)));
    assert!(matches!(dev.discard(0, 512).await, Err(BlockError::Closed)));
    h.clear();
    read(&dev, 0, 512).await.unwrap();
}

#[tokio::test]
async fn range_errors_take_precedence() {
    let (_ram, dev) = setup();
    dev.handle()
        .add(FaultRule::new(FaultOps::ALL, FaultAction::Media));
    assert!(matches!(
        read(&dev, 1 << 20, 512).await,
        Err(BlockError::OutOfRange { .. })
    ));
    assert!(matches!(
        write(&dev, 1, 0, 512).await,
        Err(BlockError::Misaligned { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn delay_and_hang() {
    let (_ram, dev) = setup();
    let h = dev.handle();
    let delay = h.add(FaultRule::new(
        FaultOps::READ,
        FaultAction::Delay(Duration::from_millis(250)),
    ));
    let t0 = tokio::time::Instant::now();
    assert_eq!(read(&dev, 0, 512).await.unwrap(), vec![0x11; 512]);
    assert!(t0.elapsed() >= Duration::from_millis(250));
    h.remove(delay);
    h.add(
        FaultRule::new(FaultOps::WRITE, FaultAction::Hang(Duration::from_secs(30)))
            .in_range(0..512),
    );
    let t0 = tokio::time::Instant::now();
    assert!(matches!(
        write(&dev, 0, 0x77, 512).await,
        Err(BlockError::Timeout)
    ));
    assert!(t0.elapsed() >= Duration::from_secs(30));
    assert_eq!(
        read(&dev, 0, 512).await.unwrap(),
        vec![0x11; 512],
        "hung write must not land"
    );
    let t0 = tokio::time::Instant::now();
    write(&dev, 512, 0x77, 512).await.unwrap();
    assert!(t0.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn bit_flips_on_read_only() {
    let (ram, dev) = setup();
    let id = dev.handle().add(
        FaultRule::new(FaultOps::READ, FaultAction::FlipBits { xor_mask: 0x80 })
            .in_range(1024..2048),
    );
    let got = read(&dev, 0, 4096).await.unwrap();
    for (i, &b) in got.iter().enumerate() {
        let want = if i == 1024 || i == 1536 { 0x91 } else { 0x11 };
        assert_eq!(b, want, "byte {i}");
    }
    // The media is unchanged; writes do not trigger the rule.
    assert_eq!(read(&*ram, 1024, 1024).await.unwrap(), vec![0x11; 1024]);
    write(&dev, 1024, 0x11, 512).await.unwrap();
    assert_eq!(dev.handle().hits(id), 1);
}

#[tokio::test]
async fn dropped_writes_report_success() {
    let (ram, dev) = setup();
    dev.handle()
        .add(FaultRule::new(FaultOps::MODIFY, FaultAction::DropWrite).in_range(0..4096));
    write(&dev, 0, 0x99, 8192).await.unwrap();
    dev.write_zeroes(0, 512).await.unwrap();
    assert_eq!(read(&*ram, 0, 8192).await.unwrap(), vec![0x11; 8192]);
    write(&dev, 4096, 0x99, 512).await.unwrap();
    assert_eq!(read(&*ram, 4096, 512).await.unwrap(), vec![0x99; 512]);
}

#[tokio::test]
async fn handle_controls_a_device_shared_across_tasks() {
    let (_ram, dev) = setup();
    let dev = Arc::new(dev);
    let h = dev.handle();
    let task = {
        let dev = dev.clone();
        tokio::spawn(async move {
            let mut errors = 0;
            for i in 0..200u64 {
                if read(&*dev, (i % 64) * 512, 512).await.is_err() {
                    errors += 1;
                }
                tokio::task::yield_now().await;
            }
            errors
        })
    };
    let id = h.add(FaultRule::new(FaultOps::READ, FaultAction::IoError(libc::EIO)).times(5));
    let errors = task.await.unwrap();
    assert_eq!(errors, 5);
    assert_eq!(h.hits(id), 5);
}
