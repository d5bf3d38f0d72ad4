//! The node's catalog: the persistent state, the per-drive allocators rebuilt from it, and
//! every change to them as one validated, persisted step.
//!
//! Each change is computed on a copy of the state, saved with the atomic update protocol,
//! and only then becomes the in-memory state: memory never runs ahead of the disk. The
//! catalog knows nothing of the NVMe target; `node` applies changes there.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use rand::RngCore;
use uuid::Uuid;

use crate::extent::{EXTENT_UNIT_BYTES, ExtentAllocator, ExtentError};
use crate::naming::{self, NamespaceIds, NamingError};
use crate::state::{
    Attachment, DhchapHostRecord, DriveRecord, LoadSource, NamespaceKind, NamespaceRecord,
    NodeState, QosRecord, ReservationState, StateError, StateFile, StateStore, SubsystemRecord,
};

/// Highest NSID the node hands out in one subsystem (bounds per-subsystem state).
pub const MAX_NSID: u32 = 1024;

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// A DH-HMAC-CHAP record that does not parse (never names a secret).
    #[error("{0}")]
    InvalidDhchap(String),
    #[error("no subsystem {0}")]
    NoSuchSubsystem(String),
    #[error("no namespace {nsid} in {nqn}")]
    NoSuchNamespace { nqn: String, nsid: u32 },
    #[error("namespace {nsid} already exists in {nqn}")]
    NamespaceExists { nqn: String, nsid: u32 },
    #[error("no free namespace ID in {0} (at most {MAX_NSID})")]
    NoFreeNsid(String),
    #[error("namespace ID {0} is out of range 1..={MAX_NSID}")]
    BadNsid(u32),
    #[error("invalid block size {0}: must be 512 or 4096 and a multiple of the drive's block")]
    BadBlockSize(u32),
    #[error(
        "invalid size {size_bytes}: must be a non-zero multiple of the {block_size_bytes}-byte block"
    )]
    BadSize {
        size_bytes: u64,
        block_size_bytes: u32,
    },
    #[error("drive {drive}: {source}")]
    Extent { drive: String, source: ExtentError },
    #[error("data dir belongs to node \"{found}\", not \"{given}\"")]
    WrongNode { found: String, given: String },
    #[error("drive {0} already exists")]
    DriveExists(String),
    #[error("host {host} is already allowed on {nqn}")]
    HostAlreadyAllowed { nqn: String, host: String },
    #[error("host {host} is not on the allow list of {nqn}")]
    HostNotAllowed { nqn: String, host: String },
    #[error(transparent)]
    Naming(#[from] NamingError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("node state is inconsistent: {0}")]
    Inconsistent(String),
}

/// A namespace to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNamespace {
    pub nqn: String,
    pub size_bytes: u64,
    /// 512 or 4096; default: 4096 on a 4K drive, else 512.
    pub block_size_bytes: Option<u32>,
    /// Default: the lowest free NSID.
    pub nsid: Option<u32>,
    pub attachment: Attachment,
    /// NVM, or Key Value with the store's format parameters. A KV namespace takes whole
    /// allocation units: its size is rounded up to [`EXTENT_UNIT_BYTES`].
    pub kind: NamespaceKind,
}

/// How the state was found at open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// No state in the data dir: a new node.
    Fresh,
    Loaded {
        generation: u64,
        source: LoadSource,
    },
}

/// Unix time in milliseconds (0 if the clock is before 1970).
pub(crate) fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub struct Catalog {
    state: NodeState,
    allocators: BTreeMap<Uuid, ExtentAllocator>,
    file: StateFile<Box<dyn StateStore>>,
    rng: Box<dyn RngCore + Send>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Catalog {
    /// Loads the state of node `node_name` (or starts a fresh one, not yet saved) and
    /// rebuilds the allocators from it.
    pub fn open(
        store: Box<dyn StateStore>,
        node_name: &str,
        mut rng: Box<dyn RngCore + Send>,
    ) -> Result<(Catalog, Origin), CatalogError> {
        naming::validate_name(node_name)?;
        let mut file = StateFile::new(store);
        let (state, origin) = match file.load()? {
            Some(l) => (
                l.state,
                Origin::Loaded {
                    generation: l.generation,
                    source: l.source,
                },
            ),
            None => (
                NodeState::new(node_name, naming::random_uuid(&mut rng)),
                Origin::Fresh,
            ),
        };
        if state.node_name != node_name {
            return Err(CatalogError::WrongNode {
                found: state.node_name,
                given: node_name.into(),
            });
        }
        let allocators = build_allocators(&state)?;
        Ok((
            Catalog {
                state,
                allocators,
                file,
                rng,
            },
            origin,
        ))
    }

    pub fn state(&self) -> &NodeState {
        &self.state
    }

    /// Generation of the state file last loaded or saved.
    pub fn generation(&self) -> u64 {
        self.file.generation()
    }

    pub fn allocator(&self, drive_uuid: Uuid) -> Option<&ExtentAllocator> {
        self.allocators.get(&drive_uuid)
    }

    /// Saves `next` and makes it the state; rebuilds the allocators from it.
    fn commit(&mut self, next: NodeState) -> Result<(), CatalogError> {
        let allocators = build_allocators(&next)?;
        self.file.save(&next)?;
        self.state = next;
        self.allocators = allocators;
        Ok(())
    }

    /// Saves the current state again (e.g. the first save of a fresh node).
    pub fn save(&mut self) -> Result<(), CatalogError> {
        self.commit(self.state.clone())
    }

    fn next_serial(&self, next: &mut NodeState, prefix: &str) -> Result<String, CatalogError> {
        let serial = naming::serial_number(prefix, next.node_uuid, next.next_serial_seq)?;
        next.next_serial_seq += 1;
        Ok(serial)
    }

    /// Adds a drive with its default subsystem and one namespace spanning it (attached to
    /// every host, any host allowed). Returns the subsystem NQN.
    pub fn add_drive(
        &mut self,
        name: &str,
        spec: &str,
        size_bytes: u64,
        drive_block_bytes: u32,
    ) -> Result<String, CatalogError> {
        self.add_drive_with(name, spec, size_bytes, drive_block_bytes, true)
    }

    /// Adds a drive with its default subsystem (any host allowed) and no namespace: the
    /// whole capacity stays free for `create_namespace` (e.g. Namespace Management from a
    /// cluster's provisioning). Returns the subsystem NQN.
    pub fn add_bare_drive(
        &mut self,
        name: &str,
        spec: &str,
        size_bytes: u64,
        drive_block_bytes: u32,
    ) -> Result<String, CatalogError> {
        self.add_drive_with(name, spec, size_bytes, drive_block_bytes, false)
    }

    fn add_drive_with(
        &mut self,
        name: &str,
        spec: &str,
        size_bytes: u64,
        drive_block_bytes: u32,
        whole_namespace: bool,
    ) -> Result<String, CatalogError> {
        naming::validate_name(name)?;
        if self.state.drive_by_name(name).is_some() {
            return Err(CatalogError::DriveExists(name.into()));
        }
        let mut next = self.state.clone();
        let uuid = naming::random_uuid(&mut self.rng);
        let drive_serial = self.next_serial(&mut next, "FD")?;
        next.drives.push(DriveRecord {
            name: name.into(),
            spec: spec.into(),
            uuid,
            size_bytes,
            block_size_bytes: drive_block_bytes,
            serial: drive_serial,
        });
        let nqn = naming::default_nqn(&next.node_name, name);
        if next.subsystem(&nqn).is_some() {
            return Err(CatalogError::Inconsistent(format!(
                "subsystem {nqn} already exists"
            )));
        }
        let serial = self.next_serial(&mut next, "FB")?;
        next.subsystems.push(SubsystemRecord {
            nqn: nqn.clone(),
            serial,
            model: naming::MODEL_NUMBER.into(),
            drive_uuid: uuid,
            allow_any_host: true,
            allowed_hosts: Vec::new(),
            dhchap: Vec::new(),
            tls_psks: Vec::new(),
        });
        if !whole_namespace {
            self.commit(next)?;
            return Ok(nqn);
        }
        let block_size_bytes = default_block_size(drive_block_bytes);
        let mut alloc = ExtentAllocator::new(size_bytes);
        let capacity_bytes = alloc.capacity_bytes();
        let extents = alloc
            .allocate(capacity_bytes)
            .map_err(|source| CatalogError::Extent {
                drive: name.into(),
                source,
            })?;
        let ids = NamespaceIds::generate(&mut self.rng);
        next.namespaces.push(NamespaceRecord {
            subsystem_nqn: nqn.clone(),
            nsid: 1,
            drive_uuid: uuid,
            size_bytes: capacity_bytes - capacity_bytes % u64::from(block_size_bytes),
            extents,
            block_size_bytes,
            nguid: ids.nguid,
            eui64: ids.eui64,
            uuid: ids.uuid,
            attachment: Attachment::All,
            created_unix_ms: now_unix_ms(),
            reservation: ReservationState::default(),
            kind: NamespaceKind::Nvm,
        });
        self.commit(next)?;
        Ok(nqn)
    }

    /// Carves a new namespace out of the drive behind `req.nqn`.
    pub fn create_namespace(
        &mut self,
        req: &NewNamespace,
    ) -> Result<NamespaceRecord, CatalogError> {
        let sub = self
            .state
            .subsystem(&req.nqn)
            .ok_or_else(|| CatalogError::NoSuchSubsystem(req.nqn.clone()))?;
        let drive = self
            .state
            .drive(sub.drive_uuid)
            .ok_or_else(|| CatalogError::Inconsistent(format!("{}: drive missing", req.nqn)))?;
        let block_size_bytes = req
            .block_size_bytes
            .unwrap_or_else(|| default_block_size(drive.block_size_bytes));
        if !matches!(block_size_bytes, 512 | 4096)
            || !block_size_bytes.is_multiple_of(drive.block_size_bytes.max(1))
        {
            return Err(CatalogError::BadBlockSize(block_size_bytes));
        }
        let size_bytes = if req.kind.is_kv() {
            req.size_bytes.div_ceil(EXTENT_UNIT_BYTES) * EXTENT_UNIT_BYTES
        } else {
            req.size_bytes
        };
        if size_bytes == 0 || !size_bytes.is_multiple_of(u64::from(block_size_bytes)) {
            return Err(CatalogError::BadSize {
                size_bytes: req.size_bytes,
                block_size_bytes,
            });
        }
        let used: Vec<u32> = self
            .state
            .namespaces
            .iter()
            .filter(|n| n.subsystem_nqn == req.nqn)
            .map(|n| n.nsid)
            .collect();
        let nsid = match req.nsid {
            Some(n) if n == 0 || n > MAX_NSID => return Err(CatalogError::BadNsid(n)),
            Some(n) if used.contains(&n) => {
                return Err(CatalogError::NamespaceExists {
                    nqn: req.nqn.clone(),
                    nsid: n,
                });
            }
            Some(n) => n,
            None => (1..=MAX_NSID)
                .find(|n| !used.contains(n))
                .ok_or_else(|| CatalogError::NoFreeNsid(req.nqn.clone()))?,
        };
        let mut alloc = self.allocators.get(&drive.uuid).cloned().ok_or_else(|| {
            CatalogError::Inconsistent(format!("no allocator for {}", drive.name))
        })?;
        let extents = alloc
            .allocate(size_bytes)
            .map_err(|source| CatalogError::Extent {
                drive: drive.name.clone(),
                source,
            })?;
        let ids = NamespaceIds::generate(&mut self.rng);
        let record = NamespaceRecord {
            subsystem_nqn: req.nqn.clone(),
            nsid,
            drive_uuid: drive.uuid,
            size_bytes,
            extents,
            block_size_bytes,
            nguid: ids.nguid,
            eui64: ids.eui64,
            uuid: ids.uuid,
            attachment: normalize(req.attachment.clone()),
            created_unix_ms: now_unix_ms(),
            reservation: ReservationState::default(),
            kind: req.kind.clone(),
        };
        let mut next = self.state.clone();
        next.namespaces.push(record.clone());
        self.commit(next)?;
        Ok(record)
    }

    /// Deletes a namespace and frees its extents; returns what it was.
    pub fn delete_namespace(
        &mut self,
        nqn: &str,
        nsid: u32,
    ) -> Result<NamespaceRecord, CatalogError> {
        let mut next = self.state.clone();
        let pos = next
            .namespaces
            .iter()
            .position(|n| n.subsystem_nqn == nqn && n.nsid == nsid)
            .ok_or_else(|| CatalogError::NoSuchNamespace {
                nqn: nqn.into(),
                nsid,
            })?;
        let record = next.namespaces.remove(pos);
        // Its QoS limits go with it: a namespace created later with its NSID starts free.
        next.qos
            .retain(|q| !(q.subsystem_nqn == nqn && q.nsid == Some(nsid)));
        self.commit(next)?;
        Ok(record)
    }

    /// Sets the QoS limits of `record`'s key (replacing what it had); returns the record it
    /// replaced. An empty record clears the key.
    pub fn set_qos(&mut self, record: QosRecord) -> Result<Option<QosRecord>, CatalogError> {
        if self.state.subsystem(&record.subsystem_nqn).is_none() {
            return Err(CatalogError::NoSuchSubsystem(record.subsystem_nqn));
        }
        if let Some(nsid) = record.nsid
            && self.state.namespace(&record.subsystem_nqn, nsid).is_none()
        {
            return Err(CatalogError::NoSuchNamespace {
                nqn: record.subsystem_nqn,
                nsid,
            });
        }
        let mut next = self.state.clone();
        let old = next
            .qos
            .iter()
            .position(|q| q.same_key(&record))
            .map(|i| next.qos.remove(i));
        if !record.is_empty() {
            next.qos.push(record);
            next.qos.sort_by(|a, b| {
                (&a.subsystem_nqn, a.nsid, &a.host_nqn).cmp(&(
                    &b.subsystem_nqn,
                    b.nsid,
                    &b.host_nqn,
                ))
            });
        }
        if old.is_none() && next.qos == self.state.qos {
            return Ok(None);
        }
        self.commit(next)?;
        Ok(old)
    }

    pub fn set_attachment(
        &mut self,
        nqn: &str,
        nsid: u32,
        a: Attachment,
    ) -> Result<(), CatalogError> {
        self.change_namespace(nqn, nsid, |n| n.attachment = normalize(a))
    }

    /// Records the kind a namespace ended up with (a KV store's parameters as formatted).
    pub fn set_kind(
        &mut self,
        nqn: &str,
        nsid: u32,
        kind: NamespaceKind,
    ) -> Result<(), CatalogError> {
        self.change_namespace(nqn, nsid, |n| n.kind = kind)
    }

    pub fn set_reservation(
        &mut self,
        nqn: &str,
        nsid: u32,
        r: ReservationState,
    ) -> Result<(), CatalogError> {
        self.change_namespace(nqn, nsid, |n| n.reservation = r)
    }

    fn change_namespace(
        &mut self,
        nqn: &str,
        nsid: u32,
        f: impl FnOnce(&mut NamespaceRecord),
    ) -> Result<(), CatalogError> {
        let mut next = self.state.clone();
        let ns = next
            .namespace_mut(nqn, nsid)
            .ok_or_else(|| CatalogError::NoSuchNamespace {
                nqn: nqn.into(),
                nsid,
            })?;
        f(ns);
        if next == self.state {
            return Ok(());
        }
        self.commit(next)
    }

    /// Adds `host` to the allow list of `nqn` (and stops allowing any host).
    pub fn allow_host(&mut self, nqn: &str, host: &str) -> Result<SubsystemRecord, CatalogError> {
        naming::validate_nqn(host)?;
        self.change_subsystem(nqn, |s| {
            if s.allowed_hosts.iter().any(|h| h == host) && !s.allow_any_host {
                return Err(CatalogError::HostAlreadyAllowed {
                    nqn: nqn.into(),
                    host: host.into(),
                });
            }
            if !s.allowed_hosts.iter().any(|h| h == host) {
                s.allowed_hosts.push(host.into());
                s.allowed_hosts.sort();
            }
            s.allow_any_host = false;
            Ok(())
        })
    }

    /// Adds `host` to the allow list of `nqn` (if it is not there yet) and requires it to
    /// authenticate with DH-HMAC-CHAP as `rec` says, replacing what it needed before.
    pub fn allow_host_dhchap(
        &mut self,
        nqn: &str,
        rec: DhchapHostRecord,
    ) -> Result<SubsystemRecord, CatalogError> {
        naming::validate_nqn(&rec.host_nqn)?;
        rec.to_target_config()
            .map_err(CatalogError::InvalidDhchap)?;
        self.change_subsystem(nqn, |s| {
            if !s.allowed_hosts.contains(&rec.host_nqn) {
                s.allowed_hosts.push(rec.host_nqn.clone());
                s.allowed_hosts.sort();
            }
            s.allow_any_host = false;
            s.dhchap.retain(|d| d.host_nqn != rec.host_nqn);
            s.dhchap.push(rec);
            s.dhchap.sort_by(|a, b| a.host_nqn.cmp(&b.host_nqn));
            Ok(())
        })
    }

    /// Adds `host` to the allow list of `nqn` (if it is not there yet) and requires it to
    /// connect over TLS with the PSKs derived from `rec.psk`, replacing the PSK it had.
    pub fn allow_host_tls(
        &mut self,
        nqn: &str,
        rec: crate::state::TlsPskHostRecord,
    ) -> Result<SubsystemRecord, CatalogError> {
        naming::validate_nqn(&rec.host_nqn)?;
        rec.configured_psk().map_err(CatalogError::InvalidDhchap)?;
        self.change_subsystem(nqn, |s| {
            if !s.allowed_hosts.contains(&rec.host_nqn) {
                s.allowed_hosts.push(rec.host_nqn.clone());
                s.allowed_hosts.sort();
            }
            s.allow_any_host = false;
            s.tls_psks.retain(|d| d.host_nqn != rec.host_nqn);
            s.tls_psks.push(rec);
            s.tls_psks.sort_by(|a, b| a.host_nqn.cmp(&b.host_nqn));
            Ok(())
        })
    }

    /// Removes `host` from the allow list of `nqn` (and its DH-HMAC-CHAP secrets and TLS
    /// PSK).
    pub fn deny_host(&mut self, nqn: &str, host: &str) -> Result<SubsystemRecord, CatalogError> {
        self.change_subsystem(nqn, |s| {
            s.dhchap.retain(|d| d.host_nqn != host);
            s.tls_psks.retain(|d| d.host_nqn != host);
            let before = s.allowed_hosts.len();
            s.allowed_hosts.retain(|h| h != host);
            if s.allowed_hosts.len() == before {
                return Err(CatalogError::HostNotAllowed {
                    nqn: nqn.into(),
                    host: host.into(),
                });
            }
            Ok(())
        })
    }

    /// Allows every host (true) or only the allow list (false).
    pub fn set_allow_any_host(
        &mut self,
        nqn: &str,
        allow: bool,
    ) -> Result<SubsystemRecord, CatalogError> {
        self.change_subsystem(nqn, |s| {
            s.allow_any_host = allow;
            Ok(())
        })
    }

    /// Puts a subsystem record back as it was (undoing a change the target refused).
    pub fn restore_subsystem(&mut self, record: SubsystemRecord) -> Result<(), CatalogError> {
        let nqn = record.nqn.clone();
        self.change_subsystem(&nqn, |s| {
            *s = record;
            Ok(())
        })
        .map(|_| ())
    }

    fn change_subsystem(
        &mut self,
        nqn: &str,
        f: impl FnOnce(&mut SubsystemRecord) -> Result<(), CatalogError>,
    ) -> Result<SubsystemRecord, CatalogError> {
        let mut next = self.state.clone();
        let s = next
            .subsystem_mut(nqn)
            .ok_or_else(|| CatalogError::NoSuchSubsystem(nqn.into()))?;
        f(s)?;
        let out = s.clone();
        if next != self.state {
            self.commit(next)?;
        }
        Ok(out)
    }

    /// Records a start: one more power cycle, an unsafe shutdown if the last run did not
    /// end cleanly, and clears the clean marker until [`Catalog::record_clean_shutdown`].
    /// Reservations without persist-through-power-loss are cleared, as a power loss would.
    pub fn record_start(&mut self) -> Result<(), CatalogError> {
        let mut next = self.state.clone();
        next.smart.power_cycles += 1;
        if !next.smart.clean_shutdown {
            next.smart.unsafe_shutdowns += 1;
        }
        next.smart.clean_shutdown = false;
        for ns in &mut next.namespaces {
            if !ns.reservation.persist_through_power_loss {
                ns.reservation = ReservationState::default();
            }
        }
        self.commit(next)
    }

    /// Adds power-on time (called periodically and at shutdown).
    pub fn add_power_on_seconds(&mut self, secs: u64) -> Result<(), CatalogError> {
        let mut next = self.state.clone();
        next.smart.power_on_seconds = next.smart.power_on_seconds.saturating_add(secs);
        self.commit(next)
    }

    /// Marks a clean shutdown, adding the last power-on time.
    pub fn record_clean_shutdown(&mut self, secs: u64) -> Result<(), CatalogError> {
        let mut next = self.state.clone();
        next.smart.power_on_seconds = next.smart.power_on_seconds.saturating_add(secs);
        next.smart.clean_shutdown = true;
        self.commit(next)
    }
}

/// 4096 on a 4K-native drive, else 512.
fn default_block_size(drive_block_bytes: u32) -> u32 {
    if drive_block_bytes == 4096 { 4096 } else { 512 }
}

/// Host lists are kept sorted and unique so equal attachments compare equal.
fn normalize(a: Attachment) -> Attachment {
    match a {
        Attachment::All => Attachment::All,
        Attachment::Hosts(mut h) => {
            h.sort();
            h.dedup();
            Attachment::Hosts(h)
        }
    }
}

/// One allocator per drive with every namespace's extents reserved; overlapping or
/// out-of-range extents make the state inconsistent.
fn build_allocators(state: &NodeState) -> Result<BTreeMap<Uuid, ExtentAllocator>, CatalogError> {
    state.validate().map_err(CatalogError::Inconsistent)?;
    let mut out: BTreeMap<Uuid, ExtentAllocator> = state
        .drives
        .iter()
        .map(|d| (d.uuid, ExtentAllocator::new(d.size_bytes)))
        .collect();
    for ns in &state.namespaces {
        let alloc = out.get_mut(&ns.drive_uuid).ok_or_else(|| {
            CatalogError::Inconsistent(format!("unknown drive {}", ns.drive_uuid))
        })?;
        alloc.reserve(&ns.extents).map_err(|e| {
            CatalogError::Inconsistent(format!("namespace {}/{}: {e}", ns.subsystem_nqn, ns.nsid))
        })?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::extent::EXTENT_UNIT_BYTES as MIB;
    use crate::state::FsStore;

    fn open(dir: &std::path::Path, name: &str) -> Result<(Catalog, Origin), CatalogError> {
        Catalog::open(
            Box::new(FsStore::new(dir)),
            name,
            Box::new(rand::rngs::StdRng::seed_from_u64(1)),
        )
    }

    fn new_ns(nqn: &str, size_bytes: u64) -> NewNamespace {
        NewNamespace {
            nqn: nqn.into(),
            size_bytes,
            block_size_bytes: None,
            nsid: None,
            attachment: Attachment::All,
            kind: NamespaceKind::Nvm,
        }
    }

    #[test]
    fn bare_drive_has_no_namespace_and_all_space_free() {
        let dir = tempfile::tempdir().unwrap();
        let (mut c, _) = open(dir.path(), "n1").unwrap();
        c.record_start().unwrap();
        let nqn = c
            .add_bare_drive("d0", "ram:8M", 8 * MIB + 512, 512)
            .unwrap();
        assert_eq!(nqn, "nqn.2026-01.io.ferrobay:n1:d0");
        assert!(c.state().subsystem(&nqn).unwrap().allow_any_host);
        assert!(c.state().namespaces.is_empty());
        let uuid = c.state().drive_by_name("d0").unwrap().uuid;
        assert_eq!(c.allocator(uuid).unwrap().free_bytes(), 8 * MIB);
        let e = c.add_bare_drive("d0", "ram:8M", 8 * MIB, 512).unwrap_err();
        assert!(matches!(e, CatalogError::DriveExists(_)), "{e}");
        let a = c.create_namespace(&new_ns(&nqn, 8 * MIB)).unwrap();
        assert_eq!((a.nsid, a.size_bytes), (1, 8 * MIB));
        // Persisted like any drive.
        let before = c.state().clone();
        drop(c);
        let (c2, _) = open(dir.path(), "n1").unwrap();
        assert_eq!(c2.state(), &before);
    }

    #[test]
    fn drives_namespaces_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let (mut c, origin) = open(dir.path(), "n1").unwrap();
        assert_eq!(origin, Origin::Fresh);
        c.record_start().unwrap();
        let nqn = c.add_drive("d0", "ram:64M", 64 * MIB + 512, 512).unwrap();
        assert_eq!(nqn, "nqn.2026-01.io.ferrobay:n1:d0");
        let ns1 = c.state().namespace(&nqn, 1).unwrap().clone();
        assert_eq!(ns1.size_bytes, 64 * MIB);
        assert_eq!(c.allocator(ns1.drive_uuid).unwrap().free_bytes(), 0);
        let e = c.create_namespace(&new_ns(&nqn, MIB)).unwrap_err();
        assert!(e.to_string().contains("not enough free space"), "{e}");

        c.delete_namespace(&nqn, 1).unwrap();
        let a = c.create_namespace(&new_ns(&nqn, 10 * MIB)).unwrap();
        assert_eq!((a.nsid, a.block_size_bytes), (1, 512));
        let b = c
            .create_namespace(&NewNamespace {
                block_size_bytes: Some(4096),
                ..new_ns(&nqn, 3 * MIB + 4096)
            })
            .unwrap();
        assert_eq!(
            (b.nsid, b.extents.len(), b.extents[0].len_bytes),
            (2, 1, 4 * MIB)
        );
        c.set_attachment(
            &nqn,
            2,
            Attachment::Hosts(vec!["nqn.h2".into(), "nqn.h1".into(), "nqn.h2".into()]),
        )
        .unwrap();
        c.allow_host(&nqn, "nqn.2014-08.org.nvmexpress:uuid:a")
            .unwrap();
        let serial = c.state().subsystem(&nqn).unwrap().serial.clone();
        assert_eq!(serial.len(), 20);
        let before = c.state().clone();
        drop(c);

        let (c2, origin) = open(dir.path(), "n1").unwrap();
        assert!(matches!(
            origin,
            Origin::Loaded {
                source: LoadSource::Current,
                ..
            }
        ));
        assert_eq!(c2.state(), &before);
        assert_eq!(
            c2.state().namespace(&nqn, 2).unwrap().attachment,
            Attachment::Hosts(vec!["nqn.h1".into(), "nqn.h2".into()])
        );
        let free = c2.allocator(ns1.drive_uuid).unwrap().free_bytes();
        assert_eq!(free, 64 * MIB - 14 * MIB);
        let sub = c2.state().subsystem(&nqn).unwrap();
        assert!(!sub.allow_any_host);
        assert_eq!(
            sub.allowed_hosts,
            vec!["nqn.2014-08.org.nvmexpress:uuid:a".to_string()]
        );
        assert!(matches!(
            open(dir.path(), "other"),
            Err(CatalogError::WrongNode { .. })
        ));
    }

    #[test]
    fn validation_errors_change_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (mut c, _) = open(dir.path(), "n1").unwrap();
        let nqn = c.add_drive("d0", "ram:8M", 8 * MIB, 512).unwrap();
        c.delete_namespace(&nqn, 1).unwrap();
        let before = c.state().clone();
        let cases: Vec<(NewNamespace, &str)> = vec![
            (new_ns("nqn.nope", MIB), "no subsystem nqn.nope"),
            (new_ns(&nqn, 0), "invalid size 0"),
            (new_ns(&nqn, 1000), "invalid size 1000"),
            (
                NewNamespace {
                    block_size_bytes: Some(1024),
                    ..new_ns(&nqn, MIB)
                },
                "invalid block size 1024",
            ),
            (
                NewNamespace {
                    nsid: Some(0),
                    ..new_ns(&nqn, MIB)
                },
                "namespace ID 0 is out of range",
            ),
            (
                NewNamespace {
                    nsid: Some(MAX_NSID + 1),
                    ..new_ns(&nqn, MIB)
                },
                "out of range",
            ),
            (new_ns(&nqn, 9 * MIB), "not enough free space"),
        ];
        for (req, want) in cases {
            let e = c.create_namespace(&req).unwrap_err().to_string();
            assert!(e.contains(want), "{e} does not contain {want}");
        }
        c.create_namespace(&NewNamespace {
            nsid: Some(5),
            ..new_ns(&nqn, MIB)
        })
        .unwrap();
        let e = c
            .create_namespace(&NewNamespace {
                nsid: Some(5),
                ..new_ns(&nqn, MIB)
            })
            .unwrap_err();
        assert!(matches!(e, CatalogError::NamespaceExists { nsid: 5, .. }));
        assert!(matches!(
            c.delete_namespace(&nqn, 9),
            Err(CatalogError::NoSuchNamespace { .. })
        ));
        assert!(matches!(
            c.deny_host(&nqn, "nqn.x"),
            Err(CatalogError::HostNotAllowed { .. })
        ));
        assert!(c.allow_host(&nqn, "not-an-nqn").is_err());
        c.delete_namespace(&nqn, 5).unwrap();
        assert_eq!(c.state(), &before);
    }

    #[test]
    fn smart_counters_across_runs() {
        let dir = tempfile::tempdir().unwrap();
        let (mut c, _) = open(dir.path(), "n1").unwrap();
        c.record_start().unwrap();
        assert_eq!(
            (
                c.state().smart.power_cycles,
                c.state().smart.unsafe_shutdowns
            ),
            (1, 0)
        );
        c.add_power_on_seconds(30).unwrap();
        drop(c); // crash: no clean shutdown
        let (mut c, _) = open(dir.path(), "n1").unwrap();
        c.record_start().unwrap();
        assert_eq!(
            (
                c.state().smart.power_cycles,
                c.state().smart.unsafe_shutdowns
            ),
            (2, 1)
        );
        c.record_clean_shutdown(15).unwrap();
        drop(c);
        let (mut c, _) = open(dir.path(), "n1").unwrap();
        c.record_start().unwrap();
        let s = &c.state().smart;
        assert_eq!(
            (s.power_cycles, s.unsafe_shutdowns, s.power_on_seconds),
            (3, 1, 45)
        );
        assert!(!s.clean_shutdown);
    }

    #[test]
    fn reservations_without_ptpl_are_cleared_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let (mut c, _) = open(dir.path(), "n1").unwrap();
        let n0 = c.add_drive("d0", "ram:8M", 8 * MIB, 512).unwrap();
        let n1 = c.add_drive("d1", "ram:8M", 8 * MIB, 512).unwrap();
        let held = |ptpl| ReservationState {
            generation: 3,
            registrants: vec![crate::state::Registrant {
                host_id: 9,
                key: 0xabc,
            }],
            holder_host_id: Some(9),
            rtype: 1,
            persist_through_power_loss: ptpl,
        };
        c.set_reservation(&n0, 1, held(true)).unwrap();
        c.set_reservation(&n1, 1, held(false)).unwrap();
        drop(c);
        let (mut c, _) = open(dir.path(), "n1").unwrap();
        c.record_start().unwrap();
        assert_eq!(c.state().namespace(&n0, 1).unwrap().reservation, held(true));
        assert_eq!(
            c.state().namespace(&n1, 1).unwrap().reservation,
            ReservationState::default()
        );
    }
}
