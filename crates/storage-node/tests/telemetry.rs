//! Drive telemetry on a real node: I/O from the project's initiator over NVMe/TCP is
//! counted per drive and per namespace (operations, bytes, latency per class), sampled into
//! the series, graded, and read back through the extended SMART (C0h) and Telemetry
//! Host-Initiated (07h) log pages; and the same figures and the drives' grades through the
//! node's REST API (`/api/v1/telemetry`, `/api/v1/predictions`, `/api/v1/health`), with a
//! drive that returns media errors graded suspect, then failing.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::Path;
use std::sync::{Arc, Mutex};

use ::telemetry::{Grade, OpClass};
use blockdev::{BlockDevice, IoBuf, WriteFlags};
use blockdev::{FaultAction, FaultHandle, FaultOps, FaultRule, FaultyDevice};
use nvme_proto::log::ext_smart::kind;
use nvme_proto::log::telemetry::LSP_CREATE;
use nvme_proto::log::{ExtSmartLog, GetLogPageCommand, TelemetryHeader, lid};
use nvmf_host::{ConnectOptions, HostIdentity, NvmeTcpUrl, RemoteNamespace};
use storage_node::{DriveWrapper, NodeClient, NodeConfig, StorageNode, parse_node_drive};

const NQN: &str = "nqn.2026-01.io.ferrobay:n1:d0";

fn config(dir: &Path) -> NodeConfig {
    let mut cfg = NodeConfig::new("n1", dir.join("data"));
    cfg.listen = vec!["127.0.0.1:0".parse().unwrap()];
    // Not the default port 8009: tests run in parallel.
    cfg.discovery_listen = Some("127.0.0.1:0".parse().unwrap());
    let spec = format!("file:{}:32M", dir.join("d0.img").display());
    cfg.drives = vec![parse_node_drive(&spec).unwrap()];
    cfg
}

async fn open(node: &StorageNode) -> RemoteNamespace {
    let url = format!("nvme+tcp://{}/{NQN}/1", node.nvme_addrs()[0]);
    let host = HostIdentity::from_uuid([7; 16]);
    NvmeTcpUrl::parse(&url)
        .unwrap()
        .open(&host, &ConnectOptions::default())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_is_counted_per_drive_and_namespace_and_served_in_log_pages() {
    let dir = tempfile::tempdir().unwrap();
    let node = StorageNode::start(config(dir.path())).await.unwrap();
    let ns = open(&node).await;
    let mut buf = IoBuf::from_slice(&vec![0x5A; 64 << 10]);
    for i in 0..20u64 {
        buf = ns
            .write(i * (64 << 10), buf, WriteFlags::default())
            .await
            .unwrap();
    }
    for i in 0..10u64 {
        buf = ns.read(i * (64 << 10), buf).await.unwrap();
        assert!(buf.iter().all(|&b| b == 0x5A));
    }
    ns.flush().await.unwrap();

    let view = node.telemetry().view();
    let drive = view
        .sources
        .iter()
        .find(|s| s.source == "drive/d0")
        .unwrap();
    let nsv = view
        .sources
        .iter()
        .find(|s| s.source == format!("ns/{NQN}/1"))
        .unwrap();
    for s in [drive, nsv] {
        assert_eq!(s.counters.ops(OpClass::Write), 20, "{}", s.source);
        assert_eq!(s.counters.ops(OpClass::Read), 10, "{}", s.source);
        assert_eq!(s.counters.write_bytes, 20 * (64 << 10));
        assert_eq!(s.counters.latency(OpClass::Write).count(), 20);
        assert_eq!(s.counters.in_flight, 0);
    }
    assert!(drive.counters.ops(OpClass::Flush) >= 1);
    assert_eq!(nsv.labels["drive"], "d0");

    // Two sampling rounds: the second holds the reads below.
    node.telemetry().tick();
    for i in 0..5u64 {
        buf = ns.read(i * (64 << 10), buf).await.unwrap();
    }
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    node.telemetry().tick();
    let series = node.telemetry().series();
    let d = series.iter().find(|v| v.source == "drive/d0").unwrap();
    assert!(
        d.fine
            .iter()
            .map(|s| s.ops[OpClass::Read as usize])
            .sum::<u64>()
            >= 5,
        "{d:?}"
    );
    let grades = node.telemetry().grades();
    assert_eq!(grades.len(), 1);
    assert_eq!(grades[0].grade, Grade::Ok);
    serde_json::to_string(&node.telemetry().view()).unwrap();

    // The vendor page: the drive and its namespace.
    let ctrl = ns.controller();
    let page = ctrl
        .get_log_page(lid::FERROBAY_EXT_SMART, u32::MAX, 0, 4096)
        .await
        .unwrap();
    let log = ExtSmartLog::decode(&page).unwrap();
    let kinds: Vec<(u8, u32, &str)> = log
        .records
        .iter()
        .map(|r| (r.kind, r.nsid, r.name.as_str()))
        .collect();
    assert_eq!(kinds, [(kind::DRIVE, 0, "d0"), (kind::NAMESPACE, 1, "d0")]);
    let n = &log.records[1];
    assert_eq!(n.ops[1], 20);
    let lat = n.latency.unwrap();
    assert_eq!(lat[1].count, 20);
    assert!(lat[1].p99_us >= lat[1].p50_us && lat[1].max_us >= lat[1].p99_us);
    assert_eq!(log.records[0].grade, Some(0));
    assert_eq!(
        log.records[0].temperature_k, None,
        "a file drive reports none"
    );

    // Telemetry Host-Initiated: capture, then data area 1 holds the same page.
    let head = ctrl
        .get_log_page_with(
            GetLogPageCommand {
                lsp: LSP_CREATE,
                ..GetLogPageCommand::new(lid::TELEMETRY_HOST, 0, 0, 4)
            },
            0,
            512,
        )
        .await
        .unwrap();
    let h = TelemetryHeader::decode(&head).unwrap();
    let area = h.data_area(1).unwrap();
    let data = ctrl
        .get_log_page(lid::TELEMETRY_HOST, 0, area.start as u64, area.len())
        .await
        .unwrap();
    let captured = ExtSmartLog::decode(&data).unwrap();
    assert_eq!(captured.records.len(), 2);
    assert!(captured.records[1].ops[0] >= 15);
    drop(ns);
    node.shutdown().await.unwrap();
}

/// A node whose drive d0 sits behind a fault injector (inside the telemetry meter, so
/// the faults it returns are counted like a real drive's), with its HTTP API.
fn faulty_config(dir: &Path) -> (NodeConfig, Arc<Mutex<Option<FaultHandle>>>) {
    let mut cfg = config(dir);
    cfg.http_listen = Some("127.0.0.1:0".parse().unwrap());
    let handle: Arc<Mutex<Option<FaultHandle>>> = Arc::default();
    let h = handle.clone();
    cfg.wrap_drive = Some(DriveWrapper(Arc::new(move |_name, dev| {
        let faulty = Arc::new(FaultyDevice::new(dev));
        *h.lock().unwrap() = Some(faulty.handle());
        faulty
    })));
    (cfg, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_and_predictions_routes_show_the_io_and_a_failing_drive() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, faults) = faulty_config(dir.path());
    let node = StorageNode::start(cfg).await.unwrap();
    let faults = faults.lock().unwrap().clone().unwrap();
    let api = NodeClient::new(node.http_addr().unwrap().to_string())
        .with_token(Some(node.api_token().as_str().to_string()));
    let ns = open(&node).await;

    // Known I/O: 12 writes of 64 KiB, 7 reads of 64 KiB, one flush.
    let chunk: u64 = 64 << 10;
    let mut buf = IoBuf::from_slice(&vec![0xA7; chunk as usize]);
    for i in 0..12u64 {
        buf = ns
            .write(i * chunk, buf, WriteFlags::default())
            .await
            .unwrap();
    }
    for i in 0..7u64 {
        buf = ns.read(i * chunk, buf).await.unwrap();
    }
    ns.flush().await.unwrap();

    let t = api.telemetry().await.unwrap();
    assert_eq!(t.node, "n1");
    let d0 = t.drives.iter().find(|d| d.drive == "d0").unwrap();
    let n1 = t
        .namespaces
        .iter()
        .find(|n| n.subsystem_nqn == NQN && n.nsid == 1)
        .unwrap();
    assert_eq!(n1.drive, "d0");
    for (what, io) in [("drive", &d0.io), ("namespace", &n1.io)] {
        assert_eq!((io.write.ops, io.write.bytes), (12, 12 * chunk), "{what}");
        assert_eq!((io.read.ops, io.read.bytes), (7, 7 * chunk), "{what}");
        assert!(io.flush.ops >= 1, "{what}: {io:?}");
        assert_eq!(io.write.latency.count, 12, "{what}");
        assert_eq!(io.read.latency.count, 7, "{what}");
        let l = io.write.latency;
        assert!(
            0 < l.p50_us && l.p50_us <= l.p99_us && l.p99_us <= l.p999_us && l.p999_us <= l.max_us,
            "{what}: {l:?}"
        );
        assert_eq!(io.errors.media + io.errors.transport + io.errors.other, 0);
        assert_eq!(io.queue_depth, 0, "{what}: nothing in flight");
        assert!(io.queue_depth_avg >= 1.0, "{what}: {io:?}");
    }
    assert_eq!(
        d0.media.temperature_k, None,
        "a file drive reports no SMART"
    );

    // Graded ok once sampled.
    node.telemetry().tick();
    let p = api.predictions().await.unwrap();
    assert_eq!(p.drives.len(), 1);
    assert_eq!(p.drives[0].drive, "d0");
    assert_eq!(p.drives[0].prediction.grade, Grade::Ok);
    assert_eq!(p.drives[0].prediction.reason, "");
    let ok_since = p.drives[0].prediction.since_unix_ms.unwrap();

    // The drive starts failing reads: the host sees the errors, the route the grade.
    faults.add(FaultRule::new(FaultOps::READ, FaultAction::Media).times(2));
    for i in 0..2u64 {
        let r = ns.read(i * chunk, IoBuf::new_zeroed(chunk as usize)).await;
        assert!(r.is_err(), "read {i} should fail");
    }
    node.telemetry().tick();
    let p = api.predictions().await.unwrap();
    let g = &p.drives[0].prediction;
    assert_eq!(g.grade, Grade::Suspect, "{g:?}");
    assert!(
        g.reason.starts_with("media_errors: 2 media errors"),
        "{g:?}"
    );
    assert_eq!(g.reasons[0].rule, "media_errors");
    assert!(g.since_unix_ms.unwrap() >= ok_since, "{g:?}");
    let t = api.telemetry().await.unwrap();
    assert_eq!(t.drives[0].io.errors.media, 2);
    assert_eq!(
        t.drives[0].prediction.as_ref().unwrap().grade,
        Grade::Suspect
    );

    // More errors in the window: failing, also on the drive's health row.
    faults.add(FaultRule::new(FaultOps::READ, FaultAction::Media).times(6));
    for i in 0..6u64 {
        let _ = ns.read(i * chunk, IoBuf::new_zeroed(chunk as usize)).await;
    }
    node.telemetry().tick();
    let h = api.health().await.unwrap();
    let g = h.drives[0].prediction.as_ref().unwrap();
    assert_eq!(g.grade, Grade::Failing, "{g:?}");
    assert!(g.reason.contains("8 media errors"), "{g:?}");
    let p = api.predictions().await.unwrap();
    assert_eq!(p.drives[0].prediction, *g);
    node.shutdown().await.unwrap();
}
