//! Bringing a controller up on fresh connections, the same way for the first connect and
//! for every reconnect: admin queue (ICReq, Connect with CNTLID 0xFFFF and KATO), CAP/VS,
//! CC.EN and CSTS.RDY, Identify Controller with the fabrics checks, asynchronous event
//! configuration, the ANA log, then one Connect per I/O queue with the admin's CNTLID.

use std::net::SocketAddr;
use std::sync::Arc;

use blockdev::IoBuf;
use nvme_proto::fabrics::{
    CNTLID_DYNAMIC, Cap, ConnectCommand, ConnectData, DISCOVERY_NQN, PropertySize, Vs, reg,
};
use nvme_proto::features::{aec, fid};
use nvme_proto::identify::IdentifyController;
use nvme_proto::identify::controller::bits as idbits;
use nvme_proto::log::{AnaLog, GetLogPageCommand, lid};

use super::{ConnectOptions, UNLIMITED_MDTS_BYTES, admin, enable, fabrics};
use crate::error::{HostError, Result};
use crate::host_identity::HostIdentity;
use crate::queue::{Payload, QueuePair};

/// Largest ANA log this host reads (a bigger one is implausible).
const MAX_ANA_LOG_BYTES: usize = 1 << 20;

/// What one connection of a controller established.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub cntlid: u16,
    pub cap: Cap,
    pub vs: Vs,
    pub id: Arc<IdentifyController>,
    pub max_transfer_bytes: u32,
    /// I/O queues the controller granted (0 for discovery or when none were asked for).
    pub io_granted: u16,
    pub ana: Option<Arc<AnaLog>>,
}

/// Who connects to what.
pub(crate) struct Params<'a> {
    pub addr: SocketAddr,
    pub subnqn: &'a str,
    pub host: &'a HostIdentity,
    pub opts: &'a ConnectOptions,
}

impl Params<'_> {
    /// Connect attributes for every queue of this controller.
    pub fn cattr(&self) -> u8 {
        if self.opts.disable_sqflow {
            ConnectCommand::CATTR_DISABLE_SQFLOW
        } else {
            0
        }
    }

    pub fn connect_data(&self, cntlid: u16) -> ConnectData {
        ConnectData {
            hostid: self.host.hostid,
            cntlid,
            subnqn: self.subnqn.to_string(),
            hostnqn: self.host.hostnqn.clone(),
        }
    }
}

/// Brings the admin queue up on a new connection and asks for `want_io` I/O queues.
/// `admin` must be detached; its gate stays closed (the caller opens it).
pub(crate) async fn bring_up_admin(
    admin: &QueuePair,
    p: &Params<'_>,
    want_io: u16,
) -> Result<Session> {
    admin.attach().await?;
    let cmd = ConnectCommand {
        recfmt: 0,
        qid: 0,
        sqsize: admin.depth(),
        cattr: p.cattr(),
        kato_ms: p.opts.kato_ms,
    };
    let cntlid = fabrics::connect_queue(
        admin,
        cmd,
        &p.connect_data(CNTLID_DYNAMIC),
        p.opts.dhchap.as_ref(),
    )
    .await?;
    let cap = Cap::from_u64(fabrics::property_get(admin, reg::CAP, PropertySize::Eight).await?);
    let vs = Vs::from_u32(fabrics::property_get(admin, reg::VS, PropertySize::Four).await? as u32);
    enable::enable(admin, &cap).await?;
    let id = admin::identify_controller(admin).await?;
    let discovery = p.subnqn == DISCOVERY_NQN || id.cntrltype == idbits::CNTRLTYPE_DISCOVERY;
    check_identify(p, cntlid, &id, discovery)?;
    let page_bytes = 1u64 << (12 + u32::from(cap.mpsmin));
    let max_transfer_bytes = if id.mdts == 0 {
        UNLIMITED_MDTS_BYTES
    } else {
        (page_bytes << u32::from(id.mdts).min(20)).min(u64::from(u32::MAX)) as u32
    };
    let io_granted = if discovery || want_io == 0 {
        0
    } else {
        admin::set_number_of_queues(admin, want_io).await?
    };
    configure_events(admin, &id, discovery).await;
    let ana = if id.cmic & idbits::CMIC_ANA != 0 {
        Some(Arc::new(
            read_ana_log(admin, &id, max_transfer_bytes).await?,
        ))
    } else {
        None
    };
    Ok(Session {
        cntlid,
        cap,
        vs,
        id: Arc::new(id),
        max_transfer_bytes,
        io_granted,
        ana,
    })
}

/// Enables the notices this host acts on, as far as the controller reports them in
/// OAES. A controller that refuses is only logged: events are an optimisation.
async fn configure_events(admin: &QueuePair, id: &IdentifyController, discovery: bool) {
    let wanted = if discovery {
        aec::DISCOVERY_LOG_CHANGE
    } else {
        aec::NS_ATTRIBUTE | aec::ANA_CHANGE
    };
    let cdw11 = id.oaes & wanted;
    if cdw11 == 0 {
        return;
    }
    let c = nvme_proto::features::SetFeatures {
        fid: fid::ASYNC_EVENT_CONFIG,
        cdw11,
        ..Default::default()
    }
    .to_command(0);
    if let Err(e) = admin.submit_init_checked(c, Payload::None).await {
        tracing::warn!(addr = %admin.addr(), "asynchronous event configuration refused: {e}");
    }
}

/// Bytes of the ANA log as Linux sizes it: header, NANAGRPID descriptors, MNAN NSIDs.
pub(crate) fn ana_log_len(id: &IdentifyController) -> usize {
    let groups = if id.nanagrpid > 0 {
        id.nanagrpid
    } else {
        id.anagrpmax
    } as usize;
    let nsids = if id.mnan > 0 { id.mnan } else { id.nn } as usize;
    (16 + groups.saturating_mul(32) + nsids.saturating_mul(4))
        .next_multiple_of(4)
        .min(MAX_ANA_LOG_BYTES)
}

/// Reads (and so clears the event of) the ANA log.
pub(crate) async fn read_ana_log(
    admin: &QueuePair,
    id: &IdentifyController,
    max_transfer_bytes: u32,
) -> Result<AnaLog> {
    let len = ana_log_len(id);
    let t = GetLogPageCommand::new(lid::ANA, 0xFFFF_FFFF, 0, 4);
    let b: IoBuf = admin::get_log_page(admin, t, 0, len, max_transfer_bytes).await?;
    AnaLog::decode(&b)
        .map_err(|e| HostError::invalid(format!("ANA log of {}", admin.addr()), e.to_string()))
}

/// Connects each of `queues` (attached here) with the admin queue's CNTLID, concurrently.
pub(crate) async fn connect_io_queues(
    queues: &[QueuePair],
    p: &Params<'_>,
    cntlid: u16,
) -> Result<()> {
    let data = p.connect_data(cntlid);
    let addr = p.addr;
    let all = queues.iter().map(|q| {
        let data = &data;
        async move {
            q.attach().await?;
            let qid = q.qid();
            let cmd = ConnectCommand {
                recfmt: 0,
                qid,
                sqsize: q.depth(),
                cattr: p.cattr(),
                kato_ms: 0,
            };
            let got = fabrics::connect_queue(q, cmd, data, p.opts.dhchap.as_ref()).await?;
            if got != cntlid {
                return Err(HostError::invalid(
                    format!("Connect of I/O queue {qid} to {addr}"),
                    format!("target answered CNTLID {got}, not the admin queue's {cntlid}"),
                ));
            }
            Ok(())
        }
    });
    let results = futures::future::join_all(all).await;
    results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
}

/// The checks the Linux host makes on Identify Controller of a fabrics controller.
fn check_identify(
    p: &Params<'_>,
    cntlid: u16,
    id: &IdentifyController,
    discovery: bool,
) -> Result<()> {
    let bad = |reason: String| {
        Err(HostError::invalid(
            format!("Identify Controller from {}", p.addr),
            reason,
        ))
    };
    if id.cntlid != cntlid {
        return bad(format!(
            "CNTLID {} differs from the {} Connect returned",
            id.cntlid, cntlid
        ));
    }
    if id.kas == 0 && p.opts.kato_ms > 0 {
        return bad("KAS is 0 but keep-alive is mandatory for fabrics".into());
    }
    if id.icdoff != 0 {
        return bad(format!("ICDOFF {} is not supported (must be 0)", id.icdoff));
    }
    if id.sgls & (idbits::SGLS_SUPPORTED | idbits::SGLS_DWORD_ALIGNED) == 0 {
        return bad("SGLS reports no SGL support".into());
    }
    if !discovery && p.opts.io_queues > 0 && (id.ioccsz < 4 || id.iorcsz < 1) {
        return bad(format!(
            "IOCCSZ {} / IORCSZ {} below the minimum 4 / 1",
            id.ioccsz, id.iorcsz
        ));
    }
    if !discovery && !id.subnqn.is_empty() && id.subnqn != p.subnqn {
        return bad(format!(
            "SUBNQN {:?} is not the subsystem {:?} this host connected to",
            id.subnqn, p.subnqn
        ));
    }
    if id.cmic & idbits::CMIC_ANA != 0 && id.mnan > id.nn.max(1) {
        return bad(format!("MNAN {} is above NN {}", id.mnan, id.nn));
    }
    Ok(())
}

/// In-capsule data limit of I/O queues from IOCCSZ (16-byte units, 64 of them the SQE).
pub(crate) fn io_in_capsule_bytes(id: &IdentifyController) -> u32 {
    id.ioccsz.saturating_mul(16).saturating_sub(64)
}
