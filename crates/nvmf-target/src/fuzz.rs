//! Entry point for fuzzing command handling: one connection fed from a byte string over an
//! in-memory stream, against a target with a small RAM namespace (NVM, NSID 1), a
//! `BTreeMap` Key Value namespace (NSID 2) and a live controller (ID 1, enabled with all
//! I/O command sets as Linux does) whose I/O queues the input may connect.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use nvme_proto::fabrics::{ConnectCommand, ConnectData, PropertySet, PropertySize, reg};
use nvme_proto::kv::{KvCommand, KvKey, StoreMode};
use nvme_proto::opcode::io;
use nvme_proto::tcp::{CH_BYTES, CommonHeader, Digests, Framing, IcReq, PduHeader, encode_header};
use nvme_proto::{Command, SglDescriptor};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::{
    KvNamespaceConfig, MemKvBackend, NamespaceConfig, SubsystemConfig, Target, TargetConfig,
};

/// Subsystem NQN the fuzz target exports (namespace 1: 1 MiB of RAM; namespace 2: Key
/// Value, values up to 64 KiB; any host).
pub const FUZZ_SUBNQN: &str = "nqn.2026-01.io.ferrobay:fuzz";
/// NSID of the fuzz target's Key Value namespace.
pub const FUZZ_KV_NSID: u32 = 2;
/// CC of the pre-connected controller: enabled, CC.CSS = 110b (all I/O command sets),
/// IOSQES 6, IOCQES 4 — what Linux writes (0x00460061 without MPS/AMS bits).
const FUZZ_CC: u64 = 1 | (6 << 4) | (6 << 16) | (4 << 20);
/// Host NQN of the pre-connected admin queue (controller ID 1, host ID `[1; 16]`).
pub const FUZZ_HOSTNQN: &str =
    "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";
const FUZZ_HOSTID: [u8; 16] = [1; 16];

fn pdu(h: &PduHeader, data: &[u8]) -> Vec<u8> {
    let mut v = encode_header(h, 0, data.len(), Framing::default())
        .as_bytes()
        .to_vec();
    v.extend_from_slice(data);
    v
}

fn icreq() -> Vec<u8> {
    pdu(
        &PduHeader::IcReq(IcReq {
            pfv: 0,
            hpda: 0,
            digests: Digests::default(),
            maxr2t: 0,
        }),
        &[],
    )
}

fn connect(qid: u16, cntlid: u16, cid: u16) -> Vec<u8> {
    let cmd = ConnectCommand {
        recfmt: 0,
        qid,
        sqsize: 31,
        cattr: 0,
        kato_ms: 0,
    }
    .to_command(cid);
    let data = ConnectData {
        hostid: FUZZ_HOSTID,
        cntlid,
        subnqn: FUZZ_SUBNQN.into(),
        hostnqn: FUZZ_HOSTNQN.into(),
    }
    .to_bytes();
    pdu(&PduHeader::CapsuleCmd(cmd), &data)
}

/// A valid admin-queue session: ICReq, Connect, CC.EN, Identify Controller.
pub fn fuzz_seed_admin_session() -> Vec<u8> {
    let mut v = icreq();
    v.extend(connect(0, 0xFFFF, 1));
    let en = PropertySet {
        size: PropertySize::Four,
        ofst: reg::CC,
        value: 1 | (6 << 16) | (4 << 20),
    }
    .to_command(2);
    v.extend(pdu(&PduHeader::CapsuleCmd(en), &[]));
    let mut id = Command::new(0x06, 3, 0);
    id.set_cdw10(1).set_sgl1(SglDescriptor::transport(4096));
    v.extend(pdu(&PduHeader::CapsuleCmd(id), &[]));
    v
}

/// A valid I/O-queue session for the pre-connected controller: ICReq, Connect (QID 1),
/// an in-capsule write, a read and a write that asks for R2T.
pub fn fuzz_seed_io_session() -> Vec<u8> {
    let mut v = icreq();
    v.extend(connect(1, 1, 1));
    let mut w = Command::new(io::WRITE, 2, 1);
    w.set_slba(8)
        .set_cdw12(0)
        .set_sgl1(SglDescriptor::in_capsule(0, 512));
    v.extend(pdu(&PduHeader::CapsuleCmd(w), &[0xA5; 512]));
    let mut r = Command::new(io::READ, 3, 1);
    r.set_slba(8)
        .set_cdw12(0)
        .set_sgl1(SglDescriptor::transport(512));
    v.extend(pdu(&PduHeader::CapsuleCmd(r), &[]));
    let mut big = Command::new(io::WRITE, 4, 1);
    big.set_slba(16)
        .set_cdw12(63)
        .set_sgl1(SglDescriptor::transport(32768));
    v.extend(pdu(&PduHeader::CapsuleCmd(big), &[]));
    v
}

/// A valid I/O-queue session on the Key Value namespace: ICReq, Connect (QID 1), an
/// in-capsule Store, Retrieve, Exist, List, Delete, and a Retrieve of the deleted key.
pub fn fuzz_seed_kv_session() -> Vec<u8> {
    let mut v = icreq();
    v.extend(connect(1, 1, 1));
    let Ok(key) = KvKey::new(b"fuzz/k1") else {
        return v;
    };
    let mut store = KvCommand::Store {
        key,
        value_size_bytes: 512,
        mode: StoreMode::Always,
        no_compression: false,
    }
    .to_command(2, FUZZ_KV_NSID);
    store.set_sgl1(SglDescriptor::in_capsule(0, 512));
    v.extend(pdu(&PduHeader::CapsuleCmd(store), &[0x5A; 512]));
    for (cid, (cmd, data_len)) in (3u16..).zip([
        (
            KvCommand::Retrieve {
                key,
                host_buffer_bytes: 512,
                raw: false,
            },
            512,
        ),
        (KvCommand::Exist { key }, 0),
        (
            KvCommand::List {
                start: None,
                host_buffer_bytes: 256,
            },
            256,
        ),
        (KvCommand::Delete { key }, 0),
        (
            KvCommand::Retrieve {
                key,
                host_buffer_bytes: 512,
                raw: false,
            },
            512,
        ),
    ]) {
        let mut c = cmd.to_command(cid, FUZZ_KV_NSID);
        c.set_sgl1(SglDescriptor::transport(data_len));
        v.extend(pdu(&PduHeader::CapsuleCmd(c), &[]));
    }
    v
}

/// Reads one PDU (for the harness's own admin queue).
async fn read_pdu<S: AsyncRead + Unpin>(s: &mut S) -> Option<()> {
    let mut ch = [0u8; CH_BYTES];
    s.read_exact(&mut ch).await.ok()?;
    let plen = CommonHeader::decode(&ch).plen as usize;
    let mut rest = vec![0u8; plen.checked_sub(CH_BYTES)?.min(1 << 20)];
    s.read_exact(&mut rest).await.ok()?;
    Some(())
}

/// Feeds `bytes` as everything a host sends on one connection, then closes the host's
/// sending side and drains the target's answers. Must never panic or hang. Returns how
/// many bytes the target sent back on that connection.
///
/// cargo-fuzz target:
/// `fuzz_target!(|data: &[u8]| { nvmf_target::fuzz_one_connection(data); });`
/// with [`fuzz_seed_admin_session`], [`fuzz_seed_io_session`] and
/// [`fuzz_seed_kv_session`] as corpus seeds.
pub fn fuzz_one_connection(bytes: &[u8]) -> usize {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return 0;
    };
    rt.block_on(async {
        let Ok(target) = Target::new(TargetConfig::default()) else {
            return 0;
        };
        if target
            .add_subsystem(SubsystemConfig::new(FUZZ_SUBNQN))
            .is_err()
        {
            return 0;
        }
        let dev = Arc::new(blockdev::RamDevice::new("fuzz0", 1 << 20));
        let _ = target.add_namespace(FUZZ_SUBNQN, NamespaceConfig::whole_device(1, dev));
        let kv = std::sync::Arc::new(MemKvBackend::new(1 << 20, 256));
        let _ = target.add_kv_namespace(
            FUZZ_SUBNQN,
            KvNamespaceConfig::new(FUZZ_KV_NSID, kv, 64 << 10),
        );
        let local = SocketAddr::from(([127, 0, 0, 1], 4420));

        // The pre-connected admin queue (controller 1), kept open during the run.
        let (mut admin, admin_ctrl) = tokio::io::duplex(64 << 10);
        let t = target.clone();
        let admin_server = tokio::spawn(async move { t.serve_stream(admin_ctrl, local).await });
        let mut setup = icreq();
        setup.extend(connect(0, 0xFFFF, 1));
        let en = PropertySet {
            size: PropertySize::Four,
            ofst: reg::CC,
            value: FUZZ_CC,
        }
        .to_command(2);
        setup.extend(pdu(&PduHeader::CapsuleCmd(en), &[]));
        let ready = async {
            admin.write_all(&setup).await.ok()?;
            for _ in 0..3 {
                read_pdu(&mut admin).await?;
            }
            Some(())
        };
        if tokio::time::timeout(Duration::from_secs(5), ready)
            .await
            .ok()
            .flatten()
            .is_none()
        {
            return 0;
        }

        let (mut host, ctrl) = tokio::io::duplex(256 << 10);
        let t = target.clone();
        let server = tokio::spawn(async move { t.serve_stream(ctrl, local).await });
        let input = bytes.to_vec();
        let run = async move {
            let (mut rd, mut wr) = tokio::io::split(&mut host);
            let writer = async {
                let _ = wr.write_all(&input).await;
                let _ = wr.shutdown().await;
            };
            let reader = async {
                let mut sink = vec![0u8; 64 << 10];
                let mut total = 0;
                while let Ok(n) = rd.read(&mut sink).await {
                    if n == 0 {
                        break;
                    }
                    total += n;
                }
                total
            };
            tokio::join!(writer, reader).1
        };
        let got = tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .unwrap_or(0);
        drop(admin);
        target.shutdown(Duration::from_secs(1)).await;
        let _ = tokio::time::timeout(Duration::from_secs(1), server).await;
        let _ = tokio::time::timeout(Duration::from_secs(1), admin_server).await;
        got
    })
}
