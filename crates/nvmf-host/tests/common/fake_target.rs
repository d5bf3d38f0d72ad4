//! A small NVMe/TCP target for the initiator's tests: enough of Connect, properties,
//! Identify, features, log pages and NVM I/O on a RAM namespace to exercise every path of
//! the host (in-capsule, R2T split by MAXH2CDATA, C2HData with and without SUCCESS,
//! digests), plus faults a real target never makes (garbage, half PDUs, bad digests,
//! termination requests, silence, stalls), Abort of ignored reads, and reconnects (the
//! namespace data outlives connections).

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nvme_proto::bytes::{le32, le64};
use nvme_proto::fabrics::{
    Cap, Cc, ConnectCommand, ConnectData, ConnectResponse, Csts, PropertyGet, PropertySet,
    PropertySize, Vs, reg,
};
use nvme_proto::identify::{
    IdentifyCommand, IdentifyController, IdentifyNamespace, LbaFormat, NsList, cns,
};
use nvme_proto::log::{DiscoveryLog, DiscoveryLogEntry, GetLogPageCommand, lid, read_log_page};
use nvme_proto::opcode::{admin, fctype, io};
use nvme_proto::sgl::TcpDataLocation;
use nvme_proto::tcp::{
    CH_BYTES, CommonHeader, DataHeader, Digests, FatalError, Framing, IcResp, PduHeader, R2t,
    data_digest, encode_header, encode_term_req, fes, layout, pdu_flags,
};
use nvme_proto::{Command, Completion, Status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

/// Misbehaviour to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// After the ICResp, send random bytes instead of answers.
    GarbageAfterIcResp,
    /// Answer the first I/O Read with half a C2HData PDU, then close.
    CloseMidPdu,
    /// Corrupt the header digest of the first I/O Read's C2HData.
    BadHeaderDigest,
    /// Corrupt the data digest of the first I/O Read's C2HData.
    BadDataDigest,
    /// Answer the first I/O Read with a C2HTermReq.
    TermReq,
    /// Never answer I/O Reads (the connection stays up).
    IgnoreReads,
    /// Send a CapsuleResp for a CID that is not outstanding on the first I/O Read.
    UnknownCid,
    /// Send an R2T for more bytes than the Write carries.
    R2tPastEnd,
    /// Answer the first I/O Read with 64 bytes of garbage (the connection stays open).
    GarbageOnRead,
    /// Answer the first I/O Read with half a C2HData PDU, then stay silent (connection
    /// open).
    StallMidPdu,
    /// Hold I/O Reads until an Abort names them: then complete them with "command abort
    /// requested" and report them aborted (DW0 bit 0 = 0).
    IgnoreReadsUntilAbort,
}

#[derive(Debug, Clone)]
pub struct FakeConfig {
    pub subnqn: String,
    /// Only this host may connect (others get Connect Invalid Host); None allows all.
    pub allowed_host: Option<String>,
    pub lba_shift: u32,
    pub size_bytes: u64,
    pub maxh2cdata: u32,
    /// IOCCSZ in 16-byte units (4 = no in-capsule data on I/O queues).
    pub ioccsz: u32,
    pub mdts: u8,
    /// Payload per C2HData PDU.
    pub c2h_chunk: usize,
    /// Complete reads with the SUCCESS flag instead of a CapsuleResp.
    pub c2h_success: bool,
    /// Bytes per R2T (0 = the whole transfer in one R2T).
    pub r2t_chunk: u32,
    /// Pause before each R2T (lets later capsules queue up behind it).
    pub r2t_delay_ms: u64,
    /// Digest bits to answer in ICResp instead of mirroring the ICReq.
    pub icresp_digests: Option<u8>,
    pub fault: Fault,
    /// How many times the fault fires (u32::MAX: always).
    pub fault_times: u32,
    pub io_queues_max: u16,
    pub kas: u16,
    pub discovery: Vec<DiscoveryLogEntry>,
    /// Bump GENCTR on this many header reads of the discovery log (to force retries).
    pub genctr_bumps: u32,
}

impl Default for FakeConfig {
    fn default() -> Self {
        FakeConfig {
            subnqn: "nqn.2026-01.io.ferrobay.test:fake".into(),
            allowed_host: None,
            lba_shift: 9,
            size_bytes: 64 << 20,
            maxh2cdata: 32 * 1024,
            ioccsz: 4 + 8192 / 16,
            mdts: 5,
            c2h_chunk: 48 * 1024,
            c2h_success: true,
            r2t_chunk: 0,
            r2t_delay_ms: 0,
            icresp_digests: None,
            fault: Fault::None,
            fault_times: 1,
            io_queues_max: 4,
            kas: 1,
            discovery: Vec::new(),
            genctr_bumps: 0,
        }
    }
}

pub struct State {
    pub cfg: FakeConfig,
    pub data: Mutex<Vec<u8>>,
    pub cc: AtomicU32,
    pub next_cntlid: AtomicU16,
    pub keepalives: AtomicU64,
    pub connections: AtomicU64,
    pub h2c_pdus: AtomicU64,
    pub max_h2c_bytes: AtomicU64,
    pub in_capsule_writes: AtomicU64,
    pub log_reads: Mutex<Vec<(u8, u64, u64)>>,
    pub genctr: AtomicU64,
    pub fault_fired: AtomicU32,
    pub resv: Mutex<Resv>,
    /// While set, no command gets an answer (connections and ICResp still work).
    pub stalled: std::sync::atomic::AtomicBool,
    /// Admin queue Connects (one per controller association, reconnects included).
    pub admin_connects: AtomicU64,
    pub io_reads: AtomicU64,
    pub aborts: AtomicU64,
    /// Most writes waiting for their data at once on one connection.
    pub max_pending_writes: AtomicU64,
    /// Reads held for Abort: (cntlid, qid, cid) and the connection to answer on.
    pub held: Mutex<HashMap<(u16, u16, u16), Writer>>,
}

pub type Writer = Arc<tokio::sync::Mutex<OwnedWriteHalf>>;

/// Reservation state of namespace 1: registrants by host ID, and the holder.
#[derive(Default)]
pub struct Resv {
    pub keys: Vec<([u8; 16], u64)>,
    pub holder: Option<[u8; 16]>,
    pub rtype: u8,
    pub generation: u32,
}

pub struct FakeTarget {
    pub addr: SocketAddr,
    pub state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeTarget {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeTarget {
    pub async fn start(cfg: FakeConfig) -> FakeTarget {
        FakeTarget::start_at("127.0.0.1:0".parse().expect("addr"), cfg).await
    }

    /// Listens on `addr` (a fixed port: to bring a target back where it was).
    pub async fn start_at(addr: SocketAddr, cfg: FakeConfig) -> FakeTarget {
        let listener = TcpListener::bind(addr).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(State {
            data: Mutex::new(vec![0u8; cfg.size_bytes as usize]),
            cfg,
            cc: AtomicU32::new(0),
            next_cntlid: AtomicU16::new(1),
            keepalives: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            h2c_pdus: AtomicU64::new(0),
            max_h2c_bytes: AtomicU64::new(0),
            in_capsule_writes: AtomicU64::new(0),
            log_reads: Mutex::new(Vec::new()),
            genctr: AtomicU64::new(1),
            fault_fired: AtomicU32::new(0),
            resv: Mutex::new(Resv::default()),
            stalled: std::sync::atomic::AtomicBool::new(false),
            admin_connects: AtomicU64::new(0),
            io_reads: AtomicU64::new(0),
            aborts: AtomicU64::new(0),
            max_pending_writes: AtomicU64::new(0),
            held: Mutex::new(HashMap::new()),
        });
        let st = state.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((s, _)) = listener.accept().await {
                st.connections.fetch_add(1, Ordering::Relaxed);
                let st = st.clone();
                conns.spawn(async move {
                    let _ = Conn::new(s, st).run().await;
                });
            }
        });
        FakeTarget { addr, state, task }
    }
}

struct PendingWrite {
    cmd: Command,
    buf: Vec<u8>,
    /// End of the range the current R2T asked for.
    r2t_end: u32,
    received: u32,
}

struct Conn {
    r: OwnedReadHalf,
    w: Writer,
    st: Arc<State>,
    fr: Framing,
    qid: u16,
    cntlid: u16,
    hostid: [u8; 16],
    writes: HashMap<u16, PendingWrite>,
}

type Res<T> = Result<T, String>;

impl Conn {
    fn new(s: TcpStream, st: Arc<State>) -> Conn {
        let _ = s.set_nodelay(true);
        let (r, w) = s.into_split();
        Conn {
            r,
            w: Arc::new(tokio::sync::Mutex::new(w)),
            st,
            fr: Framing::default(),
            qid: 0,
            cntlid: 0,
            hostid: [0; 16],
            writes: HashMap::new(),
        }
    }

    /// Whether fault `f` fires now (at most `fault_times` times in all).
    fn fault_once(&self, f: Fault) -> bool {
        self.st.cfg.fault == f
            && self.st.fault_fired.fetch_add(1, Ordering::Relaxed) < self.st.cfg.fault_times
    }

    async fn run(mut self) -> Res<()> {
        // ICReq.
        let mut ic = [0u8; 128];
        self.r
            .read_exact(&mut ic)
            .await
            .map_err(|e| e.to_string())?;
        let ch = ch_of(&ic);
        let req = match PduHeader::decode(&ch, &ic) {
            Ok(PduHeader::IcReq(r)) => r,
            _ => return Err("no ICReq".into()),
        };
        let bits = self.st.cfg.icresp_digests.unwrap_or(req.digests.bits());
        let resp = IcResp {
            pfv: 0,
            cpda: 0,
            digests: Digests::from_bits(bits),
            maxh2cdata: self.st.cfg.maxh2cdata,
        };
        let h = encode_header(&PduHeader::IcResp(resp), 0, 0, Framing::default());
        self.send(h.as_bytes()).await?;
        self.fr.digests = Digests::from_bits(bits);
        if self.st.cfg.fault == Fault::GarbageAfterIcResp {
            self.send(&[0x5Au8; 64]).await?;
            // Keep the connection open so the host must detect the garbage itself.
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            return Ok(());
        }
        loop {
            let (hdr, data) = self.read_pdu().await?;
            if self.st.stalled.load(Ordering::Relaxed) {
                continue;
            }
            match hdr {
                PduHeader::CapsuleCmd(cmd) => self.on_command(cmd, data).await?,
                PduHeader::H2CData(d) => self.on_h2c(d, data).await?,
                PduHeader::H2CTermReq(_) => return Ok(()),
                other => return Err(format!("unexpected {other:?}")),
            }
        }
    }

    async fn send(&mut self, b: &[u8]) -> Res<()> {
        self.w
            .lock()
            .await
            .write_all(b)
            .await
            .map_err(|e| e.to_string())
    }

    async fn read_pdu(&mut self) -> Res<(PduHeader, Vec<u8>)> {
        let mut chb = [0u8; CH_BYTES];
        self.r
            .read_exact(&mut chb)
            .await
            .map_err(|e| e.to_string())?;
        let ch = CommonHeader::decode(&chb);
        let l = layout(&ch, Some(self.fr.digests), 1 << 24).map_err(|e| e.to_string())?;
        let mut all = vec![0u8; l.total_len];
        all[..CH_BYTES].copy_from_slice(&chb);
        self.r
            .read_exact(&mut all[CH_BYTES..])
            .await
            .map_err(|e| e.to_string())?;
        if l.has_hdgst {
            nvme_proto::tcp::check_header_digest(&all, l.hlen).map_err(|e| e.to_string())?;
        }
        let hdr = PduHeader::decode(&ch, &all).map_err(|e| e.to_string())?;
        let data = all[l.data_offset..l.data_offset + l.data_len].to_vec();
        if l.has_ddgst {
            let d = &all[l.data_offset + l.data_len..l.data_offset + l.data_len + 4];
            if data_digest(&data) != d {
                return Err("host data digest mismatch".into());
            }
        }
        Ok((hdr, data))
    }

    async fn respond(&mut self, cqe: Completion) -> Res<()> {
        let h = encode_header(&PduHeader::CapsuleResp(cqe), 0, 0, self.fr);
        self.send(h.as_bytes()).await
    }

    async fn status(&mut self, cid: u16, s: Status) -> Res<()> {
        self.respond(Completion::new(cid, s)).await
    }

    async fn on_command(&mut self, cmd: Command, data: Vec<u8>) -> Res<()> {
        let cid = cmd.cid();
        let sgl = cmd.sgl1();
        let write_len = match sgl.tcp_location() {
            Some(TcpDataLocation::Transport { length })
                if host_to_controller(&cmd) && length > 0 =>
            {
                Some(length)
            }
            _ => None,
        };
        if !data.is_empty() {
            self.st.in_capsule_writes.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(len) = write_len {
            // Data comes with R2T.
            let mut pw = PendingWrite {
                cmd,
                buf: vec![0u8; len as usize],
                r2t_end: 0,
                received: 0,
            };
            let first = self.next_r2t(&mut pw);
            self.writes.insert(cid, pw);
            self.st
                .max_pending_writes
                .fetch_max(self.writes.len() as u64, Ordering::Relaxed);
            return self.send_r2t(cid, first).await;
        }
        self.execute(cmd, data).await
    }

    fn next_r2t(&self, pw: &mut PendingWrite) -> (u32, u32) {
        let total = pw.buf.len() as u32;
        let chunk = if self.st.cfg.r2t_chunk == 0 {
            total
        } else {
            self.st.cfg.r2t_chunk
        };
        let off = pw.r2t_end;
        let len = chunk.min(total - off);
        pw.r2t_end = off + len;
        (off, len)
    }

    async fn send_r2t(&mut self, cid: u16, (offset, length): (u32, u32)) -> Res<()> {
        if self.st.cfg.r2t_delay_ms > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(self.st.cfg.r2t_delay_ms)).await;
        }
        let length = if self.qid > 0 && self.fault_once(Fault::R2tPastEnd) {
            length + 4096
        } else {
            length
        };
        let h = encode_header(
            &PduHeader::R2t(R2t {
                cccid: cid,
                ttag: cid,
                offset,
                length,
            }),
            0,
            0,
            self.fr,
        );
        self.send(h.as_bytes()).await
    }

    async fn on_h2c(&mut self, d: DataHeader, data: Vec<u8>) -> Res<()> {
        self.st.h2c_pdus.fetch_add(1, Ordering::Relaxed);
        self.st
            .max_h2c_bytes
            .fetch_max(data.len() as u64, Ordering::Relaxed);
        if data.len() as u32 > self.st.cfg.maxh2cdata {
            return Err("H2CData above MAXH2CDATA".into());
        }
        let pw = self
            .writes
            .get_mut(&d.ttag)
            .ok_or("H2CData for unknown ttag")?;
        let off = d.offset as usize;
        if off != pw.received as usize {
            return Err(format!("H2CData offset {off} != {}", pw.received));
        }
        pw.buf
            .get_mut(off..off + data.len())
            .ok_or("H2CData out of range")?
            .copy_from_slice(&data);
        pw.received += data.len() as u32;
        if pw.received < pw.r2t_end {
            return Ok(());
        }
        if pw.received < pw.buf.len() as u32 {
            let mut pw = self.writes.remove(&d.ttag).ok_or("lost write")?;
            let next = self.next_r2t(&mut pw);
            self.writes.insert(d.ttag, pw);
            return self.send_r2t(d.ttag, next).await;
        }
        let pw = self.writes.remove(&d.ttag).ok_or("lost write")?;
        self.execute(pw.cmd, pw.buf).await
    }

    async fn execute(&mut self, cmd: Command, data: Vec<u8>) -> Res<()> {
        let cid = cmd.cid();
        if cmd.opcode() == admin::FABRICS {
            return self.fabrics(cmd, data).await;
        }
        if self.qid == 0 {
            self.admin(cmd).await
        } else {
            self.io(cmd, data).await
        }
        .map_err(|e| format!("CID {cid}: {e}"))
    }

    async fn fabrics(&mut self, cmd: Command, data: Vec<u8>) -> Res<()> {
        let cid = cmd.cid();
        match cmd.fctype() {
            fctype::CONNECT => {
                let cc = ConnectCommand::from_command(&cmd);
                let cd = ConnectData::decode(&data).map_err(|e| e.to_string())?;
                if let Some(h) = &self.st.cfg.allowed_host
                    && *h != cd.hostnqn
                {
                    return self.status(cid, Status::CONNECT_INVALID_HOST.dnr()).await;
                }
                self.qid = cc.qid;
                self.hostid = cd.hostid;
                if cc.qid == 0 {
                    self.st.admin_connects.fetch_add(1, Ordering::Relaxed);
                }
                self.cntlid = if cc.qid == 0 {
                    self.st.next_cntlid.fetch_add(1, Ordering::Relaxed)
                } else {
                    cd.cntlid
                };
                let cntlid = self.cntlid;
                self.respond(ConnectResponse { cntlid, authreq: 0 }.completion(cid))
                    .await
            }
            fctype::PROPERTY_GET => {
                let g = PropertyGet::from_command(&cmd).map_err(|e| e.to_string())?;
                let cc = Cc::from_u32(self.st.cc.load(Ordering::Relaxed));
                let v = match g.ofst {
                    reg::CAP => Cap {
                        mqes: 127,
                        cqr: true,
                        to_500ms: 2,
                        css: Cap::CSS_NVM,
                        ..Cap::default()
                    }
                    .to_u64(),
                    reg::VS => u64::from(Vs::V1_3.to_u32()),
                    reg::CC => u64::from(cc.to_u32()),
                    reg::CSTS => u64::from(
                        Csts {
                            rdy: cc.en,
                            shst: if cc.shn != 0 { Csts::SHST_COMPLETE } else { 0 },
                            ..Csts::default()
                        }
                        .to_u32(),
                    ),
                    _ => return self.status(cid, Status::INVALID_FIELD).await,
                };
                self.respond(g.completion(cid, v)).await
            }
            fctype::PROPERTY_SET => {
                let s = PropertySet::from_command(&cmd).map_err(|e| e.to_string())?;
                if s.ofst == reg::CC && s.size == PropertySize::Four {
                    self.st.cc.store(s.value as u32, Ordering::Relaxed);
                }
                self.status(cid, Status::SUCCESS).await
            }
            _ => self.status(cid, Status::INVALID_OPCODE).await,
        }
    }

    async fn send_c2h(&mut self, cid: u16, data: &[u8], success: bool) -> Res<()> {
        let chunk = self.st.cfg.c2h_chunk.max(1);
        let n = data.len().div_ceil(chunk);
        for (i, piece) in data.chunks(chunk).enumerate() {
            let last = i + 1 == n;
            let mut flags = 0;
            if last {
                flags |= pdu_flags::LAST_PDU;
                if success {
                    flags |= pdu_flags::SUCCESS;
                }
            }
            let h = encode_header(
                &PduHeader::C2HData(DataHeader {
                    cccid: cid,
                    ttag: 0,
                    offset: (i * chunk) as u32,
                    length: piece.len() as u32,
                }),
                flags,
                piece.len(),
                self.fr,
            );
            let mut pdu = h.as_bytes().to_vec();
            pdu.extend_from_slice(piece);
            if self.fr.digests.data {
                pdu.extend_from_slice(&data_digest(piece));
            }
            self.send(&pdu).await?;
        }
        if !success {
            self.status(cid, Status::SUCCESS).await?;
        }
        Ok(())
    }

    async fn admin(&mut self, cmd: Command) -> Res<()> {
        let cid = cmd.cid();
        let cfg = self.st.cfg.clone();
        match cmd.opcode() {
            admin::IDENTIFY => {
                let i = IdentifyCommand::from_command(&cmd);
                let mut out = vec![0u8; 4096];
                match i.cns {
                    cns::CONTROLLER => {
                        let id = IdentifyController {
                            cntlid: self.cntlid,
                            sn: "FAKE0001".into(),
                            mn: "ferrobay fake target".into(),
                            fr: "0.1".into(),
                            mdts: cfg.mdts,
                            ver: Vs::V1_3.to_u32(),
                            kas: cfg.kas,
                            sqes: 0x66,
                            cqes: 0x44,
                            maxcmd: 128,
                            nn: 1,
                            oncs: 0b10_1101,
                            vwc: 1,
                            sgls: 1 | (1 << 20) | (1 << 21),
                            subnqn: cfg.subnqn.clone(),
                            ioccsz: cfg.ioccsz,
                            iorcsz: 1,
                            cntrltype: 1,
                            ..IdentifyController::default()
                        };
                        id.encode(&mut out);
                    }
                    cns::NAMESPACE if i.nsid == 1 => {
                        let mut ns = IdentifyNamespace {
                            nsze: cfg.size_bytes >> cfg.lba_shift,
                            ncap: cfg.size_bytes >> cfg.lba_shift,
                            nuse: cfg.size_bytes >> cfg.lba_shift,
                            ..IdentifyNamespace::default()
                        };
                        ns.lbaf[0] = LbaFormat::new(cfg.lba_shift as u8);
                        ns.encode(&mut out);
                    }
                    cns::NAMESPACE => {}
                    cns::ACTIVE_NS_LIST => {
                        NsList::above([1u32], i.nsid).encode(&mut out);
                    }
                    _ => return self.status(cid, Status::INVALID_FIELD).await,
                }
                self.send_c2h(cid, &out, false).await
            }
            admin::SET_FEATURES => {
                let fid = cmd.cdw10() as u8;
                if fid == 0x07 {
                    let want = cmd.cdw11() & 0xFFFF;
                    let g = u32::from(cfg.io_queues_max - 1).min(want);
                    let mut c = Completion::success(cid);
                    c.dw0 = g | (g << 16);
                    return self.respond(c).await;
                }
                self.status(cid, Status::SUCCESS).await
            }
            admin::KEEP_ALIVE => {
                self.st.keepalives.fetch_add(1, Ordering::Relaxed);
                self.status(cid, Status::SUCCESS).await
            }
            // Held: no events ever happen here.
            admin::ASYNC_EVENT_REQUEST => Ok(()),
            admin::ABORT => {
                self.st.aborts.fetch_add(1, Ordering::Relaxed);
                let sqid = (cmd.cdw10() & 0xFFFF) as u16;
                let victim = (cmd.cdw10() >> 16) as u16;
                let held = self
                    .st
                    .held
                    .lock()
                    .expect("lock")
                    .remove(&(self.cntlid, sqid, victim));
                let mut c = Completion::success(cid);
                c.dw0 = 1;
                if let Some(w) = held {
                    let mut r = Completion::new(victim, Status::ABORT_REQUESTED);
                    r.sqid = sqid;
                    let h = encode_header(&PduHeader::CapsuleResp(r), 0, 0, self.fr);
                    w.lock()
                        .await
                        .write_all(h.as_bytes())
                        .await
                        .map_err(|e| e.to_string())?;
                    c.dw0 = 0;
                }
                self.respond(c).await
            }
            admin::GET_LOG_PAGE => {
                let g = GetLogPageCommand::from_command(&cmd);
                if g.lid != lid::DISCOVERY {
                    return self.status(cid, Status::INVALID_LOG_PAGE.dnr()).await;
                }
                self.st
                    .log_reads
                    .lock()
                    .expect("lock")
                    .push((g.lid, g.lpo, g.len_bytes()));
                if g.lpo == 0 {
                    let bumps = self.st.cfg.genctr_bumps;
                    let reads = self
                        .st
                        .log_reads
                        .lock()
                        .expect("lock")
                        .iter()
                        .filter(|r| r.1 == 0)
                        .count() as u32;
                    if reads > 1 && reads <= bumps + 1 {
                        self.st.genctr.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let page = DiscoveryLog {
                    genctr: self.st.genctr.load(Ordering::Relaxed),
                    recfmt: 0,
                    entries: cfg.discovery.clone(),
                }
                .to_bytes();
                let mut out = vec![0u8; g.len_bytes() as usize];
                if read_log_page(&page, g.lpo, &mut out).is_err() {
                    return self.status(cid, Status::INVALID_FIELD.dnr()).await;
                }
                self.send_c2h(cid, &out, false).await
            }
            _ => self.status(cid, Status::INVALID_OPCODE.dnr()).await,
        }
    }

    fn range(&self, cmd: &Command) -> Option<std::ops::Range<usize>> {
        let sh = self.st.cfg.lba_shift;
        let start = (cmd.slba() << sh) as usize;
        let len = (u64::from(cmd.nlb()) << sh) as usize;
        let end = start.checked_add(len)?;
        (end as u64 <= self.st.cfg.size_bytes).then_some(start..end)
    }

    async fn io(&mut self, cmd: Command, data: Vec<u8>) -> Res<()> {
        let cid = cmd.cid();
        match cmd.opcode() {
            io::READ => {
                let Some(r) = self.range(&cmd) else {
                    return self.status(cid, Status::LBA_OUT_OF_RANGE.dnr()).await;
                };
                let buf = self.st.data.lock().expect("lock")[r].to_vec();
                self.st.io_reads.fetch_add(1, Ordering::Relaxed);
                if self.fault_once(Fault::IgnoreReads) {
                    return Ok(());
                }
                if self.fault_once(Fault::IgnoreReadsUntilAbort) {
                    self.st
                        .held
                        .lock()
                        .expect("lock")
                        .insert((self.cntlid, self.qid, cid), self.w.clone());
                    return Ok(());
                }
                if self.fault_once(Fault::CloseMidPdu) {
                    let h = encode_header(
                        &PduHeader::C2HData(DataHeader {
                            cccid: cid,
                            ttag: 0,
                            offset: 0,
                            length: buf.len() as u32,
                        }),
                        pdu_flags::LAST_PDU,
                        buf.len(),
                        self.fr,
                    );
                    self.send(h.as_bytes()).await?;
                    self.send(&buf[..buf.len() / 2]).await?;
                    return Err("closing mid-PDU as asked".into());
                }
                if self.fault_once(Fault::GarbageOnRead) {
                    return self.send(&[0x5Au8; 64]).await;
                }
                if self.fault_once(Fault::StallMidPdu) {
                    let h = encode_header(
                        &PduHeader::C2HData(DataHeader {
                            cccid: cid,
                            ttag: 0,
                            offset: 0,
                            length: buf.len() as u32,
                        }),
                        pdu_flags::LAST_PDU,
                        buf.len(),
                        self.fr,
                    );
                    self.send(h.as_bytes()).await?;
                    self.send(&buf[..buf.len() / 2]).await?;
                    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
                    return Err("stalled as asked".into());
                }
                if self.fault_once(Fault::TermReq) {
                    let t = encode_term_req(true, &FatalError::header_field(0, "fake"), &[0u8; 24]);
                    self.send(&t).await?;
                    return Err("terminated as asked".into());
                }
                if self.fault_once(Fault::UnknownCid) {
                    return self.status(cid.wrapping_add(77), Status::SUCCESS).await;
                }
                if self.st.cfg.fault == Fault::BadHeaderDigest
                    || self.st.cfg.fault == Fault::BadDataDigest
                {
                    let which = self.st.cfg.fault;
                    if self.fault_once(which) {
                        let h = encode_header(
                            &PduHeader::C2HData(DataHeader {
                                cccid: cid,
                                ttag: 0,
                                offset: 0,
                                length: buf.len() as u32,
                            }),
                            pdu_flags::LAST_PDU | pdu_flags::SUCCESS,
                            buf.len(),
                            self.fr,
                        );
                        let mut pdu = h.as_bytes().to_vec();
                        if which == Fault::BadHeaderDigest {
                            pdu[24] ^= 0xFF;
                        }
                        pdu.extend_from_slice(&buf);
                        if self.fr.digests.data {
                            let mut d = data_digest(&buf);
                            if which == Fault::BadDataDigest {
                                d[0] ^= 0xFF;
                            }
                            pdu.extend_from_slice(&d);
                        }
                        return self.send(&pdu).await;
                    }
                }
                let success = self.st.cfg.c2h_success;
                self.send_c2h(cid, &buf, success).await
            }
            io::WRITE | io::COMPARE => {
                let Some(r) = self.range(&cmd) else {
                    return self.status(cid, Status::LBA_OUT_OF_RANGE.dnr()).await;
                };
                if data.len() != r.len() {
                    return self
                        .status(cid, Status::DATA_SGL_LENGTH_INVALID.dnr())
                        .await;
                }
                let same = {
                    let mut d = self.st.data.lock().expect("lock");
                    if cmd.opcode() == io::COMPARE {
                        d[r] == data[..]
                    } else {
                        d[r].copy_from_slice(&data);
                        true
                    }
                };
                let s = if same {
                    Status::SUCCESS
                } else {
                    Status::COMPARE_FAILURE
                };
                self.status(cid, s).await
            }
            io::FLUSH => self.status(cid, Status::SUCCESS).await,
            io::WRITE_ZEROES => {
                let Some(r) = self.range(&cmd) else {
                    return self.status(cid, Status::LBA_OUT_OF_RANGE.dnr()).await;
                };
                self.st.data.lock().expect("lock")[r].fill(0);
                self.status(cid, Status::SUCCESS).await
            }
            io::DATASET_MANAGEMENT => {
                let nr = (cmd.cdw10() & 0xFF) as usize + 1;
                let sh = self.st.cfg.lba_shift;
                for i in 0..nr {
                    let nlb = u64::from(le32(&data, 16 * i + 4));
                    let slba = le64(&data, 16 * i + 8);
                    let (s, e) = ((slba << sh) as usize, ((slba + nlb) << sh) as usize);
                    if e as u64 > self.st.cfg.size_bytes {
                        return self.status(cid, Status::LBA_OUT_OF_RANGE.dnr()).await;
                    }
                    self.st.data.lock().expect("lock")[s..e].fill(0);
                }
                self.status(cid, Status::SUCCESS).await
            }
            io::RESERVATION_REGISTER
            | io::RESERVATION_ACQUIRE
            | io::RESERVATION_RELEASE
            | io::RESERVATION_REPORT => self.reservation(cmd, data).await,
            _ => self.status(cid, Status::INVALID_OPCODE.dnr()).await,
        }
    }

    async fn reservation(&mut self, cmd: Command, data: Vec<u8>) -> Res<()> {
        use nvme_proto::reservation::*;
        let cid = cmd.cid();
        let me = self.hostid;
        let conflict = Status::RESERVATION_CONFLICT.dnr();
        let outcome: Result<Option<Vec<u8>>, Status> = {
            let mut r = self.st.resv.lock().expect("lock");
            let mine = r.keys.iter().position(|(h, _)| *h == me);
            match cmd.opcode() {
                io::RESERVATION_REGISTER => {
                    let c = ReservationRegister::from_command(&cmd);
                    let d = RegisterData::decode(&data).map_err(|e| e.to_string())?;
                    let key_ok = |k: u64| c.iekey || k == d.crkey;
                    match (c.rrega, mine) {
                        (rrega::REGISTER, None) => {
                            r.keys.push((me, d.nrkey));
                            r.generation += 1;
                            Ok(None)
                        }
                        (rrega::REGISTER, Some(i)) if r.keys[i].1 == d.nrkey => Ok(None),
                        (rrega::UNREGISTER, Some(i)) if key_ok(r.keys[i].1) => {
                            r.keys.remove(i);
                            if r.holder == Some(me) {
                                r.holder = None;
                                r.rtype = 0;
                            }
                            r.generation += 1;
                            Ok(None)
                        }
                        (rrega::REPLACE, Some(i)) if key_ok(r.keys[i].1) => {
                            r.keys[i].1 = d.nrkey;
                            r.generation += 1;
                            Ok(None)
                        }
                        _ => Err(conflict),
                    }
                }
                io::RESERVATION_ACQUIRE => {
                    let c = ReservationAcquire::from_command(&cmd);
                    let d = AcquireData::decode(&data).map_err(|e| e.to_string())?;
                    match mine {
                        Some(i) if r.keys[i].1 == d.crkey && c.racqa == racqa::ACQUIRE => {
                            match r.holder {
                                None => {
                                    r.holder = Some(me);
                                    r.rtype = c.rtype;
                                    Ok(None)
                                }
                                Some(h) if h == me && r.rtype == c.rtype => Ok(None),
                                _ => Err(conflict),
                            }
                        }
                        _ => Err(conflict),
                    }
                }
                io::RESERVATION_RELEASE => {
                    let c = ReservationRelease::from_command(&cmd);
                    let d = ReleaseData::decode(&data).map_err(|e| e.to_string())?;
                    match mine {
                        Some(i) if r.keys[i].1 == d.crkey => {
                            if c.rrela == rrela::CLEAR {
                                r.keys.clear();
                                r.holder = None;
                                r.rtype = 0;
                                r.generation += 1;
                                Ok(None)
                            } else if r.holder == Some(me) && r.rtype != c.rtype {
                                Err(Status::new(1, 0x89))
                            } else {
                                if r.holder == Some(me) {
                                    r.holder = None;
                                    r.rtype = 0;
                                }
                                Ok(None)
                            }
                        }
                        _ => Err(conflict),
                    }
                }
                _ => {
                    let c = ReservationReport::from_command(&cmd);
                    let st = ReservationStatus {
                        generation: r.generation,
                        rtype: r.rtype,
                        ptpls: false,
                        registrants: r
                            .keys
                            .iter()
                            .map(|(h, k)| RegisteredController {
                                cntlid: 1,
                                rcsts: u8::from(r.holder == Some(*h)),
                                hostid: *h,
                                rkey: *k,
                            })
                            .collect(),
                    };
                    let mut out = vec![0u8; c.len_bytes() as usize];
                    st.encode(c.eds, &mut out);
                    Ok(Some(out))
                }
            }
        };
        match outcome {
            Ok(Some(out)) => self.send_c2h(cid, &out, false).await,
            Ok(None) => self.status(cid, Status::SUCCESS).await,
            Err(s) => self.status(cid, s).await,
        }
    }
}

/// Fabrics commands carry their direction in FCTYPE, others in the opcode.
fn host_to_controller(cmd: &Command) -> bool {
    let d = if cmd.opcode() == admin::FABRICS {
        cmd.fctype()
    } else {
        cmd.opcode()
    };
    d & 3 == 1
}

fn ch_of(b: &[u8]) -> CommonHeader {
    let mut a = [0u8; CH_BYTES];
    a.copy_from_slice(&b[..CH_BYTES]);
    CommonHeader::decode(&a)
}

// Silence "unused" for items only some test files use.
pub const _FES: u16 = fes::INVALID_HEADER_FIELD;
