//! The log layout (`VolumeConfig::log`): every read agrees with a trivially correct model
//! (a `Vec<u8>`) through random writes, overwrites, deallocates, garbage collection,
//! checkpoints and reassembly (replay); reads survive a missing member; status reports
//! what compression saved.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use blockdev::{BlockDevice, IoBuf, WriteFlags};
use common::*;
use proptest::prelude::*;
use rand::Rng;
use volume::{Compression, LevelSpec, LogConfig, TaskPhase, Volume, VolumeConfig};

const SECTOR: u64 = 512;
const SU: u64 = 16 << 10;
const MEMBER_BYTES: u64 = 3 * MIB;

fn log_config(level: LevelSpec, compression: Compression, block_bytes: u32) -> VolumeConfig {
    let mut c = config(level, SU, MIB);
    c.log = Some(LogConfig {
        block_bytes,
        ..LogConfig::new(compression)
    });
    c
}

/// Compressible content: text-like runs from a small alphabet, random bytes or zeroes.
fn content(kind: u8, seed: u64, len: usize) -> Vec<u8> {
    let mut r = rng(seed);
    match kind % 3 {
        0 => {
            const WORDS: [&[u8]; 8] = [
                b"volume ", b"stripe ", b"parity ", b"block ", b"lz4 ", b"zstd ", b"map\n", b"log ",
            ];
            let mut v = Vec::with_capacity(len + 8);
            while v.len() < len {
                v.extend_from_slice(WORDS[r.random_range(0..WORDS.len())]);
            }
            v.truncate(len);
            v
        }
        1 => random_bytes(&mut r, len),
        _ => vec![0u8; len],
    }
}

#[tokio::test]
async fn compressible_data_reads_back_and_status_shows_the_ratio() {
    for compression in [Compression::Lz4, Compression::Zstd(3), Compression::Off] {
        let m = ram_members(4, MEMBER_BYTES);
        let vol = Volume::create(
            "t",
            log_config(LevelSpec::Raid5, compression, 4096),
            m.devs.clone(),
            vec![],
        )
        .await
        .unwrap();
        let size = vol.size_bytes();
        assert!(size > 0 && size < 3 * (MEMBER_BYTES - MIB), "{size}");
        let data = content(0, 1, 1 << 20);
        write(&vol, 0, &data).await;
        assert_eq!(read(&vol, 0, data.len()).await, data);
        // Never written and deallocated blocks read as zeroes.
        assert!(read(&vol, 2 << 20, 8192).await.iter().all(|&b| b == 0));
        let st = vol.status().log.expect("log status");
        assert_eq!(st.compression, compression);
        assert_eq!(st.logical_bytes, 1 << 20);
        assert_eq!(st.map_entries, 256);
        if compression == Compression::Off {
            assert_eq!(st.physical_bytes, 1 << 20);
        } else {
            assert!(
                st.compression_ratio > 2.0,
                "{compression}: ratio {}",
                st.compression_ratio
            );
        }
        vol.write_zeroes(0, 512 << 10).await.unwrap();
        assert!(read(&vol, 0, 512 << 10).await.iter().all(|&b| b == 0));
        let st = vol.status().log.unwrap();
        assert_eq!(
            st.logical_bytes,
            512 << 10,
            "deallocated blocks leave the map"
        );
        vol.stop().await.unwrap();
        drop(vol);
        let vol = Volume::assemble(m.devs.clone()).await.unwrap();
        assert_eq!(vol.size_bytes(), size);
        assert!(read(&vol, 0, 512 << 10).await.iter().all(|&b| b == 0));
        assert_eq!(read(&vol, 512 << 10, 512 << 10).await, data[512 << 10..]);
    }
}

#[tokio::test]
async fn log_layout_is_refused_on_mirrors_and_bad_blocks() {
    let m = ram_members(4, MEMBER_BYTES);
    let err = Volume::create(
        "t",
        log_config(LevelSpec::Raid1, Compression::Lz4, 4096),
        m.devs.clone(),
        vec![],
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("parity level"), "{err}");
    let err = Volume::create(
        "t",
        log_config(LevelSpec::Raid5, Compression::Lz4, 6000),
        m.devs.clone(),
        vec![],
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("4 KiB to 64 KiB"), "{err}");
}

#[tokio::test]
async fn degraded_reads_and_writes_with_a_member_gone() {
    for level in [LevelSpec::Raid5, LevelSpec::Raid6] {
        let m = ram_members(5, MEMBER_BYTES);
        let vol = Volume::create(
            "t",
            log_config(level, Compression::Zstd(3), 16384),
            m.devs.clone(),
            vec![],
        )
        .await
        .unwrap();
        let mut model = vec![0u8; vol.size_bytes() as usize];
        let mut r = rng(7);
        for i in 0..40u64 {
            let off = r.random_range(0..model.len() as u64 / SECTOR - 64) * SECTOR;
            let data = content(i as u8, i, 32 << 10);
            write(&vol, off, &data).await;
            model[off as usize..off as usize + data.len()].copy_from_slice(&data);
        }
        vol.stop().await.unwrap();
        drop(vol);
        // Member 1 is gone: assembly starts degraded and every block reads back.
        let mut devs = m.devs.clone();
        devs.remove(1);
        let vol = Volume::assemble(devs.clone()).await.unwrap();
        check_all(&vol, &model).await;
        // Writes while degraded (through the stripe journal) and their replay.
        for i in 40..60u64 {
            let off = r.random_range(0..model.len() as u64 / SECTOR - 64) * SECTOR;
            let data = content(i as u8, i, 8 << 10);
            write(&vol, off, &data).await;
            model[off as usize..off as usize + data.len()].copy_from_slice(&data);
        }
        drop(vol);
        let vol = Volume::assemble(devs).await.unwrap();
        check_all(&vol, &model).await;
    }
}

#[derive(Clone, Debug)]
enum Op {
    Write {
        off: u64,
        sectors: u64,
        kind: u8,
        seed: u64,
        fua: bool,
    },
    Trim {
        off: u64,
        sectors: u64,
    },
    Read {
        off: u64,
        sectors: u64,
    },
    Flush,
    Gc,
    Checkpoint,
    /// A checkpoint with writes going on meanwhile (segments sealed while it is written
    /// go into its root's head): four writes of `sectors` at `off + i * 128` sectors.
    CheckpointUnderWrites {
        off: u64,
        sectors: u64,
        seed: u64,
    },
    /// Reassemble from the members: after a clean stop, or dropped (the log replays).
    Reopen {
        clean: bool,
    },
}

fn op(hot_sectors: u64) -> impl Strategy<Value = Op> {
    let span = 1u64..=72;
    prop_oneof![
        10 => (0..hot_sectors, span.clone(), any::<u8>(), any::<u64>(), proptest::bool::weighted(0.1))
            .prop_map(|(off, sectors, kind, seed, fua)| Op::Write { off, sectors, kind, seed, fua }),
        2 => (0..hot_sectors, 1u64..=256).prop_map(|(off, sectors)| Op::Trim { off, sectors }),
        3 => (0..hot_sectors, span).prop_map(|(off, sectors)| Op::Read { off, sectors }),
        1 => Just(Op::Flush),
        2 => Just(Op::Gc),
        1 => Just(Op::Checkpoint),
        2 => (0..hot_sectors, 1u64..=128, any::<u64>())
            .prop_map(|(off, sectors, seed)| Op::CheckpointUnderWrites { off, sectors, seed }),
        1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
    ]
}

async fn run_model(ops: Vec<Op>, block_bytes: u32) {
    let m = ram_members(4, MEMBER_BYTES);
    let mut vol = Volume::create(
        "t",
        log_config(LevelSpec::Raid5, Compression::Lz4, block_bytes),
        m.devs.clone(),
        vec![],
    )
    .await
    .unwrap();
    let size = vol.size_bytes();
    let sectors_total = size / SECTOR;
    let mut model = vec![0u8; size as usize];
    let clamp = |off: u64, n: u64| {
        let off = off.min(sectors_total - 1);
        (off * SECTOR, n.min(sectors_total - off) * SECTOR)
    };
    for op in ops {
        match op {
            Op::Write {
                off,
                sectors,
                kind,
                seed,
                fua,
            } => {
                let (off, len) = clamp(off, sectors);
                let data = content(kind, seed, len as usize);
                vol.write(off, IoBuf::from_slice(&data), WriteFlags { fua })
                    .await
                    .unwrap();
                model[off as usize..(off + len) as usize].copy_from_slice(&data);
            }
            Op::Trim { off, sectors } => {
                let (off, len) = clamp(off, sectors);
                vol.discard(off, len).await.unwrap();
                model[off as usize..(off + len) as usize].fill(0);
            }
            Op::Read { off, sectors } => {
                let (off, len) = clamp(off, sectors);
                let got = read(&vol, off, len as usize).await;
                assert!(
                    got == model[off as usize..(off + len) as usize],
                    "read {off}+{len}"
                );
            }
            Op::Flush => vol.flush().await.unwrap(),
            Op::Gc => {
                vol.log().unwrap().collect_garbage().await.unwrap();
            }
            Op::Checkpoint => vol.log().unwrap().checkpoint().await.unwrap(),
            Op::CheckpointUnderWrites { off, sectors, seed } => {
                let log = vol.log().unwrap();
                let writes: Vec<(u64, Vec<u8>)> = (0..4u64)
                    .filter_map(|i| {
                        let start = off + i * 128;
                        (start < sectors_total).then(|| {
                            let (o, len) = clamp(start, sectors.min(128));
                            (o, content(1, seed + i, len as usize))
                        })
                    })
                    .collect();
                // Writes first: they are in flight when the checkpoint takes its map.
                let (done, ck) = futures::join!(
                    futures::future::join_all(writes.iter().map(|(o, d)| {
                        vol.write(*o, IoBuf::from_slice(d), WriteFlags::default())
                    })),
                    log.checkpoint(),
                );
                ck.unwrap();
                for r in done {
                    r.unwrap();
                }
                for (o, d) in &writes {
                    model[*o as usize..*o as usize + d.len()].copy_from_slice(d);
                }
            }
            Op::Reopen { clean } => {
                if clean {
                    vol.stop().await.unwrap();
                }
                drop(vol);
                vol = Volume::assemble(m.devs.clone()).await.unwrap();
                assert_eq!(vol.size_bytes(), size);
            }
        }
    }
    check_all(&vol, &model).await;
    let st = vol.status().log.unwrap();
    let mapped = model
        .chunks(block_bytes as usize)
        .filter(|b| b.iter().any(|&x| x != 0))
        .count() as u64;
    // Blocks holding data are mapped; zero blocks may be (written zeroes) or not.
    assert!(st.map_entries >= mapped, "{st:?}");
    assert!(st.segments_free + st.segments_pending_free <= st.segments_total);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Hot spot of 1 MiB: overwrites make garbage fast, so GC and space waits run.
    #[test]
    fn log_matches_model(ops in proptest::collection::vec(op(2048), 1..160)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(run_model(ops, 4096));
    }

    #[test]
    fn log_matches_model_with_16k_blocks(ops in proptest::collection::vec(op(2048), 1..100)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(run_model(ops, 16384));
    }
}

/// `writers` tasks at once, each writing `writes` 4 KiB blocks one after another: write
/// `i` of writer `t` is `block(t, i)` = (block number, its bytes).
async fn write_concurrently(
    vol: &Arc<Volume>,
    writers: u64,
    writes: u64,
    block: impl Fn(u64, u64) -> (u64, Vec<u8>) + Copy + Send + 'static,
) {
    let tasks: Vec<_> = (0..writers)
        .map(|t| {
            let vol = vol.clone();
            tokio::spawn(async move {
                for i in 0..writes {
                    let (b, data) = block(t, i);
                    vol.write(b * 4096, IoBuf::from_slice(&data), WriteFlags::default())
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

/// Many writers at once fill whole segments (group commit) and the result still matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_fill_segments() {
    let m = ram_members(4, MEMBER_BYTES);
    let vol = Arc::new(
        Volume::create(
            "t",
            log_config(LevelSpec::Raid5, Compression::Lz4, 4096),
            m.devs.clone(),
            vec![],
        )
        .await
        .unwrap(),
    );
    let blocks = 256u64;
    write_concurrently(&vol, 32, 64, move |t, i| {
        let b = (t * 64 + i) % blocks;
        // Each writer owns blocks b with b % 32 == t.
        let b = b - b % 32 + t;
        (b, content(0, b * 1000 + i, 4096))
    })
    .await;
    let st = vol.status().log.unwrap();
    assert!(
        st.segments_written < 32 * 64 / 2,
        "writers should share segments: {} segments for {} writes",
        st.segments_written,
        32 * 64
    );
    for b in 0..blocks {
        let t = b % 32;
        let last_i = (0..64u64)
            .filter(|i| {
                let x = (t * 64 + i) % blocks;
                x - x % 32 + t == b
            })
            .max();
        let want = match last_i {
            Some(i) => content(0, b * 1000 + i, 4096),
            None => vec![0u8; 4096],
        };
        assert_eq!(read(&vol, b * 4096, 4096).await, want, "block {b}");
    }
}

/// Overwriting a hot range many times over the volume's capacity only works if garbage
/// collection and checkpoints give segments back; the data stays right throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_collection_reclaims_overwritten_segments() {
    let m = ram_members(4, MEMBER_BYTES);
    let vol = Volume::create(
        "t",
        log_config(LevelSpec::Raid5, Compression::Lz4, 4096),
        m.devs.clone(),
        vec![],
    )
    .await
    .unwrap();
    let size = vol.size_bytes();
    let mut model = vec![0u8; size as usize];
    // Fill 70 % of the volume with data that compresses poorly, so live blocks are
    // spread over most segments, then overwrite a hot 256 KiB range again and again.
    let fill = (size * 7 / 10) / 4096 * 4096;
    let data = content(1, 99, fill as usize);
    write(&vol, 0, &data).await;
    model[..fill as usize].copy_from_slice(&data);
    let total = vol.status().log.unwrap().segments_total;
    let mut r = rng(3);
    let mut i = 0u64;
    while vol.status().log.unwrap().segments_written < 3 * total {
        let off = r.random_range(0..64u64) * 4096;
        let data = content(1, 1000 + i, 4096);
        write(&vol, off, &data).await;
        model[off as usize..off as usize + 4096].copy_from_slice(&data);
        i += 1;
    }
    let st = vol.status().log.unwrap();
    assert!(st.gc_segments > 0 && st.checkpoints > 1, "{st:?}");
    assert!(st.gc_write_amplification >= 1.0, "{st:?}");
    check_all(&vol, &model).await;
    drop(vol);
    let vol = Volume::assemble(m.devs.clone()).await.unwrap();
    check_all(&vol, &model).await;
}

/// FUA writes seal sparse segments, so garbage collection runs with free segments at
/// zero while emptied ones wait for a checkpoint. The collector used to wait forever for
/// the segment holding its moves (only a checkpoint, which it writes itself, could free
/// one) and every writer with it. Now the writers finish and the data is right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fua_writers_on_a_full_log_do_not_stall_garbage_collection() {
    const CHUNK: u64 = 64 << 10;
    let m = ram_members(3, 8 * MIB);
    // Members with a network's latency: segment writes overlap, as on a processor node.
    for f in &m.faults {
        for ops in [blockdev::FaultOps::READ, blockdev::FaultOps::WRITE] {
            f.add(blockdev::FaultRule::new(
                ops,
                blockdev::FaultAction::Delay(std::time::Duration::from_micros(300)),
            ));
        }
    }
    let mut cfg = config(LevelSpec::Raid5, 64 << 10, MIB);
    cfg.log = Some(LogConfig {
        block_bytes: 16 << 10,
        ..LogConfig::new(Compression::Zstd(3))
    });
    let vol = Arc::new(
        Volume::create("t", cfg, m.devs.clone(), vec![])
            .await
            .unwrap(),
    );
    let chunks = vol.size_bytes() / CHUNK;
    assert!(chunks >= 16, "{}", vol.size_bytes());
    let total = vol.status().log.unwrap().segments_total;
    // Half noise, half zeroes: about 2:1, so a 64 KiB FUA write seals a quarter segment.
    let half = |seed: u64| {
        let mut v = content(1, seed, CHUNK as usize);
        for page in v.chunks_mut(4096) {
            page[2048..].fill(0);
        }
        v
    };
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            let vol = vol.clone();
            tokio::spawn(async move {
                let mine: Vec<u64> = (w..chunks).step_by(4).collect();
                let mut last = std::collections::BTreeMap::new();
                let mut i = 0u64;
                while vol.status().log.unwrap().segments_written < 4 * total {
                    let c = mine[(i % mine.len() as u64) as usize];
                    let seed = w << 32 | i;
                    vol.write(
                        c * CHUNK,
                        IoBuf::from_slice(&half(seed)),
                        WriteFlags { fua: true },
                    )
                    .await
                    .unwrap();
                    last.insert(c, seed);
                    i += 1;
                }
                last
            })
        })
        .collect();
    let all = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        let mut all = Vec::new();
        for w in writers {
            all.push(w.await.unwrap());
        }
        all
    })
    .await
    .unwrap_or_else(|_| panic!("writers stalled: {:?}", vol.status().log));
    let st = vol.status().log.unwrap();
    assert!(st.gc_segments > 0 && st.checkpoints > 1, "{st:?}");
    for last in all {
        for (c, seed) in last {
            assert!(
                read(&vol, c * CHUNK, CHUNK as usize).await == half(seed),
                "chunk {c}"
            );
        }
    }
}

/// Random overwrites of an 80 %-full volume with incompressible blocks (compression off)
/// on members with a device's latency, 32 writers at once (so host segments go out
/// partly filled by group commit): garbage collection must keep making room. It used to
/// livelock: with free segments at the writers' reserve a round took one victim into one
/// destination (freeing nothing net) and wrote a checkpoint, over and over, while host
/// writes trickled through (about 1 host write per 4 segments written). Asserted, in
/// units of work rather than time: the writes complete before the log has written a
/// bounded number of segments per host write; write amplification and checkpoints per
/// host write stay within what greedy collection at this utilisation needs; the data
/// reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_overwrites_at_80_percent_full_make_steady_progress() {
    const BS: u64 = 4096;
    const WRITERS: u64 = 32;
    let m = ram_members(4, 16 * MIB);
    for f in &m.faults {
        for ops in [blockdev::FaultOps::READ, blockdev::FaultOps::WRITE] {
            f.add(blockdev::FaultRule::new(
                ops,
                blockdev::FaultAction::Delay(std::time::Duration::from_micros(200)),
            ));
        }
    }
    let mut cfg = config(LevelSpec::Raid5, 64 << 10, MIB);
    // The throttle a volume runs with by default (the collector rests between rounds
    // unless writers are about to wait).
    cfg.options = volume::EngineOptions {
        auto_rebuild: false,
        ..volume::EngineOptions::default()
    };
    cfg.log = Some(LogConfig::new(Compression::Off));
    let vol = Arc::new(
        Volume::create("t", cfg, m.devs.clone(), vec![])
            .await
            .unwrap(),
    );
    let blocks = vol.size_bytes() * 8 / 10 / BS / WRITERS * WRITERS;
    let fill = content(1, 7, (blocks * BS) as usize);
    for (i, c) in fill.chunks(MIB as usize).enumerate() {
        write(&vol, i as u64 * MIB, c).await;
    }
    let before = vol.status().log.unwrap();
    // Twice the filled range: the collector runs at its low water most of the time.
    let writes_per_writer = 2 * blocks / WRITERS;
    let host_writes = writes_per_writer * WRITERS;
    let workers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let vol = vol.clone();
            tokio::spawn(async move {
                let mut r = rng(100 + w);
                let mut last = std::collections::BTreeMap::new();
                for i in 0..writes_per_writer {
                    // Writer w owns the blocks b with b % WRITERS == w.
                    let b = r.random_range(0..blocks / WRITERS) * WRITERS + w;
                    let seed = w << 40 | i;
                    let data = IoBuf::from_slice(&content(1, seed, BS as usize));
                    vol.write(b * BS, data, WriteFlags::default())
                        .await
                        .unwrap();
                    last.insert(b, seed);
                }
                last
            })
        })
        .collect();
    // The work budget: segments written since the fill, at most one per 2 host writes
    // (as measured: about one per 10, host segments half filled by group commit plus
    // the collector's destinations) and a margin. The livelock wrote hundreds per host
    // write.
    let budget = 500 + host_writes / 2;
    let watchdog = async {
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let s = vol.status().log.unwrap();
            if s.segments_written - before.segments_written > budget {
                return s;
            }
        }
    };
    let all = async {
        let mut all = Vec::new();
        for w in workers {
            all.push(w.await.unwrap());
        }
        all
    };
    let last = tokio::select! {
        all = all => all,
        s = watchdog => panic!(
            "no steady progress: {budget} segments written for fewer than {host_writes} \
             host writes (done {} of them): {s:?}",
            (s.host_write_bytes - before.host_write_bytes) / BS
        ),
    };
    let st = vol.status().log.unwrap();
    let segs = st.segments_written - before.segments_written;
    let ckpts = st.checkpoints - before.checkpoints;
    let moved_blocks = (st.gc_moved_bytes - before.gc_moved_bytes) / BS;
    // Greedy collection with the victims this utilisation leaves (about a third live,
    // measured 1.6 blocks moved per host write): at most 4 moved per host write.
    assert!(
        moved_blocks <= 4 * host_writes,
        "write amplification: {moved_blocks} blocks moved for {host_writes} host writes: {st:?}"
    );
    assert!(
        st.gc_segments > before.gc_segments && ckpts > 0,
        "the collector never ran: {st:?}"
    );
    // A checkpoint frees a batch of emptied segments, not one (measured: one per ~130
    // host writes).
    assert!(
        ckpts * 20 <= host_writes,
        "{ckpts} checkpoints for {host_writes} host writes ({segs} segments): {st:?}"
    );
    for l in last {
        for (b, seed) in l {
            assert!(
                read(&vol, b * BS, BS as usize).await == content(1, seed, BS as usize),
                "block {b}"
            );
        }
    }
}

/// A member rebuild of a log volume reconstructs its root and checkpoint rows and the
/// segments in use only, not the free ones: with a few segments written, the new
/// member receives a small share of its size, the progress says so, and the volume
/// reads right from the rebuilt member with another one gone (writes during the
/// rebuild included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_of_a_log_volume_writes_only_the_segments_in_use() {
    // Members large enough that the 1 MiB written stays under a quarter of the segments
    // even when group commit sends it in small batches (29 segments seen under load).
    const MEMBER: u64 = 16 * MIB;
    const LOG_SU: u64 = 64 << 10;
    let m = ram_members(4, MEMBER);
    let mut cfg = config(LevelSpec::Raid5, LOG_SU, MIB);
    cfg.log = Some(LogConfig::new(Compression::Lz4));
    let vol = Arc::new(
        Volume::create("t", cfg, m.devs.clone(), vec![])
            .await
            .unwrap(),
    );
    let size = vol.size_bytes() as usize;
    let mut model = vec![0u8; size];
    let data = content(1, 5, MIB as usize);
    write(&vol, 0, &data).await;
    model[..data.len()].copy_from_slice(&data);
    vol.flush().await.unwrap();
    let log = vol.status().log.unwrap();
    let in_use = log.segments_total - log.segments_free;
    assert!(in_use > 0 && in_use * 4 < log.segments_total, "{log:?}");

    vol.fail_member(2).await.unwrap();
    let new = Arc::new(blockdev::RamDevice::new("new", MEMBER));
    vol.replace_member(2, new.clone()).await.unwrap();
    let before = new.stats().write_bytes;
    let mut rx = vol.start_rebuild().await.unwrap();
    // Writes while it runs: into segments free when it started, written whole (the new
    // member too).
    let more = content(0, 6, 64 << 10);
    let at = size / 2 / 4096 * 4096;
    write(&vol, at as u64, &more).await;
    model[at..at + more.len()].copy_from_slice(&more);
    rx.wait_for(|p| p.phase != TaskPhase::Running)
        .await
        .unwrap();
    let p = rx.borrow().clone();
    assert_eq!(p.phase, TaskPhase::Done, "{p:?}");
    assert!(p.in_use_only, "{p:?}");
    assert_eq!(p.bytes_done, p.bytes_total);
    let member_data = vol.status().member_data_bytes;
    // Each segment is one row: one stripe unit on each member.
    assert!(p.bytes_total >= in_use * LOG_SU, "{p:?}");
    assert!(
        p.bytes_total * 4 < member_data,
        "rebuilt {} of {member_data} member bytes with {in_use} of {} segments in use",
        p.bytes_total,
        log.segments_total
    );
    // What the new member received: the rebuilt rows, the writes meanwhile (their
    // segments, checkpoint and journal) and superblock copies, far from the whole member.
    let written = new.stats().write_bytes - before;
    assert!(written >= p.bytes_total, "{written} < {}", p.bytes_total);
    assert!(
        written <= p.bytes_total + member_data / 4,
        "the new member took {written} bytes for {} rebuilt",
        p.bytes_total
    );
    assert_eq!(vol.status().members[2].state, volume::MemberState::Active);
    // A scrub checks rows in use only (fewer than the member's rows: a full scrub checks
    // `member_data / LOG_SU` of them), and finds them consistent.
    let rep = vol.scrub().await.unwrap();
    assert!(
        rep.mismatches == 0
            && rep.stripes_checked > 0
            && rep.stripes_checked * LOG_SU < member_data,
        "{rep:?} ({member_data} member bytes)"
    );
    // The rebuilt member carries its share: lose another one and read everything.
    vol.fail_member(0).await.unwrap();
    check_all(&vol, &model).await;
}

/// Group commit at queue depth 32 on segments that hold more than 32 blocks: the writers
/// a segment write acknowledged come straight back, and the next segment waits for them
/// instead of going out nearly empty (batches of 1 and 31 alternating, 16 on average).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_at_queue_depth_32_share_segments_of_about_32_blocks() {
    // Room for every write without garbage collection (its moves are segments too).
    let m = ram_members(4, 40 * MIB);
    let mut cfg = config(LevelSpec::Raid5, 64 << 10, MIB);
    cfg.log = Some(LogConfig::new(Compression::Off));
    let vol = Arc::new(
        Volume::create("t", cfg, m.devs.clone(), vec![])
            .await
            .unwrap(),
    );
    let rounds = 200u64;
    let before = vol.status().log.unwrap().segments_written;
    write_concurrently(&vol, 32, rounds, |t, i| {
        let b = (i * 32 + t) % 1024;
        (b, content(1, b * 7 + i, 4096))
    })
    .await;
    let st = vol.status().log.unwrap();
    assert_eq!(st.gc_segments, 0, "{st:?}");
    let segs = st.segments_written - before;
    let per_segment = (32 * rounds) as f64 / segs as f64;
    eprintln!(
        "{segs} segments for {} writes: {per_segment:.1} per segment ({st:?})",
        32 * rounds
    );
    assert!(
        per_segment >= 20.0,
        "{segs} segments for {} writes: {per_segment:.1} blocks per segment",
        32 * rounds
    );
}
