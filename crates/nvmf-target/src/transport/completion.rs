//! Completing a command: its slot and CID freed, the connection's counters and the
//! controller's error log updated, and its data (C2HData, split at the configured chunk
//! size) and CapsuleResp queued for sending.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use blockdev::IoBuf;
use nvme_proto::opcode::admin;
use nvme_proto::tcp::{DataHeader, PduHeader, crc32c, encode_header, pdu_flags};
use nvme_proto::{Command, Completion, Status};

use crate::cmd::Outcome;
use crate::controller::ErrorRecord;
use crate::stats::OpKind;
use crate::transport::commands::Freed;
use crate::transport::handle::ConnHandle;
use crate::transport::receive::Phase;
use crate::transport::session::Session;

/// Time with at least one command outstanding (the SMART log's controller busy time).
#[derive(Default)]
pub(crate) struct BusyClock {
    since: Option<Instant>,
}

impl BusyClock {
    /// A command was admitted; `outstanding` now are.
    pub fn mark_busy(&mut self, handle: &ConnHandle, outstanding: u32) {
        if self.since.is_none() {
            self.since = Some(Instant::now());
        }
        handle
            .counters
            .in_flight
            .store(u64::from(outstanding), Relaxed);
    }

    /// Nothing is outstanding any more.
    pub fn mark_idle(&mut self, handle: &ConnHandle) {
        handle.counters.in_flight.store(0, Relaxed);
        if let Some(t) = self.since.take() {
            let c = &handle.counters;
            c.add(&c.busy_us, t.elapsed().as_micros() as u64);
        }
    }
}

impl Session {
    /// Sends the completion (and data) of the command in `slot` and frees the slot.
    pub(crate) fn complete(&mut self, slot: u16, mut o: Outcome) {
        let (cmd, xfer_len, incoming) = match self.commands.free(slot) {
            None => return,
            Some(Freed::Retired) => {
                if let Some(b) = o.spare.take() {
                    self.ctx.pool.put(b);
                }
                if let Some(b) = o.data.take() {
                    self.ctx.pool.put(b);
                }
                return;
            }
            Some(Freed::Live {
                cmd,
                xfer_len,
                incoming,
                throttled_data,
            }) => {
                if let Some(b) = throttled_data {
                    self.ctx.pool.put(b);
                }
                (cmd, xfer_len as usize, incoming)
            }
        };
        if let Some(inc) = incoming {
            // Completed before its data arrived (cannot happen today; keep the budget right).
            if inc.r2t_sent {
                self.r2t.done(inc.total as usize);
            }
            self.ctx.pool.put(inc.buf);
        }
        let cid = cmd.cid();
        if self.commands.outstanding() == 0 {
            self.busy.mark_idle(&self.ctx.handle);
        }
        if let Some(b) = o.spare.take() {
            self.ctx.pool.put(b);
        }
        self.account(&cmd, &o);
        let (qid, sqflow_disabled) = match &self.ctx.queue {
            Some(q) => (q.qid, q.sqflow_disabled),
            None => (0, false),
        };
        let mut cqe = Completion::new(cid, o.status);
        cqe.dw0 = o.dw0;
        cqe.dw1 = o.dw1;
        cqe.sqid = qid;
        cqe.sqhd = self.sq_head;
        let mut need_resp = true;
        if let Some(mut buf) = o.data.take() {
            if o.status.is_success() && xfer_len > 0 && !buf.is_empty() {
                if buf.len() != xfer_len {
                    // Pad or cut to what the host asked for (log pages, identify).
                    let mut b = self.ctx.pool.get_zeroed(xfer_len);
                    let n = buf.len().min(xfer_len);
                    b[..n].copy_from_slice(&buf[..n]);
                    self.ctx.pool.put(buf);
                    buf = b;
                }
                let success = sqflow_disabled && cqe.dw0 == 0 && cqe.dw1 == 0 && !o.close_after;
                self.push_c2h(cid, buf, success);
                need_resp = !success;
            } else {
                self.ctx.pool.put(buf);
            }
        }
        if need_resp {
            let e = encode_header(&PduHeader::CapsuleResp(cqe), 0, 0, self.framing);
            self.tx.push_bytes(e.as_bytes());
        }
        if o.close_after {
            self.phase = Phase::Closing;
        }
    }

    /// Counts the command in the connection's counters; a failed one also goes to the
    /// controller's error log.
    fn account(&self, cmd: &Command, o: &Outcome) {
        let c = &self.ctx.handle.counters;
        if !o.status.is_success() {
            c.add(&c.errors, 1);
            self.log_error(cmd, o);
        } else if let Some(a) = o.acct {
            match a.kind {
                OpKind::Read => {
                    c.add(&c.read_ops, 1);
                    c.add(&c.read_bytes, a.bytes);
                }
                OpKind::Write => {
                    c.add(&c.write_ops, 1);
                    c.add(&c.write_bytes, a.bytes);
                }
                OpKind::Other => {}
            }
        }
    }

    /// Queues C2HData PDUs carrying `buf`, split at the configured chunk size.
    fn push_c2h(&mut self, cid: u16, buf: IoBuf, success: bool) {
        let total = buf.len();
        let chunk = self.ctx.target.config.c2h_chunk_bytes as usize;
        let id = self.tx.hold(buf);
        let mut off = 0;
        while off < total {
            let n = chunk.min(total - off);
            let last = off + n == total;
            let mut flags = 0;
            if last {
                flags |= pdu_flags::LAST_PDU;
                if success {
                    flags |= pdu_flags::SUCCESS;
                }
            }
            let h = PduHeader::C2HData(DataHeader {
                cccid: cid,
                ttag: 0,
                offset: off as u32,
                length: n as u32,
            });
            let e = encode_header(&h, flags, n, self.framing);
            self.tx.push_bytes(e.as_bytes());
            self.tx.push_buf_range(id, off, off + n);
            if self.digests.data {
                let d = crc32c(self.tx.held_slice(id, off, off + n)).to_le_bytes();
                self.tx.push_bytes(&d);
            }
            off += n;
        }
        self.tx.release(id, &mut self.ctx.pool);
    }

    fn log_error(&self, cmd: &Command, o: &Outcome) {
        // Commands that never reached a controller have no error log.
        let Some(q) = &self.ctx.queue else { return };
        if o.status == Status::COMMAND_SEQUENCE_ERROR && cmd.opcode() == admin::ASYNC_EVENT_REQUEST
        {
            return;
        }
        q.ctrl.add_error(ErrorRecord {
            error_count: 0,
            sqid: q.qid,
            cid: cmd.cid(),
            status_field: o.status.to_field(),
            param_error_location: o.err_loc,
            lba: o.err_lba,
            nsid: o.err_nsid,
        });
        self.ctx
            .target
            .health
            .error_log_entries
            .fetch_add(1, Relaxed);
    }
}
