//! Namespaces of a subsystem and their attachment to hosts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use nvme_proto::kv::{KvFormat, KvKey};

use crate::TargetError;
use crate::ana::{ANA_MAX_GROUPS, ana_limits};
use crate::cmd::identify::MAX_NAMESPACES;
use crate::config::{KvNamespaceConfig, NamespaceConfig};
use crate::namespace::{Attachment, BlockMedia, CommandSet, KvMedia, Namespace, NamespaceInfo};
use crate::resv_api::Reservations;
use crate::subsystem::{SubsysKind, Subsystem};
use crate::sync::write;
use crate::target::Target;

/// What every namespace kind gives [`Target::insert_namespace`].
struct NewNs {
    nsid: u32,
    command_set: CommandSet,
    nguid: [u8; 16],
    eui64: [u8; 8],
    uuid: [u8; 16],
    attached: bool,
    reservations: Option<Arc<dyn Reservations>>,
    ana_group: u32,
}

impl Target {
    /// Adds an NVM namespace (a block range of a device) and returns its NSID. Attached
    /// controllers get a namespace-attribute-changed event.
    pub fn add_namespace(&self, nqn: &str, cfg: NamespaceConfig) -> Result<u32, TargetError> {
        let s = self
            .inner
            .subsystem(nqn)
            .filter(|s| s.kind == SubsysKind::Nvm)
            .ok_or_else(|| TargetError::NoSuchSubsystem(nqn.to_string()))?;
        let bs = cfg.block_size_bytes;
        if bs != 512 && bs != 4096 {
            return Err(TargetError::InvalidNamespace(
                "block size must be 512 or 4096".into(),
            ));
        }
        let info = cfg.device.info();
        if !bs.is_multiple_of(info.logical_block_bytes.max(1)) {
            return Err(TargetError::InvalidNamespace(format!(
                "block size {bs} is not a multiple of the device's {}",
                info.logical_block_bytes
            )));
        }
        if cfg.size_bytes == 0 || !cfg.size_bytes.is_multiple_of(u64::from(bs)) {
            return Err(TargetError::InvalidNamespace(
                "size must be a non-zero multiple of the block size".into(),
            ));
        }
        if !cfg
            .offset_bytes
            .is_multiple_of(u64::from(info.logical_block_bytes.max(1)))
        {
            return Err(TargetError::InvalidNamespace(
                "offset must be aligned to the device block".into(),
            ));
        }
        match cfg.offset_bytes.checked_add(cfg.size_bytes) {
            Some(end) if end <= info.size_bytes => {}
            _ => {
                return Err(TargetError::InvalidNamespace(
                    "range exceeds the device".into(),
                ));
            }
        }
        let block = Arc::new(BlockMedia {
            device: cfg.device.clone(),
            offset_bytes: cfg.offset_bytes,
            size_bytes: cfg.size_bytes,
            block_size_bytes: bs,
            lba_shift: bs.trailing_zeros(),
            blocks: cfg.size_bytes / u64::from(bs),
        });
        self.insert_namespace(
            &s,
            NewNs {
                nsid: cfg.nsid,
                command_set: CommandSet::Nvm(block),
                nguid: cfg.nguid,
                eui64: cfg.eui64,
                uuid: cfg.uuid,
                attached: cfg.attached,
                reservations: cfg.reservations,
                ana_group: cfg.ana_group,
            },
        )
    }

    /// Adds a Key Value namespace (CSI 01h) over `cfg.backend` and returns its NSID.
    /// Hosts see it once their controller enabled all I/O command sets (CC.CSS = 110b,
    /// which Linux does); its largest value must fit one transfer (MDTS).
    pub fn add_kv_namespace(&self, nqn: &str, cfg: KvNamespaceConfig) -> Result<u32, TargetError> {
        let s = self
            .inner
            .subsystem(nqn)
            .filter(|s| s.kind == SubsysKind::Nvm)
            .ok_or_else(|| TargetError::NoSuchSubsystem(nqn.to_string()))?;
        let mdts = self.inner.config.mdts_bytes;
        if cfg.max_value_bytes == 0 || cfg.max_value_bytes > mdts {
            return Err(TargetError::InvalidNamespace(format!(
                "largest value of {} bytes must be 1 byte to the transfer limit (MDTS) of {mdts} bytes",
                cfg.max_value_bytes
            )));
        }
        let kv = Arc::new(KvMedia {
            backend: cfg.backend,
            format: KvFormat {
                max_key_bytes: KvKey::MAX_BYTES as u16,
                afo: 0,
                max_value_bytes: cfg.max_value_bytes,
                max_keys: u32::try_from(cfg.max_keys).unwrap_or(u32::MAX),
            },
            device: cfg.device,
            size_bytes: cfg.size_bytes,
            ednek: AtomicBool::new(false),
        });
        self.insert_namespace(
            &s,
            NewNs {
                nsid: cfg.nsid,
                command_set: CommandSet::Kv(kv),
                nguid: cfg.nguid,
                eui64: cfg.eui64,
                uuid: cfg.uuid,
                attached: cfg.attached,
                reservations: cfg.reservations,
                ana_group: cfg.ana_group,
            },
        )
    }

    /// Picks the NSID, makes the namespace and tells attached controllers.
    fn insert_namespace(&self, s: &Arc<Subsystem>, new: NewNs) -> Result<u32, TargetError> {
        let nqn = s.nqn.as_str();
        if !(1..=ANA_MAX_GROUPS).contains(&new.ana_group) {
            return Err(TargetError::InvalidNamespace(format!(
                "ANA group {} is not in 1..={ANA_MAX_GROUPS}",
                new.ana_group
            )));
        }
        let (_, mnan) = ana_limits(self.inner.config.mdts_bytes, MAX_NAMESPACES);
        let nsid = {
            let mut map = write(&s.namespaces);
            if map.len() >= mnan as usize {
                return Err(TargetError::InvalidNamespace(format!(
                    "{nqn} already has the most namespaces the target reports (MNAN {mnan})"
                )));
            }
            let nsid = if new.nsid == 0 {
                (1..u32::MAX)
                    .find(|n| !map.contains_key(n))
                    .ok_or_else(|| TargetError::NoFreeNsid(nqn.to_string()))?
            } else {
                new.nsid
            };
            if nsid == 0 || nsid == u32::MAX {
                return Err(TargetError::InvalidNamespace(
                    "NSID must be in 1..0xFFFFFFFF".into(),
                ));
            }
            if map.contains_key(&nsid) {
                return Err(TargetError::NamespaceExists {
                    nqn: nqn.to_string(),
                    nsid,
                });
            }
            let reservations = new
                .reservations
                .unwrap_or_else(|| self.inner.new_reservations(nqn, nsid));
            let ns = Namespace {
                nsid,
                command_set: new.command_set,
                nguid: new.nguid,
                eui64: new.eui64,
                uuid: new.uuid,
                reservations,
                attachment: RwLock::new(if new.attached {
                    Attachment::all()
                } else {
                    Attachment::none()
                }),
                counters: Default::default(),
                ana_group: new.ana_group,
                inflight: Default::default(),
            };
            map.insert(nsid, Arc::new(ns));
            nsid
        };
        s.bump_ns_generation();
        if new.attached {
            for c in s.live_controllers() {
                c.namespace_changed(nsid);
            }
        }
        Ok(nsid)
    }

    /// Removes a namespace; controllers it was attached to get a namespace-attribute event.
    pub fn remove_namespace(&self, nqn: &str, nsid: u32) -> Result<(), TargetError> {
        let s = self
            .inner
            .subsystem(nqn)
            .ok_or_else(|| TargetError::NoSuchSubsystem(nqn.to_string()))?;
        let ns = write(&s.namespaces)
            .remove(&nsid)
            .ok_or(TargetError::NoSuchNamespace {
                nqn: nqn.to_string(),
                nsid,
            })?;
        s.bump_ns_generation();
        self.inner.qos_forget_namespace(nqn, nsid);
        self.account_removed(&ns);
        for c in s.live_controllers() {
            if ns.is_attached_to(&c.hostnqn) {
                c.namespace_changed(nsid);
            }
        }
        Ok(())
    }

    pub(super) fn account_removed(&self, ns: &Namespace) {
        let c = ns.counters.snapshot();
        let h = &self.inner.health;
        h.removed_read_bytes
            .fetch_add(c.read_bytes, Ordering::Relaxed);
        h.removed_write_bytes
            .fetch_add(c.write_bytes, Ordering::Relaxed);
        h.removed_read_ops.fetch_add(c.read_ops, Ordering::Relaxed);
        h.removed_write_ops
            .fetch_add(c.write_ops, Ordering::Relaxed);
    }

    /// The namespaces of a subsystem.
    pub fn namespaces(&self, nqn: &str) -> Result<Vec<NamespaceInfo>, TargetError> {
        let s = self
            .inner
            .subsystem(nqn)
            .ok_or_else(|| TargetError::NoSuchSubsystem(nqn.to_string()))?;
        Ok(s.namespaces().iter().map(|ns| ns.info(nqn)).collect())
    }

    /// Sets which controllers a namespace is attached to (for restoring persisted state);
    /// controllers that gain or lose it get a namespace-attribute event.
    pub fn set_namespace_attachment(
        &self,
        nqn: &str,
        nsid: u32,
        attachment: Attachment,
    ) -> Result<(), TargetError> {
        let (s, ns) = self.ns_of(nqn, nsid)?;
        let before = ns.attachment();
        ns.set_attachment(attachment.clone());
        s.bump_ns_generation();
        for c in s.live_controllers() {
            if before.contains(&c.hostnqn) != attachment.contains(&c.hostnqn) {
                c.namespace_changed(nsid);
            }
        }
        Ok(())
    }

    /// Attaches a namespace to the hosts of the given controllers (Namespace Attachment
    /// semantics for dynamic controllers: the host keeps it across reconnects). Returns the
    /// new attachment. Errors: unknown controller → `Err(Status::CONTROLLER_LIST_INVALID)`,
    /// already attached → `Err(Status::NS_ALREADY_ATTACHED)`.
    pub fn attach_namespace(
        &self,
        nqn: &str,
        nsid: u32,
        ctrls: &[u16],
    ) -> Result<Attachment, nvme_proto::Status> {
        self.change_attachment(nqn, nsid, ctrls, true)
    }

    /// Detaches a namespace from the hosts of the given controllers.
    pub fn detach_namespace(
        &self,
        nqn: &str,
        nsid: u32,
        ctrls: &[u16],
    ) -> Result<Attachment, nvme_proto::Status> {
        self.change_attachment(nqn, nsid, ctrls, false)
    }

    fn change_attachment(
        &self,
        nqn: &str,
        nsid: u32,
        ctrls: &[u16],
        attach: bool,
    ) -> Result<Attachment, nvme_proto::Status> {
        use nvme_proto::Status;
        let (s, ns) = self
            .ns_of(nqn, nsid)
            .map_err(|_| Status::INVALID_NAMESPACE.dnr())?;
        let mut hosts = Vec::new();
        for &id in ctrls {
            let c = s
                .controller(id)
                .ok_or(Status::CONTROLLER_LIST_INVALID.dnr())?;
            hosts.push(c.hostnqn.clone());
        }
        let mut a = ns.attachment();
        for h in &hosts {
            let present = a.contains(h);
            if attach && present {
                return Err(Status::NS_ALREADY_ATTACHED.dnr());
            }
            if !attach && !present {
                return Err(Status::NS_NOT_ATTACHED.dnr());
            }
        }
        if !attach && a.all {
            // Detaching some hosts from an all-hosts namespace: keep every other live host.
            a.all = false;
            a.hosts = s
                .live_controllers()
                .iter()
                .map(|c| c.hostnqn.clone())
                .collect();
        }
        for h in hosts {
            if attach {
                a.hosts.insert(h);
            } else {
                a.hosts.remove(&h);
            }
        }
        self.set_namespace_attachment(nqn, nsid, a.clone())
            .map_err(|_| Status::INVALID_NAMESPACE.dnr())?;
        Ok(a)
    }

    fn ns_of(&self, nqn: &str, nsid: u32) -> Result<(Arc<Subsystem>, Arc<Namespace>), TargetError> {
        let s = self
            .inner
            .subsystem(nqn)
            .ok_or_else(|| TargetError::NoSuchSubsystem(nqn.to_string()))?;
        let ns = s.namespace(nsid).ok_or(TargetError::NoSuchNamespace {
            nqn: nqn.to_string(),
            nsid,
        })?;
        Ok((s, ns))
    }

    /// Controller IDs currently connected to a subsystem, with their host NQNs.
    pub fn controllers(&self, nqn: &str) -> Vec<(u16, String)> {
        self.inner
            .subsystem(nqn)
            .map(|s| {
                s.live_controllers()
                    .iter()
                    .map(|c| (c.cntlid, c.hostnqn.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }
}
