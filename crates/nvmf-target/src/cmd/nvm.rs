//! NVM command set: Read, Write, Flush, Write Zeroes, Dataset Management, Compare, and the
//! reservation commands (dispatched to the namespace's [`crate::Reservations`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use blockdev::{IoBuf, WriteFlags};
use nvme_proto::dsm::cdw12 as dsm_cdw12;
use nvme_proto::opcode::io;
use nvme_proto::{Command, Status};

use crate::cmd::context::QueueContext;
use crate::cmd::io::ActiveNs;
use crate::cmd::{Acct, Dispatch, Outcome, block_error_status};
use crate::fence::InflightGuard;
use crate::namespace::{BlockMedia, Namespace};
use crate::resv_api::HostRef;
use crate::stats::OpKind;

impl QueueContext {
    /// Executes an NVM command set command on `active` (checked by
    /// [`QueueContext::exec_io`]: attached to this host, accessible through this port).
    pub(crate) fn exec_nvm(
        &mut self,
        cmd: &Command,
        active: ActiveNs,
        blk: Arc<BlockMedia>,
        data: Option<IoBuf>,
        xfer_len: u32,
    ) -> Dispatch {
        let nsid = cmd.nsid();
        let op = cmd.opcode();
        let ActiveNs { ns, inflight, .. } = active;
        let Some(q) = &self.queue else {
            return Status::COMMAND_SEQUENCE_ERROR.into();
        };
        let ctrl = q.ctrl.clone();
        let host = HostRef {
            hostid: ctrl.hostid,
            hostnqn: &ctrl.hostnqn,
            cntlid: ctrl.cntlid,
        };
        let fail = |core: &mut QueueContext, data: Option<IoBuf>, st: Status, loc: u16| {
            if let Some(b) = data {
                core.pool.put(b);
            }
            Dispatch::Now(Outcome {
                err_nsid: nsid,
                err_lba: cmd.slba(),
                ..Outcome::status(st).with_loc(loc)
            })
        };
        match op {
            io::RESERVATION_REGISTER
            | io::RESERVATION_ACQUIRE
            | io::RESERVATION_RELEASE
            | io::RESERVATION_REPORT => {
                return self.exec_resv(cmd, ns, data, xfer_len);
            }
            _ => {}
        }
        if !known_opcode(op) {
            return fail(self, data, Status::INVALID_OPCODE.dnr(), 0);
        }
        // Counted before the reservation check: see `crate::fence`.
        let guard = modifies_media(op).then(|| InflightGuard::enter(&inflight));
        if let Err(st) = ns.reservations.check_access(&host, op) {
            return fail(self, data, st, 0);
        }
        let shard = self.shard;
        let mdts = self.target.config.mdts_bytes as u64;
        match op {
            io::READ | io::WRITE | io::COMPARE => {
                let nlb = u64::from(cmd.nlb());
                let len = nlb << blk.lba_shift;
                if len > mdts {
                    return fail(self, data, Status::INVALID_FIELD.dnr(), 48);
                }
                if u64::from(xfer_len) != len {
                    return fail(self, data, Status::DATA_SGL_LENGTH_INVALID.dnr(), 24);
                }
                let Some((off, _)) = blk.byte_range(cmd.slba(), nlb) else {
                    return fail(self, data, Status::LBA_OUT_OF_RANGE.dnr(), 40);
                };
                let health = self.target.clone();
                match op {
                    io::READ => {
                        let buf = self.pool.get(len as usize);
                        Dispatch::Later(Box::pin(async move {
                            ns.counters.start(shard);
                            let t0 = Instant::now();
                            let r = blk.device.read(off, buf).await;
                            let us = t0.elapsed().as_micros() as u64;
                            match r {
                                Ok(buf) => {
                                    ns.counters
                                        .finish(shard, OpKind::Read, len, us, true, false);
                                    Outcome {
                                        acct: Some(Acct {
                                            kind: OpKind::Read,
                                            bytes: len,
                                        }),
                                        ..Outcome::data(buf)
                                    }
                                }
                                Err(e) => {
                                    tracing::warn!(nsid = ns.nsid, off, len, error = %e, "read failed");
                                    let media_errors = &health.health.media_errors;
                                    device_failure(
                                        media_errors,
                                        &ns,
                                        &blk,
                                        shard,
                                        OpKind::Read,
                                        len,
                                        us,
                                        &e,
                                        true,
                                        off,
                                    )
                                }
                            }
                        }))
                    }
                    io::WRITE => {
                        let Some(buf) = data else {
                            return fail(self, None, Status::DATA_SGL_LENGTH_INVALID.dnr(), 24);
                        };
                        let flags = WriteFlags { fua: cmd.fua() };
                        Dispatch::Later(Box::pin(async move {
                            ns.counters.start(shard);
                            let t0 = Instant::now();
                            let r = blk.device.write(off, buf, flags).await;
                            drop(guard);
                            let us = t0.elapsed().as_micros() as u64;
                            match r {
                                Ok(buf) => {
                                    ns.counters
                                        .finish(shard, OpKind::Write, len, us, true, false);
                                    Outcome {
                                        spare: Some(buf),
                                        acct: Some(Acct {
                                            kind: OpKind::Write,
                                            bytes: len,
                                        }),
                                        ..Outcome::ok()
                                    }
                                }
                                Err(e) => {
                                    tracing::warn!(nsid = ns.nsid, off, len, error = %e, "write failed");
                                    let media_errors = &health.health.media_errors;
                                    device_failure(
                                        media_errors,
                                        &ns,
                                        &blk,
                                        shard,
                                        OpKind::Write,
                                        len,
                                        us,
                                        &e,
                                        false,
                                        off,
                                    )
                                }
                            }
                        }))
                    }
                    _ => {
                        let Some(expected) = data else {
                            return fail(self, None, Status::DATA_SGL_LENGTH_INVALID.dnr(), 24);
                        };
                        let buf = self.pool.get(len as usize);
                        Dispatch::Later(Box::pin(async move {
                            ns.counters.start(shard);
                            let t0 = Instant::now();
                            let r = blk.device.read(off, buf).await;
                            let us = t0.elapsed().as_micros() as u64;
                            match r {
                                Ok(buf) => {
                                    let same = buf[..] == expected[..];
                                    ns.counters.finish(shard, OpKind::Other, 0, us, true, false);
                                    let mut o = if same {
                                        Outcome::ok()
                                    } else {
                                        io_error(
                                            Status::COMPARE_FAILURE.dnr(),
                                            ns.nsid,
                                            blk.lba_of(off),
                                        )
                                    };
                                    o.spare = Some(buf);
                                    o
                                }
                                Err(e) => {
                                    let media_errors = &health.health.media_errors;
                                    device_failure(
                                        media_errors,
                                        &ns,
                                        &blk,
                                        shard,
                                        OpKind::Other,
                                        0,
                                        us,
                                        &e,
                                        true,
                                        off,
                                    )
                                }
                            }
                        }))
                    }
                }
            }
            io::FLUSH => {
                if let Some(b) = data {
                    self.pool.put(b);
                }
                Dispatch::Later(Box::pin(async move {
                    ns.counters.start(shard);
                    let t0 = Instant::now();
                    let r = blk.device.flush().await;
                    let us = t0.elapsed().as_micros() as u64;
                    ns.counters
                        .finish(shard, OpKind::Other, 0, us, r.is_ok(), false);
                    match r {
                        Ok(()) => Outcome::ok(),
                        Err(e) => io_error(block_error_status(&e, false), ns.nsid, 0),
                    }
                }))
            }
            io::WRITE_ZEROES => {
                if let Some(b) = data {
                    self.pool.put(b);
                }
                let nlb = u64::from(cmd.nlb());
                let Some((off, len)) = blk.byte_range(cmd.slba(), nlb) else {
                    return fail(self, None, Status::LBA_OUT_OF_RANGE.dnr(), 40);
                };
                // DEAC: deallocate when deallocated blocks read back as zeroes (what Write
                // Zeroes promises); otherwise write zeroes.
                let deallocate = cmd.cdw12() & dsm_cdw12::DEAC != 0 && blk.discard_reads_zeroes();
                Dispatch::Later(Box::pin(async move {
                    ns.counters.start(shard);
                    let t0 = Instant::now();
                    let r = if deallocate {
                        blk.device.discard(off, len).await
                    } else {
                        blk.device.write_zeroes(off, len).await
                    };
                    drop(guard);
                    let us = t0.elapsed().as_micros() as u64;
                    ns.counters
                        .finish(shard, OpKind::Other, 0, us, r.is_ok(), false);
                    match r {
                        Ok(()) => Outcome::ok(),
                        Err(e) => io_error(block_error_status(&e, false), ns.nsid, blk.lba_of(off)),
                    }
                }))
            }
            io::DATASET_MANAGEMENT => self.exec_dsm(cmd, ns, blk, data, guard),
            _ => fail(self, data, Status::INVALID_OPCODE.dnr(), 0),
        }
    }
}

/// Accounts a failed device I/O (namespace counters, media-error health counter) and
/// builds its completion with the error-log NSID and LBA.
#[allow(clippy::too_many_arguments)]
fn device_failure(
    media_errors: &AtomicU64,
    ns: &Namespace,
    blk: &BlockMedia,
    shard: usize,
    kind: OpKind,
    bytes: u64,
    us: u64,
    e: &blockdev::BlockError,
    is_read: bool,
    off: u64,
) -> Outcome {
    let media = e.is_media();
    if media {
        media_errors.fetch_add(1, Ordering::Relaxed);
    }
    ns.counters.finish(shard, kind, bytes, us, false, media);
    io_error(block_error_status(e, is_read), ns.nsid, blk.lba_of(off))
}

pub(crate) fn io_error(st: Status, nsid: u32, lba: u64) -> Outcome {
    Outcome {
        err_nsid: nsid,
        err_lba: lba,
        ..Outcome::status(st)
    }
}

/// Commands whose completion on the device can change the media: preempt-and-abort
/// waits for these.
fn modifies_media(op: u8) -> bool {
    matches!(op, io::WRITE | io::WRITE_ZEROES | io::DATASET_MANAGEMENT)
}

/// Opcodes of the NVM command set this target implements.
pub(crate) fn known_opcode(op: u8) -> bool {
    matches!(
        op,
        io::READ
            | io::WRITE
            | io::COMPARE
            | io::FLUSH
            | io::WRITE_ZEROES
            | io::DATASET_MANAGEMENT
            | io::RESERVATION_REGISTER
            | io::RESERVATION_ACQUIRE
            | io::RESERVATION_RELEASE
            | io::RESERVATION_REPORT
    )
}
