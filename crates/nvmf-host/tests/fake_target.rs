//! The initiator against the test double in `common/fake_target.rs`: every data path
//! (in-capsule, R2T split by MAXH2CDATA, C2HData with and without SUCCESS, digests, MDTS
//! splitting) and the faults a bad peer can produce.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use blockdev::{BlockDevice, BlockError, IoBuf, WriteFlags};
use common::fake_target::{FakeConfig, FakeTarget, Fault};
use common::{HOSTNQN, host, pattern};
use nvme_proto::Status;
use nvme_proto::log::DiscoveryLogEntry;
use nvme_proto::log::discovery::{adrfam, subtype, trtype};
use nvme_proto::tcp::Digests;
use nvmf_host::namespace::host_error;
use nvmf_host::{ConnectOptions, Controller, HostError, RemoteNamespace, TransportError};

const LIMIT: Duration = Duration::from_secs(20);

fn opts(digests: u8) -> ConnectOptions {
    ConnectOptions {
        io_queues: 2,
        queue_size: 16,
        digests: Digests::from_bits(digests),
        kato_ms: 0,
        io_timeout_ms: 5_000,
        admin_timeout_ms: 5_000,
        connect_timeout_ms: 5_000,
        ..ConnectOptions::default()
    }
}

async fn connect(t: &FakeTarget, o: &ConnectOptions) -> Result<Controller, HostError> {
    Controller::connect(t.addr, &t.state.cfg.subnqn, &host(), o).await
}

async fn open(t: &FakeTarget, digests: u8) -> (Controller, RemoteNamespace) {
    let c = connect(t, &opts(digests)).await.unwrap();
    let ns = RemoteNamespace::open(&c, 1).await.unwrap();
    (c, ns)
}

/// Writes and reads back a pattern at several sizes around the in-capsule limit, the
/// MAXH2CDATA and C2H chunk sizes and MDTS.
async fn verify_sizes(ns: &RemoteNamespace, seed: u64) {
    for (i, len) in [512usize, 4096, 8192, 8704, 65536, 96 * 1024, 1 << 20]
        .into_iter()
        .enumerate()
    {
        let off = (i as u64) * (2 << 20);
        let data = pattern(len, seed + i as u64);
        let back = ns
            .write(
                off,
                IoBuf::from_slice(&data),
                WriteFlags { fua: i % 2 == 0 },
            )
            .await
            .unwrap();
        assert_eq!(back.len(), len);
        let got = ns.read(off, IoBuf::new_zeroed(len)).await.unwrap();
        assert!(got[..] == data[..], "mismatch at size {len}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_identify_and_verify_without_digests() {
    tokio::time::timeout(LIMIT, async {
        let t = FakeTarget::start(FakeConfig::default()).await;
        let (c, ns) = open(&t, 0).await;
        assert_eq!(c.cntlid(), 1);
        assert_eq!(c.io_queues().len(), 2);
        assert_eq!(c.id().mn, "ferrobay fake target");
        // MDTS 5 with 4 KiB pages.
        assert_eq!(c.max_transfer_bytes(), 128 * 1024);
        assert_eq!(ns.info().max_io_bytes, 128 * 1024);
        assert_eq!(ns.info().size_bytes, 64 << 20);
        assert_eq!(ns.info().logical_block_bytes, 512);
        assert_eq!(c.active_namespaces().await.unwrap(), vec![1]);
        verify_sizes(&ns, 1).await;
        // In-capsule writes (≤ 8 KiB) and R2T writes split at MAXH2CDATA (32 KiB) both ran.
        assert!(
            t.state
                .in_capsule_writes
                .load(std::sync::atomic::Ordering::Relaxed)
                >= 3
        );
        assert_eq!(
            t.state
                .max_h2c_bytes
                .load(std::sync::atomic::Ordering::Relaxed),
            32 * 1024
        );
        c.shutdown().await.unwrap();
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_with_header_and_data_digests() {
    tokio::time::timeout(LIMIT, async {
        for bits in [1u8, 2, 3] {
            let t = FakeTarget::start(FakeConfig::default()).await;
            let (c, ns) = open(&t, bits).await;
            assert_eq!(c.admin().negotiated().digests.bits(), bits);
            verify_sizes(&ns, u64::from(bits) * 100).await;
            c.disconnect().await;
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_completed_by_capsule_resp_and_small_r2ts() {
    tokio::time::timeout(LIMIT, async {
        let cfg = FakeConfig {
            c2h_success: false,
            c2h_chunk: 1000 * 4,
            r2t_chunk: 12 * 1024,
            maxh2cdata: 4096,
            ioccsz: 4,
            ..FakeConfig::default()
        };
        let t = FakeTarget::start(cfg).await;
        let (_c, ns) = open(&t, 3).await;
        verify_sizes(&ns, 7).await;
        // IOCCSZ 4: nothing went in-capsule on I/O queues (Connect did on admin).
        assert_eq!(
            t.state
                .max_h2c_bytes
                .load(std::sync::atomic::Ordering::Relaxed),
            4096
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_ios_over_all_queues() {
    tokio::time::timeout(LIMIT, async {
        let t = FakeTarget::start(FakeConfig::default()).await;
        let (_c, ns) = open(&t, 0).await;
        let ns = std::sync::Arc::new(ns);
        let mut set = tokio::task::JoinSet::new();
        for i in 0..64u64 {
            let ns = ns.clone();
            set.spawn(async move {
                let len = 4096 * (1 + (i as usize % 5));
                let off = i * 65536;
                let data = pattern(len, i);
                ns.write(off, IoBuf::from_slice(&data), WriteFlags::default())
                    .await
                    .unwrap();
                let got = ns.read(off, IoBuf::new_zeroed(len)).await.unwrap();
                assert!(got[..] == data[..]);
            });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap();
        }
        let s = ns.stats();
        assert_eq!((s.read_ops, s.write_ops), (64, 64));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_above_mdts_is_split_into_commands_in_flight_together() {
    tokio::time::timeout(LIMIT, async {
        let t = FakeTarget::start(FakeConfig {
            io_queues_max: 1,
            // Sequential splitting would send the second part only after the first R2T.
            r2t_delay_ms: 50,
            ..FakeConfig::default()
        })
        .await;
        let (_c, ns) = open(&t, 0).await;
        assert_eq!(ns.info().max_io_bytes, 128 * 1024);
        // 1 MiB + 4 KiB: nine commands, the last one short.
        let len = (1 << 20) + 4096;
        let d = pattern(len, 12);
        let back = ns
            .write(8192, IoBuf::from_slice(&d), WriteFlags::default())
            .await
            .unwrap();
        assert!(back[..] == d[..], "the caller's buffer comes back intact");
        let pending = t
            .state
            .max_pending_writes
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            pending >= 2,
            "the split commands were sent together: {pending}"
        );
        let got = ns.read(8192, IoBuf::new_zeroed(len)).await.unwrap();
        assert!(got[..] == d[..]);
        // A split I/O past the end fails before anything is sent.
        let e = ns
            .read((64 << 20) - len as u64 + 4096, IoBuf::new_zeroed(len))
            .await
            .unwrap_err();
        assert!(matches!(e, BlockError::OutOfRange { .. }), "{e:?}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zeroes_discard_flush_compare() {
    tokio::time::timeout(LIMIT, async {
        let t = FakeTarget::start(FakeConfig::default()).await;
        let (_c, ns) = open(&t, 0).await;
        let data = pattern(1 << 20, 3);
        ns.write(0, IoBuf::from_slice(&data), WriteFlags::default())
            .await
            .unwrap();
        ns.write_zeroes(4096, 8192).await.unwrap();
        ns.discard(65536, 65536).await.unwrap();
        ns.flush().await.unwrap();
        let got = ns.read(0, IoBuf::new_zeroed(1 << 20)).await.unwrap();
        let mut want = data.clone();
        want[4096..12288].fill(0);
        want[65536..131072].fill(0);
        assert!(got[..] == want[..]);
        // Compare: equal, then different.
        ns.compare_at(0, IoBuf::from_slice(&want[..4096]))
            .await
            .unwrap();
        let e = ns
            .compare_at(0, IoBuf::from_slice(&[0xAA; 4096]))
            .await
            .unwrap_err();
        assert_eq!(e.nvme_status(), Some(Status::COMPARE_FAILURE));
        assert!(
            e.to_string().contains("Compare failed: compare failure"),
            "{e}"
        );
        // Out of range: BlockError from the range check, before the wire.
        let e = ns.read(64 << 20, IoBuf::new_zeroed(512)).await.unwrap_err();
        assert!(matches!(e, BlockError::OutOfRange { .. }));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_rejected_names_the_status() {
    tokio::time::timeout(LIMIT, async {
        let t = FakeTarget::start(FakeConfig {
            allowed_host: Some(
                "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000000".into(),
            ),
            ..FakeConfig::default()
        })
        .await;
        let e = connect(&t, &opts(0)).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "Connect rejected: invalid host (SCT 1 SC 0x84)"
        );
        assert_eq!(e.nvme_status().map(|s| s.sc), Some(0x84));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn icresp_digest_mismatch_is_named() {
    tokio::time::timeout(LIMIT, async {
        let t = FakeTarget::start(FakeConfig {
            icresp_digests: Some(1),
            ..FakeConfig::default()
        })
        .await;
        let e = connect(&t, &opts(3)).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "connect to {}: ICResp digest bits 0x1 do not mirror the ICReq 0x3",
                t.addr
            )
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_refused_is_named() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    let e = Controller::connect(addr, "nqn.2026-01.io.ferrobay.test:x", &host(), &opts(0))
        .await
        .unwrap_err();
    let s = e.to_string();
    assert!(
        s.starts_with(&format!("connect to {addr}: TCP connect:")),
        "{s}"
    );
}

fn entry(n: u16) -> DiscoveryLogEntry {
    DiscoveryLogEntry {
        trtype: trtype::TCP,
        adrfam: adrfam::IPV4,
        subtype: subtype::NVME,
        treq: 0,
        portid: n,
        cntlid: 0xFFFF,
        asqsz: 32,
        eflags: 0,
        trsvcid: format!("{}", 4420 + n),
        subnqn: format!("nqn.2026-01.io.ferrobay.test:sub{n}"),
        traddr: "127.0.0.1".into(),
        sectype: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_reads_in_pieces_and_retries_on_genctr_change() {
    tokio::time::timeout(LIMIT, async {
        let entries: Vec<_> = (0..9).map(entry).collect();
        let t = FakeTarget::start(FakeConfig {
            subnqn: nvme_proto::fabrics::DISCOVERY_NQN.into(),
            discovery: entries.clone(),
            genctr_bumps: 2,
            ..FakeConfig::default()
        })
        .await;
        let r = nvmf_host::discovery::discover_with(
            t.addr,
            &host(),
            &nvmf_host::discovery::discovery_options(),
        )
        .await
        .unwrap();
        assert_eq!(r.entries, entries);
        assert_eq!(r.genctr, 3);
        let reads = t.state.log_reads.lock().unwrap().clone();
        // Header (20 bytes at 0), 9 KiB of entries in 4 KiB pieces from 1024, header again;
        // twice more because GENCTR moved twice.
        let one_pass = [
            (0x70u8, 1024u64, 4096u64),
            (0x70, 5120, 4096),
            (0x70, 9216, 1024),
            (0x70, 0, 20),
        ];
        let mut want = vec![(0x70u8, 0u64, 20u64)];
        for _ in 0..3 {
            want.extend_from_slice(&one_pass);
        }
        assert_eq!(reads, want);
        let text = nvmf_host::format_discovery_log(r.genctr, &r.entries);
        assert!(text.contains("=====Discovery Log Entry 8======\ntrtype:  tcp\n"));
        assert!(text.contains("subnqn:  nqn.2026-01.io.ferrobay.test:sub8\n"));
        assert!(text.starts_with("\nDiscovery Log Number of Records 9, Generation counter 3\n"));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_page_partial_reads() {
    tokio::time::timeout(LIMIT, async {
        let entries: Vec<_> = (0..3).map(entry).collect();
        let t = FakeTarget::start(FakeConfig {
            subnqn: nvme_proto::fabrics::DISCOVERY_NQN.into(),
            discovery: entries.clone(),
            ..FakeConfig::default()
        })
        .await;
        let c = Controller::connect(
            t.addr,
            nvme_proto::fabrics::DISCOVERY_NQN,
            &host(),
            &nvmf_host::discovery::discovery_options(),
        )
        .await
        .unwrap();
        assert!(c.is_discovery());
        assert!(c.io_queues().is_empty());
        let whole = c.get_log_page(0x70, 0, 0, 4096).await.unwrap();
        let part = c.get_log_page(0x70, 0, 2048 + 256, 512).await.unwrap();
        assert_eq!(&part[..], &whole[2048 + 256..2048 + 768]);
        let mut want = entries[1].subnqn.as_bytes().to_vec();
        want.resize(256, 0);
        assert_eq!(&part[..256], &want[..]);
        let e = c.get_log_page(0x70, 0, 2, 8).await.unwrap_err();
        assert!(matches!(e, HostError::Usage(_)), "{e}");
        let e = c.get_log_page(0x02, 0, 0, 512).await.unwrap_err();
        assert_eq!(e.nvme_status().map(|s| (s.sct, s.sc)), Some((1, 0x09)));
        assert!(
            e.to_string()
                .starts_with("Get Log Page failed: invalid log page"),
            "{e}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_runs_at_half_kato() {
    tokio::time::timeout(LIMIT, async {
        let t = FakeTarget::start(FakeConfig::default()).await;
        let o = ConnectOptions {
            kato_ms: 200,
            ..opts(0)
        };
        let c = connect(&t, &o).await.unwrap();
        tokio::time::sleep(Duration::from_millis(750)).await;
        let n = t
            .state
            .keepalives
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            (4..=10).contains(&n),
            "{n} keep-alives in 750 ms at KATO 200 ms"
        );
        c.disconnect().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let after = t
            .state
            .keepalives
            .load(std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            t.state
                .keepalives
                .load(std::sync::atomic::Ordering::Relaxed),
            after
        );
    })
    .await
    .unwrap();
}

/// Options for the bad-peer tests: quick reconnects, a short controller-loss timeout.
fn robust(digests: u8) -> ConnectOptions {
    ConnectOptions {
        io_timeout_ms: 5_000,
        admin_timeout_ms: 2_000,
        reconnect_delay_ms: 20,
        reconnect_delay_max_ms: 200,
        ctrl_loss_tmo_ms: Some(5_000),
        ..opts(digests)
    }
}

struct Faulty {
    t: FakeTarget,
    c: Controller,
    ns: RemoteNamespace,
    data: Vec<u8>,
}

/// Starts the fake (one I/O queue) with `fault` firing `times` times, connects with `o`
/// and writes 8 KiB of pattern at 0 (reads trigger most faults).
async fn faulty(fault: Fault, times: u32, o: &ConnectOptions) -> Faulty {
    let t = FakeTarget::start(FakeConfig {
        fault,
        fault_times: times,
        io_queues_max: 1,
        ..FakeConfig::default()
    })
    .await;
    let c = connect(&t, o).await.unwrap();
    let ns = RemoteNamespace::open(&c, 1).await.unwrap();
    let data = pattern(8192, 77);
    if fault != Fault::R2tPastEnd {
        ns.write(0, IoBuf::from_slice(&data), WriteFlags::default())
            .await
            .unwrap();
    }
    Faulty { t, c, ns, data }
}

fn admin_connects(t: &FakeTarget) -> u64 {
    t.state
        .admin_connects
        .load(std::sync::atomic::Ordering::Relaxed)
}

fn io_reads(t: &FakeTarget) -> u64 {
    t.state.io_reads.load(std::sync::atomic::Ordering::Relaxed)
}

/// A fault that ends the connection once: the read is sent again on a new connection
/// and succeeds; the status names what happened.
async fn survives_one_fatal_fault(fault: Fault, digests: u8, reason: &str) {
    let f = faulty(fault, 1, &robust(digests)).await;
    let got = f.ns.read(0, IoBuf::new_zeroed(8192)).await.unwrap();
    assert!(got[..] == f.data[..], "data after the reconnect");
    let st = f.c.status();
    assert!(st.is_live(), "{st:?}");
    assert_eq!(st.generation, 2, "one reconnect: {st:?}");
    let last = st.last_error.unwrap_or_default();
    assert!(
        last.contains(reason),
        "last error {last:?} should say {reason:?}"
    );
    assert_eq!(admin_connects(&f.t), 2);
    assert_eq!(io_reads(&f.t), 2, "the read went out twice");
    // The new connection serves further I/O.
    let d = pattern(4096, 5);
    f.ns.write(65536, IoBuf::from_slice(&d), WriteFlags::default())
        .await
        .unwrap();
    assert!(f.ns.read(65536, IoBuf::new_zeroed(4096)).await.unwrap()[..] == d[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_closing_mid_pdu_reconnects_and_retries() {
    tokio::time::timeout(LIMIT, async {
        survives_one_fatal_fault(
            Fault::CloseMidPdu,
            0,
            "target closed the connection in the middle of a PDU (type 0x07)",
        )
        .await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_header_digest_reconnects_and_retries() {
    tokio::time::timeout(LIMIT, async {
        survives_one_fatal_fault(Fault::BadHeaderDigest, 1, "header digest").await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn termination_request_reconnects_and_retries() {
    tokio::time::timeout(LIMIT, async {
        survives_one_fatal_fault(
            Fault::TermReq,
            0,
            "target terminated the connection: invalid PDU header field",
        )
        .await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_for_unknown_cid_reconnects_and_retries() {
    tokio::time::timeout(LIMIT, async {
        survives_one_fatal_fault(Fault::UnknownCid, 0, "which is not outstanding").await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_from_the_target_reconnects_and_retries() {
    tokio::time::timeout(LIMIT, async {
        survives_one_fatal_fault(Fault::GarbageOnRead, 0, "bad PDU from target").await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_stalling_mid_pdu_times_out_resets_and_retries() {
    tokio::time::timeout(LIMIT, async {
        let o = ConnectOptions {
            io_timeout_ms: 300,
            ..robust(0)
        };
        let f = faulty(Fault::StallMidPdu, 1, &o).await;
        let got = f.ns.read(0, IoBuf::new_zeroed(8192)).await.unwrap();
        assert!(got[..] == f.data[..]);
        let st = f.c.status();
        assert_eq!(st.generation, 2, "{st:?}");
        let last = st.last_error.unwrap_or_default();
        assert!(last.contains("Read (CID"), "{last}");
        assert!(last.contains("timed out after 300 ms"), "{last}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2t_past_the_end_reconnects_and_retries_the_write() {
    tokio::time::timeout(LIMIT, async {
        let f = faulty(Fault::R2tPastEnd, 1, &robust(0)).await;
        let d = pattern(65536, 3);
        f.ns.write(0, IoBuf::from_slice(&d), WriteFlags::default())
            .await
            .unwrap();
        assert!(f.ns.read(0, IoBuf::new_zeroed(65536)).await.unwrap()[..] == d[..]);
        let st = f.c.status();
        assert_eq!(st.generation, 2);
        let last = st.last_error.unwrap_or_default();
        assert!(last.contains("R2T for CID"), "{last}");
        assert!(
            last.contains("beyond") || last.contains("asks for bytes up to"),
            "{last}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_data_digest_is_retried_on_the_same_connection() {
    tokio::time::timeout(LIMIT, async {
        let f = faulty(Fault::BadDataDigest, 1, &robust(3)).await;
        let got = f.ns.read(0, IoBuf::new_zeroed(8192)).await.unwrap();
        assert!(got[..] == f.data[..]);
        assert_eq!(io_reads(&f.t), 2);
        assert_eq!(f.c.status().generation, 1, "no reconnect for a data digest");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_bad_data_digest_fails_with_a_clear_error() {
    tokio::time::timeout(LIMIT, async {
        let f = faulty(Fault::BadDataDigest, u32::MAX, &robust(3)).await;
        let e = f.ns.read(0, IoBuf::new_zeroed(8192)).await.unwrap_err();
        assert!(
            matches!(host_error(&e), Some(HostError::DataDigest { .. })),
            "{e}"
        );
        assert!(e.to_string().contains("data digest mismatch"), "{e}");
        // The first try and MAX_RETRIES re-sends.
        assert_eq!(io_reads(&f.t), 1 + u64::from(nvmf_host::queue::MAX_RETRIES));
        assert!(f.c.status().is_live());
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_always_breaks_the_connection_fails_the_io_clearly() {
    tokio::time::timeout(LIMIT, async {
        let f = faulty(Fault::CloseMidPdu, u32::MAX, &robust(0)).await;
        let e = f.ns.read(0, IoBuf::new_zeroed(8192)).await.unwrap_err();
        let r = transport_reason(&e);
        assert_eq!(r, TransportError::ClosedMidPdu { pdu_type: 0x07 }, "{e}");
        assert_eq!(io_reads(&f.t), 1 + u64::from(nvmf_host::queue::MAX_RETRIES));
        // The controller itself is fine: it reconnected each time.
        assert!(f.c.wait_live().await);
        f.ns.write(0, IoBuf::from_slice(&f.data), WriteFlags::default())
            .await
            .unwrap();
    })
    .await
    .unwrap();
}

fn transport_reason(e: &BlockError) -> TransportError {
    match host_error(e) {
        Some(HostError::Transport { reason, .. }) => reason.clone(),
        other => panic!("expected a transport error, got {other:?} from {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_completes_a_stuck_read_without_a_reset() {
    tokio::time::timeout(LIMIT, async {
        let o = ConnectOptions {
            io_timeout_ms: 300,
            ..robust(0)
        };
        let f = faulty(Fault::IgnoreReadsUntilAbort, 1, &o).await;
        let start = std::time::Instant::now();
        let got = f.ns.read(0, IoBuf::new_zeroed(8192)).await.unwrap();
        assert!(got[..] == f.data[..]);
        assert!(start.elapsed() >= Duration::from_millis(250));
        assert_eq!(
            f.t.state.aborts.load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        assert_eq!(io_reads(&f.t), 2, "sent again after the abort");
        assert_eq!(f.c.status().generation, 1, "no reset needed");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_target_aborts_resets_and_finally_times_out() {
    tokio::time::timeout(LIMIT, async {
        let o = ConnectOptions {
            io_timeout_ms: 300,
            ..robust(0)
        };
        let f = faulty(Fault::IgnoreReads, u32::MAX, &o).await;
        let start = std::time::Instant::now();
        let e = f.ns.read(0, IoBuf::new_zeroed(8192)).await.unwrap_err();
        assert!(matches!(e, BlockError::Timeout), "{e:?}");
        assert!(start.elapsed() < Duration::from_secs(10));
        assert!(f.t.state.aborts.load(std::sync::atomic::Ordering::Relaxed) >= 1);
        // Each of the 1 + MAX_RETRIES timeouts: Abort (refused by this target), reset and
        // reconnect; the read fails at the last reset.
        assert!(f.c.wait_live().await);
        let st = f.c.status();
        assert_eq!(
            st.generation,
            2 + u64::from(nvmf_host::queue::MAX_RETRIES),
            "{st:?}"
        );
        let last = st.last_error.unwrap_or_default();
        assert!(
            last.contains("timed out after 300 ms; Abort did not abort it"),
            "{last}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_failure_resets_and_waiting_io_completes_after_the_stall() {
    use std::sync::atomic::Ordering;
    tokio::time::timeout(LIMIT, async {
        let o = ConnectOptions {
            kato_ms: 400,
            admin_timeout_ms: 500,
            ..robust(0)
        };
        let f = faulty(Fault::None, 0, &o).await;
        let mut watch = f.c.watch();
        f.t.state.stalled.store(true, Ordering::Relaxed);
        let ns = std::sync::Arc::new(f.ns);
        let reader = {
            let ns = ns.clone();
            tokio::spawn(async move { ns.read(0, IoBuf::new_zeroed(8192)).await })
        };
        watch
            .wait_for(|s| !s.is_live())
            .await
            .expect("controller leaves live");
        let why = f.c.status().last_error.unwrap_or_default();
        assert!(why.contains("Keep Alive"), "{why}");
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(!reader.is_finished(), "the read waits for the reconnect");
        f.t.state.stalled.store(false, Ordering::Relaxed);
        let got = reader.await.unwrap().unwrap();
        assert!(got[..] == f.data[..]);
        let st = f.c.status();
        assert!(st.is_live());
        assert!(st.generation >= 2, "{st:?}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_restart_within_the_loss_timeout_keeps_io_going() {
    tokio::time::timeout(LIMIT, async {
        let f = faulty(Fault::None, 0, &robust(0)).await;
        let addr = f.t.addr;
        let mut w = f.c.watch();
        drop(f.t);
        w.wait_for(|s| !s.is_live()).await.unwrap();
        let ns = std::sync::Arc::new(f.ns);
        let d = pattern(16384, 8);
        let writer = {
            let ns = ns.clone();
            let d = d.clone();
            tokio::spawn(async move {
                ns.write(4096, IoBuf::from_slice(&d), WriteFlags::default())
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!writer.is_finished(), "the write waits for the target");
        assert!(!f.c.status().is_live());
        let t2 = FakeTarget::start_at(
            addr,
            FakeConfig {
                io_queues_max: 1,
                ..FakeConfig::default()
            },
        )
        .await;
        writer.await.unwrap().unwrap();
        assert!(ns.read(4096, IoBuf::new_zeroed(16384)).await.unwrap()[..] == d[..]);
        assert!(f.c.status().is_live());
        assert_eq!(admin_connects(&t2), 1);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_loss_timeout_fails_waiting_io_with_a_clear_error() {
    tokio::time::timeout(LIMIT, async {
        let o = ConnectOptions {
            ctrl_loss_tmo_ms: Some(800),
            ..robust(0)
        };
        let f = faulty(Fault::None, 0, &o).await;
        let mut w = f.c.watch();
        drop(f.t);
        // The target's connections close asynchronously: start once the host saw it.
        w.wait_for(|s| !s.is_live()).await.unwrap();
        let start = std::time::Instant::now();
        let e = f.ns.read(0, IoBuf::new_zeroed(4096)).await.unwrap_err();
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(700) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        let he = host_error(&e).expect("host error");
        assert!(matches!(he, HostError::ControllerLost { .. }), "{he}");
        let text = e.to_string();
        assert!(text.contains("lost: no reconnect within 800 ms"), "{text}");
        assert!(text.contains("last error: connect to"), "{text}");
        assert!(matches!(
            f.c.status().state,
            nvmf_host::ControllerState::Lost { .. }
        ));
        // Later I/O fails at once with the same error.
        let start = std::time::Instant::now();
        let e2 = f.ns.read(0, IoBuf::new_zeroed(4096)).await.unwrap_err();
        assert!(start.elapsed() < Duration::from_millis(100));
        assert!(matches!(
            host_error(&e2),
            Some(HostError::ControllerLost { .. })
        ));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_loss_timeout_means_no_reconnect() {
    tokio::time::timeout(LIMIT, async {
        let o = ConnectOptions {
            ctrl_loss_tmo_ms: Some(0),
            ..robust(0)
        };
        let f = faulty(Fault::None, 0, &o).await;
        let mut w = f.c.watch();
        drop(f.t);
        w.wait_for(|s| !s.is_live()).await.unwrap();
        let e = f.ns.read(0, IoBuf::new_zeroed(4096)).await.unwrap_err();
        assert!(
            matches!(
                host_error(&e),
                Some(HostError::ControllerLost { attempts: 0, .. })
            ),
            "{e}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_after_icresp_is_a_clear_error() {
    tokio::time::timeout(LIMIT, async {
        let t = FakeTarget::start(FakeConfig {
            fault: Fault::GarbageAfterIcResp,
            ..FakeConfig::default()
        })
        .await;
        let e = connect(&t, &opts(0)).await.unwrap_err();
        let HostError::Transport { reason, qid: 0, .. } = &e else {
            panic!("expected a transport error, got {e}");
        };
        assert!(
            matches!(reason, TransportError::BadPdu { .. }),
            "{reason:?}"
        );
        assert!(e.to_string().starts_with("queue 0 to 127.0.0.1:"), "{e}");
    })
    .await
    .unwrap();
}

#[test]
fn hostnqn_constant_is_valid() {
    nvme_proto::fabrics::validate_nqn(HOSTNQN).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservation_wrappers_round_trip() {
    use nvme_proto::reservation::{ReservationType, cptpl, racqa, rrega, rrela};
    tokio::time::timeout(LIMIT, async {
        let t = FakeTarget::start(FakeConfig::default()).await;
        let (_c, ns) = open(&t, 0).await;
        ns.reservation_register(rrega::REGISTER, 0, 0xABCD, false, cptpl::NO_CHANGE)
            .await
            .unwrap();
        let wx = ReservationType::WriteExclusive;
        ns.reservation_acquire(racqa::ACQUIRE, wx, 0xABCD, 0, false)
            .await
            .unwrap();
        let r = ns.reservation_report().await.unwrap();
        assert_eq!(r.rtype, wx.as_u8());
        assert_eq!(r.registrants.len(), 1);
        assert_eq!(r.registrants[0].rkey, 0xABCD);
        assert_eq!(r.registrants[0].hostid, host().hostid);
        assert_eq!(r.registrants[0].rcsts, 1);
        // A wrong current key is a reservation conflict, visible as the NVMe status.
        let e = ns
            .reservation_register(rrega::REPLACE, 0x1111, 0x2222, false, cptpl::NO_CHANGE)
            .await
            .unwrap_err();
        assert_eq!(e.nvme_status().map(|s| (s.sct, s.sc)), Some((0, 0x83)));
        assert!(
            e.to_string()
                .contains("Reservation Register failed: reservation conflict"),
            "{e}"
        );
        ns.reservation_release(rrela::RELEASE, wx, 0xABCD, false)
            .await
            .unwrap();
        ns.reservation_register(rrega::UNREGISTER, 0xABCD, 0, false, cptpl::NO_CHANGE)
            .await
            .unwrap();
        let r = ns.reservation_report().await.unwrap();
        assert_eq!((r.rtype, r.registrants.len()), (0, 0));
        assert_eq!(r.generation, 2);
    })
    .await
    .unwrap();
}
