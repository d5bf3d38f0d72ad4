//! Helpers shared by the kv test binaries.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;

use blockdev::{BlockDevice, RamDevice};
use kv::{FormatOptions, Kv, Options};

/// Small segments so a few hundred KiB of values exercise segment switches and compaction.
pub fn small_format() -> FormatOptions {
    FormatOptions {
        segment_bytes: 64 << 10,
        max_value_bytes: 8 << 10,
        max_keys: Some(4096),
    }
}

/// Options for small stores: small batches, frequent checkpoints, unthrottled compaction,
/// values of 2 KiB and more written in place.
pub fn small_options() -> Options {
    let mut o = Options {
        batch_max_bytes: 16 << 10,
        checkpoint_interval_bytes: 256 << 10,
        in_place_min_bytes: 2048,
        ..Options::default()
    };
    o.compaction.throttle_bytes_per_sec = 0;
    o
}

pub fn ram(size_bytes: u64) -> Arc<dyn BlockDevice> {
    Arc::new(RamDevice::new("kv-test", size_bytes))
}

pub async fn fresh(dev: &Arc<dyn BlockDevice>) -> Kv {
    Kv::format(dev, &small_format()).await.unwrap();
    Kv::open(dev.clone(), small_options()).await.unwrap().0
}

/// A value whose bytes depend on `seed` and `len` (so a mix of two values is detected).
pub fn value(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ len as u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
