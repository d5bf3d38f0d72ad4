//! Admin commands, Connect statuses, keep-alive, AER, discovery, namespace management,
//! reservations dispatch and the health counters.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use nvme_proto::fabrics::{ConnectCommand, ConnectData, DISCOVERY_NQN, InvalidParameter};
use nvme_proto::features::{AerEvent, GetFeatures, NumberOfQueues, SetFeatures, aec, fid};
use nvme_proto::identify::{CtrlList, IdentifyController, NsMgmtCreate, cns};
use nvme_proto::log::{DiscoveryLog, DiscoveryLogHeader, GetLogPageCommand, SmartLog, lid};
use nvme_proto::opcode::{admin, io};
use nvme_proto::{Command, Status};
use nvmf_target::{
    CreateNamespace, DiscoveryControllerType, DiscoveryLogEntry, DiscoveryLogSource,
    DiscoverySnapshot, HostRef, NamespaceConfig, NamespaceManager, Reservations, ResvEffects,
    SubsystemAccess, SubsystemConfig, Target, TargetConfig,
};

fn get_log(l: u8, offset: u64, len: u64) -> Command {
    GetLogPageCommand::new(l, 0, offset, len).to_command(0)
}

#[tokio::test]
async fn connect_statuses() {
    let t = start_target(TargetConfig::default()).await;
    let other = "nqn.2026-01.io.ferrobay:test:private";
    t.target
        .add_subsystem(SubsystemConfig {
            allow_any_host: false,
            allowed_hosts: vec![
                "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-0000-0000-000000000000".into(),
            ],
            ..SubsystemConfig::new(other)
        })
        .expect("subsystem");
    let mut c = Client::tcp(t.addr).await;
    c.icreq(false, false).await;
    // Host not allowed.
    let r = c.fabrics_connect(0, 31, 0, other, HOSTNQN, 0xFFFF).await;
    assert_eq!(r.status, Status::CONNECT_INVALID_HOST.dnr());
    // An empty host NQN (SPDK's perf sends one) is no host on an access list...
    let r = c.fabrics_connect(0, 31, 0, other, "", 0xFFFF).await;
    assert_eq!(r.status, Status::CONNECT_INVALID_HOST.dnr());
    // ...a malformed one is an invalid parameter (HOSTNQN at data offset 512)...
    let r = c
        .fabrics_connect(0, 31, 0, SUBNQN, "not-an-nqn", 0xFFFF)
        .await;
    assert_eq!(r.status, Status::CONNECT_INVALID_PARAMETERS.dnr());
    assert_eq!(
        InvalidParameter::from_dw0(r.dw0),
        InvalidParameter::data(512)
    );
    // ...and a subsystem open to any host admits it, like the Linux and SPDK targets.
    let mut e = Client::tcp(t.addr).await;
    e.icreq(false, false).await;
    let r = e.fabrics_connect(0, 31, 0, SUBNQN, "", 0xFFFF).await;
    assert_eq!(r.status, Status::SUCCESS);
    // Unknown subsystem: invalid parameters pointing at SUBNQN in the data.
    let r = c
        .fabrics_connect(0, 31, 0, "nqn.2026-01.io.ferrobay:nope", HOSTNQN, 0xFFFF)
        .await;
    assert_eq!(r.status, Status::CONNECT_INVALID_PARAMETERS.dnr());
    assert_eq!(
        InvalidParameter::from_dw0(r.dw0),
        InvalidParameter::data(256)
    );
    // SQSIZE above MQES.
    let r = c.fabrics_connect(0, 500, 0, SUBNQN, HOSTNQN, 0xFFFF).await;
    assert_eq!(InvalidParameter::from_dw0(r.dw0), InvalidParameter::sqe(44));
    // I/O queue for a controller that does not exist.
    let r = c.fabrics_connect(1, 31, 0, SUBNQN, HOSTNQN, 999).await;
    assert_eq!(r.status, Status::CONNECT_INVALID_PARAMETERS.dnr());
    assert_eq!(
        InvalidParameter::from_dw0(r.dw0),
        InvalidParameter::data(16)
    );
    // Admin connect then I/O connect with another host NQN.
    let a = Client::admin(t.addr, SUBNQN, 0).await;
    let mut q = Client::tcp(t.addr).await;
    q.icreq(false, false).await;
    let r = q
        .fabrics_connect(
            1,
            31,
            0,
            SUBNQN,
            "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-0000-0000-000000000000",
            a.cntlid,
        )
        .await;
    assert_eq!(
        InvalidParameter::from_dw0(r.dw0),
        InvalidParameter::data(512)
    );
    // QID beyond what Number of Queues granted.
    let r = q
        .fabrics_connect(65, 31, 0, SUBNQN, HOSTNQN, a.cntlid)
        .await;
    assert_eq!(InvalidParameter::from_dw0(r.dw0), InvalidParameter::sqe(42));
    // Unsupported record format.
    let cmd = ConnectCommand {
        recfmt: 1,
        qid: 0,
        sqsize: 31,
        cattr: 0,
        kato_ms: 0,
    }
    .to_command(0);
    let data = ConnectData {
        hostid: HOSTID,
        cntlid: 0xFFFF,
        subnqn: SUBNQN.into(),
        hostnqn: HOSTNQN.into(),
    }
    .to_bytes();
    assert_eq!(
        q.expect_status(cmd, Some(&data), 0).await,
        Status::CONNECT_INCOMPATIBLE_FORMAT.dnr()
    );
    // Two admin connections get distinct controller IDs.
    let b = Client::admin(t.addr, SUBNQN, 0).await;
    assert_ne!(a.cntlid, b.cntlid);
}

/// The SMART log's temperature and spare are the drives' own (through the node layer's
/// source) or not reported: never a made-up value.
#[tokio::test]
async fn smart_temperature_and_spare_come_from_the_drives() {
    struct Drives(Mutex<Vec<String>>);
    impl nvmf_target::MediaHealthSource for Drives {
        fn media_health(&self, subnqn: &str) -> nvmf_target::MediaHealth {
            self.0.lock().expect("lock").push(subnqn.to_string());
            nvmf_target::MediaHealth {
                composite_temperature_k: Some(318),
                available_spare: Some(nvmf_target::AvailableSpare {
                    pct: 7,
                    threshold_pct: 10,
                }),
            }
        }
    }
    let (t, mut a, _q) = setup(TargetConfig::default()).await;
    let (c, smart) = a.exec(get_log(lid::SMART_HEALTH, 0, 512), None, 512).await;
    assert_eq!(c.status, Status::SUCCESS);
    let log = SmartLog::decode(&smart).expect("SMART log");
    assert_eq!(
        (
            log.composite_temperature_k,
            log.available_spare_pct,
            log.available_spare_threshold_pct,
            log.critical_warning
        ),
        (0, 0, 0, 0),
        "without drive readings: not reported"
    );
    let drives = Arc::new(Drives(Mutex::new(Vec::new())));
    t.target.set_media_health_source(drives.clone());
    let (c, smart) = a.exec(get_log(lid::SMART_HEALTH, 0, 512), None, 512).await;
    assert_eq!(c.status, Status::SUCCESS);
    let log = SmartLog::decode(&smart).expect("SMART log");
    assert_eq!(
        (
            log.composite_temperature_k,
            log.available_spare_pct,
            log.available_spare_threshold_pct
        ),
        (318, 7, 10)
    );
    assert_eq!(
        log.critical_warning,
        nvme_proto::log::smart::critical_warning::SPARE_BELOW_THRESHOLD
    );
    assert_eq!(*drives.0.lock().expect("lock"), [SUBNQN]);
}

#[tokio::test]
async fn cntlid_range_is_respected() {
    let cfg = TargetConfig {
        cntlid_min: 1000,
        cntlid_max: 1001,
        ..TargetConfig::default()
    };
    let t = start_target(cfg).await;
    let a = Client::admin(t.addr, SUBNQN, 0).await;
    let b = Client::admin(t.addr, SUBNQN, 0).await;
    let mut ids = [a.cntlid, b.cntlid];
    ids.sort();
    assert_eq!(ids, [1000, 1001]);
    let mut c = Client::tcp(t.addr).await;
    c.icreq(false, false).await;
    let r = c.fabrics_connect(0, 31, 0, SUBNQN, HOSTNQN, 0xFFFF).await;
    assert_eq!(r.status, Status::CONNECT_CONTROLLER_BUSY);
}

#[tokio::test]
async fn keep_alive_expiry_tears_down_the_controller() {
    let t = start_target(TargetConfig::default()).await;
    let mut a = Client::admin(t.addr, SUBNQN, 1000).await;
    let mut q = Client::io_queue(t.addr, a.cntlid, 1, false, false).await;
    // Keep alives keep it up.
    // (The I/O queue is idle all along: only Keep Alive restarts the timer.)
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(
            a.expect_status(Command::new(admin::KEEP_ALIVE, 0, 0), None, 0)
                .await,
            Status::SUCCESS
        );
    }
    // Then silence: both queues are closed.
    let silent = std::time::Instant::now();
    assert!(a.recv_pdu().await.is_none(), "admin queue closed");
    assert!(
        silent.elapsed() >= Duration::from_millis(900),
        "not before KATO"
    );
    assert!(q.recv_pdu().await.is_none(), "I/O queue closed");
    assert!(t.target.controllers(SUBNQN).is_empty());
}

#[tokio::test]
async fn aer_on_namespace_add_and_changed_ns_log() {
    let t = start_target(TargetConfig::default()).await;
    let mut a = Client::admin(t.addr, SUBNQN, 0).await;
    let s = SetFeatures {
        nsid: 0,
        fid: fid::ASYNC_EVENT_CONFIG,
        sv: false,
        cdw11: aec::NS_ATTRIBUTE,
        cdw12: 0,
        uuid_index: 0,
    };
    assert_eq!(
        a.expect_status(s.to_command(0), None, 0).await,
        Status::SUCCESS
    );
    let aer_cid = a
        .submit(
            Command::new(admin::ASYNC_EVENT_REQUEST, 0, 0),
            None,
            0,
            true,
        )
        .await;
    let dev = Arc::new(blockdev::RamDevice::new("ram1", 8 << 20));
    let nsid = t
        .target
        .add_namespace(SUBNQN, NamespaceConfig::whole_device(0, dev))
        .expect("ns");
    assert_eq!(nsid, 2);
    match a.next_event().await {
        Event::Done(c, _) => {
            assert_eq!(c.cid, aer_cid);
            assert_eq!(c.status, Status::SUCCESS);
            assert_eq!(c.dw0, AerEvent::ns_attribute_changed().to_dw0());
        }
        e => panic!("{e:?}"),
    }
    let (c, data) = a
        .exec(get_log(lid::CHANGED_NS_LIST, 0, 4096), None, 4096)
        .await;
    assert_eq!(c.status, Status::SUCCESS);
    assert_eq!(&data[..8], &[2, 0, 0, 0, 0, 0, 0, 0]);
    // Read again: cleared.
    let (_, data) = a
        .exec(get_log(lid::CHANGED_NS_LIST, 0, 4096), None, 4096)
        .await;
    assert!(data.iter().all(|&b| b == 0));
    // The new namespace is active; removal raises the event again.
    let (_, list) = a
        .exec(identify_cmd(cns::ACTIVE_NS_LIST, 0), None, 4096)
        .await;
    assert_eq!(&list[..8], &[1, 0, 0, 0, 2, 0, 0, 0]);
    a.submit(
        Command::new(admin::ASYNC_EVENT_REQUEST, 0, 0),
        None,
        0,
        true,
    )
    .await;
    t.target.remove_namespace(SUBNQN, 2).expect("remove");
    match a.next_event().await {
        Event::Done(c, _) => assert_eq!(c.dw0, AerEvent::ns_attribute_changed().to_dw0()),
        e => panic!("{e:?}"),
    }
    // AER limit: AERL + 1 = 4 outstanding.
    submit_aers(&mut a, 4).await;
    assert_aer_limit_reached(&mut a).await;
}

/// Sends `n` Asynchronous Event Requests (they stay outstanding).
async fn submit_aers(a: &mut Client, n: usize) {
    for _ in 0..n {
        a.submit(
            Command::new(admin::ASYNC_EVENT_REQUEST, 0, 0),
            None,
            0,
            true,
        )
        .await;
    }
}

/// One more AER is refused with Asynchronous Event Request Limit Exceeded.
async fn assert_aer_limit_reached(a: &mut Client) {
    assert_eq!(
        a.expect_status(Command::new(admin::ASYNC_EVENT_REQUEST, 0, 0), None, 0)
            .await,
        Status::ASYNC_EVENT_LIMIT_EXCEEDED.dnr()
    );
}

#[tokio::test]
async fn discovery_log_filtered_per_host() {
    let t = start_target(TargetConfig::default()).await;
    let private = "nqn.2026-01.io.ferrobay:test:private";
    t.target
        .add_subsystem(SubsystemConfig {
            allow_any_host: false,
            allowed_hosts: vec![
                "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-0000-0000-000000000000".into(),
            ],
            ..SubsystemConfig::new(private)
        })
        .expect("subsystem");
    let mut d = Client::admin(t.addr, DISCOVERY_NQN, 0).await;
    let (c, id) = d.exec(identify_cmd(cns::CONTROLLER, 0), None, 4096).await;
    assert_eq!(c.status, Status::SUCCESS);
    let id = IdentifyController::decode(&id).expect("id");
    assert_eq!(id.cntrltype, 2);
    assert_eq!(id.subnqn, DISCOVERY_NQN);
    // libnvme style: header, then entries from 1024, then header again.
    let (_, hdr) = d.exec(get_log(lid::DISCOVERY, 0, 20), None, 20).await;
    let h = DiscoveryLogHeader::decode(&hdr).expect("hdr");
    let total = 1024 + 1024 * h.numrec as usize;
    let (_, entries) = d
        .exec(
            get_log(lid::DISCOVERY, 1024, (total - 1024) as u64),
            None,
            total - 1024,
        )
        .await;
    let mut full = vec![0u8; 1024];
    full[..20].copy_from_slice(&hdr);
    full.extend_from_slice(&entries);
    let log = DiscoveryLog::decode(&full).expect("log");
    let nqns: Vec<_> = log.entries.iter().map(|e| e.subnqn.as_str()).collect();
    assert!(nqns.contains(&SUBNQN));
    assert!(!nqns.contains(&private), "filtered for this host");
    assert!(nqns.contains(&DISCOVERY_NQN));
    let e = log
        .entries
        .iter()
        .find(|e| e.subnqn == SUBNQN)
        .expect("entry");
    assert_eq!(e.trsvcid, t.addr.port().to_string());
    assert_eq!(e.traddr, "127.0.0.1");
    assert_eq!(e.trtype, 3);
    // The allowed host sees it.
    let mut d2 = Client::tcp(t.addr).await;
    d2.icreq(false, false).await;
    let r = d2
        .fabrics_connect(
            0,
            31,
            0,
            DISCOVERY_NQN,
            "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-0000-0000-000000000000",
            0xFFFF,
        )
        .await;
    assert_eq!(r.status, Status::SUCCESS);
    d2.enable().await;
    let (_, all) = d2.exec(get_log(lid::DISCOVERY, 0, 8192), None, 8192).await;
    let log2 = DiscoveryLog::decode(&all).expect("log");
    assert!(log2.entries.iter().any(|e| e.subnqn == private));
    // Changes bump the generation and raise the discovery AER.
    let s = SetFeatures {
        nsid: 0,
        fid: fid::ASYNC_EVENT_CONFIG,
        sv: false,
        cdw11: aec::DISCOVERY_LOG_CHANGE,
        cdw12: 0,
        uuid_index: 0,
    };
    assert_eq!(
        d.expect_status(s.to_command(0), None, 0).await,
        Status::SUCCESS
    );
    d.submit(
        Command::new(admin::ASYNC_EVENT_REQUEST, 0, 0),
        None,
        0,
        true,
    )
    .await;
    t.target
        .add_subsystem(SubsystemConfig::new("nqn.2026-01.io.ferrobay:test:new"))
        .expect("add");
    match d.next_event().await {
        Event::Done(c, _) => assert_eq!(c.dw0, AerEvent::discovery_log_change().to_dw0()),
        e => panic!("{e:?}"),
    }
    let (_, hdr2) = d.exec(get_log(lid::DISCOVERY, 0, 20), None, 20).await;
    assert!(DiscoveryLogHeader::decode(&hdr2).expect("hdr").genctr > h.genctr);
    // Discovery controllers refuse I/O queues and NVM commands.
    assert_eq!(
        d.expect_status(identify_cmd(cns::NAMESPACE, 1), None, 4096)
            .await,
        Status::INVALID_FIELD.dnr()
    );
}

/// A central discovery controller's source: entries per host, a generation.
#[derive(Default)]
struct TestSource {
    state: Mutex<(u64, Vec<(String, DiscoveryLogEntry)>)>,
}

impl TestSource {
    fn set(&self, entries: Vec<(String, DiscoveryLogEntry)>) {
        let mut s = self.state.lock().expect("lock");
        s.0 += 1;
        s.1 = entries;
    }
}

impl DiscoveryLogSource for TestSource {
    fn snapshot(&self, hostnqn: &str, _local: std::net::SocketAddr) -> DiscoverySnapshot {
        let s = self.state.lock().expect("lock");
        DiscoverySnapshot {
            generation: s.0,
            entries: s
                .1
                .iter()
                .filter(|(h, _)| h == hostnqn)
                .map(|(_, e)| e.clone())
                .collect(),
        }
    }
}

async fn read_discovery_log(d: &mut Client) -> DiscoveryLog {
    let (_, page) = d.exec(get_log(lid::DISCOVERY, 0, 8192), None, 8192).await;
    DiscoveryLog::decode(&page).expect("log")
}

fn remote_entry(subnqn: &str, port: &str) -> DiscoveryLogEntry {
    DiscoveryLogEntry {
        trtype: 3,
        adrfam: 1,
        subtype: 2,
        treq: 0,
        portid: 7,
        cntlid: 0xFFFF,
        asqsz: 32,
        eflags: 0,
        trsvcid: port.into(),
        subnqn: subnqn.into(),
        traddr: "192.0.2.9".into(),
        sectype: 0,
    }
}

/// The seam of a central discovery controller: a source's entries follow the target's
/// own, per host; its generation moves GENCTR; a change notice raises the discovery AER;
/// Identify reports DCTYPE CDC.
#[tokio::test]
async fn discovery_log_source_entries_per_host() {
    let t = start_target(TargetConfig {
        discovery_controller_type: DiscoveryControllerType::Central,
        ..TargetConfig::default()
    })
    .await;
    let source = Arc::new(TestSource::default());
    let other_host = "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-0000-0000-000000000000";
    source.set(vec![
        (
            HOSTNQN.into(),
            remote_entry("nqn.2026-01.io.ferrobay:vol:a", "4420"),
        ),
        (
            other_host.into(),
            remote_entry("nqn.2026-01.io.ferrobay:vol:b", "4421"),
        ),
    ]);
    let mut changes = t.target.discovery_changes();
    t.target.set_discovery_log_source(source.clone());
    assert!(
        changes.has_changed().unwrap(),
        "installing a source is a change"
    );
    let mut d = Client::admin(t.addr, DISCOVERY_NQN, 0).await;
    let (_, id) = d.exec(identify_cmd(cns::CONTROLLER, 0), None, 4096).await;
    assert_eq!(IdentifyController::decode(&id).expect("id").dctype, 2);
    let log = read_discovery_log(&mut d).await;
    let own_generation = t.target.discovery_generation();
    assert_eq!(log.genctr, own_generation + 1, "own + the source's");
    let remote: Vec<_> = log.entries.iter().filter(|e| e.portid == 7).collect();
    assert_eq!(remote.len(), 1, "{:?}", log.entries);
    assert_eq!(remote[0].subnqn, "nqn.2026-01.io.ferrobay:vol:a");
    assert_eq!(remote[0].traddr, "192.0.2.9");
    // After the target's own: the current discovery entry and the local subsystem first.
    assert_eq!(log.entries.last(), Some(remote[0]));
    assert!(log.entries.iter().any(|e| e.subnqn == SUBNQN));
    // A change of the source, announced, reaches a host waiting with an AER.
    let s = SetFeatures {
        nsid: 0,
        fid: fid::ASYNC_EVENT_CONFIG,
        sv: false,
        cdw11: aec::DISCOVERY_LOG_CHANGE,
        cdw12: 0,
        uuid_index: 0,
    };
    assert_eq!(
        d.expect_status(s.to_command(0), None, 0).await,
        Status::SUCCESS
    );
    d.submit(
        Command::new(admin::ASYNC_EVENT_REQUEST, 0, 0),
        None,
        0,
        true,
    )
    .await;
    source.set(vec![
        (
            HOSTNQN.into(),
            remote_entry("nqn.2026-01.io.ferrobay:vol:a", "4420"),
        ),
        (
            HOSTNQN.into(),
            remote_entry("nqn.2026-01.io.ferrobay:vol:c", "4420"),
        ),
    ]);
    t.target.notify_discovery_log_changed();
    match d.next_event().await {
        Event::Done(c, _) => assert_eq!(c.dw0, AerEvent::discovery_log_change().to_dw0()),
        e => panic!("{e:?}"),
    }
    let log2 = read_discovery_log(&mut d).await;
    assert!(log2.genctr > log.genctr);
    let remote: Vec<_> = log2
        .entries
        .iter()
        .filter(|e| e.portid == 7)
        .map(|e| e.subnqn.as_str())
        .collect();
    assert_eq!(
        remote,
        [
            "nqn.2026-01.io.ferrobay:vol:a",
            "nqn.2026-01.io.ferrobay:vol:c"
        ]
    );
    // What the target exports, with access lists, for a node to publish; a node follows
    // the changes.
    changes.borrow_and_update();
    t.target
        .add_subsystem(SubsystemConfig {
            allow_any_host: false,
            allowed_hosts: vec![other_host.into()],
            ..SubsystemConfig::new("nqn.2026-01.io.ferrobay:test:closed")
        })
        .expect("subsystem");
    assert!(changes.has_changed().unwrap());
    // Sorted by NQN.
    assert_eq!(
        t.target.subsystem_access(),
        vec![
            SubsystemAccess {
                nqn: "nqn.2026-01.io.ferrobay:test:closed".into(),
                allow_any_host: false,
                allowed_hosts: vec![other_host.into()],
            },
            SubsystemAccess {
                nqn: SUBNQN.into(),
                allow_any_host: true,
                allowed_hosts: vec![],
            },
        ]
    );
}

#[tokio::test]
async fn features_logs_and_health() {
    let (t, mut a, mut q) = setup(TargetConfig::default()).await;
    let nq = SetFeatures {
        nsid: 0,
        fid: fid::NUMBER_OF_QUEUES,
        sv: false,
        cdw11: NumberOfQueues::from_counts(200, 200).to_dw(),
        cdw12: 0,
        uuid_index: 0,
    };
    let (c, _) = a.exec(nq.to_command(0), None, 0).await;
    assert_eq!(NumberOfQueues::from_dw(c.dw0).sq_count(), 64);
    let kato = SetFeatures {
        nsid: 0,
        fid: fid::KEEP_ALIVE_TIMER,
        sv: false,
        cdw11: 0,
        cdw12: 0,
        uuid_index: 0,
    };
    assert_eq!(
        a.expect_status(kato.to_command(0), None, 0).await,
        Status::SUCCESS
    );
    let g = GetFeatures {
        nsid: 0,
        fid: fid::KEEP_ALIVE_TIMER,
        sel: 0,
        cdw11: 0,
        uuid_index: 0,
    };
    assert_eq!(a.exec(g.to_command(0), None, 0).await.0.dw0, 0);
    let g = GetFeatures {
        nsid: 0,
        fid: fid::HOST_IDENTIFIER,
        sel: 0,
        cdw11: 1,
        uuid_index: 0,
    };
    let (c, hostid) = a.exec(g.to_command(0), None, 16).await;
    assert_eq!(c.status, Status::SUCCESS);
    assert_eq!(hostid, HOSTID);
    let g = GetFeatures {
        nsid: 0,
        fid: 0x55,
        sel: 0,
        cdw11: 0,
        uuid_index: 0,
    };
    assert_eq!(
        a.expect_status(g.to_command(0), None, 0).await,
        Status::INVALID_FIELD.dnr()
    );
    // Move the counters.
    let d = pattern(8192, 4);
    for i in 0..10 {
        assert_eq!(
            q.expect_status(write_cmd(1, i * 16, 16), Some(&d), 0).await,
            Status::SUCCESS
        );
        assert_eq!(
            q.exec(read_cmd(1, i * 16, 16), None, 8192).await.0.status,
            Status::SUCCESS
        );
    }
    assert_eq!(
        q.expect_status(read_cmd(4, 0, 1), None, 512).await,
        Status::INVALID_NAMESPACE.dnr()
    );
    let (c, smart) = a.exec(get_log(lid::SMART_HEALTH, 0, 512), None, 512).await;
    assert_eq!(c.status, Status::SUCCESS);
    let host_reads = u64::from_le_bytes(smart[64..72].try_into().expect("8"));
    let host_writes = u64::from_le_bytes(smart[80..88].try_into().expect("8"));
    assert_eq!((host_reads, host_writes), (10, 10));
    assert_eq!(
        u64::from_le_bytes(smart[32..40].try_into().expect("8")),
        1,
        "data units read"
    );
    assert!(
        u64::from_le_bytes(smart[176..184].try_into().expect("8")) >= 1,
        "error log entries"
    );
    assert_eq!(smart.len(), SmartLog::BYTES);
    // Error log: newest first, the invalid namespace.
    let (c, elog) = a.exec(get_log(lid::ERROR_INFO, 0, 64), None, 64).await;
    assert_eq!(c.status, Status::SUCCESS);
    let e = nvme_proto::log::ErrorInfoEntry::decode(&elog).expect("entry");
    assert_eq!(e.status.sc, Status::INVALID_NAMESPACE.sc);
    assert_eq!(e.sqid, 1);
    assert_eq!(e.nsid, 4);
    // Partial reads and bad offsets.
    let (c, part) = a.exec(get_log(lid::SMART_HEALTH, 64, 16), None, 16).await;
    assert_eq!(c.status, Status::SUCCESS);
    assert_eq!(part, smart[64..80]);
    assert_eq!(
        a.expect_status(get_log(lid::SMART_HEALTH, 2, 16), None, 16)
            .await,
        Status::INVALID_FIELD.dnr()
    );
    assert_eq!(
        a.expect_status(get_log(0x42, 0, 16), None, 16).await,
        Status::INVALID_LOG_PAGE.dnr()
    );
    let (c, fw) = a.exec(get_log(lid::FIRMWARE_SLOT, 0, 512), None, 512).await;
    assert_eq!(c.status, Status::SUCCESS);
    assert_eq!(fw[0] & 0x7, 1);
    let (c, eff) = a
        .exec(
            get_log(lid::COMMANDS_SUPPORTED_EFFECTS, 0, 4096),
            None,
            4096,
        )
        .await;
    assert_eq!(c.status, Status::SUCCESS);
    assert_eq!(eff[1024 + 4 * io::WRITE as usize] & 3, 3);
    // Abort answers "not aborted"; unknown admin opcode.
    assert_eq!(
        a.exec(Command::new(admin::ABORT, 0, 0), None, 0)
            .await
            .0
            .dw0
            & 1,
        1
    );
    assert_eq!(
        a.expect_status(Command::new(0x3F, 0, 0), None, 0).await,
        Status::INVALID_OPCODE.dnr()
    );
    // No namespace manager installed.
    assert_eq!(
        a.expect_status(
            Command::new(admin::NAMESPACE_MANAGEMENT, 0, 0),
            Some(&[0u8; 4096]),
            0
        )
        .await,
        Status::INVALID_OPCODE.dnr()
    );
    // Stats for the metrics endpoint.
    let s = t.target.stats();
    assert_eq!(s.namespaces.len(), 1);
    assert_eq!(s.namespaces[0].stats.read_ops, 10);
    assert_eq!(s.namespaces[0].stats.write_bytes, 10 * 8192);
    assert_eq!(
        s.namespaces[0].stats.latency_buckets.iter().sum::<u64>(),
        20
    );
    assert_eq!(s.connections.len(), 2);
    assert!(
        s.connections
            .iter()
            .any(|c| c.qid == 1 && c.read_ops == 10 && c.errors == 1)
    );
    assert_eq!(s.health.host_read_commands, 10);
    t.target
        .set_persistent_health(nvmf_target::PersistentHealth {
            power_cycles: 7,
            power_on_hours: 100,
            unsafe_shutdowns: 2,
        });
    let (_, smart) = a.exec(get_log(lid::SMART_HEALTH, 0, 512), None, 512).await;
    assert_eq!(
        u64::from_le_bytes(smart[112..120].try_into().expect("8")),
        7
    );
    assert_eq!(
        u64::from_le_bytes(smart[128..136].try_into().expect("8")),
        100
    );
    assert_eq!(
        u64::from_le_bytes(smart[144..152].try_into().expect("8")),
        2
    );
}

/// A namespace manager that carves namespaces out of one RAM device, in order.
struct TestManager {
    dev: Arc<blockdev::RamDevice>,
    next_off: Mutex<u64>,
}

impl NamespaceManager for TestManager {
    fn create(&self, target: &Target, subnqn: &str, req: &CreateNamespace) -> Result<u32, Status> {
        let size = req.size_blocks * u64::from(req.block_size_bytes);
        let mut off = self.next_off.lock().expect("lock");
        if *off + size > DEV_BYTES {
            return Err(Status::NS_INSUFFICIENT_CAPACITY.dnr());
        }
        let dev: Arc<dyn blockdev::BlockDevice> = self.dev.clone();
        let mut cfg = NamespaceConfig::whole_device(0, dev);
        cfg.offset_bytes = *off;
        cfg.size_bytes = size;
        cfg.block_size_bytes = req.block_size_bytes;
        cfg.attached = false;
        let nsid = target
            .add_namespace(subnqn, cfg)
            .map_err(|_| Status::INTERNAL_ERROR)?;
        *off += size;
        Ok(nsid)
    }
    fn delete(&self, target: &Target, subnqn: &str, nsid: u32) -> Result<(), Status> {
        target
            .remove_namespace(subnqn, nsid)
            .map_err(|_| Status::INVALID_NAMESPACE.dnr())
    }
    fn attach(
        &self,
        target: &Target,
        subnqn: &str,
        nsid: u32,
        ctrls: &[u16],
    ) -> Result<(), Status> {
        target.attach_namespace(subnqn, nsid, ctrls).map(|_| ())
    }
    fn detach(
        &self,
        target: &Target,
        subnqn: &str,
        nsid: u32,
        ctrls: &[u16],
    ) -> Result<(), Status> {
        target.detach_namespace(subnqn, nsid, ctrls).map(|_| ())
    }
}

#[tokio::test]
async fn namespace_management_and_attachment() {
    let target = Target::new(TargetConfig::default()).expect("target");
    target
        .add_subsystem(SubsystemConfig::new(SUBNQN))
        .expect("subsystem");
    let dev = Arc::new(blockdev::RamDevice::new("ram0", DEV_BYTES));
    target.set_namespace_manager(Arc::new(TestManager {
        dev,
        next_off: Mutex::new(0),
    }));
    let l = target
        .listen("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("listen");
    let mut a = Client::admin(l.local_addr(), SUBNQN, 0).await;
    let (_, id) = a.exec(identify_cmd(cns::CONTROLLER, 0), None, 4096).await;
    assert_ne!(
        IdentifyController::decode(&id).expect("id").oacs & (1 << 3),
        0
    );
    let create = NsMgmtCreate {
        nsze: 2048,
        ncap: 2048,
        flbas: 1,
        ..NsMgmtCreate::default()
    };
    let (c, _) = a
        .exec(
            Command::new(admin::NAMESPACE_MANAGEMENT, 0, 0),
            Some(&create.to_bytes()[..]),
            0,
        )
        .await;
    assert_eq!(c.status, Status::SUCCESS);
    let nsid = c.dw0;
    assert_eq!(nsid, 1);
    // Allocated but not active yet.
    let (_, list) = a
        .exec(identify_cmd(cns::ACTIVE_NS_LIST, 0), None, 4096)
        .await;
    assert!(list.iter().all(|&b| b == 0));
    let (_, list) = a
        .exec(identify_cmd(cns::ALLOCATED_NS_LIST, 0), None, 4096)
        .await;
    assert_eq!(&list[..4], &[1, 0, 0, 0]);
    // Attach to this controller: AER + active.
    let s = SetFeatures {
        nsid: 0,
        fid: fid::ASYNC_EVENT_CONFIG,
        sv: false,
        cdw11: aec::NS_ATTRIBUTE,
        cdw12: 0,
        uuid_index: 0,
    };
    assert_eq!(
        a.expect_status(s.to_command(0), None, 0).await,
        Status::SUCCESS
    );
    let aer = a
        .submit(
            Command::new(admin::ASYNC_EVENT_REQUEST, 0, 0),
            None,
            0,
            true,
        )
        .await;
    let ctrls = CtrlList {
        ids: vec![a.cntlid],
    }
    .to_bytes();
    let mut att = Command::new(admin::NAMESPACE_ATTACHMENT, 0, nsid);
    att.set_cdw10(0);
    a.submit(att, Some(&ctrls[..]), 0, true).await;
    let mut got_aer = false;
    let mut got_attach = false;
    for _ in 0..2 {
        match a.next_event().await {
            Event::Done(c, _) if c.cid == aer => {
                assert_eq!(c.dw0, AerEvent::ns_attribute_changed().to_dw0());
                got_aer = true;
            }
            Event::Done(c, _) => {
                assert_eq!(c.status, Status::SUCCESS);
                got_attach = true;
            }
            e => panic!("{e:?}"),
        }
    }
    assert!(got_aer && got_attach);
    assert_eq!(
        a.expect_status(att, Some(&ctrls[..]), 0).await,
        Status::NS_ALREADY_ATTACHED.dnr()
    );
    let (_, idns) = a.exec(identify_cmd(cns::NAMESPACE, nsid), None, 4096).await;
    let idns = nvme_proto::identify::IdentifyNamespace::decode(&idns).expect("idns");
    assert_eq!(idns.nsze, 2048);
    assert_eq!(idns.lba_format().lba_bytes(), 4096);
    // I/O works on the new namespace.
    let mut q = Client::io_queue(l.local_addr(), a.cntlid, 1, false, false).await;
    let d = pattern(8192, 8);
    assert_eq!(
        q.expect_status(write_cmd(nsid, 3, 2), Some(&d), 0).await,
        Status::SUCCESS
    );
    assert_eq!(q.exec(read_cmd(nsid, 3, 2), None, 8192).await.1, d);
    // Detach, then delete.
    att.set_cdw10(1);
    assert_eq!(
        a.expect_status(att, Some(&ctrls[..]), 0).await,
        Status::SUCCESS
    );
    assert_eq!(
        q.expect_status(read_cmd(nsid, 3, 2), None, 8192).await,
        Status::INVALID_NAMESPACE.dnr()
    );
    let mut del = Command::new(admin::NAMESPACE_MANAGEMENT, 0, nsid);
    del.set_cdw10(1);
    assert_eq!(a.expect_status(del, None, 0).await, Status::SUCCESS);
    let (_, list) = a
        .exec(identify_cmd(cns::ALLOCATED_NS_LIST, 0), None, 4096)
        .await;
    assert!(list.iter().all(|&b| b == 0));
    // Bad controller list.
    let bad = CtrlList { ids: vec![4242] }.to_bytes();
    let (c, _) = a
        .exec(
            Command::new(admin::NAMESPACE_MANAGEMENT, 0, 0),
            Some(&create.to_bytes()[..]),
            0,
        )
        .await;
    let mut att = Command::new(admin::NAMESPACE_ATTACHMENT, 0, c.dw0);
    att.set_cdw10(0);
    assert_eq!(
        a.expect_status(att, Some(&bad[..]), 0).await,
        Status::CONTROLLER_LIST_INVALID.dnr()
    );
}

/// Records reservation calls and fences writes from hosts other than the holder.
#[derive(Default)]
struct FakeResv {
    holder: Mutex<Option<[u8; 16]>>,
}

impl Reservations for FakeResv {
    fn check_access(&self, host: &HostRef<'_>, opcode: u8) -> Result<(), Status> {
        match *self.holder.lock().expect("lock") {
            Some(h) if h != host.hostid && opcode == io::WRITE => Err(Status::RESERVATION_CONFLICT),
            _ => Ok(()),
        }
    }
    fn register(&self, _: &HostRef<'_>, _: &Command, data: &[u8]) -> Result<ResvEffects, Status> {
        assert_eq!(data.len(), 16);
        Ok(ResvEffects::default())
    }
    fn acquire(&self, host: &HostRef<'_>, _: &Command, _: &[u8]) -> Result<ResvEffects, Status> {
        *self.holder.lock().expect("lock") = Some([0xEE; 16]);
        Ok(ResvEffects {
            aborted_hosts: vec![],
            notify: vec![(host.hostid, 3)],
        })
    }
    fn release(&self, _: &HostRef<'_>, _: &Command, _: &[u8]) -> Result<ResvEffects, Status> {
        *self.holder.lock().expect("lock") = None;
        Ok(ResvEffects::default())
    }
    fn report(&self, _: &HostRef<'_>, _: &Command, max: usize) -> Result<Vec<u8>, Status> {
        Ok(vec![0xAB; max.min(24)])
    }
    fn capabilities(&self) -> u8 {
        0xFF
    }
}

#[tokio::test]
async fn reservation_dispatch_and_access_check() {
    let t = start_target(TargetConfig::default()).await;
    let resv = Arc::new(FakeResv::default());
    let dev = Arc::new(blockdev::RamDevice::new("ram9", 1 << 20));
    let mut cfg = NamespaceConfig::whole_device(9, dev);
    cfg.reservations = Some(resv.clone());
    t.target.add_namespace(SUBNQN, cfg).expect("ns");
    let mut a = Client::admin(t.addr, SUBNQN, 0).await;
    let mut q = Client::io_queue(t.addr, a.cntlid, 1, false, false).await;
    let (_, idns) = a.exec(identify_cmd(cns::NAMESPACE, 9), None, 4096).await;
    assert_eq!(idns[31], 0xFF, "RESCAP from the reservation object");
    assert_eq!(
        q.expect_status(
            Command::new(io::RESERVATION_REGISTER, 0, 9),
            Some(&[0u8; 16]),
            0
        )
        .await,
        Status::SUCCESS
    );
    assert_eq!(
        q.expect_status(
            Command::new(io::RESERVATION_REGISTER, 0, 9),
            Some(&[0u8; 8]),
            0
        )
        .await,
        Status::DATA_SGL_LENGTH_INVALID.dnr()
    );
    let d = pattern(512, 1);
    assert_eq!(
        q.expect_status(write_cmd(9, 0, 1), Some(&d), 0).await,
        Status::SUCCESS
    );
    assert_eq!(
        q.expect_status(
            Command::new(io::RESERVATION_ACQUIRE, 0, 9),
            Some(&[0u8; 16]),
            0
        )
        .await,
        Status::SUCCESS
    );
    assert_eq!(
        q.expect_status(write_cmd(9, 0, 1), Some(&d), 0).await,
        Status::RESERVATION_CONFLICT
    );
    assert_eq!(
        q.exec(read_cmd(9, 0, 1), None, 512).await.0.status,
        Status::SUCCESS
    );
    let mut rep = Command::new(io::RESERVATION_REPORT, 0, 9);
    rep.set_cdw10(5);
    let (c, data) = q.exec(rep, None, 24).await;
    assert_eq!(c.status, Status::SUCCESS);
    assert_eq!(data, vec![0xAB; 24]);
    // The notification went to this host's controller.
    let (c, log) = a
        .exec(get_log(lid::RESERVATION_NOTIFICATION, 0, 64), None, 64)
        .await;
    assert_eq!(c.status, Status::SUCCESS);
    assert_eq!(log[8], 3);
    assert_eq!(u32::from_le_bytes(log[12..16].try_into().expect("4")), 9);
    assert_eq!(
        q.expect_status(
            Command::new(io::RESERVATION_RELEASE, 0, 9),
            Some(&[0u8; 8]),
            0
        )
        .await,
        Status::SUCCESS
    );
    assert_eq!(
        q.expect_status(write_cmd(9, 0, 1), Some(&d), 0).await,
        Status::SUCCESS
    );
    // Namespaces get the built-in state machine by default: register a key (RREGA 0),
    // then a second register with another key conflicts.
    let reg = |key: u8| {
        let mut d = [0u8; 16];
        d[8] = key;
        d
    };
    let c = Command::new(io::RESERVATION_REGISTER, 0, 1);
    assert_eq!(q.expect_status(c, Some(&reg(5)), 0).await, Status::SUCCESS);
    assert_eq!(
        q.expect_status(c, Some(&reg(6)), 0).await.sc,
        Status::RESERVATION_CONFLICT.sc
    );
    // A namespace can opt out with NoReservations.
    let dev = Arc::new(blockdev::RamDevice::new("ram10", 1 << 20));
    let mut cfg = NamespaceConfig::whole_device(10, dev);
    cfg.reservations = Some(Arc::new(nvmf_target::NoReservations));
    t.target.add_namespace(SUBNQN, cfg).expect("ns");
    assert_eq!(
        q.expect_status(
            Command::new(io::RESERVATION_REGISTER, 0, 10),
            Some(&reg(1)),
            0
        )
        .await,
        Status::INVALID_OPCODE.dnr()
    );
}

#[tokio::test]
async fn disconnect_and_shutdown() {
    let (t, mut a, mut q) = setup(TargetConfig::default()).await;
    let disc = nvme_proto::fabrics::Disconnect { recfmt: 0 }.to_command(0);
    assert_eq!(q.expect_status(disc, None, 0).await, Status::SUCCESS);
    assert!(q.recv_pdu().await.is_none(), "disconnected queue closes");
    // The same QID can connect again.
    let mut q2 = Client::io_queue(t.addr, a.cntlid, 1, false, false).await;
    assert_eq!(
        q2.exec(read_cmd(1, 0, 1), None, 512).await.0.status,
        Status::SUCCESS
    );
    // CC.SHN reports shutdown complete.
    use nvme_proto::fabrics::{PropertySize, reg};
    let cc: u64 = 1 | (6 << 16) | (4 << 20) | (1 << 14);
    assert_eq!(a.prop_set(reg::CC, cc).await, Status::SUCCESS);
    let mut shst = 0;
    for _ in 0..50 {
        let (_, csts) = a.prop_get(reg::CSTS, PropertySize::Four).await;
        shst = (csts >> 2) & 3;
        if shst == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(shst, 2);
    t.target.shutdown(Duration::from_secs(5)).await;
    assert_eq!(t.target.connection_count(), 0);
    assert!(a.recv_pdu().await.is_none());
}

#[tokio::test]
async fn media_errors_map_to_status_and_counters() {
    let t = start_target(TargetConfig::default()).await;
    let inner: Arc<dyn blockdev::BlockDevice> = Arc::new(blockdev::RamDevice::new("ram5", 1 << 20));
    let faulty = Arc::new(blockdev::FaultyDevice::new(inner));
    let h = faulty.handle();
    h.add(
        blockdev::FaultRule::new(blockdev::FaultOps::READ, blockdev::FaultAction::Media)
            .in_range(0..4096),
    );
    h.add(
        blockdev::FaultRule::new(blockdev::FaultOps::WRITE, blockdev::FaultAction::Media)
            .in_range(8192..12288),
    );
    t.target
        .add_namespace(SUBNQN, NamespaceConfig::whole_device(5, faulty))
        .expect("ns");
    let mut a = Client::admin(t.addr, SUBNQN, 0).await;
    let mut q = Client::io_queue(t.addr, a.cntlid, 1, false, false).await;
    assert_eq!(
        q.expect_status(read_cmd(5, 0, 1), None, 512).await,
        Status::UNRECOVERED_READ_ERROR
    );
    let d = pattern(512, 1);
    assert_eq!(
        q.expect_status(write_cmd(5, 16, 1), Some(&d), 0).await,
        Status::WRITE_FAULT
    );
    assert_eq!(
        q.expect_status(write_cmd(5, 100, 1), Some(&d), 0).await,
        Status::SUCCESS
    );
    let (_, smart) = a.exec(get_log(lid::SMART_HEALTH, 0, 512), None, 512).await;
    assert_eq!(
        u64::from_le_bytes(smart[160..168].try_into().expect("8")),
        2,
        "media errors"
    );
    let (_, elog) = a.exec(get_log(lid::ERROR_INFO, 0, 128), None, 128).await;
    let newest = nvme_proto::log::ErrorInfoEntry::decode(&elog[..64]).expect("entry");
    assert_eq!(newest.status.sc, Status::WRITE_FAULT.sc);
    assert_eq!(newest.lba, 16);
    assert_eq!(newest.nsid, 5);
    let older = nvme_proto::log::ErrorInfoEntry::decode(&elog[64..]).expect("entry");
    assert_eq!(older.status.sc, Status::UNRECOVERED_READ_ERROR.sc);
    assert!(newest.error_count > older.error_count);
    let s = t.target.stats();
    let ns5 = s.namespaces.iter().find(|n| n.nsid == 5).expect("ns5");
    assert_eq!((ns5.stats.errors, ns5.stats.media_errors), (2, 2));
}

#[tokio::test]
async fn discovery_only_listener() {
    let t = start_target(TargetConfig::default()).await;
    let l = t
        .target
        .listen_with(
            "127.0.0.1:0".parse().expect("addr"),
            nvmf_target::ListenerOptions {
                discovery_only: true,
                ..Default::default()
            },
        )
        .await
        .expect("listen");
    // NVM subsystems are not served there.
    let mut c = Client::tcp(l.local_addr()).await;
    c.icreq(false, false).await;
    let r = c.fabrics_connect(0, 31, 0, SUBNQN, HOSTNQN, 0xFFFF).await;
    assert_eq!(r.status, Status::CONNECT_INVALID_PARAMETERS.dnr());
    // Discovery is, and its log points at the I/O listener only.
    let mut d = Client::admin(l.local_addr(), DISCOVERY_NQN, 0).await;
    let (_, all) = d.exec(get_log(lid::DISCOVERY, 0, 8192), None, 8192).await;
    let log = DiscoveryLog::decode(&all).expect("log");
    let ports: Vec<_> = log
        .entries
        .iter()
        .filter(|e| e.subnqn == SUBNQN)
        .map(|e| e.trsvcid.clone())
        .collect();
    assert_eq!(ports, vec![t.addr.port().to_string()]);
    l.close();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        tokio::net::TcpStream::connect(l.local_addr())
            .await
            .is_err()
            || {
                // The port may linger in the kernel briefly; a new connection must at least not be served.
                let mut c = Client::tcp(l.local_addr()).await;
                c.send_raw(&[0u8; 128]).await;
                c.recv_pdu().await.is_none()
            }
    );
}

/// SPDK cancels its outstanding AERs locally at detach and reuses their CIDs for the
/// shutdown Property Set: the target forgets the AER and serves the new command instead
/// of killing the admin connection. A CID reused while a non-AER command runs is still a
/// fatal error (tests/bad_input.rs).
#[tokio::test]
async fn reusing_the_cid_of_an_outstanding_aer_retires_it() {
    let t = start_target(TargetConfig::default()).await;
    let mut a = Client::admin(t.addr, SUBNQN, 0).await;
    let aer_cid = a
        .submit(
            Command::new(admin::ASYNC_EVENT_REQUEST, 0, 0),
            None,
            0,
            true,
        )
        .await;
    // Same CID again, now an Identify Controller.
    let mut id = identify_cmd(cns::CONTROLLER, 0);
    id.set_cid(aer_cid);
    id.set_sgl1(nvme_proto::sgl::SglDescriptor::transport(4096));
    a.submit_raw(id, &[]).await;
    let (c, data) = tokio::time::timeout(io_timeout(), a.wait_done(aer_cid))
        .await
        .expect("the reused CID got no answer");
    assert_eq!(c.status, Status::SUCCESS);
    assert_eq!(data.len(), 4096);
    // The connection is alive and the retired AER gave its place back: AERL + 1 = 4
    // new AERs wait (none completes), the fifth is refused.
    submit_aers(&mut a, 4).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(300), a.next_event())
            .await
            .is_err(),
        "an AER completed: the retired one still held a place"
    );
    assert_aer_limit_reached(&mut a).await;
}
