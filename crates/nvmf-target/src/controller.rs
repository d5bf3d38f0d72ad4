//! A dynamic controller: the association of one host with one subsystem, made by an admin
//! queue Connect and joined by I/O queue Connects. Holds the register state, features,
//! asynchronous events, logs and the keep-alive watchdog.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvme_proto::features::{AerEvent, aec, aer_notice, aer_type};
use tokio::sync::Notify;

use crate::subsystem::Subsystem;
use crate::sync::lock;
use crate::target::ListenerInfo;
use crate::transport::handle::ConnHandle;

/// One error log entry (semantic; encoded with nvme-proto's log layout).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ErrorRecord {
    pub error_count: u64,
    pub sqid: u16,
    pub cid: u16,
    /// Status field (without phase bit) as in the CQE.
    pub status_field: u16,
    pub param_error_location: u16,
    pub lba: u64,
    pub nsid: u32,
}

/// One reservation notification log entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ResvNotice {
    pub log_count: u64,
    pub log_type: u8,
    pub nsid: u32,
}

/// Mutable controller state behind one lock (admin path only; the I/O path does not take it).
pub(crate) struct CtrlState {
    pub cc: u32,
    pub csts: u32,
    pub io_queues_granted: u16,
    pub aec: u32,
    pub resv_mask: u32,
    pub vwc_enabled: bool,
    pub kato_ms: u32,
    pub pending_events: VecDeque<AerEvent>,
    /// Event log pages reported but not yet read with RAE=0: further events of that page
    /// are held back (NVMe base 5.2: masked until the log is read).
    pub masked_logs: BTreeSet<u8>,
    pub changed_ns: BTreeSet<u32>,
    pub changed_ns_overflow: bool,
    pub error_log: VecDeque<ErrorRecord>,
    pub error_count: u64,
    pub resv_log: VecDeque<ResvNotice>,
    pub resv_log_count: u64,
    pub io_queues: BTreeMap<u16, Arc<ConnHandle>>,
    /// The Telemetry Host-Initiated data captured last (generation, whole page): a host
    /// reads it in pieces, so it stays put until the next capture.
    pub telemetry_capture: Option<(u8, Vec<u8>)>,
}

pub(crate) const ERROR_LOG_ENTRIES: usize = 64;
pub(crate) const MAX_PENDING_EVENTS: usize = 16;
const RESV_LOG_ENTRIES: usize = 64;

pub(crate) struct Controller {
    pub cntlid: u16,
    pub subsys: Arc<Subsystem>,
    pub hostnqn: String,
    pub hostid: [u8; 16],
    pub admin: Arc<ConnHandle>,
    pub state: Mutex<CtrlState>,
    /// Wakes AER futures when an event is queued.
    pub events: Notify,
    pub dead: AtomicBool,
    /// Millis since `epoch` of the last keep-alive.
    last_keepalive_ms: AtomicU64,
    epoch: Instant,
    /// Asynchronous Event Request commands outstanding (≤ AERL + 1).
    pub aer_outstanding: AtomicU32,
    /// Abort commands waiting for another queue's answer (≤ ACL + 1).
    pub aborts_outstanding: AtomicU32,
    /// The port the admin queue connected through: its ANA states apply to this
    /// controller.
    pub listener: Arc<ListenerInfo>,
    /// The I/O command sets the controller runs, as a CSI vector (bit n = CSI n), set
    /// when CC.EN goes to 1 (CC.CSS 000b: NVM; 110b: NVM and KV). Namespaces of other
    /// command sets are inactive for it.
    pub io_command_sets: AtomicU64,
}

/// The admin queue a controller is created on: its connection and the listener it came
/// through.
pub(crate) struct AdminQueue {
    pub conn: Arc<ConnHandle>,
    pub listener: Arc<ListenerInfo>,
}

impl Controller {
    pub fn new(
        cntlid: u16,
        subsys: Arc<Subsystem>,
        hostnqn: String,
        hostid: [u8; 16],
        admin_queue: AdminQueue,
        kato_ms: u32,
        io_queues_granted: u16,
    ) -> Self {
        let AdminQueue {
            conn: admin,
            listener,
        } = admin_queue;
        Controller {
            cntlid,
            subsys,
            hostnqn,
            hostid,
            admin,
            state: Mutex::new(CtrlState {
                cc: 0,
                csts: 0,
                io_queues_granted,
                aec: 0,
                resv_mask: 0,
                vwc_enabled: true,
                kato_ms,
                pending_events: VecDeque::new(),
                masked_logs: BTreeSet::new(),
                changed_ns: BTreeSet::new(),
                changed_ns_overflow: false,
                error_log: VecDeque::new(),
                error_count: 0,
                resv_log: VecDeque::new(),
                telemetry_capture: None,
                resv_log_count: 0,
                io_queues: BTreeMap::new(),
            }),
            events: Notify::new(),
            dead: AtomicBool::new(false),
            last_keepalive_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            aer_outstanding: AtomicU32::new(0),
            aborts_outstanding: AtomicU32::new(0),
            listener,
            io_command_sets: AtomicU64::new(0),
        }
    }

    /// Whether namespaces of command set `csi` are active for this controller.
    pub fn runs_command_set(&self, csi: u8) -> bool {
        self.io_command_sets.load(Ordering::Acquire) & nvme_proto::identify::csi::vector_bit(csi)
            != 0
    }

    /// Whether `ns` is an active namespace of this controller: attached to its host and
    /// of a command set it was enabled with.
    pub fn is_active(&self, ns: &crate::namespace::Namespace) -> bool {
        ns.is_attached_to(&self.hostnqn) && self.runs_command_set(ns.csi())
    }

    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Tears the controller down: every queue's connection closes.
    pub fn kill(&self) {
        if self.dead.swap(true, Ordering::AcqRel) {
            return;
        }
        self.admin.kill();
        let queues: Vec<_> = lock(&self.state).io_queues.values().cloned().collect();
        for q in queues {
            q.kill();
        }
        self.events.notify_waiters();
        tracing::debug!(cntlid = self.cntlid, subsys = %self.subsys.nqn, "controller torn down");
    }

    pub fn touch_keepalive(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_keepalive_ms.store(ms, Ordering::Relaxed);
    }

    pub fn kato_ms(&self) -> u32 {
        lock(&self.state).kato_ms
    }

    /// Queues an asynchronous event unless disabled or masked, and wakes AER waiters.
    pub fn post_event(&self, ev: AerEvent) {
        {
            let mut st = lock(&self.state);
            let enabled = match (ev.event_type, ev.info) {
                (aer_type::NOTICE, aer_notice::NS_ATTRIBUTE_CHANGED) => {
                    st.aec & aec::NS_ATTRIBUTE != 0
                }
                (aer_type::NOTICE, aer_notice::DISCOVERY_LOG_CHANGE) => {
                    st.aec & aec::DISCOVERY_LOG_CHANGE != 0
                }
                (aer_type::NOTICE, aer_notice::ANA_CHANGE) => st.aec & aec::ANA_CHANGE != 0,
                _ => true,
            };
            if !enabled || st.masked_logs.contains(&ev.log_page) {
                return;
            }
            if st.pending_events.iter().any(|e| e.log_page == ev.log_page) {
                return;
            }
            if st.pending_events.len() >= MAX_PENDING_EVENTS {
                return;
            }
            st.pending_events.push_back(ev);
        }
        self.events.notify_waiters();
    }

    /// Takes the next event for an AER command; the event's log page is masked until read.
    pub fn take_event(&self) -> Option<AerEvent> {
        let mut st = lock(&self.state);
        let ev = st.pending_events.pop_front()?;
        st.masked_logs.insert(ev.log_page);
        Some(ev)
    }

    /// A log page was read with RAE = 0: its events may be reported again.
    pub fn log_read(&self, log_page: u8) {
        lock(&self.state).masked_logs.remove(&log_page);
    }

    /// Records a changed namespace and raises the namespace-attribute notice.
    pub fn namespace_changed(&self, nsid: u32) {
        {
            let mut st = lock(&self.state);
            if st.changed_ns.len() >= 1024 {
                st.changed_ns_overflow = true;
            } else {
                st.changed_ns.insert(nsid);
            }
        }
        self.post_event(AerEvent::ns_attribute_changed());
    }

    /// An ANA state of this controller's port changed: raise the ANA change notice.
    pub fn ana_changed(&self) {
        self.post_event(AerEvent::ana_change());
    }

    pub fn discovery_changed(&self) {
        self.post_event(AerEvent::discovery_log_change());
    }

    pub fn add_error(&self, mut rec: ErrorRecord) -> u64 {
        let mut st = lock(&self.state);
        st.error_count += 1;
        rec.error_count = st.error_count;
        if st.error_log.len() >= ERROR_LOG_ENTRIES {
            st.error_log.pop_back();
        }
        // Newest first, as the log page returns them.
        st.error_log.push_front(rec);
        st.error_count
    }

    pub fn add_resv_notice(&self, log_type: u8, nsid: u32) {
        let post = {
            let mut st = lock(&self.state);
            // Mask bits: 1 registration preempted, 2 released, 3 preempted.
            if st.resv_mask & (1 << log_type) != 0 {
                false
            } else {
                st.resv_log_count += 1;
                let log_count = st.resv_log_count;
                if st.resv_log.len() >= RESV_LOG_ENTRIES {
                    st.resv_log.pop_front();
                }
                st.resv_log.push_back(ResvNotice {
                    log_count,
                    log_type,
                    nsid,
                });
                true
            }
        };
        if post {
            self.post_event(AerEvent::reservation_log_available());
        }
    }

    /// Starts the keep-alive watchdog: the controller dies when no Keep Alive arrives
    /// within KATO (checked at KATO/4 granularity, ≥ 50 ms).
    pub fn spawn_watchdog(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        self.touch_keepalive();
        tokio::spawn(async move {
            loop {
                let Some(ctrl) = weak.upgrade() else { return };
                if ctrl.is_dead() {
                    return;
                }
                let kato = u64::from(ctrl.kato_ms());
                if kato == 0 {
                    drop(ctrl);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
                let now = ctrl.epoch.elapsed().as_millis() as u64;
                let last = ctrl.last_keepalive_ms.load(Ordering::Relaxed);
                if now.saturating_sub(last) > kato {
                    tracing::info!(cntlid = ctrl.cntlid, subsys = %ctrl.subsys.nqn,
                        host = %ctrl.hostnqn, "keep-alive timeout: tearing the controller down");
                    ctrl.kill();
                    return;
                }
                drop(ctrl);
                tokio::time::sleep(Duration::from_millis((kato / 4).max(50))).await;
            }
        });
    }
}
