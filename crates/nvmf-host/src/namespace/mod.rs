//! A remote namespace as a `blockdev::BlockDevice`.
//!
//! Each I/O goes to the next I/O queue (round robin); I/O larger than the controller's
//! transfer limit (MDTS, and 65536 blocks per command) is split into commands that reuse
//! the caller's buffer window by window, so data is never copied.

mod dsm;
mod errors;
mod io;
mod reservation;

use blockdev::{
    BlockDevice, BlockError, DeviceInfo, DeviceKind, DeviceStats, IoBuf, IoFuture, StatsCounters,
    WriteFlags, check_range,
};
use nvme_proto::identify::controller::bits as cbits;
use nvme_proto::identify::namespace::bits as nbits;
use nvme_proto::identify::{IdentifyNamespace, csi};

pub use dsm::DSM_MAX_RANGES;
pub(crate) use errors::device_error;
pub use errors::{IoRange, host_error, to_block_error};
pub(crate) use io::write_zero_buffers;

use crate::controller::Controller;
use crate::error::{HostError, Result};

/// Most blocks one Read/Write/Write Zeroes command moves (NLB is a 16-bit 0's based field).
pub const MAX_BLOCKS_PER_COMMAND: u64 = 1 << 16;
/// Commands a split Write Zeroes or Deallocate keeps in flight.
pub const SPLIT_PARALLELISM: usize = 32;
/// First pause before re-sending a command that met an ANA transition on a single
/// path; doubles up to [`ANA_TRANSITION_MAX_RETRY`].
const ANA_TRANSITION_FIRST_RETRY: std::time::Duration = std::time::Duration::from_millis(20);
const ANA_TRANSITION_MAX_RETRY: std::time::Duration = std::time::Duration::from_millis(500);

/// The pauses of a command re-sent on a single path while it meets an ANA transition
/// (block I/O of [`RemoteNamespace`], the commands of a [`crate::KvNamespace`]), until
/// the controller's ANATT has passed since the first one (as the Linux host does
/// without multipath).
#[derive(Default)]
pub(crate) struct AnaTransitionWait {
    /// When the first transition was met, and the next pause.
    waited: Option<(tokio::time::Instant, std::time::Duration)>,
}

impl AnaTransitionWait {
    /// Pauses before the next attempt; false, at once, when `anatt` has passed since
    /// the first transition (the command fails with it).
    pub(crate) async fn pause(&mut self, anatt: std::time::Duration) -> bool {
        let (since, delay) = *self
            .waited
            .get_or_insert((tokio::time::Instant::now(), ANA_TRANSITION_FIRST_RETRY));
        if since.elapsed() >= anatt {
            return false;
        }
        tokio::time::sleep(delay).await;
        self.waited = Some((since, (delay * 2).min(ANA_TRANSITION_MAX_RETRY)));
        true
    }
}

/// One namespace of a connected controller.
pub struct RemoteNamespace {
    ctrl: Controller,
    nsid: u32,
    id: IdentifyNamespace,
    info: DeviceInfo,
    lba_shift: u32,
    stats: StatsCounters,
}

impl std::fmt::Debug for RemoteNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteNamespace")
            .field("name", &self.info.name)
            .field("size_bytes", &self.info.size_bytes)
            .field("lba_bytes", &self.info.logical_block_bytes)
            .finish()
    }
}

impl RemoteNamespace {
    /// Identifies namespace `nsid` of `ctrl` and wraps it.
    pub async fn open(ctrl: &Controller, nsid: u32) -> Result<RemoteNamespace> {
        if ctrl.io_queues().is_empty() {
            return Err(HostError::Usage(format!(
                "controller {} has no I/O queues to reach namespace {nsid}",
                ctrl.subnqn()
            )));
        }
        let context = || format!("namespace {nsid} of {} at {}", ctrl.subnqn(), ctrl.addr());
        let id = match ctrl.identify_namespace(nsid).await {
            Ok(id) => id,
            // A namespace of another command set has no NVM Identify Namespace.
            Err(e) if e.nvme_status().is_some() => {
                let set = ctrl.namespace_csi(nsid).await.unwrap_or(csi::NVM);
                if set == csi::KEY_VALUE {
                    return Err(HostError::invalid(
                        context(),
                        "not a block namespace: it is a Key Value namespace (CSI 01h); open it with KvNamespace (NvmeTcpUrl::open_kv, ferrobay bench --kv)",
                    ));
                }
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        if id.nsze == 0 {
            return Err(HostError::invalid(context(), "not active (NSZE is 0)"));
        }
        let lbaf = id.lba_format();
        let lba_bytes = lbaf.lba_bytes();
        if !lba_bytes.is_power_of_two() || !(512..=4096).contains(&lba_bytes) {
            return Err(HostError::invalid(
                context(),
                format!("LBA size {lba_bytes} bytes is not supported (512..4096)"),
            ));
        }
        if lbaf.ms != 0 {
            return Err(HostError::invalid(
                context(),
                format!(
                    "LBA format with {} metadata bytes is not supported",
                    lbaf.ms
                ),
            ));
        }
        let lba_shift = lba_bytes.trailing_zeros();
        let size_bytes = id.nsze.checked_mul(lba_bytes).ok_or_else(|| {
            HostError::invalid(context(), format!("NSZE {} overflows a byte size", id.nsze))
        })?;
        let max_io = u64::from(ctrl.max_transfer_bytes())
            .min(MAX_BLOCKS_PER_COMMAND * lba_bytes)
            .max(lba_bytes);
        let max_io = max_io - max_io % lba_bytes;
        let oncs = ctrl.id().oncs;
        let info = DeviceInfo {
            name: format!("nvme+tcp://{}/{}/{nsid}", ctrl.addr(), ctrl.subnqn()),
            kind: DeviceKind::Other("nvme-tcp".into()),
            size_bytes,
            logical_block_bytes: lba_bytes as u32,
            optimal_io_bytes: (u64::from(id.noiob) * lba_bytes).min(u64::from(u32::MAX)) as u32,
            max_io_bytes: max_io as u32,
            volatile_write_cache: ctrl.id().vwc & cbits::VWC_PRESENT != 0,
            supports_discard: oncs & cbits::ONCS_DSM != 0,
            supports_write_zeroes: oncs & cbits::ONCS_WRITE_ZEROES != 0,
            rotational: false,
        };
        Ok(RemoteNamespace {
            ctrl: ctrl.clone(),
            nsid,
            id,
            info,
            lba_shift,
            stats: StatsCounters::new(),
        })
    }

    pub fn nsid(&self) -> u32 {
        self.nsid
    }
    pub fn controller(&self) -> &Controller {
        &self.ctrl
    }
    /// Identify Namespace as read at open.
    pub fn id(&self) -> &IdentifyNamespace {
        &self.id
    }
    /// Whether the namespace may be attached to several controllers (NMIC).
    pub fn is_shared(&self) -> bool {
        self.id.nmic & nbits::NMIC_SHARED != 0
    }
    pub fn lba_bytes(&self) -> u64 {
        1 << self.lba_shift
    }

    fn fail(&self, e: HostError, offset_bytes: u64, len_bytes: u64) -> BlockError {
        device_error(
            &self.stats,
            self.info.size_bytes,
            e,
            offset_bytes,
            len_bytes,
        )
    }
}

impl BlockDevice for RemoteNamespace {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            let len = buf.len() as u64;
            check_range(&self.info, offset_bytes, len)?;
            if len == 0 {
                return Ok(buf);
            }
            let buf = self
                .read_at(offset_bytes, buf)
                .await
                .map_err(|e| self.fail(e, offset_bytes, len))?;
            self.stats.record_read(len);
            Ok(buf)
        })
    }

    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            let len = buf.len() as u64;
            check_range(&self.info, offset_bytes, len)?;
            if len == 0 {
                return Ok(buf);
            }
            let buf = self
                .write_at(offset_bytes, buf, flags.fua)
                .await
                .map_err(|e| self.fail(e, offset_bytes, len))?;
            self.stats.record_write(len);
            Ok(buf)
        })
    }

    fn flush(&self) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.flush_ns().await.map_err(|e| self.fail(e, 0, 0))?;
            self.stats.record_flush();
            Ok(())
        })
    }

    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            check_range(&self.info, offset_bytes, len_bytes)?;
            if len_bytes == 0 {
                return Ok(());
            }
            if !self.info.supports_write_zeroes {
                // Emulate with plain writes of zeroes, as the kernel does.
                return write_zero_buffers(self, offset_bytes, len_bytes).await;
            }
            self.write_zeroes_at(offset_bytes, len_bytes)
                .await
                .map_err(|e| self.fail(e, offset_bytes, len_bytes))
        })
    }

    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            check_range(&self.info, offset_bytes, len_bytes)?;
            if len_bytes == 0 || !self.info.supports_discard {
                // Deallocation is advisory: without DSM there is nothing to do.
                return Ok(());
            }
            self.deallocate_at(offset_bytes, len_bytes)
                .await
                .map_err(|e| self.fail(e, offset_bytes, len_bytes))
        })
    }

    fn stats(&self) -> DeviceStats {
        self.stats.snapshot()
    }
}
