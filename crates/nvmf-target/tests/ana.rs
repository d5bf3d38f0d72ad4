//! Asymmetric Namespace Access over TCP: Identify fields, the ANA log per listener (with
//! RGO and change counts), ANA change events and the path statuses on I/O.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use nvme_proto::features::{AerEvent, SetFeatures, aec, fid};
use nvme_proto::identify::controller::bits as cbits;
use nvme_proto::identify::{IdentifyController, IdentifyNamespace, cns};
use nvme_proto::log::{AnaLog, GetLogPageCommand, ana_state, lid};
use nvme_proto::opcode::{admin, io};
use nvme_proto::{Command, Status};
use nvmf_target::{AnaState, NamespaceConfig, TargetConfig, TargetError};

/// NSID 3 lives in ANA group 2; NSID 1 (from `start_target`) in the default group 1.
const NSID_G2: u32 = 3;

fn ana_log_cmd(rgo: bool, rae: bool) -> Command {
    GetLogPageCommand {
        lsp: u8::from(rgo),
        rae,
        ..GetLogPageCommand::new(lid::ANA, u32::MAX, 0, 4096)
    }
    .to_command(0)
}

async fn ana_log(c: &mut Client, rgo: bool, rae: bool) -> AnaLog {
    let (cqe, data) = c.exec(ana_log_cmd(rgo, rae), None, 4096).await;
    assert_eq!(cqe.status, Status::SUCCESS);
    AnaLog::decode(&data).expect("ANA log")
}

fn state_of(log: &AnaLog, group: u32) -> u8 {
    log.groups
        .iter()
        .find(|g| g.anagrpid == group)
        .map(|g| g.state)
        .unwrap_or_else(|| panic!("group {group} missing from {log:?}"))
}

async fn set_aec(c: &mut Client, bits: u32) {
    let s = SetFeatures {
        nsid: 0,
        fid: fid::ASYNC_EVENT_CONFIG,
        sv: false,
        cdw11: bits,
        cdw12: 0,
        uuid_index: 0,
    };
    assert_eq!(
        c.expect_status(s.to_command(0), None, 0).await,
        Status::SUCCESS
    );
}

/// Expects an ANA change notice for the AER `cid`.
async fn expect_ana_event(c: &mut Client, cid: u16) {
    let (cqe, _) = tokio::time::timeout(Duration::from_secs(5), c.wait_done(cid))
        .await
        .expect("ANA change event");
    assert_eq!(cqe.status, Status::SUCCESS);
    assert_eq!(AerEvent::from_dw0(cqe.dw0), AerEvent::ana_change());
}

/// Expects no completion on `c` for a while (the AER stays outstanding).
async fn expect_quiet(c: &mut Client) {
    let r = tokio::time::timeout(Duration::from_millis(200), c.recv_pdu()).await;
    assert!(r.is_err(), "unexpected PDU: {r:?}");
}

async fn io_status(q: &mut Client, nsid: u32) -> Status {
    q.exec(read_cmd(nsid, 0, 1), None, 512).await.0.status
}

#[tokio::test]
async fn ana_identify_log_events_and_io() {
    let t = start_target(TargetConfig::default()).await;
    let dev = Arc::new(blockdev::RamDevice::new("ram-g2", 1 << 20));
    t.target
        .add_namespace(
            SUBNQN,
            NamespaceConfig::whole_device(NSID_G2, dev).with_ana_group(2),
        )
        .expect("namespace in group 2");
    let l2 = t
        .target
        .listen("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("second listener");
    assert_ne!(l2.port_id(), t.listener.port_id());

    // One host, a controller through each listener (two paths).
    let mut a1 = Client::admin(t.addr, SUBNQN, 0).await;
    let mut q1 = Client::io_queue(t.addr, a1.cntlid, 1, false, false).await;
    let mut a2 = Client::admin(l2.local_addr(), SUBNQN, 0).await;
    let mut q2 = Client::io_queue(l2.local_addr(), a2.cntlid, 1, false, false).await;

    // Identify Controller: ANA reporting and limits the Linux host accepts.
    let (_, idc) = a1.exec(identify_cmd(cns::CONTROLLER, 0), None, 4096).await;
    let id = IdentifyController::decode(&idc).expect("identify");
    assert_ne!(id.cmic & cbits::CMIC_ANA, 0, "CMIC ANA");
    assert_ne!(id.oaes & cbits::OAES_ANA_CHANGE, 0, "OAES ANA change");
    assert_eq!(id.anatt, nvmf_target::ANA_TRANSITION_TIME_S);
    assert_eq!(id.anacap & 0x1F, 0x1F, "every ANA state reported");
    assert_eq!(id.anagrpmax, nvmf_target::ANA_MAX_GROUPS);
    assert!(id.nanagrpid >= 1 && id.nanagrpid <= id.anagrpmax);
    assert!(id.mnan >= 1 && id.mnan <= id.nn, "MNAN in 1..=NN");
    let max_log = 16 + 32 * u64::from(id.nanagrpid) + 4 * u64::from(id.mnan);
    assert!(max_log <= 4096u64 << id.mdts, "largest ANA log within MDTS");
    // Identify Namespace: ANAGRPID.
    for (nsid, group) in [(1, 1), (NSID_G2, 2)] {
        let (_, idn) = a1
            .exec(identify_cmd(cns::NAMESPACE, nsid), None, 4096)
            .await;
        let ns = IdentifyNamespace::decode(&idn).expect("identify ns");
        assert_eq!(ns.anagrpid, group, "NSID {nsid}");
    }

    // The ANA log: both groups optimized, NSIDs listed; RGO leaves them out.
    let log = ana_log(&mut a1, false, false).await;
    assert_eq!(log.chgcnt, 0);
    assert_eq!(log.groups.len(), 2);
    assert_eq!(log.groups[0].anagrpid, 1);
    assert_eq!(log.groups[0].nsids, vec![1]);
    assert_eq!(log.groups[1].anagrpid, 2);
    assert_eq!(log.groups[1].nsids, vec![NSID_G2]);
    assert!(log.groups.iter().all(|g| g.state == ana_state::OPTIMIZED));
    let rgo = ana_log(&mut a1, true, false).await;
    assert_eq!(rgo.groups.len(), 2);
    assert!(rgo.groups.iter().all(|g| g.nsids.is_empty()));
    // Partial read with an offset, as hosts page through logs.
    let whole = log.to_bytes();
    let mut c = GetLogPageCommand::new(lid::ANA, u32::MAX, 16, 32).to_command(0);
    c.set_nsid(u32::MAX);
    let (cqe, part) = a1.exec(c, None, 32).await;
    assert_eq!(cqe.status, Status::SUCCESS);
    assert_eq!(part, whole[16..48]);

    // ANA change events on: the controller through listener 2 hears about group 2.
    set_aec(&mut a1, aec::NS_ATTRIBUTE | aec::ANA_CHANGE).await;
    set_aec(&mut a2, aec::NS_ATTRIBUTE | aec::ANA_CHANGE).await;
    let aer1 = a1
        .submit(
            Command::new(admin::ASYNC_EVENT_REQUEST, 0, 0),
            None,
            0,
            true,
        )
        .await;
    let aer2 = a2
        .submit(
            Command::new(admin::ASYNC_EVENT_REQUEST, 0, 0),
            None,
            0,
            true,
        )
        .await;
    l2.set_ana_state(2, AnaState::Inaccessible)
        .expect("set state");
    assert_eq!(l2.ana_state(2), AnaState::Inaccessible);
    assert_eq!(
        t.target.ana_state(l2.port_id(), 2),
        Some(AnaState::Inaccessible)
    );
    expect_ana_event(&mut a2, aer2).await;
    expect_quiet(&mut a1).await;

    // Each controller reports its own port's states.
    let log2 = ana_log(&mut a2, false, false).await;
    assert_eq!(state_of(&log2, 2), ana_state::INACCESSIBLE);
    assert_eq!(state_of(&log2, 1), ana_state::OPTIMIZED);
    assert!(log2.chgcnt >= 1);
    let g2 = log2.groups.iter().find(|g| g.anagrpid == 2).expect("g2");
    assert_eq!(g2.chgcnt, log2.chgcnt);
    let log1 = ana_log(&mut a1, false, true).await;
    assert_eq!(state_of(&log1, 2), ana_state::OPTIMIZED);

    // I/O: refused through listener 2 for group 2 only, with the path status (retryable).
    assert_eq!(io_status(&mut q2, NSID_G2).await, Status::ANA_INACCESSIBLE);
    assert_eq!(io_status(&mut q2, 1).await, Status::SUCCESS);
    assert_eq!(io_status(&mut q1, NSID_G2).await, Status::SUCCESS);
    let mut rep = Command::new(io::RESERVATION_REPORT, 0, NSID_G2);
    rep.set_cdw10(15).set_cdw11(1);
    assert_eq!(
        q2.exec(rep, None, 64).await.0.status,
        Status::ANA_INACCESSIBLE,
        "reservation commands follow ANA too"
    );
    let w = pattern(512, 7);
    assert_eq!(
        q2.expect_status(write_cmd(NSID_G2, 0, 1), Some(&w), 0)
            .await,
        Status::ANA_INACCESSIBLE
    );

    // Every state: persistent loss and change (transition) refuse I/O with their status.
    for (state, want, code) in [
        (
            AnaState::PersistentLoss,
            Status::ANA_PERSISTENT_LOSS,
            ana_state::PERSISTENT_LOSS,
        ),
        (AnaState::Change, Status::ANA_TRANSITION, ana_state::CHANGE),
    ] {
        let aer = a2
            .submit(
                Command::new(admin::ASYNC_EVENT_REQUEST, 0, 0),
                None,
                0,
                true,
            )
            .await;
        t.target
            .set_ana_state(l2.port_id(), 2, state)
            .expect("set state");
        expect_ana_event(&mut a2, aer).await;
        // Reading the log (RAE = 0) unmasks the next event.
        assert_eq!(state_of(&ana_log(&mut a2, false, false).await, 2), code);
        assert_eq!(io_status(&mut q2, NSID_G2).await, want);
    }

    // Back to non-optimized: I/O flows again.
    let aer = a2
        .submit(
            Command::new(admin::ASYNC_EVENT_REQUEST, 0, 0),
            None,
            0,
            true,
        )
        .await;
    l2.set_ana_state(2, AnaState::NonOptimized).expect("set");
    expect_ana_event(&mut a2, aer).await;
    let log2 = ana_log(&mut a2, false, false).await;
    assert_eq!(state_of(&log2, 2), ana_state::NON_OPTIMIZED);
    assert_eq!(io_status(&mut q2, NSID_G2).await, Status::SUCCESS);
    // Setting the same state again is no change: no event.
    let aer = a2
        .submit(
            Command::new(admin::ASYNC_EVENT_REQUEST, 0, 0),
            None,
            0,
            true,
        )
        .await;
    l2.set_ana_state(2, AnaState::NonOptimized).expect("set");
    expect_quiet(&mut a2).await;

    // With the ANA bit off in the async event configuration no event is raised.
    set_aec(&mut a2, aec::NS_ATTRIBUTE).await;
    l2.set_ana_state(2, AnaState::Inaccessible).expect("set");
    expect_quiet(&mut a2).await;
    set_aec(&mut a2, aec::NS_ATTRIBUTE | aec::ANA_CHANGE).await;
    l2.set_ana_state(2, AnaState::Optimized).expect("set");
    expect_ana_event(&mut a2, aer).await;

    // A change on listener 1 reaches the controller through it.
    t.listener
        .set_ana_state(1, AnaState::NonOptimized)
        .expect("set");
    expect_ana_event(&mut a1, aer1).await;
    assert_eq!(
        state_of(&ana_log(&mut a1, false, false).await, 1),
        ana_state::NON_OPTIMIZED
    );
    assert_eq!(io_status(&mut q1, 1).await, Status::SUCCESS);

    // Bad arguments.
    assert!(matches!(
        t.target.set_ana_state(0xFFFF, 1, AnaState::Optimized),
        Err(TargetError::NoSuchListener(0xFFFF))
    ));
    assert!(l2.set_ana_state(0, AnaState::Optimized).is_err());
    assert!(
        l2.set_ana_state(nvmf_target::ANA_MAX_GROUPS + 1, AnaState::Optimized)
            .is_err()
    );
    let dev = Arc::new(blockdev::RamDevice::new("ram-bad", 1 << 20));
    assert!(
        t.target
            .add_namespace(
                SUBNQN,
                NamespaceConfig::whole_device(9, dev).with_ana_group(0)
            )
            .is_err()
    );
    // The discovery controller has no ANA log.
    let mut d = Client::admin(t.addr, nvme_proto::fabrics::DISCOVERY_NQN, 0).await;
    assert_eq!(
        d.exec(ana_log_cmd(false, false), None, 4096).await.0.status,
        Status::INVALID_LOG_PAGE.dnr()
    );
}

#[tokio::test]
async fn ana_limits_follow_a_small_mdts() {
    let cfg = TargetConfig {
        mdts_bytes: 4096,
        ..TargetConfig::default()
    };
    let t = start_target(cfg).await;
    let mut a = Client::admin(t.addr, SUBNQN, 0).await;
    let (_, idc) = a.exec(identify_cmd(cns::CONTROLLER, 0), None, 4096).await;
    let id = IdentifyController::decode(&idc).expect("identify");
    assert_eq!(id.mdts, 0);
    assert!(id.mnan >= 1 && id.mnan <= id.nn);
    assert!(id.nanagrpid >= 1);
    let max_log = 16 + 32 * u64::from(id.nanagrpid) + 4 * u64::from(id.mnan);
    assert!(max_log <= 4096, "{max_log}");
    // The target keeps subsystems within MNAN, so the real log always fits.
    for nsid in 2..=id.mnan + 1 {
        let dev = Arc::new(blockdev::RamDevice::new("ram-many", 1 << 20));
        let r = t
            .target
            .add_namespace(SUBNQN, NamespaceConfig::whole_device(nsid, dev));
        assert_eq!(r.is_ok(), nsid <= id.mnan, "NSID {nsid}");
    }
    let log = ana_log_small(&mut a).await;
    assert_eq!(log.groups[0].nsids.len(), id.mnan as usize);
}

async fn ana_log_small(c: &mut Client) -> AnaLog {
    let cmd = GetLogPageCommand::new(lid::ANA, u32::MAX, 0, 4096).to_command(0);
    let (cqe, data) = c.exec(cmd, None, 4096).await;
    assert_eq!(cqe.status, Status::SUCCESS);
    AnaLog::decode(&data).expect("ANA log")
}
