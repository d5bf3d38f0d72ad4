//! A command capsule arrives: queue depth and CID checked, the command admitted to the
//! command table, and started with its in-capsule data, or put in line for an R2T, or
//! completed at once when its data descriptor is wrong.

use blockdev::IoBuf;
use nvme_proto::opcode::{DataDirection, admin, direction, fabrics_direction};
use nvme_proto::sgl::TcpDataLocation;
use nvme_proto::tcp::{CH_BYTES, FatalError};
use nvme_proto::{Command, Status};

use crate::cmd::Outcome;
use crate::transport::commands::{Incoming, SlotState};
use crate::transport::receive::Stop;
use crate::transport::session::Session;

/// Outstanding commands accepted before Connect.
const PRE_CONNECT_QUEUE_DEPTH: u32 = 32;

impl Session {
    fn queue_limit(&self) -> u32 {
        match &self.ctx.queue {
            Some(q) => u32::from(q.sqsize) + 1,
            None => PRE_CONNECT_QUEUE_DEPTH,
        }
    }

    /// The host reused the CID of an outstanding AER on the admin queue: the AER is
    /// retired. `false` if `cid` belongs to anything else.
    fn retire_aer(&mut self, cid: u16) -> bool {
        let admin_queue = self.ctx.queue.as_ref().is_some_and(|q| q.qid == 0);
        if !admin_queue || !self.commands.retire_aer(cid) {
            return false;
        }
        tracing::debug!(
            conn = self.ctx.handle.id,
            cid,
            "AER retired: the host reused its CID"
        );
        true
    }

    pub(crate) fn on_capsule(
        &mut self,
        cmd: Command,
        data: &[u8],
        ddgst_ok: bool,
        pdu: &[u8],
        hlen: usize,
    ) -> Result<(), Stop> {
        let cid = cmd.cid();
        if self.commands.outstanding() >= self.queue_limit() {
            return Err(Stop::fatal(
                FatalError::sequence("queue depth exceeded"),
                pdu,
                hlen,
            ));
        }
        if self.commands.cid_in_use(cid) && !self.retire_aer(cid) {
            return Err(Stop::fatal(
                FatalError::header_field(CH_BYTES as u32 + 2, "command identifier already in use"),
                pdu,
                hlen,
            ));
        }
        if let Some(q) = &self.ctx.queue {
            self.sq_head = ((u32::from(self.sq_head) + 1) % (u32::from(q.sqsize) + 1)) as u16;
        }
        let counters = &self.ctx.handle.counters;
        counters.add(&counters.commands, 1);
        let dir = if cmd.opcode() == admin::FABRICS {
            fabrics_direction(cmd.fctype())
        } else {
            direction(cmd.opcode())
        };
        let sgl = cmd.sgl1();
        let loc = sgl.tcp_location();
        // Data in the capsule beyond what the command describes is a transport error.
        if !data.is_empty() {
            match loc {
                Some(TcpDataLocation::InCapsule { offset, length })
                    if dir == DataDirection::HostToController
                        && offset
                            .checked_add(u64::from(length))
                            .is_some_and(|e| e >= data.len() as u64) => {}
                _ => {
                    return Err(Stop::fatal(
                        FatalError::out_of_range("in-capsule data beyond the command's data"),
                        pdu,
                        hlen,
                    ));
                }
            }
        }
        let xfer_len = match (dir, loc) {
            (DataDirection::None, _) => 0,
            (_, Some(TcpDataLocation::InCapsule { length, .. })) => length,
            (_, Some(TcpDataLocation::Transport { length })) => length,
            (_, None) => sgl.length,
        };
        let slot = self.commands.admit(cmd, xfer_len);
        self.busy
            .mark_busy(&self.ctx.handle, self.commands.outstanding());
        if !ddgst_ok {
            self.complete(slot, Outcome::status(Status::DATA_TRANSFER_ERROR));
            return Ok(());
        }
        match (dir, loc) {
            (DataDirection::None, _) => self.run(slot, None),
            // No supported command moves data both ways.
            (DataDirection::Bidirectional, _) => {
                self.complete(slot, Outcome::status(Status::INVALID_OPCODE.dnr()))
            }
            (_, None) => self.complete(
                slot,
                Outcome::status(Status::SGL_DESCRIPTOR_TYPE_INVALID.dnr()),
            ),
            (DataDirection::ControllerToHost, Some(TcpDataLocation::InCapsule { .. })) => self
                .complete(
                    slot,
                    Outcome::status(Status::SGL_DESCRIPTOR_TYPE_INVALID.dnr()),
                ),
            (DataDirection::ControllerToHost, Some(TcpDataLocation::Transport { .. })) => {
                self.run(slot, None)
            }
            (
                DataDirection::HostToController,
                Some(TcpDataLocation::InCapsule { offset, length }),
            ) => {
                let start = usize::try_from(offset).unwrap_or(usize::MAX);
                match start
                    .checked_add(length as usize)
                    .and_then(|end| data.get(start..end))
                {
                    Some(bytes) => {
                        let mut buf = self.ctx.pool.get(bytes.len());
                        buf.copy_from_slice(bytes);
                        self.run(slot, Some(buf));
                    }
                    None => {
                        let st = if start > data.len() {
                            Status::SGL_OFFSET_INVALID.dnr()
                        } else {
                            Status::DATA_SGL_LENGTH_INVALID.dnr()
                        };
                        self.complete(slot, Outcome::status(st));
                    }
                }
            }
            (DataDirection::HostToController, Some(TcpDataLocation::Transport { length })) => {
                if length == 0 {
                    self.run(slot, Some(IoBuf::new_zeroed(0)));
                } else if length > self.ctx.target.config.mdts_bytes {
                    self.complete(
                        slot,
                        Outcome::status(Status::INVALID_FIELD.dnr()).with_loc(24),
                    );
                } else if self.ctx.queue.is_none() && cmd.opcode() != admin::FABRICS {
                    self.complete(slot, Outcome::status(Status::COMMAND_SEQUENCE_ERROR));
                } else {
                    let buf = self.ctx.pool.get(length as usize);
                    if let Some(s) = self.commands.get_mut(slot) {
                        s.state = SlotState::AwaitData(Incoming {
                            buf,
                            received: 0,
                            total: length,
                            r2t_sent: false,
                            failed: None,
                        });
                    }
                    self.r2t.enqueue(slot);
                    self.pump_r2t();
                }
            }
        }
        Ok(())
    }
}
