//! Compression of one logical block: lz4_flex (block format) or zstd (bulk API, one
//! context per thread). A block is stored raw when compressing does not save at least
//! one alignment unit.

use std::cell::RefCell;

use super::params::Compression;

pub const CODEC_RAW: u8 = 0;
pub const CODEC_LZ4: u8 = 1;
pub const CODEC_ZSTD: u8 = 2;

thread_local! {
    static ZSTD_C: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> = const { RefCell::new(None) };
    static ZSTD_D: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// Compresses `raw`; returns `(codec, bytes)` with `CODEC_RAW` and `None` when the block
/// is better stored as it is (the caller then stores `raw`).
pub fn compress(c: Compression, raw: &[u8], align: usize) -> (u8, Option<Vec<u8>>) {
    let out = match c {
        Compression::Off => return (CODEC_RAW, None),
        Compression::Lz4 => Some((CODEC_LZ4, lz4_flex::block::compress(raw))),
        Compression::Zstd(level) => zstd_compress(i32::from(level), raw).map(|v| (CODEC_ZSTD, v)),
    };
    match out {
        Some((codec, v)) if v.len().div_ceil(align) < raw.len().div_ceil(align) => (codec, Some(v)),
        _ => (CODEC_RAW, None),
    }
}

fn zstd_compress(level: i32, raw: &[u8]) -> Option<Vec<u8>> {
    ZSTD_C.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|(l, _)| *l != level) {
            *slot = Some((level, zstd::bulk::Compressor::new(level).ok()?));
        }
        let (_, c) = slot.as_mut()?;
        c.compress(raw).ok()
    })
}

/// Decompresses a stored block into `out` (exactly one logical block). Errors name
/// what is wrong (the caller reports it as a media error: the checksum matched, so the
/// stored bytes are what was written).
pub fn decompress(codec: u8, stored: &[u8], out: &mut [u8]) -> Result<(), String> {
    match codec {
        CODEC_RAW if stored.len() == out.len() => {
            out.copy_from_slice(stored);
            Ok(())
        }
        CODEC_LZ4 => match lz4_flex::block::decompress_into(stored, out) {
            Ok(n) if n == out.len() => Ok(()),
            Ok(n) => Err(format!(
                "lz4 block decompressed to {n} bytes, want {}",
                out.len()
            )),
            Err(e) => Err(format!("lz4: {e}")),
        },
        CODEC_ZSTD => ZSTD_D.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                *slot = Some(zstd::bulk::Decompressor::new().map_err(|e| format!("zstd: {e}"))?);
            }
            let d = slot.as_mut().ok_or("zstd context")?;
            match d.decompress_to_buffer(stored, out) {
                Ok(n) if n == out.len() => Ok(()),
                Ok(n) => Err(format!(
                    "zstd block decompressed to {n} bytes, want {}",
                    out.len()
                )),
                Err(e) => Err(format!("zstd: {e}")),
            }
        }),
        _ => Err(format!(
            "stored block of {} bytes with codec {codec}",
            stored.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_falls_back_to_raw() {
        let text: Vec<u8> = b"the quick brown fox jumps over the lazy dog "
            .iter()
            .copied()
            .cycle()
            .take(4096)
            .collect();
        for c in [
            Compression::Lz4,
            Compression::Zstd(3),
            Compression::Zstd(19),
        ] {
            let (codec, stored) = compress(c, &text, 512);
            let stored = stored.expect("text compresses");
            assert!(stored.len() < 1024, "{c}: {}", stored.len());
            let mut out = vec![0u8; 4096];
            decompress(codec, &stored, &mut out).unwrap();
            assert_eq!(out, text);
        }
        let mut x = 1u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 56) as u8
            })
            .collect();
        assert_eq!(
            compress(Compression::Zstd(3), &noise, 512),
            (CODEC_RAW, None)
        );
        assert_eq!(compress(Compression::Off, &text, 512), (CODEC_RAW, None));
        let mut out = vec![0u8; 4096];
        assert!(decompress(CODEC_LZ4, &[0xff; 10], &mut out).is_err());
        assert!(decompress(CODEC_ZSTD, &[0xff; 10], &mut out).is_err());
        assert!(decompress(7, &[0; 10], &mut out).is_err());
    }
}
