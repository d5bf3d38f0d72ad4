//! Malformed and hostile traffic: each case ends only its own connection, with a
//! C2HTermReq carrying the right FES (or gets the right NVMe status), and the target keeps
//! serving other connections.

mod common;

use common::*;
use nvme_proto::tcp::{
    CommonHeader, DataHeader, Digests, FatalError, Framing, IcReq, PduHeader, encode_header,
    encode_term_req, fes, pdu_flags, pdu_type,
};
use nvme_proto::{Command, SglDescriptor, Status};
use nvmf_target::TargetConfig;

/// Expects a C2HTermReq with `fes` (and `fei` if given), then the connection closing.
async fn expect_term(c: &mut Client, want_fes: u16, want_fei: Option<u32>) {
    match c.next_event().await {
        Event::Term(t) => {
            assert_eq!(t.fes, want_fes, "FES (FEI {})", t.fei);
            if let Some(f) = want_fei {
                assert_eq!(t.fei, f, "FEI");
            }
        }
        e => panic!("expected C2HTermReq with FES {want_fes:#x}, got {e:?}"),
    }
    assert!(
        c.recv_pdu().await.is_none(),
        "connection closes after the termination request"
    );
}

/// A fresh connection still works end to end.
async fn still_serving(t: &TestTarget) {
    let mut a = Client::admin(t.addr, SUBNQN, 0).await;
    let mut q = Client::io_queue(t.addr, a.cntlid, 1, false, false).await;
    let d = pattern(4096, 99);
    assert_eq!(
        q.expect_status(write_cmd(1, 0, 8), Some(&d), 0).await,
        Status::SUCCESS
    );
    let (c, back) = q.exec(read_cmd(1, 0, 8), None, 4096).await;
    assert_eq!(c.status, Status::SUCCESS);
    assert_eq!(back, d);
    let (c, _) = a.exec(identify_cmd(1, 0), None, 4096).await;
    assert_eq!(c.status, Status::SUCCESS);
}

fn raw_ch(t: u8, flags: u8, hlen: u8, pdo: u8, plen: u32) -> Vec<u8> {
    let mut v = vec![0u8; hlen.max(8) as usize];
    CommonHeader {
        pdu_type: t,
        flags,
        hlen,
        pdo,
        plen,
    }
    .encode(&mut v);
    v
}

#[tokio::test]
async fn unknown_pdu_type() {
    let t = start_target(TargetConfig::default()).await;
    let mut c = Client::tcp(t.addr).await;
    c.icreq(false, false).await;
    c.send_raw(&raw_ch(0x0B, 0, 24, 0, 24)).await;
    expect_term(&mut c, fes::INVALID_HEADER_FIELD, Some(0)).await;
    // A controller-to-host PDU type from the host is just as invalid.
    let mut c = Client::tcp(t.addr).await;
    c.icreq(false, false).await;
    c.send_raw(&raw_ch(pdu_type::C2H_DATA, 0, 24, 0, 24)).await;
    expect_term(&mut c, fes::INVALID_HEADER_FIELD, Some(0)).await;
    still_serving(&t).await;
}

#[tokio::test]
async fn wrong_lengths() {
    let t = start_target(TargetConfig::default()).await;
    // Capsule with the wrong HLEN.
    let mut c = Client::tcp(t.addr).await;
    c.icreq(false, false).await;
    c.send_raw(&raw_ch(pdu_type::CAPSULE_CMD, 0, 24, 0, 72))
        .await;
    expect_term(&mut c, fes::INVALID_HEADER_FIELD, Some(2)).await;
    // PLEN shorter than the header.
    let mut c = Client::tcp(t.addr).await;
    c.icreq(false, false).await;
    c.send_raw(&raw_ch(pdu_type::CAPSULE_CMD, 0, 72, 0, 40))
        .await;
    expect_term(&mut c, fes::INVALID_HEADER_FIELD, Some(4)).await;
    // ICReq with a bad PLEN.
    let mut c = Client::tcp(t.addr).await;
    c.send_raw(&raw_ch(pdu_type::IC_REQ, 0, 128, 0, 200)).await;
    expect_term(&mut c, fes::INVALID_HEADER_FIELD, Some(4)).await;
    // In-capsule data larger than the admin queue accepts.
    let mut c = Client::tcp(t.addr).await;
    c.icreq(false, false).await;
    let mut cmd = Command::new(0x06, 1, 0);
    cmd.set_sgl1(SglDescriptor::in_capsule(0, 9000));
    let v = c.encode_pdu(&PduHeader::CapsuleCmd(cmd), 0, &vec![0u8; 9000]);
    c.send_raw(&v).await;
    expect_term(&mut c, fes::R2T_LIMIT_EXCEEDED, None).await;
    still_serving(&t).await;
}

#[tokio::test]
async fn bad_header_digest_and_data_digest() {
    let t = start_target(TargetConfig::default()).await;
    let mut a = Client::admin(t.addr, SUBNQN, 0).await;
    // Header digest mismatch is fatal.
    let mut q = Client::io_queue(t.addr, a.cntlid, 1, true, true).await;
    let mut cmd = read_cmd(1, 0, 1);
    cmd.set_cid(77).set_sgl1(SglDescriptor::transport(512));
    let mut v = q.encode_pdu(&PduHeader::CapsuleCmd(cmd), 0, &[]);
    v[72] ^= 0xFF;
    q.send_raw(&v).await;
    expect_term(&mut q, fes::HEADER_DIGEST_ERROR, None).await;
    // Data digest mismatch fails the command with a transport status, the queue lives on.
    let mut q = Client::io_queue(t.addr, a.cntlid, 2, true, true).await;
    let d = pattern(512, 3);
    let mut cmd = write_cmd(1, 0, 1);
    cmd.set_cid(78).set_sgl1(SglDescriptor::in_capsule(0, 512));
    let mut v = q.encode_pdu(&PduHeader::CapsuleCmd(cmd), 0, &d);
    let n = v.len();
    v[n - 1] ^= 0xFF;
    q.submit_raw(cmd, &[]).await; // registers cid 78 as pending; the bytes below are the real PDU
    let _ = q.next_event().await; // the empty-capsule write of cid 78 fails (no data)
    q.send_raw(&v).await;
    match q.next_event().await {
        Event::Done(c, _) => assert_eq!(c.status, Status::DATA_TRANSFER_ERROR),
        e => panic!("{e:?}"),
    }
    assert_eq!(
        q.expect_status(write_cmd(1, 0, 1), Some(&d), 0).await,
        Status::SUCCESS
    );
    let _ = a.exec(identify_cmd(1, 0), None, 4096).await;
    still_serving(&t).await;
}

#[tokio::test]
async fn h2c_data_without_r2t_and_past_the_end() {
    let t = start_target(TargetConfig::default()).await;
    let a = Client::admin(t.addr, SUBNQN, 0).await;
    // H2CData nobody asked for.
    let mut q = Client::io_queue(t.addr, a.cntlid, 1, false, false).await;
    let h = PduHeader::H2CData(DataHeader {
        cccid: 1,
        ttag: 0,
        offset: 0,
        length: 512,
    });
    let v = q.encode_pdu(&h, pdu_flags::LAST_PDU, &[0u8; 512]);
    q.send_raw(&v).await;
    expect_term(&mut q, fes::INVALID_HEADER_FIELD, Some(10)).await;
    // Data beyond the command's length after a real R2T.
    let mut q = Client::io_queue(t.addr, a.cntlid, 2, false, false).await;
    let mut cmd = write_cmd(1, 0, 64);
    cmd.set_cid(5).set_sgl1(SglDescriptor::transport(32768));
    q.submit_raw(cmd, &[]).await;
    let r2t = match q.recv_pdu().await {
        Some((PduHeader::R2t(r), _, _)) => r,
        other => panic!("expected R2T, got {other:?}"),
    };
    assert_eq!((r2t.cccid, r2t.offset, r2t.length), (5, 0, 32768));
    let h = PduHeader::H2CData(DataHeader {
        cccid: 5,
        ttag: r2t.ttag,
        offset: 32768 - 512,
        length: 1024,
    });
    let v = q.encode_pdu(&h, pdu_flags::LAST_PDU, &[0u8; 1024]);
    q.send_raw(&v).await;
    expect_term(&mut q, fes::DATA_OUT_OF_RANGE, None).await;
    // Wrong TTAG.
    let mut q = Client::io_queue(t.addr, a.cntlid, 3, false, false).await;
    q.submit_raw(cmd, &[]).await;
    let r2t = match q.recv_pdu().await {
        Some((PduHeader::R2t(r), _, _)) => r,
        other => panic!("expected R2T, got {other:?}"),
    };
    let h = PduHeader::H2CData(DataHeader {
        cccid: 5,
        ttag: r2t.ttag + 9,
        offset: 0,
        length: 512,
    });
    q.send_raw(&q.encode_pdu(&h, 0, &[0u8; 512])).await;
    expect_term(&mut q, fes::INVALID_HEADER_FIELD, Some(10)).await;
    // In-capsule data beyond the SGL length.
    let mut q = Client::io_queue(t.addr, a.cntlid, 4, false, false).await;
    let mut cmd = write_cmd(1, 0, 1);
    cmd.set_cid(6).set_sgl1(SglDescriptor::in_capsule(0, 512));
    q.send_raw(&q.encode_pdu(&PduHeader::CapsuleCmd(cmd), 0, &[0u8; 1024]))
        .await;
    expect_term(&mut q, fes::DATA_OUT_OF_RANGE, None).await;
    still_serving(&t).await;
}

#[tokio::test]
async fn second_icreq_and_capsule_before_icreq() {
    let t = start_target(TargetConfig::default()).await;
    let mut c = Client::tcp(t.addr).await;
    c.icreq(false, false).await;
    let e = encode_header(
        &PduHeader::IcReq(IcReq {
            pfv: 0,
            hpda: 0,
            digests: Digests::default(),
            maxr2t: 0,
        }),
        0,
        0,
        Framing::default(),
    );
    c.send_raw(e.as_bytes()).await;
    expect_term(&mut c, fes::PDU_SEQUENCE_ERROR, None).await;
    let mut c = Client::tcp(t.addr).await;
    let mut cmd = identify_cmd(1, 0);
    cmd.set_cid(1).set_sgl1(SglDescriptor::transport(4096));
    let e = encode_header(&PduHeader::CapsuleCmd(cmd), 0, 0, Framing::default());
    c.send_raw(e.as_bytes()).await;
    expect_term(&mut c, fes::PDU_SEQUENCE_ERROR, None).await;
    // Unsupported PFV.
    let mut c = Client::tcp(t.addr).await;
    let e = encode_header(
        &PduHeader::IcReq(IcReq {
            pfv: 1,
            hpda: 0,
            digests: Digests::default(),
            maxr2t: 0,
        }),
        0,
        0,
        Framing::default(),
    );
    c.send_raw(e.as_bytes()).await;
    expect_term(&mut c, fes::UNSUPPORTED_PARAMETER, Some(8)).await;
    still_serving(&t).await;
}

#[tokio::test]
async fn commands_before_connect() {
    let t = start_target(TargetConfig::default()).await;
    let mut c = Client::tcp(t.addr).await;
    c.icreq(false, false).await;
    assert_eq!(
        c.expect_status(identify_cmd(1, 0), None, 4096).await,
        Status::COMMAND_SEQUENCE_ERROR
    );
    assert_eq!(
        c.expect_status(read_cmd(1, 0, 1), None, 512).await,
        Status::COMMAND_SEQUENCE_ERROR
    );
    let d = pattern(512, 1);
    assert_eq!(
        c.expect_status(write_cmd(1, 0, 1), Some(&d), 0).await,
        Status::COMMAND_SEQUENCE_ERROR
    );
    // The connection is still usable for Connect.
    let r = c.fabrics_connect(0, 31, 0, SUBNQN, HOSTNQN, 0xFFFF).await;
    assert_eq!(r.status, Status::SUCCESS);
    still_serving(&t).await;
}

#[tokio::test]
async fn queue_overflow_and_duplicate_cid() {
    let t = start_target(TargetConfig::default()).await;
    let a = Client::admin(t.addr, SUBNQN, 0).await;
    let mut q = Client::tcp(t.addr).await;
    q.icreq(false, false).await;
    // A queue of 4 entries (SQSIZE 3).
    let r = q.fabrics_connect(1, 3, 0, SUBNQN, HOSTNQN, a.cntlid).await;
    assert_eq!(r.status, Status::SUCCESS);
    // Five writes that each wait for their data (R2T): the fifth exceeds the queue.
    let mut bytes = Vec::new();
    for cid in 10..15u16 {
        let mut cmd = write_cmd(1, 0, 64);
        cmd.set_cid(cid).set_sgl1(SglDescriptor::transport(32768));
        bytes.extend(q.encode_pdu(&PduHeader::CapsuleCmd(cmd), 0, &[]));
    }
    q.send_raw(&bytes).await;
    loop {
        match q.recv_pdu().await {
            Some((PduHeader::R2t(_), _, _)) => continue,
            Some((PduHeader::C2HTermReq(t), _, _)) => {
                assert_eq!(t.fes, fes::PDU_SEQUENCE_ERROR);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    // Duplicate CID while the first is outstanding.
    let mut q = Client::io_queue(t.addr, a.cntlid, 2, false, false).await;
    let mut bytes = Vec::new();
    for _ in 0..2 {
        let mut cmd = write_cmd(1, 0, 64);
        cmd.set_cid(20).set_sgl1(SglDescriptor::transport(32768));
        bytes.extend(q.encode_pdu(&PduHeader::CapsuleCmd(cmd), 0, &[]));
    }
    q.send_raw(&bytes).await;
    loop {
        match q.recv_pdu().await {
            Some((PduHeader::R2t(_), _, _)) => continue,
            Some((PduHeader::C2HTermReq(t), _, _)) => {
                assert_eq!(t.fes, fes::INVALID_HEADER_FIELD);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    still_serving(&t).await;
}

#[tokio::test]
async fn host_termination_and_garbage() {
    let t = start_target(TargetConfig::default()).await;
    let mut c = Client::tcp(t.addr).await;
    c.icreq(false, false).await;
    c.send_raw(&encode_term_req(
        false,
        &FatalError::header_digest(),
        &[1, 2, 3],
    ))
    .await;
    assert!(
        c.recv_pdu().await.is_none(),
        "H2CTermReq closes without an answer"
    );
    for seed in 0..20u64 {
        let mut c = Client::tcp(t.addr).await;
        c.send_raw(&pattern(300 + seed as usize * 37, seed)).await;
        let _ = c.sock.shutdown_write_for_test().await;
        // Whatever happens, the target answers or closes; it must not hang or die.
        let _ = c.recv_pdu().await;
    }
    still_serving(&t).await;
}

trait ShutdownWrite {
    async fn shutdown_write_for_test(&mut self) -> std::io::Result<()>;
}

impl ShutdownWrite for tokio::net::TcpStream {
    async fn shutdown_write_for_test(&mut self) -> std::io::Result<()> {
        tokio::io::AsyncWriteExt::shutdown(self).await
    }
}
