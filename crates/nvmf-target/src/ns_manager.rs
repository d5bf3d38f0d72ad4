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
    /// Command set identifier (CSI) from CDW11 bits 31:24: always 0 (NVM) here; Key
    /// Value creates go to [`NamespaceManager::create_kv`].
    pub csi: u8,
}

/// A Namespace Management "create" of a Key Value namespace (CSI 01h), decoded from the
/// host-specified fields as `docs/wire/kv.md` reads them: sizes in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateKvNamespace {
    /// NSZE: size in bytes (non-zero).
    pub size_bytes: u64,
    /// KV format index (FLBAS bits 3:0): 0, the only format the target reports.
    pub format_index: u8,
    /// Namespace multi-path I/O and sharing capabilities (NMIC); bit 0 = shared.
    pub nmic: u8,
    /// ANA group requested (ANAGRPID), 0 if none.
    pub anagrpid: u32,
}

/// Implemented by the layer that owns the drives. Errors are NVMe statuses returned to the
/// host as they are (e.g. [`Status::NS_INSUFFICIENT_CAPACITY`], [`Status::NS_ALREADY_ATTACHED`]).
pub trait NamespaceManager: Send + Sync + 'static {
    /// Creates a namespace in subsystem `subnqn` and returns its NSID. It should be added
    /// to the target detached (`NamespaceConfig::attached = false`).
    fn create(&self, target: &Target, subnqn: &str, req: &CreateNamespace) -> Result<u32, Status>;
    /// Creates a Key Value namespace in subsystem `subnqn` and returns its NSID; added
    /// detached like [`NamespaceManager::create`]. By default Key Value namespaces are
    /// not supported (I/O Command Set Not Supported).
    fn create_kv(
        &self,
        target: &Target,
        subnqn: &str,
        req: &CreateKvNamespace,
    ) -> Result<u32, Status> {
        let _ = (target, subnqn, req);
        Err(Status::IO_COMMAND_SET_NOT_SUPPORTED.dnr())
    }
    /// Deletes namespace `nsid` (0xFFFF_FFFF: all namespaces of the subsystem).
    fn delete(&self, target: &Target, subnqn: &str, nsid: u32) -> Result<(), Status>;
    /// Attaches `nsid` to the controllers `ctrls` (usually via [`Target::attach_namespace`]).
    fn attach(&self, target: &Target, subnqn: &str, nsid: u32, ctrls: &[u16])
    -> Result<(), Status>;
    /// Detaches `nsid` from the controllers `ctrls`.
    fn detach(&self, target: &Target, subnqn: &str, nsid: u32, ctrls: &[u16])
    -> Result<(), Status>;
}
