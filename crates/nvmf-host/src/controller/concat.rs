//! Secure channel concatenation on the host (NVMe Base 2.1, "Secure channel
//! concatenation"; Linux `nvme_auth_secure_concat`): a plain-TCP admin queue connects,
//! authenticates with DH-HMAC-CHAP and SC_C = NEWTLSPSK, and is dropped; the PSK that
//! exchange generated (HMAC(KS, C1 || C2)) gives the `NVMe1G..` identity and TLS PSK with
//! which every queue of the controller then connects over TLS. Each reconnect does it
//! again, so each connection of the controller runs on a fresh key.

use nvme_proto::auth::msg::SC_C_NEWTLSPSK;
use nvme_proto::fabrics::{CNTLID_DYNAMIC, ConnectCommand};

use super::session::Params;
use super::{ADMIN_QUEUE_SIZE, fabrics};
use crate::error::{HostError, Result};
use crate::queue::{ADMIN_IN_CAPSULE_BYTES, QueueOptions, QueuePair};

/// Where to go over TLS once the PSK is generated (opt-in through
/// [`super::ConnectOptions::concat`]; needs DH-HMAC-CHAP credentials, and excludes a
/// configured TLS PSK).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConcatOptions {
    /// The target's TLS listener: admin and I/O queues connect there with the generated
    /// PSK; the plain-TCP address the controller was given is used only to generate it.
    pub tls_addr: std::net::SocketAddr,
}

/// Checks the options fit secure channel concatenation.
pub(crate) fn check(p: &Params<'_>) -> Result<()> {
    if p.opts.tls.is_some() {
        return Err(HostError::Usage(
            "secure channel concatenation generates the TLS PSK: a configured TLS PSK cannot be given too".into(),
        ));
    }
    if p.opts.dhchap.is_none() {
        return Err(HostError::Usage(
            "secure channel concatenation needs a DH-HMAC-CHAP host secret (--dhchap-secret)"
                .into(),
        ));
    }
    Ok(())
}

/// Runs the concatenating authentication on a plain-TCP admin queue to `p.addr` and
/// returns the TLS PSK (with its identity) it generated; the queue is closed.
pub(crate) async fn generate_tls_psk(p: &Params<'_>) -> Result<tls_psk::Psk> {
    check(p)?;
    let q = QueuePair::connect(
        p.addr,
        &QueueOptions {
            qid: 0,
            queue_size: ADMIN_QUEUE_SIZE,
            digests: p.opts.digests,
            in_capsule_max_bytes: ADMIN_IN_CAPSULE_BYTES,
            command_timeout_ms: p.opts.admin_timeout_ms,
            connect_timeout_ms: p.opts.connect_timeout_ms,
            tls: None,
            busy_poll_us: 0,
        },
    )
    .await?;
    let cmd = ConnectCommand {
        recfmt: 0,
        qid: 0,
        sqsize: q.depth(),
        cattr: p.cattr(),
        kato_ms: p.opts.kato_ms,
    };
    let r = fabrics::connect_queue_sc(
        &q,
        cmd,
        &p.connect_data(CNTLID_DYNAMIC),
        p.opts.dhchap.as_ref(),
        SC_C_NEWTLSPSK,
    )
    .await;
    // The controller of this queue served only the exchange: closing the connection
    // ends it on the target.
    q.close().await;
    let Some(generated) = r?.1 else {
        return Err(HostError::Authentication {
            qid: 0,
            reason: "the authentication generated no PSK".into(),
        });
    };
    let (identity, key) = generated.tls_psk(&p.host.hostnqn, p.subnqn);
    tls_psk::Psk::new(identity, &key, generated.hash().tls_alg())
        .map_err(|e| HostError::Usage(format!("generated TLS PSK: {e}")))
}
