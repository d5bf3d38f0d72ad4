//! Discovery: connect to a discovery controller, read log page 0x70 the way libnvme does,
//! and print it the way `nvme discover` does.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use nvme_proto::fabrics::DISCOVERY_NQN;
use nvme_proto::log::discovery::{adrfam, subtype, trtype};
use nvme_proto::log::{DiscoveryLogEntry, DiscoveryLogHeader, GetLogPageCommand, lid};

use crate::controller::{ConnectOptions, Controller};
use crate::error::{HostError, Result};
use crate::host_identity::HostIdentity;

/// One entry of the discovery log.
pub type DiscoveryEntry = DiscoveryLogEntry;

/// How many times the log is re-read when its generation counter moves (libnvme's
/// MAX_DISC_RETRIES).
pub const MAX_DISCOVERY_RETRIES: usize = 10;
/// Entries are read in pieces of this size, as libnvme does.
pub const DISCOVERY_PIECE_BYTES: usize = 4096;
/// Bytes of the header read to learn GENCTR and NUMREC (dword aligned).
const HEADER_READ_BYTES: usize = DiscoveryLogHeader::MIN_BYTES.next_multiple_of(4);
/// Referral depth followed by [`discover_all`].
pub const MAX_REFERRAL_DEPTH: usize = 4;

/// The discovery log as read: its generation counter and entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryLogRead {
    pub genctr: u64,
    pub entries: Vec<DiscoveryEntry>,
}

/// Options for a discovery connection: admin queue only, no keep-alive (a one-shot
/// discovery, as `nvme discover` without `--persistent`).
pub fn discovery_options() -> ConnectOptions {
    ConnectOptions {
        io_queues: 0,
        kato_ms: 0,
        ..ConnectOptions::default()
    }
}

/// Connects to the discovery controller at `addr`, reads the whole log, and disconnects.
pub async fn discover(addr: SocketAddr, host: &HostIdentity) -> Result<Vec<DiscoveryEntry>> {
    Ok(discover_with(addr, host, &discovery_options())
        .await?
        .entries)
}

/// As [`discover`] with explicit options; returns the generation counter too.
pub async fn discover_with(
    addr: SocketAddr,
    host: &HostIdentity,
    opts: &ConnectOptions,
) -> Result<DiscoveryLogRead> {
    let ctrl = Controller::connect(addr, DISCOVERY_NQN, host, opts).await?;
    let r = read_discovery_log(&ctrl).await;
    // Like `nvme discover`: shut the controller down when done, whatever happened.
    if let Err(e) = ctrl.shutdown().await {
        tracing::debug!(%addr, "discovery controller shutdown: {e}");
    }
    r
}

/// [`discover`], then the discovery services that referral entries name, depth first up
/// to [`MAX_REFERRAL_DEPTH`], each address once. Referral entries are kept in the result.
pub async fn discover_all(addr: SocketAddr, host: &HostIdentity) -> Result<Vec<DiscoveryEntry>> {
    let mut seen = HashSet::from([addr]);
    let mut out = Vec::new();
    let mut todo = vec![(addr, 0usize)];
    while let Some((a, depth)) = todo.pop() {
        let entries = match discover(a, host).await {
            Ok(e) => e,
            // The first service must answer; a dead referral is only logged.
            Err(e) if a != addr => {
                tracing::warn!(referral = %a, "discovery referral unreachable: {e}");
                continue;
            }
            Err(e) => return Err(e),
        };
        for e in &entries {
            if e.subtype == subtype::REFERRAL
                && depth < MAX_REFERRAL_DEPTH
                && let Some(r) = entry_socket_addr(e)
                && seen.insert(r)
            {
                todo.push((r, depth + 1));
            }
        }
        out.extend(entries);
    }
    Ok(out)
}

/// The TCP address of an entry (TRTYPE TCP, IPv4/IPv6 TRADDR, TRSVCID port).
pub fn entry_socket_addr(e: &DiscoveryEntry) -> Option<SocketAddr> {
    if e.trtype != trtype::TCP {
        return None;
    }
    let ip: IpAddr = e.traddr.trim().parse().ok()?;
    let port: u16 = e.trsvcid.trim().parse().ok()?;
    Some(SocketAddr::new(ip, port))
}

/// Reads log page 0x70 from a connected discovery controller: the header, the entries
/// from offset 1024 in 4 KiB pieces, then the header again; starts over when GENCTR moved.
pub async fn read_discovery_log(ctrl: &Controller) -> Result<DiscoveryLogRead> {
    let context = || format!("discovery log of {}", ctrl.addr());
    let mut hdr = read_header(ctrl).await?;
    for _ in 0..MAX_DISCOVERY_RETRIES {
        let genctr = hdr.genctr;
        let numrec = usize::try_from(hdr.numrec)
            .ok()
            .filter(|&n| n <= (1 << 20))
            .ok_or_else(|| {
                HostError::invalid(context(), format!("NUMREC {} is implausible", hdr.numrec))
            })?;
        let mut entries = Vec::with_capacity(numrec);
        let total = numrec * DiscoveryLogEntry::BYTES;
        let mut off = 0usize;
        while off < total {
            let n = DISCOVERY_PIECE_BYTES.min(total - off);
            let t = GetLogPageCommand::new(lid::DISCOVERY, 0, 0, 4);
            let b = ctrl
                .get_log_page_with(t, (DiscoveryLogHeader::BYTES + off) as u64, n)
                .await?;
            for chunk in b.chunks_exact(DiscoveryLogEntry::BYTES) {
                entries.push(
                    DiscoveryLogEntry::decode(chunk)
                        .map_err(|e| HostError::invalid(context(), e.to_string()))?,
                );
            }
            off += n;
        }
        hdr = read_header(ctrl).await?;
        if hdr.genctr == genctr {
            if hdr.numrec != numrec as u64 {
                return Err(HostError::invalid(
                    context(),
                    format!(
                        "NUMREC changed from {numrec} to {} without a new GENCTR",
                        hdr.numrec
                    ),
                ));
            }
            return Ok(DiscoveryLogRead { genctr, entries });
        }
        tracing::debug!(addr = %ctrl.addr(), old = genctr, new = hdr.genctr, "discovery log changed while reading, retrying");
    }
    Err(HostError::invalid(
        context(),
        format!("GENCTR kept changing over {MAX_DISCOVERY_RETRIES} reads"),
    ))
}

async fn read_header(ctrl: &Controller) -> Result<DiscoveryLogHeader> {
    let t = GetLogPageCommand {
        rae: true,
        ..GetLogPageCommand::new(lid::DISCOVERY, 0, 0, 4)
    };
    let b = ctrl.get_log_page_with(t, 0, HEADER_READ_BYTES).await?;
    DiscoveryLogHeader::decode(&b).map_err(|e| {
        HostError::invalid(
            format!("discovery log header of {}", ctrl.addr()),
            e.to_string(),
        )
    })
}

/// The log in the format of `nvme discover` (nvme-cli's normal output).
pub fn format_discovery_log(genctr: u64, entries: &[DiscoveryEntry]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nDiscovery Log Number of Records {}, Generation counter {genctr}",
        entries.len()
    );
    for (i, e) in entries.iter().enumerate() {
        let _ = writeln!(s, "=====Discovery Log Entry {i}======");
        let _ = writeln!(s, "trtype:  {}", trtype_str(e.trtype));
        let fam = if e.traddr.is_empty() {
            ""
        } else {
            adrfam_str(e.adrfam)
        };
        let _ = writeln!(s, "adrfam:  {fam}");
        let _ = writeln!(s, "subtype: {}", subtype_str(e.subtype));
        let _ = writeln!(s, "treq:    {}", treq_str(e.treq));
        let _ = writeln!(s, "portid:  {}", e.portid);
        let _ = writeln!(s, "trsvcid: {}", e.trsvcid);
        let _ = writeln!(s, "subnqn:  {}", e.subnqn);
        let _ = writeln!(s, "traddr:  {}", e.traddr);
        let _ = writeln!(s, "eflags:  {}", eflags_str(e.eflags));
        if e.trtype == trtype::TCP {
            let _ = writeln!(s, "sectype: {}", sectype_str(e.sectype));
        }
    }
    s
}

fn trtype_str(t: u8) -> &'static str {
    match t {
        trtype::RDMA => "rdma",
        trtype::FC => "fc",
        trtype::TCP => "tcp",
        trtype::LOOP => "loop",
        _ => "unrecognized",
    }
}

fn adrfam_str(a: u8) -> &'static str {
    match a {
        0 => "pci",
        adrfam::IPV4 => "ipv4",
        adrfam::IPV6 => "ipv6",
        adrfam::IB => "infiniband",
        adrfam::FC => "fibre-channel",
        254 => "loop",
        _ => "unrecognized",
    }
}

fn subtype_str(t: u8) -> &'static str {
    match t {
        subtype::REFERRAL => "discovery subsystem referral",
        subtype::NVME => "nvme subsystem",
        subtype::CURRENT_DISCOVERY => "current discovery subsystem",
        _ => "unrecognized",
    }
}

fn treq_str(t: u8) -> &'static str {
    match t {
        0 => "not specified",
        1 => "required",
        2 => "not required",
        4 => "not specified, sq flow control disable supported",
        5 => "required, sq flow control disable supported",
        6 => "not required, sq flow control disable supported",
        _ => "unrecognized",
    }
}

fn eflags_str(f: u16) -> &'static str {
    // Bit 0 DUPRETINFO, bit 1 EPCSD, bit 2 NCC.
    match f {
        0 => "none",
        2 => "explicit discovery connections",
        1 => "duplicate discovery information",
        3 => "explicit discovery connections, duplicate discovery information",
        4 => "no cdc connectivity",
        6 => "explicit discovery connections, no cdc connectivity",
        5 => "duplicate discovery information, no cdc connectivity",
        7 => "explicit discovery connections, duplicate discovery information, no cdc connectivity",
        _ => "unrecognized",
    }
}

fn sectype_str(t: u8) -> &'static str {
    match t {
        0 => "none",
        1 => "tls",
        2 => "tls13",
        _ => "unrecognized",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_like_nvme_cli() {
        let e = DiscoveryEntry {
            trtype: trtype::TCP,
            adrfam: adrfam::IPV4,
            subtype: subtype::NVME,
            treq: 0,
            portid: 1,
            cntlid: 0xFFFF,
            asqsz: 32,
            eflags: 0,
            trsvcid: "4420".into(),
            subnqn: "nqn.2026-01.io.ferrobay:n1".into(),
            traddr: "127.0.0.1".into(),
            sectype: 0,
        };
        let s = format_discovery_log(7, std::slice::from_ref(&e));
        let want = "\nDiscovery Log Number of Records 1, Generation counter 7\n\
            =====Discovery Log Entry 0======\n\
            trtype:  tcp\n\
            adrfam:  ipv4\n\
            subtype: nvme subsystem\n\
            treq:    not specified\n\
            portid:  1\n\
            trsvcid: 4420\n\
            subnqn:  nqn.2026-01.io.ferrobay:n1\n\
            traddr:  127.0.0.1\n\
            eflags:  none\n\
            sectype: none\n";
        assert_eq!(s, want);
        assert_eq!(
            entry_socket_addr(&e),
            Some("127.0.0.1:4420".parse().expect("addr"))
        );
        let bad = DiscoveryEntry {
            traddr: "not-an-ip".into(),
            ..e
        };
        assert_eq!(entry_socket_addr(&bad), None);
        assert_eq!(
            treq_str(4),
            "not specified, sq flow control disable supported"
        );
        assert_eq!(eflags_str(2), "explicit discovery connections");
    }
}
