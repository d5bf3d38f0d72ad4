//! Helpers: hosts, command builders over `nvme_proto`'s layouts, a recording store.

use std::io;
use std::sync::Mutex;

use nvme_proto::reservation::{
    AcquireData, RegisterData, ReservationAcquire, ReservationRegister, ReservationRelease,
    ReservationReport, ReservationStatus, rrega,
};

use super::super::*;

pub const A: [u8; 16] = [0xA; 16];
pub const B: [u8; 16] = [0xB; 16];
pub const C: [u8; 16] = [0xC; 16];
pub const D: [u8; 16] = [0xD; 16];

pub fn host(id: [u8; 16]) -> HostRef<'static> {
    HostRef {
        hostid: id,
        hostnqn: "nqn.2014-08.org.nvmexpress:uuid:test",
        cntlid: 1,
    }
}

pub fn none() -> ResvEffects {
    ResvEffects::default()
}

pub fn register_cmd(rrega: u8, iekey: bool, cptpl: u8) -> Command {
    ReservationRegister {
        rrega,
        iekey,
        cptpl,
    }
    .to_command(1, 1)
}

pub fn acquire_cmd(racqa: u8, rtype: u8) -> Command {
    ReservationAcquire {
        racqa,
        iekey: false,
        rtype,
    }
    .to_command(1, 1)
}

pub fn acquire_data(crkey: u64, prkey: u64) -> [u8; 16] {
    AcquireData { crkey, prkey }.to_bytes()
}

pub fn release_cmd(rrela: u8, rtype: u8) -> Command {
    ReservationRelease {
        rrela,
        iekey: false,
        rtype,
    }
    .to_command(1, 1)
}

/// A Report asking for `len_bytes` (a multiple of 4).
pub fn report_cmd(len_bytes: u32, eds: bool) -> Command {
    ReservationReport {
        numd: len_bytes / 4 - 1,
        eds,
    }
    .to_command(1, 1)
}

/// The state under test, driven through the [`Reservations`] trait as the target does.
pub struct T {
    pub s: ReservationState,
}

impl T {
    pub fn new() -> T {
        T::with(ReservationState::default())
    }
    pub fn with(s: ReservationState) -> T {
        T { s }
    }
    pub fn reg(
        &self,
        h: [u8; 16],
        rrega: u8,
        iekey: bool,
        cptpl: u8,
        crkey: u64,
        nrkey: u64,
    ) -> Result<ResvEffects, Status> {
        let data = RegisterData { crkey, nrkey }.to_bytes();
        self.s
            .register(&host(h), &register_cmd(rrega, iekey, cptpl), &data)
    }
    pub fn register(&self, h: [u8; 16], key: u64) -> Result<ResvEffects, Status> {
        self.reg(h, rrega::REGISTER, false, 0, 0, key)
    }
    pub fn acq(
        &self,
        h: [u8; 16],
        racqa: u8,
        rtype: u8,
        crkey: u64,
        prkey: u64,
    ) -> Result<ResvEffects, Status> {
        self.s.acquire(
            &host(h),
            &acquire_cmd(racqa, rtype),
            &acquire_data(crkey, prkey),
        )
    }
    pub fn rel(
        &self,
        h: [u8; 16],
        rrela: u8,
        rtype: u8,
        crkey: u64,
    ) -> Result<ResvEffects, Status> {
        self.s
            .release(&host(h), &release_cmd(rrela, rtype), &crkey.to_le_bytes())
    }
    pub fn report_bytes(
        &self,
        numd_bytes: u32,
        eds: bool,
        max_bytes: usize,
    ) -> Result<Vec<u8>, Status> {
        self.s
            .report(&host(A), &report_cmd(numd_bytes, eds), max_bytes)
    }
    pub fn report(&self) -> ReservationStatus {
        let b = self.report_bytes(64 * 1024, true, 64 * 1024).unwrap();
        ReservationStatus::decode(&b, true).unwrap()
    }
    pub fn can(&self, h: [u8; 16], op: u8) -> bool {
        self.s.check_access(&host(h), op).is_ok()
    }
    pub fn generation(&self) -> u32 {
        self.report().generation
    }
    pub fn rtype(&self) -> u8 {
        self.report().rtype
    }
    pub fn holder(&self) -> Option<[u8; 16]> {
        self.s.snapshot().holder
    }
    pub fn keys(&self) -> Vec<([u8; 16], u64)> {
        self.report()
            .registrants
            .iter()
            .map(|r| (r.hostid, r.rkey))
            .collect()
    }
}

/// A store that keeps every snapshot it was given, and fails on demand.
#[derive(Default)]
pub struct MemStore {
    pub saved: Mutex<Vec<ReservationSnapshot>>,
    pub fail: AtomicBool,
}

impl MemStore {
    pub fn last(&self) -> Option<ReservationSnapshot> {
        self.saved.lock().unwrap().last().cloned()
    }
    pub fn count(&self) -> usize {
        self.saved.lock().unwrap().len()
    }
}

impl ReservationStore for MemStore {
    fn save(&self, snapshot: &ReservationSnapshot) -> Result<(), io::Error> {
        if self.fail.load(Ordering::Relaxed) {
            return Err(io::Error::other("injected save failure"));
        }
        self.saved.lock().unwrap().push(snapshot.clone());
        Ok(())
    }
}
