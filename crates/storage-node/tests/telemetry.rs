//! Drive telemetry on a real node: I/O from the project's initiator over NVMe/TCP is
//! counted per drive and per namespace (operations, bytes, latency per class), sampled into
//! the series, graded, and read back through the extended SMART (C0h) and Telemetry
//! Host-Initiated (07h) log pages.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::Path;

use ::telemetry::{Grade, OpClass};
use blockdev::{BlockDevice, IoBuf, WriteFlags};
use nvme_proto::log::ext_smart::kind;
use nvme_proto::log::telemetry::LSP_CREATE;
use nvme_proto::log::{ExtSmartLog, GetLogPageCommand, TelemetryHeader, lid};
use nvmf_host::{ConnectOptions, HostIdentity, NvmeTcpUrl, RemoteNamespace};
use storage_node::{NodeConfig, StorageNode, parse_node_drive};

const NQN: &str = "nqn.2026-01.io.ferrobay:n1:d0";

fn config(dir: &Path) -> NodeConfig {
    let mut cfg = NodeConfig::new("n1", dir.join("data"));
    cfg.listen = vec!["127.0.0.1:0".parse().unwrap()];
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
