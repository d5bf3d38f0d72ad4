//! Volume QoS (`ferrobay volume qos`): the limits of a volume and of single hosts on it,
//! kept in the volume's record (`VolumeRecord::qos`) and changed by compare-and-swap on
//! it, so that two changes at once never lose one; every processor node exporting the
//! volume applies them to its target (`processor::volumes`).

use meta::Expect;
use meta::MetaStore;
use meta::schema::{TypedCas, cas_json, get_json, volume_key};
use nvmf_target::{QosKey, QosLimits};

use crate::ControlError;
use crate::records::{VOLUME_NSID, VolumeQos, VolumeRecord, volume_nqn};

/// Compare-and-swap attempts before giving up on a record that keeps changing.
const CAS_ATTEMPTS: usize = 16;

/// The QoS of volume `name`.
pub async fn volume_qos(store: &dyn MetaStore, name: &str) -> Result<VolumeQos, ControlError> {
    let rec = get_json::<VolumeRecord, _>(store, &volume_key(name)?)
        .await?
        .ok_or_else(|| ControlError::NotFound(format!("no volume named {name:?}")))?;
    Ok(rec.value.qos)
}

/// Sets the limits of volume `name` as a whole (`host` `None`) or of one host on it; empty
/// limits clear them. Returns the volume's QoS after the change.
pub async fn set_volume_qos(
    store: &dyn MetaStore,
    name: &str,
    host: Option<&str>,
    limits: QosLimits,
) -> Result<VolumeQos, ControlError> {
    let key = QosKey {
        subsystem_nqn: volume_nqn(name),
        nsid: Some(VOLUME_NSID),
        host_nqn: host.map(str::to_string),
    };
    if let Some(h) = host {
        nvme_proto::fabrics::validate_nqn(h)
            .map_err(|e| ControlError::Invalid(format!("host NQN {h:?}: {e}")))?;
    }
    if !limits.is_empty() {
        limits
            .validate(&key)
            .map_err(|e| ControlError::Invalid(e.0))?;
    }
    let next = (!limits.is_empty()).then_some(limits);
    change(store, name, |q| {
        let before = match host {
            None => q.volume,
            Some(h) => q.hosts.get(h).copied(),
        };
        if before == next {
            return false;
        }
        match (host, next) {
            (None, _) => q.volume = next,
            (Some(h), Some(l)) => {
                q.hosts.insert(h.to_string(), l);
            }
            (Some(h), None) => {
                q.hosts.remove(h);
            }
        }
        true
    })
    .await
}

/// Removes the limits of volume `name` (`host` `None`) or of one host on it; the limits
/// it had.
pub async fn clear_volume_qos(
    store: &dyn MetaStore,
    name: &str,
    host: Option<&str>,
) -> Result<QosLimits, ControlError> {
    let current = volume_qos(store, name).await?;
    let had = match host {
        None => current.volume,
        Some(h) => current.hosts.get(h).copied(),
    };
    let Some(had) = had else {
        let whose = host.map_or_else(|| "the volume".to_string(), |h| format!("host {h}"));
        return Err(ControlError::NotFound(format!(
            "volume {name} has no QoS limits for {whose}"
        )));
    };
    set_volume_qos(store, name, host, QosLimits::default()).await?;
    Ok(had)
}

/// Applies `edit` (true: it changed something) to the volume's QoS with compare-and-swap,
/// bumping the generation of a change.
async fn change(
    store: &dyn MetaStore,
    name: &str,
    edit: impl Fn(&mut VolumeQos) -> bool,
) -> Result<VolumeQos, ControlError> {
    let key = volume_key(name)?;
    for _ in 0..CAS_ATTEMPTS {
        let cur = get_json::<VolumeRecord, _>(store, &key)
            .await?
            .ok_or_else(|| ControlError::NotFound(format!("no volume named {name:?}")))?;
        let mut rec = cur.value;
        if !edit(&mut rec.qos) {
            return Ok(rec.qos);
        }
        rec.qos.generation += 1;
        match cas_json(store, &key, Expect::ModRevision(cur.revision), &rec, None).await? {
            TypedCas::Swapped { .. } => {
                tracing::info!(volume = %name, generation = rec.qos.generation, "volume QoS changed");
                return Ok(rec.qos);
            }
            TypedCas::Conflict { .. } => continue,
        }
    }
    Err(ControlError::Conflict(format!(
        "volume {name} kept changing while its QoS was set: try again"
    )))
}
