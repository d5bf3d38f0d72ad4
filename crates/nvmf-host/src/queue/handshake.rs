//! TCP connect and the ICReq/ICResp exchange that opens every NVMe/TCP connection.

use std::net::SocketAddr;
use std::time::Duration;

use nvme_proto::tcp::{
    CH_BYTES, CommonHeader, DATA_HLEN, Digests, Framing, IC_BYTES, IcReq, IcResp, PduHeader,
    TERM_REQ_MAX_DATA_BYTES, encode_header, layout, pdu_type,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::queue::stream::QueueStream;

use crate::error::fes_text;

/// What the ICResp settled for the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    pub digests: Digests,
    /// Largest H2CData payload the target accepts, in bytes.
    pub maxh2cdata_bytes: u32,
}

/// Smallest MAXH2CDATA a host accepts (NVMe/TCP 1.0, and what Linux checks).
pub const MIN_MAXH2CDATA_BYTES: u32 = 4096;

/// Opens the TCP connection with TCP_NODELAY (every PDU is latency-critical).
pub(crate) async fn connect_tcp(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, String> {
    let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(format!("TCP connect: {e}")),
        Err(_) => {
            return Err(format!(
                "TCP connect timed out after {} ms",
                timeout.as_millis()
            ));
        }
    };
    stream
        .set_nodelay(true)
        .map_err(|e| format!("setting TCP_NODELAY: {e}"))?;
    Ok(stream)
}

/// The ICReq this host sends: PFV 0, HPDA 0 (no alignment needed), MAXR2T 0 (one R2T
/// outstanding per command, as Linux asks).
pub(crate) fn icreq(digests: Digests) -> IcReq {
    IcReq {
        pfv: 0,
        hpda: 0,
        digests,
        maxr2t: 0,
    }
}

/// Checks an ICResp the way the Linux host does.
pub fn check_icresp(req: &IcReq, resp: &IcResp) -> Result<Negotiated, String> {
    if resp.pfv != 0 {
        return Err(format!("ICResp PFV {} is not 0", resp.pfv));
    }
    if resp.digests != req.digests {
        return Err(format!(
            "ICResp digest bits {:#x} do not mirror the ICReq {:#x}",
            resp.digests.bits(),
            req.digests.bits()
        ));
    }
    if resp.cpda != 0 {
        return Err(format!(
            "ICResp CPDA {} is not supported (must be 0)",
            resp.cpda
        ));
    }
    if resp.maxh2cdata < MIN_MAXH2CDATA_BYTES || !resp.maxh2cdata.is_multiple_of(4) {
        return Err(format!(
            "ICResp MAXH2CDATA {} is below 4096 or not a multiple of 4",
            resp.maxh2cdata
        ));
    }
    Ok(Negotiated {
        digests: resp.digests,
        maxh2cdata_bytes: resp.maxh2cdata,
    })
}

/// Sends the ICReq and validates the ICResp. Errors are the reason text for
/// `HostError::Connect`.
pub(crate) async fn exchange_ic(
    stream: &mut QueueStream,
    digests: Digests,
    timeout: Duration,
) -> Result<Negotiated, String> {
    let req = icreq(digests);
    let hdr = encode_header(&PduHeader::IcReq(req), 0, 0, Framing::default());
    match tokio::time::timeout(timeout, async {
        stream
            .write_all(hdr.as_bytes())
            .await
            .map_err(|e| format!("sending ICReq: {e}"))?;
        read_icresp(stream).await
    })
    .await
    {
        Ok(Ok(resp)) => check_icresp(&req, &resp),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!("no ICResp within {} ms", timeout.as_millis())),
    }
}

async fn read_icresp(stream: &mut QueueStream) -> Result<IcResp, String> {
    let mut buf = [0u8; IC_BYTES];
    read_first_header(stream, &mut buf[..CH_BYTES]).await?;
    let mut chb = [0u8; CH_BYTES];
    chb.copy_from_slice(&buf[..CH_BYTES]);
    let ch = CommonHeader::decode(&chb);
    if ch.pdu_type == pdu_type::C2H_TERM_REQ {
        // The target refused the ICReq: read what it says (24..152 bytes) and report it.
        let plen = (ch.plen as usize).clamp(DATA_HLEN, DATA_HLEN + TERM_REQ_MAX_DATA_BYTES);
        let mut t = vec![0u8; plen];
        t[..CH_BYTES].copy_from_slice(&chb);
        read_exact(stream, &mut t[CH_BYTES..], "C2HTermReq").await?;
        let fes = nvme_proto::bytes::le16(&t, 8);
        let fei = nvme_proto::bytes::le32(&t, 10);
        return Err(format!(
            "target terminated the connection instead of ICResp: {} (FES {fes:#x}, FEI {fei:#x})",
            fes_text(fes)
        ));
    }
    if ch.pdu_type != pdu_type::IC_RESP {
        return Err(format!(
            "expected ICResp (PDU type 0x01), got PDU type {:#04x}",
            ch.pdu_type
        ));
    }
    layout(&ch, None, 0).map_err(|e| format!("bad ICResp header: {}", e.reason))?;
    read_exact(stream, &mut buf[CH_BYTES..], "ICResp").await?;
    match PduHeader::decode(&ch, &buf) {
        Ok(PduHeader::IcResp(r)) => Ok(r),
        Ok(_) => Err("ICResp decoded as another PDU type".into()),
        Err(e) => Err(format!("bad ICResp: {}", e.reason)),
    }
}

/// Bytes of a TLS alert record (5-byte record header, 2-byte alert): what a TLS listener
/// sends a plain ICReq. Shorter than a PDU header, so it is read first and looked at.
const TLS_ALERT_BYTES: usize = 7;
const _: () = assert!(TLS_ALERT_BYTES < CH_BYTES);

/// A TLS alert record (content type 21, legacy version 3.x). No ICResp starts so: its
/// first byte is the PDU type 01h.
fn is_tls_alert(b: &[u8]) -> bool {
    b.len() >= 3 && b[0] == 21 && b[1] == 3
}

/// The ICResp's common header; a TLS alert instead (a TLS listener reached in plain
/// NVMe/TCP) is named as such.
async fn read_first_header(stream: &mut QueueStream, buf: &mut [u8]) -> Result<(), String> {
    let (alert, rest) = buf.split_at_mut(TLS_ALERT_BYTES);
    read_exact(stream, alert, "ICResp").await?;
    if is_tls_alert(alert) {
        return Err(
            "the target answered with a TLS alert: this listener requires \
                    TLS (give the host's TLS PSK: ConnectOptions.tls, --tls-psk FILE)"
                .into(),
        );
    }
    read_exact(stream, rest, "ICResp").await
}

async fn read_exact(stream: &mut QueueStream, buf: &mut [u8], what: &str) -> Result<(), String> {
    match stream.read_exact(buf).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(format!(
            "target closed the connection before sending a whole {what}"
        )),
        Err(e) => Err(format!("reading {what}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(digests: u8, cpda: u8, maxh2cdata: u32) -> IcResp {
        IcResp {
            pfv: 0,
            cpda,
            digests: Digests::from_bits(digests),
            maxh2cdata,
        }
    }

    #[test]
    fn icresp_checks() {
        let req = icreq(Digests::from_bits(3));
        assert_eq!(
            check_icresp(&req, &resp(3, 0, 131072)),
            Ok(Negotiated {
                digests: Digests::from_bits(3),
                maxh2cdata_bytes: 131072
            })
        );
        assert_eq!(
            check_icresp(&req, &resp(1, 0, 131072)).unwrap_err(),
            "ICResp digest bits 0x1 do not mirror the ICReq 0x3"
        );
        assert!(
            check_icresp(&req, &resp(3, 1, 131072))
                .unwrap_err()
                .contains("CPDA")
        );
        assert!(
            check_icresp(&req, &resp(3, 0, 4092))
                .unwrap_err()
                .contains("MAXH2CDATA")
        );
        assert!(
            check_icresp(&req, &resp(3, 0, 4098))
                .unwrap_err()
                .contains("MAXH2CDATA")
        );
        let mut r = resp(3, 0, 4096);
        r.pfv = 1;
        assert!(check_icresp(&req, &r).unwrap_err().contains("PFV"));
    }
}
