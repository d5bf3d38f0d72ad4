//! A namespace: a block range of a device, its identifiers, reservations and counters.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

use blockdev::{BlockDevice, DeviceKind};

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

/// The I/O command set a namespace speaks: it decides what an I/O opcode means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CommandSet {
    /// NVM (CSI 00h): logical blocks on a device range.
    Nvm,
}

impl CommandSet {
    /// The Command Set Identifier reported in Identify.
    pub fn csi(self) -> u8 {
        match self {
            CommandSet::Nvm => nvme_proto::identify::csi::NVM,
        }
    }
}

pub(crate) struct Namespace {
    pub nsid: u32,
    pub command_set: CommandSet,
    pub device: Arc<dyn BlockDevice>,
    pub offset_bytes: u64,
    pub size_bytes: u64,
    pub block_size_bytes: u32,
    pub lba_shift: u32,
    /// Size in logical blocks.
    pub blocks: u64,
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

    pub fn info(&self, subnqn: &str) -> NamespaceInfo {
        NamespaceInfo {
            subnqn: subnqn.to_string(),
            nsid: self.nsid,
            device: self.device.info().name.clone(),
            offset_bytes: self.offset_bytes,
            size_bytes: self.size_bytes,
            block_size_bytes: self.block_size_bytes,
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
    pub device: String,
    pub offset_bytes: u64,
    pub size_bytes: u64,
    pub block_size_bytes: u32,
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    pub uuid: [u8; 16],
    pub attachment: Attachment,
    /// ANA group ID.
    pub ana_group: u32,
}
