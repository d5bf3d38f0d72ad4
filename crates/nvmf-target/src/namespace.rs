//! A namespace: a block range of a device (NVM) or a key-value store (KV), its
//! identifiers, reservations and counters.

use std::collections::BTreeSet;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};

use blockdev::{BlockDevice, DeviceKind};
use nvme_proto::identify::csi;
use nvme_proto::kv::KvFormat;

use crate::kv_backend::KvBackend;

use crate::fence::InflightTable;
use crate::resv_api::Reservations;
use crate::stats::NsCounters;

/// Which controllers a namespace is attached to.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Attachment {
    /// Attached to every controller, present and future.
    pub all: bool,
    /// Otherwise: attached to the controllers of these host NQNs (so the attachment survives
    /// the host reconnecting with a new dynamic controller ID).
    pub hosts: BTreeSet<String>,
}

impl Attachment {
    pub fn all() -> Self {
        Attachment {
            all: true,
            hosts: BTreeSet::new(),
        }
    }
    pub fn none() -> Self {
        Attachment::default()
    }
    pub fn contains(&self, hostnqn: &str) -> bool {
        self.all || self.hosts.contains(hostnqn)
    }
}

/// The I/O command set a namespace speaks and what stores it: it decides what an I/O
/// opcode means.
pub(crate) enum CommandSet {
    /// NVM (CSI 00h): logical blocks on a device range.
    Nvm(Arc<BlockMedia>),
    /// Key Value (CSI 01h): keys and values in a [`KvBackend`].
    Kv(Arc<KvMedia>),
}

impl CommandSet {
    /// The Command Set Identifier reported in Identify.
    pub fn csi(&self) -> u8 {
        match self {
            CommandSet::Nvm(_) => csi::NVM,
            CommandSet::Kv(_) => csi::KEY_VALUE,
        }
    }
}

/// The device range behind an NVM namespace.
pub(crate) struct BlockMedia {
    pub device: Arc<dyn BlockDevice>,
    pub offset_bytes: u64,
    pub size_bytes: u64,
    pub block_size_bytes: u32,
    pub lba_shift: u32,
    /// Size in logical blocks.
    pub blocks: u64,
}

impl BlockMedia {
    /// Whether deallocated blocks read back as zeroes: the device discards, and its
    /// kind guarantees zeroes after a discard (docs/blockdev.md: RAM, null, regular
    /// files; a kernel block device returns whatever the drive does).
    pub fn discard_reads_zeroes(&self) -> bool {
        let info = self.device.info();
        info.supports_discard
            && matches!(
                info.kind,
                DeviceKind::Ram | DeviceKind::Null | DeviceKind::File
            )
    }

    /// Byte offset on the device of LBA `slba` and the length of `nlb` blocks, or None if
    /// the range leaves the namespace.
    #[inline]
    pub fn byte_range(&self, slba: u64, nlb: u64) -> Option<(u64, u64)> {
        let end = slba.checked_add(nlb)?;
        if end > self.blocks {
            return None;
        }
        Some((
            self.offset_bytes + (slba << self.lba_shift),
            nlb << self.lba_shift,
        ))
    }

    /// The LBA of byte offset `off` on the device, for error reports.
    pub fn lba_of(&self, off: u64) -> u64 {
        off.saturating_sub(self.offset_bytes) >> self.lba_shift
    }
}

/// The store behind a KV namespace and its format.
pub(crate) struct KvMedia {
    pub backend: Arc<dyn KvBackend>,
    /// KV format 0 (the only one): key and value limits, Identify CNS 05h.
    pub format: KvFormat,
    /// Name of what stores it (the drive), for stats.
    pub device: String,
    /// Space the namespace occupies, bytes.
    pub size_bytes: u64,
    /// Key Value Configuration feature (FID 20h) EDNEK: Delete of an absent key fails.
    pub ednek: AtomicBool,
}

pub(crate) struct Namespace {
    pub nsid: u32,
    pub command_set: CommandSet,
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    pub uuid: [u8; 16],
    pub reservations: Arc<dyn Reservations>,
    pub attachment: RwLock<Attachment>,
    pub counters: NsCounters,
    /// ANA group (1..=ANAGRPMAX), fixed for the namespace's life.
    pub ana_group: u32,
    /// Media-modifying commands in flight per host (preempt-and-abort waits on them).
    pub inflight: InflightTable,
}

impl Namespace {
    pub fn is_attached_to(&self, hostnqn: &str) -> bool {
        match self.attachment.read() {
            Ok(a) => a.contains(hostnqn),
            Err(p) => p.into_inner().contains(hostnqn),
        }
    }

    pub fn attachment(&self) -> Attachment {
        match self.attachment.read() {
            Ok(a) => a.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    pub fn set_attachment(&self, a: Attachment) {
        match self.attachment.write() {
            Ok(mut g) => *g = a,
            Err(p) => *p.into_inner() = a,
        }
    }

    pub fn csi(&self) -> u8 {
        self.command_set.csi()
    }

    /// The device range of an NVM namespace.
    pub fn block(&self) -> Option<&Arc<BlockMedia>> {
        match &self.command_set {
            CommandSet::Nvm(b) => Some(b),
            CommandSet::Kv(_) => None,
        }
    }

    /// The store of a KV namespace.
    pub fn kv(&self) -> Option<&Arc<KvMedia>> {
        match &self.command_set {
            CommandSet::Kv(k) => Some(k),
            CommandSet::Nvm(_) => None,
        }
    }

    pub fn size_bytes(&self) -> u64 {
        match &self.command_set {
            CommandSet::Nvm(b) => b.size_bytes,
            CommandSet::Kv(k) => k.size_bytes,
        }
    }

    pub fn device_name(&self) -> String {
        match &self.command_set {
            CommandSet::Nvm(b) => b.device.info().name.clone(),
            CommandSet::Kv(k) => k.device.clone(),
        }
    }

    /// Whether the device has a volatile write cache (Identify Controller VWC).
    pub fn volatile_write_cache(&self) -> bool {
        self.block()
            .is_some_and(|b| b.device.info().volatile_write_cache)
    }

    pub fn info(&self, subnqn: &str) -> NamespaceInfo {
        let (offset_bytes, block_size_bytes) = match &self.command_set {
            CommandSet::Nvm(b) => (b.offset_bytes, b.block_size_bytes),
            CommandSet::Kv(_) => (0, 0),
        };
        NamespaceInfo {
            subnqn: subnqn.to_string(),
            nsid: self.nsid,
            csi: self.csi(),
            device: self.device_name(),
            offset_bytes,
            size_bytes: self.size_bytes(),
            block_size_bytes,
            nguid: self.nguid,
            eui64: self.eui64,
            uuid: self.uuid,
            attachment: self.attachment(),
            ana_group: self.ana_group,
        }
    }
}

/// Public description of a namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub subnqn: String,
    pub nsid: u32,
    /// Command Set Identifier: 0 NVM, 1 Key Value.
    pub csi: u8,
    pub device: String,
    /// Where an NVM namespace starts on its device (0 for KV).
    pub offset_bytes: u64,
    pub size_bytes: u64,
    /// LBA size of an NVM namespace (0 for KV, which has no logical blocks).
    pub block_size_bytes: u32,
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    pub uuid: [u8; 16],
    pub attachment: Attachment,
    /// ANA group ID.
    pub ana_group: u32,
}
