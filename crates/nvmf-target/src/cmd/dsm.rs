//! Dataset Management: deallocate ranges (other attributes are hints and ignored).

use std::sync::Arc;
use std::time::Instant;

use blockdev::IoBuf;
use nvme_proto::dsm::{DsmCommand, DsmRange};
use nvme_proto::{Command, Status};

use crate::cmd::context::QueueContext;
use crate::cmd::nvm::io_error;
use crate::cmd::{Dispatch, Outcome, block_error_status};
use crate::fence::InflightGuard;
use crate::namespace::{BlockMedia, Namespace};
use crate::stats::OpKind;

impl QueueContext {
    pub(crate) fn exec_dsm(
        &mut self,
        cmd: &Command,
        ns: Arc<Namespace>,
        blk: Arc<BlockMedia>,
        data: Option<IoBuf>,
        guard: Option<InflightGuard>,
    ) -> Dispatch {
        let d = DsmCommand::from_command(cmd);
        let ranges = DsmRange::decode_list(data.as_deref().unwrap_or(&[]), usize::from(d.ranges));
        if let Some(b) = data {
            self.pool.put(b);
        }
        let ranges = match ranges {
            Ok(r) => r,
            Err(_) => {
                return Outcome::status(Status::DATA_SGL_LENGTH_INVALID.dnr())
                    .with_loc(24)
                    .into();
            }
        };
        // Check every range before touching any.
        let mut extents = Vec::with_capacity(ranges.len());
        for r in &ranges {
            if r.nlb == 0 {
                continue;
            }
            match blk.byte_range(r.slba, u64::from(r.nlb)) {
                Some(e) => extents.push(e),
                None => {
                    return Dispatch::Now(io_error(
                        Status::LBA_OUT_OF_RANGE.dnr(),
                        ns.nsid,
                        r.slba,
                    ));
                }
            }
        }
        if !d.deallocate() || !blk.device.info().supports_discard {
            return Outcome::ok().into();
        }
        let shard = self.shard;
        Dispatch::Later(Box::pin(async move {
            ns.counters.start(shard);
            let t0 = Instant::now();
            let mut result = Ok(());
            for (off, len) in extents {
                if let Err(e) = blk.device.discard(off, len).await {
                    result = Err(e);
                    break;
                }
            }
            drop(guard);
            let us = t0.elapsed().as_micros() as u64;
            ns.counters
                .finish(shard, OpKind::Other, 0, us, result.is_ok(), false);
            match result {
                Ok(()) => Outcome::ok(),
                Err(e) => io_error(block_error_status(&e, false), ns.nsid, 0),
            }
        }))
    }
}
