//! The members of an owned volume as this processor node reaches them: NVMe/TCP
//! namespaces opened with the node's own host identity, each wrapped so that the first
//! Reservation Conflict fences the whole volume at once (no member I/O leaves this node
//! after that, not even background work of the volume engine).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use blockdev::{BlockDevice, BlockError, DeviceInfo, DeviceStats, IoBuf, IoFuture, WriteFlags};
use nvmf_host::{ConnectOptions, HostIdentity, NvmeTcpUrl, RemoteNamespace};
use tokio::sync::watch;

use super::error::ProcessorError;

/// Member connections of a processor node: short timeouts so that a dead storage node
/// is noticed in seconds (its member fails and the volume goes on degraded) instead of
/// the minutes a host-side default would wait.
pub fn member_connect_defaults() -> ConnectOptions {
    ConnectOptions {
        io_queues: 2,
        kato_ms: 2_000,
        io_timeout_ms: 4_000,
        admin_timeout_ms: 5_000,
        connect_timeout_ms: 3_000,
        reconnect_delay_ms: 250,
        reconnect_delay_max_ms: 1_000,
        ctrl_loss_tmo_ms: Some(3_000),
        ..ConnectOptions::default()
    }
}

/// Set once a member said another host holds the reservation: this node was fenced.
#[derive(Debug)]
pub(crate) struct FenceLatch {
    fenced: AtomicBool,
    tx: watch::Sender<bool>,
}

impl FenceLatch {
    pub fn new() -> Arc<FenceLatch> {
        Arc::new(FenceLatch {
            fenced: AtomicBool::new(false),
            tx: watch::Sender::new(false),
        })
    }

    /// Closes the latch: every later member I/O fails without being sent.
    pub fn close(&self, why: &str) {
        if !self.fenced.swap(true, Ordering::AcqRel) {
            tracing::warn!("processor: member I/O stopped: {why}");
            self.tx.send_replace(true);
        }
    }

    pub fn is_closed(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    /// Resolves once the latch is closed.
    pub async fn closed(&self) {
        let mut rx = self.tx.subscribe();
        let _ = rx.wait_for(|f| *f).await;
    }
}

/// One member namespace behind the fence latch. Its name is the member URL, so the
/// volume's status names members the way the volume record does.
pub(crate) struct MemberDevice {
    ns: Arc<RemoteNamespace>,
    info: DeviceInfo,
    latch: Arc<FenceLatch>,
}

impl MemberDevice {
    pub fn new(ns: Arc<RemoteNamespace>, url: &str, latch: Arc<FenceLatch>) -> MemberDevice {
        let mut info = ns.info().clone();
        info.name = url.to_string();
        MemberDevice { ns, info, latch }
    }

    fn check(&self) -> Result<(), BlockError> {
        if self.latch.is_closed() {
            Err(BlockError::ReservationConflict)
        } else {
            Ok(())
        }
    }

    fn seen<T>(&self, r: Result<T, BlockError>) -> Result<T, BlockError> {
        // nvmf-host reports NVMe Reservation Conflict (and preempt-and-abort) as this.
        if let Err(BlockError::ReservationConflict) = &r {
            self.latch.close(&format!(
                "{}: reservation conflict (fenced)",
                self.info.name
            ));
        }
        r
    }
}

impl BlockDevice for MemberDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn read(&self, offset_bytes: u64, buf: IoBuf) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            self.check()?;
            self.seen(self.ns.read(offset_bytes, buf).await)
        })
    }
    fn write(&self, offset_bytes: u64, buf: IoBuf, flags: WriteFlags) -> IoFuture<'_, IoBuf> {
        IoFuture::new(async move {
            self.check()?;
            self.seen(self.ns.write(offset_bytes, buf, flags).await)
        })
    }
    fn flush(&self) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.check()?;
            self.seen(self.ns.flush().await)
        })
    }
    fn write_zeroes(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.check()?;
            self.seen(self.ns.write_zeroes(offset_bytes, len_bytes).await)
        })
    }
    fn discard(&self, offset_bytes: u64, len_bytes: u64) -> IoFuture<'_, ()> {
        IoFuture::new(async move {
            self.check()?;
            self.seen(self.ns.discard(offset_bytes, len_bytes).await)
        })
    }
    fn stats(&self) -> DeviceStats {
        self.ns.stats()
    }
}

/// Connects to a member URL with this node's identity.
pub(crate) async fn open_member(
    url: &str,
    host: &HostIdentity,
    opts: &ConnectOptions,
) -> Result<Arc<RemoteNamespace>, ProcessorError> {
    let parsed = NvmeTcpUrl::parse(url)?;
    Ok(Arc::new(parsed.open(host, opts).await?))
}
