//! A remote Key Value namespace (I/O Command Set 01h): Store, Retrieve, Delete, Exist
//! and List on the same controller and I/O queues as [`crate::RemoteNamespace`].
//!
//! - [`KvNamespace`]: one namespace through one controller.
//! - [`crate::MultipathKvNamespace`]: one namespace through several controllers, by ANA
//!   state, with failover (the multipath machinery of block namespaces).
//! - [`AnyKvNamespace`]: either, as [`crate::NvmeTcpUrl::open_kv`] opens them.
//!
//! Commands are pipelined: every call takes a free command slot of a queue and waits for
//! its completion, so many calls in flight at once fill the queues (up to the queue
//! depth per I/O queue). Values and buffers are the caller's [`IoBuf`]s, moved to the
//! queue and handed back with the result ([`BufResult`]), also on failure: nothing is
//! allocated or copied per command on the data path. A value travels in one command, so
//! it is at most the namespace's largest value (KVVML) and the controller's largest
//! transfer (MDTS); larger values, empty values and keys outside 1..=KVKML bytes are
//! refused here, before anything is sent.
//!
//! # Which commands are sent again after a reconnect
//!
//! All five, as reads and writes of a block namespace are (see the crate docs): each is
//! idempotent in effect. Two answers of a re-sent command can be caused by its first
//! attempt, which reached the target before the connection died, and are handled:
//! - a re-sent Delete that answers KV Key Does Not Exist (possible only when the
//!   namespace's EDNEK is set; by default Delete of an absent key succeeds) succeeded:
//!   the key is gone, as asked;
//! - a re-sent create-only Store (`StoreMode::OnlyIfAbsent`) that answers Key Exists
//!   fails with [`KvError::CreateOutcomeUnknown`]: the first attempt may have stored the
//!   value, or another host may have; the caller reads the value to know.
//!
//! The same holds for a command a multipath namespace fails over to another path. An
//! overwrite-only Store (`OnlyIfExists`) sent twice stores the same value twice; an
//! upsert likewise. As with block writes, two Stores of one key in flight at once land in
//! either order.

mod error;
mod ops;

use blockdev::IoBuf;
use nvme_proto::identify::csi;
use nvme_proto::kv::KvKey;
use nvme_proto::kv::list::{NRK_BYTES, entry_bytes};

pub use error::{KvError, SizeLimit};
pub use nvme_proto::kv::StoreMode;
pub(crate) use ops::{Attempt, KvRaw};

use crate::controller::Controller;
use crate::error::{HostError, Result};
use crate::multipath::MultipathKvNamespace;
use crate::namespace::AnaTransitionWait;
use crate::queue::SubmitOptions;

/// A result and the buffer the command carried, which comes back also on failure.
pub type BufResult<T> = (Result<T, KvError>, IoBuf);

/// Bytes of the List buffer [`KvNamespace::list`] uses per key asked for: a 16-byte key
/// with its length field and padding.
pub const LIST_ENTRY_MAX_BYTES: usize = entry_bytes(KvKey::MAX_BYTES);

/// What the namespace reported when it was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvNamespaceInfo {
    /// `nvme+tcp://ADDR/SUBNQN/NSID`
    pub name: String,
    pub nsid: u32,
    /// NSZE: bytes of values the namespace holds.
    pub capacity_bytes: u64,
    /// KVKML: the longest key (at most 16).
    pub max_key_bytes: usize,
    /// The largest value this host stores or retrieves: KVVML, and at most MDTS.
    pub max_value_bytes: u32,
    /// KVVML as reported.
    pub kvvml_bytes: u32,
    /// The controller's largest transfer (MDTS) when the namespace was opened.
    pub max_transfer_bytes: u32,
    /// MNKS: most keys (0: not reported).
    pub max_keys: u32,
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    pub uuid: [u8; 16],
    pub anagrpid: u32,
}

/// Reads what a host needs to know about KV namespace `nsid` of `ctrl`: its command set
/// (a namespace of another set is refused, naming it), readiness and KV format.
pub(crate) async fn identify(ctrl: &Controller, nsid: u32) -> Result<KvNamespaceInfo> {
    let context = || format!("namespace {nsid} of {} at {}", ctrl.subnqn(), ctrl.addr());
    let descriptors = ctrl.ns_descriptors(nsid).await?;
    let set = descriptors
        .as_ref()
        .and_then(|l| l.csi())
        .unwrap_or(csi::NVM);
    if set != csi::KEY_VALUE {
        let what = match set {
            csi::NVM => "an NVM (block) namespace (CSI 00h): open it as a block device".into(),
            csi::ZONED => "a zoned namespace (CSI 02h)".into(),
            other => format!("of I/O command set {other:#04x}"),
        };
        return Err(HostError::invalid(
            context(),
            format!("not a Key Value namespace: it is {what}"),
        ));
    }
    let indep = ctrl.identify_ns_independent(nsid).await?;
    if indep.nstat & nvme_proto::identify::independent::bits::NSTAT_READY == 0 {
        return Err(HostError::invalid(
            context(),
            "the Key Value namespace is not ready (NSTAT): its store is not serving",
        ));
    }
    let id = ctrl.identify_kv_namespace(nsid).await?;
    if id.nsze_bytes == 0 {
        return Err(HostError::invalid(context(), "not active (NSZE is 0)"));
    }
    // KV 1.0 has no field naming the format in use; Ferrobay and the implementations
    // we know report one format.
    let f = id.formats()[0];
    let max_key_bytes = usize::from(f.max_key_bytes);
    if !(1..=KvKey::MAX_BYTES).contains(&max_key_bytes) {
        return Err(HostError::invalid(
            context(),
            format!("KV format 0 has a maximum key length of {max_key_bytes} bytes (1..16)"),
        ));
    }
    if f.max_value_bytes == 0 {
        return Err(HostError::invalid(
            context(),
            "KV format 0 has a maximum value length of 0",
        ));
    }
    let mdts = ctrl.max_transfer_bytes();
    let mut uuid = [0u8; 16];
    if let Some(l) = &descriptors {
        for d in &l.descriptors {
            if let nvme_proto::identify::NsIdDescriptor::Uuid(u) = d {
                uuid = *u;
            }
        }
    }
    Ok(KvNamespaceInfo {
        name: format!("nvme+tcp://{}/{}/{nsid}", ctrl.addr(), ctrl.subnqn()),
        nsid,
        capacity_bytes: id.nsze_bytes,
        max_key_bytes,
        max_value_bytes: f.max_value_bytes.min(mdts),
        kvvml_bytes: f.max_value_bytes,
        max_transfer_bytes: mdts,
        max_keys: f.max_keys,
        nguid: id.nguid,
        eui64: id.eui64,
        uuid,
        anagrpid: id.anagrpid,
    })
}

/// A page of keys from [`KvNamespace::list`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KvPage {
    /// Keys in order, from the start key (inclusive).
    pub keys: Vec<KvKey>,
    /// Where the next page starts (the successor of the last key), or None when the
    /// listing reached the last key.
    pub next: Option<KvKey>,
}

/// Builds a page from List data asked with room for `max_keys` 16-byte entries.
pub(crate) fn page_of(data: &[u8], max_keys: usize) -> Result<KvPage, KvError> {
    let list =
        nvme_proto::kv::KvListData::parse(data).map_err(|e| KvError::BadListData(e.to_string()))?;
    let mut keys: Vec<KvKey> = list.iter().take(max_keys).collect();
    keys.dedup();
    // More may follow when the page is full in keys, or the buffer had no room left
    // for another entry of the longest key.
    let used: usize = NRK_BYTES
        + keys
            .iter()
            .map(|k| entry_bytes(k.len_bytes()))
            .sum::<usize>();
    let full = keys.len() >= max_keys
        || (list.count() as usize) > keys.len()
        || data.len() - used.min(data.len()) < LIST_ENTRY_MAX_BYTES;
    let next = if full && !keys.is_empty() {
        keys.last().and_then(KvKey::successor)
    } else {
        None
    };
    Ok(KvPage { keys, next })
}

/// List buffer size for a page of `max_keys` keys.
pub(crate) fn list_buffer_bytes(max_keys: usize) -> usize {
    max_keys
        .max(1)
        .saturating_mul(LIST_ENTRY_MAX_BYTES)
        .saturating_add(NRK_BYTES)
}

/// One Key Value namespace through one controller.
pub struct KvNamespace {
    ctrl: Controller,
    info: KvNamespaceInfo,
}

impl std::fmt::Debug for KvNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvNamespace")
            .field("name", &self.info.name)
            .field("max_value_bytes", &self.info.max_value_bytes)
            .finish()
    }
}

impl KvNamespace {
    /// Identifies namespace `nsid` of `ctrl` and wraps it. Fails, naming the command
    /// set, when it is not a Key Value namespace; and when it is not ready.
    pub async fn open(ctrl: &Controller, nsid: u32) -> Result<KvNamespace> {
        if ctrl.io_queues().is_empty() {
            return Err(HostError::Usage(format!(
                "controller {} has no I/O queues to reach namespace {nsid}",
                ctrl.subnqn()
            )));
        }
        let info = identify(ctrl, nsid).await?;
        Ok(KvNamespace {
            ctrl: ctrl.clone(),
            info,
        })
    }

    /// The first active Key Value namespace of `ctrl` (Identify CNS 07h for CSI 01h).
    pub async fn open_first(ctrl: &Controller) -> Result<KvNamespace> {
        let nsid = ctrl
            .active_namespaces_of(csi::KEY_VALUE)
            .await?
            .first()
            .copied()
            .ok_or_else(|| {
                HostError::invalid(
                    format!("{} at {}", ctrl.subnqn(), ctrl.addr()),
                    "the subsystem has no active Key Value namespace",
                )
            })?;
        KvNamespace::open(ctrl, nsid).await
    }

    pub fn info(&self) -> &KvNamespaceInfo {
        &self.info
    }
    pub fn nsid(&self) -> u32 {
        self.info.nsid
    }
    pub fn controller(&self) -> &Controller {
        &self.ctrl
    }

    pub(crate) fn raw(&self) -> KvRaw<'_> {
        KvRaw {
            ctrl: &self.ctrl,
            info: &self.info,
        }
    }

    /// Runs `op` until it does not meet an ANA transition, or the controller's ANATT
    /// has passed (as [`crate::RemoteNamespace`] does on a single path). `op` gets the
    /// buffer and hands it back.
    async fn ana_wait<T, F, Fut>(&self, mut buf: IoBuf, mut op: F) -> BufResult<T>
    where
        F: FnMut(IoBuf) -> Fut,
        Fut: std::future::Future<Output = BufResult<T>>,
    {
        let mut ana = AnaTransitionWait::default();
        loop {
            let (r, back) = op(buf).await;
            match r {
                Err(e) if e.is_ana_transition() => {
                    if !ana.pause(self.ctrl.anatt()).await {
                        return (Err(e), back);
                    }
                    buf = back;
                }
                r => return (r, back),
            }
        }
    }

    /// Stores `value` (all of it: its length is the value size) under `key`, as `mode`
    /// allows. Durable when it returns `Ok` (the namespace acknowledges a Store once it
    /// is durable).
    pub async fn store(&self, key: &[u8], value: IoBuf, mode: StoreMode) -> BufResult<()> {
        self.ana_wait(value, |v| {
            self.raw()
                .store(key, v, mode, SubmitOptions::RETRY, Attempt::FIRST)
        })
        .await
    }

    /// Retrieves `key`'s value into `buf` (its length is the host buffer size; 0 asks
    /// for the size only). Returns the size of the whole value, as the completion's DW0
    /// reports it: when it exceeds `buf.len()`, `buf` holds the value's first bytes and
    /// a buffer of the returned size gets the rest. Bytes of `buf` past the value are
    /// zero.
    pub async fn retrieve(&self, key: &[u8], buf: IoBuf) -> BufResult<u32> {
        self.ana_wait(buf, |b| {
            self.raw()
                .retrieve(key, b, SubmitOptions::RETRY, Attempt::FIRST)
        })
        .await
    }

    /// Deletes `key`. Deleting an absent key succeeds unless the namespace's Key Value
    /// Configuration has EDNEK set (then [`KvError::KeyNotFound`]).
    pub async fn delete(&self, key: &[u8]) -> Result<(), KvError> {
        self.ana_wait(IoBuf::new_zeroed(0), |b| async move {
            let r = self
                .raw()
                .delete(key, SubmitOptions::RETRY, Attempt::FIRST)
                .await;
            (r, b)
        })
        .await
        .0
    }

    /// Whether `key` exists (Exist; KV Key Does Not Exist is `Ok(false)`).
    pub async fn exist(&self, key: &[u8]) -> Result<bool, KvError> {
        self.ana_wait(IoBuf::new_zeroed(0), |b| async move {
            let r = self
                .raw()
                .exist(key, SubmitOptions::RETRY, Attempt::FIRST)
                .await;
            (r, b)
        })
        .await
        .0
    }

    /// List into the caller's buffer (its length is the host buffer size, 4 bytes up
    /// to MDTS): the keys from `start` (inclusive; None: from the first key) whose
    /// entries fit. Returns the number of keys; read them with
    /// `nvme_proto::kv::KvListData::parse(&buf)` (already checked here).
    pub async fn list_into(&self, start: Option<&[u8]>, buf: IoBuf) -> BufResult<u32> {
        self.ana_wait(buf, |b| {
            self.raw()
                .list(start, b, SubmitOptions::RETRY, Attempt::FIRST)
        })
        .await
    }

    /// Up to `max_keys` keys in order from `start` (inclusive; None: from the first
    /// key), with where the next page starts. Allocates the page; see
    /// [`KvNamespace::list_into`] for the allocation-free form.
    pub async fn list(&self, start: Option<&[u8]>, max_keys: usize) -> Result<KvPage, KvError> {
        let n = list_buffer_bytes(max_keys).min(self.info.max_transfer_bytes as usize);
        let (r, buf) = self.list_into(start, IoBuf::new_zeroed(n)).await;
        r?;
        page_of(&buf, max_keys)
    }

    /// Every key from `start` on, page by page of `page_keys`.
    pub async fn list_all(
        &self,
        start: Option<&[u8]>,
        page_keys: usize,
    ) -> Result<Vec<KvKey>, KvError> {
        let mut out = Vec::new();
        let mut from = start.map(|s| s.to_vec());
        loop {
            let page = self.list(from.as_deref(), page_keys).await?;
            out.extend_from_slice(&page.keys);
            match page.next {
                Some(k) => from = Some(k.as_bytes().to_vec()),
                None => return Ok(out),
            }
        }
    }
}

/// A KV namespace through one path or several, as [`crate::NvmeTcpUrl::open_kv`] opens
/// it: the same operations either way.
#[derive(Debug)]
pub enum AnyKvNamespace {
    Single(KvNamespace),
    Multipath(MultipathKvNamespace),
}

impl AnyKvNamespace {
    pub fn info(&self) -> &KvNamespaceInfo {
        match self {
            AnyKvNamespace::Single(n) => n.info(),
            AnyKvNamespace::Multipath(n) => n.info(),
        }
    }
    pub async fn store(&self, key: &[u8], value: IoBuf, mode: StoreMode) -> BufResult<()> {
        match self {
            AnyKvNamespace::Single(n) => n.store(key, value, mode).await,
            AnyKvNamespace::Multipath(n) => n.store(key, value, mode).await,
        }
    }
    pub async fn retrieve(&self, key: &[u8], buf: IoBuf) -> BufResult<u32> {
        match self {
            AnyKvNamespace::Single(n) => n.retrieve(key, buf).await,
            AnyKvNamespace::Multipath(n) => n.retrieve(key, buf).await,
        }
    }
    pub async fn delete(&self, key: &[u8]) -> Result<(), KvError> {
        match self {
            AnyKvNamespace::Single(n) => n.delete(key).await,
            AnyKvNamespace::Multipath(n) => n.delete(key).await,
        }
    }
    pub async fn exist(&self, key: &[u8]) -> Result<bool, KvError> {
        match self {
            AnyKvNamespace::Single(n) => n.exist(key).await,
            AnyKvNamespace::Multipath(n) => n.exist(key).await,
        }
    }
    pub async fn list_into(&self, start: Option<&[u8]>, buf: IoBuf) -> BufResult<u32> {
        match self {
            AnyKvNamespace::Single(n) => n.list_into(start, buf).await,
            AnyKvNamespace::Multipath(n) => n.list_into(start, buf).await,
        }
    }
    pub async fn list(&self, start: Option<&[u8]>, max_keys: usize) -> Result<KvPage, KvError> {
        match self {
            AnyKvNamespace::Single(n) => n.list(start, max_keys).await,
            AnyKvNamespace::Multipath(n) => n.list(start, max_keys).await,
        }
    }
    /// Disconnects every controller (outstanding commands fail).
    pub async fn disconnect(&self) {
        match self {
            AnyKvNamespace::Single(n) => n.controller().disconnect().await,
            AnyKvNamespace::Multipath(n) => n.disconnect().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_proto::kv::encode_list;

    fn k(b: &[u8]) -> KvKey {
        KvKey::new(b).expect("key")
    }

    #[test]
    fn pages_say_whether_more_may_follow() {
        let keys: Vec<KvKey> = (0..5u8).map(|i| k(&[b'k', i])).collect();
        // Room for 8 long entries, 5 short keys: the listing is complete.
        let data = encode_list(&keys, list_buffer_bytes(8));
        let p = page_of(&data, 8).expect("page");
        assert_eq!((p.keys.len(), p.next), (5, None));
        // Asked for 3: full, the next page starts right after the third key.
        let p = page_of(&data, 3).expect("page");
        assert_eq!(p.keys, keys[..3]);
        assert_eq!(p.next, Some(k(&[b'k', 2, 0])));
        // A buffer too small for one more long entry: more may follow.
        let data = encode_list(&keys, 4 + 5 * 4 + 8);
        let p = page_of(&data, 100).expect("page");
        assert_eq!(p.keys.len(), 5);
        assert!(p.next.is_some());
        assert!(matches!(
            page_of(&[1, 0, 0, 0, 0, 0], 4),
            Err(KvError::BadListData(_))
        ));
    }
}
