//! A shard store on a KV namespace over NVMe/TCP: the NVMe Key Value command set through
//! nvmf-host's I/O pass-through (`Controller::submit_io` with `nvme_proto::kv`
//! commands). The controller reconnects by itself (no controller-loss timeout); while it
//! is not live, calls fail at once with Unavailable instead of waiting for it, so a
//! stripe whose store is down is written degraded without delay.

use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use blockdev::IoBuf;
use bytes::Bytes;
use nvme_proto::Status;
use nvme_proto::identify::{cns, csi};
use nvme_proto::kv::{self as kvp, KvCommand, KvKey, KvListData};
use nvme_proto::opcode::admin;
use nvmf_host::{ConnectOptions, Controller, HostIdentity, NvmeTcpUrl, Payload};
use objstore::shard::{MAX_VALUE_BYTES, ShardError, ShardKey, ShardStore, StoreMode};

/// How the store's controller connects: reconnect forever, quickly.
fn options() -> ConnectOptions {
    ConnectOptions {
        io_queues: 2,
        reconnect_delay_ms: 200,
        reconnect_delay_max_ms: 2000,
        ctrl_loss_tmo_ms: None,
        io_timeout_ms: 10_000,
        ..ConnectOptions::default()
    }
}

pub struct NvmeKvShardStore {
    id: String,
    failure_domain: String,
    ctrl: Controller,
    nsid: u32,
}

fn same(a: Status, b: Status) -> bool {
    (a.sct, a.sc) == (b.sct, b.sc)
}

fn unavailable(e: impl std::fmt::Display) -> ShardError {
    ShardError::Unavailable(e.to_string())
}

/// The shard error of a KV command's completion status.
fn status_error(s: Status) -> ShardError {
    if same(s, Status::KV_KEY_DOES_NOT_EXIST) {
        ShardError::KeyNotFound
    } else if same(s, Status::KV_KEY_EXISTS) {
        ShardError::KeyExists
    } else if same(s, Status::CAPACITY_EXCEEDED) {
        ShardError::CapacityExceeded
    } else if same(s, Status::NAMESPACE_NOT_READY) {
        ShardError::Unavailable("namespace not ready".into())
    } else {
        ShardError::Unrecovered(format!(
            "{} (SCT {:#x} SC {:#x})",
            nvmf_host::status_text::status_text(s),
            s.sct,
            s.sc
        ))
    }
}

impl NvmeKvShardStore {
    /// Connects to the namespace `url` names (`nvme+tcp://ADDR:PORT/SUBNQN/NSID`) and
    /// checks that it is a Key Value namespace.
    pub async fn connect(
        url: &str,
        id: &str,
        failure_domain: &str,
        host: &HostIdentity,
    ) -> Result<NvmeKvShardStore, String> {
        let u = NvmeTcpUrl::parse(url).map_err(|e| e.to_string())?;
        let nsid = u
            .nsid
            .ok_or_else(|| format!("{url}: the URL names no namespace (…/NSID)"))?;
        let addr: SocketAddr = u.socket_addr().await.map_err(|e| e.to_string())?;
        let ctrl = Controller::connect(addr, &u.subnqn, host, &options())
            .await
            .map_err(|e| format!("connect {url}: {e}"))?;
        // Identify Namespace of the KV command set: a namespace of another set answers
        // Invalid I/O Command Set.
        let mut c = nvme_proto::Command::new(admin::IDENTIFY, 0, nsid);
        c.set_cdw10(u32::from(cns::CS_NAMESPACE))
            .set_cdw11(u32::from(csi::KEY_VALUE) << 24);
        let done = ctrl
            .admin()
            .submit(c, Payload::read(IoBuf::new_zeroed(4096)))
            .await;
        match done {
            Ok(d) if d.cqe.status.is_success() => {}
            Ok(d) => {
                ctrl.disconnect().await;
                return Err(format!(
                    "{url}: not a Key Value namespace ({})",
                    nvmf_host::status_text::status_text(d.cqe.status)
                ));
            }
            Err(e) => {
                ctrl.disconnect().await;
                return Err(format!("{url}: identify: {e}"));
            }
        }
        Ok(NvmeKvShardStore {
            id: id.to_string(),
            failure_domain: failure_domain.to_string(),
            ctrl,
            nsid,
        })
    }

    fn key(k: ShardKey) -> Result<KvKey, ShardError> {
        // 16 bytes is the KV key maximum: always valid.
        KvKey::new(&k.0).map_err(|e| ShardError::Unrecovered(format!("shard key: {e}")))
    }

    /// Runs one command; transport failures and a controller that is not live are
    /// Unavailable.
    async fn run(&self, cmd: KvCommand, data: Payload) -> Result<(u32, Option<IoBuf>), ShardError> {
        if !self.ctrl.status().is_live() {
            return Err(ShardError::Unavailable(format!(
                "{}: controller not connected (reconnecting)",
                self.id
            )));
        }
        let done = self
            .ctrl
            .submit_io(cmd.to_command(0, self.nsid), data)
            .await
            .map_err(unavailable)?;
        if !done.cqe.status.is_success() {
            return Err(status_error(done.cqe.status));
        }
        Ok((done.cqe.dw0, done.buf))
    }
}

impl Drop for NvmeKvShardStore {
    fn drop(&mut self) {
        let ctrl = self.ctrl.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { ctrl.disconnect().await });
        }
    }
}

#[async_trait]
impl ShardStore for NvmeKvShardStore {
    fn id(&self) -> &str {
        &self.id
    }

    fn failure_domain(&self) -> &str {
        &self.failure_domain
    }

    async fn store(&self, key: ShardKey, value: Bytes, mode: StoreMode) -> Result<(), ShardError> {
        if value.len() > MAX_VALUE_BYTES {
            return Err(ShardError::ValueTooLarge { bytes: value.len() });
        }
        let cmd = KvCommand::Store {
            key: Self::key(key)?,
            value_size_bytes: value.len() as u32,
            mode: match mode {
                StoreMode::Upsert => kvp::StoreMode::Always,
                StoreMode::OnlyIfAbsent => kvp::StoreMode::OnlyIfAbsent,
                StoreMode::OnlyIfExists => kvp::StoreMode::OnlyIfExists,
            },
            no_compression: true,
        };
        self.run(cmd, Payload::write(IoBuf::from_slice(&value)))
            .await
            .map(|_| ())
    }

    async fn retrieve(&self, key: ShardKey, buf: &mut [u8]) -> Result<usize, ShardError> {
        let cmd = KvCommand::Retrieve {
            key: Self::key(key)?,
            host_buffer_bytes: buf.len() as u32,
            raw: false,
        };
        let data = if buf.is_empty() {
            Payload::None
        } else {
            Payload::read(IoBuf::new_zeroed(buf.len()))
        };
        let (size, got) = self.run(cmd, data).await?;
        let size = size as usize;
        if let Some(got) = got {
            let n = size.min(buf.len()).min(got.len());
            buf[..n].copy_from_slice(&got[..n]);
        }
        Ok(size)
    }

    async fn delete(&self, key: ShardKey) -> Result<(), ShardError> {
        // The target deletes absent keys silently (EDNEK off): ask first.
        if !self.exist(key).await? {
            return Err(ShardError::KeyNotFound);
        }
        match self
            .run(
                KvCommand::Delete {
                    key: Self::key(key)?,
                },
                Payload::None,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn exist(&self, key: ShardKey) -> Result<bool, ShardError> {
        match self
            .run(
                KvCommand::Exist {
                    key: Self::key(key)?,
                },
                Payload::None,
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(ShardError::KeyNotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn list(&self, from: ShardKey, max: usize) -> Result<Vec<ShardKey>, ShardError> {
        const PAGE_BYTES: usize = 64 << 10;
        let mut out = Vec::new();
        let mut start = Some(from);
        while out.len() < max {
            let Some(s) = start else { break };
            let cmd = KvCommand::List {
                start: Some(Self::key(s)?),
                host_buffer_bytes: PAGE_BYTES as u32,
            };
            let (_, buf) = self
                .run(cmd, Payload::read(IoBuf::new_zeroed(PAGE_BYTES)))
                .await?;
            let buf = buf.ok_or_else(|| ShardError::Unrecovered("List returned no data".into()))?;
            let page = KvListData::parse(&buf)
                .map_err(|e| ShardError::Unrecovered(format!("List data: {e}")))?;
            let keys = page.to_vec();
            if keys.is_empty() {
                break;
            }
            let mut last = None;
            for k in &keys {
                let Ok(b) = <[u8; 16]>::try_from(k.as_bytes()) else {
                    continue; // not a shard key
                };
                last = Some(ShardKey(b));
                if out.len() < max {
                    out.push(ShardKey(b));
                }
            }
            start = last.and_then(|k| k.successor());
            if last.is_none() {
                break;
            }
        }
        Ok(out)
    }
}

/// Builds the shard store of a pool namespace (the default [`crate::pool_gateway::KvConnector`]).
pub(crate) async fn connect_store(
    url: String,
    id: String,
    failure_domain: String,
    host: HostIdentity,
) -> Result<Arc<dyn ShardStore>, String> {
    let s = NvmeKvShardStore::connect(&url, &id, &failure_domain, &host).await?;
    Ok(Arc::new(s))
}
