//! Connect, identify and the read/write path over real TCP.

mod common;

use common::*;
use nvme_proto::fabrics::{Cap, PropertySize, reg};
use nvme_proto::identify::{IdentifyController, IdentifyNamespace, cns};
use nvme_proto::opcode::io;
use nvme_proto::{Command, Status};
use nvmf_target::TargetConfig;

#[tokio::test]
async fn icreq_negotiation_with_and_without_digests() {
    let t = start_target(TargetConfig::default()).await;
    for (hd, dd) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut c = Client::tcp(t.addr).await;
        let r = c.icreq(hd, dd).await;
        assert_eq!(r.pfv, 0);
        assert_eq!(r.cpda, 0);
        assert_eq!(
            (r.digests.header, r.digests.data),
            (hd, dd),
            "digests mirror the ICReq"
        );
        assert!(r.maxh2cdata >= 4096 && r.maxh2cdata % 4 == 0);
        assert_eq!(r.maxh2cdata, 128 << 10);
    }
}

#[tokio::test]
async fn connect_properties_and_identify() {
    let t = start_target(TargetConfig::default()).await;
    let mut a = Client::tcp(t.addr).await;
    a.icreq(true, true).await;
    let r = a
        .fabrics_connect(0, 31, 5000, SUBNQN, HOSTNQN, 0xFFFF)
        .await;
    assert_eq!(r.status, Status::SUCCESS);
    let cntlid = r.dw0 as u16;
    assert!(cntlid >= 1);
    let (st, cap) = a.prop_get(reg::CAP, PropertySize::Eight).await;
    assert_eq!(st, Status::SUCCESS);
    let cap = Cap::from_u64(cap);
    assert_eq!(cap.mqes, 127);
    assert!(cap.cqr);
    assert_eq!(cap.css & Cap::CSS_NVM, Cap::CSS_NVM);
    assert_ne!(cap.css & Cap::CSS_IO_COMMAND_SETS, 0, "NVM and KV offered");
    let (_, vs) = a.prop_get(reg::VS, PropertySize::Four).await;
    assert_eq!(vs, 0x0002_0000);
    // Commands before CC.EN are a sequence error.
    assert_eq!(
        a.expect_status(identify_cmd(cns::CONTROLLER, 0), None, 4096)
            .await,
        Status::COMMAND_SEQUENCE_ERROR
    );
    a.enable().await;
    let (c, data) = a.exec(identify_cmd(cns::CONTROLLER, 0), None, 4096).await;
    assert_eq!(c.status, Status::SUCCESS);
    let id = IdentifyController::decode(&data).expect("identify");
    assert_eq!(id.cntlid, cntlid);
    assert_ne!(id.kas, 0);
    assert!(id.ioccsz >= 4 && id.iorcsz >= 1);
    assert_eq!(id.icdoff, 0);
    assert_ne!(id.sgls & 0x3, 0);
    assert_eq!(id.mdts, 10, "4 MiB in 4 KiB pages");
    assert_eq!(id.cntrltype, 1);
    assert_eq!(id.subnqn, SUBNQN);
    assert_ne!(id.cmic & 0x2, 0, "multi-controller");
    assert_eq!(id.nn, 1024);
    assert_eq!(id.ioccsz, (64 + (16 << 10)) / 16);
    let (c, data) = a.exec(identify_cmd(cns::NAMESPACE, 1), None, 4096).await;
    assert_eq!(c.status, Status::SUCCESS);
    let ns = IdentifyNamespace::decode(&data).expect("id-ns");
    assert_eq!(ns.nsze, DEV_BYTES / 512);
    assert_eq!(ns.lba_format().lba_bytes(), 512);
    assert!(u64::from(ns.noiob) * 512 <= 4 << 20);
    assert_eq!(ns.nmic & 1, 1);
    // Active namespace list.
    let (c, data) = a
        .exec(identify_cmd(cns::ACTIVE_NS_LIST, 0), None, 4096)
        .await;
    assert_eq!(c.status, Status::SUCCESS);
    assert_eq!(&data[..8], &[1, 0, 0, 0, 0, 0, 0, 0]);
    // Unknown and inactive NSIDs.
    assert_eq!(
        a.expect_status(identify_cmd(cns::NAMESPACE, 5000), None, 4096)
            .await,
        Status::INVALID_NAMESPACE.dnr()
    );
    let (c, data) = a.exec(identify_cmd(cns::NAMESPACE, 7), None, 4096).await;
    assert_eq!(c.status, Status::SUCCESS);
    assert!(data.iter().all(|&b| b == 0));
    // An I/O queue joins the controller.
    let mut q = Client::io_queue(t.addr, cntlid, 1, true, true).await;
    let data = pattern(4096, 1);
    assert_eq!(
        q.expect_status(write_cmd(1, 0, 8), Some(&data), 0).await,
        Status::SUCCESS
    );
    let (c, back) = q.exec(read_cmd(1, 0, 8), None, 4096).await;
    assert_eq!(c.status, Status::SUCCESS);
    assert_eq!(back, data);
}

#[tokio::test]
async fn write_read_sizes_in_capsule_and_r2t() {
    let (t, _a, mut q) = setup(TargetConfig::default()).await;
    let mut model = vec![0u8; DEV_BYTES as usize];
    let sizes = [
        512usize,
        1024,
        4096,
        8192,
        16 << 10,
        (16 << 10) + 512,
        64 << 10,
        128 << 10,
        132 << 10,
        1 << 20,
    ];
    let mut slba = 3u64;
    for (i, &len) in sizes.iter().enumerate() {
        for in_capsule in [true, false] {
            let data = pattern(len, i as u64 * 2 + in_capsule as u64);
            let nlb = (len / 512) as u32;
            q.submit(write_cmd(1, slba, nlb), Some(&data), 0, in_capsule)
                .await;
            match q.next_event().await {
                Event::Done(c, _) => assert_eq!(
                    c.status,
                    Status::SUCCESS,
                    "write {len} in_capsule={in_capsule}"
                ),
                e => panic!("{e:?}"),
            }
            let off = slba as usize * 512;
            model[off..off + len].copy_from_slice(&data);
            let (c, back) = q.exec(read_cmd(1, slba, nlb), None, len).await;
            assert_eq!(c.status, Status::SUCCESS);
            assert_eq!(back.len(), len);
            assert!(back == model[off..off + len], "read-back {len}");
            slba += nlb as u64 + 7;
        }
    }
    assert!(q.r2ts_seen > 0, "large writes went through R2T");
    // The device holds what the host wrote.
    let mut dev = vec![0u8; 4096];
    t.dev.read_at(3 * 512, &mut dev[..512]).expect("read_at");
    assert_eq!(&dev[..512], &model[3 * 512..4 * 512]);
}

#[tokio::test]
async fn pipelined_queue_depth_32() {
    let (_t, _a, mut q) = setup(TargetConfig::default()).await;
    let mut expect = std::collections::HashMap::new();
    for i in 0..32u64 {
        let d = pattern(4096, 100 + i);
        q.submit(write_cmd(1, i * 8, 8), Some(&d), 0, true).await;
        expect.insert(i, d);
    }
    for _ in 0..32 {
        match q.next_event().await {
            Event::Done(c, _) => assert_eq!(c.status, Status::SUCCESS),
            e => panic!("{e:?}"),
        }
    }
    let mut cids = std::collections::HashMap::new();
    for i in 0..32u64 {
        let cid = q.submit(read_cmd(1, i * 8, 8), None, 4096, true).await;
        cids.insert(cid, i);
    }
    for _ in 0..32 {
        match q.next_event().await {
            Event::Done(c, data) => {
                assert_eq!(c.status, Status::SUCCESS);
                let i = cids[&c.cid];
                assert_eq!(data, expect[&i]);
            }
            e => panic!("{e:?}"),
        }
    }
}

#[tokio::test]
async fn io_status_codes() {
    let (_t, _a, mut q) = setup(TargetConfig::default()).await;
    let blocks = DEV_BYTES / 512;
    // Bad NSID.
    assert_eq!(
        q.expect_status(read_cmd(9, 0, 1), None, 512).await,
        Status::INVALID_NAMESPACE.dnr()
    );
    // LBA out of range.
    assert_eq!(
        q.expect_status(read_cmd(1, blocks - 1, 2), None, 1024)
            .await,
        Status::LBA_OUT_OF_RANGE.dnr()
    );
    assert_eq!(
        q.expect_status(read_cmd(1, u64::MAX, 1), None, 512).await,
        Status::LBA_OUT_OF_RANGE.dnr()
    );
    // Transfer length does not match NLB.
    assert_eq!(
        q.expect_status(read_cmd(1, 0, 2), None, 512).await,
        Status::DATA_SGL_LENGTH_INVALID.dnr()
    );
    let d = pattern(1024, 5);
    assert_eq!(
        q.expect_status(write_cmd(1, 0, 1), Some(&d), 0).await,
        Status::DATA_SGL_LENGTH_INVALID.dnr()
    );
    // Larger than MDTS (4 MiB).
    assert_eq!(
        q.expect_status(read_cmd(1, 0, 16384), None, 8 << 20).await,
        Status::INVALID_FIELD.dnr()
    );
    // Unknown opcode.
    let c = Command::new(0x7E, 0, 1);
    assert_eq!(
        q.expect_status(c, None, 0).await,
        Status::INVALID_OPCODE.dnr()
    );
    // Flush, write zeroes, compare.
    assert_eq!(
        q.expect_status(Command::new(io::FLUSH, 0, 1), None, 0)
            .await,
        Status::SUCCESS
    );
    let d = pattern(4096, 6);
    assert_eq!(
        q.expect_status(write_cmd(1, 100, 8), Some(&d), 0).await,
        Status::SUCCESS
    );
    let mut cmp = Command::new(io::COMPARE, 0, 1);
    cmp.set_slba(100).set_cdw12(7);
    assert_eq!(q.expect_status(cmp, Some(&d), 0).await, Status::SUCCESS);
    let other = pattern(4096, 7);
    assert_eq!(
        q.expect_status(cmp, Some(&other), 0).await,
        Status::COMPARE_FAILURE.dnr()
    );
    let mut wz = Command::new(io::WRITE_ZEROES, 0, 1);
    wz.set_slba(101).set_cdw12(1);
    assert_eq!(q.expect_status(wz, None, 0).await, Status::SUCCESS);
    let (_, back) = q.exec(read_cmd(1, 100, 8), None, 4096).await;
    assert_eq!(&back[..512], &d[..512]);
    assert!(back[512..1536].iter().all(|&b| b == 0));
    assert_eq!(&back[1536..], &d[1536..]);
    wz.set_slba(blocks - 1);
    assert_eq!(
        q.expect_status(wz, None, 0).await,
        Status::LBA_OUT_OF_RANGE.dnr()
    );
    // DSM deallocate.
    let ranges = nvme_proto::dsm::DsmRange::encode_list(&[nvme_proto::dsm::DsmRange {
        context_attributes: 0,
        nlb: 8,
        slba: 100,
    }]);
    let mut dsm = Command::new(io::DATASET_MANAGEMENT, 0, 1);
    dsm.set_cdw10(0).set_cdw11(nvme_proto::dsm::dsm_attr::AD);
    assert_eq!(
        q.expect_status(dsm, Some(&ranges), 0).await,
        Status::SUCCESS
    );
    let (_, back) = q.exec(read_cmd(1, 100, 8), None, 4096).await;
    assert!(back.iter().all(|&b| b == 0));
    let bad = nvme_proto::dsm::DsmRange::encode_list(&[nvme_proto::dsm::DsmRange {
        context_attributes: 0,
        nlb: 8,
        slba: blocks,
    }]);
    assert_eq!(
        q.expect_status(dsm, Some(&bad), 0).await,
        Status::LBA_OUT_OF_RANGE.dnr()
    );
}

#[tokio::test]
async fn success_flag_only_with_sq_flow_control_disabled() {
    let t = start_target(TargetConfig::default()).await;
    let a = Client::admin(t.addr, SUBNQN, 0).await;
    for (qid, disable) in [(1u16, false), (2, true)] {
        let mut q = Client::tcp(t.addr).await;
        q.icreq(false, true).await;
        q.cattr = if disable { 1 << 2 } else { 0 };
        let r = q
            .fabrics_connect(qid, 127, 0, SUBNQN, HOSTNQN, a.cntlid)
            .await;
        assert_eq!(r.status, Status::SUCCESS);
        let d = pattern(256 << 10, qid as u64);
        assert_eq!(
            q.expect_status(write_cmd(1, 64, 512), Some(&d), 0).await,
            Status::SUCCESS
        );
        for _ in 0..3 {
            let (c, back) = q.exec(read_cmd(1, 64, 512), None, 256 << 10).await;
            assert_eq!(c.status, Status::SUCCESS);
            assert_eq!(back, d, "multi-PDU C2HData with data digests");
        }
        assert_eq!(q.successes_seen, if disable { 3 } else { 0 });
    }
}

/// Write Zeroes with DEAC deallocates on devices whose deallocated blocks read as zeroes
/// and writes zeroes on the others; either way the range reads back as zeroes.
#[tokio::test]
async fn write_zeroes_deac_deallocates_only_where_reads_return_zeroes() {
    use blockdev::{BlockDevice, CrashRecorder, FaultAction, FaultOps, FaultRule, FaultyDevice};
    use std::sync::Arc;
    use std::time::Duration;

    let t = start_target(TargetConfig::default()).await;
    let ram: Arc<dyn BlockDevice> = Arc::new(blockdev::RamDevice::new("ram-deac", 4 << 20));
    let crash: Arc<dyn BlockDevice> = Arc::new(CrashRecorder::new("crash-deac", 4 << 20));
    let mut counters = Vec::new();
    for (nsid, dev) in [(4u32, ram), (5, crash)] {
        let faulty = Arc::new(FaultyDevice::new(dev));
        let h = faulty.handle();
        let count = |ops| FaultRule::new(ops, FaultAction::Delay(Duration::ZERO));
        let discards = h.add(count(FaultOps {
            discard: true,
            ..FaultOps::NONE
        }));
        let zeroes = h.add(count(FaultOps {
            write_zeroes: true,
            ..FaultOps::NONE
        }));
        counters.push((nsid, h, discards, zeroes));
        t.target
            .add_namespace(
                SUBNQN,
                nvmf_target::NamespaceConfig::whole_device(nsid, faulty),
            )
            .expect("namespace");
    }
    let mut a = Client::admin(t.addr, SUBNQN, 0).await;
    let mut q = Client::io_queue(t.addr, a.cntlid, 1, false, false).await;
    let wz = |nsid: u32, deac: bool| {
        let mut c = Command::new(io::WRITE_ZEROES, 0, nsid);
        c.set_slba(8).set_cdw12(
            7 | if deac {
                nvme_proto::dsm::cdw12::DEAC
            } else {
                0
            },
        );
        c
    };
    for (nsid, h, discards, zeroes) in &counters {
        let (nsid, ram) = (*nsid, *nsid == 4);
        let (_, idn) = a.exec(identify_cmd(cns::NAMESPACE, nsid), None, 4096).await;
        let dlfeat = IdentifyNamespace::decode(&idn).expect("id-ns").dlfeat;
        assert_eq!(dlfeat & 0b111 == 1, ram, "DLFEAT read-zeroes, NSID {nsid}");
        for deac in [true, false] {
            let data = pattern(8 * 512, u64::from(nsid));
            assert_eq!(
                q.expect_status(write_cmd(nsid, 8, 8), Some(&data), 0).await,
                Status::SUCCESS
            );
            let (d0, z0) = (h.hits(*discards), h.hits(*zeroes));
            assert_eq!(
                q.expect_status(wz(nsid, deac), None, 0).await,
                Status::SUCCESS
            );
            let discarded = h.hits(*discards) - d0;
            let zeroed = h.hits(*zeroes) - z0;
            let want_discard = deac && ram;
            assert_eq!(
                (discarded, zeroed),
                (u64::from(want_discard), u64::from(!want_discard)),
                "NSID {nsid} DEAC {deac}"
            );
            let (c, back) = q.exec(read_cmd(nsid, 8, 8), None, 8 * 512).await;
            assert_eq!(c.status, Status::SUCCESS);
            assert!(back.iter().all(|&b| b == 0), "NSID {nsid} DEAC {deac}");
        }
    }
}
