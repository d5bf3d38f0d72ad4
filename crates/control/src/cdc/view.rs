//! The cluster's discovery log as the central discovery controller serves it, built from
//! the node records: one entry per (subsystem, NVMe/TCP listener) of every node (TLS
//! listeners, `tls_addrs`, as TLS entries: TREQ required, TSAS TLS 1.3), visible
//! to the hosts the subsystem's access list allows, and one referral per node to its own
//! discovery controller, visible to every host. Entries on loopback addresses are shown
//! only to hosts that reached the CDC over loopback (elsewhere they would name the host
//! itself). Pure: no I/O, so every rule is unit tested.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use nvme_proto::fabrics::DISCOVERY_NQN;
use nvme_proto::log::DiscoveryLogEntry;
use nvme_proto::log::discovery::{adrfam, eflags, sectype, subtype, treq, trtype};

use crate::records::NodeRecord;

/// Admin queue size hosts should use (ASQSZ): the minimum, as the nodes' own logs say.
const ASQSZ: u16 = 32;

/// Who may see an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Visibility {
    Everyone,
    Hosts(BTreeSet<String>),
}

impl Visibility {
    fn allows(&self, hostnqn: &str) -> bool {
        match self {
            Visibility::Everyone => true,
            Visibility::Hosts(h) => h.contains(hostnqn),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Listed {
    entry: DiscoveryLogEntry,
    /// The listener as the node published it (a wildcard one gets the host's view).
    addr: SocketAddr,
    visibility: Visibility,
}

impl Listed {
    /// The entry as a host that reached the CDC on `local` sees it, if at all.
    fn for_local(&self, local: SocketAddr) -> Option<DiscoveryLogEntry> {
        let ip = self.addr.ip();
        if ip.is_loopback() && !local.ip().is_loopback() {
            return None;
        }
        let mut e = self.entry.clone();
        if ip.is_unspecified() {
            // Co-located nodes: the host reaches them where it reached the CDC. An IPv4
            // wildcard takes IPv4 hosts only; an IPv6 one (dual stack) takes both.
            if ip.is_ipv4() && !local.is_ipv4() {
                return None;
            }
            e.traddr = local.ip().to_string();
            e.adrfam = if local.is_ipv4() {
                adrfam::IPV4
            } else {
                adrfam::IPV6
            };
        }
        Some(e)
    }
}

/// Every entry of the cluster's log with who may see it. Entries are in a fixed order:
/// NVM subsystems by NQN (then node name and address), then referrals by node name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterView {
    listed: Vec<Listed>,
    /// Why some of a node's exports are not listed (a wildcard listen address, a node
    /// that does not publish its subsystems), one line each, for the log.
    notes: Vec<String>,
}

impl ClusterView {
    /// The view of these node records (any order). `co_located`: every node runs on the
    /// CDC's machine, so a wildcard listener is reached where the host reached the CDC.
    pub fn from_nodes(nodes: &[NodeRecord], co_located: bool) -> ClusterView {
        let usable = |a: &SocketAddr| a.port() != 0 && (co_located || !a.ip().is_unspecified());
        let mut nodes: Vec<&NodeRecord> = nodes.iter().collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let mut notes = Vec::new();
        let mut ports = PortIds::default();
        let mut subsystems = Vec::new();
        let mut referrals = Vec::new();
        for node in &nodes {
            // Plain listeners, then TLS ones (the flag says which).
            let nvme: Vec<(SocketAddr, bool)> = node
                .nvme_addrs
                .iter()
                .map(|a| (*a, false))
                .chain(node.tls_addrs.iter().map(|a| (*a, true)))
                .filter(|(a, _)| {
                    let ok = usable(a);
                    if !ok {
                        notes.push(format!(
                            "node {} listens on {a}: hosts cannot be sent there; \
                             give the node a specific listen address",
                            node.name
                        ));
                    }
                    ok
                })
                .collect();
            if !node.publishes_subsystems() {
                notes.push(format!(
                    "node {} runs an older version that does not publish its subsystems \
                     (record format {}): hosts find them through its referral only",
                    node.name, node.format
                ));
            }
            for s in &node.subsystems {
                let visibility = if s.allow_any_host {
                    Visibility::Everyone
                } else {
                    Visibility::Hosts(s.allowed_hosts.iter().cloned().collect())
                };
                for (addr, tls) in &nvme {
                    let portid = ports.of(&node.name, *addr);
                    subsystems.push((
                        (s.nqn.clone(), node.name.clone(), *addr),
                        Listed {
                            entry: entry(*addr, portid, subtype::NVME, &s.nqn, 0, *tls),
                            addr: *addr,
                            visibility: visibility.clone(),
                        },
                    ));
                }
            }
            let ddc = node
                .discovery_addrs
                .iter()
                .chain(node.nvme_addrs.iter())
                .copied()
                .find(|a| usable(a));
            if let Some(addr) = ddc {
                let portid = ports.of(&node.name, addr);
                referrals.push(Listed {
                    // Its own discovery controller keeps persistent connections (KATO,
                    // AEN); what it returns is its own subset, not this log (no DUPRETINFO).
                    entry: entry(
                        addr,
                        portid,
                        subtype::REFERRAL,
                        DISCOVERY_NQN,
                        eflags::EPCSD,
                        false,
                    ),
                    addr,
                    visibility: Visibility::Everyone,
                });
            }
        }
        subsystems.sort_by(|a, b| a.0.cmp(&b.0));
        let listed = subsystems
            .into_iter()
            .map(|(_, l)| l)
            .chain(referrals)
            .collect();
        ClusterView { listed, notes }
    }

    /// The entries `hostnqn` may see, having reached the CDC on `local`.
    pub fn entries_for(&self, hostnqn: &str, local: SocketAddr) -> Vec<DiscoveryLogEntry> {
        self.listed
            .iter()
            .filter(|l| l.visibility.allows(hostnqn))
            .filter_map(|l| l.for_local(local))
            .collect()
    }

    /// Every entry as published, whoever may see it.
    pub fn all_entries(&self) -> Vec<DiscoveryLogEntry> {
        self.listed.iter().map(|l| l.entry.clone()).collect()
    }

    /// What could not be listed and why.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
}

/// Port IDs in the CDC's log: one per (node, address), numbered from 1 in the order met
/// (nodes by name), so that two processor nodes exporting one volume subsystem show it
/// on two different ports.
#[derive(Default)]
struct PortIds {
    ids: BTreeMap<(String, SocketAddr), u16>,
}

impl PortIds {
    fn of(&mut self, node: &str, addr: SocketAddr) -> u16 {
        let next = u16::try_from(self.ids.len() + 1).unwrap_or(u16::MAX);
        *self.ids.entry((node.to_string(), addr)).or_insert(next)
    }
}

/// An entry for `addr`; `tls`: the listener requires TLS 1.3 (as a node's own discovery
/// controller marks its TLS listeners), so `nvme connect-all --tls` picks it.
fn entry(
    addr: SocketAddr,
    portid: u16,
    st: u8,
    subnqn: &str,
    flags: u16,
    tls: bool,
) -> DiscoveryLogEntry {
    let sqflow = if st == subtype::NVME {
        treq::DISABLE_SQFLOW
    } else {
        0
    };
    let (channel, sectype) = if tls {
        (treq::SECURE_CHANNEL_REQUIRED, sectype::TLS13)
    } else {
        (treq::SECURE_CHANNEL_NOT_SPECIFIED, sectype::NONE)
    };
    DiscoveryLogEntry {
        trtype: trtype::TCP,
        adrfam: if addr.is_ipv4() {
            adrfam::IPV4
        } else {
            adrfam::IPV6
        },
        subtype: st,
        treq: channel | sqflow,
        portid,
        cntlid: 0xFFFF,
        asqsz: ASQSZ,
        eflags: flags,
        trsvcid: addr.port().to_string(),
        subnqn: subnqn.to_string(),
        traddr: addr.ip().to_string(),
        sectype,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{NodeRole, SubsystemRecord};

    const P1: &str = "nqn.2026-01.io.ferrobay:processor:p1";
    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// Where a host on the network reached the CDC.
    fn lan() -> SocketAddr {
        addr("10.0.0.9:8009")
    }

    fn storage(name: &str, nvme: &str, disc: &str, subs: Vec<SubsystemRecord>) -> NodeRecord {
        let mut r = NodeRecord::new(name, NodeRole::Storage, vec![addr(nvme)]);
        r.discovery_addrs = vec![addr(disc)];
        r.subsystems = subs;
        r
    }

    fn open(nqn: &str) -> SubsystemRecord {
        SubsystemRecord {
            nqn: nqn.into(),
            allow_any_host: true,
            allowed_hosts: vec![],
        }
    }

    fn closed(nqn: &str, hosts: &[&str]) -> SubsystemRecord {
        SubsystemRecord {
            nqn: nqn.into(),
            allow_any_host: false,
            allowed_hosts: hosts.iter().map(|h| h.to_string()).collect(),
        }
    }

    fn processor(name: &str, nvme: &[&str], vols: &[&str]) -> NodeRecord {
        let mut r = NodeRecord::new(
            name,
            NodeRole::Processor,
            nvme.iter().map(|a| addr(a)).collect(),
        );
        r.subsystems = vols
            .iter()
            .map(|v| open(&format!("nqn.2026-01.io.ferrobay:vol:{v}")))
            .collect();
        r
    }

    fn cluster() -> Vec<NodeRecord> {
        vec![
            processor("p2", &["10.0.0.6:4420"], &["vol0", "vol1"]),
            storage(
                "n1",
                "10.0.0.11:4420",
                "10.0.0.11:8009",
                vec![closed("nqn.2026-01.io.ferrobay:n1:d0", &[P1])],
            ),
            processor("p1", &["10.0.0.5:4420", "10.0.1.5:4420"], &["vol0", "vol1"]),
            storage(
                "n2",
                "10.0.0.12:4420",
                "10.0.0.12:8009",
                vec![open("nqn.2026-01.io.ferrobay:n2:d0")],
            ),
        ]
    }

    fn lines(entries: &[DiscoveryLogEntry]) -> Vec<String> {
        entries
            .iter()
            .map(|e| {
                format!(
                    "{} {} {}:{} port {}",
                    e.subtype, e.subnqn, e.traddr, e.trsvcid, e.portid
                )
            })
            .collect()
    }

    #[test]
    fn every_subsystem_on_every_listener_then_referrals() {
        let v = ClusterView::from_nodes(&cluster(), false);
        assert_eq!(
            lines(&v.entries_for(P1, lan())),
            [
                // Ports numbered per (node, address): n1 4420 = 1, n1 8009 = 2, ...
                "2 nqn.2026-01.io.ferrobay:n1:d0 10.0.0.11:4420 port 1",
                "2 nqn.2026-01.io.ferrobay:n2:d0 10.0.0.12:4420 port 3",
                "2 nqn.2026-01.io.ferrobay:vol:vol0 10.0.0.5:4420 port 5",
                "2 nqn.2026-01.io.ferrobay:vol:vol0 10.0.1.5:4420 port 6",
                "2 nqn.2026-01.io.ferrobay:vol:vol0 10.0.0.6:4420 port 7",
                "2 nqn.2026-01.io.ferrobay:vol:vol1 10.0.0.5:4420 port 5",
                "2 nqn.2026-01.io.ferrobay:vol:vol1 10.0.1.5:4420 port 6",
                "2 nqn.2026-01.io.ferrobay:vol:vol1 10.0.0.6:4420 port 7",
                "1 nqn.2014-08.org.nvmexpress.discovery 10.0.0.11:8009 port 2",
                "1 nqn.2014-08.org.nvmexpress.discovery 10.0.0.12:8009 port 4",
                "1 nqn.2014-08.org.nvmexpress.discovery 10.0.0.5:4420 port 5",
                "1 nqn.2014-08.org.nvmexpress.discovery 10.0.0.6:4420 port 7",
            ]
        );
        // The same volume on two processor nodes: two ports, never one port twice.
        let all = v.all_entries();
        let mut seen = BTreeSet::new();
        for e in all.iter().filter(|e| e.subtype == subtype::NVME) {
            assert!(seen.insert((e.subnqn.clone(), e.portid)), "{e:?}");
        }
        let e = &all[0];
        assert_eq!((e.trtype, e.adrfam, e.cntlid, e.asqsz), (3, 1, 0xFFFF, 32));
        assert_eq!(e.treq, treq::DISABLE_SQFLOW);
        let r = all.last().unwrap();
        assert_eq!((r.eflags, r.treq), (eflags::EPCSD, 0));
        assert!(v.notes().is_empty(), "{:?}", v.notes());
    }

    #[test]
    fn access_lists_filter_per_host() {
        let v = ClusterView::from_nodes(&cluster(), false);
        let host = lines(&v.entries_for(HOST, lan()));
        assert!(
            !host.iter().any(|l| l.contains(":n1:d0")),
            "not allowed: {host:?}"
        );
        assert!(host.iter().any(|l| l.contains(":n2:d0")), "{host:?}");
        assert_eq!(host.iter().filter(|l| l.contains(":vol:")).count(), 6);
        // Referrals are for everyone: a host finds every node's own controller.
        assert_eq!(host.iter().filter(|l| l.starts_with("1 ")).count(), 4);
        assert_eq!(v.entries_for(P1, lan()).len(), host.len() + 1);
    }

    #[test]
    fn unusable_addresses_and_old_records_are_noted_not_listed() {
        let mut wild = processor("p3", &["0.0.0.0:4420", "10.0.0.7:4420"], &["vol0"]);
        wild.discovery_addrs = vec![addr("[::]:8009")];
        let mut old = storage(
            "n9",
            "10.0.0.19:4420",
            "10.0.0.19:8009",
            vec![open("nqn.2026-01.io.ferrobay:n9:d0")],
        );
        old.format = 1;
        old.subsystems.clear();
        old.discovery_addrs.clear();
        let v = ClusterView::from_nodes(&[wild, old], false);
        assert_eq!(
            lines(&v.all_entries()),
            [
                "2 nqn.2026-01.io.ferrobay:vol:vol0 10.0.0.7:4420 port 2",
                "1 nqn.2014-08.org.nvmexpress.discovery 10.0.0.19:4420 port 1",
                "1 nqn.2014-08.org.nvmexpress.discovery 10.0.0.7:4420 port 2",
            ]
        );
        assert_eq!(v.notes().len(), 2, "{:?}", v.notes());
        assert!(v.notes()[0].contains("n9") && v.notes()[0].contains("format 1"));
        assert!(v.notes()[1].contains("0.0.0.0:4420"));
    }

    #[test]
    fn ipv6_listeners() {
        let p = processor("p1", &["[fd00::5]:4420"], &["vol0"]);
        let e = &ClusterView::from_nodes(&[p], false).all_entries()[0];
        assert_eq!((e.adrfam, e.traddr.as_str()), (adrfam::IPV6, "fd00::5"));
    }

    #[test]
    fn loopback_entries_only_for_hosts_on_loopback() {
        let n = storage(
            "n1",
            "127.0.0.1:4420",
            "127.0.0.1:8010",
            vec![open("nqn.2026-01.io.ferrobay:n1:d0")],
        );
        let p = processor("p1", &["10.0.0.5:4420"], &["vol0"]);
        let v = ClusterView::from_nodes(&[n, p], false);
        assert_eq!(
            lines(&v.entries_for(HOST, lan())),
            [
                "2 nqn.2026-01.io.ferrobay:vol:vol0 10.0.0.5:4420 port 3",
                "1 nqn.2014-08.org.nvmexpress.discovery 10.0.0.5:4420 port 3",
            ],
            "127.0.0.1 would name the host itself"
        );
        assert_eq!(v.entries_for(HOST, addr("127.0.0.1:8009")).len(), 4);
    }

    #[test]
    fn wildcard_listeners_of_co_located_nodes_take_the_hosts_view() {
        let p = processor("p1", &["0.0.0.0:4420"], &["vol0"]);
        // Nodes elsewhere: nothing to send hosts to.
        let apart = ClusterView::from_nodes(std::slice::from_ref(&p), false);
        assert!(apart.entries_for(HOST, lan()).is_empty());
        assert_eq!(apart.notes().len(), 1);
        // `ferrobay up`: the node is where the CDC is.
        let here = ClusterView::from_nodes(&[p], true);
        assert!(here.notes().is_empty(), "{:?}", here.notes());
        assert_eq!(
            lines(&here.entries_for(HOST, lan())),
            [
                "2 nqn.2026-01.io.ferrobay:vol:vol0 10.0.0.9:4420 port 1",
                "1 nqn.2014-08.org.nvmexpress.discovery 10.0.0.9:4420 port 1",
            ]
        );
        // An IPv4 wildcard cannot take a host that came over IPv6.
        assert!(here.entries_for(HOST, addr("[fd00::9]:8009")).is_empty());
        let v6 = ClusterView::from_nodes(&[processor("p2", &["[::]:4420"], &["vol0"])], true);
        let e = &v6.entries_for(HOST, addr("[fd00::9]:8009"))[0];
        assert_eq!((e.adrfam, e.traddr.as_str()), (adrfam::IPV6, "fd00::9"));
    }

    #[test]
    fn tls_listeners_are_tls_entries() {
        let mut p = processor("p1", &["10.0.0.5:4420"], &["vol0"]);
        p.tls_addrs = vec![addr("10.0.0.5:4421")];
        let mut n = storage(
            "n1",
            "10.0.0.11:4420",
            "10.0.0.11:8009",
            vec![open("nqn.2026-01.io.ferrobay:n1:d0")],
        );
        n.tls_addrs = vec![addr("10.0.0.11:4430")];
        let v = ClusterView::from_nodes(&[p, n], false);
        let all = v.all_entries();
        assert_eq!(
            lines(&all),
            [
                "2 nqn.2026-01.io.ferrobay:n1:d0 10.0.0.11:4420 port 1",
                "2 nqn.2026-01.io.ferrobay:n1:d0 10.0.0.11:4430 port 2",
                "2 nqn.2026-01.io.ferrobay:vol:vol0 10.0.0.5:4420 port 4",
                "2 nqn.2026-01.io.ferrobay:vol:vol0 10.0.0.5:4421 port 5",
                "1 nqn.2014-08.org.nvmexpress.discovery 10.0.0.11:8009 port 3",
                "1 nqn.2014-08.org.nvmexpress.discovery 10.0.0.5:4420 port 4",
            ]
        );
        for e in &all {
            let tls = e.trsvcid == "4421" || e.trsvcid == "4430";
            let want = if tls {
                (
                    treq::SECURE_CHANNEL_REQUIRED | treq::DISABLE_SQFLOW,
                    sectype::TLS13,
                )
            } else if e.subtype == subtype::NVME {
                (treq::DISABLE_SQFLOW, sectype::NONE)
            } else {
                (0, sectype::NONE)
            };
            assert_eq!((e.treq, e.sectype), want, "{e:?}");
        }
        // A wildcard TLS listener is noted like a plain one.
        let mut w = processor("p2", &["10.0.0.6:4420"], &["vol0"]);
        w.tls_addrs = vec![addr("0.0.0.0:4421")];
        let v = ClusterView::from_nodes(&[w], false);
        assert_eq!(v.notes().len(), 1, "{:?}", v.notes());
        assert!(v.notes()[0].contains("0.0.0.0:4421"));
    }

    #[test]
    fn an_empty_cluster_lists_nothing() {
        assert!(ClusterView::from_nodes(&[], false).all_entries().is_empty());
    }
}
