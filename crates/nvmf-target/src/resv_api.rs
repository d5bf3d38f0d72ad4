//! Seam for NVMe reservations: one [`Reservations`] object per namespace.
//!
//! The target dispatches Reservation Register / Acquire / Release / Report to it and calls
//! [`Reservations::check_access`] before every other I/O command. The full state machine
//! (registrants, holder, types, persistence through power loss) implements this trait;
//! [`NoReservations`] is the stand-in used until one is installed.

use nvme_proto::{Command, Status};

/// The host a command comes from.
#[derive(Clone, Copy, Debug)]
pub struct HostRef<'a> {
    /// Host Identifier from Connect (or Set Features Host Identifier).
    pub hostid: [u8; 16],
    pub hostnqn: &'a str,
    pub cntlid: u16,
}

/// Side effects of a reservation command that the target acts on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResvEffects {
    /// Host IDs whose registrations were preempted with "preempt and abort": their
    /// outstanding commands on this namespace may be aborted.
    pub aborted_hosts: Vec<[u8; 16]>,
    /// Reservation notifications to post: (host ID, log page type: 1 registration
    /// preempted, 2 reservation released, 3 reservation preempted). The target adds a
    /// Reservation Notification log entry and raises the AER on that host's controllers
    /// unless masked.
    pub notify: Vec<([u8; 16], u8)>,
}

/// Per-namespace reservation state machine.
///
/// `check_access` is on the I/O fast path: keep it cheap when no reservation is held.
/// The other methods receive the raw SQE and the command's host data so that the
/// implementation decodes them with `nvme_proto`'s reservation layouts.
pub trait Reservations: Send + Sync + 'static {
    /// Whether `host` may run I/O command `opcode` now; `Err(Status::RESERVATION_CONFLICT)`
    /// otherwise.
    fn check_access(&self, host: &HostRef<'_>, opcode: u8) -> Result<(), Status>;
    /// Reservation Register (opcode 0x0D); `data` holds CRKEY and NRKEY (16 bytes).
    fn register(
        &self,
        host: &HostRef<'_>,
        cmd: &Command,
        data: &[u8],
    ) -> Result<ResvEffects, Status>;
    /// Reservation Acquire (opcode 0x11); `data` holds CRKEY and PRKEY (16 bytes).
    fn acquire(
        &self,
        host: &HostRef<'_>,
        cmd: &Command,
        data: &[u8],
    ) -> Result<ResvEffects, Status>;
    /// Reservation Release (opcode 0x15); `data` holds CRKEY (8 bytes).
    fn release(
        &self,
        host: &HostRef<'_>,
        cmd: &Command,
        data: &[u8],
    ) -> Result<ResvEffects, Status>;
    /// Reservation Report (opcode 0x0E): the report data structure, at most `max_bytes`.
    fn report(
        &self,
        host: &HostRef<'_>,
        cmd: &Command,
        max_bytes: usize,
    ) -> Result<Vec<u8>, Status>;
    /// RESCAP byte of Identify Namespace (reservation types supported, PTPL); 0 when
    /// reservations are not supported.
    fn capabilities(&self) -> u8 {
        0
    }
    /// Reservation Persistence feature (Get Features 0x83): persist through power loss.
    fn persist_through_power_loss(&self) -> bool {
        false
    }
    /// Set Features 0x83.
    fn set_persist_through_power_loss(&self, _ptpl: bool) -> Result<(), Status> {
        Err(Status::FEATURE_NOT_CHANGEABLE.dnr())
    }
    /// Called when a namespace's controller association with this host ends (no-op by
    /// default; registrations persist across connections).
    fn host_disconnected(&self, _host: &HostRef<'_>) {}
}

/// Stand-in: all I/O allowed, reservation commands answered Invalid Opcode.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoReservations;

impl Reservations for NoReservations {
    fn check_access(&self, _host: &HostRef<'_>, _opcode: u8) -> Result<(), Status> {
        Ok(())
    }
    fn register(&self, _: &HostRef<'_>, _: &Command, _: &[u8]) -> Result<ResvEffects, Status> {
        Err(Status::INVALID_OPCODE.dnr())
    }
    fn acquire(&self, _: &HostRef<'_>, _: &Command, _: &[u8]) -> Result<ResvEffects, Status> {
        Err(Status::INVALID_OPCODE.dnr())
    }
    fn release(&self, _: &HostRef<'_>, _: &Command, _: &[u8]) -> Result<ResvEffects, Status> {
        Err(Status::INVALID_OPCODE.dnr())
    }
    fn report(&self, _: &HostRef<'_>, _: &Command, _: usize) -> Result<Vec<u8>, Status> {
        Err(Status::INVALID_OPCODE.dnr())
    }
}

/// Builds the reservation object of a new namespace when its config names none.
pub type ReservationsFactory = dyn Fn(&str, u32) -> std::sync::Arc<dyn Reservations> + Send + Sync;
