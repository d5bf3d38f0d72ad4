//! NVM commands on a namespace, with `HostError` results (the `BlockDevice` impl maps
//! them). Large transfers are split at the device's `max_io_bytes`.

use blockdev::{BlockError, IoBuf, WriteFlags};
use nvme_proto::Command;
use nvme_proto::dsm::{Compare, WriteZeroes};
use nvme_proto::opcode::io;
use tokio::task::JoinSet;

use super::{RemoteNamespace, SPLIT_PARALLELISM};
use crate::error::{HostError, Result};
use crate::queue::{Payload, QueuePair};

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

    /// Moves `buf` to or from the namespace at `offset_bytes`, one command per
    /// `max_io_bytes` window of the same buffer, on one queue.
    async fn transfer(
        &self,
        opcode: u8,
        offset_bytes: u64,
        mut buf: IoBuf,
        fua: bool,
    ) -> Result<IoBuf> {
        let len = buf.len();
        self.check_aligned(offset_bytes, len as u64)?;
        let q = self.ctrl.pick_io_queue()?;
        let max = self.info.max_io_bytes as usize;
        let mut done = 0usize;
        while done < len {
            let n = max.min(len - done);
            let slba = (offset_bytes + done as u64) >> self.lba_shift;
            let blocks = (n >> self.lba_shift) as u32;
            let cmd = rw_command(opcode, self.nsid, slba, blocks, fua);
            let payload = if opcode == io::READ {
                Payload::FromController {
                    buf,
                    offset: done,
                    len: n,
                }
            } else {
                Payload::ToController {
                    buf,
                    offset: done,
                    len: n,
                }
            };
            buf = q
                .submit_checked(cmd, payload)
                .await?
                .buf
                .ok_or_else(|| HostError::invalid(&self.info.name, "data buffer lost"))?;
            done += n;
        }
        Ok(buf)
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
        let q = self.ctrl.pick_io_queue()?;
        q.submit_checked(Command::new(io::FLUSH, 0, self.nsid), Payload::None)
            .await?;
        Ok(())
    }

    /// Write Zeroes over the range, 65536 blocks per command, several in flight.
    pub async fn write_zeroes_at(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
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
        self.run_parallel(cmds).await
    }

    /// Runs independent commands (each with optional data to send), at most
    /// [`SPLIT_PARALLELISM`] at a time, spread over the I/O queues. Returns the first error
    /// after every started command has finished.
    pub(crate) async fn run_parallel(
        &self,
        cmds: impl Iterator<Item = (Command, Option<IoBuf>)>,
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
                q.submit_checked(cmd, p).await.map(|_| ())
            });
        }
        while let Some(r) = set.join_next().await {
            keep_first(&mut first_err, r);
        }
        first_err.map_or(Ok(()), Err)
    }

    /// The fallback for targets without Write Zeroes: plain writes of a zeroed buffer.
    pub(crate) async fn write_zero_buffers(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<(), BlockError> {
        use blockdev::BlockDevice;
        let chunk = u64::from(self.info.max_io_bytes).min(1 << 20);
        let mut buf = IoBuf::new_zeroed(chunk as usize);
        let mut done = 0u64;
        while done < len_bytes {
            let n = chunk.min(len_bytes - done);
            buf.set_len(n as usize);
            buf = self
                .write(offset_bytes + done, buf, WriteFlags::default())
                .await?;
            done += n;
        }
        Ok(())
    }
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
