//! DH-HMAC-CHAP and TLS PSKs on volume exports (`ferrobay volume auth`): the hosts that
//! must authenticate to a volume's subsystem, or connect to it over TLS, on every processor
//! node, with their secrets and keys.
//!
//! They live in their own record, `/ferrobay/volume-auth/<volume>` ([`VolumeAuthRecord`]),
//! not in the volume record, which the API returns to any caller: secrets reach only the
//! processor nodes (which apply them to their targets, `processor::volumes`) and whoever
//! can read the metadata store (which already holds the cluster's API token). Changed by
//! compare-and-swap, so two changes at once never lose one. A host listed here must
//! authenticate (and a host with a TLS PSK must connect through a TLS listener); other
//! hosts are not affected (volume exports have no access list).

use meta::schema::{TypedCas, cas_json, get_json, volume_auth_key, volume_key};
use meta::{Expect, MetaStore};
use serde::{Deserialize, Serialize};
use storage_node::state::{DhchapHostRecord, TlsPskHostRecord};

use crate::ControlError;
use crate::records::VolumeRecord;

/// Compare-and-swap attempts before giving up on a record that keeps changing.
const CAS_ATTEMPTS: usize = 16;

/// `/ferrobay/volume-auth/<volume>`: the hosts of one volume that must authenticate
/// (`hosts`) and those that must connect over TLS (`tls_hosts`), each sorted by host NQN.
/// `generation` counts the changes. `tls_hosts` came later: a processor node built before
/// it ignores the field and would serve those hosts in plain TCP (upgrade every processor
/// node before setting a TLS PSK).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeAuthRecord {
    pub generation: u64,
    #[serde(default)]
    pub hosts: Vec<DhchapHostRecord>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls_hosts: Vec<TlsPskHostRecord>,
}

/// Volume `name`'s authentication record (empty if it has none); the volume must exist.
async fn record(store: &dyn MetaStore, name: &str) -> Result<VolumeAuthRecord, ControlError> {
    volume_exists(store, name).await?;
    let rec = get_json::<VolumeAuthRecord, _>(store, &volume_auth_key(name)?).await?;
    Ok(rec.map(|r| r.value).unwrap_or_default())
}

/// The host NQNs that must connect to volume `name` over TLS (no keys).
pub async fn tls_hosts(store: &dyn MetaStore, name: &str) -> Result<Vec<String>, ControlError> {
    let rec = record(store, name).await?;
    Ok(rec.tls_hosts.into_iter().map(|h| h.host_nqn).collect())
}

/// Requires `host.host_nqn` to connect to volume `name` over TLS with the PSKs derived from
/// `host.psk` (replacing the key it had). The volume must exist; the key is checked first
/// and errors never show it.
pub async fn set_host_tls(
    store: &dyn MetaStore,
    name: &str,
    host: TlsPskHostRecord,
) -> Result<(), ControlError> {
    nvme_proto::fabrics::validate_nqn(&host.host_nqn)
        .map_err(|e| ControlError::Invalid(format!("host NQN {:?}: {e}", host.host_nqn)))?;
    host.configured_psk().map_err(ControlError::Invalid)?;
    volume_exists(store, name).await?;
    let nqn = host.host_nqn.clone();
    change(store, name, |r| {
        if r.tls_hosts.contains(&host) {
            return false;
        }
        r.tls_hosts.retain(|h| h.host_nqn != host.host_nqn);
        r.tls_hosts.push(host.clone());
        r.tls_hosts.sort_by(|a, b| a.host_nqn.cmp(&b.host_nqn));
        true
    })
    .await?;
    tracing::info!(volume = %name, host = %nqn, "host must connect to the volume over TLS");
    Ok(())
}

/// The host NQNs of volume `name` that must use secure channel concatenation (a subset
/// of [`auth_hosts`]).
pub async fn concat_hosts(store: &dyn MetaStore, name: &str) -> Result<Vec<String>, ControlError> {
    let rec = record(store, name).await?;
    Ok(rec
        .hosts
        .into_iter()
        .filter(|h| h.concat)
        .map(|h| h.host_nqn)
        .collect())
}

/// The host NQNs that must authenticate to volume `name` (no secrets).
pub async fn auth_hosts(store: &dyn MetaStore, name: &str) -> Result<Vec<String>, ControlError> {
    let rec = record(store, name).await?;
    Ok(rec.hosts.into_iter().map(|h| h.host_nqn).collect())
}

/// Requires `host.host_nqn` to authenticate to volume `name` with `host`'s secrets
/// (replacing what it had). The volume must exist; the record is checked first (its
/// secrets parse, its hashes and groups are known), and errors never show a secret.
pub async fn set_host(
    store: &dyn MetaStore,
    name: &str,
    host: DhchapHostRecord,
) -> Result<(), ControlError> {
    nvme_proto::fabrics::validate_nqn(&host.host_nqn)
        .map_err(|e| ControlError::Invalid(format!("host NQN {:?}: {e}", host.host_nqn)))?;
    host.to_target_config().map_err(ControlError::Invalid)?;
    volume_exists(store, name).await?;
    let nqn = host.host_nqn.clone();
    change(store, name, |r| {
        if r.hosts.contains(&host) {
            return false;
        }
        r.hosts.retain(|h| h.host_nqn != host.host_nqn);
        r.hosts.push(host.clone());
        r.hosts.sort_by(|a, b| a.host_nqn.cmp(&b.host_nqn));
        true
    })
    .await?;
    tracing::info!(volume = %name, host = %nqn, "host must authenticate to the volume with DH-HMAC-CHAP");
    Ok(())
}

/// No longer requires `host_nqn` to authenticate to volume `name`, nor to use TLS;
/// whether it had to.
pub async fn remove_host(
    store: &dyn MetaStore,
    name: &str,
    host_nqn: &str,
) -> Result<bool, ControlError> {
    let mut removed = false;
    change(store, name, |r| {
        let before = r.hosts.len() + r.tls_hosts.len();
        r.hosts.retain(|h| h.host_nqn != host_nqn);
        r.tls_hosts.retain(|h| h.host_nqn != host_nqn);
        removed = r.hosts.len() + r.tls_hosts.len() != before;
        removed
    })
    .await?;
    Ok(removed)
}

async fn volume_exists(store: &dyn MetaStore, name: &str) -> Result<(), ControlError> {
    match get_json::<VolumeRecord, _>(store, &volume_key(name)?).await? {
        Some(_) => Ok(()),
        None => Err(ControlError::NotFound(format!("no volume named {name:?}"))),
    }
}

/// Applies `edit` (true: it changed something) with compare-and-swap.
async fn change(
    store: &dyn MetaStore,
    name: &str,
    mut edit: impl FnMut(&mut VolumeAuthRecord) -> bool,
) -> Result<(), ControlError> {
    let key = volume_auth_key(name)?;
    for _ in 0..CAS_ATTEMPTS {
        let cur = get_json::<VolumeAuthRecord, _>(store, &key).await?;
        let (mut rec, expect) = match cur {
            Some(v) => (v.value, Expect::ModRevision(v.revision)),
            None => (VolumeAuthRecord::default(), Expect::Absent),
        };
        if !edit(&mut rec) {
            return Ok(());
        }
        rec.generation += 1;
        match cas_json(store, &key, expect, &rec, None).await? {
            TypedCas::Swapped { .. } => return Ok(()),
            TypedCas::Conflict { .. } => continue,
        }
    }
    Err(ControlError::Conflict(format!(
        "the authentication record of volume {name} kept changing: try again"
    )))
}
