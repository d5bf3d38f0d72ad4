//! The extended SMART log (vendor LID C0h) and the Telemetry Host-Initiated log (LID 07h)
//! through a real target over TCP: offsets, captures, the node's records or the target's
//! own counters.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use nvme_proto::Status;
use nvme_proto::identify::IdentifyController;
use nvme_proto::identify::cns;
use nvme_proto::identify::controller::bits as cbits;
use nvme_proto::log::ext_smart::{ExtSmartRecord, kind};
use nvme_proto::log::{ExtSmartLog, GetLogPageCommand, TelemetryHeader, lid, telemetry};
use nvme_proto::{Command, Status as S};
use nvmf_target::{TargetConfig, TelemetrySource};

fn get_log(l: u8, nsid: u32, lsp: u8, offset: u64, len: u64) -> Command {
    GetLogPageCommand {
        lsp,
        ..GetLogPageCommand::new(l, nsid, offset, len)
    }
    .to_command(0)
}

async fn read_page(a: &mut Client, l: u8, nsid: u32, lsp: u8, offset: u64, len: usize) -> Vec<u8> {
    let (c, data) = a
        .exec(get_log(l, nsid, lsp, offset, len as u64), None, len)
        .await;
    assert_eq!(c.status, Status::SUCCESS, "log {l:#x} at {offset}");
    data
}

#[tokio::test]
async fn ext_smart_without_a_source_reports_the_target_counters() {
    let (_t, mut a, mut q) = setup(TargetConfig::default()).await;
    let (c, id) = a.exec(identify_cmd(cns::CONTROLLER, 0), None, 4096).await;
    assert_eq!(c.status, Status::SUCCESS);
    let id = IdentifyController::decode(&id).expect("identify");
    assert_ne!(id.lpa & cbits::LPA_TELEMETRY, 0, "LPA advertises telemetry");
    for i in 0..3 {
        let data = pattern(4096, i);
        let (c, _) = q.exec(write_cmd(1, i * 8, 8), Some(&data), 0).await;
        assert_eq!(c.status, Status::SUCCESS);
    }
    let page = read_page(&mut a, lid::FERROBAY_EXT_SMART, u32::MAX, 0, 0, 4096).await;
    let log = ExtSmartLog::decode(&page).expect("a valid page");
    assert_eq!(log.records.len(), 1);
    let r = &log.records[0];
    assert_eq!((r.kind, r.nsid), (kind::NAMESPACE, 1));
    assert_eq!(r.ops[1], 3);
    assert_eq!(r.write_bytes, 3 * 4096);
    assert_eq!(
        r.latency, None,
        "the target alone keeps no per-class latency"
    );
    // A namespace that is not there.
    let (c, _) = a
        .exec(get_log(lid::FERROBAY_EXT_SMART, 9, 0, 0, 512), None, 512)
        .await;
    assert_eq!(c.status, S::INVALID_FIELD.dnr());
}

/// Records the node would give: one drive and its namespace; remembers the questions.
struct NodeRecords(Mutex<Vec<(String, Option<u32>)>>);

impl TelemetrySource for NodeRecords {
    fn ext_smart(&self, subnqn: &str, nsid: Option<u32>) -> ExtSmartLog {
        self.0
            .lock()
            .expect("lock")
            .push((subnqn.to_string(), nsid));
        ExtSmartLog {
            timestamp_ms: 42,
            records: vec![
                ExtSmartRecord {
                    kind: kind::DRIVE,
                    name: "d0".into(),
                    temperature_k: Some(311),
                    percentage_used: Some(4),
                    spare: Some((98, 10)),
                    ops: [1, 2, 3, 4],
                    ..ExtSmartRecord::default()
                },
                ExtSmartRecord {
                    kind: kind::NAMESPACE,
                    nsid: 1,
                    name: "d0".into(),
                    errors: [5, 6, 7],
                    ..ExtSmartRecord::default()
                },
            ],
        }
    }
}

#[tokio::test]
async fn telemetry_host_log_captures_on_request_and_reads_in_pieces() {
    let (t, mut a, _q) = setup(TargetConfig::default()).await;
    let source = Arc::new(NodeRecords(Mutex::new(Vec::new())));
    t.target.set_telemetry_source(source.clone());
    // The vendor page with a namespace asks the source for that namespace.
    let page = read_page(&mut a, lid::FERROBAY_EXT_SMART, 1, 0, 0, 1024).await;
    assert_eq!(
        ExtSmartLog::decode(&page).expect("page").records[0].temperature_k,
        Some(311)
    );
    assert_eq!(
        source.0.lock().expect("lock")[0],
        (SUBNQN.to_string(), Some(1))
    );

    // Header with "create": generation 0 on the first capture.
    let head = read_page(
        &mut a,
        lid::TELEMETRY_HOST,
        0,
        telemetry::LSP_CREATE,
        0,
        512,
    )
    .await;
    let h = TelemetryHeader::decode(&head).expect("header");
    assert_eq!(h.log_identifier, lid::TELEMETRY_HOST);
    assert_eq!(h.host_generation, 0);
    let area = h.data_area(1).expect("data area 1");
    assert_eq!(h.data_area(2), None);
    // Read data area 1 in 512-byte pieces at their offsets, as nvme-cli does.
    let mut data = Vec::new();
    for off in (area.start..area.end).step_by(512) {
        data.extend(read_page(&mut a, lid::TELEMETRY_HOST, 0, 0, off as u64, 512).await);
    }
    let log = ExtSmartLog::decode(&data).expect("data area 1 is the extended SMART page");
    assert_eq!(log.records.len(), 2);
    assert_eq!(log.records[1].errors, [5, 6, 7]);
    let asked = source.0.lock().expect("lock").len();
    assert_eq!(asked, 2, "pieces come from the capture, not a new reading");
    // A new capture bumps the generation.
    let head = read_page(
        &mut a,
        lid::TELEMETRY_HOST,
        0,
        telemetry::LSP_CREATE,
        0,
        512,
    )
    .await;
    assert_eq!(
        TelemetryHeader::decode(&head)
            .expect("header")
            .host_generation,
        1
    );
    // Past the end of the page: the offset is refused.
    let (c, _) = a
        .exec(get_log(lid::TELEMETRY_HOST, 0, 0, 1 << 20, 512), None, 512)
        .await;
    assert_ne!(c.status, Status::SUCCESS);
}
