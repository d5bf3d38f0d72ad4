//! Volume members on a target that is not a Ferrobay storage node: the Linux kernel's
//! NVMe/TCP target (nvmet-tcp of Debian's 6.1 kernel) in a QEMU guest, one subsystem
//! with three RAM-backed namespaces (brd), reached through a host-forwarded port.
//!
//! The test provisions a RAID-5 volume on the three namespaces by URL
//! (`provision::create_volume` with explicit members), starts two processor nodes on an
//! embedded store, and checks that p1 takes the volume over (reporting the members it
//! could not fence: the 6.1 target has no reservations), that a multipath host reads back
//! what it wrote, and that after `kill` of p1 the standby p2 takes over with a higher
//! generation and every byte reads back, including a write issued while no node owned the
//! volume. One guest boot for all of it; when QEMU or the guest image is missing it says
//! it did not run (a failure under `FERROBAY_REQUIRE_ALL=1`, see `testkit::prereq`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod processor_common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use blockdev::{BlockDevice, IoBuf, WriteFlags};
use control::metaurl::open_meta;
use control::processor::{Processor, ProcessorConfig, member_connect_defaults};
use control::provision::{CreateVolume, create_volume};
use meta::MetaStore;
use nvme_proto::identify::controller::bits as cbits;
use nvmf_host::{HostIdentity, NvmeTcpUrl};
use nvmf_target::AnaState;
use test_guest::{GuestConfig, RunningGuest, spawn};
use volume::{MemberState, ProbeInfo, VolumeState, probe_device};

use processor_common::{
    LEASE_TTL_MS, VOLUME, multipath_host_with, pcfg, status_record, wait_owner,
};

const NQN: &str = "nqn.2026-01.io.ferrobay.test:kernel-members";
const NAMESPACES: u32 = 3;
/// Small: a volume this size is one bitmap region (64 MiB of member space), so the
/// resync after the kill re-reads all of it, across the emulated network.
const RAMDISK_MB: u64 = 32;
const VOLUME_BYTES: u64 = 32 << 20;

/// Three brd RAM disks as namespaces 1..=3 of one subsystem on port 4420. Namespace 1
/// and the port come from the harness's `nvmet_setup` (as in nvmf-host's kernel_target
/// test); 2 and 3 are added to the enabled subsystem through configfs.
const JOB: &str = r#"
modprobe brd rd_nr="$NAMESPACES" rd_size=$((RAMDISK_MB * 1024)) max_part=0 || { fail brd; exit 1; }
for i in $(seq 0 $((NAMESPACES - 1))); do
    wait_path /dev/ram$i 5 || { fail ramdisk dev=/dev/ram$i; exit 1; }
done
check nvmet_setup nvmet_setup "$NQN" "$GUEST_ADDR" 4420 /dev/ram0 || exit 1
ns_dir=/sys/kernel/config/nvmet/subsystems/$NQN/namespaces
for n in $(seq 2 "$NAMESPACES"); do
    mkdir "$ns_dir/$n" &&
        echo /dev/ram$((n - 1)) > "$ns_dir/$n/device_path" &&
        echo 1 > "$ns_dir/$n/enable" || { fail namespace nsid=$n; exit 1; }
done
pass namespaces count=$(ls -d "$ns_dir"/* | wc -l)
ready nqn=$NQN port=4420 kernel=$(uname -r)
host_sync done
"#;

fn fail(guest: &RunningGuest, what: &str, e: impl std::fmt::Display) -> ! {
    panic!("{what}: {e}\n{}", guest.snapshot().diagnostics())
}

/// Processor config for members behind TCG: the production member timeouts (4 s I/O,
/// 3 s connect) are meant for real targets; an emulated guest on 2 shared cores can
/// stall longer than that without being dead.
fn processor(name: &str) -> ProcessorConfig {
    let mut c = pcfg(name);
    c.member_connect = nvmf_host::ConnectOptions {
        io_timeout_ms: 20_000,
        admin_timeout_ms: 20_000,
        connect_timeout_ms: 15_000,
        kato_ms: 5_000,
        ctrl_loss_tmo_ms: Some(10_000),
        ..member_connect_defaults()
    };
    c.engine.member_timeout = Duration::from_secs(30);
    c
}

/// Bytes that differ per `seed` and per 8-byte word (so a misplaced block shows).
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// One write of the workload: where, how long, which pattern.
#[derive(Clone, Copy, Debug)]
struct Extent {
    offset_bytes: u64,
    len_bytes: usize,
    seed: u64,
}

/// Offsets and sizes around the layout's edges (64 KiB stripe unit, 128 KiB rows of
/// data): one block, a partial unit, across a unit boundary, a whole row, several rows
/// with partial ends, 5 MiB in one call, the volume's end.
fn workload(size_bytes: u64) -> Vec<Extent> {
    let k = 1024u64;
    let m = k * k;
    let spans = [
        (0, 4 * k),
        (20 * k, 8 * k),
        (60 * k, 72 * k),
        (m, 128 * k),
        (3 * m + 4 * k, m + 12 * k),
        (16 * m, 5 * m),
        (size_bytes - 64 * k, 64 * k),
    ];
    spans
        .iter()
        .enumerate()
        .map(|(i, &(offset_bytes, len))| Extent {
            offset_bytes,
            len_bytes: len as usize,
            seed: 1000 + i as u64,
        })
        .collect()
}

async fn write_all(dev: &dyn BlockDevice, extents: &[Extent]) {
    for (i, e) in extents.iter().enumerate() {
        dev.write(
            e.offset_bytes,
            IoBuf::from_slice(&pattern(e.len_bytes, e.seed)),
            WriteFlags { fua: i % 2 == 0 },
        )
        .await
        .unwrap_or_else(|err| panic!("write {e:?}: {err}"));
    }
}

async fn verify_all(dev: &dyn BlockDevice, extents: &[Extent], when: &str) {
    for e in extents {
        let got = dev
            .read(e.offset_bytes, IoBuf::new_zeroed(e.len_bytes))
            .await
            .unwrap_or_else(|err| panic!("{when}: read {e:?}: {err}"));
        let want = pattern(e.len_bytes, e.seed);
        if got[..] != want[..] {
            let first = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
            panic!(
                "{when}: {e:?} differs from byte {first} on (volume offset {})",
                e.offset_bytes + first as u64
            );
        }
    }
}

/// Whether the kernel target offers reservations (6.13 and later do, 6.1 does not),
/// asked directly, not through the code under test.
async fn target_has_reservations(url: &str) -> bool {
    let host = HostIdentity::from_hostnqn("nqn.2026-01.io.ferrobay:test:kernel-probe").unwrap();
    let ctrl = NvmeTcpUrl::parse(url)
        .unwrap()
        .connect(&host, &processor_common::host_opts())
        .await
        .unwrap();
    let oncs = ctrl.id().oncs;
    let _ = ctrl.shutdown().await;
    oncs & cbits::ONCS_RESERVATIONS != 0
}

/// Each member's superblock, read over a fresh connection to the kernel target.
async fn probe_members(urls: &[String]) -> Vec<ProbeInfo> {
    let host = HostIdentity::from_hostnqn("nqn.2026-01.io.ferrobay:test:kernel-probe").unwrap();
    let mut out = Vec::new();
    for u in urls {
        let ns = NvmeTcpUrl::parse(u)
            .unwrap()
            .open(&host, &processor_common::host_opts())
            .await
            .unwrap();
        let info = probe_device(&ns)
            .await
            .unwrap_or_else(|e| panic!("probe {u}: {e}"))
            .unwrap_or_else(|| panic!("{u}: no volume superblock"));
        let _ = ns.controller().shutdown().await;
        out.push(info);
    }
    out
}

async fn scenario(guest: &RunningGuest, addr: SocketAddr) {
    let t_start = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn MetaStore> = open_meta(&format!("embedded:{}", dir.path().display()))
        .await
        .unwrap();
    let urls: Vec<String> = (1..=NAMESPACES)
        .map(|nsid| format!("nvme+tcp://{addr}/{NQN}/{nsid}"))
        .collect();
    let reservations = target_has_reservations(&urls[0]).await;
    let expect_unfenceable = if reservations { 0 } else { urls.len() };

    let creator = HostIdentity::from_hostnqn("nqn.2026-01.io.ferrobay:test:creator").unwrap();
    let req = CreateVolume {
        name: VOLUME.to_string(),
        level: "raid5".to_string(),
        size_bytes: VOLUME_BYTES,
        stripe_unit_bytes: None,
        storage_nodes: vec![],
        members: urls.clone(),
        preferred_owner: Some("p1".to_string()),
        ..CreateVolume::default()
    };
    let rec = create_volume(store.as_ref(), &req, &creator)
        .await
        .unwrap_or_else(|e| fail(guest, "create_volume on the kernel target", e));
    eprintln!(
        "volume created on the kernel target in {:?}: {} bytes, {}-byte blocks, ANA group {}",
        t_start.elapsed(),
        rec.size_bytes,
        rec.block_size_bytes,
        rec.ana_group
    );
    assert_eq!(rec.size_bytes, VOLUME_BYTES);
    let got: Vec<&str> = rec.members.iter().map(|m| m.url.as_str()).collect();
    assert_eq!(got, urls);
    assert!(
        rec.members.iter().all(|m| m.storage_node.is_none()),
        "explicit members are not deleted with the volume: {:?}",
        rec.members
    );
    let group = rec.ana_group;

    let p1 = Processor::start(store.clone(), processor("p1"))
        .await
        .unwrap();
    let p2 = Processor::start(store.clone(), processor("p2"))
        .await
        .unwrap();
    let took = wait_owner(&p1, Duration::from_secs(30)).await;
    let first = p1.takeover_report(VOLUME).unwrap();
    eprintln!("p1 took the volume over in {took:?}: {first:?}");
    assert_eq!(first.members_total, 3, "{first:?}");
    assert_eq!(first.members_fenced, 3, "every member reached: {first:?}");
    assert_eq!(
        first.members_unfenceable, expect_unfenceable,
        "target reservations: {reservations}; {first:?}"
    );
    assert_eq!(
        first.resync_regions, 0,
        "a fresh volume is clean: {first:?}"
    );
    assert_eq!(p1.ana_states(group), vec![AnaState::Optimized]);
    assert_eq!(p2.ana_states(group), vec![AnaState::Inaccessible]);

    let addrs = [p1.nvme_addrs()[0], p2.nvme_addrs()[0]];
    // No-path timeout above the takeover wait below: the write issued at the kill must
    // wait for p2 however slow the emulated members make its resync.
    let host = Arc::new(
        multipath_host_with(&addrs, "nqn.2026-01.io.ferrobay:test:kernel-host", 90_000).await,
    );
    assert_eq!(host.info().size_bytes, rec.size_bytes);
    assert_eq!(host.paths().len(), 2, "{:?}", host.paths());
    let mut extents = workload(rec.size_bytes);
    let t_io = Instant::now();
    write_all(host.as_ref(), &extents).await;
    verify_all(host.as_ref(), &extents, "through p1").await;
    eprintln!(
        "wrote and read back {} extents ({} bytes) through p1 in {:?}",
        extents.len(),
        extents.iter().map(|e| e.len_bytes).sum::<usize>(),
        t_io.elapsed()
    );

    // Kill the owner; a write issued now waits (multipath) until p2 serves it.
    let t_kill = Instant::now();
    p1.kill();
    let during = Extent {
        offset_bytes: 8 << 20,
        len_bytes: 256 << 10,
        seed: 2000,
    };
    let pending = {
        let host = host.clone();
        tokio::spawn(async move {
            write_all(host.as_ref(), &[during]).await;
            Instant::now()
        })
    };
    let took = wait_owner(&p2, Duration::from_millis(LEASE_TTL_MS * 4 + 60_000)).await;
    let second = p2.takeover_report(VOLUME).unwrap();
    eprintln!("p2 took the volume over {took:?} after the kill: {second:?}");
    // Without reservations nothing but the lease stops p1: its heartbeat verdict alone
    // must not let p2 in (with them, p2 seizes the volume at once and fences p1).
    if expect_unfenceable > 0 {
        assert!(
            t_kill.elapsed() >= Duration::from_millis(LEASE_TTL_MS / 2),
            "p2 cannot own the volume before p1's lease ran out"
        );
    }
    assert!(
        second.generation > first.generation,
        "the takeover bumps the generation: {first:?} -> {second:?}"
    );
    assert!(second.epoch > first.epoch, "{first:?} -> {second:?}");
    assert_eq!(second.members_fenced, 3, "{second:?}");
    assert_eq!(second.members_unfenceable, expect_unfenceable, "{second:?}");
    assert_eq!(p2.ana_states(group), vec![AnaState::Optimized]);
    let done_at = tokio::time::timeout(Duration::from_secs(60), pending)
        .await
        .expect("the write issued during the takeover did not finish")
        .expect("the write issued during the takeover failed");
    eprintln!(
        "the write issued at the kill finished {:?} after it",
        done_at - t_kill
    );
    extents.push(during);
    verify_all(host.as_ref(), &extents, "through p2 after the takeover").await;

    // p2 carries on: overwrite part of the volume and read everything back.
    let again: Vec<Extent> = extents
        .iter()
        .step_by(2)
        .map(|e| Extent {
            seed: e.seed + 5000,
            ..*e
        })
        .collect();
    write_all(host.as_ref(), &again).await;
    for e in &again {
        if let Some(slot) = extents
            .iter_mut()
            .find(|x| x.offset_bytes == e.offset_bytes)
        {
            *slot = *e;
        }
    }
    verify_all(host.as_ref(), &extents, "through p2 after overwrites").await;

    // What p2 publishes: it owns the volume, all three members active.
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = status_record(&store).await.filter(|s| s.owner == "p2") {
            break st;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no status from p2");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(st.status.state, VolumeState::Healthy, "{:?}", st.status);
    assert_eq!(st.status.generation, second.generation);
    assert!(
        st.status
            .members
            .iter()
            .all(|m| m.state == MemberState::Active),
        "{:?}",
        st.status.members
    );
    drop(host);
    p2.shutdown().await.unwrap();

    // The kernel target's namespaces themselves hold the volume, stopped clean by p2 at
    // (at least) the generation of its takeover: read straight from the target.
    for (i, info) in probe_members(&urls).await.iter().enumerate() {
        assert_eq!(info.volume_uuid, rec.uuid, "member {i}: {info:?}");
        assert_eq!(info.member_index, i, "{info:?}");
        assert_eq!(info.state, MemberState::Active, "{info:?}");
        assert!(info.generation >= second.generation, "member {i}: {info:?}");
        assert!(info.clean && info.intact, "member {i}: {info:?}");
    }
    eprintln!("scenario done in {:?}", t_start.elapsed());
}

#[test]
fn raid5_on_the_linux_kernel_target_survives_an_owner_kill() {
    if let Some(why) = test_guest::unavailable() {
        testkit::prereq::missing(why);
        return;
    }
    let t0 = Instant::now();
    let cfg = GuestConfig::new("control-kernel-members", JOB)
        .env("NQN", NQN)
        .env("NAMESPACES", NAMESPACES)
        .env("RAMDISK_MB", RAMDISK_MB)
        .forward(4420)
        .timeout(Duration::from_secs(300));
    let guest = spawn(&cfg).unwrap_or_else(|e| panic!("{e}"));
    let ready = guest
        .wait_ready(Duration::from_secs(180))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ready.get("nqn"), Some(NQN));
    eprintln!(
        "guest ready in {:?} (kernel {})",
        t0.elapsed(),
        ready.get("kernel").unwrap_or("?")
    );
    let port = guest.host_port(4420).expect("forwarded port");
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(scenario(&guest, addr));

    guest
        .wait_for("done", Duration::from_secs(60))
        .unwrap_or_else(|e| fail(&guest, "guest at done", e));
    guest.release("done").unwrap();
    let run = guest
        .finish(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(run.passed("nvmet_setup").is_some());
    assert_eq!(
        run.passed("namespaces").and_then(|r| r.get("count")),
        Some("3")
    );
    eprintln!("whole test: {:?}", t0.elapsed());
}
