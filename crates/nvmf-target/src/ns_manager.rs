//! Seam for Namespace Management and Namespace Attachment commands.
//!
//! The target parses the admin commands and hands them to a [`NamespaceManager`] installed
//! with [`crate::Target::set_namespace_manager`]; the storage-node layer implements it
//! (carving extents out of drives, persisting state) and calls back into the target
//! ([`crate::Target::add_namespace`], [`crate::Target::attach_namespace`], ...) to make the
//! change visible. The methods run on a blocking thread, so they may do synchronous I/O.

use nvme_proto::Status;

use crate::Target;

/// A Namespace Management "create" request, decoded from the host's data structure
/// (Identify Namespace layout).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateNamespace {
    /// Namespace size in logical blocks (NSZE).
    pub size_blocks: u64,
    /// Namespace capacity in logical blocks (NCAP).
    pub capacity_blocks: u64,
    /// Formatted LBA size index (FLBAS bits 3:0) into the LBA formats the target reports:
    /// 0 = 512 bytes, 1 = 4096 bytes.
    pub lba_format: u8,
    /// Block size the format index stands for.
    pub block_size_bytes: u32,
    /// Namespace multi-path I/O and sharing capabilities (NMIC); bit 0 = shared.
    pub nmic: u8,
    /// ANA group requested (ANAGRPID), 0 if none.
    pub anagrpid: u32,
    /// Command set identifier (CSI) from CDW11 bits 31:24; 0 = NVM.
    pub csi: u8,
}

/// Implemented by the layer that owns the drives. Errors are NVMe statuses returned to the
/// host as they are (e.g. [`Status::NS_INSUFFICIENT_CAPACITY`], [`Status::NS_ALREADY_ATTACHED`]).
pub trait NamespaceManager: Send + Sync + 'static {
    /// Creates a namespace in subsystem `subnqn` and returns its NSID. It should be added
    /// to the target detached (`NamespaceConfig::attached = false`).
    fn create(&self, target: &Target, subnqn: &str, req: &CreateNamespace) -> Result<u32, Status>;
    /// Deletes namespace `nsid` (0xFFFF_FFFF: all namespaces of the subsystem).
    fn delete(&self, target: &Target, subnqn: &str, nsid: u32) -> Result<(), Status>;
    /// Attaches `nsid` to the controllers `ctrls` (usually via [`Target::attach_namespace`]).
    fn attach(&self, target: &Target, subnqn: &str, nsid: u32, ctrls: &[u16])
    -> Result<(), Status>;
    /// Detaches `nsid` from the controllers `ctrls`.
    fn detach(&self, target: &Target, subnqn: &str, nsid: u32, ctrls: &[u16])
    -> Result<(), Status>;
}
