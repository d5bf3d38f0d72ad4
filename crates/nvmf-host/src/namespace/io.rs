//! NVM commands on a namespace, with `HostError` results (the `BlockDevice` impl maps
//! them). Large transfers are split at the device's `max_io_bytes`.

use blockdev::{BlockError, IoBuf, WriteFlags};
use nvme_proto::Command;
use nvme_proto::dsm::{Compare, WriteZeroes};
use nvme_proto::opcode::io;
use tokio::task::JoinSet;

use super::{AnaTransitionWait, RemoteNamespace, SPLIT_PARALLELISM};
use crate::error::{HostError, Result};
use crate::queue::{Data, DataBuf, Dir, Outcome, Payload, QueuePair, SplitBuf, SubmitOptions};

/// A Read, Write or Compare SQE (CID and SGL are set by the queue). Read and Write share
/// Compare's SLBA/NLB/FUA layout (NVM command set: CDW10..11 SLBA, CDW12 NLB and FUA).
pub(crate) fn rw_command(opcode: u8, nsid: u32, slba: u64, blocks: u32, fua: bool) -> Command {
    let mut c = Compare {
        slba,
        nlb: blocks,
        fua,
        lr: false,
    }
    .to_command(0, nsid);
    c.set_opcode(opcode);
    c
}

impl RemoteNamespace {
    pub(crate) fn check_aligned(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        blockdev::check_range(&self.info, offset_bytes, len_bytes)
            .map_err(|e| HostError::Usage(format!("{}: {e}", self.info.name)))
    }

    /// Moves `buf` to or from the namespace at `offset_bytes`; waits through reconnects
    /// (reads and writes of the same data are idempotent, see the crate docs) and through
    /// ANA transitions of this single path, re-sending until the controller's ANATT has
    /// passed (as the Linux host does without multipath).
    async fn transfer(
        &self,
        opcode: u8,
        offset_bytes: u64,
        mut buf: IoBuf,
        fua: bool,
    ) -> Result<IoBuf> {
        let mut ana = AnaTransitionWait::default();
        loop {
            let (r, back) = self
                .transfer_raw(opcode, offset_bytes, buf, fua, SubmitOptions::RETRY)
                .await;
            match r {
                Err(e) if e.is_ana_transition() => {
                    if !ana.pause(self.ctrl.anatt()).await {
                        return Err(e);
                    }
                    buf = back;
                }
                r => return r.map(|()| back),
            }
        }
    }

    /// The transfer with per-command options, giving the buffer back also on failure so
    /// that it can be sent on another path. Up to `max_io_bytes` it is one command;
    /// above, one command per `max_io_bytes` window of the same buffer, all in flight at
    /// once on the calling thread's queue.
    pub(crate) async fn transfer_raw(
        &self,
        opcode: u8,
        offset_bytes: u64,
        buf: IoBuf,
        fua: bool,
        opts: SubmitOptions,
    ) -> (Result<()>, IoBuf) {
        let len = buf.len();
        if let Err(e) = self.check_aligned(offset_bytes, len as u64) {
            return (Err(e), buf);
        }
        let q = match self.ctrl.pick_io_queue_for(len as u64) {
            Ok(q) => q,
            Err(e) => return (Err(e), buf),
        };
        let dir = if opcode == io::READ {
            Dir::FromController
        } else {
            Dir::ToController
        };
        let max = self.info.max_io_bytes as usize;
        if len <= max {
            let cmd = self.rw(opcode, offset_bytes, len, fua);
            let o = q
                .submit_data(cmd, Data::owned(buf, 0, len, dir), opts, false)
                .await;
            let r = self.check_outcome(q, opcode, &o);
            let buf = o.buf.and_then(DataBuf::into_owned);
            return (r, buf.unwrap_or_else(|| IoBuf::new_zeroed(len)));
        }
        // The parts go over all queues, starting with the chosen one: a transfer this
        // large is bound by bandwidth, which several connections have more of.
        let queues = self.ctrl.io_queues();
        let first = queues.iter().position(|x| x.qid() == q.qid()).unwrap_or(0);
        let (owner, windows) = SplitBuf::split(buf, max);
        let parts = windows.into_iter().enumerate().map(|(k, w)| {
            let q = &queues[(first + k) % queues.len()];
            let cmd = self.rw(opcode, offset_bytes + w.offset() as u64, w.len(), fua);
            q.submit_data(cmd, Data::window(w, dir), opts, false)
        });
        let outcomes = futures::future::join_all(parts).await;
        // The first error in LBA order; a reservation conflict wins (this host is fenced,
        // final on every path), then a path error so multipath fails over.
        let rank = |e: &HostError| {
            if e.is_reservation_conflict() {
                2
            } else {
                u8::from(e.is_path_error())
            }
        };
        let mut first: Result<()> = Ok(());
        for o in &outcomes {
            if let Err(e) = self.check_outcome(q, opcode, o) {
                let replace = match &first {
                    Ok(()) => true,
                    Err(f) => rank(&e) > rank(f),
                };
                if replace {
                    first = Err(e);
                }
            }
        }
        drop(outcomes);
        let buf = SplitBuf::into_inner(owner).unwrap_or_else(|_| IoBuf::new_zeroed(len));
        (first, buf)
    }

    fn rw(&self, opcode: u8, offset_bytes: u64, len: usize, fua: bool) -> Command {
        let slba = offset_bytes >> self.lba_shift;
        let blocks = (len >> self.lba_shift) as u32;
        rw_command(opcode, self.nsid, slba, blocks, fua)
    }

    fn check_outcome(&self, q: &QueuePair, opcode: u8, o: &Outcome) -> Result<()> {
        match &o.result {
            Ok(cqe) if cqe.status.is_success() => Ok(()),
            Ok(cqe) => Err(HostError::Status {
                command: q.kind(&Command::new(opcode, 0, self.nsid)),
                status: cqe.status,
            }),
            Err(e) => Err(e.clone()),
        }
    }

    /// Reads into `buf` (its length is the I/O size) and returns it.
    pub async fn read_at(&self, offset_bytes: u64, buf: IoBuf) -> Result<IoBuf> {
        self.transfer(io::READ, offset_bytes, buf, false).await
    }

    /// Writes `buf`, with Force Unit Access when `fua`, and returns it.
    pub async fn write_at(&self, offset_bytes: u64, buf: IoBuf, fua: bool) -> Result<IoBuf> {
        self.transfer(io::WRITE, offset_bytes, buf, fua).await
    }

    /// Compare: succeeds when the namespace holds exactly `buf` at `offset_bytes`; a
    /// mismatch is `HostError::Status` with Compare Failure (SCT 2, SC 0x85).
    pub async fn compare_at(&self, offset_bytes: u64, buf: IoBuf) -> Result<IoBuf> {
        self.transfer(io::COMPARE, offset_bytes, buf, false).await
    }

    /// Flush (namespace-wide: covers writes completed on every queue).
    pub async fn flush_ns(&self) -> Result<()> {
        self.flush_with(SubmitOptions::RETRY).await
    }

    pub(crate) async fn flush_with(&self, opts: SubmitOptions) -> Result<()> {
        let q = self.ctrl.pick_io_queue()?;
        q.submit_checked_with(Command::new(io::FLUSH, 0, self.nsid), Payload::None, opts)
            .await?;
        Ok(())
    }

    /// Write Zeroes over the range, 65536 blocks per command, several in flight.
    pub async fn write_zeroes_at(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        self.write_zeroes_with(offset_bytes, len_bytes, SubmitOptions::RETRY)
            .await
    }

    pub(crate) async fn write_zeroes_with(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        opts: SubmitOptions,
    ) -> Result<()> {
        self.check_aligned(offset_bytes, len_bytes)?;
        let nsid = self.nsid;
        let first = offset_bytes >> self.lba_shift;
        let end = (offset_bytes + len_bytes) >> self.lba_shift;
        let per = super::MAX_BLOCKS_PER_COMMAND;
        let cmds = (first..end).step_by(per as usize).map(move |slba| {
            let blocks = per.min(end - slba) as u32;
            let cmd = WriteZeroes {
                slba,
                nlb: blocks,
                deac: false,
                fua: false,
            }
            .to_command(0, nsid);
            (cmd, None)
        });
        self.run_parallel(cmds, opts).await
    }

    /// Runs independent commands (each with optional data to send), at most
    /// [`SPLIT_PARALLELISM`] at a time, spread over the I/O queues. Returns the first error
    /// after every started command has finished.
    pub(crate) async fn run_parallel(
        &self,
        cmds: impl Iterator<Item = (Command, Option<IoBuf>)>,
        opts: SubmitOptions,
    ) -> Result<()> {
        let mut set: JoinSet<Result<()>> = JoinSet::new();
        let mut first_err = None;
        for (cmd, data) in cmds {
            if set.len() >= SPLIT_PARALLELISM
                && let Some(r) = set.join_next().await
            {
                keep_first(&mut first_err, r);
            }
            if first_err.is_some() {
                break;
            }
            let q: QueuePair = self.ctrl.pick_io_queue()?.clone();
            set.spawn(async move {
                let p = data.map_or(Payload::None, Payload::write);
                q.submit_checked_with(cmd, p, opts).await.map(|_| ())
            });
        }
        while let Some(r) = set.join_next().await {
            keep_first(&mut first_err, r);
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// The fallback for targets without Write Zeroes (single- and multipath devices): plain
/// writes of one zeroed buffer of up to `max_io_bytes` (at most 1 MiB), as the kernel does.
pub(crate) async fn write_zero_buffers(
    dev: &impl blockdev::BlockDevice,
    offset_bytes: u64,
    len_bytes: u64,
) -> Result<(), BlockError> {
    let chunk = u64::from(dev.info().max_io_bytes).min(1 << 20);
    let mut buf = IoBuf::new_zeroed(chunk as usize);
    let mut done = 0u64;
    while done < len_bytes {
        let n = chunk.min(len_bytes - done);
        buf.set_len(n as usize);
        buf = dev
            .write(offset_bytes + done, buf, WriteFlags::default())
            .await?;
        done += n;
    }
    Ok(())
}

fn keep_first(
    first: &mut Option<HostError>,
    r: std::result::Result<Result<()>, tokio::task::JoinError>,
) {
    let e = match r {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(j) => HostError::Usage(format!("command task failed: {j}")),
    };
    first.get_or_insert(e);
}
