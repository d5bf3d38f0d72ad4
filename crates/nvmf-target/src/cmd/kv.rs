//! Key Value command set (CSI 01h): Store, Retrieve, List, Delete and Exist, decoded by
//! [`KvCommand::decode`], checked against the namespace's KV format and run on its
//! [`crate::KvBackend`]; Flush and the reservation commands it shares with NVM.
//!
//! Checks, in order, each failure completing with DNR and the SQE byte of the field:
//! 1. the SQE decodes as a KV command (`KvCommand::decode`: opcode, FUSE, KL ≤ 16,
//!    KL ≠ 0 except List, options, reserved bits);
//! 2. the key fits the format (KVKML): Invalid Key Size;
//! 3. reservations: Store and Delete need write access, the others read access;
//! 4. Store: value size 1..=KVVML (Invalid Value Size), the data is exactly the value
//!    (Data SGL Length Invalid); Retrieve and List: the host buffer is at most MDTS
//!    (Invalid Field, CDW10) and exactly the data length (Data SGL Length Invalid); List:
//!    a buffer below the 4-byte count is Invalid Field.
//!
//! Retrieve fills the host buffer with the first min(value, buffer) bytes, zeros after
//! them, and reports the whole value's size in DW0; List fills it with the count and the
//! whole key entries that fit, zeros after them. Either way the transfer is the length
//! the host described (hosts, nvmf-host among them, check it), so a host should size its
//! buffer near the value. Delete of an absent key succeeds unless the Key Value
//! Configuration feature's EDNEK is set.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use blockdev::IoBuf;
use nvme_proto::kv::key::KL_SQE_BYTE;
use nvme_proto::kv::list::NRK_BYTES;
use nvme_proto::kv::{KvCommand, KvKey, KvListWriter};
use nvme_proto::opcode::{io, kv as kvop};
use nvme_proto::{Command, Status};

use crate::cmd::context::QueueContext;
use crate::cmd::io::ActiveNs;
use crate::cmd::{Acct, Dispatch, Outcome};
use crate::fence::InflightGuard;
use crate::kv_backend::{KvBackend, KvBackendError};
use crate::namespace::{KvMedia, Namespace};
use crate::resv_api::HostRef;
use crate::stats::OpKind;
use crate::target::TargetInner;

/// SQE byte of CDW10 (value size, host buffer size), for the error log.
const CDW10_SQE_BYTE: u16 = 40;
/// SQE byte of the data pointer (SGL1), for the error log.
const SGL_SQE_BYTE: u16 = 24;
/// Keys a List asks the backend for at a time (bounds its allocation per call).
const LIST_CHUNK_KEYS: usize = 1024;

const _: () = assert!(KL_SQE_BYTE == 44 && CDW10_SQE_BYTE == 40);

/// Opcodes of the Key Value command set this target implements.
pub(crate) fn known_opcode(op: u8) -> bool {
    matches!(
        op,
        kvop::FLUSH
            | kvop::STORE
            | kvop::RETRIEVE
            | kvop::LIST
            | kvop::DELETE
            | kvop::EXIST
            | io::RESERVATION_REGISTER
            | io::RESERVATION_ACQUIRE
            | io::RESERVATION_RELEASE
            | io::RESERVATION_REPORT
    )
}

impl QueueContext {
    /// Executes a Key Value command set command on `active` (checked by
    /// [`QueueContext::exec_io`]: attached to this host, accessible through this port).
    pub(crate) fn exec_kv(
        &mut self,
        cmd: &Command,
        active: ActiveNs,
        kv: Arc<KvMedia>,
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
                ..Outcome::status(st).with_loc(loc)
            })
        };
        match op {
            io::RESERVATION_REGISTER
            | io::RESERVATION_ACQUIRE
            | io::RESERVATION_RELEASE
            | io::RESERVATION_REPORT => return self.exec_resv(cmd, ns, data, xfer_len),
            kvop::FLUSH => {
                if let Some(b) = data {
                    self.pool.put(b);
                }
                if let Err(st) = ns.reservations.check_access(&host, io::FLUSH) {
                    return fail(self, None, st, 0);
                }
                return self.kv_later(ns, OpKind::Other, None, async move {
                    kv.backend.flush().await.map(|()| Outcome::ok())
                });
            }
            _ => {}
        }
        let c = match KvCommand::decode(cmd) {
            Ok(c) => c,
            Err(e) => return fail(self, data, e.status, e.sqe_byte),
        };
        if let Some(key) = c.key()
            && let Err(st) = kv.format.check_key(key)
        {
            return fail(self, data, st, KL_SQE_BYTE as u16);
        }
        let modifies = matches!(c, KvCommand::Store { .. } | KvCommand::Delete { .. });
        // Counted before the reservation check: see `crate::fence`.
        let guard = modifies.then(|| InflightGuard::enter(&inflight));
        // Reservations see Store and Delete as writes, the others as reads.
        let access = if modifies { io::WRITE } else { io::READ };
        if let Err(st) = ns.reservations.check_access(&host, access) {
            return fail(self, data, st, 0);
        }
        let mdts = self.target.config.mdts_bytes;
        match c {
            KvCommand::Store {
                key,
                value_size_bytes,
                mode,
                ..
            } => {
                if let Err(st) = kv.format.check_value_size(value_size_bytes) {
                    return fail(self, data, st, CDW10_SQE_BYTE);
                }
                if value_size_bytes == 0 {
                    return fail(
                        self,
                        data,
                        Status::KV_INVALID_VALUE_SIZE.dnr(),
                        CDW10_SQE_BYTE,
                    );
                }
                let value = match data {
                    Some(b) if xfer_len == value_size_bytes && b.len() == xfer_len as usize => b,
                    other => {
                        return fail(
                            self,
                            other,
                            Status::DATA_SGL_LENGTH_INVALID.dnr(),
                            SGL_SQE_BYTE,
                        );
                    }
                };
                let bytes = u64::from(value_size_bytes);
                self.kv_later(ns, OpKind::Write, guard, async move {
                    // The received buffer goes to the store (large values are written
                    // from it) and comes back for the connection's pool.
                    let (r, value) = kv.backend.store_buf(key.as_bytes(), value, mode).await;
                    r.map(|()| Outcome {
                        spare: value,
                        acct: Some(Acct {
                            kind: OpKind::Write,
                            bytes,
                        }),
                        ..Outcome::ok()
                    })
                })
            }
            KvCommand::Retrieve {
                key,
                host_buffer_bytes,
                ..
            } => {
                if let Err(d) = check_host_buffer(host_buffer_bytes, xfer_len, mdts) {
                    return fail(self, data, d.0, d.1);
                }
                if let Some(b) = data {
                    self.pool.put(b);
                }
                let buf = self.pool.get(host_buffer_bytes as usize);
                self.kv_later(ns, OpKind::Read, None, async move {
                    // The whole host buffer goes out (hosts expect the length they
                    // described): the value, then zeros over whatever the pool buffer
                    // held before. The store reads into it when it can.
                    let (got, buf) = kv.backend.retrieve_buf(key.as_bytes(), buf).await;
                    let got = got?;
                    let Some(buf) = buf else {
                        return Err(KvBackendError::Internal(
                            "the store kept the Retrieve buffer".into(),
                        ));
                    };
                    let copied = got.copied_bytes.min(buf.len());
                    let (data, spare) = if buf.is_empty() {
                        (None, Some(buf))
                    } else {
                        (Some(buf), None)
                    };
                    Ok(Outcome {
                        dw0: got.value_bytes,
                        data,
                        spare,
                        acct: Some(Acct {
                            kind: OpKind::Read,
                            bytes: copied as u64,
                        }),
                        ..Outcome::ok()
                    })
                })
            }
            KvCommand::List {
                start,
                host_buffer_bytes,
            } => {
                if (host_buffer_bytes as usize) < NRK_BYTES {
                    return fail(self, data, Status::INVALID_FIELD.dnr(), CDW10_SQE_BYTE);
                }
                if let Err(d) = check_host_buffer(host_buffer_bytes, xfer_len, mdts) {
                    return fail(self, data, d.0, d.1);
                }
                if let Some(b) = data {
                    self.pool.put(b);
                }
                let mut buf = self.pool.get(host_buffer_bytes as usize);
                // From memory: answered at once.
                let shard = self.shard;
                ns.counters.start(shard);
                let t0 = Instant::now();
                let r = fill_list(kv.backend.as_ref(), start, &mut buf);
                let us = t0.elapsed().as_micros() as u64;
                match r {
                    // The writer zeroed the buffer past the entries: all of it goes out.
                    Ok(_) => {
                        ns.counters.finish(shard, OpKind::Other, 0, us, true, false);
                        Dispatch::Now(Outcome::data(buf))
                    }
                    Err(e) => {
                        self.pool.put(buf);
                        Dispatch::Now(backend_failure(
                            &self.target,
                            &ns,
                            shard,
                            OpKind::Other,
                            us,
                            &e,
                        ))
                    }
                }
            }
            KvCommand::Delete { key } => {
                if let Some(b) = data {
                    self.pool.put(b);
                }
                self.kv_later(ns, OpKind::Other, guard, async move {
                    match kv.backend.delete(key.as_bytes()).await {
                        Ok(()) => Ok(Outcome::ok()),
                        // EDNEK clear (the default): deleting nothing is not an error.
                        Err(KvBackendError::KeyNotFound) if !kv.ednek.load(Ordering::Relaxed) => {
                            Ok(Outcome::ok())
                        }
                        Err(e) => Err(e),
                    }
                })
            }
            KvCommand::Exist { key } => {
                if let Some(b) = data {
                    self.pool.put(b);
                }
                let shard = self.shard;
                ns.counters.start(shard);
                let t0 = Instant::now();
                let r = kv.backend.exists(key.as_bytes()).and_then(|found| {
                    if found {
                        Ok(())
                    } else {
                        Err(KvBackendError::KeyNotFound)
                    }
                });
                let us = t0.elapsed().as_micros() as u64;
                Dispatch::Now(match r {
                    Ok(()) => {
                        ns.counters.finish(shard, OpKind::Other, 0, us, true, false);
                        Outcome::ok()
                    }
                    Err(e) => backend_failure(&self.target, &ns, shard, OpKind::Other, us, &e),
                })
            }
        }
    }

    /// Runs `op` (a store operation) as the command's future, with the namespace's
    /// counters: `kind` and the bytes in the outcome's accounting on success, a failure
    /// (media errors included) otherwise. `guard` is held until the store answered.
    fn kv_later(
        &mut self,
        ns: Arc<Namespace>,
        kind: OpKind,
        guard: Option<InflightGuard>,
        op: impl Future<Output = Result<Outcome, KvBackendError>> + Send + 'static,
    ) -> Dispatch {
        let shard = self.shard;
        let target = self.target.clone();
        Dispatch::Later(Box::pin(async move {
            ns.counters.start(shard);
            let t0 = Instant::now();
            let r = op.await;
            drop(guard);
            let us = t0.elapsed().as_micros() as u64;
            match r {
                Ok(o) => {
                    let bytes = o.acct.map_or(0, |a| a.bytes);
                    ns.counters.finish(shard, kind, bytes, us, true, false);
                    o
                }
                Err(e) => backend_failure(&target, &ns, shard, kind, us, &e),
            }
        }))
    }
}

/// A Retrieve's or List's host buffer: at most MDTS (Invalid Field, CDW10) and what the
/// data pointer describes (Data SGL Length Invalid).
fn check_host_buffer(hbs: u32, xfer_len: u32, mdts: u32) -> Result<(), (Status, u16)> {
    if hbs > mdts {
        return Err((Status::INVALID_FIELD.dnr(), CDW10_SQE_BYTE));
    }
    if hbs != xfer_len {
        return Err((Status::DATA_SGL_LENGTH_INVALID.dnr(), SGL_SQE_BYTE));
    }
    Ok(())
}

/// Accounts a failed store operation and builds its completion.
fn backend_failure(
    target: &TargetInner,
    ns: &Namespace,
    shard: usize,
    kind: OpKind,
    us: u64,
    e: &KvBackendError,
) -> Outcome {
    let media = e.is_media();
    if media {
        target.health.media_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(nsid = ns.nsid, error = %e, "KV value could not be read back");
    } else if matches!(e, KvBackendError::Internal(_) | KvBackendError::NotReady(_)) {
        tracing::warn!(nsid = ns.nsid, error = %e, "KV command failed");
    }
    ns.counters.finish(shard, kind, 0, us, false, media);
    Outcome {
        err_nsid: ns.nsid,
        ..Outcome::status(e.status())
    }
}

/// Writes the List data into `buf` (at least 4 bytes): the keys from `start` that fit,
/// asking the backend for [`LIST_CHUNK_KEYS`] at a time. Returns the bytes used.
fn fill_list(
    backend: &dyn KvBackend,
    start: Option<KvKey>,
    buf: &mut [u8],
) -> Result<usize, KvBackendError> {
    let Some(mut w) = KvListWriter::new(buf) else {
        return Ok(0);
    };
    let mut from = start;
    // After the first chunk, the next starts at the last key written (inclusive).
    let mut already_written: Option<KvKey> = None;
    loop {
        let keys = backend.list(from.as_ref().map(KvKey::as_bytes), LIST_CHUNK_KEYS)?;
        let got = keys.len();
        let mut last = None;
        for k in keys {
            if already_written == Some(k) {
                continue;
            }
            if !w.push(&k) {
                return Ok(w.len_bytes());
            }
            last = Some(k);
        }
        match last {
            Some(k) if got == LIST_CHUNK_KEYS => {
                from = Some(k);
                already_written = Some(k);
            }
            _ => return Ok(w.len_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv_mem::MemKvBackend;
    use nvme_proto::kv::{KvListData, StoreMode};

    fn key(i: u32) -> Vec<u8> {
        format!("k{i:06}").into_bytes()
    }

    #[test]
    fn list_spans_backend_chunks_without_repeats() {
        let m = MemKvBackend::new(u64::MAX, u64::MAX);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let n = LIST_CHUNK_KEYS as u32 * 2 + 17;
        for i in 0..n {
            rt.block_on(m.store(&key(i), b"v", StoreMode::Always))
                .expect("store");
        }
        // Every key fits: 7-byte keys take 12-byte entries.
        let mut buf = vec![0xEEu8; 4 + 12 * n as usize + 100];
        let len = fill_list(&m, None, &mut buf).expect("list");
        assert_eq!(len, 4 + 12 * n as usize);
        let got: Vec<Vec<u8>> = KvListData::parse(&buf[..len])
            .expect("parse")
            .iter()
            .map(|k| k.as_bytes().to_vec())
            .collect();
        assert_eq!(got, (0..n).map(key).collect::<Vec<_>>());
        // From a key in the middle, into a buffer for 3 entries and a bit.
        let mut small = [0u8; 4 + 36 + 11];
        let start = KvKey::new(&key(1500)).expect("key");
        let len = fill_list(&m, Some(start), &mut small).expect("list");
        assert_eq!(len, 40);
        let got: Vec<Vec<u8>> = KvListData::parse(&small)
            .expect("parse")
            .iter()
            .map(|k| k.as_bytes().to_vec())
            .collect();
        assert_eq!(got, vec![key(1500), key(1501), key(1502)]);
        assert!(small[40..].iter().all(|&b| b == 0), "the rest is zeroed");
    }
}
