//! QoS at the target over real TCP: a limited host runs at its limit while another host on
//! the same namespace is not held back; throttled commands keep their data and their order,
//! can be aborted, and never fail; limits change under load; a namespace with a minimum
//! gets it from a saturated device. Hosts are our initiator (nvmf-host, with the `bench`
//! load generator) and the raw test client; the device is RAM, or for saturation a RAM
//! device that serves a bounded number of commands at once.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use blockdev::{BlockDevice, DeviceInfo, DeviceStats, IoBuf, IoFuture, RamDevice, WriteFlags};
use common::*;
use nvme_proto::opcode::admin;
use nvme_proto::{Command, Status};
use nvmf_host::{ConnectOptions, Controller, HostIdentity, RemoteNamespace};
use nvmf_target::{NamespaceConfig, QosKey, QosLimits, Target, TargetConfig};

const HOST_A: &str = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-00000000000a";
const HOST_B: &str = "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-4000-8000-00000000000b";

fn opts() -> ConnectOptions {
    ConnectOptions {
        io_queues: 2,
        queue_size: 64,
        connect_timeout_ms: 5000,
        ctrl_loss_tmo_ms: Some(0),
        ..ConnectOptions::default()
    }
}

async fn open_as(
    addr: std::net::SocketAddr,
    subnqn: &str,
    hostnqn: &str,
    nsid: u32,
) -> Arc<dyn BlockDevice> {
    let host = HostIdentity::from_hostnqn(hostnqn).unwrap();
    let ctrl = Controller::connect(addr, subnqn, &host, &opts())
        .await
        .unwrap();
    Arc::new(RemoteNamespace::open(&ctrl, nsid).await.unwrap())
}

fn load(pattern: bench::Pattern, bs: u64, qd: u32, ms: u64) -> bench::BenchConfig {
    bench::BenchConfig {
        pattern,
        block_size_bytes: bs,
        iodepth: qd,
        jobs: 1,
        runtime_ms: ms,
        ..bench::BenchConfig::default()
    }
}

async fn run(dev: Arc<dyn BlockDevice>, cfg: bench::BenchConfig, name: &str) -> bench::Report {
    bench::run(dev, &cfg, name, &bench::Progress::auto(0))
        .await
        .unwrap()
}

/// The tests that measure rates run one at a time (each would steal the others' CPU).
static TIMED: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Bounds (low, high) on what limit 0 let through per second (commands, bytes) over
/// `window`, after `settle`: the steady rate, without the start of the load (connections
/// warming up) and its end. Timestamps are taken on both sides of each reading, so a
/// stall of this process while it reads widens the bounds instead of skewing the rate.
async fn limit_rate(t: &Target, settle: Duration, window: Duration) -> [(f64, f64); 2] {
    tokio::time::sleep(settle).await;
    let (a0, s0, b0) = (
        Instant::now(),
        t.qos_stats().limits[0].clone(),
        Instant::now(),
    );
    tokio::time::sleep(window).await;
    let (a1, s1, b1) = (
        Instant::now(),
        t.qos_stats().limits[0].clone(),
        Instant::now(),
    );
    let (long, short) = ((b1 - a0).as_secs_f64(), (a1 - b0).as_secs_f64());
    let (n, bytes) = (
        (s1.commands - s0.commands) as f64,
        (s1.bytes - s0.bytes) as f64,
    );
    [(n / long, n / short), (bytes / long, bytes / short)]
}

/// Whether a rate measured as `(low, high)` bounds is within `tolerance` of `want`.
fn bounds_within((low, high): (f64, f64), want: f64, tolerance: f64) -> bool {
    low <= want * (1.0 + tolerance) && high >= want * (1.0 - tolerance)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_host_runs_at_its_limit_and_the_other_is_not_held() {
    let _one = TIMED.lock().await;
    let t = start_target(TargetConfig::default()).await;
    // Well below what the target does, with a deep queue: the limit holds even when this
    // process is not scheduled for a while (the queued commands keep their turns).
    let limit = 500;
    t.target
        .set_qos(
            QosKey::host_on_namespace(SUBNQN, 1, HOST_A),
            QosLimits {
                max_iops: Some(limit),
                burst_ios: Some(5),
                ..QosLimits::default()
            },
        )
        .unwrap();
    let a = open_as(t.addr, SUBNQN, HOST_A, 1).await;
    let b = open_as(t.addr, SUBNQN, HOST_B, 1).await;
    let (ra, rb, [iops, _]) = tokio::join!(
        run(a, load(bench::Pattern::RandRead, 4096, 64, 2500), "A"),
        run(b, load(bench::Pattern::RandRead, 4096, 4, 2500), "B"),
        limit_rate(
            &t.target,
            Duration::from_millis(500),
            Duration::from_millis(1500)
        ),
    );
    eprintln!(
        "A {:.0} IOPS ({} I/Os in {:.3} s, {iops:.0?} IOPS steady), B {:.0} IOPS",
        ra.iops, ra.read_ios, ra.elapsed_s, rb.iops
    );
    assert_eq!(
        (ra.errors, rb.errors),
        (0, 0),
        "throttled commands never fail"
    );
    assert!(
        bounds_within(iops, limit as f64, 0.05),
        "limited host: {iops:.0?} IOPS for a limit of {limit}"
    );
    assert!(
        ra.iops <= limit as f64 * 1.05,
        "limited host over the whole run: {:.0} IOPS",
        ra.iops
    );
    assert!(
        rb.iops > 2.0 * limit as f64,
        "the other host is not limited: {:.0} IOPS",
        rb.iops
    );
    let stats = t.target.qos_stats();
    assert_eq!(stats.limits.len(), 1);
    let s = &stats.limits[0];
    assert!(s.throttled_commands > 0 && s.throttled_ns > 0, "{s:?}");
    assert_eq!(s.commands, ra.read_ios, "only A's commands pass A's limit");
    assert!(stats.caps.is_empty(), "no minimum, no caps");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_writes_keep_their_data_under_a_bandwidth_limit() {
    let _one = TIMED.lock().await;
    let t = start_target(TargetConfig::default()).await;
    let rate = 4u64 << 20;
    t.target
        .set_qos(
            QosKey::namespace(SUBNQN, 1),
            QosLimits {
                max_bytes_per_s: Some(rate),
                burst_bytes: Some(64 << 10),
                ..QosLimits::default()
            },
        )
        .unwrap();
    let a = open_as(t.addr, SUBNQN, HOST_A, 1).await;
    let mut cfg = load(bench::Pattern::RandWrite, 16 << 10, 32, 2000);
    cfg.verify = true;
    cfg.range_bytes = 8 << 20;
    let (r, [_, bytes_per_s]) = tokio::join!(
        run(a, cfg, "A"),
        limit_rate(
            &t.target,
            Duration::from_millis(500),
            Duration::from_millis(1200)
        ),
    );
    eprintln!(
        "{bytes_per_s:.0?} B/s steady; {} bytes in {:.3} s",
        r.write_bytes, r.elapsed_s
    );
    assert_eq!(r.errors, 0);
    let v = r.verify.expect("verify report");
    assert_eq!(v.mismatches(), 0, "{v:?}");
    assert!(v.blocks_read_back > 0);
    assert!(
        bounds_within(bytes_per_s, rate as f64, 0.05),
        "{bytes_per_s:.0?} B/s for a limit of {rate}"
    );
    assert!(r.write_bytes as f64 / r.elapsed_s <= rate as f64 * 1.05);
}

fn abort_cmd(sqid: u16, cid: u16) -> Command {
    let mut c = Command::new(admin::ABORT, 0, 0);
    c.set_cdw10(u32::from(sqid) | (u32::from(cid) << 16));
    c
}

#[tokio::test]
async fn throttled_commands_run_in_order_and_can_be_aborted() {
    let _one = TIMED.lock().await;
    let (t, mut admin, mut q) = setup(TargetConfig::default()).await;
    // 10 commands per second, one at a time: a turn every 100 ms.
    t.target
        .set_qos(
            QosKey::host(SUBNQN, HOSTNQN),
            QosLimits {
                max_iops: Some(10),
                burst_ios: Some(1),
                ..QosLimits::default()
            },
        )
        .unwrap();
    let data = pattern(4096, 7);
    let t0 = Instant::now();
    let w = q.submit(write_cmd(1, 64, 8), Some(&data), 0, true).await;
    let r1 = q.submit(read_cmd(1, 64, 8), None, 4096, true).await;
    let r2 = q.submit(read_cmd(1, 64, 8), None, 4096, true).await;
    let r3 = q.submit(read_cmd(1, 64, 8), None, 4096, true).await;
    assert_eq!(q.wait_done(w).await.0.status, Status::SUCCESS);
    // r2 waits behind r1: abortable, and answered at once.
    let (c, _) = admin.exec(abort_cmd(1, r2), None, 0).await;
    assert_eq!(c.status, Status::SUCCESS);
    assert_eq!(c.dw0 & 1, 0, "a throttled command has not started: aborted");
    let (c2, _) = q.wait_done(r2).await;
    assert_eq!(c2.status, Status::ABORT_REQUESTED);
    assert!(
        t0.elapsed() < Duration::from_millis(90),
        "answered before r1's turn"
    );
    let (c1, d1) = q.wait_done(r1).await;
    let at1 = t0.elapsed();
    let (c3, d3) = q.wait_done(r3).await;
    let at3 = t0.elapsed();
    assert_eq!((c1.status, c3.status), (Status::SUCCESS, Status::SUCCESS));
    assert_eq!(d1, data, "the write that waited its turn reached the media");
    assert_eq!(d3, data);
    // Turns: w at 0, r1 at 100 ms, (r2's turn at 200 ms, aborted), r3 at 300 ms.
    assert!(at1 >= Duration::from_millis(95), "r1 at {at1:?}");
    assert!(at3 >= Duration::from_millis(290), "r3 at {at3:?}");
    let s = &t.target.qos_stats().limits[0];
    assert_eq!((s.commands, s.throttled_commands), (4, 3), "{s:?}");
}

#[tokio::test]
async fn a_host_that_leaves_does_not_wait_for_its_throttled_commands() {
    let (t, admin, mut q) = setup(TargetConfig::default()).await;
    t.target
        .set_qos(
            QosKey::namespace(SUBNQN, 1),
            QosLimits {
                max_iops: Some(1),
                burst_ios: Some(1),
                ..QosLimits::default()
            },
        )
        .unwrap();
    for i in 0..20 {
        q.submit(read_cmd(1, i * 8, 8), None, 4096, true).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(q);
    drop(admin);
    let t0 = Instant::now();
    while t.target.connection_count() > 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "the connection waited for 19 s of throttled commands"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn new_limits_reach_connected_hosts() {
    let _one = TIMED.lock().await;
    let (t, _admin, mut q) = setup(TargetConfig::default()).await;
    let key = QosKey::namespace(SUBNQN, 1);
    let slow = QosLimits {
        max_iops: Some(5),
        burst_ios: Some(1),
        ..QosLimits::default()
    };
    t.target.set_qos(key.clone(), slow).unwrap();
    // 3 commands at 5/s: 400 ms.
    let t0 = Instant::now();
    let mut cids = Vec::new();
    for i in 0..3 {
        cids.push(q.submit(read_cmd(1, i * 8, 8), None, 4096, true).await);
    }
    for c in cids.drain(..) {
        assert_eq!(q.wait_done(c).await.0.status, Status::SUCCESS);
    }
    assert!(
        t0.elapsed() >= Duration::from_millis(380),
        "{:?}",
        t0.elapsed()
    );
    // Faster for the same connection: 50 commands at 10 000/s.
    t.target
        .set_qos(
            key.clone(),
            QosLimits {
                max_iops: Some(10_000),
                ..QosLimits::default()
            },
        )
        .unwrap();
    let t0 = Instant::now();
    for i in 0..50 {
        cids.push(q.submit(read_cmd(1, i * 8, 8), None, 4096, true).await);
    }
    for c in cids.drain(..) {
        assert_eq!(q.wait_done(c).await.0.status, Status::SUCCESS);
    }
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    // Cleared: no gate left.
    assert_eq!(
        t.target.clear_qos(&key).map(|l| l.max_iops),
        Some(Some(10_000))
    );
    assert!(t.target.qos_limits().is_empty());
}

#[test]
fn bad_limits_are_refused_with_the_reason() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let t = start_target(TargetConfig::default()).await;
        let err = t
            .target
            .set_qos(
                QosKey::namespace("nqn.2026-01.io.ferrobay:test:nope", 1),
                QosLimits {
                    max_iops: Some(5),
                    ..QosLimits::default()
                },
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "no subsystem nqn.2026-01.io.ferrobay:test:nope"
        );
        let err = t
            .target
            .set_qos(
                QosKey::host_on_namespace(SUBNQN, 1, HOST_A),
                QosLimits {
                    min_iops: Some(5),
                    ..QosLimits::default()
                },
            )
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("invalid QoS limits: a minimum applies to a namespace as a whole"),
            "{err}"
        );
        let err = t
            .target
            .set_qos(
                QosKey::host(SUBNQN, "not an nqn"),
                QosLimits {
                    max_iops: Some(5),
                    ..QosLimits::default()
                },
            )
            .unwrap_err();
        assert!(err.to_string().starts_with("invalid NQN"), "{err}");
        assert!(t.target.qos_limits().is_empty());
    });
}

/// A RAM device with a fixed capacity: it serves `iops` commands per second, first come
/// first served (each completes one service time after the one before it, or after it
/// arrived), so that namespaces on it contend as on a saturated drive; late timers do not
/// change its capacity.
struct SaturatingDevice {
    inner: RamDevice,
    service: Duration,
    next_free: std::sync::Mutex<tokio::time::Instant>,
}

impl SaturatingDevice {
    fn new(iops: u32) -> SaturatingDevice {
        SaturatingDevice {
            inner: RamDevice::new("saturating", 64 << 20),
            service: Duration::from_secs(1) / iops,
            next_free: std::sync::Mutex::new(tokio::time::Instant::now()),
        }
    }

    async fn serve(&self) {
        let done_at = {
            let mut next = self.next_free.lock().unwrap();
            *next = (*next).max(tokio::time::Instant::now()) + self.service;
            *next
        };
        tokio::time::sleep_until(done_at).await;
    }
}

impl BlockDevice for SaturatingDevice {
    fn info(&self) -> &DeviceInfo {
        self.inner.info()
    }
    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            self.serve().await;
            self.inner.read(offset_bytes, buf).await
        })
    }
    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            self.serve().await;
            self.inner.write(offset_bytes, buf, flags).await
        })
    }
    fn flush(&self) -> IoFuture<'_, ()> {
        self.inner.flush()
    }
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        self.inner.write_zeroes(offset_bytes, len_bytes)
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        self.inner.discard(offset_bytes, len_bytes)
    }
    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
}

/// Reads namespace `nsid` completed so far.
fn ops_of(t: &Target, nsid: u32) -> u64 {
    t.stats()
        .namespaces
        .iter()
        .find(|n| n.subsystem == SUBNQN && n.nsid == nsid)
        .map(|n| n.stats.read_ops)
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minimum_is_met_on_a_saturated_device() {
    let _one = TIMED.lock().await;
    let t = start_target(TargetConfig::default()).await;
    let dev = Arc::new(SaturatingDevice::new(2000));
    // Namespaces 2..4 share the one device (1 is the common RAM namespace, unused).
    for nsid in 2..=4 {
        t.target
            .add_namespace(SUBNQN, NamespaceConfig::whole_device(nsid, dev.clone()))
            .unwrap();
    }
    let hosts = [
        (
            "nqn.2014-08.org.nvmexpress:uuid:11111111-0000-4000-8000-000000000001",
            2u32,
            2u32,
        ),
        (
            "nqn.2014-08.org.nvmexpress:uuid:22222222-0000-4000-8000-000000000002",
            3,
            16,
        ),
        (
            "nqn.2014-08.org.nvmexpress:uuid:33333333-0000-4000-8000-000000000003",
            4,
            16,
        ),
    ];
    let mut devs = Vec::new();
    for (h, nsid, _) in hosts {
        devs.push(open_as(t.addr, SUBNQN, h, nsid).await);
    }
    let runs: Vec<_> = devs
        .iter()
        .zip(hosts)
        .map(|(d, (_, _, qd))| {
            tokio::spawn(run(
                d.clone(),
                load(bench::Pattern::RandRead, 4096, qd, 7000),
                "load",
            ))
        })
        .collect();
    let ops = |t: &Target| [ops_of(t, 2), ops_of(t, 3), ops_of(t, 4)];
    let rates = |t: &Target, before: [u64; 3], secs: f64| {
        let now = ops(t);
        [0, 1, 2].map(|i| (now[i] - before[i]) as f64 / secs)
    };
    // Uncontrolled: the QD 2 host gets about 2/34 of the device.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (b, t0) = (ops(&t.target), Instant::now());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let free = rates(&t.target, b, t0.elapsed().as_secs_f64());
    let capacity: f64 = free.iter().sum();
    let min = (capacity * 0.3) as u64;
    assert!(
        free[0] < min as f64 * 0.5,
        "without a minimum the small host gets little: {free:?}"
    );
    t.target
        .set_qos(
            QosKey::namespace(SUBNQN, 2),
            QosLimits {
                min_iops: Some(min),
                ..QosLimits::default()
            },
        )
        .unwrap();
    // Let the controller converge (a few 100 ms periods), then measure.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (b, t0) = (ops(&t.target), Instant::now());
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let held = rates(&t.target, b, t0.elapsed().as_secs_f64());
    for r in runs {
        assert_eq!(r.await.unwrap().errors, 0);
    }
    assert!(
        held[0] >= min as f64 * 0.9,
        "minimum {min} IOPS (device {capacity:.0}): got {held:?}, before {free:?}"
    );
    assert!(
        held[1] > 20.0 && held[2] > 20.0,
        "the others keep running: {held:?}"
    );
    // The small host's latency must stay low for it to reach its minimum at QD 2, so the
    // device cannot run full (a FIFO queue shared with QD 16 hosts: about 75% here); the
    // controller never lets cutting idle more than half of it (`WORK_LOSS`).
    let total: f64 = held.iter().sum();
    assert!(
        total > capacity * 0.5,
        "the device stays busy: {total:.0} of {capacity:.0}: {held:?} (min {min})"
    );
    let caps = t.target.qos_stats().caps;
    assert!(
        caps.iter().any(|c| c.nsid == 3 && c.cap_iops.is_some()),
        "{caps:?}"
    );
    assert!(
        caps.iter().all(|c| c.nsid != 2 || c.cap_iops.is_none()),
        "the reserved namespace is not capped: {caps:?}"
    );
}
