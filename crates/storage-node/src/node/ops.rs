//! Operations behind `ferrobay node ns ...` and `ferrobay node host ...`.
//!
//! Each change is persisted first, then applied to the target; if the target refuses, the
//! persisted change is undone. The catalog lock is held across both, so changes from the
//! CLI and from hosts (Namespace Management) never interleave. The `*_blocking` variants do
//! file and device I/O and must run on a blocking thread of a tokio runtime.

use std::sync::Arc;

use blockdev::BlockDevice;

use crate::api::{
    AttachRequest, AttachmentView, CreateNamespaceRequest, KvNamespaceView, NamespaceView,
    NodeInfo, SubsystemView,
};
use crate::catalog::{Catalog, NewNamespace};
use crate::extent::EXTENT_UNIT_BYTES;
use crate::naming;
use crate::state::{
    Attachment, KvParams, NamespaceKind, NamespaceRecord, NodeState, SubsystemRecord, hex_encode,
};

use super::kv::{self, KvEntry};
use super::{NodeError, StorageNode, kv_namespace_config, namespace_config, to_target_attachment};

pub(crate) fn attachment_view(a: &Attachment) -> AttachmentView {
    match a {
        Attachment::All => AttachmentView {
            all: true,
            hosts: Vec::new(),
        },
        Attachment::Hosts(h) => AttachmentView {
            all: false,
            hosts: h.clone(),
        },
    }
}

fn drive_name(state: &NodeState, uuid: uuid::Uuid) -> String {
    state
        .drive(uuid)
        .map(|d| d.name.clone())
        .unwrap_or_default()
}

/// The API view of a namespace; a KV namespace's usage from its store in `kv`.
pub(crate) fn namespace_view(
    state: &NodeState,
    n: &NamespaceRecord,
    kv: &kv::KvNamespaces,
) -> NamespaceView {
    let kv_view = match &n.kind {
        NamespaceKind::Nvm => None,
        NamespaceKind::Kv(p) => {
            let entry = kv.get(&(n.subsystem_nqn.clone(), n.nsid));
            let mut v = KvNamespaceView {
                max_value_bytes: p.max_value_bytes,
                max_keys: p.max_keys,
                segment_bytes: p.segment_bytes,
                status: "ok".to_string(),
                ..KvNamespaceView::default()
            };
            match entry.and_then(|e| e.engine.as_ref().map(|k| (e, k))) {
                Some((e, engine)) => {
                    let u = engine.usage();
                    v.key_count = u.key_count;
                    v.used_bytes = u.live_bytes;
                    v.capacity_bytes = u.capacity_bytes;
                    v.garbage_bytes = u.garbage_bytes;
                    if let Some(why) = engine.failure().or_else(|| e.failure.clone()) {
                        v.status = why;
                    }
                }
                None => {
                    v.status = entry
                        .and_then(|e| e.failure.clone())
                        .unwrap_or_else(|| "not open".to_string());
                }
            }
            Some(v)
        }
    };
    NamespaceView {
        kind: if n.kind.is_kv() { "kv" } else { "nvm" }.to_string(),
        kv: kv_view,
        subsystem_nqn: n.subsystem_nqn.clone(),
        nsid: n.nsid,
        drive: drive_name(state, n.drive_uuid),
        size_bytes: n.size_bytes,
        block_size_bytes: n.block_size_bytes,
        extents: n.extents.clone(),
        nguid: hex_encode(&n.nguid),
        eui64: hex_encode(&n.eui64),
        uuid: n.uuid.to_string(),
        attachment: attachment_view(&n.attachment),
        created_unix_ms: n.created_unix_ms,
    }
}

/// Runs blocking work (state fsyncs, device zeroing) off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, NodeError> + Send + 'static,
) -> Result<T, NodeError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| NodeError::Internal(format!("operation panicked or was cancelled: {e}")))?
}

/// Zeroes a new namespace's extents so it never shows a deleted namespace's data. Must run
/// on a blocking thread inside the runtime.
pub(crate) fn zero_extents(
    drive: &Arc<dyn BlockDevice>,
    ns: &NamespaceRecord,
) -> Result<(), NodeError> {
    let handle = tokio::runtime::Handle::try_current()
        .map_err(|_| NodeError::Internal("zeroing needs a tokio runtime".into()))?;
    for e in &ns.extents {
        handle
            .block_on(drive.write_zeroes(e.offset_bytes, e.len_bytes))
            .map_err(|err| {
                NodeError::Internal(format!(
                    "zeroing {}+{} on {}: {err}",
                    e.offset_bytes,
                    e.len_bytes,
                    drive.info().name
                ))
            })?;
    }
    Ok(())
}

fn check_hosts(hosts: &[String]) -> Result<(), NodeError> {
    for h in hosts {
        naming::validate_nqn(h)?;
    }
    Ok(())
}

impl StorageNode {
    /// Name, identity, listeners.
    pub fn info(&self) -> NodeInfo {
        NodeInfo {
            name: self.inner.name.clone(),
            uuid: self.inner.node_uuid.to_string(),
            nvme_listeners: self.nvme_addrs().iter().map(|a| a.to_string()).collect(),
            discovery_listener: self.discovery_addr().map(|a| a.to_string()),
            http_listener: self.http_addr().map(|a| a.to_string()),
            state_generation: self.catalog().generation(),
        }
    }

    /// A copy of the persistent state as it is now.
    pub fn state(&self) -> NodeState {
        self.catalog().state().clone()
    }

    pub fn list_namespaces(&self) -> Vec<NamespaceView> {
        let c = self.catalog();
        let s = c.state();
        let kv = self.kv_namespaces();
        let mut v: Vec<NamespaceView> = s
            .namespaces
            .iter()
            .map(|n| namespace_view(s, n, &kv))
            .collect();
        v.sort_by(|a, b| (&a.subsystem_nqn, a.nsid).cmp(&(&b.subsystem_nqn, b.nsid)));
        v
    }

    pub fn namespace(&self, nqn: &str, nsid: u32) -> Result<NamespaceView, NodeError> {
        let c = self.catalog();
        let s = c.state();
        s.namespace(nqn, nsid)
            .map(|n| namespace_view(s, n, &self.kv_namespaces()))
            .ok_or_else(|| NodeError::NotFound(format!("no namespace {nsid} in {nqn}")))
    }

    pub fn subsystems(&self) -> Vec<SubsystemView> {
        let c = self.catalog();
        c.state()
            .subsystems
            .iter()
            .map(|s| self.subsystem_view(c.state(), s))
            .collect()
    }

    fn subsystem_view(&self, state: &NodeState, s: &SubsystemRecord) -> SubsystemView {
        let mut namespaces: Vec<u32> = state
            .namespaces
            .iter()
            .filter(|n| n.subsystem_nqn == s.nqn)
            .map(|n| n.nsid)
            .collect();
        namespaces.sort_unstable();
        SubsystemView {
            nqn: s.nqn.clone(),
            serial: s.serial.clone(),
            model: s.model.clone(),
            drive: drive_name(state, s.drive_uuid),
            allow_any_host: s.allow_any_host,
            allowed_hosts: s.allowed_hosts.clone(),
            dhchap_hosts: s.dhchap.iter().map(|d| d.host_nqn.clone()).collect(),
            namespaces,
            controllers: self.inner.target.controllers(&s.nqn),
        }
    }

    /// Carves a new namespace (zeroed) out of a subsystem's drive and exports it.
    pub async fn create_namespace(
        &self,
        req: CreateNamespaceRequest,
    ) -> Result<NamespaceView, NodeError> {
        let node = self.clone();
        blocking(move || {
            node.check_running()?;
            let mut c = node.catalog();
            let nqn = match (&req.subsystem_nqn, &req.drive) {
                (Some(nqn), None) => nqn.clone(),
                (None, Some(drive)) => {
                    let s = c.state();
                    let d = s
                        .drive_by_name(drive)
                        .ok_or_else(|| NodeError::NotFound(format!("no drive {drive}")))?;
                    s.subsystems
                        .iter()
                        .find(|sub| sub.drive_uuid == d.uuid)
                        .map(|sub| sub.nqn.clone())
                        .ok_or_else(|| {
                            NodeError::NotFound(format!("no subsystem on drive {drive}"))
                        })?
                }
                _ => {
                    return Err(NodeError::BadRequest(
                        "give either a subsystem NQN or a drive name".into(),
                    ));
                }
            };
            let attachment = match &req.attach {
                None => Attachment::All,
                Some(v) if v.all => Attachment::All,
                Some(v) => {
                    check_hosts(&v.hosts)?;
                    Attachment::Hosts(v.hosts.clone())
                }
            };
            let kind = match &req.kv {
                None => NamespaceKind::Nvm,
                Some(o) => {
                    if req.block_size_bytes.is_some() {
                        return Err(NodeError::BadRequest(
                            "a KV namespace has no block size".into(),
                        ));
                    }
                    let max_value = o.max_value_bytes.unwrap_or(kv::DEFAULT_KV_MAX_VALUE_BYTES);
                    node.check_kv_max_value(max_value)?;
                    if o.max_keys == Some(0) {
                        return Err(NodeError::BadRequest(
                            "a KV namespace needs max keys of at least 1".into(),
                        ));
                    }
                    let size = req.size_bytes.div_ceil(EXTENT_UNIT_BYTES) * EXTENT_UNIT_BYTES;
                    NamespaceKind::Kv(kv::resolve_params(size, max_value, o.max_keys))
                }
            };
            let new = NewNamespace {
                nqn,
                size_bytes: req.size_bytes,
                block_size_bytes: req.block_size_bytes,
                nsid: req.nsid,
                attachment,
                kind,
            };
            let record = node.create_locked(&mut c, &new)?;
            Ok(namespace_view(c.state(), &record, &node.kv_namespaces()))
        })
        .await
    }

    /// Persists, zeroes (NVM) or formats (KV) and exports a new namespace; undoes the
    /// persisted part on failure.
    pub(crate) fn create_locked(
        &self,
        c: &mut Catalog,
        new: &NewNamespace,
    ) -> Result<NamespaceRecord, NodeError> {
        let record = c.create_namespace(new)?;
        let applied = self
            .drive_device(record.drive_uuid)
            .and_then(|drive| match &record.kind {
                NamespaceKind::Nvm => {
                    zero_extents(drive, &record)?;
                    self.inner.target.add_namespace(
                        &record.subsystem_nqn,
                        namespace_config(
                            drive,
                            &record,
                            &self.inner.catalog,
                            &self.inner.telemetry,
                        )?,
                    )?;
                    self.apply_new_attachment(&record)
                }
                NamespaceKind::Kv(params) => self.bring_up_new_kv(drive, &record, params),
            });
        if let Err(e) = applied {
            if let Err(undo) = c.delete_namespace(&record.subsystem_nqn, record.nsid) {
                tracing::error!(error = %undo, "cannot undo namespace creation in the node state");
            }
            return Err(e);
        }
        tracing::info!(nqn = %record.subsystem_nqn, nsid = record.nsid, size_bytes = record.size_bytes, kind = ?record.kind, "namespace created");
        Ok(record)
    }

    /// A new namespace created for some hosts only: the target follows the record.
    fn apply_new_attachment(&self, record: &NamespaceRecord) -> Result<(), NodeError> {
        let target = &self.inner.target;
        if let Attachment::Hosts(h) = &record.attachment
            && !h.is_empty()
        {
            let a = to_target_attachment(&record.attachment);
            if let Err(e) = target.set_namespace_attachment(&record.subsystem_nqn, record.nsid, a) {
                let _ = target.remove_namespace(&record.subsystem_nqn, record.nsid);
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// Formats and opens the store of a new KV namespace and exports it; closes the
    /// store again if exporting fails. Blocking: runs on a blocking thread.
    fn bring_up_new_kv(
        &self,
        drive: &Arc<dyn BlockDevice>,
        record: &NamespaceRecord,
        params: &KvParams,
    ) -> Result<(), NodeError> {
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|_| NodeError::Internal("formatting needs a tokio runtime".into()))?;
        let dev = kv::kv_device(drive, record)?;
        let (engine, formatted) =
            handle.block_on(kv::format_and_open(dev, &kv::options_of(params)))?;
        if formatted != *params {
            tracing::warn!(nqn = %record.subsystem_nqn, nsid = record.nsid, ?params, ?formatted, "KV store formatted with other parameters than recorded");
        }
        let entry = KvEntry::serving(engine);
        let (nqn, nsid) = (record.subsystem_nqn.clone(), record.nsid);
        let exported = kv_namespace_config(&drive.info().name, record, &entry, &self.inner.catalog)
            .and_then(|cfg| Ok(self.inner.target.add_kv_namespace(&nqn, cfg)?))
            .and_then(|_| self.apply_new_attachment(record));
        match exported {
            Ok(()) => {
                self.kv_namespaces().insert((nqn, nsid), entry);
                Ok(())
            }
            Err(e) => {
                let _ = handle.block_on(kv::close(&nqn, nsid, &entry));
                Err(e)
            }
        }
    }

    /// A KV namespace's largest value must fit one NVMe/TCP transfer (the target's MDTS)
    /// and the engine's limit.
    pub(crate) fn check_kv_max_value(&self, max_value_bytes: u32) -> Result<(), NodeError> {
        let mdts = self.inner.target.config().mdts_bytes;
        let limit = mdts.min(::kv::MAX_VALUE_BYTES_LIMIT);
        if max_value_bytes == 0 || max_value_bytes > limit {
            return Err(NodeError::BadRequest(format!(
                "largest KV value of {max_value_bytes} bytes: must be 1 to {limit} bytes (the node's NVMe/TCP transfer limit, MDTS)"
            )));
        }
        Ok(())
    }

    /// Removes a namespace from the target and the state; its extents become free.
    pub async fn delete_namespace(&self, nqn: &str, nsid: u32) -> Result<(), NodeError> {
        let (node, nqn) = (self.clone(), nqn.to_string());
        blocking(move || {
            node.check_running()?;
            let mut c = node.catalog();
            node.delete_locked(&mut c, &nqn, nsid)
        })
        .await
    }

    pub(crate) fn delete_locked(
        &self,
        c: &mut Catalog,
        nqn: &str,
        nsid: u32,
    ) -> Result<(), NodeError> {
        if c.state().namespace(nqn, nsid).is_none() {
            return Err(NodeError::NotFound(format!("no namespace {nsid} in {nqn}")));
        }
        match self.inner.target.remove_namespace(nqn, nsid) {
            Ok(()) | Err(nvmf_target::TargetError::NoSuchNamespace { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        // No host reaches it any more: stop its store before its extents become free.
        let entry = self.kv_namespaces().remove(&(nqn.to_string(), nsid));
        if let Some(entry) = entry {
            let handle = tokio::runtime::Handle::try_current()
                .map_err(|_| NodeError::Internal("closing needs a tokio runtime".into()))?;
            // A store that cannot close cleanly is being deleted anyway.
            let _ = handle.block_on(kv::close(nqn, nsid, &entry));
        }
        c.delete_namespace(nqn, nsid)?;
        self.inner.telemetry.forget_namespace(nqn, nsid);
        tracing::info!(%nqn, nsid, "namespace deleted");
        Ok(())
    }

    /// Makes a namespace visible to more hosts (`all`, or the listed host NQNs).
    pub async fn attach_namespace(
        &self,
        nqn: &str,
        nsid: u32,
        req: AttachRequest,
    ) -> Result<NamespaceView, NodeError> {
        self.change_attachment(nqn, nsid, req, true).await
    }

    /// Hides a namespace from hosts (`all`, or the listed host NQNs).
    pub async fn detach_namespace(
        &self,
        nqn: &str,
        nsid: u32,
        req: AttachRequest,
    ) -> Result<NamespaceView, NodeError> {
        self.change_attachment(nqn, nsid, req, false).await
    }

    async fn change_attachment(
        &self,
        nqn: &str,
        nsid: u32,
        req: AttachRequest,
        attach: bool,
    ) -> Result<NamespaceView, NodeError> {
        let (node, nqn) = (self.clone(), nqn.to_string());
        blocking(move || {
            node.check_running()?;
            check_hosts(&req.hosts)?;
            if !req.all && req.hosts.is_empty() {
                return Err(NodeError::BadRequest("give hosts or all".into()));
            }
            let mut c = node.catalog();
            let current = c
                .state()
                .namespace(&nqn, nsid)
                .ok_or_else(|| NodeError::NotFound(format!("no namespace {nsid} in {nqn}")))?
                .attachment
                .clone();
            let next = next_attachment(&current, &req, attach)?;
            node.apply_attachment(&mut c, &nqn, nsid, &current, next)?;
            let s = c.state();
            s.namespace(&nqn, nsid)
                .map(|n| namespace_view(s, n, &node.kv_namespaces()))
                .ok_or_else(|| NodeError::NotFound(format!("no namespace {nsid} in {nqn}")))
        })
        .await
    }

    /// Persists an attachment and applies it to the target (undone if the target refuses).
    pub(crate) fn apply_attachment(
        &self,
        c: &mut Catalog,
        nqn: &str,
        nsid: u32,
        current: &Attachment,
        next: Attachment,
    ) -> Result<(), NodeError> {
        c.set_attachment(nqn, nsid, next.clone())?;
        if let Err(e) =
            self.inner
                .target
                .set_namespace_attachment(nqn, nsid, to_target_attachment(&next))
        {
            let _ = c.set_attachment(nqn, nsid, current.clone());
            return Err(e.into());
        }
        Ok(())
    }

    /// Adds a host to a subsystem's allow list (the subsystem stops allowing any host).
    pub async fn allow_host(&self, nqn: &str, host: &str) -> Result<SubsystemView, NodeError> {
        let host = host.to_string();
        self.change_access(nqn, move |c, nqn| c.allow_host(nqn, &host))
            .await
    }

    /// Allows a host and requires it to authenticate with DH-HMAC-CHAP (replacing the
    /// secrets it had); its live controllers are disconnected so that it authenticates.
    pub async fn allow_host_dhchap(
        &self,
        nqn: &str,
        rec: crate::state::DhchapHostRecord,
    ) -> Result<SubsystemView, NodeError> {
        self.change_access(nqn, move |c, nqn| c.allow_host_dhchap(nqn, rec))
            .await
    }

    /// Allows a host and requires it to connect over TLS with `rec`'s PSK (replacing the one
    /// it had); its live controllers are disconnected so that it reconnects over TLS.
    pub async fn allow_host_tls(
        &self,
        nqn: &str,
        rec: crate::state::TlsPskHostRecord,
    ) -> Result<SubsystemView, NodeError> {
        self.change_access(nqn, move |c, nqn| c.allow_host_tls(nqn, rec))
            .await
    }

    /// Removes a host from a subsystem's allow list; its controllers are disconnected.
    pub async fn deny_host(&self, nqn: &str, host: &str) -> Result<SubsystemView, NodeError> {
        let host = host.to_string();
        self.change_access(nqn, move |c, nqn| c.deny_host(nqn, &host))
            .await
    }

    /// Lets any host connect (true) or only the allow list (false).
    pub async fn set_allow_any_host(
        &self,
        nqn: &str,
        allow: bool,
    ) -> Result<SubsystemView, NodeError> {
        self.change_access(nqn, move |c, nqn| c.set_allow_any_host(nqn, allow))
            .await
    }

    async fn change_access(
        &self,
        nqn: &str,
        f: impl FnOnce(&mut Catalog, &str) -> Result<SubsystemRecord, crate::catalog::CatalogError>
        + Send
        + 'static,
    ) -> Result<SubsystemView, NodeError> {
        let (node, nqn) = (self.clone(), nqn.to_string());
        blocking(move || {
            node.check_running()?;
            let mut c = node.catalog();
            let before = c
                .state()
                .subsystem(&nqn)
                .cloned()
                .ok_or_else(|| NodeError::NotFound(format!("no subsystem {nqn}")))?;
            let after = f(&mut c, &nqn)?;
            let target = &node.inner.target;
            if let Err(e) =
                target.set_allowed_hosts(&nqn, after.allow_any_host, &after.allowed_hosts)
            {
                let _ = c.restore_subsystem(before.clone());
                let _ =
                    target.set_allowed_hosts(&nqn, before.allow_any_host, &before.allowed_hosts);
                return Err(e.into());
            }
            // DH-HMAC-CHAP: apply what changed (a changed host is disconnected).
            for d in &after.dhchap {
                if before.dhchap.contains(d) {
                    continue;
                }
                let applied = d
                    .to_target_config()
                    .map_err(NodeError::BadRequest)
                    .and_then(|cfg| Ok(target.set_host_dhchap(&nqn, &d.host_nqn, Some(cfg))?));
                if let Err(e) = applied {
                    let _ = c.restore_subsystem(before.clone());
                    return Err(e);
                }
                tracing::info!(subsys = %nqn, host = %d.host_nqn, "host must authenticate with DH-HMAC-CHAP");
            }
            for d in &before.dhchap {
                if !after.dhchap.iter().any(|a| a.host_nqn == d.host_nqn) {
                    let _ = target.set_host_dhchap(&nqn, &d.host_nqn, None);
                }
            }
            // TLS PSKs: the same (never logged; only that the host must use TLS).
            for d in &after.tls_psks {
                if before.tls_psks.contains(d) {
                    continue;
                }
                let applied = d
                    .configured_psk()
                    .map_err(NodeError::BadRequest)
                    .and_then(|psk| Ok(target.set_host_tls_psk(&nqn, &d.host_nqn, Some(psk))?));
                if let Err(e) = applied {
                    let _ = c.restore_subsystem(before.clone());
                    return Err(e);
                }
                tracing::info!(subsys = %nqn, host = %d.host_nqn, "host must connect over TLS");
            }
            for d in &before.tls_psks {
                if !after.tls_psks.iter().any(|a| a.host_nqn == d.host_nqn) {
                    let _ = target.set_host_tls_psk(&nqn, &d.host_nqn, None);
                }
            }
            Ok(node.subsystem_view(c.state(), &after))
        })
        .await
    }
}

/// The attachment after attaching (or detaching) `req`, or why that is not possible.
fn next_attachment(
    current: &Attachment,
    req: &AttachRequest,
    attach: bool,
) -> Result<Attachment, NodeError> {
    let conflict = |m: String| Err(NodeError::Conflict(m));
    match (current, attach, req.all) {
        (Attachment::All, true, _) => conflict("namespace is already attached to every host".into()),
        (Attachment::Hosts(_), true, true) => Ok(Attachment::All),
        (Attachment::Hosts(h), true, false) => {
            if let Some(dup) = req.hosts.iter().find(|x| h.contains(x)) {
                return conflict(format!("namespace is already attached to {dup}"));
            }
            Ok(Attachment::Hosts(h.iter().chain(&req.hosts).cloned().collect()))
        }
        (Attachment::Hosts(h), false, true) if h.is_empty() => {
            conflict("namespace is not attached to any host".into())
        }
        (_, false, true) => Ok(Attachment::Hosts(Vec::new())),
        (Attachment::All, false, false) => Err(NodeError::BadRequest(
            "namespace is attached to every host: detach all, then attach the hosts that should keep it".into(),
        )),
        (Attachment::Hosts(h), false, false) => {
            if let Some(missing) = req.hosts.iter().find(|x| !h.contains(x)) {
                return conflict(format!("namespace is not attached to {missing}"));
            }
            Ok(Attachment::Hosts(h.iter().filter(|x| !req.hosts.contains(x)).cloned().collect()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(h: &[&str]) -> Attachment {
        Attachment::Hosts(h.iter().map(|s| s.to_string()).collect())
    }

    fn req(all: bool, h: &[&str]) -> AttachRequest {
        AttachRequest {
            all,
            hosts: h.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn attachment_transitions() {
        assert_eq!(
            next_attachment(&hosts(&[]), &req(true, &[]), true).unwrap(),
            Attachment::All
        );
        assert_eq!(
            next_attachment(&hosts(&["a"]), &req(false, &["b"]), true).unwrap(),
            hosts(&["a", "b"])
        );
        assert!(matches!(
            next_attachment(&hosts(&["a"]), &req(false, &["a"]), true),
            Err(NodeError::Conflict(_))
        ));
        assert!(matches!(
            next_attachment(&Attachment::All, &req(true, &[]), true),
            Err(NodeError::Conflict(_))
        ));
        assert_eq!(
            next_attachment(&Attachment::All, &req(true, &[]), false).unwrap(),
            hosts(&[])
        );
        assert!(matches!(
            next_attachment(&Attachment::All, &req(false, &["a"]), false),
            Err(NodeError::BadRequest(_))
        ));
        assert_eq!(
            next_attachment(&hosts(&["a", "b"]), &req(false, &["a"]), false).unwrap(),
            hosts(&["b"])
        );
        assert!(matches!(
            next_attachment(&hosts(&["b"]), &req(false, &["a"]), false),
            Err(NodeError::Conflict(_))
        ));
        assert!(matches!(
            next_attachment(&hosts(&[]), &req(true, &[]), false),
            Err(NodeError::Conflict(_))
        ));
    }
}
