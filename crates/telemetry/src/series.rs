//! Time series with bounded retention.
//!
//! Each source (a drive, a namespace, a volume member) has two fixed-size rings of
//! [`Sample`]s: fine samples (one per [`Sampler::tick`], normally one a second) and coarse
//! samples (one per `coarse_every_ms`, normally a minute). With the default [`Retention`]
//! that is 600 fine samples (10 minutes) and 1440 coarse ones (24 hours): a sample is at
//! most 224 bytes (checked by a test), so a source holds at most 2040 x 224 bytes, about
//! 450 KiB, and the store at most `max_sources` sources (a new source past that is
//! refused, never grown into).
//!
//! Time is given to the sampler by its caller (milliseconds on any monotonic clock): the
//! store never reads a clock itself, so tests replay any history instantly.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::counters::{ErrorKind, OpClass, TelemetrySnapshot};
use crate::hist::HistogramSnapshot;
use crate::media::MediaReading;

/// What one interval of one source looked like.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// End of the interval, ms on the sampler's clock.
    pub t_ms: u64,
    pub interval_ms: u64,
    /// Successful operations per [`OpClass`] in the interval.
    pub ops: [u64; 4],
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Failed operations per [`ErrorKind`] in the interval.
    pub errors: [u64; 3],
    /// Mean and 99th percentile latency per [`OpClass`], µs (0: no operation).
    pub mean_us: [u64; 4],
    pub p99_us: [u64; 4],
    /// Reads and writes together: the figures peers are compared on.
    pub data_mean_us: u64,
    pub data_p99_us: u64,
    /// Average queue depth seen by I/Os arriving in the interval, and the depth at its end.
    pub queue_depth_avg: f64,
    pub in_flight: u64,
    pub media: MediaReading,
}

impl Sample {
    /// Data operations (reads and writes) per second.
    pub fn data_iops(&self) -> f64 {
        if self.interval_ms == 0 {
            return 0.0;
        }
        (self.ops[OpClass::Read as usize] + self.ops[OpClass::Write as usize]) as f64 * 1000.0
            / self.interval_ms as f64
    }

    pub fn data_ops(&self) -> u64 {
        self.ops[OpClass::Read as usize] + self.ops[OpClass::Write as usize]
    }

    pub fn errors(&self, kind: ErrorKind) -> u64 {
        self.errors[kind as usize]
    }

    /// The sample of what happened between `a` (at `a_ms`) and `b` (at `b_ms`).
    pub fn between(
        a: &TelemetrySnapshot,
        a_ms: u64,
        b: &TelemetrySnapshot,
        b_ms: u64,
        media: MediaReading,
    ) -> Sample {
        let d = |x: u64, y: u64| if y >= x { y - x } else { y };
        let lat: [HistogramSnapshot; 4] =
            std::array::from_fn(|i| b.latency[i].since(&a.latency[i]));
        let mut data = lat[OpClass::Read as usize].clone();
        data.merge(&lat[OpClass::Write as usize]);
        let qd_samples = d(a.qd_samples, b.qd_samples);
        Sample {
            t_ms: b_ms,
            interval_ms: b_ms.saturating_sub(a_ms),
            ops: std::array::from_fn(|i| d(a.ops[i], b.ops[i])),
            read_bytes: d(a.read_bytes, b.read_bytes),
            write_bytes: d(a.write_bytes, b.write_bytes),
            errors: std::array::from_fn(|i| d(a.errors[i], b.errors[i])),
            mean_us: std::array::from_fn(|i| lat[i].mean_us()),
            p99_us: std::array::from_fn(|i| lat[i].quantile_us(0.99)),
            data_mean_us: data.mean_us(),
            data_p99_us: data.quantile_us(0.99),
            queue_depth_avg: if qd_samples == 0 {
                0.0
            } else {
                d(a.qd_sum, b.qd_sum) as f64 / qd_samples as f64
            },
            in_flight: b.in_flight,
            media,
        }
    }
}

/// How much history is kept per source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    pub fine_samples: usize,
    pub coarse_samples: usize,
    pub coarse_every_ms: u64,
    pub max_sources: usize,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            fine_samples: 600,
            coarse_samples: 1440,
            coarse_every_ms: 60_000,
            max_sources: 1024,
        }
    }
}

/// A ring of at most `cap` samples (oldest dropped first).
#[derive(Clone, Debug, Default)]
struct Ring {
    cap: usize,
    items: VecDeque<Sample>,
}

impl Ring {
    fn new(cap: usize) -> Ring {
        Ring {
            cap,
            items: VecDeque::with_capacity(cap),
        }
    }

    fn push(&mut self, s: Sample) {
        if self.cap == 0 {
            return;
        }
        if self.items.len() == self.cap {
            self.items.pop_front();
        }
        self.items.push_back(s);
    }
}

#[derive(Debug)]
struct Source {
    fine: Ring,
    coarse: Ring,
    last: (u64, TelemetrySnapshot),
    coarse_start: (u64, TelemetrySnapshot),
    /// Labels that say what the source is (drive, node, volume, member slot).
    labels: BTreeMap<String, String>,
}

/// The series of every source.
#[derive(Debug, Default)]
pub struct SeriesStore {
    retention: Retention,
    sources: BTreeMap<String, Source>,
}

/// A serializable copy of one source's series (for the API and dashboards).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeriesView {
    pub source: String,
    pub labels: BTreeMap<String, String>,
    pub retention: Retention,
    pub fine: Vec<Sample>,
    pub coarse: Vec<Sample>,
}

impl SeriesStore {
    pub fn new(retention: Retention) -> SeriesStore {
        SeriesStore {
            retention,
            sources: BTreeMap::new(),
        }
    }

    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// Records source `key`'s counters as of `now_ms`. The first reading of a source only
    /// sets its baseline. Returns false if the store is full and `key` is new.
    pub fn record(
        &mut self,
        key: &str,
        labels: &BTreeMap<String, String>,
        now_ms: u64,
        snap: &TelemetrySnapshot,
        media: MediaReading,
    ) -> bool {
        let r = self.retention;
        let Some(src) = self.sources.get_mut(key) else {
            if self.sources.len() >= r.max_sources {
                return false;
            }
            self.sources.insert(
                key.to_string(),
                Source {
                    fine: Ring::new(r.fine_samples),
                    coarse: Ring::new(r.coarse_samples),
                    last: (now_ms, snap.clone()),
                    coarse_start: (now_ms, snap.clone()),
                    labels: labels.clone(),
                },
            );
            return true;
        };
        if now_ms <= src.last.0 {
            return true; // Not later than the last reading: nothing to add.
        }
        src.labels.clone_from(labels);
        src.fine.push(Sample::between(
            &src.last.1,
            src.last.0,
            snap,
            now_ms,
            media,
        ));
        src.last = (now_ms, snap.clone());
        if now_ms.saturating_sub(src.coarse_start.0) >= r.coarse_every_ms {
            let (t0, s0) = &src.coarse_start;
            src.coarse
                .push(Sample::between(s0, *t0, snap, now_ms, media));
            src.coarse_start = (now_ms, snap.clone());
        }
        true
    }

    /// Forgets sources not in `keep` (drives that went away).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.sources.retain(|k, _| keep(k));
    }

    pub fn sources(&self) -> impl Iterator<Item = &str> {
        self.sources.keys().map(String::as_str)
    }

    pub fn labels(&self, key: &str) -> Option<&BTreeMap<String, String>> {
        self.sources.get(key).map(|s| &s.labels)
    }

    /// Fine samples of `key` with `t_ms > since_ms`, oldest first.
    pub fn fine_since(&self, key: &str, since_ms: u64) -> Vec<Sample> {
        self.sources
            .get(key)
            .map(|s| {
                s.fine
                    .items
                    .iter()
                    .filter(|x| x.t_ms > since_ms)
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The latest fine sample of `key`.
    pub fn latest(&self, key: &str) -> Option<Sample> {
        self.sources.get(key)?.fine.items.back().copied()
    }

    pub fn view(&self, key: &str) -> Option<SeriesView> {
        let s = self.sources.get(key)?;
        Some(SeriesView {
            source: key.to_string(),
            labels: s.labels.clone(),
            retention: self.retention,
            fine: s.fine.items.iter().copied().collect(),
            coarse: s.coarse.items.iter().copied().collect(),
        })
    }

    /// Every source's series.
    pub fn views(&self) -> Vec<SeriesView> {
        self.sources.keys().filter_map(|k| self.view(k)).collect()
    }
}

/// Feeds a [`SeriesStore`]: call [`Sampler::tick`] with the time and each source's reading.
pub struct Sampler;

impl Sampler {
    /// One round: records every `(key, labels, snapshot, media)` at `now_ms` and forgets
    /// sources that are no longer given.
    pub fn tick<'a>(
        store: &mut SeriesStore,
        now_ms: u64,
        readings: impl IntoIterator<
            Item = (
                &'a str,
                &'a BTreeMap<String, String>,
                &'a TelemetrySnapshot,
                MediaReading,
            ),
        >,
    ) {
        let mut seen: Vec<&str> = Vec::new();
        for (key, labels, snap, media) in readings {
            store.record(key, labels, now_ms, snap, media);
            seen.push(key);
        }
        store.retain(|k| seen.contains(&k));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::counters::DeviceTelemetry;

    #[test]
    fn rings_are_bounded_and_coarse_samples_sum_the_fine_ones() {
        let mut store = SeriesStore::new(Retention {
            fine_samples: 5,
            coarse_samples: 2,
            coarse_every_ms: 3_000,
            max_sources: 1,
        });
        let t = DeviceTelemetry::new();
        let labels = BTreeMap::new();
        for sec in 0..=20u64 {
            for _ in 0..sec {
                t.begin();
                t.end(OpClass::Read, 4096, 1_000_000, None);
            }
            assert!(store.record(
                "d0",
                &labels,
                sec * 1000,
                &t.snapshot(),
                MediaReading::default()
            ));
        }
        assert!(!store.record("d1", &labels, 0, &t.snapshot(), MediaReading::default()));
        let v = store.view("d0").unwrap();
        assert_eq!(v.fine.len(), 5);
        assert_eq!(v.fine.last().unwrap().t_ms, 20_000);
        assert_eq!(v.fine.last().unwrap().ops[0], 20);
        assert_eq!(v.fine.last().unwrap().mean_us[0], 1000);
        assert_eq!(v.coarse.len(), 2);
        // Coarse samples end at 15 s and 18 s: 16+17+18 reads in the last.
        assert_eq!(v.coarse[1].t_ms, 18_000);
        assert_eq!(v.coarse[1].ops[0], 16 + 17 + 18);
        assert_eq!(v.coarse[1].interval_ms, 3_000);
        assert_eq!(store.fine_since("d0", 18_000).len(), 2);
        let json = serde_json::to_string(&store.views()).unwrap();
        assert!(json.contains("\"data_p99_us\""));
        Sampler::tick(&mut store, 21_000, []);
        assert_eq!(store.sources().count(), 0);
    }
}

#[cfg(test)]
mod size {
    /// The memory bound the module doc promises rests on this.
    #[test]
    fn sample_size() {
        assert!(std::mem::size_of::<super::Sample>() <= 224);
    }
}
