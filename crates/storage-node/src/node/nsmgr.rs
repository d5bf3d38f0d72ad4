//! NVMe Namespace Management / Attachment from hosts (`nvme create-ns`, `attach-ns`, ...):
//! the target decodes the commands, this carves and persists.

use std::sync::Weak;

use nvme_proto::Status;
use nvmf_target::{CreateKvNamespace, CreateNamespace, NamespaceManager, Target};

use crate::catalog::{CatalogError, NewNamespace};
use crate::extent::EXTENT_UNIT_BYTES;
use crate::state::{Attachment, NamespaceKind};

use super::kv::{DEFAULT_KV_MAX_VALUE_BYTES, resolve_params};

use super::{
    ErrorKind, NodeError, NodeInner, StorageNode, from_target_attachment, to_target_attachment,
};

/// Every namespace of a subsystem (Namespace Management delete).
const ALL_NSIDS: u32 = 0xFFFF_FFFF;

pub(crate) struct NsManager {
    node: Weak<NodeInner>,
}

impl NsManager {
    pub(crate) fn new(node: Weak<NodeInner>) -> NsManager {
        NsManager { node }
    }

    fn node(&self) -> Result<StorageNode, Status> {
        let inner = self.node.upgrade().ok_or(Status::INTERNAL_ERROR)?;
        let node = StorageNode { inner };
        node.check_running().map_err(|_| Status::INTERNAL_ERROR)?;
        Ok(node)
    }
}

/// The NVMe status a host gets for a failed namespace operation.
fn status_of(e: &NodeError) -> Status {
    match e {
        NodeError::Catalog(CatalogError::NoFreeNsid(_)) => Status::NS_ID_UNAVAILABLE.dnr(),
        NodeError::Catalog(CatalogError::NoSuchNamespace { .. }) => Status::INVALID_NAMESPACE.dnr(),
        NodeError::Catalog(CatalogError::BadBlockSize(_)) => Status::INVALID_FORMAT.dnr(),
        _ => match e.kind() {
            ErrorKind::InsufficientCapacity => Status::NS_INSUFFICIENT_CAPACITY.dnr(),
            ErrorKind::BadRequest => Status::INVALID_FIELD.dnr(),
            ErrorKind::NotFound => Status::INVALID_NAMESPACE.dnr(),
            ErrorKind::Conflict => Status::NS_ID_UNAVAILABLE.dnr(),
            ErrorKind::Internal => Status::INTERNAL_ERROR,
        },
    }
}

fn log_failure(op: &str, subnqn: &str, e: &NodeError) -> Status {
    let status = status_of(e);
    tracing::warn!(op, %subnqn, error = %e, ?status, "namespace management from host failed");
    status
}

impl NamespaceManager for NsManager {
    fn create(&self, _target: &Target, subnqn: &str, req: &CreateNamespace) -> Result<u32, Status> {
        let node = self.node()?;
        if req.csi != 0 || req.size_blocks == 0 || req.capacity_blocks > req.size_blocks {
            // Only the NVM command set, fully provisioned (NCAP ≤ NSZE, all allocated).
            return Err(Status::INVALID_FIELD.dnr());
        }
        let size_bytes = req
            .size_blocks
            .checked_mul(u64::from(req.block_size_bytes))
            .ok_or(Status::INVALID_FIELD.dnr())?;
        let new = NewNamespace {
            nqn: subnqn.to_string(),
            size_bytes,
            block_size_bytes: Some(req.block_size_bytes),
            nsid: None,
            // Created detached, as Namespace Management requires; hosts attach it.
            attachment: Attachment::Hosts(Vec::new()),
            kind: NamespaceKind::Nvm,
        };
        let mut c = node.catalog();
        node.create_locked(&mut c, &new)
            .map(|r| r.nsid)
            .map_err(|e| log_failure("create", subnqn, &e))
    }

    /// `nvme create-ns --csi 1`: a Key Value namespace of NSZE bytes (rounded up to
    /// whole MiB) with the node's default format (values up to 2 MiB), created detached.
    fn create_kv(
        &self,
        _target: &Target,
        subnqn: &str,
        req: &CreateKvNamespace,
    ) -> Result<u32, Status> {
        let node = self.node()?;
        let size_bytes = req.size_bytes.div_ceil(EXTENT_UNIT_BYTES) * EXTENT_UNIT_BYTES;
        let new = NewNamespace {
            nqn: subnqn.to_string(),
            size_bytes,
            block_size_bytes: None,
            nsid: None,
            attachment: Attachment::Hosts(Vec::new()),
            kind: NamespaceKind::Kv(resolve_params(size_bytes, DEFAULT_KV_MAX_VALUE_BYTES, None)),
        };
        let mut c = node.catalog();
        node.create_locked(&mut c, &new)
            .map(|r| r.nsid)
            .map_err(|e| log_failure("create KV", subnqn, &e))
    }

    fn delete(&self, _target: &Target, subnqn: &str, nsid: u32) -> Result<(), Status> {
        let node = self.node()?;
        let mut c = node.catalog();
        let nsids: Vec<u32> = if nsid == ALL_NSIDS {
            c.state()
                .namespaces
                .iter()
                .filter(|n| n.subsystem_nqn == subnqn)
                .map(|n| n.nsid)
                .collect()
        } else if c.state().namespace(subnqn, nsid).is_some() {
            vec![nsid]
        } else {
            return Err(Status::INVALID_NAMESPACE.dnr());
        };
        for n in nsids {
            node.delete_locked(&mut c, subnqn, n)
                .map_err(|e| log_failure("delete", subnqn, &e))?;
        }
        Ok(())
    }

    fn attach(
        &self,
        _target: &Target,
        subnqn: &str,
        nsid: u32,
        ctrls: &[u16],
    ) -> Result<(), Status> {
        self.change(subnqn, nsid, ctrls, true)
    }

    fn detach(
        &self,
        _target: &Target,
        subnqn: &str,
        nsid: u32,
        ctrls: &[u16],
    ) -> Result<(), Status> {
        self.change(subnqn, nsid, ctrls, false)
    }
}

impl NsManager {
    /// Lets the target resolve controllers to hosts and change the attachment, then
    /// persists it; puts the target back if persisting fails.
    fn change(&self, subnqn: &str, nsid: u32, ctrls: &[u16], attach: bool) -> Result<(), Status> {
        let node = self.node()?;
        let mut c = node.catalog();
        let before = c
            .state()
            .namespace(subnqn, nsid)
            .map(|n| n.attachment.clone())
            .ok_or(Status::INVALID_NAMESPACE.dnr())?;
        let target = node.target();
        let after = if attach {
            target.attach_namespace(subnqn, nsid, ctrls)?
        } else {
            target.detach_namespace(subnqn, nsid, ctrls)?
        };
        if let Err(e) = c.set_attachment(subnqn, nsid, from_target_attachment(&after)) {
            let _ = target.set_namespace_attachment(subnqn, nsid, to_target_attachment(&before));
            return Err(log_failure(
                if attach { "attach" } else { "detach" },
                subnqn,
                &e.into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::naming::parse_node_drive;
    use crate::node::NodeConfig;

    fn req(size_blocks: u64, block_size_bytes: u32) -> CreateNamespace {
        CreateNamespace {
            size_blocks,
            capacity_blocks: size_blocks,
            lba_format: u8::from(block_size_bytes == 4096),
            block_size_bytes,
            nmic: 0,
            anagrpid: 0,
            csi: 0,
        }
    }

    /// Namespace Management as a host drives it: create (detached), persist, delete all.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn host_side_create_attach_delete() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = NodeConfig::new("n1", dir.path());
        cfg.drives = vec![parse_node_drive("ram:32M").unwrap()];
        let node = StorageNode::start(cfg).await.unwrap();
        let nqn = "nqn.2026-01.io.ferrobay:n1:d0".to_string();
        let m = Arc::new(NsManager::new(Arc::downgrade(&node.inner)));
        let target = node.target().clone();

        type Op = Box<dyn FnOnce(&NsManager, &Target, &str) -> Result<u32, Status> + Send>;
        let (m2, t2, n2) = (m.clone(), target.clone(), nqn.clone());
        let run = move |f: Op| {
            let (m, t, n) = (m2.clone(), t2.clone(), n2.clone());
            tokio::task::spawn_blocking(move || f(&m, &t, &n))
        };
        // The drive is full: capacity error, nothing changes.
        let full = run(Box::new(|m, t, n| m.create(t, n, &req(2048, 512))))
            .await
            .unwrap();
        assert_eq!(full, Err(Status::NS_INSUFFICIENT_CAPACITY.dnr()));
        run(Box::new(|m, t, n| m.delete(t, n, 1).map(|()| 0)))
            .await
            .unwrap()
            .unwrap();
        let bad = run(Box::new(|m, t, n| m.delete(t, n, 1).map(|()| 0)))
            .await
            .unwrap();
        assert_eq!(bad, Err(Status::INVALID_NAMESPACE.dnr()));
        let nsid = run(Box::new(|m, t, n| m.create(t, n, &req(1024, 4096))))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(nsid, 1);
        let info = target.namespaces(&nqn).unwrap();
        assert_eq!(
            (info[0].size_bytes, info[0].block_size_bytes),
            (4 << 20, 4096)
        );
        assert!(
            !info[0].attachment.all && info[0].attachment.hosts.is_empty(),
            "created attached"
        );
        assert_eq!(
            node.state().namespace(&nqn, 1).unwrap().attachment,
            Attachment::Hosts(vec![])
        );
        let odd = run(Box::new(|m, t, n| m.create(t, n, &req(8, 1024))))
            .await
            .unwrap();
        assert_eq!(odd, Err(Status::INVALID_FORMAT.dnr()));
        let thin = run(Box::new(|m, t, n| {
            m.create(
                t,
                n,
                &CreateNamespace {
                    capacity_blocks: 9,
                    ..req(8, 512)
                },
            )
        }))
        .await
        .unwrap();
        assert_eq!(thin, Err(Status::INVALID_FIELD.dnr()));
        // No controller 77 is connected.
        let attach = run(Box::new(|m, t, n| m.attach(t, n, 1, &[77]).map(|()| 0)))
            .await
            .unwrap();
        assert_eq!(attach, Err(Status::CONTROLLER_LIST_INVALID.dnr()));
        run(Box::new(|m, t, n| m.create(t, n, &req(2048, 512))))
            .await
            .unwrap()
            .unwrap();
        run(Box::new(|m, t, n| m.delete(t, n, ALL_NSIDS).map(|()| 0)))
            .await
            .unwrap()
            .unwrap();
        assert!(target.namespaces(&nqn).unwrap().is_empty());
        assert!(node.state().namespaces.is_empty());
        node.shutdown().await.unwrap();
    }
}
