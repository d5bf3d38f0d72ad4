//! Volumes of the cluster: create (members allocated on storage nodes over the fabric, or
//! given as NVMe/TCP URLs), delete, list, view, move. The record is written last, in one
//! transaction with the volume's ANA group, so a failed create leaves nothing behind.

mod nsmgmt;
pub mod objpool;
pub mod replace;
pub mod sizing;

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use blockdev::BlockDevice;
use meta::schema::{
    OwnerRecord, VOLUMES, current_owner, encode_json, get_json, list_json, volume_key,
};
use meta::{Expect, MetaStore, Txn, TxnOutcome};
use nvmf_host::{ConnectOptions, HostIdentity, NvmeTcpUrl, RemoteNamespace};
use serde::{Deserialize, Serialize};
use volume::{LevelSpec, LogConfig, Volume, VolumeConfig};

use crate::error::ControlError;
use crate::events::now_unix_ms;
use crate::records::{
    ANA_GROUPS, HandoffRecord, LogLayout, MemberRecord, NodeRecord, NodeRole, VolumeRecord,
    VolumeStatusRecord, ana_group_key, handoff_key, volume_nqn, volume_status_key,
};
use crate::registration::get_node;

pub use nsmgmt::{
    AllocatedNamespace, NS_BLOCK_BYTES, NamespaceKind, delete as delete_namespace, node_subsystems,
};

/// Rounds of "pick a free ANA group, commit" before giving up (another create took it).
const ANA_ATTEMPTS: usize = 16;
/// Longest NQN (NVMe Base: 223 bytes).
const MAX_NQN_BYTES: usize = 223;

/// `POST /api/v1/volumes` and `ferrobay volume create`. Exactly one of `storage_nodes`
/// (one new namespace on each) and `members` (existing namespaces) is given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateVolume {
    pub name: String,
    /// `raid5`, `raid6`, `raid10`, `4+2`, ... ([`volume::LevelSpec`]).
    pub level: String,
    /// Usable size at least (the volume exports exactly this, rounded up to its block).
    pub size_bytes: u64,
    /// Default 64 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stripe_unit_bytes: Option<u64>,
    /// Storage node names, one member each, in member order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub storage_nodes: Vec<String>,
    /// `nvme+tcp://ADDR:PORT[,ADDR:PORT]/SUBNQN/NSID` URLs, in member order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_owner: Option<String>,
    /// `in-place` (default) or `log`: the log-structured layout, which writes only full
    /// stripes and compresses each logical block (raid5, raid6 and K+M).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    /// With layout `log`: `off` (default), `lz4`, `zstd` or `zstd:LEVEL` (1..=22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compress: Option<String>,
    /// With layout `log`: the logical block, the unit of compression and of the map (a
    /// power of two, 4096..=65536; default 4096).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_block_bytes: Option<u32>,
}

/// The log layout a request asks for: `None` for data in place. Every combination that
/// cannot work is refused with the reason (also before a request is sent: the CLI).
pub fn requested_log(req: &CreateVolume) -> Result<Option<LogConfig>, ControlError> {
    let level: LevelSpec = req
        .level
        .parse()
        .map_err(|e| ControlError::Invalid(format!("level {:?}: {e}", req.level)))?;
    log_config(req, level)
}

fn log_config(req: &CreateVolume, level: LevelSpec) -> Result<Option<LogConfig>, ControlError> {
    let invalid = |m: String| Err(ControlError::Invalid(m));
    match req.layout.as_deref().unwrap_or("in-place") {
        "in-place" | "inplace" => {
            if req.compress.as_deref().is_some_and(|c| c != "off") {
                return invalid(
                    "compression needs the log layout (layout log / --layout log): in-place \
                     volumes are not compressed"
                        .into(),
                );
            }
            if req.log_block_bytes.is_some() {
                return invalid(
                    "a log block size needs the log layout (layout log / --layout log)".into(),
                );
            }
            Ok(None)
        }
        "log" => {
            if matches!(
                level,
                LevelSpec::Raid0 | LevelSpec::Raid1 | LevelSpec::Raid10 { .. }
            ) {
                return invalid(format!(
                    "the log layout needs a parity level (raid5, raid6 or K+M), not {level}: \
                     it writes whole stripes of data and parity"
                ));
            }
            let compression: volume::Compression = req
                .compress
                .as_deref()
                .unwrap_or("off")
                .parse()
                .map_err(|e: String| ControlError::Invalid(format!("compression: {e}")))?;
            let mut c = LogConfig::new(compression);
            if let Some(b) = req.log_block_bytes {
                if !volume::LogParams::block_bytes_valid(b) {
                    return invalid(format!(
                        "log block of {b} bytes: a power of two from 4 KiB to 64 KiB"
                    ));
                }
                c.block_bytes = b;
            }
            Ok(Some(c))
        }
        other => invalid(format!("layout {other:?}: in-place or log")),
    }
}

/// Where the members of a new volume come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// A new namespace on each of these storage nodes (one failure domain each).
    StorageNodes(Vec<String>),
    /// Existing namespaces on any NVMe/TCP targets.
    Members(Vec<String>),
}

impl CreateVolume {
    /// The request's placement; an error unless exactly one kind is given.
    pub fn placement(&self) -> Result<Placement, ControlError> {
        match (self.storage_nodes.is_empty(), self.members.is_empty()) {
            (false, true) => Ok(Placement::StorageNodes(self.storage_nodes.clone())),
            (true, false) => Ok(Placement::Members(self.members.clone())),
            (true, true) => Err(ControlError::Invalid(
                "give the storage nodes (storage_nodes / --storage-nodes) or the member URLs \
                 (members / --members)"
                    .into(),
            )),
            (false, false) => Err(ControlError::Invalid(
                "give either storage nodes or member URLs, not both".into(),
            )),
        }
    }

    pub fn set_placement(&mut self, p: Placement) {
        match p {
            Placement::StorageNodes(n) => {
                self.storage_nodes = n;
                self.members.clear();
            }
            Placement::Members(m) => {
                self.members = m;
                self.storage_nodes.clear();
            }
        }
    }
}

/// A volume as `ferrobay volume status` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VolumeView {
    pub record: VolumeRecord,
    /// The processor node that owns it now, if any.
    pub owner: Option<OwnerRecord>,
    /// What the owner last published.
    pub status: Option<VolumeStatusRecord>,
}

/// The checked request: what the create path works from.
struct Plan {
    level: LevelSpec,
    stripe_unit_bytes: u64,
    placement: Placement,
    log: Option<LogConfig>,
}

fn check_request(req: &CreateVolume) -> Result<Plan, ControlError> {
    meta::schema::validate_name(&req.name)?;
    if req.name.len() > volume::format::NAME_MAX_BYTES {
        return Err(ControlError::Invalid(format!(
            "volume name {:?} is longer than {} bytes",
            req.name,
            volume::format::NAME_MAX_BYTES
        )));
    }
    if volume_nqn(&req.name).len() > MAX_NQN_BYTES {
        return Err(ControlError::Invalid(format!(
            "volume name {:?} makes an NQN longer than {MAX_NQN_BYTES} bytes",
            req.name
        )));
    }
    let level: LevelSpec = req.level.parse().map_err(|e| {
        ControlError::Invalid(format!(
            "level {:?}: {e} (expected raid0, raid1, raid10, raid5, raid6 or K+M)",
            req.level
        ))
    })?;
    if req.size_bytes == 0 {
        return Err(ControlError::Invalid("volume size must be above 0".into()));
    }
    if let Some(p) = &req.preferred_owner {
        meta::schema::validate_name(p)?;
    }
    let stripe_unit_bytes = req
        .stripe_unit_bytes
        .unwrap_or(volume::layout::DEFAULT_STRIPE_UNIT_BYTES);
    let log = log_config(req, level)?;
    let placement = req.placement()?;
    let names = match &placement {
        Placement::StorageNodes(n) => n,
        Placement::Members(m) => m,
    };
    let mut seen = HashSet::new();
    for n in names {
        if !seen.insert(n.as_str()) {
            return Err(ControlError::Invalid(format!(
                "{n} is listed twice: each member needs its own {}",
                match placement {
                    Placement::StorageNodes(_) => "storage node (failure domain)",
                    Placement::Members(_) => "namespace",
                }
            )));
        }
    }
    let params = level.params(names.len(), stripe_unit_bytes).map_err(|e| {
        ControlError::Invalid(format!("{} with {} member(s): {e}", req.level, names.len()))
    })?;
    // A size no member could hold is refused before any storage node is asked.
    sizing::member_bytes_for(&params, req.size_bytes, log.as_ref())?;
    Ok(Plan {
        level,
        stripe_unit_bytes,
        placement,
        log,
    })
}

async fn volume_exists(store: &dyn MetaStore, name: &str) -> Result<bool, ControlError> {
    Ok(store.get(&volume_key(name)?).await?.is_some())
}

fn name_taken(name: &str) -> ControlError {
    ControlError::Conflict(format!("a volume named {name:?} exists already"))
}

/// Creates a volume: allocates or opens the members, formats them, writes the record
/// with a new ANA group. On failure the namespaces it allocated are deleted again.
/// `host` is the identity used towards the members (any host NQN: the namespaces made
/// here are attached to every host).
pub async fn create_volume(
    store: &dyn MetaStore,
    req: &CreateVolume,
    host: &HostIdentity,
) -> Result<VolumeRecord, ControlError> {
    let plan = check_request(req)?;
    if volume_exists(store, &req.name).await? {
        return Err(name_taken(&req.name));
    }
    match plan.placement.clone() {
        Placement::Members(urls) => {
            let members = urls
                .iter()
                .map(|u| {
                    NvmeTcpUrl::parse(u)
                        .map_err(|e| ControlError::Invalid(format!("member {u:?}: {e}")))?;
                    let domain = u
                        .strip_prefix("nvme+tcp://")
                        .and_then(|r| r.split(['/', ',']).next())
                        .unwrap_or(u)
                        .to_string();
                    Ok(MemberRecord {
                        url: u.clone(),
                        storage_node: None,
                        failure_domain: domain,
                    })
                })
                .collect::<Result<Vec<_>, ControlError>>()?;
            let mut domains: Vec<&str> =
                members.iter().map(|m| m.failure_domain.as_str()).collect();
            domains.sort_unstable();
            domains.dedup();
            if domains.len() < members.len() {
                // Allowed (tests, one JBOF with several ports), but the layout's
                // tolerance then does not cover the loss of that target.
                tracing::warn!(
                    volume = %req.name,
                    members = members.len(),
                    failure_domains = domains.len(),
                    "several members share a target: losing it loses more than one member"
                );
            }
            format_and_record(store, req, &plan, members, host).await
        }
        Placement::StorageNodes(names) => {
            let nodes = storage_nodes(store, &names).await?;
            let params = plan
                .level
                .params(nodes.len(), plan.stripe_unit_bytes)
                .map_err(|e| ControlError::Invalid(e.to_string()))?;
            let member_bytes =
                sizing::member_bytes_for(&params, req.size_bytes, plan.log.as_ref())?;
            let mut allocated: Vec<(NodeRecord, AllocatedNamespace)> = Vec::new();
            let mut result = Ok(());
            for node in &nodes {
                match nsmgmt::allocate(store, node, NamespaceKind::Nvm, member_bytes, host).await {
                    Ok(ns) => allocated.push((node.clone(), ns)),
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            let result = match result {
                Ok(()) => {
                    let members = allocated
                        .iter()
                        .map(|(n, ns)| MemberRecord {
                            url: ns.url(),
                            storage_node: Some(n.name.clone()),
                            failure_domain: n.name.clone(),
                        })
                        .collect();
                    format_and_record(store, req, &plan, members, host).await
                }
                Err(e) => Err(e),
            };
            if result.is_err() {
                for (node, ns) in &allocated {
                    nsmgmt::release(node, ns, host).await;
                }
            }
            result
        }
    }
}

/// The registered storage nodes of these names, in order.
async fn storage_nodes(
    store: &dyn MetaStore,
    names: &[String],
) -> Result<Vec<NodeRecord>, ControlError> {
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let node = get_node(store, name).await?.ok_or_else(|| {
            ControlError::Invalid(format!(
                "storage node {name:?} is not registered (unknown, or not running)"
            ))
        })?;
        if node.role != NodeRole::Storage {
            return Err(ControlError::Invalid(format!(
                "{name} is a processor node, not a storage node"
            )));
        }
        out.push(node);
    }
    Ok(out)
}

/// Opens the members, creates the volume on them, stops it clean, writes the record.
async fn format_and_record(
    store: &dyn MetaStore,
    req: &CreateVolume,
    plan: &Plan,
    members: Vec<MemberRecord>,
    host: &HostIdentity,
) -> Result<VolumeRecord, ControlError> {
    let opened = open_members(&members, host).await?;
    let formatted = format(req, plan, &members, &opened).await;
    for ns in &opened {
        if let Err(e) = ns.controller().shutdown().await {
            tracing::debug!("member controller shutdown: {e}");
        }
    }
    let (uuid, size_bytes, block_size_bytes) = formatted?;
    let mut record = VolumeRecord {
        name: req.name.clone(),
        uuid,
        level: req.level.clone(),
        stripe_unit_bytes: plan.stripe_unit_bytes,
        size_bytes,
        block_size_bytes,
        members,
        spares: Vec::new(),
        ana_group: 0,
        preferred_owner: req.preferred_owner.clone(),
        created_unix_ms: now_unix_ms(),
        qos: Default::default(),
        log: plan.log.map(|c| LogLayout {
            compression: c.compression,
            block_bytes: c.block_bytes,
        }),
    };
    commit_record(store, &mut record).await?;
    tracing::info!(volume = %record.name, uuid = %record.uuid, ana_group = record.ana_group, layout = %record.log.map_or_else(|| "in-place".to_string(), |l| l.summary()), "volume created");
    Ok(record)
}

async fn open_members(
    members: &[MemberRecord],
    host: &HostIdentity,
) -> Result<Vec<Arc<RemoteNamespace>>, ControlError> {
    let mut opened = Vec::with_capacity(members.len());
    for m in members {
        let r = async {
            let url = NvmeTcpUrl::parse(&m.url)?;
            url.open(host, &ConnectOptions::default()).await
        }
        .await;
        match r {
            Ok(ns) => opened.push(Arc::new(ns)),
            Err(e) => {
                for ns in &opened {
                    let _ = ns.controller().shutdown().await;
                }
                let what = m.storage_node.as_deref().unwrap_or(&m.url);
                return Err(ControlError::storage(
                    what,
                    format!("open member {}: {e}", m.url),
                ));
            }
        }
    }
    Ok(opened)
}

/// Checks the members hold the size asked for, then `Volume::create` and a clean stop.
/// Returns (UUID, exported bytes, block size).
async fn format(
    req: &CreateVolume,
    plan: &Plan,
    members: &[MemberRecord],
    opened: &[Arc<RemoteNamespace>],
) -> Result<(uuid::Uuid, u64, u32), ControlError> {
    // Before anything is written: a refused request leaves the members as they were.
    let params = plan
        .level
        .params(opened.len(), plan.stripe_unit_bytes)
        .map_err(|e| ControlError::Invalid(e.to_string()))?;
    let smallest = opened
        .iter()
        .map(|ns| ns.info().size_bytes)
        .min()
        .unwrap_or(0);
    let block = opened
        .iter()
        .map(|ns| ns.info().logical_block_bytes)
        .max()
        .unwrap_or(512)
        .max(512);
    let size_bytes = req
        .size_bytes
        .checked_next_multiple_of(u64::from(block))
        .ok_or_else(|| {
            ControlError::Invalid(format!(
                "volume size {} bytes is too large for {block}-byte blocks",
                req.size_bytes
            ))
        })?;
    let usable =
        sizing::exported_bytes_for(&params, smallest, plan.log.as_ref(), block).unwrap_or(0);
    if size_bytes > usable {
        return Err(ControlError::Invalid(format!(
            "the members give {usable} usable bytes (smallest member {smallest} bytes), \
             less than the {size_bytes} asked for"
        )));
    }
    let mut cfg = VolumeConfig::new(plan.level);
    cfg.stripe_unit_bytes = plan.stripe_unit_bytes;
    cfg.failure_domains = members.iter().map(|m| m.failure_domain.clone()).collect();
    cfg.log = plan.log;
    let devices: Vec<Arc<dyn BlockDevice>> = opened
        .iter()
        .map(|ns| ns.clone() as Arc<dyn BlockDevice>)
        .collect();
    let vol = Volume::create(&req.name, cfg, devices, Vec::new()).await?;
    let block_size_bytes = vol.info().logical_block_bytes;
    let out = (vol.uuid(), size_bytes, block_size_bytes);
    let made = vol.size_bytes();
    vol.stop().await?;
    drop(vol);
    // The estimate above follows Volume::create's layout; should they ever differ, fail
    // rather than export more than the volume holds.
    if made < size_bytes || block_size_bytes != block {
        return Err(ControlError::Invalid(format!(
            "the volume holds {made} bytes of {block_size_bytes}-byte blocks, not the \
             {size_bytes} bytes of {block}-byte blocks expected"
        )));
    }
    Ok(out)
}

/// Picks the smallest free ANA group and writes the record and the group's key in one
/// transaction that also checks the name is still free.
async fn commit_record(
    store: &dyn MetaStore,
    record: &mut VolumeRecord,
) -> Result<(), ControlError> {
    let vkey = volume_key(&record.name)?;
    for _ in 0..ANA_ATTEMPTS {
        let used: BTreeSet<u32> = store
            .list(ANA_GROUPS)
            .await?
            .kvs
            .iter()
            .filter_map(|kv| kv.key.strip_prefix(ANA_GROUPS)?.parse().ok())
            .collect();
        let Some(group) = (1..=nvmf_target::ANA_MAX_GROUPS).find(|g| !used.contains(g)) else {
            return Err(ControlError::Conflict(format!(
                "all {} ANA groups are in use: delete a volume first",
                nvmf_target::ANA_MAX_GROUPS
            )));
        };
        record.ana_group = group;
        let akey = ana_group_key(group);
        let txn = Txn::new()
            .when(vkey.as_str(), Expect::Absent)
            .when(akey.as_str(), Expect::Absent)
            .put(vkey.as_str(), encode_json(record)?, None)
            .put(akey.as_str(), encode_json(&record.name)?, None);
        match store.txn(txn).await? {
            TxnOutcome::Committed { .. } => return Ok(()),
            TxnOutcome::Failed { current } => {
                if current.first().is_some_and(Option::is_some) {
                    return Err(name_taken(&record.name));
                }
                // The group was taken in between: pick again.
            }
        }
    }
    Err(ControlError::Conflict(
        "could not allocate an ANA group: the keys kept changing".into(),
    ))
}

/// Every volume record, sorted by name.
pub async fn list_volumes(store: &dyn MetaStore) -> Result<Vec<VolumeRecord>, ControlError> {
    let mut v: Vec<VolumeRecord> = list_json::<VolumeRecord, _>(store, VOLUMES)
        .await?
        .items
        .into_iter()
        .map(|(_, v)| v.value)
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(v)
}

/// One volume's record, if it exists.
pub async fn get_volume(
    store: &dyn MetaStore,
    name: &str,
) -> Result<Option<VolumeRecord>, ControlError> {
    Ok(get_json::<VolumeRecord, _>(store, &volume_key(name)?)
        .await?
        .map(|v| v.value))
}

/// The record, its owner and the owner's status; `None` if there is no such volume.
pub async fn volume_view(
    store: &dyn MetaStore,
    name: &str,
) -> Result<Option<VolumeView>, ControlError> {
    let Some(record) = get_volume(store, name).await? else {
        return Ok(None);
    };
    let owner = current_owner(store, name).await?.map(|v| v.value);
    let status = get_json::<VolumeStatusRecord, _>(store, &volume_status_key(name)?)
        .await?
        .map(|v| v.value);
    Ok(Some(VolumeView {
        record,
        owner,
        status,
    }))
}

/// Deletes a volume's record (and its ANA group and handoff keys), then the namespaces
/// provisioning allocated on Ferrobay storage nodes (members with a `storage_node`).
/// Refused while a processor node owns the volume, unless `force`. A namespace that
/// cannot be deleted (node down) is logged and left; the record is gone either way.
pub async fn delete_volume(
    store: &dyn MetaStore,
    name: &str,
    force: bool,
    host: &HostIdentity,
) -> Result<VolumeRecord, ControlError> {
    let vkey = volume_key(name)?;
    let Some(current) = get_json::<VolumeRecord, _>(store, &vkey).await? else {
        return Err(ControlError::NotFound(format!("no volume named {name:?}")));
    };
    if !force && let Some(o) = current_owner(store, name).await? {
        return Err(ControlError::Conflict(format!(
            "volume {name} is owned by {} (epoch {}): stop it there first, or force",
            o.value.node, o.value.epoch
        )));
    }
    let record = current.value;
    let mut txn = Txn::new()
        .when(vkey.as_str(), Expect::ModRevision(current.revision))
        .delete(vkey.as_str())
        .delete(handoff_key(name)?)
        // Its hosts' DH-HMAC-CHAP secrets go with it (a volume made again under the
        // name starts with none).
        .delete(meta::schema::volume_auth_key(name)?);
    if record.ana_group != 0 {
        txn = txn.delete(ana_group_key(record.ana_group));
    }
    if let TxnOutcome::Failed { .. } = store.txn(txn).await? {
        return Err(ControlError::Conflict(format!(
            "volume {name} changed while being deleted: try again"
        )));
    }
    for m in &record.members {
        let Some(node) = &m.storage_node else {
            continue;
        };
        let deleted = async {
            let url = NvmeTcpUrl::parse(&m.url)?;
            let nsid = url.nsid.ok_or_else(|| {
                nvmf_host::HostError::Usage(format!("member {} names no NSID", m.url))
            })?;
            let addr = url.socket_addr().await?;
            Ok::<_, nvmf_host::HostError>((addr, url.subnqn.clone(), nsid))
        }
        .await;
        // The node's address now (it may have moved since the volume was made).
        let live = get_node(store, node)
            .await
            .ok()
            .flatten()
            .and_then(|n| n.nvme_addrs.first().copied());
        match deleted {
            Ok((recorded, subnqn, nsid)) => {
                let addr = live.unwrap_or(recorded);
                if let Err(e) = nsmgmt::delete(node, addr, &subnqn, nsid, host).await {
                    tracing::warn!(volume = name, "{e} (the namespace is left behind)");
                }
            }
            Err(e) => tracing::warn!(volume = name, member = %m.url, "{e}"),
        }
    }
    tracing::info!(volume = name, "volume deleted");
    Ok(record)
}

/// Asks the owner to hand the volume over to processor node `to` (`ferrobay volume
/// move`). Nothing to do when `to` owns it already.
pub async fn request_move(store: &dyn MetaStore, name: &str, to: &str) -> Result<(), ControlError> {
    meta::schema::validate_name(to)?;
    if get_volume(store, name).await?.is_none() {
        return Err(ControlError::NotFound(format!("no volume named {name:?}")));
    }
    match get_node(store, to).await? {
        Some(n) if n.role == NodeRole::Processor => {}
        Some(_) => {
            return Err(ControlError::Invalid(format!(
                "{to} is a storage node, not a processor node"
            )));
        }
        None => {
            return Err(ControlError::Invalid(format!(
                "processor node {to:?} is not running (not registered)"
            )));
        }
    }
    if current_owner(store, name)
        .await?
        .is_some_and(|o| o.value.node == to)
    {
        return Ok(());
    }
    let rec = HandoffRecord {
        to: to.to_string(),
        requested_unix_ms: now_unix_ms(),
    };
    meta::schema::put_json(store, &handoff_key(name)?, &rec, None).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use meta::{EmbeddedOptions, EmbeddedStore};

    fn record(name: &str) -> VolumeRecord {
        VolumeRecord {
            name: name.into(),
            uuid: uuid::Uuid::new_v4(),
            level: "raid1".into(),
            stripe_unit_bytes: 65536,
            size_bytes: 1 << 20,
            block_size_bytes: 4096,
            members: Vec::new(),
            spares: Vec::new(),
            ana_group: 0,
            preferred_owner: None,
            created_unix_ms: 1,
            qos: Default::default(),
            log: None,
        }
    }

    #[test]
    fn create_request_json_and_placement() {
        let req: CreateVolume = serde_json::from_str(
            r#"{"name":"v","level":"raid5","size_bytes":1024,"storage_nodes":["a","b","c"]}"#,
        )
        .expect("json");
        assert_eq!(req.stripe_unit_bytes, None);
        assert_eq!(
            req.placement().expect("placement"),
            Placement::StorageNodes(vec!["a".into(), "b".into(), "c".into()])
        );
        let back: CreateVolume =
            serde_json::from_str(&serde_json::to_string(&req).expect("encode")).expect("decode");
        assert_eq!(back, req);
        let mut m = req.clone();
        m.set_placement(Placement::Members(vec!["nvme+tcp://h:1/nqn.a:b/1".into()]));
        assert!(m.storage_nodes.is_empty());
        assert!(matches!(m.placement(), Ok(Placement::Members(_))));
        m.storage_nodes = vec!["a".into()];
        assert!(m.placement().is_err());
        assert!(CreateVolume::default().placement().is_err());
    }

    #[test]
    fn requests_are_checked_before_any_work() {
        let ok = CreateVolume {
            name: "v".into(),
            level: "raid6".into(),
            size_bytes: 1,
            storage_nodes: ["a", "b", "c", "d"].map(String::from).to_vec(),
            ..CreateVolume::default()
        };
        check_request(&ok).expect("valid");
        let long = CreateVolume {
            name: "x".repeat(250),
            ..ok.clone()
        };
        assert!(check_request(&long).is_err());
        let su = CreateVolume {
            stripe_unit_bytes: Some(1000),
            ..ok.clone()
        };
        assert!(matches!(check_request(&su), Err(ControlError::Invalid(_))));
        let huge = CreateVolume {
            size_bytes: u64::MAX,
            ..ok.clone()
        };
        assert!(
            matches!(check_request(&huge), Err(ControlError::Invalid(m)) if m.contains("too large"))
        );
        let owner = CreateVolume {
            preferred_owner: Some("a b".into()),
            ..ok
        };
        assert!(matches!(
            check_request(&owner),
            Err(ControlError::Invalid(_))
        ));
    }

    /// Concurrent creates get distinct ANA groups; a name is written once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ana_groups_are_unique_under_races() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(
            EmbeddedStore::open(dir.path(), EmbeddedOptions::default())
                .await
                .expect("open"),
        );
        let tasks: Vec<_> = (0..12)
            .map(|i| {
                let s = store.clone();
                tokio::spawn(async move {
                    // Two tasks per name: one of them loses.
                    let mut r = record(&format!("v{}", i / 2));
                    commit_record(s.as_ref(), &mut r)
                        .await
                        .map(|()| r.ana_group)
                })
            })
            .collect();
        let mut groups = BTreeSet::new();
        let mut conflicts = 0;
        for t in tasks {
            match t.await.expect("join") {
                Ok(g) => assert!(groups.insert(g), "group {g} given twice"),
                Err(ControlError::Conflict(m)) => {
                    assert!(m.contains("exists already"), "{m}");
                    conflicts += 1;
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(groups, (1..=6).collect());
        assert_eq!(conflicts, 6);
        for v in list_volumes(store.as_ref()).await.expect("list") {
            let owner = get_json::<String, _>(store.as_ref(), &ana_group_key(v.ana_group))
                .await
                .expect("get")
                .expect("group key");
            assert_eq!(owner.value, v.name);
        }
    }
}
