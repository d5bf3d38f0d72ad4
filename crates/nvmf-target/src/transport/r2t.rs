//! Solicited write data: writes whose data is not in the capsule wait in line for an R2T
//! while the connection buffers at most `max_r2t_buffer_bytes` of such data; H2CData PDUs
//! fill the command's buffer in order, and the last one starts the command.

use std::collections::VecDeque;

use nvme_proto::tcp::{DataHeader, FatalError, Framing, PduHeader, R2t, encode_header, pdu_flags};

use crate::cmd::Outcome;
use crate::transport::commands::{CommandTable, SlotState};
use crate::transport::receive::Stop;
use crate::transport::session::Session;
use crate::transport::tx::TxQueue;

/// Writes waiting for an R2T and the bytes solicited but not yet received.
#[derive(Default)]
pub(crate) struct R2tFlow {
    waiting: VecDeque<u16>,
    solicited_bytes: usize,
}

impl R2tFlow {
    /// Puts the command in `slot` (in [`SlotState::AwaitData`]) in line for an R2T.
    pub fn enqueue(&mut self, slot: u16) {
        self.waiting.push_back(slot);
    }

    /// Takes `slot` out of the line (its command completed before an R2T was sent).
    pub fn forget(&mut self, slot: u16) {
        self.waiting.retain(|&w| w != slot);
    }

    /// `bytes` of solicited data arrived (or will not be): they leave the budget.
    pub fn done(&mut self, bytes: usize) {
        self.solicited_bytes = self.solicited_bytes.saturating_sub(bytes);
    }

    /// Sends R2Ts for waiting writes while the buffered-write budget allows (one write is
    /// always let through, however large).
    pub fn pump(
        &mut self,
        commands: &mut CommandTable,
        tx: &mut TxQueue,
        framing: Framing,
        budget_bytes: usize,
    ) {
        while let Some(&slot) = self.waiting.front() {
            let Some(s) = commands.get_mut(slot) else {
                self.waiting.pop_front();
                continue;
            };
            let SlotState::AwaitData(inc) = &mut s.state else {
                self.waiting.pop_front();
                continue;
            };
            let total = inc.total as usize;
            if self.solicited_bytes > 0 && self.solicited_bytes + total > budget_bytes {
                return;
            }
            self.waiting.pop_front();
            inc.r2t_sent = true;
            self.solicited_bytes += total;
            let r2t = PduHeader::R2t(R2t {
                cccid: s.cmd.cid(),
                ttag: slot,
                offset: 0,
                length: inc.total,
            });
            let e = encode_header(&r2t, 0, 0, framing);
            tx.push_bytes(e.as_bytes());
        }
    }
}

impl Session {
    pub(crate) fn pump_r2t(&mut self) {
        let budget = self.ctx.target.config.max_r2t_buffer_bytes;
        self.r2t
            .pump(&mut self.commands, &mut self.tx, self.framing, budget);
    }

    /// An H2CData PDU: checked against the R2T it answers, copied into the command's
    /// buffer; the last one runs the command (or completes it with the error it collected).
    pub(crate) fn on_h2c_data(
        &mut self,
        d: DataHeader,
        flags: u8,
        data: &[u8],
        ddgst_ok: bool,
        pdu: &[u8],
        hlen: usize,
    ) -> Result<(), Stop> {
        let slot = d.ttag;
        let Some(s) = self.commands.get_mut(slot) else {
            return Err(Stop::fatal(
                FatalError::header_field(10, "H2CData with an unknown TTAG"),
                pdu,
                hlen,
            ));
        };
        let cid = s.cmd.cid();
        let SlotState::AwaitData(inc) = &mut s.state else {
            return Err(Stop::fatal(
                FatalError::header_field(10, "H2CData without an R2T"),
                pdu,
                hlen,
            ));
        };
        if !inc.r2t_sent {
            return Err(Stop::fatal(
                FatalError::header_field(10, "H2CData without an R2T"),
                pdu,
                hlen,
            ));
        }
        if d.cccid != cid {
            return Err(Stop::fatal(
                FatalError::header_field(8, "H2CData CCCID does not match the TTAG"),
                pdu,
                hlen,
            ));
        }
        if d.length as usize != data.len() {
            return Err(Stop::fatal(
                FatalError::header_field(16, "DATAL does not match the PDU length"),
                pdu,
                hlen,
            ));
        }
        let end = u64::from(d.offset) + u64::from(d.length);
        if end > u64::from(inc.total) {
            return Err(Stop::fatal(
                FatalError::out_of_range("H2CData beyond the command's data"),
                pdu,
                hlen,
            ));
        }
        if d.offset != inc.received {
            return Err(Stop::fatal(
                FatalError::sequence("H2CData out of order"),
                pdu,
                hlen,
            ));
        }
        let last = end == u64::from(inc.total);
        if last != (flags & pdu_flags::LAST_PDU != 0) {
            return Err(Stop::fatal(
                FatalError::sequence("LAST_PDU flag does not match the data end"),
                pdu,
                hlen,
            ));
        }
        if let Some(dst) = inc.buf.get_mut(d.offset as usize..end as usize) {
            dst.copy_from_slice(data);
        }
        inc.received = end as u32;
        if !ddgst_ok {
            inc.failed = Some(nvme_proto::Status::DATA_TRANSFER_ERROR);
        }
        if last {
            let SlotState::AwaitData(inc) = std::mem::replace(&mut s.state, SlotState::Running)
            else {
                return Ok(());
            };
            self.r2t.done(inc.total as usize);
            match inc.failed {
                Some(st) => {
                    self.ctx.pool.put(inc.buf);
                    self.complete(slot, Outcome::status(st));
                }
                None => self.run(slot, Some(inc.buf)),
            }
            self.pump_r2t();
        }
        Ok(())
    }
}
