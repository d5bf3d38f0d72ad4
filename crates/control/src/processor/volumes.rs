//! The volumes this node exports: one subsystem per volume record under
//! `/ferrobay/volumes/`, added and removed as records come and go, each with its
//! ownership task.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use meta::schema::{VOLUME_AUTH, VOLUMES, list_json, name_in};
use nvmf_target::{ANA_MAX_GROUPS, AnaState, NamespaceConfig, SubsystemConfig};
use storage_node::state::{DhchapHostRecord, TlsPskHostRecord};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::export_device::ExportDevice;
use super::{Ctx, volume_task};
use crate::records::{VolumeRecord, volume_nqn};
use crate::volume_auth::VolumeAuthRecord;

/// Model number of every exported volume (identical on every processor node).
pub(crate) const MODEL: &str = "Ferrobay Volume";

struct Entry {
    record: watch::Sender<VolumeRecord>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    export: Arc<ExportDevice>,
    /// The DH-HMAC-CHAP hosts applied to the subsystem (`crate::volume_auth`).
    auth: Vec<DhchapHostRecord>,
    /// The TLS PSK hosts applied to the subsystem.
    tls: Vec<TlsPskHostRecord>,
}

/// The exported volumes, by name.
#[derive(Default)]
pub(crate) struct Volumes {
    entries: Mutex<BTreeMap<String, Entry>>,
}

impl Volumes {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Follows the volume records until aborted.
pub(crate) async fn run(ctx: Arc<Ctx>, vols: Arc<Volumes>) {
    loop {
        tokio::time::sleep(ctx.poll()).await;
        sync(&ctx, &vols).await;
    }
}

/// One pass: export new volumes, pass record changes on, retire removed volumes.
pub(crate) async fn sync(ctx: &Arc<Ctx>, vols: &Volumes) {
    let listing = match list_json::<VolumeRecord, _>(ctx.store.as_ref(), VOLUMES).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(node = %ctx.name, "processor: volume records unreadable: {e}");
            return;
        }
    };
    let want: BTreeMap<String, VolumeRecord> = listing
        .items
        .into_iter()
        .filter_map(|(key, v)| {
            let name = name_in(VOLUMES, &key)?;
            (name == v.value.name).then(|| (name.to_string(), v.value))
        })
        .collect();
    // The hosts that must authenticate or use TLS, by volume. Unreadable: keep what is
    // applied (never drop a requirement because the store hiccupped).
    let auth: Option<BTreeMap<String, VolumeAuthRecord>> = match list_json::<VolumeAuthRecord, _>(
        ctx.store.as_ref(),
        VOLUME_AUTH,
    )
    .await
    {
        Ok(l) => Some(
            l.items
                .into_iter()
                .filter_map(|(key, v)| Some((name_in(VOLUME_AUTH, &key)?.to_string(), v.value)))
                .collect(),
        ),
        Err(e) => {
            tracing::warn!(node = %ctx.name, "processor: volume authentication records unreadable: {e}");
            None
        }
    };
    let gone: Vec<(String, Entry)> = {
        let mut entries = vols.lock();
        let names: Vec<String> = entries
            .keys()
            .filter(|n| !want.contains_key(*n))
            .cloned()
            .collect();
        names
            .into_iter()
            .filter_map(|n| entries.remove(&n).map(|e| (n, e)))
            .collect()
    };
    for (name, entry) in gone {
        tracing::info!(node = %ctx.name, volume = %name, "processor: volume record removed");
        retire(ctx, &name, entry).await;
    }
    for (name, rec) in want {
        let replaced = {
            let mut entries = vols.lock();
            let other_volume = entries
                .get(&name)
                .map(|e| e.record.borrow().uuid != rec.uuid);
            match other_volume {
                // Same name, another volume (deleted and created again): retire the old
                // one now, export the new one on the next pass.
                Some(true) => entries.remove(&name),
                Some(false) => {
                    if let Some(e) = entries.get(&name) {
                        let qos_changed = e.record.borrow().qos != rec.qos;
                        e.record.send_if_modified(|r| {
                            let changed = *r != rec;
                            *r = rec.clone();
                            changed
                        });
                        if qos_changed {
                            apply_qos(ctx, &rec);
                        }
                    }
                    if let (Some(e), Some(auth)) = (entries.get_mut(&name), &auth) {
                        let want = auth.get(&name);
                        apply_auth(ctx, &name, &mut e.auth, want.map(|r| &r.hosts));
                        apply_tls(ctx, &name, &mut e.tls, want.map(|r| &r.tls_hosts));
                    }
                    None
                }
                None => {
                    match add(ctx, &rec) {
                        Ok(mut entry) => {
                            if let Some(auth) = &auth {
                                let want = auth.get(&name);
                                apply_auth(ctx, &name, &mut entry.auth, want.map(|r| &r.hosts));
                                apply_tls(ctx, &name, &mut entry.tls, want.map(|r| &r.tls_hosts));
                            }
                            entries.insert(name.clone(), entry);
                        }
                        Err(e) => tracing::warn!(
                            node = %ctx.name, volume = %name,
                            "processor: volume not exported: {e}"
                        ),
                    }
                    None
                }
            }
        };
        if let Some(old) = replaced {
            retire(ctx, &name, old).await;
        }
    }
}

/// Serial number of a volume's subsystem: from its UUID, so every processor node
/// reports the same one (hosts group paths by subsystem NQN and serial).
fn serial_of(rec: &VolumeRecord) -> String {
    let hex = rec.uuid.simple().to_string().to_ascii_uppercase();
    format!("FBV{}", &hex[..17])
}

fn add(ctx: &Arc<Ctx>, rec: &VolumeRecord) -> Result<Entry, String> {
    if !(1..=ANA_MAX_GROUPS).contains(&rec.ana_group) {
        return Err(format!(
            "ANA group {} is not in 1..={ANA_MAX_GROUPS}",
            rec.ana_group
        ));
    }
    if !matches!(rec.block_size_bytes, 512 | 4096)
        || rec.size_bytes == 0
        || !rec
            .size_bytes
            .is_multiple_of(u64::from(rec.block_size_bytes))
    {
        return Err(format!(
            "size {} / block size {} not exportable",
            rec.size_bytes, rec.block_size_bytes
        ));
    }
    let nqn = volume_nqn(&rec.name);
    // Inaccessible before the namespace exists: no host ever sees it optimized here
    // before this node owns it.
    ctx.set_ana(rec.ana_group, AnaState::Inaccessible);
    ctx.target
        .add_subsystem(SubsystemConfig {
            nqn: nqn.clone(),
            serial: serial_of(rec),
            model: MODEL.to_string(),
            allow_any_host: true,
            allowed_hosts: Vec::new(),
        })
        .map_err(|e| e.to_string())?;
    let export = Arc::new(ExportDevice::new(
        &rec.name,
        rec.size_bytes,
        rec.block_size_bytes,
    ));
    let nguid = *rec.uuid.as_bytes();
    let mut eui64 = [0u8; 8];
    eui64.copy_from_slice(&nguid[8..16]);
    let ns = NamespaceConfig {
        nsid: 1,
        device: export.clone(),
        offset_bytes: 0,
        size_bytes: rec.size_bytes,
        block_size_bytes: rec.block_size_bytes,
        nguid,
        eui64,
        uuid: nguid,
        attached: true,
        reservations: None,
        ana_group: rec.ana_group,
    };
    if let Err(e) = ctx.target.add_namespace(&nqn, ns) {
        let _ = ctx.target.remove_subsystem(&nqn);
        return Err(e.to_string());
    }
    apply_qos(ctx, rec);
    let (record_tx, record_rx) = watch::channel(rec.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    let task = tokio::spawn(volume_task::run(
        ctx.clone(),
        rec.name.clone(),
        record_rx,
        stop_rx,
        export.clone(),
    ));
    tracing::info!(node = %ctx.name, volume = %rec.name, %nqn, group = rec.ana_group, "processor: volume exported");
    Ok(Entry {
        record: record_tx,
        stop: stop_tx,
        task,
        export,
        auth: Vec::new(),
        tls: Vec::new(),
    })
}

/// What [`reconcile_hosts`] says about one kind of per-host credential.
struct HostCredential {
    removed: &'static str,
    applied: &'static str,
    failed: &'static str,
}

/// Makes one kind of per-host credential of the volume's subsystem what its record says:
/// `applied` is what this node applied before, `set(host, credential)` applies one (or
/// removes it with `None`); errors name the host, never a secret.
fn reconcile_hosts<R: PartialEq + Clone>(
    ctx: &Ctx,
    name: &str,
    applied: &mut Vec<R>,
    want: Option<&Vec<R>>,
    host_of: fn(&R) -> &str,
    say: &HostCredential,
    mut set: impl FnMut(&str, Option<&R>) -> Result<(), String>,
) {
    let want = want.map(Vec::as_slice).unwrap_or_default();
    if applied.as_slice() == want {
        return;
    }
    for old in applied.iter() {
        let host = host_of(old);
        if !want.iter().any(|h| host_of(h) == host) {
            let _ = set(host, None);
            tracing::info!(node = %ctx.name, volume = %name, host, "processor: {}", say.removed);
        }
    }
    let mut now = Vec::new();
    for h in want {
        if applied.contains(h) {
            now.push(h.clone());
            continue;
        }
        match set(host_of(h), Some(h)) {
            Ok(()) => {
                tracing::info!(node = %ctx.name, volume = %name, host = host_of(h), "processor: {}", say.applied);
                now.push(h.clone());
            }
            Err(e) => {
                tracing::warn!(node = %ctx.name, volume = %name, "processor: {} not applied: {e}", say.failed)
            }
        }
    }
    *applied = now;
}

/// The DH-HMAC-CHAP hosts of the volume's subsystem. A host whose secrets changed keeps
/// its live controllers (their next authentication uses the new ones).
fn apply_auth(
    ctx: &Ctx,
    name: &str,
    applied: &mut Vec<DhchapHostRecord>,
    want: Option<&Vec<DhchapHostRecord>>,
) {
    let nqn = volume_nqn(name);
    let say = HostCredential {
        removed: "host no longer authenticates to the volume",
        applied: "host must authenticate to the volume with DH-HMAC-CHAP",
        failed: "DH-HMAC-CHAP",
    };
    reconcile_hosts(
        ctx,
        name,
        applied,
        want,
        |h| &h.host_nqn,
        &say,
        |host, h| {
            let cfg = h.map(DhchapHostRecord::to_target_config).transpose()?;
            ctx.target
                .set_host_dhchap(&nqn, host, cfg)
                .map_err(|e| e.to_string())
        },
    );
}

/// The TLS PSK hosts of the volume's subsystem. A host with a PSK is refused on the plain
/// listeners (the target enforces it); a new or changed key disconnects that host's live
/// controllers, so that it reconnects over TLS with it.
fn apply_tls(
    ctx: &Ctx,
    name: &str,
    applied: &mut Vec<TlsPskHostRecord>,
    want: Option<&Vec<TlsPskHostRecord>>,
) {
    let nqn = volume_nqn(name);
    let say = HostCredential {
        removed: "host no longer needs TLS for the volume",
        applied: "host must connect to the volume over TLS",
        failed: "TLS PSK",
    };
    reconcile_hosts(
        ctx,
        name,
        applied,
        want,
        |h| &h.host_nqn,
        &say,
        |host, h| {
            let psk = h.map(TlsPskHostRecord::configured_psk).transpose()?;
            ctx.target
                .set_host_tls_psk(&nqn, host, psk)
                .map_err(|e| e.to_string())
        },
    );
}

/// Makes the target's QoS limits of the volume's subsystem what its record says (every
/// processor node does, owner or not: a takeover finds them in force).
fn apply_qos(ctx: &Ctx, rec: &VolumeRecord) {
    let nqn = volume_nqn(&rec.name);
    let want = rec.qos.target_limits(&nqn);
    for (key, _) in ctx.target.qos_limits() {
        if key.subsystem_nqn == nqn && !want.iter().any(|(k, _)| *k == key) {
            ctx.target.clear_qos(&key);
        }
    }
    let mut applied = true;
    for (key, limits) in want {
        if let Err(e) = ctx.target.set_qos(key.clone(), limits) {
            applied = false;
            tracing::warn!(node = %ctx.name, volume = %rec.name, %key, "processor: QoS limits not applied: {e}");
        }
    }
    if applied {
        ctx.qos_applied_lock()
            .insert(rec.name.clone(), rec.qos.generation);
        if rec.qos.generation > 0 {
            tracing::info!(node = %ctx.name, volume = %rec.name, generation = rec.qos.generation, "processor: volume QoS applied");
        }
    }
}

/// Stops a volume's task (an owner stops the volume clean and releases it) and removes
/// its subsystem.
async fn retire(ctx: &Ctx, name: &str, entry: Entry) {
    entry.stop.send_replace(true);
    let wait = Duration::from_millis(ctx.cfg.drain_timeout_ms) + Duration::from_secs(30);
    let mut task = entry.task;
    if tokio::time::timeout(wait, &mut task).await.is_err() {
        tracing::warn!(volume = %name, "processor: volume task did not stop; aborted");
        task.abort();
        if let Some(v) = entry.export.detach() {
            v.detach();
        }
    }
    let _ = ctx.target.remove_subsystem(&volume_nqn(name));
    ctx.qos_applied_lock().remove(name);
}

/// Shutdown: every task stops (owners hand over or stop clean), all at once.
pub(crate) async fn stop_all(ctx: &Ctx, vols: &Volumes) {
    let entries: Vec<(String, Entry)> = std::mem::take(&mut *vols.lock()).into_iter().collect();
    let waits = entries.into_iter().map(|(name, e)| async move {
        retire(ctx, &name, e).await;
    });
    futures::future::join_all(waits).await;
}

/// Crash: tasks aborted, volumes dropped without a write.
pub(crate) fn abort_all(ctx: &Ctx, vols: &Volumes) {
    let entries = std::mem::take(&mut *vols.lock());
    for (_, e) in entries {
        e.task.abort();
        if let Some(v) = e.export.detach() {
            v.detach();
        }
    }
    ctx.owned_lock().clear();
}
