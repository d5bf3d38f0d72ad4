//! Fabrics commands on a queue: Connect and Property Get/Set.

use blockdev::IoBuf;
use nvme_proto::Status;
use nvme_proto::fabrics::{
    ConnectCommand, ConnectData, ConnectResponse, InvalidParameter, PropertyGet, PropertySet,
    PropertySize, connect_data_off, connect_sqe_off,
};

use super::auth::DhchapCredentials;
use crate::error::{HostError, Result};
use crate::queue::{Payload, QueuePair};

/// Sends Connect on `q` and returns the controller ID the target assigned.
pub(crate) async fn connect_queue(
    q: &QueuePair,
    cmd: ConnectCommand,
    data: &ConnectData,
    dhchap: Option<&DhchapCredentials>,
) -> Result<u16> {
    connect_queue_sc(q, cmd, data, dhchap, nvme_proto::auth::msg::SC_C_NONE)
        .await
        .map(|(cntlid, _)| cntlid)
}

/// [`connect_queue`] whose authentication asks for secure channel concatenation `sc_c`:
/// also returns the PSK it generated. A target that asks for no authentication then is
/// an error (nothing to generate a PSK from).
pub(crate) async fn connect_queue_sc(
    q: &QueuePair,
    cmd: ConnectCommand,
    data: &ConnectData,
    dhchap: Option<&DhchapCredentials>,
    sc_c: u8,
) -> Result<(u16, Option<nvme_proto::tls_key::GeneratedPsk>)> {
    let mut buf = IoBuf::new_zeroed(ConnectData::BYTES);
    data.encode(&mut buf);
    let done = q
        .submit_init(cmd.to_command(0), Payload::write(buf))
        .await?;
    let status = done.cqe.status;
    if !status.is_success() {
        let detail = if same_code(status, Status::CONNECT_INVALID_PARAMETERS) {
            invalid_parameter_text(InvalidParameter::from_dw0(done.cqe.dw0))
        } else {
            String::new()
        };
        return Err(HostError::ConnectRejected {
            qid: cmd.qid,
            status,
            detail,
        });
    }
    let r = ConnectResponse::from_dw0(done.cqe.dw0);
    if r.authreq & ConnectResponse::AUTHREQ_ASCR != 0 && sc_c == nvme_proto::auth::msg::SC_C_NONE {
        return Err(HostError::Authentication {
            qid: cmd.qid,
            reason: "the target requires secure channel concatenation (AUTHREQ.ASCR): connect with concat (a DH-HMAC-CHAP secret and the target's TLS address)".into(),
        });
    }
    let authreq = r.authreq & !ConnectResponse::AUTHREQ_ASCR;
    if authreq & ConnectResponse::AUTHREQ_ATR != 0 {
        let Some(creds) = dhchap else {
            return Err(HostError::Authentication {
                qid: cmd.qid,
                reason: "the target requires DH-HMAC-CHAP authentication and no host secret was given (--dhchap-secret)".into(),
            });
        };
        // One transaction per queue; the queue ID keeps them apart.
        let generated = super::auth::authenticate(
            q,
            cmd.qid,
            creds,
            &data.hostnqn,
            &data.subnqn,
            cmd.qid,
            sc_c,
        )
        .await?;
        return Ok((r.cntlid, generated));
    } else if authreq != 0 {
        return Err(HostError::invalid(
            format!("Connect to {} queue {}", q.addr(), cmd.qid),
            format!("target sets unknown AUTHREQ bits {:#x}", r.authreq),
        ));
    }
    if sc_c != nvme_proto::auth::msg::SC_C_NONE {
        return Err(HostError::Authentication {
            qid: cmd.qid,
            reason: "secure channel concatenation asked for, but the target does not ask this host to authenticate (is the host set up for concatenation on the target?)".into(),
        });
    }
    Ok((r.cntlid, None))
}

/// Whether two statuses have the same type and code (ignoring DNR/More).
pub(crate) fn same_code(a: Status, b: Status) -> bool {
    a.sct == b.sct && a.sc == b.sc
}

fn invalid_parameter_text(p: InvalidParameter) -> String {
    let name = if p.in_data {
        match p.offset {
            connect_data_off::HOSTID => "HOSTID",
            connect_data_off::CNTLID => "CNTLID",
            connect_data_off::SUBNQN => "SUBNQN",
            connect_data_off::HOSTNQN => "HOSTNQN",
            _ => "a field",
        }
    } else {
        match p.offset {
            connect_sqe_off::RECFMT => "RECFMT",
            connect_sqe_off::QID => "QID",
            connect_sqe_off::SQSIZE => "SQSIZE",
            connect_sqe_off::CATTR => "CATTR",
            connect_sqe_off::KATO => "KATO",
            _ => "a field",
        }
    };
    let place = if p.in_data {
        "Connect data"
    } else {
        "Connect command"
    };
    format!("; target names {name} at byte {} of the {place}", p.offset)
}

pub(crate) async fn property_get(q: &QueuePair, ofst: u32, size: PropertySize) -> Result<u64> {
    let done = q
        .submit_init_checked(PropertyGet { size, ofst }.to_command(0), Payload::None)
        .await?;
    Ok(match size {
        PropertySize::Four => u64::from(done.cqe.dw0),
        PropertySize::Eight => done.cqe.result64(),
    })
}

pub(crate) async fn property_set(
    q: &QueuePair,
    ofst: u32,
    size: PropertySize,
    value: u64,
) -> Result<()> {
    q.submit_init_checked(
        PropertySet { size, ofst, value }.to_command(0),
        Payload::None,
    )
    .await?;
    Ok(())
}
