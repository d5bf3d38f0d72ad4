//! Handling of the PDUs a target sends: CapsuleResp, C2HData headers, R2T, C2HTermReq.
//! Every check here names the offending field so the H2CTermReq and the error agree.

use nvme_proto::Completion;
use nvme_proto::tcp::{
    CommonHeader, DataHeader, PduHeader, PduLayout, R2t, data_digest, encode_header, fes, pdu_flags,
};

use super::Driver;
use crate::error::{HostError, TransportError};
use crate::queue::rx::RxState;
use crate::queue::slots::Xfer;
use crate::queue::tx::{DataRef, TxItem};

impl Driver {
    pub(super) fn data_digest_error(&mut self, cid: u16) {
        let (addr, qid) = (self.cfg.addr, self.cfg.qid);
        if let Some(s) = self.slots.busy_mut(cid)
            && s.data_error.is_none()
        {
            tracing::warn!(%addr, qid, cid, "C2HData data digest mismatch");
            s.data_error = Some(HostError::DataDigest {
                addr,
                qid,
                cid,
                command: s.kind,
            });
        }
    }

    /// A C2HData PDU is fully in. With SUCCESS the command completes here (no CapsuleResp).
    pub(super) fn data_pdu_done(&mut self, cid: u16, success: bool) -> Result<(), TransportError> {
        if !success {
            return Ok(());
        }
        self.check_short_transfer(cid);
        let mut cqe = Completion::success(cid);
        cqe.sqid = self.cfg.qid;
        self.complete(cid, Ok(cqe));
        Ok(())
    }

    fn check_short_transfer(&mut self, cid: u16) {
        let (addr, qid) = (self.cfg.addr, self.cfg.qid);
        if let Some(s) = self.slots.busy_mut(cid)
            && s.xfer == Xfer::FromController
            && s.received_bytes as usize != s.data.len
            && s.data_error.is_none()
        {
            s.data_error = Some(HostError::invalid(
                format!("{} (CID {cid}) on queue {qid} of {addr}", s.kind),
                format!(
                    "target completed the command after sending {} of {} bytes",
                    s.received_bytes, s.data.len
                ),
            ));
        }
    }

    pub(super) fn on_header(
        &mut self,
        hdr: PduHeader,
        ch: &CommonHeader,
        lay: &PduLayout,
    ) -> Result<(), TransportError> {
        match hdr {
            PduHeader::CapsuleResp(cqe) => self.on_capsule_resp(cqe),
            PduHeader::C2HData(d) => self.on_c2h_data(d, ch.flags, lay),
            PduHeader::R2t(r) => self.on_r2t(r),
            PduHeader::C2HTermReq(t) => Err(TransportError::TargetTerminated {
                fes: t.fes,
                fei: t.fei,
            }),
            other => Err(TransportError::bad(
                fes::INVALID_HEADER_FIELD,
                0,
                format!("a host never receives PDU type {:#04x}", other.pdu_type()),
            )),
        }
    }

    fn on_capsule_resp(&mut self, cqe: Completion) -> Result<(), TransportError> {
        let cid = cqe.cid;
        // CID sits at CQE byte 12, PDU byte 8 + 12.
        let s = self.slots.busy_mut(cid).ok_or_else(|| {
            TransportError::bad(
                fes::INVALID_HEADER_FIELD,
                20,
                format!("CapsuleResp for CID {cid}, which is not outstanding"),
            )
        })?;
        if s.xfer == Xfer::FromController && cqe.status.is_success() {
            // A successful read must have delivered all its data first.
            self.check_short_transfer(cid);
        }
        self.complete(cid, Ok(cqe));
        Ok(())
    }

    fn on_c2h_data(
        &mut self,
        d: DataHeader,
        flags: u8,
        lay: &PduLayout,
    ) -> Result<(), TransportError> {
        let cid = d.cccid;
        let s = self.slots.busy_mut(cid).ok_or_else(|| {
            TransportError::bad(
                fes::INVALID_HEADER_FIELD,
                8,
                format!("C2HData for CID {cid}, which is not outstanding"),
            )
        })?;
        if s.xfer != Xfer::FromController {
            return Err(TransportError::bad(
                fes::INVALID_HEADER_FIELD,
                8,
                format!("C2HData for CID {cid}, a command without controller-to-host data"),
            ));
        }
        if d.length as usize != lay.data_len || d.length == 0 {
            return Err(TransportError::bad(
                fes::INVALID_HEADER_FIELD,
                16,
                format!(
                    "C2HData DATAL {} does not match the {} data bytes of the PDU",
                    d.length, lay.data_len
                ),
            ));
        }
        if d.offset != s.received_bytes {
            return Err(TransportError::bad(
                fes::DATA_OUT_OF_RANGE,
                12,
                format!(
                    "C2HData for CID {cid} at offset {} but {} bytes were received so far",
                    d.offset, s.received_bytes
                ),
            ));
        }
        if u64::from(d.offset) + u64::from(d.length) > s.data.len as u64 {
            return Err(TransportError::bad(
                fes::DATA_OUT_OF_RANGE,
                16,
                format!(
                    "C2HData for CID {cid} ends at {} beyond the command's {} bytes",
                    u64::from(d.offset) + u64::from(d.length),
                    s.data.len
                ),
            ));
        }
        let last = flags & pdu_flags::LAST_PDU != 0;
        let success = flags & pdu_flags::SUCCESS != 0;
        if success && !last {
            return Err(TransportError::bad(
                fes::INVALID_HEADER_FIELD,
                1,
                "C2HData with SUCCESS but without LAST",
            ));
        }
        self.rx = RxState::Data {
            cid,
            pos: s.data.offset + d.offset as usize,
            remaining: d.length as usize,
            pdu_len: d.length,
            crc: 0,
            ddgst: lay.has_ddgst,
            success,
        };
        Ok(())
    }

    /// Answers an R2T with H2CData PDUs of at most MAXH2CDATA bytes, LAST on the final one.
    fn on_r2t(&mut self, r: R2t) -> Result<(), TransportError> {
        let cid = r.cccid;
        let maxh2c = self.cfg.negotiated.maxh2cdata_bytes.max(1);
        let s = self.slots.busy_mut(cid).ok_or_else(|| {
            TransportError::bad(
                fes::INVALID_HEADER_FIELD,
                8,
                format!("R2T for CID {cid}, which is not outstanding"),
            )
        })?;
        if s.xfer != (Xfer::ToController { in_capsule: false }) {
            return Err(TransportError::bad(
                fes::INVALID_HEADER_FIELD,
                8,
                format!("R2T for CID {cid}, a command with no data left to send"),
            ));
        }
        if r.length == 0 {
            return Err(TransportError::bad(
                fes::INVALID_HEADER_FIELD,
                16,
                format!("R2T for CID {cid} with length 0"),
            ));
        }
        let end = u64::from(r.offset) + u64::from(r.length);
        if end > s.data.len as u64 {
            return Err(TransportError::bad(
                fes::DATA_OUT_OF_RANGE,
                16,
                format!(
                    "R2T for CID {cid} asks for bytes up to {end} of a {}-byte transfer",
                    s.data.len
                ),
            ));
        }
        if r.offset < s.r2t_end_bytes {
            return Err(TransportError::bad(
                fes::DATA_OUT_OF_RANGE,
                12,
                format!(
                    "R2T for CID {cid} at offset {} below the {} bytes already sent",
                    r.offset, s.r2t_end_bytes
                ),
            ));
        }
        s.r2t_end_bytes = end as u32;
        let base = s.data.offset;
        let mut off = r.offset;
        let mut left = r.length;
        while left > 0 {
            let n = left.min(maxh2c);
            left -= n;
            let range = base + off as usize..base + (off + n) as usize;
            let ddgst = if self.framing.digests.data {
                s.bytes(range.start, range.len()).map(data_digest)
            } else {
                None
            };
            let hdr = encode_header(
                &PduHeader::H2CData(DataHeader {
                    cccid: cid,
                    ttag: r.ttag,
                    offset: off,
                    length: n,
                }),
                if left == 0 { pdu_flags::LAST_PDU } else { 0 },
                n as usize,
                self.framing,
            );
            s.tx_refs += 1;
            self.tx.push(TxItem {
                hdr,
                data: Some(DataRef {
                    cid,
                    offset: range.start,
                    len: n as usize,
                }),
                ddgst,
                sent: 0,
            });
            off += n;
        }
        Ok(())
    }
}
