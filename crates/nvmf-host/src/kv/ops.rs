//! The five KV commands on one controller, each checked here first, sent once (the
//! queue re-sends it after a reconnect when `opts.retry`), its status mapped to a
//! [`KvError`]. Shared by the single-path and the multipath namespace, which add their
//! waiting (ANA transition) and failover around it.

use blockdev::IoBuf;
use nvme_proto::Completion;
use nvme_proto::kv::list::NRK_BYTES;
use nvme_proto::kv::{KvCommand, KvKey, KvListData, StoreMode};

use super::error::{SizeLimit, from_status};
use super::{BufResult, KvError, KvNamespaceInfo};
use crate::controller::Controller;
use crate::queue::{Data, DataBuf, Dir, SubmitOptions};

/// Whether a command was already sent before on another path (a multipath failover):
/// its first attempt may have taken effect, as after a reconnect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attempt {
    pub failed_over: bool,
}

impl Attempt {
    pub const FIRST: Attempt = Attempt { failed_over: false };
    pub const AGAIN: Attempt = Attempt { failed_over: true };
}

/// The namespace as the commands need it (copied into each command's future).
#[derive(Clone, Copy)]
pub(crate) struct KvRaw<'a> {
    pub ctrl: &'a Controller,
    pub info: &'a KvNamespaceInfo,
}

/// A sent command: its completion (success or not) or transport failure, its buffer, and
/// whether it went to the target more than once.
struct Sent {
    result: Result<Completion, KvError>,
    buf: Option<IoBuf>,
    resent: bool,
}

impl<'a> KvRaw<'a> {
    /// `key` as a KV key of this namespace: 1 to KVKML bytes.
    fn key(self, key: &[u8]) -> Result<KvKey, KvError> {
        let bad = || KvError::InvalidKeySize {
            len_bytes: key.len(),
            max_bytes: self.info.max_key_bytes,
        };
        if key.len() > self.info.max_key_bytes {
            return Err(bad());
        }
        KvKey::new(key).map_err(|_| bad())
    }

    /// A Retrieve or List buffer: `min_bytes` up to one transfer (MDTS).
    fn check_buffer(self, what: &'static str, len: usize, min_bytes: usize) -> Result<(), KvError> {
        let max = self.info.max_transfer_bytes as usize;
        if len < min_bytes || len > max {
            return Err(KvError::InvalidBufferSize {
                what,
                bytes: len as u64,
                min_bytes: min_bytes as u64,
                max_bytes: max as u64,
            });
        }
        Ok(())
    }

    async fn send(self, cmd: KvCommand, data: Data, opts: SubmitOptions) -> Sent {
        let len = data.len;
        let q = match self.ctrl.pick_io_queue_for(len as u64) {
            Ok(q) => q,
            Err(e) => {
                return Sent {
                    result: Err(e.into()),
                    buf: data.buf.and_then(DataBuf::into_owned),
                    resent: false,
                };
            }
        };
        let o = q
            .submit_data(cmd.to_command(0, self.info.nsid), data, opts, false)
            .await;
        Sent {
            result: o.result.map_err(KvError::from),
            buf: o.buf.and_then(DataBuf::into_owned),
            resent: o.resent,
        }
    }

    /// The completion's meaning: `Ok` for success, else the KV error of its status.
    fn check(
        self,
        c: &Completion,
        name: &'static str,
        key_bytes: usize,
        value_bytes: u64,
    ) -> Result<(), KvError> {
        match from_status(
            c.status,
            name,
            key_bytes,
            self.info.max_key_bytes,
            value_bytes,
        ) {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    pub async fn store(
        self,
        key: &[u8],
        value: IoBuf,
        mode: StoreMode,
        opts: SubmitOptions,
        attempt: Attempt,
    ) -> BufResult<()> {
        let key = match self.key(key) {
            Ok(k) => k,
            Err(e) => return (Err(e), value),
        };
        let len = value.len();
        let max = self.info.max_value_bytes;
        if len == 0 || len > max as usize {
            let limit = if len == 0 {
                SizeLimit::Empty
            } else if max < self.info.kvvml_bytes {
                SizeLimit::Mdts
            } else {
                SizeLimit::Kvvml
            };
            let e = KvError::InvalidValueSize {
                bytes: len as u64,
                max_bytes: u64::from(max),
                limit,
            };
            return (Err(e), value);
        }
        let cmd = KvCommand::Store {
            key,
            value_size_bytes: len as u32,
            mode,
            no_compression: false,
        };
        let s = self
            .send(cmd, Data::owned(value, 0, len, Dir::ToController), opts)
            .await;
        let buf = s.buf.unwrap_or_else(|| IoBuf::new_zeroed(len));
        let r = s
            .result
            .and_then(|c| self.check(&c, "Store", key.len_bytes(), len as u64));
        let r = match r {
            Err(KvError::KeyExists)
                if mode == StoreMode::OnlyIfAbsent && (s.resent || attempt.failed_over) =>
            {
                Err(KvError::CreateOutcomeUnknown)
            }
            r => r,
        };
        (r, buf)
    }

    pub async fn retrieve(
        self,
        key: &[u8],
        buf: IoBuf,
        opts: SubmitOptions,
        _attempt: Attempt,
    ) -> BufResult<u32> {
        let key = match self.key(key) {
            Ok(k) => k,
            Err(e) => return (Err(e), buf),
        };
        let len = buf.len();
        if let Err(e) = self.check_buffer("Retrieve", len, 0) {
            return (Err(e), buf);
        }
        let cmd = KvCommand::Retrieve {
            key,
            host_buffer_bytes: len as u32,
            raw: false,
        };
        let s = self
            .send(cmd, Data::owned(buf, 0, len, Dir::FromController), opts)
            .await;
        let buf = s.buf.unwrap_or_else(|| IoBuf::new_zeroed(len));
        let r = s.result.and_then(|c| {
            self.check(&c, "Retrieve", key.len_bytes(), 0)?;
            Ok(c.dw0)
        });
        (r, buf)
    }

    pub async fn delete(
        self,
        key: &[u8],
        opts: SubmitOptions,
        attempt: Attempt,
    ) -> Result<(), KvError> {
        let key = self.key(key)?;
        let s = self.send(KvCommand::Delete { key }, Data::NONE, opts).await;
        match s
            .result
            .and_then(|c| self.check(&c, "Delete", key.len_bytes(), 0))
        {
            // Sent twice: the first attempt deleted it (see the module docs).
            Err(KvError::KeyNotFound) if s.resent || attempt.failed_over => Ok(()),
            r => r,
        }
    }

    pub async fn exist(
        self,
        key: &[u8],
        opts: SubmitOptions,
        _attempt: Attempt,
    ) -> Result<bool, KvError> {
        let key = self.key(key)?;
        let s = self.send(KvCommand::Exist { key }, Data::NONE, opts).await;
        match s
            .result
            .and_then(|c| self.check(&c, "Exist", key.len_bytes(), 0))
        {
            Ok(()) => Ok(true),
            Err(KvError::KeyNotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub async fn list(
        self,
        start: Option<&[u8]>,
        buf: IoBuf,
        opts: SubmitOptions,
        _attempt: Attempt,
    ) -> BufResult<u32> {
        let start = match start.map(|s| self.key(s)).transpose() {
            Ok(k) => k,
            Err(e) => return (Err(e), buf),
        };
        let len = buf.len();
        if let Err(e) = self.check_buffer("List", len, NRK_BYTES) {
            return (Err(e), buf);
        }
        let cmd = KvCommand::List {
            start,
            host_buffer_bytes: len as u32,
        };
        let s = self
            .send(cmd, Data::owned(buf, 0, len, Dir::FromController), opts)
            .await;
        let buf = s.buf.unwrap_or_else(|| IoBuf::new_zeroed(len));
        let key_bytes = start.map_or(0, |k| k.len_bytes());
        let r = s.result.and_then(|c| {
            self.check(&c, "List", key_bytes, 0)?;
            KvListData::parse(&buf)
                .map(|l| l.count())
                .map_err(|e| KvError::BadListData(e.to_string()))
        });
        (r, buf)
    }
}
