//! Namespaces on Ferrobay storage nodes, made over the fabric: NVMe Namespace Management
//! (admin 0x0D, create) and Namespace Attachment (0x15) on the node's NVMe address, then
//! made visible to every host (the processor nodes connect later under their own host
//! NQNs) through the node's HTTP API.

use std::net::SocketAddr;

use blockdev::IoBuf;
use nvme_proto::Status;
use nvme_proto::identify::{CtrlList, NsAttachCommand, NsMgmtCommand, NsMgmtCreate};
use nvme_proto::log::discovery::subtype;
use nvmf_host::{ConnectOptions, Controller, HostIdentity, Payload};
use storage_node::api::AttachRequest;
use storage_node::naming::NQN_PREFIX;

use crate::error::ControlError;
use crate::records::NodeRecord;

/// Block size of the namespaces created (FLBAS index 1 of the Ferrobay target).
pub const NS_BLOCK_BYTES: u32 = 4096;
const FLBAS_4K: u8 = 1;
/// NMIC bit 0: the namespace may be attached to several controllers (processor nodes).
const NMIC_SHARED: u8 = 1;

/// A namespace this module created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocatedNamespace {
    pub node: String,
    /// The node's NVMe/TCP addresses (the first is the one used here).
    pub addrs: Vec<SocketAddr>,
    pub subnqn: String,
    pub nsid: u32,
    pub size_bytes: u64,
}

impl AllocatedNamespace {
    /// `nvme+tcp://ADDR:PORT[,ADDR:PORT]/SUBNQN/NSID`.
    pub fn url(&self) -> String {
        let addrs: Vec<String> = self.addrs.iter().map(ToString::to_string).collect();
        format!(
            "nvme+tcp://{}/{}/{}",
            addrs.join(","),
            self.subnqn,
            self.nsid
        )
    }
}

fn admin_only() -> ConnectOptions {
    ConnectOptions {
        io_queues: 0,
        ..ConnectOptions::default()
    }
}

fn same(a: Status, b: Status) -> bool {
    (a.sct, a.sc) == (b.sct, b.sc)
}

fn status_err(node: &str, what: &str, s: Status) -> ControlError {
    ControlError::storage(
        node,
        format!(
            "{what} failed: {} (SCT {:#x} SC {:#x})",
            nvmf_host::status_text::status_text(s),
            s.sct,
            s.sc
        ),
    )
}

/// The drive subsystems a Ferrobay storage node exports
/// (`nqn.2026-01.io.ferrobay:<node>:<drive>`), from its discovery log.
pub async fn node_subsystems(
    node: &NodeRecord,
    host: &HostIdentity,
) -> Result<Vec<String>, ControlError> {
    let addr = first_addr(node)?;
    let entries = nvmf_host::discover(addr, host)
        .await
        .map_err(|e| ControlError::storage(&node.name, format!("discovery at {addr}: {e}")))?;
    let prefix = format!("{NQN_PREFIX}:{}:", node.name);
    let mut nqns: Vec<String> = entries
        .iter()
        .filter(|e| e.subtype == subtype::NVME && e.subnqn.starts_with(&prefix))
        .map(|e| e.subnqn.clone())
        .collect();
    nqns.sort();
    nqns.dedup();
    Ok(nqns)
}

fn first_addr(node: &NodeRecord) -> Result<SocketAddr, ControlError> {
    node.nvme_addrs
        .first()
        .copied()
        .ok_or_else(|| ControlError::storage(&node.name, "registered without an NVMe/TCP address"))
}

/// Creates a namespace of `size_bytes` on the first drive subsystem of `node` with room
/// for it, attaches it to this host's controller and then to every host.
pub async fn allocate(
    store: &dyn meta::MetaStore,
    node: &NodeRecord,
    size_bytes: u64,
    host: &HostIdentity,
) -> Result<AllocatedNamespace, ControlError> {
    let addr = first_addr(node)?;
    let subsystems = node_subsystems(node, host).await?;
    if subsystems.is_empty() {
        return Err(ControlError::storage(
            &node.name,
            format!(
                "exports no drive subsystem ({NQN_PREFIX}:{}:<drive>) at {addr}",
                node.name
            ),
        ));
    }
    let mut full = Vec::new();
    for subnqn in subsystems {
        let ctrl = Controller::connect(addr, &subnqn, host, &admin_only())
            .await
            .map_err(|e| ControlError::storage(&node.name, format!("connect {subnqn}: {e}")))?;
        let created = create_and_attach(&ctrl, &node.name, size_bytes).await;
        close(&ctrl).await;
        let nsid = match created {
            Ok(Some(nsid)) => nsid,
            Ok(None) => {
                full.push(subnqn);
                continue;
            }
            Err(e) => return Err(e),
        };
        let ns = AllocatedNamespace {
            node: node.name.clone(),
            addrs: node.nvme_addrs.clone(),
            subnqn,
            nsid,
            size_bytes,
        };
        if let Err(e) = share_with_every_host(store, node, &ns).await {
            release(node, &ns, host).await;
            return Err(e);
        }
        return Ok(ns);
    }
    Err(ControlError::storage(
        &node.name,
        format!(
            "no drive has {size_bytes} bytes free for a namespace (tried {})",
            full.join(", ")
        ),
    ))
}

/// Create (detached), then attach to this controller. `None`: the drive is full.
async fn create_and_attach(
    ctrl: &Controller,
    node: &str,
    size_bytes: u64,
) -> Result<Option<u32>, ControlError> {
    let blocks = size_bytes.div_ceil(u64::from(NS_BLOCK_BYTES));
    let data = NsMgmtCreate {
        nsze: blocks,
        ncap: blocks,
        flbas: FLBAS_4K,
        nmic: NMIC_SHARED,
        ..NsMgmtCreate::default()
    }
    .to_bytes();
    let cmd = NsMgmtCommand {
        nsid: 0,
        sel: NsMgmtCommand::SEL_CREATE,
        csi: 0,
    }
    .to_command(0);
    let done = ctrl
        .submit_admin(cmd, to_controller(&data[..]))
        .await
        .map_err(|e| ControlError::storage(node, format!("namespace management: {e}")))?;
    let st = done.cqe.status;
    if same(st, Status::NS_INSUFFICIENT_CAPACITY) {
        return Ok(None);
    }
    if same(st, Status::INVALID_OPCODE) {
        return Err(ControlError::storage(
            node,
            format!("{} does not support Namespace Management", ctrl.subnqn()),
        ));
    }
    if !st.is_success() {
        return Err(status_err(node, "namespace create", st));
    }
    let nsid = done.cqe.dw0;
    let list = CtrlList {
        ids: vec![ctrl.cntlid()],
    }
    .to_bytes();
    let cmd = NsAttachCommand {
        nsid,
        sel: NsAttachCommand::SEL_ATTACH,
    }
    .to_command(0);
    let attached = ctrl.submit_admin(cmd, to_controller(&list[..])).await;
    let err = match attached {
        Ok(d) if d.cqe.status.is_success() => return Ok(Some(nsid)),
        Ok(d) => status_err(node, "namespace attach", d.cqe.status),
        Err(e) => ControlError::storage(node, format!("namespace attach: {e}")),
    };
    if let Err(e) = delete_on(ctrl, nsid).await {
        tracing::warn!(node, nsid, "deleting a namespace that did not attach: {e}");
    }
    Err(err)
}

fn to_controller(bytes: &[u8]) -> Payload {
    Payload::ToController {
        buf: IoBuf::from_slice(bytes),
        offset: 0,
        len: bytes.len(),
    }
}

async fn close(ctrl: &Controller) {
    if let Err(e) = ctrl.shutdown().await {
        tracing::debug!(subnqn = ctrl.subnqn(), "controller shutdown: {e}");
    }
}

async fn delete_on(ctrl: &Controller, nsid: u32) -> Result<(), String> {
    let cmd = NsMgmtCommand {
        nsid,
        sel: NsMgmtCommand::SEL_DELETE,
        csi: 0,
    }
    .to_command(0);
    match ctrl.submit_admin(cmd, Payload::None).await {
        Ok(d) if d.cqe.status.is_success() => Ok(()),
        Ok(d) => Err(nvmf_host::status_text::status_text(d.cqe.status).to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Namespace Attachment over the fabric only reaches hosts that are connected now; the
/// processor nodes connect later, under their own host NQNs. A Ferrobay storage node
/// attaches a namespace to every host (present and future) through its HTTP API.
async fn share_with_every_host(
    store: &dyn meta::MetaStore,
    node: &NodeRecord,
    ns: &AllocatedNamespace,
) -> Result<(), ControlError> {
    crate::auth::node_client(store, node)
        .await?
        .attach_namespace(
            &ns.subnqn,
            ns.nsid,
            &AttachRequest {
                all: true,
                hosts: Vec::new(),
            },
        )
        .await
        .map_err(|e| ControlError::storage(&node.name, format!("attach to every host: {e}")))?;
    Ok(())
}

/// Deletes a namespace made here (Namespace Management delete). Errors are returned for
/// the caller to log: a leftover namespace costs space, not data.
pub async fn delete(
    node: &str,
    addr: SocketAddr,
    subnqn: &str,
    nsid: u32,
    host: &HostIdentity,
) -> Result<(), ControlError> {
    let ctrl = Controller::connect(addr, subnqn, host, &admin_only())
        .await
        .map_err(|e| ControlError::storage(node, format!("connect {subnqn}: {e}")))?;
    let r = delete_on(&ctrl, nsid).await;
    close(&ctrl).await;
    r.map_err(|e| ControlError::storage(node, format!("delete namespace {subnqn}/{nsid}: {e}")))
}

/// [`delete`], logging instead of failing (rollback paths).
pub async fn release(node: &NodeRecord, ns: &AllocatedNamespace, host: &HostIdentity) {
    let Some(addr) = ns.addrs.first().copied() else {
        return;
    };
    match delete(&node.name, addr, &ns.subnqn, ns.nsid, host).await {
        Ok(()) => {
            tracing::info!(node = %node.name, subnqn = %ns.subnqn, nsid = ns.nsid, "namespace released")
        }
        Err(e) => tracing::warn!("rollback: {e} (delete it with `ferrobay node ns delete`)"),
    }
}
