//! FileDevice against real files with O_DIRECT, on both engines.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::PathBuf;

use blockdev::{
    BlockDevice, BlockError, DeviceKind, FileDevice, IoBuf, IoEngine, OpenOptions, WriteFlags,
};

/// A temp dir on the target dir's filesystem (a real one, where O_DIRECT works), unlike
/// /tmp which may be tmpfs.
fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("blockdev-file-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("temp dir")
}

fn create(dir: &tempfile::TempDir, name: &str, size_bytes: u64, engine: IoEngine) -> FileDevice {
    let path: PathBuf = dir.path().join(name);
    let opts = OpenOptions {
        create_size_bytes: Some(size_bytes),
        engine,
        ..Default::default()
    };
    FileDevice::open(&path, opts).expect("open")
}

const ENGINES: [IoEngine; 2] = [IoEngine::Uring, IoEngine::ThreadPool];

#[tokio::test]
async fn uring_works_here() {
    let dir = temp_dir();
    let dev = create(&dir, "probe.img", 1 << 20, IoEngine::Auto);
    eprintln!(
        "engine={:?} direct={} logical_block={}",
        dev.engine(),
        dev.is_direct(),
        dev.info().logical_block_bytes
    );
    assert_eq!(
        dev.engine(),
        IoEngine::Uring,
        "io_uring is expected to work on this machine"
    );
    assert!(
        dev.is_direct(),
        "O_DIRECT expected to work under the target dir"
    );
}

#[tokio::test]
async fn roundtrip_both_engines() {
    let dir = temp_dir();
    for engine in ENGINES {
        let dev = create(&dir, &format!("rt-{engine:?}.img"), 8 << 20, engine);
        assert_eq!(dev.engine(), engine);
        let info = dev.info().clone();
        assert_eq!(info.kind, DeviceKind::File);
        assert_eq!(info.size_bytes, 8 << 20);
        assert!(info.volatile_write_cache);
        let lb = info.logical_block_bytes as usize;
        // Fresh sparse file reads as zeroes.
        let back = dev
            .read(0, IoBuf::from_slice(&vec![0xAA; 3 * lb]))
            .await
            .unwrap();
        assert!(back.iter().all(|&b| b == 0));
        // Big write (several SQEs worth is not needed; 2 MiB exercises large I/O).
        let data: Vec<u8> = (0..(2 << 20))
            .map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        dev.write(lb as u64, IoBuf::from_slice(&data), WriteFlags::default())
            .await
            .unwrap();
        dev.write(0, IoBuf::from_slice(&vec![7; lb]), WriteFlags { fua: true })
            .await
            .unwrap();
        dev.flush().await.unwrap();
        let back = dev
            .read(0, IoBuf::new_zeroed(lb + data.len()))
            .await
            .unwrap();
        assert_eq!(&back[..lb], &vec![7u8; lb][..]);
        assert_eq!(&back[lb..], &data[..]);
        let s = dev.stats();
        assert_eq!(
            (s.read_ops, s.write_ops, s.flushes, s.media_errors),
            (2, 2, 1, 0)
        );
        assert_eq!(s.write_bytes, (lb + data.len()) as u64);
        // write_zeroes and discard read back as zeroes.
        dev.write_zeroes(lb as u64, 4096).await.unwrap();
        dev.discard(1 << 20, 1 << 20).await.unwrap();
        let back = dev
            .read(0, IoBuf::new_zeroed(lb + data.len()))
            .await
            .unwrap();
        assert_eq!(&back[..lb], &vec![7u8; lb][..]);
        assert!(back[lb..lb + 4096].iter().all(|&b| b == 0));
        assert_eq!(&back[lb + 4096..1 << 20], &data[4096..(1 << 20) - lb]);
        assert!(back[1 << 20..(2 << 20)].iter().all(|&b| b == 0));
        assert_eq!(&back[2 << 20..], &data[(2 << 20) - lb..]);
    }
}

#[tokio::test]
async fn data_survives_reopen_and_file_is_sparse() {
    use std::os::unix::fs::MetadataExt;
    let dir = temp_dir();
    let path = dir.path().join("persist.img");
    for engine in ENGINES {
        {
            let opts = OpenOptions {
                create_size_bytes: Some(1 << 30),
                engine,
                ..Default::default()
            };
            let dev = FileDevice::open(&path, opts).unwrap();
            dev.write(
                512 << 20,
                IoBuf::from_slice(&[0x5A; 4096]),
                WriteFlags::default(),
            )
            .await
            .unwrap();
            dev.flush().await.unwrap();
        }
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), 1 << 30);
        assert!(
            meta.blocks() * 512 < 1 << 20,
            "1 GiB image should be sparse"
        );
        let dev = FileDevice::open(
            &path,
            OpenOptions {
                engine,
                ..Default::default()
            },
        )
        .unwrap();
        let back = dev.read(512 << 20, IoBuf::new_zeroed(4096)).await.unwrap();
        assert!(back.iter().all(|&b| b == 0x5A));
    }
}

#[tokio::test]
async fn sizing_rules() {
    let dir = temp_dir();
    let path = dir.path().join("size.img");
    let open = |size: Option<u64>, read_only: bool| {
        FileDevice::open(
            &path,
            OpenOptions {
                create_size_bytes: size,
                read_only,
                ..Default::default()
            },
        )
    };
    // Missing without a size: error.
    assert!(
        matches!(open(None, false), Err(BlockError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound)
    );
    assert_eq!(
        open(Some(4 << 20), false).unwrap().info().size_bytes,
        4 << 20
    );
    // Same size again: fine. Smaller: refuse to shrink. Larger: grow.
    assert_eq!(
        open(Some(4 << 20), false).unwrap().info().size_bytes,
        4 << 20
    );
    let err = open(Some(2 << 20), false).err().expect("shrink must fail");
    assert!(err.to_string().contains("refusing to shrink"), "{err}");
    assert_eq!(
        open(Some(8 << 20), false).unwrap().info().size_bytes,
        8 << 20
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 8 << 20);
    assert!(open(Some(16 << 20), true).is_err());
    assert!(open(Some(1000), false).is_err());
    // Read-only device refuses modifications but reads.
    let ro = open(None, true).unwrap();
    let err = ro
        .write(0, IoBuf::new_zeroed(4096), WriteFlags::default())
        .await
        .unwrap_err();
    assert!(matches!(err, BlockError::ReadOnly));
    assert!(matches!(
        ro.discard(0, 4096).await,
        Err(BlockError::ReadOnly)
    ));
    ro.read(0, IoBuf::new_zeroed(4096)).await.unwrap();
    ro.flush().await.unwrap();
    // Not a file.
    assert!(FileDevice::open(dir.path(), OpenOptions::default()).is_err());
}

#[tokio::test]
async fn range_and_alignment_errors() {
    let dir = temp_dir();
    for engine in ENGINES {
        let dev = create(&dir, &format!("err-{engine:?}.img"), 1 << 20, engine);
        let lb = u64::from(dev.info().logical_block_bytes);
        let err = dev
            .read(1 << 20, IoBuf::new_zeroed(lb as usize))
            .await
            .unwrap_err();
        assert!(matches!(err, BlockError::OutOfRange { .. }), "{err}");
        let err = dev.write(
            (1 << 20) - lb,
            IoBuf::new_zeroed(2 * lb as usize),
            WriteFlags::default(),
        );
        assert!(matches!(
            err.await.unwrap_err(),
            BlockError::OutOfRange { .. }
        ));
        let err = dev
            .read(lb / 2, IoBuf::new_zeroed(lb as usize))
            .await
            .unwrap_err();
        assert!(matches!(err, BlockError::Misaligned { .. }), "{err}");
        let err = dev.read(0, IoBuf::new_zeroed(100)).await.unwrap_err();
        assert!(matches!(err, BlockError::Misaligned { .. }), "{err}");
        assert!(matches!(
            dev.write_zeroes(0, 100).await,
            Err(BlockError::Misaligned { .. })
        ));
        assert_eq!(dev.stats().read_ops, 0);
    }
}

#[tokio::test]
async fn logical_block_override() {
    let dir = temp_dir();
    let path = dir.path().join("4k.img");
    let opts = OpenOptions {
        create_size_bytes: Some((1 << 20) + 512),
        logical_block_bytes: Some(4096),
        ..Default::default()
    };
    let dev = FileDevice::open(&path, opts).unwrap();
    assert_eq!(dev.info().logical_block_bytes, 4096);
    // Size rounds down to whole logical blocks.
    assert_eq!(dev.info().size_bytes, 1 << 20);
    assert!(matches!(
        dev.read(512, IoBuf::new_zeroed(4096)).await,
        Err(BlockError::Misaligned { .. })
    ));
    let bad = OpenOptions {
        logical_block_bytes: Some(1000),
        ..Default::default()
    };
    assert!(FileDevice::open(&path, bad).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_ios_and_cancellation() {
    let dir = temp_dir();
    for engine in ENGINES {
        let dev = std::sync::Arc::new(create(
            &dir,
            &format!("conc-{engine:?}.img"),
            16 << 20,
            engine,
        ));
        let mut tasks = Vec::new();
        for t in 0..256u64 {
            let dev = dev.clone();
            tasks.push(tokio::spawn(async move {
                let off = t * 65536;
                let buf = IoBuf::from_slice(&vec![t as u8; 8192]);
                dev.write(off, buf, WriteFlags { fua: t % 7 == 0 })
                    .await
                    .unwrap();
                let back = dev.read(off, IoBuf::new_zeroed(8192)).await.unwrap();
                assert!(back.iter().all(|&b| b == t as u8));
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        // Cancel I/Os mid-flight: dropping futures must be safe and the device keeps working.
        for _ in 0..50 {
            let fut = dev.read(0, IoBuf::new_zeroed(1 << 20));
            let _ = tokio::time::timeout(std::time::Duration::from_micros(1), fut).await;
        }
        let back = dev.read(65536, IoBuf::new_zeroed(8192)).await.unwrap();
        assert!(back.iter().all(|&b| b == 1));
        assert_eq!(dev.stats().write_ops, 256);
    }
}

#[test]
fn open_drive_file_spec() {
    let dir = temp_dir();
    let spec =
        blockdev::parse_drive_spec(&format!("file:{}:64M", dir.path().join("d.img").display()))
            .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dev = blockdev::open_drive(&spec, IoEngine::ThreadPool)
            .await
            .unwrap();
        assert_eq!(dev.info().size_bytes, 64 << 20);
        assert_eq!(dev.info().kind, DeviceKind::File);
    });
}

#[tokio::test]
async fn buffered_io_when_direct_is_off() {
    let dir = temp_dir();
    for engine in ENGINES {
        let path = dir.path().join(format!("buffered-{engine:?}.img"));
        let opts = OpenOptions {
            create_size_bytes: Some(1 << 20),
            direct: false,
            engine,
            ..Default::default()
        };
        let dev = FileDevice::open(&path, opts).unwrap();
        assert!(!dev.is_direct());
        assert_eq!(dev.info().logical_block_bytes, 512);
        dev.write(512, IoBuf::from_slice(&[9; 512]), WriteFlags { fua: true })
            .await
            .unwrap();
        dev.flush().await.unwrap();
        let back = dev.read(0, IoBuf::new_zeroed(1536)).await.unwrap();
        assert_eq!(&back[..512], &[0; 512][..]);
        assert_eq!(&back[512..1024], &[9; 512][..]);
        assert_eq!(&back[1024..], &[0; 512][..]);
    }
}

/// Small queues force callers to wait on the bounded channel and the ring thread to sleep
/// and wake constantly; a lost wakeup shows up as the timeout firing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_queue_depth_never_stalls() {
    let dir = temp_dir();
    for engine in ENGINES {
        for queue_depth in [1u32, 3] {
            let path = dir.path().join(format!("qd{queue_depth}-{engine:?}.img"));
            let opts = OpenOptions {
                create_size_bytes: Some(1 << 20),
                engine,
                queue_depth,
                ..Default::default()
            };
            let dev = std::sync::Arc::new(FileDevice::open(&path, opts).unwrap());
            let work = async {
                let mut tasks = Vec::new();
                for t in 0..32u64 {
                    let dev = dev.clone();
                    tasks.push(tokio::spawn(async move {
                        for i in 0..100u64 {
                            let off = ((t * 100 + i) % 256) * 4096;
                            if i % 3 == 0 {
                                dev.write(off, IoBuf::new_zeroed(4096), WriteFlags::default())
                                    .await
                                    .unwrap();
                            } else {
                                dev.read(off, IoBuf::new_zeroed(4096)).await.unwrap();
                            }
                            if i % 10 == 0 {
                                tokio::time::sleep(std::time::Duration::from_micros(50)).await;
                            }
                        }
                    }));
                }
                for t in tasks {
                    t.await.unwrap();
                }
            };
            tokio::time::timeout(std::time::Duration::from_secs(60), work)
                .await
                .expect("I/O stalled");
            let s = dev.stats();
            assert_eq!(s.read_ops + s.write_ops, 3200);
        }
    }
}

fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.starts_with(prefix))
        .count()
}

/// Dropping a device (even with a cancelled I/O outstanding) ends its engine threads.
#[tokio::test]
async fn drop_stops_engine_threads() {
    let dir = temp_dir();
    for (engine, file, prefix) in [
        (IoEngine::Uring, "zu.img", "blk-uring-zu"),
        (IoEngine::ThreadPool, "zp.img", "blk-pool0-zp"),
    ] {
        let dev = create(&dir, file, 1 << 20, engine);
        dev.write(0, IoBuf::new_zeroed(4096), WriteFlags::default())
            .await
            .unwrap();
        // A thread names itself when it first runs: pool worker 0 may not have run yet.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while threads_named(prefix) != 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "{prefix} thread never started"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let cancelled = dev.read(0, IoBuf::new_zeroed(1 << 20));
        let _ = tokio::time::timeout(std::time::Duration::from_nanos(1), cancelled).await;
        drop(dev);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while threads_named(prefix) > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "{prefix} thread still running"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}
