//! Quick loopback measurement of the target alone (the project's real instrument is
//! `ferrobay bench`): a minimal host keeps QD commands in flight on one or more queues.
//!
//! `cargo run --release -p nvmf-target --example loopback_bench -- [secs] [queues]`
//! runs the target in a child process and prints JSON with IOPS, MB/s and the target's CPU
//! seconds per million I/Os for 4 KiB random read, 4 KiB random write and 128 KiB
//! sequential read at QD 32.

use std::collections::VecDeque;
use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command as Proc, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvme_proto::fabrics::{ConnectCommand, ConnectData, PropertySet, PropertySize};
use nvme_proto::opcode::io;
use nvme_proto::tcp::{
    CH_BYTES, CommonHeader, DataHeader, Digests, Framing, IcReq, PduHeader, encode_header,
    pdu_flags,
};
use nvme_proto::{Command, SglDescriptor};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const SUBNQN: &str = "nqn.2026-01.io.ferrobay:bench:ram0";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000be";
const DEV_BYTES: u64 = 1 << 30;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("serve") {
        serve();
        return;
    }
    let secs: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    let queues: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    // FB_TARGET=ADDR,PID measures an already running `loopback_bench serve` (e.g. under perf).
    let (addr, pid, mut child) = match std::env::var("FB_TARGET") {
        Ok(v) => {
            let (a, p) = v.split_once(',').expect("FB_TARGET=ADDR,PID");
            (
                a.parse::<SocketAddr>().expect("addr"),
                p.parse::<u32>().expect("pid"),
                None,
            )
        }
        Err(_) => {
            let exe = std::env::current_exe().expect("exe");
            let mut child = Proc::new(exe)
                .arg("serve")
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn target");
            let mut line = String::new();
            {
                use std::io::BufRead;
                let out = child.stdout.as_mut().expect("stdout");
                std::io::BufReader::new(out)
                    .read_line(&mut line)
                    .expect("addr line");
            }
            let pid = child.id();
            (line.trim().parse().expect("addr"), pid, Some(child))
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("rt");
    // Fill the RAM device first so that measurements do not pay its first-touch allocation.
    rt.block_on(run(
        addr,
        1,
        io::WRITE,
        128 << 10,
        false,
        Duration::from_secs(2),
    ));
    let mut results = Vec::new();
    for (name, op, len, random) in [
        ("randread_4k_qd32", io::READ, 4096usize, true),
        ("randwrite_4k_qd32", io::WRITE, 4096, true),
        ("seqread_128k_qd32", io::READ, 128 << 10, false),
    ] {
        let cpu0 = proc_cpu_secs(pid);
        let t0 = Instant::now();
        let ios = rt.block_on(run(
            addr,
            queues,
            op,
            len,
            random,
            Duration::from_secs(secs),
        ));
        let wall = t0.elapsed().as_secs_f64();
        let cpu = proc_cpu_secs(pid) - cpu0;
        let iops = ios as f64 / wall;
        results.push(format!(
            "{{\"test\":\"{name}\",\"queues\":{queues},\"iops\":{iops:.0},\"mb_per_s\":{:.1},\"target_cpu_s_per_million_io\":{:.2}}}",
            iops * len as f64 / 1e6,
            cpu / (ios as f64 / 1e6)
        ));
    }
    if let Some(c) = child.as_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
    println!("[{}]", results.join(",\n "));
}

/// CPU seconds (user + system) the process `pid` has used so far.
fn proc_cpu_secs(pid: u32) -> f64 {
    bench::CpuTime::of_pid(pid).map_or(0.0, |c| c.total().as_secs_f64())
}

fn serve() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let t = nvmf_target::Target::new(nvmf_target::TargetConfig::default()).expect("target");
        t.add_subsystem(nvmf_target::SubsystemConfig::new(SUBNQN))
            .expect("subsys");
        let dev = Arc::new(blockdev::RamDevice::new("ram0", DEV_BYTES));
        t.add_namespace(SUBNQN, nvmf_target::NamespaceConfig::whole_device(1, dev))
            .expect("ns");
        let l = t
            .listen("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("listen");
        println!("{}", l.local_addr());
        let _ = std::io::stdout().flush();
        std::future::pending::<()>().await;
    });
}

fn pdu(h: &PduHeader, flags: u8, data: &[u8]) -> Vec<u8> {
    let mut v = encode_header(h, flags, data.len(), Framing::default())
        .as_bytes()
        .to_vec();
    v.extend_from_slice(data);
    v
}

async fn read_pdu<R: AsyncReadExt + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> Option<(CommonHeader, usize)> {
    let mut chb = [0u8; CH_BYTES];
    r.read_exact(&mut chb).await.ok()?;
    let ch = CommonHeader::decode(&chb);
    buf.resize(ch.plen as usize, 0);
    buf[..CH_BYTES].copy_from_slice(&chb);
    r.read_exact(&mut buf[CH_BYTES..]).await.ok()?;
    Some((ch, ch.plen as usize))
}

async fn connect(addr: SocketAddr, qid: u16, cntlid: u16) -> (TcpStream, u16) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.set_nodelay(true).expect("nodelay");
    let ic = PduHeader::IcReq(IcReq {
        pfv: 0,
        hpda: 0,
        digests: Digests::default(),
        maxr2t: 0,
    });
    s.write_all(&pdu(&ic, 0, &[])).await.expect("icreq");
    let mut buf = Vec::new();
    read_pdu(&mut s, &mut buf).await.expect("icresp");
    let mut cmd = ConnectCommand {
        recfmt: 0,
        qid,
        sqsize: 127,
        cattr: 0,
        kato_ms: 0,
    }
    .to_command(1);
    cmd.set_sgl1(SglDescriptor::in_capsule(0, 1024));
    let data = ConnectData {
        hostid: [7; 16],
        cntlid,
        subnqn: SUBNQN.into(),
        hostnqn: HOSTNQN.into(),
    }
    .to_bytes();
    s.write_all(&pdu(&PduHeader::CapsuleCmd(cmd), 0, &data))
        .await
        .expect("connect");
    read_pdu(&mut s, &mut buf).await.expect("connect resp");
    let got = u16::from_le_bytes([buf[8], buf[9]]);
    if qid == 0 {
        let en = PropertySet {
            size: PropertySize::Four,
            ofst: 0x14,
            value: 1 | (6 << 16) | (4 << 20),
        }
        .to_command(2);
        s.write_all(&pdu(&PduHeader::CapsuleCmd(en), 0, &[]))
            .await
            .expect("cc");
        read_pdu(&mut s, &mut buf).await.expect("cc resp");
    }
    (s, got)
}

async fn run(
    addr: SocketAddr,
    queues: usize,
    op: u8,
    len: usize,
    random: bool,
    dur: Duration,
) -> u64 {
    let (_admin, cntlid) = connect(addr, 0, 0xFFFF).await;
    let mut tasks = Vec::new();
    for qid in 1..=queues as u16 {
        let (s, _) = connect(addr, qid, cntlid).await;
        tasks.push(tokio::spawn(queue_load(
            s, op, len, random, dur, qid as u64,
        )));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap_or(0);
    }
    total
}

async fn queue_load(
    s: TcpStream,
    op: u8,
    len: usize,
    random: bool,
    dur: Duration,
    seed: u64,
) -> u64 {
    const QD: u16 = 32;
    let (rd, mut wr) = s.into_split();
    let mut rd = BufReader::with_capacity(1 << 20, rd);
    let blocks = (len / 512) as u64;
    let span = DEV_BYTES / 512 / blocks;
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut seq = 0u64;
    let data = vec![0x5Au8; len];
    let mut next_lba = move || {
        if random {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % span) * blocks
        } else {
            seq = (seq + 1) % span;
            seq * blocks
        }
    };
    let make = |cid: u16, lba: u64| -> Vec<u8> {
        let mut c = Command::new(op, cid, 1);
        c.set_slba(lba).set_cdw12(blocks as u32 - 1);
        if op == io::WRITE && len <= 16 << 10 {
            c.set_sgl1(SglDescriptor::in_capsule(0, len as u32));
            pdu(&PduHeader::CapsuleCmd(c), 0, &data)
        } else {
            c.set_sgl1(SglDescriptor::transport(len as u32));
            pdu(&PduHeader::CapsuleCmd(c), 0, &[])
        }
    };
    let mut out = Vec::new();
    for cid in 0..QD {
        out.extend(make(cid, next_lba()));
    }
    wr.write_all(&out).await.expect("submit");
    let end = Instant::now() + dur;
    let mut done = 0u64;
    let mut inflight = QD as u64;
    let mut buf = Vec::new();
    let mut batch: VecDeque<u16> = VecDeque::new();
    while inflight > 0 {
        let Some((ch, _)) = read_pdu(&mut rd, &mut buf).await else {
            break;
        };
        let finished_cid = match ch.pdu_type {
            0x05 => Some(u16::from_le_bytes([buf[8 + 12], buf[8 + 13]])),
            0x07 => {
                let d = DataHeader {
                    cccid: u16::from_le_bytes([buf[8], buf[9]]),
                    ..Default::default()
                };
                (ch.flags & pdu_flags::SUCCESS != 0).then_some(d.cccid)
            }
            0x09 => {
                let cccid = u16::from_le_bytes([buf[8], buf[9]]);
                let ttag = u16::from_le_bytes([buf[10], buf[11]]);
                let h = PduHeader::H2CData(DataHeader {
                    cccid,
                    ttag,
                    offset: 0,
                    length: len as u32,
                });
                wr.write_all(&pdu(&h, pdu_flags::LAST_PDU, &data))
                    .await
                    .expect("h2c");
                None
            }
            _ => None,
        };
        if let Some(cid) = finished_cid {
            done += 1;
            inflight -= 1;
            if Instant::now() < end {
                batch.push_back(cid);
            }
        }
        // Resubmit in batches once no more responses are buffered.
        if !batch.is_empty() && rd.buffer().is_empty() {
            let mut out = Vec::new();
            while let Some(cid) = batch.pop_front() {
                out.extend(make(cid, next_lba()));
                inflight += 1;
            }
            wr.write_all(&out).await.expect("submit");
        }
    }
    done
}
