//! Admin commands: Identify, Get Log Page, features, Keep Alive.

use blockdev::IoBuf;
use nvme_proto::fabrics::Vs;
use nvme_proto::features::{GetFeatures, NumberOfQueues, SetFeatures, fid, sel};
use nvme_proto::identify::descriptors::NsIdDescriptorList;
use nvme_proto::identify::{
    IDENTIFY_DATA_BYTES, IdentifyCommand, IdentifyController, IdentifyNamespace,
    IdentifyNsIndependent, NsList, cns, csi,
};
use nvme_proto::kv::KvIdentifyNamespace;
use nvme_proto::log::GetLogPageCommand;
use nvme_proto::opcode::admin;
use nvme_proto::{Command, Completion};

use super::Controller;
use crate::error::{HostError, Result};
use crate::queue::{Completed, Payload, QueuePair};

/// Largest piece of a log page read with one command (larger reads are split).
pub const LOG_PAGE_CHUNK_BYTES: u32 = 64 * 1024;

pub(crate) async fn identify_raw(
    q: &QueuePair,
    cns_value: u8,
    nsid: u32,
    cntid: u16,
) -> Result<IoBuf> {
    identify_csi(q, cns_value, nsid, cntid, csi::NVM).await
}

/// Identify with a Command Set Identifier (CDW11 bits 31:24), for the CNS values that
/// take one (05h, 06h, 07h, 1Ah, 1Bh).
async fn identify_csi(
    q: &QueuePair,
    cns_value: u8,
    nsid: u32,
    cntid: u16,
    csi_value: u8,
) -> Result<IoBuf> {
    let cmd = IdentifyCommand {
        nsid,
        cns: cns_value,
        cntid,
        csi: csi_value,
        ..Default::default()
    }
    .to_command(0);
    let done = q
        .submit_init_checked(cmd, Payload::read(IoBuf::new_zeroed(IDENTIFY_DATA_BYTES)))
        .await?;
    done.buf
        .ok_or_else(|| HostError::invalid("Identify", "no data buffer came back"))
}

pub(crate) async fn identify_controller(q: &QueuePair) -> Result<IdentifyController> {
    let b = identify_raw(q, cns::CONTROLLER, 0, 0).await?;
    IdentifyController::decode(&b).map_err(|e| {
        HostError::invalid(
            format!("Identify Controller from {}", q.addr()),
            e.to_string(),
        )
    })
}

/// Reads `len_bytes` of log page `lid` at byte `offset` (dword aligned), in pieces of at
/// most [`LOG_PAGE_CHUNK_BYTES`] and within `max_transfer_bytes`.
pub(crate) async fn get_log_page(
    q: &QueuePair,
    template: GetLogPageCommand,
    offset: u64,
    len_bytes: usize,
    max_transfer_bytes: u32,
) -> Result<IoBuf> {
    if !offset.is_multiple_of(4) || !len_bytes.is_multiple_of(4) {
        return Err(HostError::Usage(format!(
            "log page {:#04x}: offset {offset} and length {len_bytes} must be multiples of 4",
            template.lid
        )));
    }
    let mut out = IoBuf::new_zeroed(len_bytes);
    let chunk = LOG_PAGE_CHUNK_BYTES.min(max_transfer_bytes.max(4096)) as usize;
    let mut done_bytes = 0usize;
    while done_bytes < len_bytes {
        let n = chunk.min(len_bytes - done_bytes);
        let cmd = GetLogPageCommand {
            lpo: offset + done_bytes as u64,
            numd: (n / 4 - 1) as u32,
            ..template
        }
        .to_command(0);
        let r = q
            .submit_init_checked(
                cmd,
                Payload::FromController {
                    buf: out,
                    offset: done_bytes,
                    len: n,
                },
            )
            .await?;
        out = r
            .buf
            .ok_or_else(|| HostError::invalid("Get Log Page", "no data buffer came back"))?;
        done_bytes += n;
    }
    Ok(out)
}

impl Controller {
    /// Identify with any CNS; returns the 4096 bytes.
    pub async fn identify(&self, cns_value: u8, nsid: u32, cntid: u16) -> Result<IoBuf> {
        identify_raw(self.admin(), cns_value, nsid, cntid).await
    }

    /// Identify Controller, read again (the copy from connect is [`Controller::id`]).
    pub async fn identify_controller(&self) -> Result<IdentifyController> {
        identify_controller(self.admin()).await
    }

    pub async fn identify_namespace(&self, nsid: u32) -> Result<IdentifyNamespace> {
        let b = self.identify(cns::NAMESPACE, nsid, 0).await?;
        IdentifyNamespace::decode(&b)
            .map_err(|e| HostError::invalid(format!("Identify Namespace {nsid}"), e.to_string()))
    }

    /// The namespace's Namespace Identification Descriptor list (CNS 03h), or None
    /// when the controller has none to give: older than NVMe 1.3, or it answers the
    /// command with an error status.
    pub async fn ns_descriptors(&self, nsid: u32) -> Result<Option<NsIdDescriptorList>> {
        if self.vs() < Vs::V1_3 {
            return Ok(None);
        }
        match self.identify(cns::NS_ID_DESCRIPTORS, nsid, 0).await {
            Ok(b) => NsIdDescriptorList::decode(&b).map(Some).map_err(|e| {
                HostError::invalid(
                    format!("namespace {nsid}: Namespace Identification Descriptor list"),
                    e.to_string(),
                )
            }),
            Err(e) if e.nvme_status().is_some() => {
                tracing::debug!(nsid, "no descriptor list: {e}");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The I/O command set of namespace `nsid` (`nvme_proto::identify::csi`): its CSI
    /// descriptor, NVM when the controller reports none (as Linux assumes).
    pub async fn namespace_csi(&self, nsid: u32) -> Result<u8> {
        Ok(self
            .ns_descriptors(nsid)
            .await?
            .and_then(|l| l.csi())
            .unwrap_or(csi::NVM))
    }

    /// The Key Value Identify Namespace (CNS 05h, CSI 01h).
    pub async fn identify_kv_namespace(&self, nsid: u32) -> Result<KvIdentifyNamespace> {
        let b = identify_csi(self.admin(), cns::CS_NAMESPACE, nsid, 0, csi::KEY_VALUE).await?;
        KvIdentifyNamespace::decode(&b)
            .map_err(|e| HostError::invalid(format!("KV Identify Namespace {nsid}"), e.to_string()))
    }

    /// The I/O command set independent Identify Namespace (CNS 08h).
    pub async fn identify_ns_independent(&self, nsid: u32) -> Result<IdentifyNsIndependent> {
        let b = self
            .identify(cns::CS_INDEPENDENT_NAMESPACE, nsid, 0)
            .await?;
        IdentifyNsIndependent::decode(&b).map_err(|e| {
            HostError::invalid(
                format!("Identify Namespace {nsid} (command set independent)"),
                e.to_string(),
            )
        })
    }

    /// The active NSIDs of one I/O command set, in increasing order (CNS 07h; the
    /// first 1024).
    pub async fn active_namespaces_of(&self, csi_value: u8) -> Result<Vec<u32>> {
        let b = identify_csi(self.admin(), cns::CS_ACTIVE_NS_LIST, 0, 0, csi_value).await?;
        let list = NsList::decode(&b).map_err(|e| {
            HostError::invalid("Identify active namespace list (per CSI)", e.to_string())
        })?;
        Ok(list.nsids)
    }

    /// Every active NSID, in increasing order (Identify CNS 0x02, 1024 at a time).
    pub async fn active_namespaces(&self) -> Result<Vec<u32>> {
        let mut all = Vec::new();
        let mut after = 0u32;
        loop {
            let b = self.identify(cns::ACTIVE_NS_LIST, after, 0).await?;
            let list = NsList::decode(&b)
                .map_err(|e| HostError::invalid("Identify active namespace list", e.to_string()))?;
            let full = list.nsids.len() == NsList::MAX_ENTRIES;
            for id in list.nsids {
                if id <= after {
                    return Err(HostError::invalid(
                        "Identify active namespace list",
                        format!("NSID {id} is not above {after}"),
                    ));
                }
                all.push(id);
                after = id;
            }
            if !full || after >= 0xFFFF_FFFE {
                return Ok(all);
            }
        }
    }

    /// Reads `len_bytes` of log page `lid` (for namespace `nsid`, 0 or 0xFFFFFFFF for the
    /// controller) starting at byte `offset`. Offsets and lengths are multiples of 4.
    pub async fn get_log_page(
        &self,
        lid: u8,
        nsid: u32,
        offset: u64,
        len_bytes: usize,
    ) -> Result<IoBuf> {
        let t = GetLogPageCommand::new(lid, nsid, 0, 4);
        get_log_page(
            self.admin(),
            t,
            offset,
            len_bytes,
            self.max_transfer_bytes(),
        )
        .await
    }

    /// As [`Controller::get_log_page`] with every field of the command under the caller's
    /// control (LSP, RAE, LSI, ...); `lpo` and `numd` are set per piece.
    pub async fn get_log_page_with(
        &self,
        template: GetLogPageCommand,
        offset: u64,
        len_bytes: usize,
    ) -> Result<IoBuf> {
        get_log_page(
            self.admin(),
            template,
            offset,
            len_bytes,
            self.max_transfer_bytes(),
        )
        .await
    }

    /// Set Features (namespace `nsid`, usually 0) with `cdw11` and optional data; returns
    /// the completion (DW0 holds the feature-specific result).
    pub async fn set_features(
        &self,
        nsid: u32,
        feature: u8,
        cdw11: u32,
        save: bool,
        data: Option<IoBuf>,
    ) -> Result<Completion> {
        let c = SetFeatures {
            nsid,
            fid: feature,
            sv: save,
            cdw11,
            ..Default::default()
        }
        .to_command(0);
        let p = data.map_or(Payload::None, Payload::write);
        Ok(self.admin().submit_init_checked(c, p).await?.cqe)
    }

    /// Get Features, current value; returns the completion (DW0 holds the value).
    pub async fn get_features(&self, nsid: u32, feature: u8, cdw11: u32) -> Result<Completion> {
        let c = GetFeatures {
            nsid,
            fid: feature,
            sel: sel::CURRENT,
            cdw11,
            ..Default::default()
        }
        .to_command(0);
        Ok(self
            .admin()
            .submit_init_checked(c, Payload::None)
            .await?
            .cqe)
    }

    /// Sends one Keep Alive.
    pub async fn keep_alive(&self) -> Result<()> {
        keep_alive(self.admin()).await
    }

    /// Admin pass-through for tools: any command, with the data it moves. The CID and SGL
    /// are set here; the completion comes back whatever its status.
    pub async fn submit_admin(&self, cmd: Command, data: Payload) -> Result<Completed> {
        self.admin().submit(cmd, data).await
    }
}

pub(crate) async fn keep_alive(q: &QueuePair) -> Result<()> {
    keep_alive_within(q, q.command_timeout_ms()).await
}

/// Keep Alive that must complete within `timeout_ms` (the background task uses KATO: an
/// answer later than that is as good as none).
pub(crate) async fn keep_alive_within(q: &QueuePair, timeout_ms: u64) -> Result<()> {
    let cmd = Command::new(admin::KEEP_ALIVE, 0, 0);
    let kind = q.kind(&cmd);
    let done = q
        .submit_with_timeout(cmd, Payload::None, timeout_ms)
        .await?;
    if done.cqe.status.is_success() {
        Ok(())
    } else {
        Err(HostError::Status {
            command: kind,
            status: done.cqe.status,
        })
    }
}

/// Set Features Number of Queues: asks for `n` I/O queues, returns how many the controller
/// grants (the smaller of NSQA and NCQA, plus one).
pub(crate) async fn set_number_of_queues(q: &QueuePair, n: u16) -> Result<u16> {
    let want = NumberOfQueues::from_counts(u32::from(n), u32::from(n));
    let c = SetFeatures {
        fid: fid::NUMBER_OF_QUEUES,
        cdw11: want.to_dw(),
        ..Default::default()
    }
    .to_command(0);
    let done = q.submit_init_checked(c, Payload::None).await?;
    let got = NumberOfQueues::from_dw(done.cqe.dw0);
    let granted = got.sq_count().min(got.cq_count()).min(u32::from(n));
    Ok(granted as u16)
}
