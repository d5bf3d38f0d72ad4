//! The initiator against the Linux kernel's NVMe/TCP target (nvmet-tcp of Debian's 6.1
//! kernel) in a QEMU guest, reached through a host-forwarded port: discovery, connect,
//! Identify, write/read verify at sizes on both sides of the in-capsule limit (16 KiB)
//! and above the 4 MiB this target takes per command, with every digest mode, two I/O
//! queues, reservations between two host identities, and an ANA change event. One guest
//! boot for all of it.
//!
//! The 6.1 target reports MDTS 0 ("no limit") on TCP, yet refuses Reads and Writes above
//! 4 MiB with Data SGL Length Invalid: the host therefore splits at 4 MiB when MDTS is 0
//! (`UNLIMITED_MDTS_BYTES`); the test pins that behaviour with one raw 5 MiB command.
//!
//! Reservations: Linux nvmet implements them from 6.13 on (drivers/nvme/target/pr.c);
//! the 6.1 target answers every reservation command with Invalid Command Opcode (SCT 0,
//! SC 0x01, DNR) and reports no reservation support in ONCS. The test checks exactly
//! that, and runs the full register/acquire/report/release scenario when the guest
//! kernel does support them.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use blockdev::{BlockDevice, BlockError, IoBuf, WriteFlags};
use common::pattern;
use nvme_proto::Command;
use nvme_proto::identify::controller::bits as cbits;
use nvme_proto::log::ana_state;
use nvme_proto::log::discovery::subtype;
use nvme_proto::opcode::io;
use nvme_proto::reservation::{ReservationType, cptpl, racqa, rrega, rrela};
use nvme_proto::tcp::Digests;
use nvmf_host::discovery::discover;
use nvmf_host::{ConnectOptions, Controller, HostIdentity, Payload, RemoteNamespace};
use test_guest::{GuestConfig, RunningGuest, spawn};

const NQN: &str = "nqn.2026-01.io.ferrobay.test:kernel-target";
const RAMDISK_MB: u64 = 128;
const ANA_GROUP_STATE: &str = "/sys/kernel/config/nvmet/ports/1/ana_groups/1/ana_state";

const JOB: &str = r#"
dev=$(nvmet_ramdisk "$RAMDISK_MB") || { fail ramdisk; exit 1; }
check nvmet_setup nvmet_setup "$NQN" "$GUEST_ADDR" 4420 "$dev" || exit 1
capture kernel uname -r
ready nqn=$NQN port=4420 dev=$dev kernel=$(uname -r)
host_sync ana
check ana_non_optimized sh -c "echo non-optimized > $ANA_STATE"
host_sync done
"#;

fn opts(digests: u8) -> ConnectOptions {
    ConnectOptions {
        io_queues: 2,
        queue_size: 32,
        digests: Digests::from_bits(digests),
        // TCG is slow; the 2 cores are shared with everyone.
        io_timeout_ms: 60_000,
        admin_timeout_ms: 60_000,
        connect_timeout_ms: 30_000,
        kato_ms: 10_000,
        ..ConnectOptions::default()
    }
}

fn fail(guest: &RunningGuest, what: &str, e: impl std::fmt::Display) -> ! {
    panic!("{what}: {e}\n{}", guest.snapshot().diagnostics())
}

/// Write and read back at sizes around the kernel target's limits: in-capsule data up
/// to its IOCCSZ (16 KiB by default), R2T above, and a write larger than one command may
/// carry (split by the host).
async fn verify(ns: &RemoteNamespace, c: &Controller, seed: u64) -> Vec<usize> {
    let in_capsule = c.io_queues()[0].in_capsule_max_bytes() as usize;
    let maxh2c = c.io_queues()[0].negotiated().maxh2cdata_bytes as usize;
    let mut sizes = vec![
        512,
        4096,
        8192,
        in_capsule,
        in_capsule + 512,
        128 << 10,
        1 << 20,
    ];
    sizes.push(maxh2c + (1 << 20));
    sizes.sort_unstable();
    sizes.dedup();
    let mut off = 0u64;
    for (i, &len) in sizes.iter().enumerate() {
        let data = pattern(len, seed + i as u64);
        ns.write(
            off,
            IoBuf::from_slice(&data),
            WriteFlags { fua: i % 2 == 1 },
        )
        .await
        .unwrap_or_else(|e| panic!("write of {len} bytes at {off}: {e}"));
        let got = ns
            .read(off, IoBuf::new_zeroed(len))
            .await
            .unwrap_or_else(|e| panic!("read of {len} bytes at {off}: {e}"));
        assert!(got[..] == data[..], "data differs at size {len}");
        off += (len as u64).next_multiple_of(1 << 20);
    }
    ns.flush().await.unwrap();
    sizes
}

/// The target's per-command limit: 4 MiB goes, one block more is refused (raw commands,
/// bypassing the host's split).
async fn four_mib_limit(c: &Controller) {
    let q = &c.io_queues()[0];
    for (blocks, ok) in [(8192u32, true), (8193, false)] {
        let mut cmd = Command::new(io::READ, 0, 1);
        cmd.set_slba(0);
        cmd.set_cdw12(blocks - 1);
        let done = q
            .submit(cmd, Payload::read(IoBuf::new_zeroed(blocks as usize * 512)))
            .await
            .unwrap();
        let st = done.cqe.status;
        if ok {
            assert!(st.is_success(), "{blocks} blocks: {st:?}");
        } else {
            assert_eq!((st.sct, st.sc), (0, 0x0F), "{blocks} blocks: {st:?}");
        }
    }
    assert_eq!(c.max_transfer_bytes(), 4 << 20);
}

/// Both I/O queues carry commands: one Read straight on each.
async fn both_queues(c: &Controller, ns: &RemoteNamespace) {
    assert_eq!(c.io_queues().len(), 2);
    for q in c.io_queues() {
        let mut cmd = Command::new(io::READ, 0, ns.nsid());
        cmd.set_slba(0);
        cmd.set_cdw12(7); // 8 blocks
        let done = q
            .submit_checked(cmd, Payload::read(IoBuf::new_zeroed(8 * 512)))
            .await
            .unwrap_or_else(|e| panic!("read on queue {}: {e}", q.qid()));
        assert_eq!(done.buf.unwrap().len(), 4096);
    }
}

async fn reservations(addr: SocketAddr, oncs_reservations: bool) {
    let a = HostIdentity::from_uuid([0xA1; 16]);
    let b = HostIdentity::from_uuid([0xB2; 16]);
    let ca = Controller::connect(addr, NQN, &a, &opts(0)).await.unwrap();
    let cb = Controller::connect(addr, NQN, &b, &opts(0)).await.unwrap();
    let na = ca.namespace(1).await.unwrap();
    let nb = cb.namespace(1).await.unwrap();
    let we = ReservationType::WriteExclusive;
    let r = na
        .reservation_register(rrega::REGISTER, 0, 0xA, false, cptpl::NO_CHANGE)
        .await;
    if !oncs_reservations {
        // Linux 6.1 nvmet: no reservations. Every reservation command is refused.
        let e = r.expect_err("the 6.1 target has no reservations");
        let st = e.nvme_status().unwrap_or_else(|| panic!("{e}"));
        assert_eq!((st.sct, st.sc, st.dnr), (0, 0x01, true), "{e}");
        assert!(e.to_string().contains("invalid command opcode"), "{e}");
        let e = nb.reservation_report().await.unwrap_err();
        assert_eq!(
            e.nvme_status().map(|s| (s.sct, s.sc)),
            Some((0, 0x01)),
            "{e}"
        );
        let e = nb
            .reservation_acquire(racqa::ACQUIRE, we, 0xB, 0, false)
            .await
            .unwrap_err();
        assert_eq!(
            e.nvme_status().map(|s| (s.sct, s.sc)),
            Some((0, 0x01)),
            "{e}"
        );
        // The controllers are unharmed.
        nb.write(0, IoBuf::new_zeroed(512), WriteFlags::default())
            .await
            .unwrap();
        return;
    }
    r.unwrap();
    na.reservation_acquire(racqa::ACQUIRE, we, 0xA, 0, false)
        .await
        .unwrap();
    nb.reservation_register(rrega::REGISTER, 0, 0xB, false, cptpl::NO_CHANGE)
        .await
        .unwrap();
    let rep = nb.reservation_report().await.unwrap();
    assert_eq!(rep.rtype, we.as_u8());
    assert_eq!(rep.registrants.len(), 2);
    let e = nb
        .write(0, IoBuf::new_zeroed(512), WriteFlags::default())
        .await
        .unwrap_err();
    assert!(matches!(e, BlockError::ReservationConflict), "{e}");
    na.reservation_release(rrela::RELEASE, we, 0xA, false)
        .await
        .unwrap();
    nb.write(0, IoBuf::new_zeroed(512), WriteFlags::default())
        .await
        .unwrap();
    na.reservation_release(rrela::CLEAR, we, 0xA, false)
        .await
        .unwrap();
}

#[test]
fn initiator_against_the_linux_kernel_target() {
    let cfg = GuestConfig::new("nvmf-host-kernel-target", JOB)
        .env("NQN", NQN)
        .env("RAMDISK_MB", RAMDISK_MB)
        .env("ANA_STATE", ANA_GROUP_STATE)
        .forward(4420)
        .timeout(Duration::from_secs(400));
    let guest = spawn(&cfg).unwrap_or_else(|e| panic!("{e}"));
    let ready = guest
        .wait_ready(Duration::from_secs(240))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ready.get("nqn"), Some(NQN));
    let port = guest.host_port(4420).expect("forwarded port");
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let host = common::host();

    // Discovery on the I/O port (nvmet serves the discovery NQN on every port).
    let entries = rt
        .block_on(discover(addr, &host))
        .unwrap_or_else(|e| fail(&guest, "discover", e));
    let ours: Vec<_> = entries
        .iter()
        .filter(|e| e.subtype == subtype::NVME && e.subnqn == NQN)
        .collect();
    assert_eq!(ours.len(), 1, "{entries:?}");
    assert_eq!(ours[0].trsvcid, "4420");
    assert_eq!(ours[0].traddr, "10.0.2.15");

    // Connect, Identify, verify in every digest mode; two I/O queues each time.
    let mut oncs = 0u16;
    for bits in 0..4u8 {
        rt.block_on(async {
            let c = Controller::connect(addr, NQN, &host, &opts(bits))
                .await
                .unwrap_or_else(|e| fail(&guest, "connect", e));
            let id = c.id();
            assert_eq!(id.subnqn, NQN);
            assert_eq!(id.mn.trim(), "Linux");
            assert_eq!(id.cntlid, c.cntlid());
            assert_eq!(c.admin().negotiated().digests.bits(), bits);
            assert_eq!(c.io_queues()[1].negotiated().digests.bits(), bits);
            oncs = id.oncs;
            assert_eq!(c.active_namespaces().await.unwrap(), vec![1]);
            let ns = c.namespace(1).await.unwrap();
            assert_eq!(ns.info().size_bytes, RAMDISK_MB << 20);
            let sizes = verify(&ns, &c, u64::from(bits) * 100).await;
            assert!(sizes.len() >= 7, "{sizes:?}");
            both_queues(&c, &ns).await;
            if bits == 0 {
                four_mib_limit(&c).await;
            }
            assert!(c.status().is_live());
            c.shutdown().await.unwrap();
        });
    }

    // Reservations between two host identities.
    rt.block_on(reservations(addr, oncs & cbits::ONCS_RESERVATIONS != 0));

    // An ANA change on the kernel target reaches the controller as an event.
    rt.block_on(async {
        let c = Controller::connect(addr, NQN, &host, &opts(0))
            .await
            .unwrap_or_else(|e| fail(&guest, "connect for ANA", e));
        let ns = c.namespace(1).await.unwrap();
        let grp = ns.id().anagrpid;
        assert_eq!(c.status().ana_state_of(1, grp), ana_state::OPTIMIZED);
        let mut w = c.watch();
        guest
            .wait_for("ana", Duration::from_secs(60))
            .unwrap_or_else(|e| fail(&guest, "guest at ana", e));
        guest.release("ana").unwrap();
        tokio::time::timeout(
            Duration::from_secs(60),
            w.wait_for(|s| s.ana_state_of(1, grp) == ana_state::NON_OPTIMIZED),
        )
        .await
        .unwrap_or_else(|e| fail(&guest, "ANA change event", e))
        .unwrap();
        // Non-optimized still serves I/O.
        ns.read(0, IoBuf::new_zeroed(4096)).await.unwrap();
        c.shutdown().await.unwrap();
    });

    guest
        .wait_for("done", Duration::from_secs(60))
        .unwrap_or_else(|e| fail(&guest, "guest at done", e));
    guest.release("done").unwrap();
    let run = guest
        .finish(Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(run.passed("nvmet_setup").is_some());
    assert!(run.passed("ana_non_optimized").is_some());
}
