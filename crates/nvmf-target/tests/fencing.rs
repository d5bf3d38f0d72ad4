//! Preempt and abort fences the preempted host; the Abort admin command aborts commands
//! that have not started. Two hosts over real TCP, a fault-injecting device to hold
//! writes on the "media".

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use blockdev::{FaultAction, FaultHandle, FaultOps, FaultRule, FaultyDevice, RamDevice};
use common::*;
use nvme_proto::opcode::admin;
use nvme_proto::reservation::{
    AcquireData, RegisterData, ReservationAcquire, ReservationRegister, ReservationType, racqa,
    rrega,
};
use nvme_proto::{Command, Status};
use nvmf_target::{NamespaceConfig, TargetConfig};

const NSID: u32 = 2;
const HOST_A: &str = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000001";
const HOST_B: &str = "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-4000-8000-000000000002";
const ID_A: [u8; 16] = [0xA1; 16];
const ID_B: [u8; 16] = [0xB2; 16];
const KEY_A: u64 = 0xAAAA;
const KEY_B: u64 = 0xBBBB;
/// One write: 512 blocks of 512 bytes.
const IO_BYTES: usize = 256 << 10;
const IO_BLOCKS: u32 = (IO_BYTES / 512) as u32;
/// Region `i` starts at this LBA.
fn region_lba(i: u64) -> u64 {
    i * 2 * u64::from(IO_BLOCKS)
}
fn region_bytes(i: u64) -> std::ops::Range<u64> {
    let start = region_lba(i) * 512;
    start..start + IO_BYTES as u64
}

struct Setup {
    t: TestTarget,
    faults: FaultHandle,
    ram: Arc<RamDevice>,
    a_admin: Client,
    a: Client,
    b_admin: Client,
    b: Client,
}

/// Namespace NSID on a fault-injecting RAM device, hosts A and B each with an admin and
/// one I/O queue. A small R2T budget lets a second large write wait for its R2T.
async fn setup(mut cfg: TargetConfig) -> Setup {
    cfg.max_r2t_buffer_bytes = IO_BYTES;
    let t = start_target(cfg).await;
    let ram = Arc::new(RamDevice::new("ram-fence", 16 << 20));
    let faulty = Arc::new(FaultyDevice::new(ram.clone()));
    let faults = faulty.handle();
    t.target
        .add_namespace(SUBNQN, NamespaceConfig::whole_device(NSID, faulty))
        .expect("namespace");
    let a_admin = Client::admin_as(t.addr, SUBNQN, HOST_A, ID_A).await;
    let a = Client::io_queue_of(t.addr, &a_admin, SUBNQN, 1).await;
    let b_admin = Client::admin_as(t.addr, SUBNQN, HOST_B, ID_B).await;
    let b = Client::io_queue_of(t.addr, &b_admin, SUBNQN, 1).await;
    Setup {
        t,
        faults,
        ram,
        a_admin,
        a,
        b_admin,
        b,
    }
}

async fn register(q: &mut Client, key: u64) {
    let cmd = ReservationRegister {
        rrega: rrega::REGISTER,
        iekey: false,
        cptpl: 0,
    }
    .to_command(0, NSID);
    let data = RegisterData {
        crkey: 0,
        nrkey: key,
    }
    .to_bytes();
    assert_eq!(q.expect_status(cmd, Some(&data), 0).await, Status::SUCCESS);
}

fn acquire(action: u8, crkey: u64, prkey: u64) -> (Command, [u8; 16]) {
    let cmd = ReservationAcquire {
        racqa: action,
        iekey: false,
        rtype: ReservationType::WriteExclusive as u8,
    }
    .to_command(0, NSID);
    (cmd, AcquireData { crkey, prkey }.to_bytes())
}

/// A holds a Write Exclusive reservation; B is registered; regions 0..3 hold `base`.
async fn reserve_and_fill(s: &mut Setup, base: &[Vec<u8>]) {
    register(&mut s.a, KEY_A).await;
    register(&mut s.b, KEY_B).await;
    let (cmd, data) = acquire(racqa::ACQUIRE, KEY_A, 0);
    assert_eq!(
        s.a.expect_status(cmd, Some(&data), 0).await,
        Status::SUCCESS
    );
    for (i, p) in base.iter().enumerate() {
        let st =
            s.a.exec(write_cmd(NSID, region_lba(i as u64), IO_BLOCKS), Some(p), 0)
                .await
                .0
                .status;
        assert_eq!(st, Status::SUCCESS);
    }
}

async fn read_region(q: &mut Client, i: u64) -> Vec<u8> {
    let (c, d) = q
        .exec(read_cmd(NSID, region_lba(i), IO_BLOCKS), None, IO_BYTES)
        .await;
    assert_eq!(c.status, Status::SUCCESS);
    d
}

/// Region `i` as it is on the device (bypassing the target).
fn media(ram: &RamDevice, i: u64) -> Vec<u8> {
    let mut v = vec![0u8; IO_BYTES];
    ram.read_at(region_bytes(i).start, &mut v).expect("read_at");
    v
}

/// Waits until a fault rule has fired `n` times (the command reached the device).
async fn wait_hits(faults: &FaultHandle, id: blockdev::RuleId, n: u64) {
    let t0 = Instant::now();
    while faults.hits(id) < n {
        assert!(
            t0.elapsed() < io_timeout(),
            "the write never reached the device"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn preempt_and_abort_fences_the_preempted_host() {
    let mut s = setup(TargetConfig::default()).await;
    let base: Vec<Vec<u8>> = (0..3).map(|i| pattern(IO_BYTES, 100 + i)).collect();
    reserve_and_fill(&mut s, &base).await;

    // W1 reaches the device and is held there.
    let delay = Duration::from_millis(700);
    let rule = s
        .faults
        .add(FaultRule::new(FaultOps::WRITE, FaultAction::Delay(delay)).in_range(region_bytes(0)));
    let p1 = pattern(IO_BYTES, 1);
    let w1 =
        s.a.submit_held(write_cmd(NSID, region_lba(0), IO_BLOCKS), &p1)
            .await;
    s.a.wait_held_r2t(w1).await;
    s.a.release_r2t(w1).await;
    wait_hits(&s.faults, rule, 1).await;
    // W2 got its R2T but its data is not sent; W3 waits for an R2T (budget).
    let w2 =
        s.a.submit_held(
            write_cmd(NSID, region_lba(1), IO_BLOCKS),
            &pattern(IO_BYTES, 2),
        )
        .await;
    s.a.wait_held_r2t(w2).await;
    let w3 =
        s.a.submit_held(
            write_cmd(NSID, region_lba(2), IO_BLOCKS),
            &pattern(IO_BYTES, 3),
        )
        .await;
    // A read after W3 on the same queue: once it completes, W3's capsule was taken.
    let r = s.a.submit(read_cmd(NSID, 5000, 1), None, 512, true).await;
    assert_eq!(s.a.wait_done(r).await.0.status, Status::SUCCESS);
    assert!(!s.a.has_held_r2t(w3), "W3 must still wait for its R2T");

    // B preempts A and aborts A's commands.
    let (cmd, data) = acquire(racqa::PREEMPT_AND_ABORT, KEY_B, KEY_A);
    let t0 = Instant::now();
    let st = s.b.expect_status(cmd, Some(&data), 0).await;
    let took = t0.elapsed();
    assert_eq!(st, Status::SUCCESS);
    // The Acquire waited for W1 on the device: W1 is there, W2 and W3 are not.
    let after: Vec<Vec<u8>> = {
        let mut v = Vec::new();
        for i in 0..3 {
            v.push(read_region(&mut s.b, i).await);
        }
        v
    };
    assert!(
        after[0] == p1,
        "W1 landed before the Acquire completed (took {took:?})"
    );
    assert!(after[1] == base[1], "W2 never started");
    assert!(after[2] == base[2], "W3 never started");

    // A's view: W1 done, W3 aborted at once, W2 aborted when its data arrives.
    assert_eq!(s.a.wait_done(w1).await.0.status, Status::SUCCESS);
    let c3 = s.a.wait_done(w3).await.0;
    assert_eq!(c3.status, Status::ABORTED_PREEMPT_ABORT, "W3");
    s.a.release_r2t(w2).await;
    let c2 = s.a.wait_done(w2).await.0;
    assert_eq!(c2.status, Status::ABORTED_PREEMPT_ABORT, "W2");
    // A's later writes conflict.
    let st =
        s.a.expect_status(
            write_cmd(NSID, region_lba(1), IO_BLOCKS),
            Some(&pattern(IO_BYTES, 4)),
            0,
        )
        .await;
    assert_eq!(st, Status::RESERVATION_CONFLICT.dnr());

    // Nothing A sent lands later.
    tokio::time::sleep(delay).await;
    for (i, before) in after.iter().enumerate() {
        assert!(
            read_region(&mut s.b, i as u64).await == *before,
            "region {i} changed after the Acquire"
        );
    }
    assert!(media(&s.ram, 1) == base[1]);
    drop((s.a_admin, s.b_admin, s.t));
}

#[tokio::test]
async fn preempt_and_abort_waits_for_commands_of_a_closed_connection() {
    let mut s = setup(TargetConfig::default()).await;
    let base: Vec<Vec<u8>> = (0..1).map(|i| pattern(IO_BYTES, 200 + i)).collect();
    reserve_and_fill(&mut s, &base).await;
    let delay = Duration::from_millis(500);
    let rule = s
        .faults
        .add(FaultRule::new(FaultOps::WRITE, FaultAction::Delay(delay)).in_range(region_bytes(0)));
    let p1 = pattern(IO_BYTES, 9);
    let w1 =
        s.a.submit_held(write_cmd(NSID, region_lba(0), IO_BLOCKS), &p1)
            .await;
    s.a.wait_held_r2t(w1).await;
    s.a.release_r2t(w1).await;
    wait_hits(&s.faults, rule, 1).await;
    // A's queue goes away with W1 on the device (e.g. the host was cut off).
    drop(s.a);
    drop(s.a_admin);
    let (cmd, data) = acquire(racqa::PREEMPT_AND_ABORT, KEY_B, KEY_A);
    assert_eq!(
        s.b.expect_status(cmd, Some(&data), 0).await,
        Status::SUCCESS
    );
    // W1 was not dropped half-way: it finished before the Acquire did.
    let now = read_region(&mut s.b, 0).await;
    assert!(now == p1, "W1 finished before the Acquire completed");
    tokio::time::sleep(delay).await;
    assert!(read_region(&mut s.b, 0).await == now);
    drop((s.b_admin, s.t));
}

#[tokio::test]
async fn preempt_and_abort_times_out_with_command_interrupted() {
    let cfg = TargetConfig {
        preempt_abort_timeout_ms: 150,
        ..TargetConfig::default()
    };
    let mut s = setup(cfg).await;
    let base = vec![pattern(IO_BYTES, 300)];
    reserve_and_fill(&mut s, &base).await;
    let rule = s.faults.add(
        FaultRule::new(FaultOps::WRITE, FaultAction::Delay(Duration::from_secs(2)))
            .in_range(region_bytes(0)),
    );
    let w1 =
        s.a.submit_held(
            write_cmd(NSID, region_lba(0), IO_BLOCKS),
            &pattern(IO_BYTES, 5),
        )
        .await;
    s.a.wait_held_r2t(w1).await;
    s.a.release_r2t(w1).await;
    wait_hits(&s.faults, rule, 1).await;
    let (cmd, data) = acquire(racqa::PREEMPT_AND_ABORT, KEY_B, KEY_A);
    let t0 = Instant::now();
    let st = s.b.expect_status(cmd, Some(&data), 0).await;
    assert!(t0.elapsed() < Duration::from_secs(2), "bounded wait");
    assert_eq!((st.sct, st.sc), (0, 0x21), "Command Interrupted");
    // The preemption itself stands: A is fenced off for new writes.
    let st =
        s.a.expect_status(
            write_cmd(NSID, region_lba(1), IO_BLOCKS),
            Some(&pattern(IO_BYTES, 6)),
            0,
        )
        .await;
    assert_eq!(st, Status::RESERVATION_CONFLICT.dnr());
    assert_eq!(s.a.wait_done(w1).await.0.status, Status::SUCCESS);
    drop((s.a_admin, s.b_admin, s.b, s.t, s.ram));
}

fn abort_cmd(sqid: u16, cid: u16) -> Command {
    let mut c = Command::new(admin::ABORT, 0, 0);
    c.set_cdw10(u32::from(sqid) | (u32::from(cid) << 16));
    c
}

#[tokio::test]
async fn abort_command_aborts_commands_that_have_not_started() {
    let mut s = setup(TargetConfig::default()).await;
    let base: Vec<Vec<u8>> = (0..4).map(|i| pattern(IO_BYTES, 400 + i)).collect();
    for (i, p) in base.iter().enumerate() {
        let st =
            s.a.exec(write_cmd(NSID, region_lba(i as u64), IO_BLOCKS), Some(p), 0)
                .await
                .0
                .status;
        assert_eq!(st, Status::SUCCESS);
    }
    // Running on the device: not abortable.
    let rule = s.faults.add(
        FaultRule::new(
            FaultOps::WRITE,
            FaultAction::Delay(Duration::from_millis(300)),
        )
        .in_range(region_bytes(0)),
    );
    let running =
        s.a.submit_held(
            write_cmd(NSID, region_lba(0), IO_BLOCKS),
            &pattern(IO_BYTES, 10),
        )
        .await;
    s.a.wait_held_r2t(running).await;
    s.a.release_r2t(running).await;
    wait_hits(&s.faults, rule, 1).await;
    // R2T sent, data held back.
    let held =
        s.a.submit_held(
            write_cmd(NSID, region_lba(1), IO_BLOCKS),
            &pattern(IO_BYTES, 11),
        )
        .await;
    s.a.wait_held_r2t(held).await;
    // Waiting for an R2T.
    let queued =
        s.a.submit_held(
            write_cmd(NSID, region_lba(2), IO_BLOCKS),
            &pattern(IO_BYTES, 12),
        )
        .await;
    let r = s.a.submit(read_cmd(NSID, 5000, 1), None, 512, true).await;
    assert_eq!(s.a.wait_done(r).await.0.status, Status::SUCCESS);

    let dw0 = |c: nvme_proto::Completion| {
        assert_eq!(c.status, Status::SUCCESS);
        c.dw0 & 1
    };
    let (c, _) = s.a_admin.exec(abort_cmd(1, queued), None, 0).await;
    assert_eq!(dw0(c), 0, "queued command aborted");
    assert_eq!(
        s.a.wait_done(queued).await.0.status,
        Status::ABORT_REQUESTED
    );
    let (c, _) = s.a_admin.exec(abort_cmd(1, held), None, 0).await;
    assert_eq!(dw0(c), 0, "command waiting for data aborted");
    let (c, _) = s.a_admin.exec(abort_cmd(1, running), None, 0).await;
    assert_eq!(dw0(c), 1, "a running command is not aborted");
    let (c, _) = s.a_admin.exec(abort_cmd(1, 999), None, 0).await;
    assert_eq!(dw0(c), 1, "unknown CID");
    let (c, _) = s.a_admin.exec(abort_cmd(7, 1), None, 0).await;
    assert_eq!(dw0(c), 1, "unknown SQID");
    let (c, _) = s.a_admin.exec(abort_cmd(0, 999), None, 0).await;
    assert_eq!(dw0(c), 1, "admin queue, unknown CID");

    s.a.release_r2t(held).await;
    assert_eq!(s.a.wait_done(held).await.0.status, Status::ABORT_REQUESTED);
    assert_eq!(s.a.wait_done(running).await.0.status, Status::SUCCESS);
    // The aborted writes never reached the media; the queue still works.
    for i in [1u64, 2] {
        assert!(media(&s.ram, i) == base[i as usize]);
    }
    let p = pattern(IO_BYTES, 13);
    let st =
        s.a.exec(write_cmd(NSID, region_lba(3), IO_BLOCKS), Some(&p), 0)
            .await
            .0
            .status;
    assert_eq!(st, Status::SUCCESS);
    assert!(read_region(&mut s.a, 3).await == p);
    // The error log records the aborted commands.
    let mut gl = Command::new(admin::GET_LOG_PAGE, 0, 0);
    gl.set_cdw10(u32::from(nvme_proto::log::lid::ERROR_INFO) | ((64 / 4 - 1) << 16));
    let (_, elog) = s.a_admin.exec(gl, None, 64).await;
    let newest = nvme_proto::log::ErrorInfoEntry::decode(&elog).expect("entry");
    assert_eq!(newest.status.sc, Status::ABORT_REQUESTED.sc);
    drop((s.b_admin, s.b, s.t));
}
