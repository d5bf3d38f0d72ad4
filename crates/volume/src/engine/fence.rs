//! Fencing: once a member answers Reservation Conflict (another host owns the volume
//! now), or the owner detaches the volume, or its handle is dropped, the volume stops
//! touching its members at once and for good. No member I/O is issued after that (every
//! member I/O helper checks first), nothing is written (no superblock, bitmap or journal
//! update, no member failed), and volume I/O fails with `VolumeError::Fenced`, which is
//! `BlockError::Unavailable` for the `BlockDevice` user.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use blockdev::BlockError;
use tokio::sync::watch;
use tracing::{debug, warn};

use super::Inner;
use crate::error::VolumeError;

/// The fence of one assembled volume. Set once, never cleared: a fenced volume is
/// assembled again (by whichever host owns it) instead of being revived.
pub(crate) struct Fence {
    /// No member I/O after this is set.
    halted: AtomicBool,
    /// Why, set before `halted`.
    reason: OnceLock<String>,
    /// What `Volume::fenced` hands out: true once fenced (not for a dropped handle).
    tx: watch::Sender<bool>,
}

impl Fence {
    pub fn new() -> Fence {
        Fence {
            halted: AtomicBool::new(false),
            reason: OnceLock::new(),
            tx: watch::Sender::new(false),
        }
    }

    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }

    pub fn reason(&self) -> Option<&str> {
        if self.halted.load(Ordering::Acquire) {
            self.reason.get().map(String::as_str)
        } else {
            None
        }
    }
}

/// Whether a member error means this host was fenced off the member.
pub(crate) fn is_conflict(e: &BlockError) -> bool {
    matches!(e, BlockError::ReservationConflict)
}

impl Inner {
    /// True once the volume is fenced, detached or its handle dropped.
    pub fn is_halted(&self) -> bool {
        self.fence.halted.load(Ordering::Acquire)
    }

    /// Stops all member I/O of the volume now (the first reason sticks). `notify`
    /// publishes it on the `fenced` watch. Background work is told to stop; what it
    /// still tries fails at the member I/O check without writing.
    pub fn halt(&self, reason: String, notify: bool) {
        let first = self.fence.reason.set(reason).is_ok();
        self.fence.halted.store(true, Ordering::Release);
        if notify {
            self.fence
                .tx
                .send_if_modified(|f| !std::mem::replace(f, true));
        }
        if !first {
            return;
        }
        let why = self.fence.reason.get().map_or("", String::as_str);
        if notify {
            warn!(volume = %self.name, reason = why, "volume fenced: no more member I/O");
        } else {
            // A dropped handle: routine after stop(), like a crash otherwise.
            debug!(volume = %self.name, reason = why, "volume halted: no more member I/O");
        }
        let mut t = self.tasks();
        if let Some(r) = &t.rebuild {
            r.cancel.store(true, Ordering::Release);
        }
        if let Some(c) = &t.scrub_cancel {
            c.store(true, Ordering::Release);
        }
        if notify {
            if t.notes.len() >= 64 {
                t.notes.remove(0);
            }
            t.notes.push(format!("fenced: {why}"));
        }
    }

    /// Fences the volume because `member` (device `name`) answered `err`, if that is a
    /// reservation conflict. Returns whether it was.
    pub fn fence_on_conflict(&self, member: Option<usize>, name: &str, err: &BlockError) -> bool {
        if !is_conflict(err) {
            return false;
        }
        let who = match member {
            Some(m) => format!("member {m} ({name})"),
            None => name.to_string(),
        };
        self.halt(
            format!("{who} reports a reservation conflict: another host owns the volume"),
            true,
        );
        true
    }

    pub fn fence_reason(&self) -> String {
        self.fence
            .reason()
            .unwrap_or("no more member I/O")
            .to_string()
    }

    /// What volume operations fail with once halted.
    pub fn fenced_error(&self) -> VolumeError {
        VolumeError::Fenced {
            name: self.name.clone(),
            reason: self.fence_reason(),
        }
    }

    /// What a member I/O that was not issued because the volume is halted fails with.
    pub fn fenced_member_error(&self) -> BlockError {
        BlockError::Unavailable(format!("volume fenced: {}", self.fence_reason()))
    }

    /// `Err` (the I/O must not be issued) once halted.
    pub fn member_io_allowed(&self) -> std::result::Result<(), BlockError> {
        if self.is_halted() {
            Err(self.fenced_member_error())
        } else {
            Ok(())
        }
    }

    pub fn subscribe_fenced(&self) -> watch::Receiver<bool> {
        self.fence.subscribe()
    }
}
