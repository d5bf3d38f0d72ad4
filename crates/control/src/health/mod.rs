//! Member health of the volumes a node runs (a processor node's owned volumes, or local
//! volumes): the members' telemetry as this node sees it, graded by the prediction model
//! with fail-slow against the other members of the same volume, and the proactive copy
//! policy acting on the grades (`docs/prediction.md`, "Proactive copy" in
//! `docs/cluster.md`).
//!
//! The volume engine knows nothing of this: it only offers `copy_member_onto_spare`.

mod policy;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use telemetry::{
    Assessment, Clock, DeviceTelemetry, Grade, MediaReading, PredictionConfig, Retention,
    SeriesStore, SeriesView,
};
use volume::{MemberState, TaskPhase, Volume};

pub use policy::ProactivePolicy;

/// Events kept in memory (the newest; older ones are dropped).
const MAX_EVENTS: usize = 256;

/// Something an operator wants to know: a grade changed, a copy started or ended.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HealthEvent {
    /// Milliseconds on the monitor's clock.
    pub t_ms: u64,
    /// `prediction`, `proactive_copy_started`, `proactive_copy_done`,
    /// `proactive_copy_failed`.
    pub kind: String,
    pub volume: String,
    pub member: Option<usize>,
    pub device: Option<String>,
    pub grade: Option<Grade>,
    pub detail: String,
}

struct Watched {
    volume: Arc<Volume>,
    /// Meters by device name (members and spares as the volume names them).
    meters: BTreeMap<String, Arc<DeviceTelemetry>>,
    /// A copy this monitor started, not yet reported done.
    copying: Option<(usize, String)>,
}

#[derive(Default)]
struct State {
    store: SeriesStore,
    volumes: BTreeMap<String, Watched>,
    grades: BTreeMap<String, Assessment>,
    /// Per member key: the clock's ms when its current grade began.
    graded_since_ms: BTreeMap<String, u64>,
    events: VecDeque<HealthEvent>,
}

/// Watches volumes' members, grades them and runs the proactive copy policy.
pub struct HealthMonitor {
    clock: Arc<dyn Clock>,
    config: PredictionConfig,
    policy: ProactivePolicy,
    state: Mutex<State>,
}

/// One member's grade, as the API shows it.
#[derive(Clone, Debug, Serialize)]
pub struct MemberGrade {
    pub volume: String,
    pub member: usize,
    pub device: String,
    pub assessment: Assessment,
    /// How long it has had this grade, ms on the monitor's clock.
    pub graded_for_ms: u64,
    /// A proactive copy of this member onto a spare, started by this monitor, runs now.
    pub proactive_copy: bool,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Series key of a member device.
pub fn member_key(volume: &str, device: &str) -> String {
    format!("member/{volume}/{device}")
}

impl HealthMonitor {
    pub fn new(
        config: PredictionConfig,
        policy: ProactivePolicy,
        retention: Retention,
        clock: Arc<dyn Clock>,
    ) -> HealthMonitor {
        HealthMonitor {
            clock,
            config,
            policy,
            state: Mutex::new(State {
                store: SeriesStore::new(retention),
                ..State::default()
            }),
        }
    }

    pub fn policy(&self) -> &ProactivePolicy {
        &self.policy
    }

    /// Starts watching `volume` under `name`; `meters` by device name (its members and
    /// spares, each wrapped in a `telemetry::MeteredDevice`).
    pub fn watch(
        &self,
        name: &str,
        volume: Arc<Volume>,
        meters: BTreeMap<String, Arc<DeviceTelemetry>>,
    ) {
        lock(&self.state).volumes.insert(
            name.to_string(),
            Watched {
                volume,
                meters,
                copying: None,
            },
        );
    }

    /// A device joined the volume (a spare added later): meter it too.
    pub fn add_meter(&self, name: &str, device: &str, meter: Arc<DeviceTelemetry>) {
        if let Some(w) = lock(&self.state).volumes.get_mut(name) {
            w.meters.insert(device.to_string(), meter);
        }
    }

    /// The volumes watched now, by name.
    pub fn watched(&self) -> Vec<(String, Arc<Volume>)> {
        lock(&self.state)
            .volumes
            .iter()
            .map(|(n, w)| (n.clone(), w.volume.clone()))
            .collect()
    }

    pub fn unwatch(&self, name: &str) {
        let mut st = lock(&self.state);
        st.volumes.remove(name);
        let prefix = format!("member/{name}/");
        st.store.retain(|k| !k.starts_with(&prefix));
        st.grades.retain(|k, _| !k.starts_with(&prefix));
        st.graded_since_ms.retain(|k, _| !k.starts_with(&prefix));
    }

    /// One round at the clock's time: a sample per member, grades, policy. Returns the
    /// events of this round (also logged, and kept: [`HealthMonitor::events`]).
    pub async fn tick(&self) -> Vec<HealthEvent> {
        let now_ms = self.clock.now_ns() / 1_000_000;
        let mut events = Vec::new();
        // Sample every member slot (spares are not graded: they carry no load).
        let candidates: Vec<(String, Arc<Volume>, usize, String)> = {
            let mut st = lock(&self.state);
            // A volume this node no longer serves (stopped, fenced by a new owner).
            st.volumes.retain(|_, w| {
                !matches!(
                    w.volume.status().state,
                    volume::VolumeState::Stopped | volume::VolumeState::Fenced
                )
            });
            let mut keep = Vec::new();
            let mut rows = Vec::new();
            for (name, w) in &st.volumes {
                let status = w.volume.status();
                for m in &status.members {
                    let Some(dev) = &m.device else { continue };
                    let Some(meter) = w.meters.get(dev) else {
                        continue;
                    };
                    let key = member_key(name, dev);
                    let labels = BTreeMap::from([
                        ("volume".to_string(), name.clone()),
                        ("member".to_string(), m.index.to_string()),
                        ("device".to_string(), dev.clone()),
                    ]);
                    rows.push((key.clone(), labels, meter.snapshot()));
                    keep.push(key);
                }
            }
            for (key, labels, snap) in &rows {
                st.store
                    .record(key, labels, now_ms, snap, MediaReading::default());
            }
            st.store.retain(|k| keep.iter().any(|x| x == k));
            let assessed =
                telemetry::predict::assess_store(&self.config, now_ms, &st.store, "volume");
            let mut out = Vec::new();
            for a in assessed {
                let labels = st.store.labels(&a.source).cloned().unwrap_or_default();
                let volume = labels.get("volume").cloned().unwrap_or_default();
                let member: usize = labels
                    .get("member")
                    .and_then(|m| m.parse().ok())
                    .unwrap_or(usize::MAX);
                let device = labels.get("device").cloned().unwrap_or_default();
                let before = st
                    .grades
                    .get(&a.source)
                    .map(|x| x.grade)
                    .unwrap_or(Grade::Ok);
                if a.grade != before || !st.graded_since_ms.contains_key(&a.source) {
                    st.graded_since_ms.insert(a.source.clone(), now_ms);
                }
                if a.grade != before {
                    events.push(HealthEvent {
                        t_ms: now_ms,
                        kind: "prediction".into(),
                        volume: volume.clone(),
                        member: Some(member),
                        device: Some(device.clone()),
                        grade: Some(a.grade),
                        detail: a.summary(),
                    });
                }
                if self.policy.acts_on(a.grade)
                    && let Some(w) = st.volumes.get(&volume)
                {
                    out.push((volume.clone(), w.volume.clone(), member, device.clone()));
                }
                st.grades.insert(a.source.clone(), a);
            }
            keep_grades(&mut st);
            out
        };
        events.extend(self.finish_copies(now_ms));
        events.extend(self.start_copies(now_ms, candidates).await);
        let mut st = lock(&self.state);
        for e in &events {
            log_event(e);
            if st.events.len() == MAX_EVENTS {
                st.events.pop_front();
            }
            st.events.push_back(e.clone());
        }
        events
    }

    /// Reports copies this monitor started that ended.
    fn finish_copies(&self, now_ms: u64) -> Vec<HealthEvent> {
        let mut st = lock(&self.state);
        let mut events = Vec::new();
        for (name, w) in st.volumes.iter_mut() {
            let Some((member, device)) = w.copying.clone() else {
                continue;
            };
            let Some(p) = w.volume.copy_progress().map(|rx| rx.borrow().clone()) else {
                continue;
            };
            let kind = match &p.phase {
                TaskPhase::Running => continue,
                TaskPhase::Done => "proactive_copy_done",
                TaskPhase::Stopped | TaskPhase::Failed(_) => "proactive_copy_failed",
            };
            w.copying = None;
            events.push(HealthEvent {
                t_ms: now_ms,
                kind: kind.into(),
                volume: name.clone(),
                member: Some(member),
                device: Some(device),
                grade: None,
                detail: format!(
                    "{:?}: {} bytes copied onto {} ({} rebuilt from the other members)",
                    p.phase, p.bytes_done, p.target, p.bytes_reconstructed
                ),
            });
        }
        events
    }

    /// Starts copies for failing members, within the policy.
    async fn start_copies(
        &self,
        now_ms: u64,
        candidates: Vec<(String, Arc<Volume>, usize, String)>,
    ) -> Vec<HealthEvent> {
        let mut events = Vec::new();
        for (name, vol, member, device) in candidates {
            let running = {
                let st = lock(&self.state);
                st.volumes.values().filter(|w| w.copying.is_some()).count()
            };
            if running >= self.policy.max_concurrent {
                break;
            }
            let status = vol.status();
            let busy = status
                .spares
                .iter()
                .any(|s| s.state == MemberState::Replacing);
            let slot_ok = status.members.get(member).is_some_and(|m| {
                m.state == MemberState::Active && m.device.as_deref() == Some(&device)
            });
            let has_spare = status.spares.iter().any(|s| s.state == MemberState::Spare);
            if busy || !slot_ok {
                continue;
            }
            if !has_spare {
                continue; // The prediction event says it; nothing to copy onto.
            }
            match vol.copy_member_onto_spare(member).await {
                Ok(rx) => {
                    let target = rx.borrow().target.clone();
                    if let Some(w) = lock(&self.state).volumes.get_mut(&name) {
                        w.copying = Some((member, device.clone()));
                    }
                    events.push(HealthEvent {
                        t_ms: now_ms,
                        kind: "proactive_copy_started".into(),
                        volume: name.clone(),
                        member: Some(member),
                        device: Some(device),
                        grade: Some(Grade::Failing),
                        detail: format!("copying member {member} onto spare {target}"),
                    });
                }
                Err(e) => {
                    tracing::warn!(volume = %name, member, error = %e, "cannot start a proactive copy")
                }
            }
        }
        events
    }

    /// Every member's latest grade.
    pub fn grades(&self) -> Vec<MemberGrade> {
        let now_ms = self.clock.now_ns() / 1_000_000;
        let st = lock(&self.state);
        st.grades
            .values()
            .filter_map(|a| {
                let l = st.store.labels(&a.source)?;
                let volume = l.get("volume")?.clone();
                let member = l.get("member")?.parse().ok()?;
                let device = l.get("device")?.clone();
                let proactive_copy = st
                    .volumes
                    .get(&volume)
                    .and_then(|w| w.copying.as_ref())
                    .is_some_and(|(m, d)| *m == member && *d == device);
                let since = st.graded_since_ms.get(&a.source).copied().unwrap_or(now_ms);
                Some(MemberGrade {
                    volume,
                    member,
                    device,
                    assessment: a.clone(),
                    graded_for_ms: now_ms.saturating_sub(since),
                    proactive_copy,
                })
            })
            .collect()
    }

    /// The retained series of every member.
    pub fn series(&self) -> Vec<SeriesView> {
        lock(&self.state).store.views()
    }

    /// The latest events, oldest first.
    pub fn events(&self) -> Vec<HealthEvent> {
        lock(&self.state).events.iter().cloned().collect()
    }
}

/// Labels, counters and grade of one member, for `/metrics`.
type MemberRow = (
    Vec<(&'static str, String)>,
    telemetry::TelemetrySnapshot,
    Option<Grade>,
);

/// The cluster event (`crate::events`) of a health event of node `node`.
pub fn to_event(node: &str, e: &HealthEvent) -> meta::schema::NewEvent {
    use meta::schema::{Severity, SubjectKind};
    let severity = match (e.kind.as_str(), e.grade) {
        ("prediction", Some(Grade::Ok)) | ("proactive_copy_done", _) => Severity::Info,
        ("proactive_copy_failed", _) => Severity::Error,
        _ => Severity::Warning,
    };
    let message = match e.member {
        Some(m) => format!("volume {} member {m}: {}", e.volume, e.detail),
        None => format!("volume {}: {}", e.volume, e.detail),
    };
    let mut ev =
        crate::events::new_event(&e.kind, severity, SubjectKind::Volume, &e.volume, message);
    ev = crate::events::with_field(ev, "node", node);
    if let Some(m) = e.member {
        ev = crate::events::with_field(ev, "member", m);
    }
    if let Some(d) = &e.device {
        ev = crate::events::with_field(ev, "device", d.as_str());
    }
    if let Some(g) = e.grade {
        ev = crate::events::with_field(ev, "grade", g.name());
    }
    ev
}

impl HealthMonitor {
    /// Adds the members' telemetry families (`ferrobay_member_io_*`,
    /// `ferrobay_member_health_grade`) to a `/metrics` page.
    pub fn add_metrics(&self, page: &mut httpapi::metrics::Page, node: &str) {
        use storage_node::telemetry_metrics::{TelemetryRow, add_families};
        let rows: Vec<MemberRow> = {
            let st = lock(&self.state);
            let mut rows = Vec::new();
            for (name, w) in &st.volumes {
                for m in w.volume.status().members {
                    let Some(dev) = m.device else { continue };
                    let Some(meter) = w.meters.get(&dev) else {
                        continue;
                    };
                    let grade = st.grades.get(&member_key(name, &dev)).map(|a| a.grade);
                    rows.push((
                        vec![
                            ("node", node.to_string()),
                            ("volume", name.clone()),
                            ("member", m.index.to_string()),
                            ("device", dev.clone()),
                        ],
                        meter.snapshot(),
                        grade,
                    ));
                }
            }
            rows
        };
        let rows: Vec<TelemetryRow<'_>> = rows
            .iter()
            .map(|(labels, counters, grade)| TelemetryRow {
                labels: labels.clone(),
                counters,
                media: None,
                grade: Some(grade.unwrap_or(Grade::Ok)),
            })
            .collect();
        add_families(page, "ferrobay_member", "volume member", &rows);
    }
}

/// Grades of sources that left the store go too.
fn keep_grades(st: &mut State) {
    let keys: Vec<String> = st.store.sources().map(str::to_string).collect();
    st.grades.retain(|k, _| keys.contains(k));
    st.graded_since_ms.retain(|k, _| keys.contains(k));
}

/// Structured log line of an event (the cluster event log takes them once it exists).
fn log_event(e: &HealthEvent) {
    let grade = e.grade.map(|g| g.name()).unwrap_or("");
    if e.kind == "prediction" && e.grade == Some(Grade::Ok) {
        tracing::info!(event = %e.kind, volume = %e.volume, member = ?e.member, device = ?e.device, grade, detail = %e.detail, "member health");
    } else {
        tracing::warn!(event = %e.kind, volume = %e.volume, member = ?e.member, device = ?e.device, grade, detail = %e.detail, "member health");
    }
}
