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

/// Opens the fake with `fault` and does one 8 KiB read; returns its error.
async fn read_with_fault(
    fault: Fault,
    digests: u8,
    timeout_ms: u64,
) -> (FakeTarget, Controller, RemoteNamespace, BlockError) {
    let t = FakeTarget::start(FakeConfig {
        fault,
        io_queues_max: 1,
        ..FakeConfig::default()
    })
    .await;
    let o = ConnectOptions {
        io_timeout_ms: timeout_ms,
        ..opts(digests)
    };
    let c = connect(&t, &o).await.unwrap();
    let ns = RemoteNamespace::open(&c, 1).await.unwrap();
    let e = ns.read(0, IoBuf::new_zeroed(8192)).await.unwrap_err();
    (t, c, ns, e)
}

fn transport_reason(e: &BlockError) -> TransportError {
    match host_error(e) {
        Some(HostError::Transport { reason, .. }) => reason.clone(),
        other => panic!("expected a transport error, got {other:?} from {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_closing_mid_pdu_is_a_clear_error() {
    tokio::time::timeout(LIMIT, async {
        let (_t, c, ns, e) = read_with_fault(Fault::CloseMidPdu, 0, 5000).await;
        assert_eq!(
            transport_reason(&e),
            TransportError::ClosedMidPdu { pdu_type: 0x07 }
        );
        assert!(e.to_string().contains("in the middle of a PDU"), "{e}");
        // The queue stays failed; later I/O fails at once with the same reason.
        let e2 = ns.read(0, IoBuf::new_zeroed(512)).await.unwrap_err();
        assert_eq!(
            transport_reason(&e2),
            TransportError::ClosedMidPdu { pdu_type: 0x07 }
        );
        assert!(c.io_queues()[0].error().is_some());
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_header_digest_is_fatal_and_named() {
    tokio::time::timeout(LIMIT, async {
        let (_t, _c, _ns, e) = read_with_fault(Fault::BadHeaderDigest, 1, 5000).await;
        let r = transport_reason(&e);
        assert!(matches!(r, TransportError::BadPdu { fes: 3, .. }), "{r:?}");
        assert!(e.to_string().contains("header digest"), "{e}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_data_digest_fails_only_the_command() {
    tokio::time::timeout(LIMIT, async {
        let (_t, _c, ns, e) = read_with_fault(Fault::BadDataDigest, 3, 5000).await;
        assert!(
            matches!(host_error(&e), Some(HostError::DataDigest { .. })),
            "{e}"
        );
        assert!(e.to_string().contains("data digest mismatch"), "{e}");
        // The connection is still good.
        let d = pattern(4096, 9);
        ns.write(0, IoBuf::from_slice(&d), WriteFlags::default())
            .await
            .unwrap();
        assert!(ns.read(0, IoBuf::new_zeroed(4096)).await.unwrap()[..] == d[..]);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn termination_request_from_target_is_named() {
    tokio::time::timeout(LIMIT, async {
        let (_t, _c, _ns, e) = read_with_fault(Fault::TermReq, 0, 5000).await;
        assert_eq!(
            transport_reason(&e),
            TransportError::TargetTerminated { fes: 1, fei: 0 }
        );
        assert!(
            e.to_string()
                .contains("target terminated the connection: invalid PDU header field"),
            "{e}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_target_times_out() {
    tokio::time::timeout(LIMIT, async {
        let start = std::time::Instant::now();
        let (_t, _c, _ns, e) = read_with_fault(Fault::IgnoreReads, 0, 300).await;
        assert!(matches!(e, BlockError::Timeout), "{e:?}");
        assert!(start.elapsed() < Duration::from_secs(5));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_for_unknown_cid_is_fatal() {
    tokio::time::timeout(LIMIT, async {
        let (_t, _c, _ns, e) = read_with_fault(Fault::UnknownCid, 0, 5000).await;
        let r = transport_reason(&e);
        assert!(matches!(r, TransportError::BadPdu { .. }), "{r:?}");
        assert!(e.to_string().contains("not outstanding"), "{e}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2t_past_the_end_is_fatal() {
    tokio::time::timeout(LIMIT, async {
        let t = FakeTarget::start(FakeConfig {
            fault: Fault::R2tPastEnd,
            io_queues_max: 1,
            ..FakeConfig::default()
        })
        .await;
        let c = connect(&t, &opts(0)).await.unwrap();
        let ns = RemoteNamespace::open(&c, 1).await.unwrap();
        let e = ns
            .write(0, IoBuf::new_zeroed(65536), WriteFlags::default())
            .await
            .unwrap_err();
        let r = transport_reason(&e);
        assert!(matches!(r, TransportError::BadPdu { fes: 4, .. }), "{r:?}");
        assert!(e.to_string().contains("R2T for CID"), "{e}");
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
