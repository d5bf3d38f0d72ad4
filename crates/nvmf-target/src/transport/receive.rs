//! Receiving PDUs: headers checked against the connection's phase and limits, digests
//! verified, the ICReq/ICResp exchange, and each PDU handed to the capsule or data path.

use nvme_proto::tcp::{
    CH_BYTES, CommonHeader, DIGEST_BYTES, FatalError, Framing, IC_BYTES, IcResp, PduHeader,
    PduLayout, TERM_REQ_MAX_DATA_BYTES, check_header_digest, crc32c, encode_header, expected_hlen,
    layout, pdu_flags, pdu_type,
};

use crate::config::TargetConfig;
use crate::transport::rx::RxBuf;
use crate::transport::session::Session;

/// Receive buffer of a connection before ICReq: room for the only PDUs allowed then, an
/// ICReq or an H2CTermReq. The full buffer waits until ICReq was accepted, so a socket
/// that never sends one costs next to nothing.
pub(crate) const PRE_ICREQ_RX_BYTES: usize = 256;
const _: () = assert!(PRE_ICREQ_RX_BYTES >= IC_BYTES);
const _: () = assert!(PRE_ICREQ_RX_BYTES >= TERM_REQ_HLEN + TERM_REQ_MAX_DATA_BYTES);
const TERM_REQ_HLEN: usize = match expected_hlen(pdu_type::H2C_TERM_REQ) {
    Some(h) => h,
    None => panic!("termination requests have a fixed header length"),
};

/// Receive buffer once established: the largest PDU the connection accepts, plus room
/// for headers and digests.
pub(crate) fn established_rx_bytes(cfg: &TargetConfig) -> usize {
    (cfg.in_capsule_bytes.max(cfg.maxh2cdata_bytes) as usize) + 1024
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    AwaitIcReq,
    Established,
    Closing,
}

/// Why processing stopped.
pub(crate) enum Stop {
    /// Send a C2HTermReq with this error and the offending header, then close.
    Fatal(FatalError, Vec<u8>),
    /// Close without a termination request (host sent H2CTermReq).
    Close,
}

impl Stop {
    pub fn fatal(err: FatalError, pdu: &[u8], hlen: usize) -> Stop {
        let n = hlen.clamp(CH_BYTES, 128).min(pdu.len());
        Stop::Fatal(err, pdu[..n].to_vec())
    }
}

fn is_host_pdu(t: u8) -> bool {
    matches!(
        t,
        pdu_type::IC_REQ | pdu_type::H2C_TERM_REQ | pdu_type::CAPSULE_CMD | pdu_type::H2C_DATA
    )
}

impl Session {
    /// Parses and handles every complete PDU in `rx`.
    pub(crate) fn process(&mut self, rx: &mut RxBuf) -> Result<(), Stop> {
        loop {
            if self.phase == Phase::Closing {
                return Ok(());
            }
            let avail = rx.data();
            if avail.len() < CH_BYTES {
                return Ok(());
            }
            let mut chb = [0u8; CH_BYTES];
            chb.copy_from_slice(&avail[..CH_BYTES]);
            let ch = CommonHeader::decode(&chb);
            let l = self
                .validate_header(&ch)
                .map_err(|e| Stop::fatal(e, avail, ch.hlen as usize))?;
            if avail.len() < l.total_len {
                if !rx.fits(l.total_len) {
                    return Err(Stop::fatal(
                        FatalError::limit_exceeded("PDU larger than the receive buffer"),
                        avail,
                        ch.hlen as usize,
                    ));
                }
                rx.make_room(l.total_len);
                return Ok(());
            }
            let pdu = &avail[..l.total_len];
            if l.has_hdgst {
                check_header_digest(pdu, l.hlen).map_err(|e| Stop::fatal(e, pdu, l.hlen))?;
            }
            self.handle_pdu(&ch, &l, pdu)?;
            rx.consume(l.total_len);
            if ch.pdu_type == pdu_type::IC_REQ {
                rx.grow(established_rx_bytes(&self.ctx.target.config));
            }
        }
    }

    fn validate_header(&self, ch: &CommonHeader) -> Result<PduLayout, FatalError> {
        if !is_host_pdu(ch.pdu_type) {
            return Err(FatalError::header_field(
                0,
                "PDU type not valid from a host",
            ));
        }
        match self.phase {
            Phase::AwaitIcReq => {
                if ch.pdu_type != pdu_type::IC_REQ && ch.pdu_type != pdu_type::H2C_TERM_REQ {
                    return Err(FatalError::sequence("PDU before ICReq"));
                }
                layout(ch, None, 0)
            }
            _ => {
                if ch.pdu_type == pdu_type::IC_REQ {
                    return Err(FatalError::sequence("second ICReq"));
                }
                let (valid_flags, max) = match ch.pdu_type {
                    pdu_type::CAPSULE_CMD => {
                        (pdu_flags::HDGST | pdu_flags::DDGST, self.ctx.max_icd_bytes)
                    }
                    pdu_type::H2C_DATA => (
                        pdu_flags::HDGST | pdu_flags::DDGST | pdu_flags::LAST_PDU,
                        self.ctx.target.config.maxh2cdata_bytes as usize,
                    ),
                    _ => (0xFF, 0),
                };
                if ch.flags & !valid_flags != 0 {
                    return Err(FatalError::header_field(1, "invalid PDU flags"));
                }
                layout(ch, Some(self.digests), max)
            }
        }
    }

    fn handle_pdu(&mut self, ch: &CommonHeader, l: &PduLayout, pdu: &[u8]) -> Result<(), Stop> {
        let hdr = PduHeader::decode(ch, pdu).map_err(|e| Stop::fatal(e, pdu, l.hlen))?;
        let data = pdu
            .get(l.data_offset..l.data_offset + l.data_len)
            .unwrap_or(&[]);
        let ddgst_ok = if l.has_ddgst && l.data_len > 0 {
            let d = pdu
                .get(l.data_offset + l.data_len..l.data_offset + l.data_len + DIGEST_BYTES)
                .unwrap_or(&[]);
            d.len() == DIGEST_BYTES && crc32c(data).to_le_bytes() == d
        } else {
            true
        };
        match hdr {
            PduHeader::IcReq(req) => {
                if req.pfv != 0 {
                    return Err(Stop::fatal(
                        FatalError::unsupported(8, "unsupported PFV"),
                        pdu,
                        l.hlen,
                    ));
                }
                if req.hpda > 31 {
                    return Err(Stop::fatal(
                        FatalError::unsupported(10, "HPDA out of range"),
                        pdu,
                        l.hlen,
                    ));
                }
                self.commands.enable();
                self.digests = req.digests;
                self.maxr2t = req.maxr2t;
                self.framing = Framing {
                    digests: req.digests,
                    data_align_bytes: (usize::from(req.hpda) + 1) * 4,
                };
                let resp = PduHeader::IcResp(IcResp {
                    pfv: 0,
                    cpda: 0,
                    digests: req.digests,
                    maxh2cdata: self.ctx.target.config.maxh2cdata_bytes,
                });
                let e = encode_header(&resp, 0, 0, Framing::default());
                self.tx.push_bytes(e.as_bytes());
                self.phase = Phase::Established;
                Ok(())
            }
            PduHeader::H2CTermReq(t) => {
                tracing::info!(
                    conn = self.ctx.handle.id,
                    fes = t.fes,
                    fei = t.fei,
                    "host terminated the connection"
                );
                Err(Stop::Close)
            }
            PduHeader::CapsuleCmd(cmd) => self.on_capsule(cmd, data, ddgst_ok, pdu, l.hlen),
            PduHeader::H2CData(d) => self.on_h2c_data(d, ch.flags, data, ddgst_ok, pdu, l.hlen),
            _ => Err(Stop::fatal(
                FatalError::header_field(0, "unexpected PDU type"),
                pdu,
                l.hlen,
            )),
        }
    }
}
