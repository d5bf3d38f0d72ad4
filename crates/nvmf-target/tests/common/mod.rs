//! A small raw NVMe/TCP host for the tests: real TCP, hand-built PDUs, pipelining.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use nvme_proto::fabrics::{
    ConnectCommand, ConnectData, PropertyGet, PropertySet, PropertySize, reg,
};
use nvme_proto::opcode::{admin, io};
use nvme_proto::tcp::{
    CH_BYTES, CommonHeader, DataHeader, Digests, Framing, IcReq, IcResp, PduHeader, R2t, TermReq,
    check_header_digest, crc32c, encode_header, layout, pdu_flags,
};
use nvme_proto::{Command, Completion, SglDescriptor, Status};
use nvmf_target::{NamespaceConfig, SubsystemConfig, Target, TargetConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const SUBNQN: &str = "nqn.2026-01.io.ferrobay:test:ram0";
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
pub const HOSTID: [u8; 16] = [0x11; 16];
pub const DEV_BYTES: u64 = 64 << 20;

/// A second host of the tests that configure hosts one by one.
pub const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:99999999-2222-3333-4444-555555555555";

/// The identity of `nqn` for nvmf-host (HOSTID for HOSTNQN).
pub fn host(nqn: &str) -> nvmf_host::HostIdentity {
    nvmf_host::HostIdentity {
        hostnqn: nqn.to_string(),
        hostid: if nqn == HOSTNQN { HOSTID } else { [0x99; 16] },
    }
}

/// Writes `len_bytes` of a pattern of `seed` at `offset_bytes` of namespace 1 through
/// `ctrl` and checks they read back.
pub async fn round_trip(
    ctrl: &nvmf_host::Controller,
    offset_bytes: u64,
    len_bytes: usize,
    seed: u8,
) {
    let ns = ctrl.namespace(1).await.expect("namespace 1");
    let want: Vec<u8> = (0..len_bytes)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect();
    ns.write_at(offset_bytes, blockdev::IoBuf::from_slice(&want), false)
        .await
        .expect("write");
    let got = ns
        .read_at(offset_bytes, blockdev::IoBuf::new_zeroed(want.len()))
        .await
        .expect("read");
    assert!(got[..] == want[..], "data read back differs");
}

pub struct TestTarget {
    pub target: Target,
    pub addr: SocketAddr,
    pub dev: Arc<blockdev::RamDevice>,
    pub listener: nvmf_target::ListenerHandle,
}

impl TestTarget {
    /// A listener on 127.0.0.1 (OS-chosen port) that requires TLS.
    pub async fn tls_listener(&self) -> SocketAddr {
        self.target
            .listen_with(
                "127.0.0.1:0".parse().expect("address"),
                nvmf_target::ListenerOptions {
                    tls: true,
                    ..Default::default()
                },
            )
            .await
            .expect("TLS listener")
            .local_addr()
    }
}

/// A target with one subsystem, one 64 MiB RAM namespace (512-byte blocks), listening on
/// 127.0.0.1 with an OS-chosen port.
pub async fn start_target(cfg: TargetConfig) -> TestTarget {
    let target = Target::new(cfg).expect("target");
    target
        .add_subsystem(SubsystemConfig::new(SUBNQN))
        .expect("subsystem");
    let dev = Arc::new(blockdev::RamDevice::new("ram0", DEV_BYTES));
    target
        .add_namespace(SUBNQN, NamespaceConfig::whole_device(1, dev.clone()))
        .expect("namespace");
    let l = target
        .listen("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("listen");
    TestTarget {
        target,
        addr: l.local_addr(),
        dev,
        listener: l,
    }
}

#[derive(Debug)]
pub enum Event {
    Done(Completion, Vec<u8>),
    Term(TermReq),
    Closed,
}

struct Pending {
    write: Option<Vec<u8>>,
    read: Vec<u8>,
}

pub struct Client {
    pub sock: TcpStream,
    pub digests: Digests,
    pub maxh2cdata: u32,
    pub icd_limit: usize,
    next_cid: u16,
    pending: HashMap<u16, Pending>,
    pub cntlid: u16,
    pub r2ts_seen: usize,
    /// Connect attributes (bit 2: disable SQ flow control).
    pub cattr: u8,
    pub successes_seen: usize,
    /// Host identity sent in Connect.
    pub hostid: [u8; 16],
    pub hostnqn: String,
    /// Commands whose R2Ts are held until [`Client::release_r2t`].
    hold: HashSet<u16>,
    held_r2ts: Vec<R2t>,
    /// Completions read while waiting for something else.
    stash: VecDeque<Event>,
}

pub fn io_timeout() -> Duration {
    Duration::from_secs(10)
}

impl Client {
    pub async fn tcp(addr: SocketAddr) -> Client {
        let sock = TcpStream::connect(addr).await.expect("tcp connect");
        sock.set_nodelay(true).expect("nodelay");
        Client {
            sock,
            digests: Digests::default(),
            maxh2cdata: 0,
            icd_limit: 8192,
            next_cid: 1,
            pending: HashMap::new(),
            cntlid: 0,
            r2ts_seen: 0,
            cattr: 0,
            successes_seen: 0,
            hostid: HOSTID,
            hostnqn: HOSTNQN.to_string(),
            hold: HashSet::new(),
            held_r2ts: Vec::new(),
            stash: VecDeque::new(),
        }
    }

    pub fn framing(&self) -> Framing {
        Framing {
            digests: self.digests,
            data_align_bytes: 0,
        }
    }

    pub async fn send_raw(&mut self, b: &[u8]) {
        let _ = self.sock.write_all(b).await;
    }

    pub async fn icreq(&mut self, header: bool, data: bool) -> IcResp {
        let h = PduHeader::IcReq(IcReq {
            pfv: 0,
            hpda: 0,
            digests: Digests { header, data },
            maxr2t: 0,
        });
        let e = encode_header(&h, 0, 0, Framing::default());
        self.send_raw(e.as_bytes()).await;
        match self.recv_pdu().await {
            Some((PduHeader::IcResp(r), _, _)) => {
                self.digests = r.digests;
                self.maxh2cdata = r.maxh2cdata;
                r
            }
            other => panic!("expected ICResp, got {other:?}"),
        }
    }

    /// Encodes a PDU with this connection's digests.
    pub fn encode_pdu(&self, h: &PduHeader, flags: u8, data: &[u8]) -> Vec<u8> {
        let e = encode_header(h, flags, data.len(), self.framing());
        let mut v = e.as_bytes().to_vec();
        v.extend_from_slice(data);
        if self.digests.data && !data.is_empty() {
            v.extend_from_slice(&crc32c(data).to_le_bytes());
        }
        v
    }

    /// Reads one PDU: (header, flags, data). None on EOF or timeout.
    pub async fn recv_pdu(&mut self) -> Option<(PduHeader, u8, Vec<u8>)> {
        tokio::time::timeout(io_timeout(), self.recv_pdu_inner())
            .await
            .ok()
            .flatten()
    }

    async fn recv_pdu_inner(&mut self) -> Option<(PduHeader, u8, Vec<u8>)> {
        let mut chb = [0u8; CH_BYTES];
        self.sock.read_exact(&mut chb).await.ok()?;
        let ch = CommonHeader::decode(&chb);
        let is_plain = matches!(ch.pdu_type, 0x01 | 0x03);
        let l = layout(
            &ch,
            if is_plain { None } else { Some(self.digests) },
            16 << 20,
        )
        .unwrap_or_else(|e| panic!("target sent a bad PDU header {ch:?}: {e}"));
        let mut rest = vec![0u8; l.total_len - CH_BYTES];
        self.sock.read_exact(&mut rest).await.ok()?;
        let mut all = chb.to_vec();
        all.extend_from_slice(&rest);
        if l.has_hdgst {
            check_header_digest(&all, l.hlen).expect("target header digest");
        }
        let data = all[l.data_offset..l.data_offset + l.data_len].to_vec();
        if l.has_ddgst {
            let d = &all[l.data_offset + l.data_len..l.data_offset + l.data_len + 4];
            assert_eq!(crc32c(&data).to_le_bytes(), d, "target data digest");
        }
        let h = PduHeader::decode(&ch, &all).expect("decode");
        Some((h, ch.flags, data))
    }

    pub fn alloc_cid(&mut self) -> u16 {
        let c = self.next_cid;
        self.next_cid = self.next_cid.wrapping_add(1).max(1);
        c
    }

    /// Sends a command. `write` goes in-capsule when small enough and `in_capsule`,
    /// else through R2T; `read_len` bytes are expected back.
    pub async fn submit(
        &mut self,
        mut cmd: Command,
        write: Option<&[u8]>,
        read_len: usize,
        in_capsule: bool,
    ) -> u16 {
        let cid = self.alloc_cid();
        cmd.set_cid(cid);
        let mut icd: &[u8] = &[];
        let mut pend = Pending {
            write: None,
            read: Vec::with_capacity(read_len),
        };
        match write {
            Some(w) if in_capsule && w.len() <= self.icd_limit => {
                cmd.set_sgl1(SglDescriptor::in_capsule(0, w.len() as u32));
                icd = w;
            }
            Some(w) => {
                cmd.set_sgl1(SglDescriptor::transport(w.len() as u32));
                pend.write = Some(w.to_vec());
            }
            None => {
                cmd.set_sgl1(SglDescriptor::transport(read_len as u32));
            }
        }
        let v = self.encode_pdu(&PduHeader::CapsuleCmd(cmd), 0, icd);
        self.pending.insert(cid, pend);
        self.send_raw(&v).await;
        cid
    }

    /// Sends a command exactly as given (SGL untouched), with optional in-capsule bytes.
    pub async fn submit_raw(&mut self, cmd: Command, icd: &[u8]) {
        let v = self.encode_pdu(&PduHeader::CapsuleCmd(cmd), 0, icd);
        self.pending.insert(
            cmd.cid(),
            Pending {
                write: None,
                read: Vec::new(),
            },
        );
        self.send_raw(&v).await;
    }

    /// Drives the connection until a command completes (answering R2Ts on the way, except
    /// held ones).
    pub async fn next_event(&mut self) -> Event {
        if let Some(e) = self.stash.pop_front() {
            return e;
        }
        loop {
            let Some((h, flags, data)) = self.recv_pdu().await else {
                return Event::Closed;
            };
            if let Some(e) = self.on_pdu(h, flags, data).await {
                return e;
            }
        }
    }

    /// The completion of command `cid` (other completions are kept for later).
    pub async fn wait_done(&mut self, cid: u16) -> (Completion, Vec<u8>) {
        if let Some(i) = self
            .stash
            .iter()
            .position(|e| matches!(e, Event::Done(c, _) if c.cid == cid))
            && let Some(Event::Done(c, d)) = self.stash.remove(i)
        {
            return (c, d);
        }
        loop {
            match self.next_event_unstashed().await {
                Event::Done(c, d) if c.cid == cid => return (c, d),
                Event::Done(c, d) => self.stash.push_back(Event::Done(c, d)),
                e => panic!("waiting for cid {cid}: {e:?}"),
            }
        }
    }

    async fn next_event_unstashed(&mut self) -> Event {
        loop {
            let Some((h, flags, data)) = self.recv_pdu().await else {
                return Event::Closed;
            };
            if let Some(e) = self.on_pdu(h, flags, data).await {
                return e;
            }
        }
    }

    /// Submits a write through R2T whose R2T is held: the data is not sent until
    /// [`Client::release_r2t`].
    pub async fn submit_held(&mut self, cmd: Command, write: &[u8]) -> u16 {
        let cid = self.next_cid;
        self.hold.insert(cid);
        let got = self.submit(cmd, Some(write), 0, false).await;
        assert_eq!(got, cid);
        cid
    }

    /// Reads PDUs until the held R2T of `cid` has arrived (completions are kept).
    pub async fn wait_held_r2t(&mut self, cid: u16) {
        while !self.held_r2ts.iter().any(|r| r.cccid == cid) {
            let Some((h, flags, data)) = self.recv_pdu().await else {
                panic!("connection closed waiting for the R2T of cid {cid}");
            };
            match self.on_pdu(h, flags, data).await {
                None => {}
                Some(e @ Event::Done(..)) => self.stash.push_back(e),
                Some(e) => panic!("waiting for the R2T of cid {cid}: {e:?}"),
            }
        }
    }

    /// Whether the R2T of `cid` has arrived (without reading).
    pub fn has_held_r2t(&self, cid: u16) -> bool {
        self.held_r2ts.iter().any(|r| r.cccid == cid)
    }

    /// Sends the data of held command `cid` (its R2T must have arrived).
    pub async fn release_r2t(&mut self, cid: u16) {
        self.hold.remove(&cid);
        let i = self
            .held_r2ts
            .iter()
            .position(|r| r.cccid == cid)
            .expect("R2T held for this cid");
        let r = self.held_r2ts.remove(i);
        self.send_r2t_data(r).await;
    }

    async fn send_r2t_data(&mut self, r: R2t) {
        let w = self
            .pending
            .get(&r.cccid)
            .and_then(|p| p.write.clone())
            .expect("R2T for a command without write data");
        let start = r.offset as usize;
        let end = start + r.length as usize;
        assert!(end <= w.len(), "R2T beyond the data");
        let mut off = start;
        while off < end {
            let n = (self.maxh2cdata as usize).min(end - off);
            let last = off + n == end;
            let h = PduHeader::H2CData(DataHeader {
                cccid: r.cccid,
                ttag: r.ttag,
                offset: off as u32,
                length: n as u32,
            });
            let v = self.encode_pdu(
                &h,
                if last { pdu_flags::LAST_PDU } else { 0 },
                &w[off..off + n],
            );
            self.send_raw(&v).await;
            off += n;
        }
    }

    /// Handles one PDU; returns an event when a command ended or the target terminated.
    async fn on_pdu(&mut self, h: PduHeader, flags: u8, data: Vec<u8>) -> Option<Event> {
        match h {
            PduHeader::CapsuleResp(c) => {
                let p = self
                    .pending
                    .remove(&c.cid)
                    .map(|p| p.read)
                    .unwrap_or_default();
                Some(Event::Done(c, p))
            }
            PduHeader::C2HData(d) => {
                let p = self
                    .pending
                    .get_mut(&d.cccid)
                    .expect("C2HData for unknown cid");
                assert_eq!(d.offset as usize, p.read.len(), "C2HData offset");
                assert_eq!(d.length as usize, data.len(), "C2HData length");
                p.read.extend_from_slice(&data);
                if flags & pdu_flags::SUCCESS != 0 {
                    assert!(flags & pdu_flags::LAST_PDU != 0, "SUCCESS without LAST");
                    self.successes_seen += 1;
                    let p = self
                        .pending
                        .remove(&d.cccid)
                        .map(|p| p.read)
                        .unwrap_or_default();
                    return Some(Event::Done(Completion::success(d.cccid), p));
                }
                None
            }
            PduHeader::R2t(r) => {
                self.r2ts_seen += 1;
                if self.hold.contains(&r.cccid) {
                    self.held_r2ts.push(r);
                } else {
                    self.send_r2t_data(r).await;
                }
                None
            }
            PduHeader::C2HTermReq(t) => Some(Event::Term(t)),
            other => panic!("unexpected PDU {other:?}"),
        }
    }

    pub async fn exec(
        &mut self,
        cmd: Command,
        write: Option<&[u8]>,
        read_len: usize,
    ) -> (Completion, Vec<u8>) {
        self.submit(cmd, write, read_len, true).await;
        match self.next_event().await {
            Event::Done(c, d) => (c, d),
            e => panic!("command {cmd:?} ended with {e:?}"),
        }
    }

    pub async fn expect_status(
        &mut self,
        cmd: Command,
        write: Option<&[u8]>,
        read_len: usize,
    ) -> Status {
        self.exec(cmd, write, read_len).await.0.status
    }

    pub async fn fabrics_connect(
        &mut self,
        qid: u16,
        sqsize: u16,
        kato_ms: u32,
        subnqn: &str,
        hostnqn: &str,
        cntlid: u16,
    ) -> Completion {
        let cc = ConnectCommand {
            recfmt: 0,
            qid,
            sqsize,
            cattr: self.cattr,
            kato_ms,
        };
        let cmd = cc.to_command(0);
        let data = ConnectData {
            hostid: self.hostid,
            cntlid,
            subnqn: subnqn.to_string(),
            hostnqn: hostnqn.to_string(),
        }
        .to_bytes();
        let (c, _) = self.exec(cmd, Some(&data), 0).await;
        if c.status.is_success() {
            self.cntlid = c.dw0 as u16;
        }
        c
    }

    pub async fn prop_get(&mut self, ofst: u32, size: PropertySize) -> (Status, u64) {
        let (c, _) = self
            .exec(PropertyGet { size, ofst }.to_command(0), None, 0)
            .await;
        (c.status, c.result64())
    }

    pub async fn prop_set(&mut self, ofst: u32, value: u64) -> Status {
        let cmd = PropertySet {
            size: PropertySize::Four,
            ofst,
            value,
        }
        .to_command(0);
        self.exec(cmd, None, 0).await.0.status
    }

    /// Enables the controller the way Linux does (CC.EN with IOSQES 6 / IOCQES 4).
    pub async fn enable(&mut self) {
        let cc: u64 = 1 | (6 << 16) | (4 << 20);
        assert_eq!(self.prop_set(reg::CC, cc).await, Status::SUCCESS);
        let (st, csts) = self.prop_get(reg::CSTS, PropertySize::Four).await;
        assert_eq!(st, Status::SUCCESS);
        assert_eq!(csts & 1, 1, "CSTS.RDY");
    }

    /// TCP + ICReq + admin Connect + enable.
    pub async fn admin(addr: SocketAddr, subnqn: &str, kato_ms: u32) -> Client {
        let mut c = Client::tcp(addr).await;
        c.icreq(false, false).await;
        let r = c
            .fabrics_connect(0, 31, kato_ms, subnqn, HOSTNQN, 0xFFFF)
            .await;
        assert_eq!(r.status, Status::SUCCESS, "admin connect");
        c.enable().await;
        c
    }

    /// Like [`Client::admin`] for another host identity.
    pub async fn admin_as(
        addr: SocketAddr,
        subnqn: &str,
        hostnqn: &str,
        hostid: [u8; 16],
    ) -> Client {
        let mut c = Client::tcp(addr).await;
        c.hostid = hostid;
        c.hostnqn = hostnqn.to_string();
        c.icreq(false, false).await;
        let r = c.fabrics_connect(0, 31, 0, subnqn, hostnqn, 0xFFFF).await;
        assert_eq!(r.status, Status::SUCCESS, "admin connect");
        c.enable().await;
        c
    }

    /// An I/O queue of `admin`'s controller, with its host identity.
    pub async fn io_queue_of(addr: SocketAddr, admin: &Client, subnqn: &str, qid: u16) -> Client {
        let mut c = Client::tcp(addr).await;
        c.hostid = admin.hostid;
        c.hostnqn = admin.hostnqn.clone();
        c.icreq(false, false).await;
        let hostnqn = c.hostnqn.clone();
        let r = c
            .fabrics_connect(qid, 127, 0, subnqn, &hostnqn, admin.cntlid)
            .await;
        assert_eq!(r.status, Status::SUCCESS, "I/O connect");
        c.icd_limit = 16 << 10;
        c
    }

    /// TCP + ICReq + I/O queue Connect to controller `cntlid`.
    pub async fn io_queue(addr: SocketAddr, cntlid: u16, qid: u16, hd: bool, dd: bool) -> Client {
        let mut c = Client::tcp(addr).await;
        c.icreq(hd, dd).await;
        let r = c
            .fabrics_connect(qid, 127, 0, SUBNQN, HOSTNQN, cntlid)
            .await;
        assert_eq!(r.status, Status::SUCCESS, "I/O connect");
        c.icd_limit = 16 << 10;
        c
    }
}

pub fn read_cmd(nsid: u32, slba: u64, nlb: u32) -> Command {
    let mut c = Command::new(io::READ, 0, nsid);
    c.set_slba(slba).set_cdw12(nlb - 1);
    c
}

pub fn write_cmd(nsid: u32, slba: u64, nlb: u32) -> Command {
    let mut c = Command::new(io::WRITE, 0, nsid);
    c.set_slba(slba).set_cdw12(nlb - 1);
    c
}

pub fn identify_cmd(cns: u8, nsid: u32) -> Command {
    let mut c = Command::new(admin::IDENTIFY, 0, nsid);
    c.set_cdw10(u32::from(cns));
    c
}

/// Admin + one I/O queue on a fresh target.
pub async fn setup(cfg: TargetConfig) -> (TestTarget, Client, Client) {
    let t = start_target(cfg).await;
    let a = Client::admin(t.addr, SUBNQN, 0).await;
    let q = Client::io_queue(t.addr, a.cntlid, 1, false, false).await;
    (t, a, q)
}

/// Deterministic test pattern.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
