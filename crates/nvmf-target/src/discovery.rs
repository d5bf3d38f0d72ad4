//! The discovery log page (0x70): one entry per (subsystem, listener) the host may
//! access, one "current discovery subsystem" entry per listener, and one referral entry per
//! other discovery service the target refers hosts to; then whatever the installed
//! [`crate::DiscoveryLogSource`] gives this host (a central discovery controller's view of
//! the cluster).

use std::net::SocketAddr;

use nvme_proto::fabrics::DISCOVERY_NQN;
use nvme_proto::log::discovery::{adrfam, eflags, sectype, subtype, treq, trtype};
use nvme_proto::log::{DiscoveryLog, DiscoveryLogEntry};

use crate::sync::{lock, read};
use crate::target::TargetInner;

/// Admin queue size hosts should use (ASQSZ); 32 is the minimum the spec allows.
const ASQSZ: u16 = 32;

/// Builds the discovery log for `hostnqn`. `local` is the address the host reached us on,
/// reported for listeners bound to a wildcard address.
pub(crate) fn discovery_log(t: &TargetInner, hostnqn: &str, local: SocketAddr) -> DiscoveryLog {
    let own_genctr = t
        .discovery_genctr
        .load(std::sync::atomic::Ordering::Acquire);
    let extra = read(&t.discovery_source)
        .clone()
        .map(|s| s.snapshot(hostnqn, local))
        .unwrap_or_default();
    // Both only grow, so their sum changes whenever either part of the log does.
    let genctr = own_genctr.wrapping_add(extra.generation);
    let listeners: Vec<_> = lock(&t.listeners).iter().cloned().collect();
    let mut entries = Vec::new();
    let entry = |l: &crate::target::ListenerInfo, subnqn: &str, st: u8, flags: u16| {
        let ip = if l.addr.ip().is_unspecified() {
            local.ip()
        } else {
            l.addr.ip()
        };
        DiscoveryLogEntry {
            trtype: trtype::TCP,
            adrfam: if ip.is_ipv4() {
                adrfam::IPV4
            } else {
                adrfam::IPV6
            },
            subtype: st,
            treq: if l.opts.tls {
                treq::SECURE_CHANNEL_REQUIRED
            } else {
                treq::SECURE_CHANNEL_NOT_SPECIFIED
            } | treq::DISABLE_SQFLOW,
            portid: l.portid,
            cntlid: 0xFFFF,
            asqsz: ASQSZ,
            eflags: flags,
            trsvcid: l.addr.port().to_string(),
            subnqn: subnqn.to_string(),
            traddr: ip.to_string(),
            sectype: if l.opts.tls {
                sectype::TLS13
            } else {
                sectype::NONE
            },
        }
    };
    for l in &listeners {
        entries.push(entry(
            l,
            DISCOVERY_NQN,
            subtype::CURRENT_DISCOVERY,
            eflags::DUPRETINFO | eflags::EPCSD,
        ));
    }
    // Referral portids count down from the top so they never collide with listeners'.
    for (i, addr) in lock(&t.referrals).iter().enumerate() {
        entries.push(DiscoveryLogEntry {
            trtype: trtype::TCP,
            adrfam: if addr.is_ipv4() {
                adrfam::IPV4
            } else {
                adrfam::IPV6
            },
            subtype: subtype::REFERRAL,
            treq: treq::SECURE_CHANNEL_NOT_SPECIFIED,
            portid: u16::MAX - u16::try_from(i).unwrap_or(u16::MAX),
            cntlid: 0xFFFF,
            asqsz: ASQSZ,
            eflags: 0,
            trsvcid: addr.port().to_string(),
            subnqn: DISCOVERY_NQN.to_string(),
            traddr: addr.ip().to_string(),
            sectype: sectype::NONE,
        });
    }
    for (nqn, s) in read(&t.subsystems).iter() {
        if !s.host_allowed(hostnqn) {
            continue;
        }
        for l in listeners.iter().filter(|l| !l.opts.discovery_only) {
            entries.push(entry(l, nqn, subtype::NVME, 0));
        }
    }
    entries.extend(extra.entries);
    DiscoveryLog {
        genctr,
        recfmt: 0,
        entries,
    }
}
