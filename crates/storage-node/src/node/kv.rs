//! Key Value namespaces: the `kv` engine on a namespace's extents, formatted at create,
//! opened (recovered) at start, closed at delete and shutdown, and served to hosts
//! through the target's [`KvBackend`] seam.

use std::collections::BTreeMap;
use std::sync::Arc;

use blockdev::{BlockDevice, IoBuf};
use nvme_proto::kv::{KvKey, StoreMode};
use nvmf_target::{KvBackend, KvBackendError, KvBufFuture, KvFuture, KvRetrieved, KvUsage};

use crate::extent_device::ExtentDevice;
use crate::state::{KvParams, NamespaceRecord};

use super::NodeError;

/// Largest value of a KV namespace unless the creator says otherwise (also what
/// Namespace Management from a host gets).
pub const DEFAULT_KV_MAX_VALUE_BYTES: u32 = 2 << 20;
/// Log segment size of KV namespaces large enough for 16 of them.
const DEFAULT_KV_SEGMENT_BYTES: u32 = 8 << 20;
/// Segments a namespace should hold at the default segment size; smaller namespaces get
/// the smallest segment the largest value allows.
const MIN_DEFAULT_SEGMENTS: u64 = 16;
/// Room a segment keeps beside its largest value (batch header and descriptor, each
/// block aligned), doubled with the value as the engine requires.
const SEGMENT_OVERHEAD_BYTES: u64 = 8 << 10;

/// The block device a KV store lives on: the namespace's extents as one device.
pub(crate) fn kv_device(
    drive: &Arc<dyn BlockDevice>,
    ns: &NamespaceRecord,
) -> Result<Arc<dyn BlockDevice>, NodeError> {
    let dev = ExtentDevice::new(drive.clone(), ns.extents.clone()).map_err(|e| {
        NodeError::Internal(format!("namespace {}/{}: {e}", ns.subsystem_nqn, ns.nsid))
    })?;
    Ok(Arc::new(dev))
}

/// Format options for a KV namespace of `size_bytes`: the default 8 MiB segments when 16
/// fit, else the smallest multiple of 1 MiB that holds two of the largest values.
pub(crate) fn format_options(
    size_bytes: u64,
    max_value_bytes: u32,
    max_keys: Option<u64>,
) -> kv::FormatOptions {
    let default = u64::from(DEFAULT_KV_SEGMENT_BYTES);
    let need = 2 * (u64::from(max_value_bytes) + SEGMENT_OVERHEAD_BYTES);
    let segment_bytes = if size_bytes / default >= MIN_DEFAULT_SEGMENTS && need <= default {
        default
    } else {
        need.div_ceil(1 << 20) * (1 << 20)
    };
    kv::FormatOptions {
        segment_bytes: u32::try_from(segment_bytes).unwrap_or(u32::MAX),
        max_value_bytes,
        max_keys,
    }
}

/// Most keys of a KV namespace unless the creator says otherwise: one per 8 KiB, at
/// least 1024 (the engine's own default, made explicit so the node state records it).
pub(crate) fn default_max_keys(size_bytes: u64) -> u64 {
    (size_bytes / 8192).max(1024)
}

/// The format parameters of a new KV namespace of `size_bytes` (whole 1 MiB units).
pub(crate) fn resolve_params(
    size_bytes: u64,
    max_value_bytes: u32,
    max_keys: Option<u64>,
) -> KvParams {
    let max_keys = max_keys.unwrap_or_else(|| default_max_keys(size_bytes));
    let opts = format_options(size_bytes, max_value_bytes, Some(max_keys));
    KvParams {
        max_value_bytes,
        max_keys,
        segment_bytes: opts.segment_bytes,
    }
}

/// The engine's format options for `params`.
pub(crate) fn options_of(params: &KvParams) -> kv::FormatOptions {
    kv::FormatOptions {
        segment_bytes: params.segment_bytes,
        max_value_bytes: params.max_value_bytes,
        max_keys: Some(params.max_keys),
    }
}

/// Formats the store of a new KV namespace and opens it. Returns the engine and the
/// parameters it was formatted with.
pub(crate) async fn format_and_open(
    dev: Arc<dyn BlockDevice>,
    opts: &kv::FormatOptions,
) -> Result<(kv::Kv, KvParams), NodeError> {
    let size_bytes = dev.info().size_bytes;
    let info = kv::Kv::format(&dev, opts).await.map_err(|e| match e {
        kv::KvError::InvalidOptions(why) => NodeError::BadRequest(format!(
            "a KV namespace of {size_bytes} bytes with values up to {} bytes cannot be formatted: {why}",
            opts.max_value_bytes
        )),
        other => NodeError::Internal(format!("formatting the KV store failed: {other}")),
    })?;
    let (engine, _) = kv::Kv::open(dev, kv::Options::default())
        .await
        .map_err(|e| NodeError::Internal(format!("cannot open the new KV store: {e}")))?;
    Ok((engine, params_of(&info)))
}

pub(crate) fn params_of(info: &kv::FormatInfo) -> KvParams {
    KvParams {
        max_value_bytes: info.max_value_bytes,
        max_keys: info.max_keys,
        segment_bytes: info.segment_bytes,
    }
}

/// A KV namespace as the node holds it: its engine, or why it could not be opened.
#[derive(Clone)]
pub(crate) struct KvEntry {
    pub engine: Option<kv::Kv>,
    /// Why the store is not serving (open failed), for `ns list` and logs.
    pub failure: Option<String>,
    pub backend: Arc<dyn KvBackend>,
}

impl KvEntry {
    pub fn serving(engine: kv::Kv) -> KvEntry {
        KvEntry {
            backend: Arc::new(EngineBackend {
                engine: engine.clone(),
            }),
            engine: Some(engine),
            failure: None,
        }
    }

    pub fn failed(reason: String) -> KvEntry {
        KvEntry {
            backend: Arc::new(FailedBackend {
                reason: reason.clone(),
            }),
            engine: None,
            failure: Some(reason),
        }
    }
}

/// The KV namespaces of a node, by (subsystem NQN, NSID).
pub(crate) type KvNamespaces = BTreeMap<(String, u32), KvEntry>;

/// Opens the store of every KV namespace in `namespaces` (recovery: checkpoint plus log
/// replay). A store that cannot be opened is kept as a failed entry: the namespace is
/// exported not ready (Identify NSTAT), its commands answer Namespace Not Ready, and the
/// rest of the node serves on.
pub(crate) async fn open_all(
    namespaces: &[NamespaceRecord],
    drives: &BTreeMap<uuid::Uuid, Arc<dyn BlockDevice>>,
) -> KvNamespaces {
    let mut out = KvNamespaces::new();
    for ns in namespaces.iter().filter(|n| n.kind.is_kv()) {
        let key = (ns.subsystem_nqn.clone(), ns.nsid);
        let opened = match drives.get(&ns.drive_uuid) {
            None => Err(format!("drive {} is not open", ns.drive_uuid)),
            Some(drive) => match kv_device(drive, ns) {
                Err(e) => Err(e.to_string()),
                Ok(dev) => kv::Kv::open(dev, kv::Options::default())
                    .await
                    .map_err(|e| e.to_string()),
            },
        };
        let entry = match opened {
            Ok((engine, report)) => {
                tracing::info!(
                    nqn = %ns.subsystem_nqn, nsid = ns.nsid,
                    keys = report.key_count,
                    checkpoint = report.checkpoint_generation,
                    replayed_records = report.replayed_records,
                    replayed_bytes = report.replayed_bytes,
                    "KV namespace recovered"
                );
                if let Some(why) = &report.checkpoint_fallback {
                    tracing::warn!(nqn = %ns.subsystem_nqn, nsid = ns.nsid, reason = %why, "newest KV checkpoint unusable; recovered from the older one");
                }
                KvEntry::serving(engine)
            }
            Err(reason) => {
                tracing::error!(
                    nqn = %ns.subsystem_nqn, nsid = ns.nsid, %reason,
                    "KV namespace cannot be opened: exported as not ready"
                );
                KvEntry::failed(reason)
            }
        };
        out.insert(key, entry);
    }
    out
}

/// Closes a store (everything acknowledged made durable, a checkpoint written); logs
/// and returns the failure, if any.
pub(crate) async fn close(nqn: &str, nsid: u32, entry: &KvEntry) -> Result<(), String> {
    let Some(engine) = &entry.engine else {
        return Ok(());
    };
    engine.close().await.map_err(|e| {
        tracing::error!(%nqn, nsid, error = %e, "closing the KV store failed");
        format!("close KV namespace {nsid} of {nqn}: {e}")
    })
}

/// The target's view of an engine error.
fn backend_error(e: kv::KvError) -> KvBackendError {
    match e.kind() {
        kv::ErrorKind::InvalidKeySize => KvBackendError::InvalidKeySize,
        kv::ErrorKind::InvalidValueSize => KvBackendError::InvalidValueSize,
        kv::ErrorKind::KeyNotFound => KvBackendError::KeyNotFound,
        kv::ErrorKind::KeyExists => KvBackendError::KeyExists,
        kv::ErrorKind::CapacityExceeded => KvBackendError::CapacityExceeded(e.to_string()),
        kv::ErrorKind::Unrecovered => KvBackendError::Unrecovered(e.to_string()),
        kv::ErrorKind::Internal => match e {
            kv::KvError::Closed => KvBackendError::NotReady(e.to_string()),
            other => KvBackendError::Internal(other.to_string()),
        },
    }
}

fn store_mode(m: StoreMode) -> kv::StoreMode {
    match m {
        StoreMode::Always => kv::StoreMode::Upsert,
        StoreMode::OnlyIfExists => kv::StoreMode::OnlyIfExists,
        StoreMode::OnlyIfAbsent => kv::StoreMode::OnlyIfAbsent,
    }
}

/// A KV namespace served by the engine.
struct EngineBackend {
    engine: kv::Kv,
}

impl KvBackend for EngineBackend {
    fn store<'a>(&'a self, key: &'a [u8], value: &'a [u8], mode: StoreMode) -> KvFuture<'a, ()> {
        Box::pin(async move {
            self.engine
                .store(key, value, store_mode(mode))
                .await
                .map_err(backend_error)
        })
    }

    fn retrieve<'a>(&'a self, key: &'a [u8], out: &'a mut [u8]) -> KvFuture<'a, KvRetrieved> {
        Box::pin(async move {
            let r = self
                .engine
                .retrieve(key, out)
                .await
                .map_err(backend_error)?;
            Ok(KvRetrieved {
                value_bytes: r.value_bytes,
                copied_bytes: r.copied_bytes,
            })
        })
    }

    fn store_buf<'a>(
        &'a self,
        key: &'a [u8],
        value: IoBuf,
        mode: StoreMode,
    ) -> KvBufFuture<'a, ()> {
        Box::pin(async move {
            let (r, buf) = self.engine.store_buf(key, value, store_mode(mode)).await;
            (r.map_err(backend_error), buf)
        })
    }

    fn retrieve_buf<'a>(&'a self, key: &'a [u8], buf: IoBuf) -> KvBufFuture<'a, KvRetrieved> {
        Box::pin(async move {
            let (r, buf) = self.engine.retrieve_buf(key, buf).await;
            let r = r.map_err(backend_error).map(|r| KvRetrieved {
                value_bytes: r.value_bytes,
                copied_bytes: r.copied_bytes,
            });
            (r, Some(buf))
        })
    }

    fn delete<'a>(&'a self, key: &'a [u8]) -> KvFuture<'a, ()> {
        Box::pin(async move { self.engine.delete(key).await.map_err(backend_error) })
    }

    fn flush(&self) -> KvFuture<'_, ()> {
        Box::pin(async move { self.engine.sync().await.map_err(backend_error) })
    }

    fn exists(&self, key: &[u8]) -> Result<bool, KvBackendError> {
        self.engine.exists(key).map_err(backend_error)
    }

    fn list(&self, from: Option<&[u8]>, max: usize) -> Result<Vec<KvKey>, KvBackendError> {
        let keys = self
            .engine
            .list(from.unwrap_or(&[]), max)
            .map_err(backend_error)?;
        Ok(keys
            .iter()
            .filter_map(|k| KvKey::new(k.as_bytes()).ok())
            .collect())
    }

    fn usage(&self) -> KvUsage {
        let u = self.engine.usage();
        KvUsage {
            capacity_bytes: u.capacity_bytes,
            used_bytes: u.live_bytes,
            key_count: u.key_count,
            max_keys: u.max_keys,
        }
    }
}

/// A KV namespace whose store could not be opened: exported not ready.
struct FailedBackend {
    reason: String,
}

impl FailedBackend {
    fn err(&self) -> KvBackendError {
        KvBackendError::NotReady(self.reason.clone())
    }
}

impl KvBackend for FailedBackend {
    fn store<'a>(&'a self, _: &'a [u8], _: &'a [u8], _: StoreMode) -> KvFuture<'a, ()> {
        let e = self.err();
        Box::pin(async move { Err(e) })
    }
    fn retrieve<'a>(&'a self, _: &'a [u8], _: &'a mut [u8]) -> KvFuture<'a, KvRetrieved> {
        let e = self.err();
        Box::pin(async move { Err(e) })
    }
    fn delete<'a>(&'a self, _: &'a [u8]) -> KvFuture<'a, ()> {
        let e = self.err();
        Box::pin(async move { Err(e) })
    }
    fn flush(&self) -> KvFuture<'_, ()> {
        let e = self.err();
        Box::pin(async move { Err(e) })
    }
    fn exists(&self, _: &[u8]) -> Result<bool, KvBackendError> {
        Err(self.err())
    }
    fn list(&self, _: Option<&[u8]>, _: usize) -> Result<Vec<KvKey>, KvBackendError> {
        Err(self.err())
    }
    fn usage(&self) -> KvUsage {
        KvUsage::default()
    }
    fn is_ready(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_fit_small_namespaces() {
        let big = format_options(1 << 30, 2 << 20, None);
        assert_eq!(big.segment_bytes, 8 << 20);
        // 64 MiB holds only 8 default segments: smaller ones, still two 2 MiB values.
        let small = format_options(64 << 20, 2 << 20, None);
        assert_eq!(small.segment_bytes, 5 << 20);
        // A 4 MiB largest value never fits 8 MiB segments (two values plus headers).
        assert_eq!(
            format_options(1 << 30, 4 << 20, None).segment_bytes,
            9 << 20
        );
    }
}
