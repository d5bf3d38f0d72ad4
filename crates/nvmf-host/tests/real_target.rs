//! The initiator against the real target (crates/nvmf-target) in-process on 127.0.0.1,
//! port 0, with RAM namespaces.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use blockdev::{BlockDevice, IoBuf, RamDevice, WriteFlags};
use common::{host, pattern};
use nvme_proto::fabrics::DISCOVERY_NQN;
use nvme_proto::log::discovery::subtype;
use nvme_proto::tcp::Digests;
use nvmf_host::discovery::{discover, discover_with, discovery_options};
use nvmf_host::{ConnectOptions, Controller, HostError, RemoteNamespace, format_discovery_log};
use nvmf_target::{ListenerHandle, NamespaceConfig, SubsystemConfig, Target, TargetConfig};

const LIMIT: Duration = Duration::from_secs(30);
const NQN: &str = "nqn.2026-01.io.ferrobay.test:host-real";

struct Setup {
    target: Target,
    listener: ListenerHandle,
}

async fn start(cfg: TargetConfig, namespaces: &[(u32, u64, u32)]) -> Setup {
    let target = Target::new(cfg).unwrap();
    target.add_subsystem(SubsystemConfig::new(NQN)).unwrap();
    for &(nsid, size, lb) in namespaces {
        let dev = Arc::new(RamDevice::with_block_size(format!("ram{nsid}"), size, lb));
        target
            .add_namespace(NQN, NamespaceConfig::whole_device(nsid, dev))
            .unwrap();
    }
    let listener = target.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    Setup { target, listener }
}

fn opts(digests: u8) -> ConnectOptions {
    ConnectOptions {
        io_queues: 2,
        queue_size: 32,
        digests: Digests::from_bits(digests),
        kato_ms: 5000,
        io_timeout_ms: 10_000,
        admin_timeout_ms: 10_000,
        connect_timeout_ms: 5_000,
        ..ConnectOptions::default()
    }
}

async fn verify(ns: &RemoteNamespace, seed: u64) {
    let lb = ns.info().logical_block_bytes as usize;
    for (i, len) in [
        lb,
        4096,
        8192,
        16 << 10,
        (16 << 10) + lb,
        128 << 10,
        1 << 20,
        3 << 20,
    ]
    .into_iter()
    .enumerate()
    {
        let off = (i as u64) * (4 << 20);
        let data = pattern(len, seed + i as u64);
        ns.write(
            off,
            IoBuf::from_slice(&data),
            WriteFlags { fua: i % 3 == 0 },
        )
        .await
        .unwrap();
        let got = ns.read(off, IoBuf::new_zeroed(len)).await.unwrap();
        assert!(got[..] == data[..], "mismatch at size {len}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_identify_verify_all_digest_modes() {
    tokio::time::timeout(LIMIT, async {
        let s = start(
            TargetConfig::default(),
            &[(1, 64 << 20, 512), (2, 32 << 20, 4096)],
        )
        .await;
        for bits in 0..4u8 {
            let c = Controller::connect(s.listener.local_addr(), NQN, &host(), &opts(bits))
                .await
                .unwrap();
            assert_eq!(c.io_queues().len(), 2);
            assert_eq!(c.admin().negotiated().digests.bits(), bits);
            assert_eq!(c.id().subnqn, NQN);
            assert_eq!(c.id().cntlid, c.cntlid());
            assert_eq!(c.max_transfer_bytes(), TargetConfig::default().mdts_bytes);
            assert_eq!(c.active_namespaces().await.unwrap(), vec![1, 2]);
            let ns1 = RemoteNamespace::open(&c, 1).await.unwrap();
            let ns2 = RemoteNamespace::open(&c, 2).await.unwrap();
            assert_eq!(ns1.info().size_bytes, 64 << 20);
            assert_eq!(ns2.info().logical_block_bytes, 4096);
            verify(&ns1, u64::from(bits) * 10).await;
            verify(&ns2, u64::from(bits) * 10 + 5).await;
            c.shutdown().await.unwrap();
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_target_limits_force_r2t_and_splits() {
    tokio::time::timeout(LIMIT, async {
        let cfg = TargetConfig {
            mdts_bytes: 64 << 10,
            in_capsule_bytes: 8192,
            maxh2cdata_bytes: 4096,
            c2h_chunk_bytes: 4096,
            ..TargetConfig::default()
        };
        let s = start(cfg, &[(1, 64 << 20, 512)]).await;
        let c = Controller::connect(s.listener.local_addr(), NQN, &host(), &opts(3))
            .await
            .unwrap();
        assert_eq!(c.admin().negotiated().maxh2cdata_bytes, 4096);
        let ns = RemoteNamespace::open(&c, 1).await.unwrap();
        assert_eq!(ns.info().max_io_bytes, 64 << 10);
        verify(&ns, 99).await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zeroes_discard_flush_compare_on_real_target() {
    tokio::time::timeout(LIMIT, async {
        let s = start(TargetConfig::default(), &[(1, 16 << 20, 512)]).await;
        let c = Controller::connect(s.listener.local_addr(), NQN, &host(), &opts(0))
            .await
            .unwrap();
        let ns = RemoteNamespace::open(&c, 1).await.unwrap();
        let data = pattern(1 << 20, 5);
        ns.write(0, IoBuf::from_slice(&data), WriteFlags::default())
            .await
            .unwrap();
        let mut want = data.clone();
        if ns.info().supports_write_zeroes {
            ns.write_zeroes(4096, 8192).await.unwrap();
            want[4096..12288].fill(0);
        }
        if ns.info().supports_discard {
            ns.discard(65536, 65536).await.unwrap();
            want[65536..131072].fill(0);
        }
        ns.flush().await.unwrap();
        let got = ns.read(0, IoBuf::new_zeroed(1 << 20)).await.unwrap();
        assert!(got[..] == want[..]);
        if c.id().oncs & nvme_proto::identify::controller::bits::ONCS_COMPARE != 0 {
            ns.compare_at(0, IoBuf::from_slice(&want[..4096]))
                .await
                .unwrap();
            let e = ns
                .compare_at(0, IoBuf::from_slice(&[0x55; 4096]))
                .await
                .unwrap_err();
            assert_eq!(
                e.nvme_status().map(|s| (s.sct, s.sc)),
                Some((2, 0x85)),
                "{e}"
            );
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_against_real_target() {
    tokio::time::timeout(LIMIT, async {
        let s = start(TargetConfig::default(), &[(1, 1 << 20, 512)]).await;
        let entries = discover(s.listener.local_addr(), &host()).await.unwrap();
        let nvm: Vec<_> = entries
            .iter()
            .filter(|e| e.subtype == subtype::NVME)
            .collect();
        assert_eq!(nvm.len(), 1, "{entries:?}");
        assert_eq!(nvm[0].subnqn, NQN);
        assert_eq!(nvm[0].trsvcid, s.listener.local_addr().port().to_string());
        assert_eq!(nvm[0].traddr, "127.0.0.1");
        let r = discover_with(s.listener.local_addr(), &host(), &discovery_options())
            .await
            .unwrap();
        assert_eq!(r.genctr, s.target.discovery_generation());
        let text = format_discovery_log(r.genctr, &r.entries);
        assert!(text.contains(&format!("subnqn:  {NQN}\n")), "{text}");
        assert!(text.contains("=====Discovery Log Entry 0======\ntrtype:  tcp\nadrfam:  ipv4\n"));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_log_partial_reads_on_real_target() {
    tokio::time::timeout(LIMIT, async {
        let s = start(TargetConfig::default(), &[]).await;
        let c = Controller::connect(
            s.listener.local_addr(),
            DISCOVERY_NQN,
            &host(),
            &discovery_options(),
        )
        .await
        .unwrap();
        assert!(c.is_discovery());
        let whole = c.get_log_page(0x70, 0, 0, 2048).await.unwrap();
        for (off, len) in [
            (0u64, 20usize),
            (8, 8),
            (1024, 1024),
            (1024 + 256, 256),
            (1536, 512),
        ] {
            let part = c.get_log_page(0x70, 0, off, len).await.unwrap();
            assert_eq!(
                &part[..],
                &whole[off as usize..off as usize + len],
                "window {off}+{len}"
            );
        }
        c.shutdown().await.unwrap();
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_subsystem_is_rejected_clearly() {
    tokio::time::timeout(LIMIT, async {
        let s = start(TargetConfig::default(), &[]).await;
        let e = Controller::connect(
            s.listener.local_addr(),
            "nqn.2026-01.io.ferrobay.test:nope",
            &host(),
            &opts(0),
        )
        .await
        .unwrap_err();
        assert!(matches!(e, HostError::ConnectRejected { .. }), "{e}");
        assert!(e.to_string().starts_with("Connect rejected: "), "{e}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_keeps_a_short_kato_controller_alive() {
    tokio::time::timeout(LIMIT, async {
        let s = start(TargetConfig::default(), &[(1, 1 << 20, 512)]).await;
        let o = ConnectOptions {
            kato_ms: 1000,
            ..opts(0)
        };
        let c = Controller::connect(s.listener.local_addr(), NQN, &host(), &o)
            .await
            .unwrap();
        let ns = RemoteNamespace::open(&c, 1).await.unwrap();
        // Idle for several KATOs: without keep-alive the target would drop the controller.
        tokio::time::sleep(Duration::from_millis(3500)).await;
        ns.write(0, IoBuf::from_slice(&[7u8; 512]), WriteFlags::default())
            .await
            .unwrap();
        assert_eq!(
            &ns.read(0, IoBuf::new_zeroed(512)).await.unwrap()[..],
            &[7u8; 512]
        );
        assert!(c.admin().error().is_none());
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_passthrough_and_features() {
    tokio::time::timeout(LIMIT, async {
        let s = start(TargetConfig::default(), &[(1, 1 << 20, 512)]).await;
        let c = Controller::connect(s.listener.local_addr(), NQN, &host(), &opts(0))
            .await
            .unwrap();
        // Get Features Number of Queues reports what Set Features granted.
        let cqe = c
            .get_features(0, nvme_proto::features::fid::NUMBER_OF_QUEUES, 0)
            .await
            .unwrap();
        let n = nvme_proto::features::NumberOfQueues::from_dw(cqe.dw0);
        assert!(n.sq_count() >= 2, "{n:?}");
        // Pass-through Identify Controller.
        let cmd = nvme_proto::identify::IdentifyCommand {
            cns: nvme_proto::identify::cns::CONTROLLER,
            ..Default::default()
        }
        .to_command(0);
        let done = c
            .submit_admin(cmd, nvmf_host::Payload::read(IoBuf::new_zeroed(4096)))
            .await
            .unwrap();
        assert!(done.cqe.status.is_success());
        let id = nvme_proto::identify::IdentifyController::decode(&done.buf.unwrap()).unwrap();
        assert_eq!(id.cntlid, c.cntlid());
        // An unsupported opcode comes back as a status, not a transport error.
        let done = c
            .submit_admin(
                nvme_proto::Command::new(0xC1, 0, 0),
                nvmf_host::Payload::None,
            )
            .await
            .unwrap();
        assert!(!done.cqe.status.is_success());
        assert!(c.admin().error().is_none());
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_by_url() {
    tokio::time::timeout(LIMIT, async {
        let s = start(TargetConfig::default(), &[(1, 4 << 20, 512)]).await;
        let url = format!("nvme+tcp://{}/{NQN}?digest=hd", s.listener.local_addr());
        let u = nvmf_host::NvmeTcpUrl::parse(&url).unwrap();
        let ns = u.open(&host(), &opts(0)).await.unwrap();
        assert_eq!(ns.nsid(), 1);
        assert!(ns.controller().admin().negotiated().digests.header);
        assert!(
            ns.info().name.ends_with(&format!("{NQN}/1")),
            "{}",
            ns.info().name
        );
        let d = pattern(8192, 1);
        ns.write(8192, IoBuf::from_slice(&d), WriteFlags::default())
            .await
            .unwrap();
        assert!(ns.read(8192, IoBuf::new_zeroed(8192)).await.unwrap()[..] == d[..]);
        let missing = nvmf_host::NvmeTcpUrl::parse(&url.replace("?digest=hd", "/9"))
            .unwrap()
            .open(&host(), &opts(0))
            .await
            .unwrap_err();
        assert!(missing.to_string().contains("namespace 9"), "{missing}");
    })
    .await
    .unwrap();
}

/// Throughput smoke test: 4 KiB random reads at QD 32 and 128 KiB sequential reads for a
/// second each. Prints numbers; run with `--ignored --nocapture` (in release for meaning).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn perf_smoke() {
    let s = start(TargetConfig::default(), &[(1, 256 << 20, 512)]).await;
    let o = ConnectOptions {
        io_queues: 2,
        queue_size: 128,
        ..opts(0)
    };
    let c = Controller::connect(s.listener.local_addr(), NQN, &host(), &o)
        .await
        .unwrap();
    let ns = Arc::new(RemoteNamespace::open(&c, 1).await.unwrap());
    for (label, bs, qd, random) in [
        ("4k randread qd1", 4096usize, 1usize, true),
        ("4k randread qd32", 4096, 32, true),
        ("4k randwrite qd32", 4096, 32, true),
        ("128k seqread qd8", 128 << 10, 8, false),
    ] {
        let write = label.contains("write");
        let stop = std::time::Instant::now() + Duration::from_secs(1);
        let mut set = tokio::task::JoinSet::new();
        for w in 0..qd {
            let ns = ns.clone();
            set.spawn(async move {
                let blocks = (256u64 << 20) / bs as u64;
                let mut x = 0x9E37_79B9u64 ^ w as u64;
                let mut n = 0u64;
                let mut buf = IoBuf::new_zeroed(bs);
                while std::time::Instant::now() < stop {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let blk = if random {
                        x % blocks
                    } else {
                        (w as u64 + n * qd as u64) % blocks
                    };
                    buf = if write {
                        ns.write(blk * bs as u64, buf, WriteFlags::default())
                            .await
                            .unwrap()
                    } else {
                        ns.read(blk * bs as u64, buf).await.unwrap()
                    };
                    n += 1;
                }
                n
            });
        }
        let mut total = 0u64;
        while let Some(r) = set.join_next().await {
            total += r.unwrap();
        }
        println!(
            "{label}: {total} IOPS, {:.1} MB/s",
            total as f64 * bs as f64 / 1e6
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_between_two_hosts() {
    use nvme_proto::reservation::{ReservationType, cptpl, racqa, rrega, rrela};
    tokio::time::timeout(LIMIT, async {
        let target = Target::new(TargetConfig::default()).unwrap();
        target.add_subsystem(SubsystemConfig::new(NQN)).unwrap();
        let dev = Arc::new(RamDevice::new("ram1", 4 << 20));
        let mut nc = NamespaceConfig::whole_device(1, dev);
        nc.reservations = Some(Arc::new(nvmf_target::ReservationState::default()));
        target.add_namespace(NQN, nc).unwrap();
        let l = target.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let a = nvmf_host::HostIdentity::from_uuid([0xA1; 16]);
        let b = nvmf_host::HostIdentity::from_uuid([0xB2; 16]);
        let ca = Controller::connect(l.local_addr(), NQN, &a, &opts(0))
            .await
            .unwrap();
        let cb = Controller::connect(l.local_addr(), NQN, &b, &opts(0))
            .await
            .unwrap();
        let na = ca.namespace(1).await.unwrap();
        let nb = cb.namespace(1).await.unwrap();
        let we = ReservationType::WriteExclusive;
        na.reservation_register(rrega::REGISTER, 0, 0xA, false, cptpl::NO_CHANGE)
            .await
            .unwrap();
        na.reservation_acquire(racqa::ACQUIRE, we, 0xA, 0, false)
            .await
            .unwrap();
        nb.reservation_register(rrega::REGISTER, 0, 0xB, false, cptpl::NO_CHANGE)
            .await
            .unwrap();
        let r = nb.reservation_report().await.unwrap();
        assert_eq!(r.rtype, we.as_u8());
        assert_eq!(r.registrants.len(), 2);
        let holder = r.registrants.iter().find(|x| x.rcsts & 1 != 0).unwrap();
        assert_eq!((holder.hostid, holder.rkey), ([0xA1; 16], 0xA));
        // B may read but not write: its write fails with a reservation conflict.
        nb.read(0, IoBuf::new_zeroed(512)).await.unwrap();
        let e = nb
            .write(0, IoBuf::new_zeroed(512), WriteFlags::default())
            .await
            .unwrap_err();
        assert!(
            matches!(e, blockdev::BlockError::ReservationConflict),
            "{e}"
        );
        let he = nb
            .write_at(0, IoBuf::new_zeroed(512), false)
            .await
            .unwrap_err();
        assert!(he.is_reservation_conflict(), "{he}");
        let st = he.nvme_status();
        assert_eq!(st.map(|s| (s.sct, s.sc)), Some((0, 0x83)), "{he}");
        na.write(0, IoBuf::new_zeroed(512), WriteFlags::default())
            .await
            .unwrap();
        na.reservation_release(rrela::RELEASE, we, 0xA, false)
            .await
            .unwrap();
        nb.write(0, IoBuf::new_zeroed(512), WriteFlags::default())
            .await
            .unwrap();
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_thread_keeps_to_one_io_queue() {
    tokio::time::timeout(LIMIT, async {
        let s = start(TargetConfig::default(), &[(1, 1 << 20, 512)]).await;
        let c = Controller::connect(s.listener.local_addr(), NQN, &host(), &opts(0))
            .await
            .unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..8 {
            let c = c.clone();
            let qids = std::thread::spawn(move || {
                (0..100)
                    .map(|_| c.pick_io_queue().unwrap().qid())
                    .collect::<std::collections::BTreeSet<u16>>()
            })
            .join()
            .unwrap();
            assert_eq!(qids.len(), 1, "one queue per thread: {qids:?}");
            seen.extend(qids);
        }
        assert_eq!(seen.len(), 2, "threads spread over both queues: {seen:?}");
    })
    .await
    .unwrap();
}

/// With SQ flow control disabled the target completes reads with C2HData SUCCESS (no
/// CapsuleResp); data and completions must still be right on every path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_with_sq_flow_control_disabled() {
    tokio::time::timeout(LIMIT, async {
        let s = start(TargetConfig::default(), &[(1, 64 << 20, 512)]).await;
        for bits in [0u8, 3] {
            let o = ConnectOptions {
                disable_sqflow: true,
                ..opts(bits)
            };
            let c = Controller::connect(s.listener.local_addr(), NQN, &host(), &o)
                .await
                .unwrap();
            let ns = RemoteNamespace::open(&c, 1).await.unwrap();
            verify(&ns, 77 + u64::from(bits)).await;
            c.shutdown().await.unwrap();
        }
    })
    .await
    .unwrap();
}

/// A single path in ANA transition: reads and writes wait it out (re-sent until ANATT)
/// instead of failing, and go through once the target settles on an accessible state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_path_waits_out_an_ana_transition() {
    tokio::time::timeout(LIMIT, async {
        let s = start(TargetConfig::default(), &[(1, 1 << 20, 512)]).await;
        let ctrl = Controller::connect(s.listener.local_addr(), NQN, &host(), &opts(0))
            .await
            .unwrap();
        let ns = Arc::new(RemoteNamespace::open(&ctrl, 1).await.unwrap());
        s.listener
            .set_ana_state(
                nvmf_target::DEFAULT_ANA_GROUP,
                nvmf_target::AnaState::Change,
            )
            .unwrap();
        let data = pattern(4096, 77);
        let writer = {
            let ns = ns.clone();
            let data = data.clone();
            tokio::spawn(async move {
                ns.write(8192, IoBuf::from_slice(&data), WriteFlags::default())
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(
            !writer.is_finished(),
            "the write did not wait for the transition"
        );
        s.listener
            .set_ana_state(
                nvmf_target::DEFAULT_ANA_GROUP,
                nvmf_target::AnaState::Optimized,
            )
            .unwrap();
        writer.await.unwrap().expect("write after the transition");
        let back = ns.read(8192, IoBuf::new_zeroed(4096)).await.unwrap();
        assert_eq!(&back[..], &data[..]);
        let _ = s.target;
    })
    .await
    .expect("test timed out");
}
