//! The node's drive telemetry: every drive and every NVM namespace is metered
//! (`telemetry::MeteredDevice`), sampled once a second into a bounded series store, NVMe
//! drives add their own temperature / wear / spare (admin passthrough, `nvme_smart`), and
//! the prediction model grades each drive on its errors, spare and wear (the fail-slow
//! rule needs peers under the same load: the processor node applies it to volume members).
//! It also answers the target's extended SMART and telemetry log pages.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use nvme_proto::log::ExtSmartLog;
use nvme_proto::log::ext_smart::{ExtSmartRecord, LatencySummary, kind};
use nvmf_target::TelemetrySource;
use serde::Serialize;
use telemetry::{
    Assessment, Clock, DeviceTelemetry, Grade, MediaReading, OpClass, PredictionConfig, Sampler,
    SeriesStore, SeriesView, TelemetrySnapshot,
};
use uuid::Uuid;

use crate::api::{
    DriveTelemetry, IoTelemetry, MediaView, NamespaceTelemetry, Prediction, TelemetryReport,
};
use crate::catalog::Catalog;
use crate::nvme_smart::{NvmeAdmin, nvme_controller_of, read_media_reading};

use super::lock_catalog;

/// How often NVMe drives are asked for their SMART log (an admin command each).
const MEDIA_EVERY_MS: u64 = 10_000;

/// Per (subsystem NQN, NSID): the namespace's drive and its meter.
type NamespaceMeters = BTreeMap<(String, u32), (Uuid, Arc<DeviceTelemetry>)>;

struct Drive {
    name: String,
    meter: Arc<DeviceTelemetry>,
    controller: Option<PathBuf>,
}

#[derive(Default)]
struct State {
    store: SeriesStore,
    media: BTreeMap<Uuid, MediaReading>,
    media_read_ms: Option<u64>,
    grades: BTreeMap<String, Assessment>,
    /// Per drive key: the clock's ms when its current grade began.
    graded_since_ms: BTreeMap<String, u64>,
    /// Wall clock ms minus the clock's ms, taken at the first dating and kept: every
    /// answer dates a grade's start the same way (recomputing it per call moved "since"
    /// by a millisecond between two routes).
    wall_offset_ms: Option<i128>,
}

/// Meters, series and grades of one node's drives and namespaces.
pub struct NodeTelemetry {
    node: String,
    drives: BTreeMap<Uuid, Drive>,
    namespaces: Mutex<NamespaceMeters>,
    catalog: Mutex<Option<Arc<Mutex<Catalog>>>>,
    admin: Arc<dyn NvmeAdmin>,
    clock: Arc<dyn Clock>,
    config: PredictionConfig,
    state: Mutex<State>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Series key of a drive and of a namespace.
pub fn drive_key(drive: &str) -> String {
    format!("drive/{drive}")
}

pub fn namespace_key(nqn: &str, nsid: u32) -> String {
    format!("ns/{nqn}/{nsid}")
}

/// What `/api/.../telemetry` shows: each source's latest sample and each drive's grade.
#[derive(Clone, Debug, Serialize)]
pub struct TelemetryView {
    pub node: String,
    pub sources: Vec<SourceView>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SourceView {
    pub source: String,
    pub labels: BTreeMap<String, String>,
    /// Lifetime counters.
    pub counters: TelemetrySnapshot,
    /// The last per-second sample, if one was taken.
    pub latest: Option<telemetry::Sample>,
    pub media: Option<MediaReading>,
    pub assessment: Option<Assessment>,
}

impl NodeTelemetry {
    /// Meters for `drives` (uuid, name, spec); NVMe block devices get their controller
    /// found through `sys_root` for SMART readings.
    pub fn new(
        node: &str,
        drives: &[(Uuid, String, String)],
        sys_root: &Path,
        admin: Arc<dyn NvmeAdmin>,
        clock: Arc<dyn Clock>,
    ) -> NodeTelemetry {
        let drives = drives
            .iter()
            .map(|(uuid, name, spec)| {
                let controller = match blockdev::parse_drive_spec(spec) {
                    Ok(blockdev::DriveSpec::BlockDevice { path }) => {
                        nvme_controller_of(&path, sys_root)
                    }
                    _ => None,
                };
                (
                    *uuid,
                    Drive {
                        name: name.clone(),
                        meter: Arc::new(DeviceTelemetry::new()),
                        controller,
                    },
                )
            })
            .collect();
        NodeTelemetry {
            node: node.to_string(),
            drives,
            namespaces: Mutex::new(BTreeMap::new()),
            catalog: Mutex::new(None),
            admin,
            clock,
            config: PredictionConfig::default(),
            state: Mutex::new(State::default()),
        }
    }

    /// The catalog tells which drives are behind a subsystem (for the log pages).
    pub(crate) fn set_catalog(&self, c: Arc<Mutex<Catalog>>) {
        *lock(&self.catalog) = Some(c);
    }

    /// The counters drive `uuid`'s I/O goes into.
    pub fn drive_meter(&self, uuid: &Uuid) -> Option<Arc<DeviceTelemetry>> {
        self.drives.get(uuid).map(|d| d.meter.clone())
    }

    pub fn clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    /// Fresh counters for namespace `nsid` of `nqn` on drive `drive` (a namespace made
    /// again after a delete starts from zero).
    pub fn namespace_meter(&self, nqn: &str, nsid: u32, drive: Uuid) -> Arc<DeviceTelemetry> {
        let m = Arc::new(DeviceTelemetry::new());
        lock(&self.namespaces).insert((nqn.to_string(), nsid), (drive, m.clone()));
        m
    }

    pub fn forget_namespace(&self, nqn: &str, nsid: u32) {
        lock(&self.namespaces).remove(&(nqn.to_string(), nsid));
    }

    fn labels_drive(&self, d: &Drive) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("node".to_string(), self.node.clone()),
            ("drive".to_string(), d.name.clone()),
        ])
    }

    /// One sampling round at the clock's time: SMART readings (every 10 s), a sample per
    /// drive and namespace, grades. Blocking (admin commands): run it off the runtime.
    pub fn tick(&self) {
        let now_ms = self.clock.now_ns() / 1_000_000;
        let due = lock(&self.state)
            .media_read_ms
            .is_none_or(|t| now_ms.saturating_sub(t) >= MEDIA_EVERY_MS);
        let fresh: Option<BTreeMap<Uuid, MediaReading>> = due.then(|| {
            self.drives
                .iter()
                .filter_map(|(u, d)| {
                    let c = d.controller.as_ref()?;
                    Some((*u, read_media_reading(self.admin.as_ref(), c)))
                })
                .collect()
        });
        let namespaces = lock(&self.namespaces).clone();
        let drive_names: BTreeMap<Uuid, String> = self
            .drives
            .iter()
            .map(|(u, d)| (*u, d.name.clone()))
            .collect();
        let mut st = lock(&self.state);
        if let Some(f) = fresh {
            st.media = f;
            st.media_read_ms = Some(now_ms);
        }
        type Reading = (
            String,
            BTreeMap<String, String>,
            TelemetrySnapshot,
            MediaReading,
        );
        let mut readings: Vec<Reading> = Vec::new();
        for (uuid, d) in &self.drives {
            let media = st.media.get(uuid).copied().unwrap_or_default();
            let labels = self.labels_drive(d);
            readings.push((drive_key(&d.name), labels, d.meter.snapshot(), media));
        }
        for ((nqn, nsid), (drive, m)) in &namespaces {
            let labels = BTreeMap::from([
                ("node".to_string(), self.node.clone()),
                ("subsystem".to_string(), nqn.clone()),
                ("nsid".to_string(), nsid.to_string()),
                (
                    "drive".to_string(),
                    drive_names.get(drive).cloned().unwrap_or_default(),
                ),
            ]);
            let key = namespace_key(nqn, *nsid);
            readings.push((key, labels, m.snapshot(), MediaReading::default()));
        }
        Sampler::tick(
            &mut st.store,
            now_ms,
            readings.iter().map(|(k, l, s, m)| (k.as_str(), l, s, *m)),
        );
        let drive_keys: Vec<String> = self.drives.values().map(|d| drive_key(&d.name)).collect();
        let grades = telemetry::predict::assess_store(&self.config, now_ms, &st.store, "group");
        let grades: BTreeMap<String, Assessment> = grades
            .into_iter()
            .filter(|a| drive_keys.contains(&a.source))
            .map(|a| (a.source.clone(), a))
            .collect();
        let since: BTreeMap<String, u64> = grades
            .iter()
            .map(|(k, a)| {
                let kept = st
                    .grades
                    .get(k)
                    .filter(|b| b.grade == a.grade)
                    .and_then(|_| st.graded_since_ms.get(k).copied());
                (k.clone(), kept.unwrap_or(now_ms))
            })
            .collect();
        st.grades = grades;
        st.graded_since_ms = since;
        for a in st.grades.values().filter(|a| a.grade > Grade::Ok) {
            tracing::warn!(event = "prediction", source = %a.source, grade = %a.grade, reason = %a.summary(), "drive health prediction");
        }
    }

    /// The grade of every drive (`drive/NAME`).
    pub fn grades(&self) -> Vec<Assessment> {
        lock(&self.state).grades.values().cloned().collect()
    }

    /// Every drive's grade as the API shows it, by drive name (`now_unix_ms`: the wall
    /// clock now, to date each grade's start).
    pub fn predictions(&self, now_unix_ms: u64) -> BTreeMap<String, Prediction> {
        let now_ms = self.clock.now_ns() / 1_000_000;
        let mut st = lock(&self.state);
        let offset_ms = *st
            .wall_offset_ms
            .get_or_insert(i128::from(now_unix_ms) - i128::from(now_ms));
        self.drives
            .values()
            .filter_map(|d| {
                let key = drive_key(&d.name);
                let a = st.grades.get(&key)?;
                let since = st
                    .graded_since_ms
                    .get(&key)
                    .map(|&t| u64::try_from(i128::from(t) + offset_ms).unwrap_or(0));
                Some((d.name.clone(), Prediction::of(a, since)))
            })
            .collect()
    }

    /// Every drive's and namespace's counters, SMART reading and grade, as the API
    /// shows them.
    pub fn report(&self, now_unix_ms: u64) -> TelemetryReport {
        let mut predictions = self.predictions(now_unix_ms);
        let media = lock(&self.state).media.clone();
        let drives = self
            .drives
            .iter()
            .map(|(uuid, d)| DriveTelemetry {
                drive: d.name.clone(),
                io: IoTelemetry::of(&d.meter.snapshot()),
                media: media
                    .get(uuid)
                    .copied()
                    .map(MediaView::from)
                    .unwrap_or_default(),
                prediction: predictions.remove(&d.name),
            })
            .collect();
        let namespaces = lock(&self.namespaces)
            .iter()
            .map(|((nqn, nsid), (drive, m))| NamespaceTelemetry {
                subsystem_nqn: nqn.clone(),
                nsid: *nsid,
                drive: self
                    .drives
                    .get(drive)
                    .map(|d| d.name.clone())
                    .unwrap_or_default(),
                io: IoTelemetry::of(&m.snapshot()),
            })
            .collect();
        TelemetryReport {
            node: self.node.clone(),
            drives,
            namespaces,
        }
    }

    /// The latest state of every source (a serializable view for the API).
    pub fn view(&self) -> TelemetryView {
        let st = lock(&self.state);
        let mut sources = Vec::new();
        for (uuid, d) in &self.drives {
            let key = drive_key(&d.name);
            sources.push(SourceView {
                labels: self.labels_drive(d),
                counters: d.meter.snapshot(),
                latest: st.store.latest(&key),
                media: st.media.get(uuid).copied(),
                assessment: st.grades.get(&key).cloned(),
                source: key,
            });
        }
        for ((nqn, nsid), (_, m)) in lock(&self.namespaces).iter() {
            let key = namespace_key(nqn, *nsid);
            sources.push(SourceView {
                labels: st.store.labels(&key).cloned().unwrap_or_default(),
                counters: m.snapshot(),
                latest: st.store.latest(&key),
                media: None,
                assessment: None,
                source: key,
            });
        }
        TelemetryView {
            node: self.node.clone(),
            sources,
        }
    }

    /// Adds the drive and namespace telemetry families to a `/metrics` page
    /// (`ferrobay_drive_io_*`, `ferrobay_namespace_io_*`, ... in `docs/node-api.md`).
    pub fn add_metrics(&self, page: &mut httpapi::metrics::Page) {
        use crate::telemetry_metrics::{TelemetryRow, add_families};
        let view = self.view();
        let snaps: Vec<&SourceView> = view.sources.iter().collect();
        let drives: Vec<TelemetryRow<'_>> = snaps
            .iter()
            .filter(|s| s.source.starts_with("drive/"))
            .map(|s| TelemetryRow {
                labels: vec![
                    ("node", self.node.clone()),
                    ("drive", s.labels.get("drive").cloned().unwrap_or_default()),
                ],
                counters: &s.counters,
                media: s.media,
                grade: s.assessment.as_ref().map(|a| a.grade),
            })
            .collect();
        add_families(page, "ferrobay_drive", "drive", &drives);
        let namespaces: Vec<TelemetryRow<'_>> = snaps
            .iter()
            .filter(|s| s.source.starts_with("ns/"))
            .map(|s| TelemetryRow {
                labels: vec![
                    ("node", self.node.clone()),
                    (
                        "subsystem",
                        s.labels.get("subsystem").cloned().unwrap_or_default(),
                    ),
                    ("nsid", s.labels.get("nsid").cloned().unwrap_or_default()),
                ],
                counters: &s.counters,
                media: None,
                grade: None,
            })
            .collect();
        add_families(page, "ferrobay_namespace", "namespace", &namespaces);
    }

    /// The whole retained history of every source.
    pub fn series(&self) -> Vec<SeriesView> {
        lock(&self.state).store.views()
    }

    fn record(
        &self,
        kind_: u8,
        nsid: u32,
        name: &str,
        s: &TelemetrySnapshot,
        media: Option<MediaReading>,
        grade: Option<Grade>,
    ) -> ExtSmartRecord {
        let m = media.unwrap_or_default();
        let clamp = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        ExtSmartRecord {
            kind: kind_,
            nsid,
            name: name.to_string(),
            temperature_k: m.temperature_k,
            percentage_used: m.percentage_used,
            spare: m.available_spare_pct.zip(m.available_spare_threshold_pct),
            grade: grade.map(|g| g as u8),
            queue_depth: clamp(s.in_flight),
            queue_depth_avg_milli: (s.queue_depth_avg() * 1000.0) as u64,
            read_bytes: s.read_bytes,
            write_bytes: s.write_bytes,
            ops: s.ops,
            errors: s.errors,
            smart_media_errors: m.media_errors,
            latency: Some(std::array::from_fn(|i| {
                let h = s.latency(OpClass::ALL[i]);
                let top = h
                    .counts
                    .iter()
                    .rposition(|&c| c > 0)
                    .map_or(0, |b| telemetry::hist::bucket_upper_us(b).saturating_sub(1));
                LatencySummary {
                    count: h.count(),
                    mean_us: clamp(h.mean_us()),
                    p50_us: clamp(h.quantile_us(0.5)),
                    p99_us: clamp(h.quantile_us(0.99)),
                    p999_us: clamp(h.quantile_us(0.999)),
                    max_us: clamp(top),
                }
            })),
        }
    }
}

impl TelemetrySource for NodeTelemetry {
    fn ext_smart(&self, subnqn: &str, nsid: Option<u32>) -> ExtSmartLog {
        let namespaces = lock(&self.namespaces).clone();
        let mut wanted: Vec<(u32, Uuid, Arc<DeviceTelemetry>)> = namespaces
            .iter()
            .filter(|((nqn, n), _)| nqn == subnqn && nsid.is_none_or(|x| x == *n))
            .map(|((_, n), (d, m))| (*n, *d, m.clone()))
            .collect();
        wanted.sort_by_key(|w| w.0);
        // The drives behind the subsystem: its namespaces' drives, and the subsystem's own.
        let mut drives: Vec<Uuid> = wanted.iter().map(|w| w.1).collect();
        if nsid.is_none()
            && let Some(c) = lock(&self.catalog).clone()
        {
            drives.extend(
                lock_catalog(&c)
                    .state()
                    .subsystems
                    .iter()
                    .filter(|s| s.nqn == subnqn)
                    .map(|s| s.drive_uuid),
            );
        }
        drives.sort_unstable();
        drives.dedup();
        let (media, grades) = {
            let st = lock(&self.state);
            (st.media.clone(), st.grades.clone())
        };
        let mut records = Vec::new();
        for u in &drives {
            if let Some(d) = self.drives.get(u) {
                let grade = grades.get(&drive_key(&d.name)).map(|a| a.grade);
                records.push(self.record(
                    kind::DRIVE,
                    0,
                    &d.name,
                    &d.meter.snapshot(),
                    media.get(u).copied(),
                    grade,
                ));
            }
        }
        for (n, d, m) in &wanted {
            let name = self.drives.get(d).map_or("", |x| x.name.as_str());
            records.push(self.record(kind::NAMESPACE, *n, name, &m.snapshot(), None, None));
        }
        ExtSmartLog {
            timestamp_ms: self.clock.now_ns() / 1_000_000,
            records,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::io;

    use blockdev::{BlockDevice, FaultAction, FaultOps, FaultRule, FaultyDevice, IoBuf, RamDevice};
    use nvme_proto::log::SmartLog;
    use telemetry::{ManualClock, MeteredDevice};

    use super::*;

    /// No NVMe controller answers (the drives here are a file and RAM).
    struct NoController;

    impl NvmeAdmin for NoController {
        fn smart_log(&self, _controller: &Path) -> io::Result<[u8; SmartLog::BYTES]> {
            Err(io::Error::from(io::ErrorKind::NotFound))
        }
    }

    /// A drive whose reads fail now and then (grown defects) is graded suspect at the
    /// first error and failing once they recur, while it still serves I/O; its healthy
    /// neighbour stays ok.
    #[tokio::test]
    async fn intermittent_media_errors_grade_a_drive_before_it_dies() {
        let clock = Arc::new(ManualClock::new());
        let d0 = Uuid::from_u128(1);
        let d1 = Uuid::from_u128(2);
        let t = NodeTelemetry::new(
            "n1",
            &[
                (d0, "d0".into(), "file:/x:8M".into()),
                (d1, "d1".into(), "ram:8M".into()),
            ],
            Path::new("/nonexistent"),
            Arc::new(NoController),
            clock.clone(),
        );
        let faulty = Arc::new(FaultyDevice::new(Arc::new(RamDevice::new("d0", 8 << 20))));
        let faults = faulty.handle();
        let dev = MeteredDevice::with(faulty, t.drive_meter(&d0).unwrap(), clock.clone());
        let mut grades = Vec::new();
        let mut buf = IoBuf::new_zeroed(4096);
        for sec in 1..=20u64 {
            // Every 4th second one read fails; the rest succeed.
            if sec % 4 == 0 {
                faults.add(FaultRule::new(FaultOps::READ, FaultAction::Media).times(1));
            }
            for i in 0..50u64 {
                buf = match dev.read(i * 4096, buf).await {
                    Ok(b) => b,
                    Err(_) => IoBuf::new_zeroed(4096),
                };
            }
            clock.set_ns(sec * 1_000_000_000);
            t.tick();
            let g = t.grades();
            grades.push(g.iter().find(|a| a.source == "drive/d0").unwrap().grade);
        }
        assert_eq!(grades[2], Grade::Ok, "no error yet");
        assert_eq!(grades[3], Grade::Suspect, "the first error");
        assert_eq!(
            grades[11],
            Grade::Failing,
            "the third recurrence: {grades:?}"
        );
        let a = t.grades();
        let d0g = a.iter().find(|a| a.source == "drive/d0").unwrap();
        assert!(d0g.summary().contains("media_errors"), "{}", d0g.summary());
        let v = t.view();
        let d0v = v.sources.iter().find(|s| s.source == "drive/d0").unwrap();
        assert_eq!(d0v.counters.errors(telemetry::ErrorKind::Media), 5);
        assert_eq!(d0v.latest.unwrap().errors(telemetry::ErrorKind::Media), 1);
        // The healthy neighbour.
        let d1g = a.iter().find(|a| a.source == "drive/d1").unwrap();
        assert_eq!(d1g.grade, Grade::Ok);
        // Since when, dated on the wall clock given: failing since second 12, ok since the
        // first grading (second 1); the clock is at second 20.
        let p = t.predictions(1_000_000);
        assert_eq!(p["d0"].grade, Grade::Failing);
        assert_eq!(p["d0"].since_unix_ms, Some(1_000_000 - 8_000));
        assert!(
            p["d0"].reason.starts_with("media_errors: "),
            "{:?}",
            p["d0"]
        );
        assert_eq!(p["d1"].since_unix_ms, Some(1_000_000 - 19_000));
        assert_eq!(p["d1"].reason, "");
        // The extended SMART page carries the grade.
        t.namespace_meter("nqn.x", 1, d0);
        let page = TelemetrySource::ext_smart(&t, "nqn.x", None);
        let drive = page
            .records
            .iter()
            .find(|r| r.name == "d0" && r.nsid == 0)
            .unwrap();
        assert_eq!(drive.grade, Some(Grade::Failing as u8));
        assert_eq!(drive.errors[0], 5);
    }
}
