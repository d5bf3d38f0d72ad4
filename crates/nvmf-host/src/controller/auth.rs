//! The host's side of DH-HMAC-CHAP (NVMe Base 2.0, 8.13.5; Linux
//! `drivers/nvme/host/auth.c`): after a Connect whose response sets AUTHREQ.ATR, the queue
//! sends AUTH_Negotiate, fetches the challenge, answers it, fetches Success1 (checking the
//! controller's response when it was challenged too) and sends Success2.
//!
//! With secure channel concatenation (SC_C = NEWTLSPSK, admin queue only) the host offers
//! only SHA-256/384 and the non-null DH groups, always sends a C2 (S2 stays 0 unless it
//! authenticates the controller too, as Linux does), and derives the generated PSK
//! HMAC(KS, C1 || C2) once the controller accepted it.

use blockdev::IoBuf;
use nvme_proto::auth::crypto::{
    ResponseInput, ctrl_response, effective_challenge, host_response, responses_equal,
};
use nvme_proto::auth::dh::PRIVATE_BYTES;
use nvme_proto::auth::msg::SC_C_NONE;
use nvme_proto::auth::{
    AuthMessage, AuthReceive, AuthSend, Challenge, DhGroup, DhKeyPair, DhchapSecret, Failure,
    FailureReason, HashId, MAX_MESSAGE_BYTES, Negotiate, ProtocolDescriptor, Reply, Success2,
};
use nvme_proto::tls_key::{GeneratedPsk, PskHash};
use rand::RngCore as _;
use zeroize::Zeroizing;

use crate::error::{HostError, Result};
use crate::queue::{Payload, QueuePair};

/// A host's DH-HMAC-CHAP secrets (nvme-cli `--dhchap-secret`, `--dhchap-ctrl-secret`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DhchapCredentials {
    /// The host's secret, which the controller checks.
    pub secret: DhchapSecret,
    /// The controller's secret: with it, the host also authenticates the controller.
    pub ctrl_secret: Option<DhchapSecret>,
}

impl DhchapCredentials {
    pub fn new(secret: DhchapSecret) -> Self {
        DhchapCredentials {
            secret,
            ctrl_secret: None,
        }
    }
}

fn auth_error(qid: u16, reason: impl Into<String>) -> HostError {
    HostError::Authentication {
        qid,
        reason: reason.into(),
    }
}

async fn send(q: &QueuePair, msg: &[u8]) -> Result<()> {
    let mut buf = IoBuf::new_zeroed(msg.len());
    buf.copy_from_slice(msg);
    q.submit_init_checked(
        AuthSend::dhchap(msg.len() as u32).to_command(0),
        Payload::write(buf),
    )
    .await?;
    Ok(())
}

async fn receive(q: &QueuePair) -> Result<Vec<u8>> {
    let done = q
        .submit_init_checked(
            AuthReceive::dhchap(MAX_MESSAGE_BYTES as u32).to_command(0),
            Payload::read(IoBuf::new_zeroed(MAX_MESSAGE_BYTES)),
        )
        .await?;
    Ok(done.buf.map(|b| b.to_vec()).unwrap_or_default())
}

/// What the controller sent instead of the message expected; a Failure1 names its reason.
fn unexpected(qid: u16, got: &[u8], want: &str) -> HostError {
    match Failure::decode(got) {
        Ok(f) => {
            let why = f.reason().map_or_else(
                || format!("reason {:#04x}", f.rescode_exp),
                |r| r.to_string(),
            );
            auth_error(
                qid,
                format!("the controller refused the host: {why} (wrong or unknown secret?)"),
            )
        }
        Err(_) => auth_error(
            qid,
            format!("expected {want}, the controller sent something else"),
        ),
    }
}

/// Tells the controller the host gives up (Failure2), then returns `err`.
async fn abort(q: &QueuePair, t_id: u16, reason: FailureReason, err: HostError) -> HostError {
    let _ = send(q, &Failure::failure2(t_id, reason).to_bytes()).await;
    err
}

/// Runs one DH-HMAC-CHAP transaction `t_id` on queue `q` (connected, not yet usable) with
/// secure channel concatenation `sc_c`; returns the generated PSK when `sc_c` asked for one.
pub(crate) async fn authenticate(
    q: &QueuePair,
    qid: u16,
    creds: &DhchapCredentials,
    host_nqn: &str,
    subsys_nqn: &str,
    t_id: u16,
    sc_c: u8,
) -> Result<Option<GeneratedPsk>> {
    let concat = sc_c != SC_C_NONE;
    let hash_ids: Vec<u8> = HashId::ALL
        .iter()
        .filter(|h| !concat || PskHash::from_dhchap(**h).is_some())
        .map(|h| *h as u8)
        .collect();
    let dh_ids: Vec<u8> = DhGroup::ALL
        .iter()
        .filter(|g| !concat || **g != DhGroup::Null)
        .map(|g| *g as u8)
        .collect();
    let neg = Negotiate {
        t_id,
        sc_c,
        protocols: vec![ProtocolDescriptor::dhchap(&hash_ids, &dh_ids)],
    };
    send(q, &neg.to_bytes()).await?;
    let got = receive(q).await?;
    let ch = match AuthMessage::decode(&got) {
        Ok(AuthMessage::Challenge(c)) if c.t_id == t_id => c,
        _ => return Err(unexpected(qid, &got, "DH-HMAC-CHAP_Challenge")),
    };
    let (reply, c2, session_key, hash) =
        match answer(&ch, creds, host_nqn, subsys_nqn, t_id, concat) {
            Ok(x) => x,
            Err((reason, msg)) => {
                return Err(abort(q, t_id, reason, auth_error(qid, msg)).await);
            }
        };
    // HMAC(KS, C1 || C2), kept until the controller accepted the host.
    let generated = if concat {
        let (Some(ks), Some(c2), Some(h)) = (
            session_key.as_ref(),
            reply.c2.as_ref(),
            PskHash::from_dhchap(hash),
        ) else {
            let err = auth_error(
                qid,
                "secure channel concatenation needs a DH group and SHA-256 or SHA-384; the controller chose otherwise",
            );
            return Err(abort(q, t_id, FailureReason::ConcatMismatch, err).await);
        };
        match GeneratedPsk::generate(h, ks, &ch.cval, c2) {
            Ok(g) => Some(g),
            Err(e) => {
                let err = auth_error(qid, e.to_string());
                return Err(abort(q, t_id, FailureReason::IncorrectPayload, err).await);
            }
        }
    } else {
        None
    };
    send(q, &reply.to_bytes()).await?;
    let got = receive(q).await?;
    let s1 = match AuthMessage::decode(&got) {
        Ok(AuthMessage::Success1(s)) if s.t_id == t_id => s,
        _ => return Err(unexpected(qid, &got, "DH-HMAC-CHAP_Success1")),
    };
    let Some((c2, s2, ctrl)) = c2 else {
        return Ok(generated);
    };
    let key = ctrl.transformed(subsys_nqn);
    let e = effective_challenge(hash, session_key.as_deref().map(|v| &v[..]), &c2);
    let input = ResponseInput {
        seqnum: s2,
        t_id,
        host_nqn,
        subsys_nqn,
    };
    let want = ctrl_response(hash, &key, &e, &input);
    match &s1.rval {
        Some(r) if responses_equal(r, &want) => {}
        _ => {
            let err = auth_error(
                qid,
                "the controller's response is wrong: it does not hold the controller secret",
            );
            return Err(abort(q, t_id, FailureReason::Failed, err).await);
        }
    }
    send(q, &Success2 { t_id }.to_bytes()).await?;
    Ok(generated)
}

type Answer = (
    Reply,
    Option<(Zeroizing<Vec<u8>>, u32, DhchapSecret)>,
    Option<Zeroizing<Vec<u8>>>,
    HashId,
);

fn answer(
    ch: &Challenge,
    creds: &DhchapCredentials,
    host_nqn: &str,
    subsys_nqn: &str,
    t_id: u16,
    concat: bool,
) -> std::result::Result<Answer, (FailureReason, String)> {
    let hash = HashId::from_u8(ch.hash_id).ok_or((
        FailureReason::HashUnusable,
        format!("the controller chose unknown hash {:#04x}", ch.hash_id),
    ))?;
    if ch.cval.len() != hash.len() {
        return Err((
            FailureReason::IncorrectPayload,
            "the challenge's length does not match its hash".into(),
        ));
    }
    let group = DhGroup::from_u8(ch.dh_group).ok_or((
        FailureReason::DhGroupUnusable,
        format!("the controller chose unknown DH group {:#04x}", ch.dh_group),
    ))?;
    let mut rng = rand::rng();
    let (dhv, session_key) = if group == DhGroup::Null {
        if !ch.dhv.is_empty() {
            return Err((
                FailureReason::IncorrectPayload,
                "a DH value with the null group".into(),
            ));
        }
        (Vec::new(), None)
    } else {
        let mut x = Zeroizing::new([0u8; PRIVATE_BYTES]);
        rng.fill_bytes(&mut x[..]);
        let k = DhKeyPair::generate(group, &x[..])
            .map_err(|e| (FailureReason::DhGroupUnusable, e.to_string()))?;
        let ks = k.shared_secret(&ch.dhv).map_err(|e| {
            (
                FailureReason::DhGroupUnusable,
                format!("controller's DH value: {e}"),
            )
        })?;
        (k.public().to_vec(), Some(ks))
    };
    let input = ResponseInput {
        seqnum: ch.seqnum,
        t_id,
        host_nqn,
        subsys_nqn,
    };
    let e = effective_challenge(hash, session_key.as_deref().map(|v| &v[..]), &ch.cval);
    let r1 = host_response(hash, &creds.secret.transformed(host_nqn), &e, &input);
    let c2 = creds.ctrl_secret.as_ref().map(|cs| {
        let mut c2 = Zeroizing::new(vec![0u8; hash.len()]);
        rng.fill_bytes(&mut c2);
        let s2 = rng.next_u32().max(1);
        (c2, s2, cs.clone())
    });
    // Concatenation needs a C2 even when the controller is not authenticated (S2 = 0).
    let c2_bytes = c2.as_ref().map(|c| c.0.to_vec()).or_else(|| {
        concat.then(|| {
            let mut c = vec![0u8; hash.len()];
            rng.fill_bytes(&mut c);
            c
        })
    });
    let reply = Reply {
        t_id,
        seqnum: c2.as_ref().map_or(0, |c| c.1),
        rval: r1.to_vec(),
        c2: c2_bytes,
        dhv,
    };
    Ok((reply, c2, session_key, hash))
}
