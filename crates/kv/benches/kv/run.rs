//! The benchmark's steps and its JSON report (shared by `cargo bench -p kv --bench kv`
//! and the quick run under `cargo test`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use blockdev::{BlockDevice, FileDevice, OpenOptions, RamDevice};
use kv::{FormatOptions, Kv, Options};
use serde_json::{Value, json};

use crate::loads::{self, Done, Durability, Error};
use crate::reference::{self, Reference};

pub struct Settings {
    pub quick: bool,
    /// "file" (O_DIRECT file through blockdev's file backend) and/or "ram".
    pub media: Vec<String>,
    /// Where the drive file (and the reference engine's directory) live.
    pub dir: PathBuf,
    pub drive_bytes: u64,
    pub runtime: Duration,
    pub reference: bool,
}

const SEQ_IO_BYTES: usize = 1 << 20;
const SEQ_QD: usize = 8;
const SMALL_BYTES: usize = 4096;
const SMALL_QD: usize = 32;

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

async fn open_media(s: &Settings, media: &str) -> Result<Arc<dyn BlockDevice>, Error> {
    Ok(match media {
        "file" => {
            std::fs::create_dir_all(&s.dir)?;
            let path = s.dir.join("kv-drive.img");
            let _ = std::fs::remove_file(&path);
            let opts = OpenOptions {
                create_size_bytes: Some(s.drive_bytes),
                ..OpenOptions::default()
            };
            Arc::new(FileDevice::open(path, opts)?)
        }
        "ram" => Arc::new(RamDevice::new("ram", s.drive_bytes)),
        other => return Err(format!("unknown medium {other:?} (file, ram)").into()),
    })
}

fn done_json(d: &Done) -> Value {
    json!({ "ops": d.ops, "bytes": d.bytes, "secs": d.secs, "iops": d.iops(), "mb_per_sec": d.mb_per_sec() })
}

/// One medium: raw loads, the same loads through the engine, compaction, reference.
pub async fn run_media(s: &Settings, media: &str) -> Result<Value, Error> {
    let dev = open_media(s, media).await?;
    let size = dev.info().size_bytes;
    let t = s.runtime;
    // 0. Write the whole device once, unmeasured: otherwise the first raw load alone pays
    //    for the file's block allocation (writes into unallocated extents go through the
    //    kernel's worker threads one at a time) or the RAM drive's first touch, and the
    //    engine, which runs later on the same blocks, does not.
    eprintln!(
        "kv bench: {media} ({} MiB): writing the device once",
        size >> 20
    );
    let fill = Durability::FlushAtEnd;
    loads::raw_seq_write(&dev, (0, size), SEQ_IO_BYTES, SEQ_QD, fill, Duration::MAX).await?;
    eprintln!("kv bench: {media}: raw device loads");
    // 1. The raw device.
    let raw_seq = loads::raw_seq_write(&dev, (0, size), SEQ_IO_BYTES, SEQ_QD, fill, t * 4).await?;
    // The neighbour that is as durable as a Store: each write followed by its own flush.
    let each = Durability::FlushEach;
    let raw_seq_durable =
        loads::raw_seq_write(&dev, (0, size), SEQ_IO_BYTES, SEQ_QD, each, t * 4).await?;
    let raw_flushed =
        loads::raw_seq_write_flushed(&dev, (0, size), SMALL_BYTES, SMALL_QD, t).await?;

    // 2. The engine on the same device.
    eprintln!("kv bench: {media}: engine loads");
    Kv::format(&dev, &FormatOptions::default()).await?;
    let (kv, _) = Kv::open(dev.clone(), Options::default()).await?;
    let cap = kv.usage().capacity_bytes;
    let kv_seq = loads::kv_store(
        &kv,
        b'm',
        SEQ_IO_BYTES,
        SEQ_QD,
        cap * 2 / 5 / SEQ_IO_BYTES as u64,
        t,
    )
    .await?;
    let before = kv.stats();
    let max_small = (cap / 4 / SMALL_BYTES as u64).max(1024);
    let kv_small = loads::kv_store(&kv, b's', SMALL_BYTES, SMALL_QD, max_small, t).await?;
    let after = kv.stats();
    let batches = after.batches - before.batches;
    let mean_batch = ratio(
        (after.batch_records - before.batch_records) as f64,
        batches as f64,
    );
    let flushes = after.flushes - before.flushes;
    let small_keys = kv_small.ops.max(1);
    let kv_read = loads::kv_retrieve(&kv, b's', small_keys, SMALL_BYTES, SMALL_QD, t).await?;
    kv.close().await?;
    drop(kv);
    // Raw random reads over a region as large as the engine's 4 KiB values take (every
    // block of the device was written in step 0).
    let region = (small_keys * SMALL_BYTES as u64).clamp(1 << 20, size);
    let raw_read = loads::raw_rand_read(&dev, (0, region), SMALL_BYTES, SMALL_QD, t).await?;

    // 3. Compaction: live data at half the data area, random overwrites in steady state.
    eprintln!("kv bench: {media}: compaction at 50% garbage");
    let wa = compaction(&dev, s).await?;

    // 4. The reference engine on the same filesystem.
    let reference = if s.reference && media == "file" {
        eprintln!("kv bench: {media}: reference ({})", reference::NAME);
        let r = Arc::new(Reference::open(&s.dir.join("reference"))?);
        let seq = r.store(b'm', SEQ_IO_BYTES, SEQ_QD, kv_seq.ops.max(8), t)?;
        let small = r.store(b's', SMALL_BYTES, SMALL_QD, max_small, t)?;
        let read = r.retrieve(b's', small.ops.max(1), SMALL_QD, t)?;
        drop(r);
        let _ = std::fs::remove_dir_all(s.dir.join("reference"));
        json!({
            "engine": reference::NAME,
            "note": "buffered I/O: its reads may be served from the page cache",
            "store_1m_qd8": done_json(&seq),
            "store_4k_qd32": done_json(&small),
            "retrieve_4k_qd32": done_json(&read),
            "kv_vs_reference": {
                "store_1m": ratio(kv_seq.mb_per_sec(), seq.mb_per_sec()),
                "store_4k": ratio(kv_small.iops(), small.iops()),
                "retrieve_4k": ratio(kv_read.iops(), read.iops()),
            },
        })
    } else {
        Value::Null
    };
    if media == "file" {
        let _ = std::fs::remove_file(s.dir.join("kv-drive.img"));
    }
    Ok(json!({
        "media": media,
        "device": dev.info().name,
        "logical_block_bytes": dev.info().logical_block_bytes,
        "size_bytes": size,
        "store_1m_qd8": {
            "raw_seq_write_1m_qd8": done_json(&raw_seq),
            "raw_seq_write_1m_qd8_flush_each": done_json(&raw_seq_durable),
            "kv": done_json(&kv_seq),
            "ratio": ratio(kv_seq.mb_per_sec(), raw_seq.mb_per_sec()),
            "goal": 0.9,
            // Reference lines, not the goal's baseline: what durability costs the raw
            // device, and the engine against raw writes as durable as its Stores.
            "raw_flush_each_vs_raw": ratio(raw_seq_durable.mb_per_sec(), raw_seq.mb_per_sec()),
            "kv_vs_raw_flush_each": ratio(kv_seq.mb_per_sec(), raw_seq_durable.mb_per_sec()),
        },
        "retrieve_4k_qd32": {
            "raw_rand_read_4k_qd32": done_json(&raw_read),
            "kv": done_json(&kv_read),
            "keys": small_keys,
            "ratio": ratio(kv_read.iops(), raw_read.iops()),
            "goal": 0.9,
        },
        "store_4k_qd32": {
            "raw_seq_write_4k_qd32_flush_per_32": done_json(&raw_flushed),
            "kv": done_json(&kv_small),
            "mean_batch_records": mean_batch,
            "flushes": flushes,
            "ratio": ratio(kv_small.iops(), raw_flushed.iops()),
            "goal": 0.9,
        },
        "compaction_50pct": wa,
        "reference": reference,
    }))
}

/// Keys of 64 KiB whose live data is half the data area, overwritten at random for
/// twice the data area (steady state): device bytes written per user byte.
async fn compaction(dev: &Arc<dyn BlockDevice>, s: &Settings) -> Result<Value, Error> {
    let format = FormatOptions {
        segment_bytes: if s.quick { 1 << 20 } else { 8 << 20 },
        max_value_bytes: if s.quick { 256 << 10 } else { 2 << 20 },
        max_keys: None,
    };
    Kv::format(dev, &format).await?;
    let mut opts = Options::default();
    opts.compaction.throttle_bytes_per_sec = 0;
    let (kv, _) = Kv::open(dev.clone(), opts).await?;
    let len = 64 << 10;
    let data = kv.format_info().data_bytes;
    let keys = data / 2 / (len as u64 + 40);
    loads::kv_store(&kv, b'w', len, SEQ_QD, keys, Duration::from_secs(3600)).await?;
    kv.sync().await?;
    let (dev0, kv0) = (dev.stats(), kv.stats());
    let total = data * if s.quick { 1 } else { 2 };
    let done = loads::kv_overwrite(&kv, b'w', keys, len, SEQ_QD, total).await?;
    kv.sync().await?;
    let (dev1, kv1) = (dev.stats(), kv.stats());
    let device_bytes = dev1.write_bytes - dev0.write_bytes;
    let moved = kv1.compaction_bytes_moved - kv0.compaction_bytes_moved;
    let reclaimed = kv1.compaction_bytes_reclaimed - kv0.compaction_bytes_reclaimed;
    let usage = kv.usage();
    kv.close().await?;
    Ok(json!({
        "value_bytes": len,
        "keys": keys,
        "live_share_of_data_area": (keys * (len as u64 + 40)) as f64 / data as f64,
        "user_bytes": done.bytes,
        "device_bytes_written": device_bytes,
        "write_amplification": ratio(device_bytes as f64, done.bytes as f64),
        "compaction_bytes_moved": moved,
        "compaction_bytes_reclaimed": reclaimed,
        "moved_per_reclaimed": ratio(moved as f64, reclaimed as f64),
        "checkpoint_bytes": kv1.checkpoint_bytes_written - kv0.checkpoint_bytes_written,
        "space_stalls": kv1.space_stalls - kv0.space_stalls,
        "user_mb_per_sec": done.mb_per_sec(),
        "garbage_bytes_at_end": usage.garbage_bytes,
        "goal": 2.0,
    }))
}

pub async fn run(s: &Settings) -> Result<Value, Error> {
    let mut media = Vec::new();
    for m in &s.media {
        media.push(run_media(s, m).await?);
    }
    Ok(json!({
        "bench": "kv",
        "quick": s.quick,
        "runtime_ms": s.runtime.as_millis() as u64,
        "load_average": std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_default(),
        "media": media,
    }))
}

/// One line per figure, for people.
pub fn table(report: &Value) -> String {
    let mut out = String::new();
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    for m in report["media"].as_array().into_iter().flatten() {
        let name = m["media"].as_str().unwrap_or("?");
        let seq = &m["store_1m_qd8"];
        let rr = &m["retrieve_4k_qd32"];
        let sw = &m["store_4k_qd32"];
        let wa = &m["compaction_50pct"];
        out += &format!(
            "{name:<5} 1 MiB store QD8   kv {:>9.1} MB/s   raw seq write {:>9.1} MB/s   ratio {:.2} (goal >= 0.9)\n",
            f(&seq["kv"]["mb_per_sec"]),
            f(&seq["raw_seq_write_1m_qd8"]["mb_per_sec"]),
            f(&seq["ratio"])
        );
        out += &format!(
            "{name:<5}   (reference) raw seq write, each with its own flush {:>9.1} MB/s = {:.2} of raw; kv = {:.2} of it\n",
            f(&seq["raw_seq_write_1m_qd8_flush_each"]["mb_per_sec"]),
            f(&seq["raw_flush_each_vs_raw"]),
            f(&seq["kv_vs_raw_flush_each"])
        );
        out += &format!(
            "{name:<5} 4 KiB retrieve QD32 kv {:>9.0} IOPS  raw rand read {:>9.0} IOPS  ratio {:.2} (goal >= 0.9)\n",
            f(&rr["kv"]["iops"]),
            f(&rr["raw_rand_read_4k_qd32"]["iops"]),
            f(&rr["ratio"])
        );
        out += &format!(
            "{name:<5} 4 KiB store QD32  kv {:>9.0} IOPS  raw write+flush {:>7.0} IOPS  ratio {:.2} (goal >= 0.9), {:.1} records/batch\n",
            f(&sw["kv"]["iops"]),
            f(&sw["raw_seq_write_4k_qd32_flush_per_32"]["iops"]),
            f(&sw["ratio"]),
            f(&sw["mean_batch_records"])
        );
        out += &format!(
            "{name:<5} compaction, 50% live: write amplification {:.2} (goal <= 2), moved/reclaimed {:.2}\n",
            f(&wa["write_amplification"]),
            f(&wa["moved_per_reclaimed"])
        );
        let r = &m["reference"];
        if !r.is_null() {
            out += &format!(
                "{name:<5} vs {}: 1 MiB store {:.2}x, 4 KiB store {:.2}x, 4 KiB retrieve {:.2}x\n",
                "fjall",
                f(&r["kv_vs_reference"]["store_1m"]),
                f(&r["kv_vs_reference"]["store_4k"]),
                f(&r["kv_vs_reference"]["retrieve_4k"])
            );
        }
    }
    out
}
