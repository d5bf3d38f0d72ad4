//! FileDevice on a real kernel block device: a loop device over a sparse file.
//! Needs root and loop devices; when they are unavailable the test says it did not run
//! (and fails under `FERROBAY_REQUIRE_ALL=1`, see `testkit::prereq`).

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::{Path, PathBuf};
use std::process::Command;

use blockdev::{BlockDevice, DeviceKind, FileDevice, IoBuf, IoEngine, OpenOptions, WriteFlags};

/// Detaches the loop device when dropped, even if the test panics.
struct Loop(PathBuf);

impl Loop {
    /// Attaches `file`; Err says why not (no losetup, not root, no free loop device).
    fn attach(file: &Path, sector_bytes: u32) -> Result<Loop, String> {
        let out = Command::new("losetup")
            .args([
                "--find",
                "--show",
                "--sector-size",
                &sector_bytes.to_string(),
            ])
            .arg(file)
            .output()
            .map_err(|e| format!("cannot run losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "losetup failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok(Loop(PathBuf::from(dev)))
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
    }
}

async fn exercise(dev: &FileDevice, lb: usize) {
    let data: Vec<u8> = (0..64 * 1024u32).map(|i| (i % 251) as u8 + 1).collect();
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
    // BLKZEROOUT always reads back as zeroes.
    dev.write_zeroes(lb as u64, 2 * lb as u64).await.unwrap();
    let back = dev
        .read(lb as u64, IoBuf::new_zeroed(4 * lb))
        .await
        .unwrap();
    assert!(back[..2 * lb].iter().all(|&b| b == 0));
    assert_eq!(&back[2 * lb..], &data[2 * lb..4 * lb]);
    // BLKDISCARD must succeed (content afterwards is device-defined).
    dev.discard(8192, 8192).await.unwrap();
    assert!(matches!(
        dev.read(dev.info().size_bytes, IoBuf::new_zeroed(lb)).await,
        Err(blockdev::BlockError::OutOfRange { .. })
    ));
}

#[tokio::test]
async fn loop_device_both_engines_and_sector_sizes() {
    let dir = tempfile::Builder::new()
        .prefix("blockdev-loop-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    for lb in [512u32, 4096] {
        let img = dir.path().join(format!("loop{lb}.img"));
        std::fs::File::create(&img)
            .unwrap()
            .set_len(16 << 20)
            .unwrap();
        let lo = match Loop::attach(&img, lb) {
            Ok(lo) => lo,
            Err(why) => {
                testkit::prereq::missing(format!("no loop device ({why})"));
                return;
            }
        };
        for engine in [IoEngine::Uring, IoEngine::ThreadPool] {
            let dev = FileDevice::open(
                &lo.0,
                OpenOptions {
                    engine,
                    ..Default::default()
                },
            )
            .unwrap();
            let info = dev.info().clone();
            assert_eq!(info.kind, DeviceKind::BlockDevice);
            assert_eq!(info.size_bytes, 16 << 20);
            assert_eq!(info.logical_block_bytes, lb);
            assert!(dev.is_direct());
            assert_eq!(dev.engine(), engine);
            exercise(&dev, lb as usize).await;
            // A block device cannot be "created" bigger than it is.
            let too_big = OpenOptions {
                create_size_bytes: Some(32 << 20),
                ..Default::default()
            };
            assert!(FileDevice::open(&lo.0, too_big).is_err());
        }
        // The spec parser's /dev path opens the same way.
        let spec = blockdev::parse_drive_spec(&lo.0.display().to_string()).unwrap();
        let dev = blockdev::open_drive(&spec, IoEngine::Auto).await.unwrap();
        assert_eq!(dev.info().kind, DeviceKind::BlockDevice);
    }
}
