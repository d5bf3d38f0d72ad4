//! Reservation commands on a namespace: thin wrappers over the nvme-proto layouts.
//! A refused command is `HostError::Status` with Reservation Conflict (SCT 0, SC 0x83).

use blockdev::IoBuf;
use nvme_proto::Command;
use nvme_proto::reservation::{
    AcquireData, RegisterData, ReleaseData, ReservationAcquire, ReservationRegister,
    ReservationRelease, ReservationReport, ReservationStatus, ReservationStatusHeader,
    ReservationType,
};

use super::RemoteNamespace;
use crate::error::{HostError, Result};
use crate::queue::Payload;

impl RemoteNamespace {
    async fn send_with_data(&self, cmd: Command, data: &[u8]) -> Result<()> {
        let q = self.ctrl.pick_io_queue()?;
        q.submit_checked(cmd, Payload::write(IoBuf::from_slice(data)))
            .await?;
        Ok(())
    }

    /// Reservation Register: `rrega` is one of `nvme_proto::reservation::rrega`
    /// (register, unregister, replace); `cptpl` one of `cptpl`.
    pub async fn reservation_register(
        &self,
        rrega: u8,
        crkey: u64,
        nrkey: u64,
        iekey: bool,
        cptpl: u8,
    ) -> Result<()> {
        let cmd = ReservationRegister {
            rrega,
            iekey,
            cptpl,
        }
        .to_command(0, self.nsid);
        self.send_with_data(cmd, &RegisterData { crkey, nrkey }.to_bytes())
            .await
    }

    /// Reservation Acquire: `racqa` is acquire, preempt or preempt-and-abort
    /// (`nvme_proto::reservation::racqa`).
    pub async fn reservation_acquire(
        &self,
        racqa: u8,
        rtype: ReservationType,
        crkey: u64,
        prkey: u64,
        iekey: bool,
    ) -> Result<()> {
        let cmd = ReservationAcquire {
            racqa,
            iekey,
            rtype: rtype.as_u8(),
        }
        .to_command(0, self.nsid);
        self.send_with_data(cmd, &AcquireData { crkey, prkey }.to_bytes())
            .await
    }

    /// Reservation Release: `rrela` is release or clear (`nvme_proto::reservation::rrela`).
    pub async fn reservation_release(
        &self,
        rrela: u8,
        rtype: ReservationType,
        crkey: u64,
        iekey: bool,
    ) -> Result<()> {
        let cmd = ReservationRelease {
            rrela,
            iekey,
            rtype: rtype.as_u8(),
        }
        .to_command(0, self.nsid);
        self.send_with_data(cmd, &ReleaseData { crkey }.to_bytes())
            .await
    }

    /// Reservation Report with the extended data structure (128-bit host IDs, required on
    /// fabrics): reads the header to learn REGCTL, then the whole structure.
    pub async fn reservation_report(&self) -> Result<ReservationStatus> {
        let head = self.report_raw(ReservationStatus::EXT_HEADER_BYTES).await?;
        let hdr = ReservationStatusHeader::decode(&head)
            .map_err(|e| HostError::invalid("Reservation Report", e.to_string()))?;
        let len = ReservationStatus::EXT_HEADER_BYTES
            + ReservationStatus::EXT_ENTRY_BYTES * usize::from(hdr.regctl);
        let full = if hdr.regctl == 0 {
            head
        } else {
            self.report_raw(len).await?
        };
        ReservationStatus::decode(&full, true)
            .map_err(|e| HostError::invalid("Reservation Report", e.to_string()))
    }

    async fn report_raw(&self, len_bytes: usize) -> Result<IoBuf> {
        let cmd = ReservationReport {
            numd: (len_bytes / 4 - 1) as u32,
            eds: true,
        }
        .to_command(0, self.nsid);
        let q = self.ctrl.pick_io_queue()?;
        q.submit_checked(cmd, Payload::read(IoBuf::new_zeroed(len_bytes)))
            .await?
            .buf
            .ok_or_else(|| HostError::invalid("Reservation Report", "no data buffer came back"))
    }
}
