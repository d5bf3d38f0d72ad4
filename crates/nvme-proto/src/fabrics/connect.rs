//! Connect, its 1024-byte data, its response, and Disconnect (NVMe-oF 1.1
//! "Connect Command and Response"; NVMe Base 2.0 Fabrics Command Set "Connect",
//! "Disconnect"; Linux `struct nvmf_connect_command`, `struct nvmf_connect_data`).
//!
//! Connect SQE: 0 opcode 0x7F, 2..4 CID, 4 FCTYPE 0x01, 24..40 SGL1 (the data),
//! 40..42 RECFMT, 42..44 QID, 44..46 SQSIZE (0's based), 46 CATTR, 48..52 KATO (ms).

use crate::bytes::{le16, le32, put_bytes, put_str_nul, put16, put32};
use crate::command::Command;
use crate::completion::Completion;
use crate::error::DecodeError;
use crate::opcode::{admin, fctype};
use crate::status::Status;

use super::nqn::NQN_FIELD_BYTES;

/// Byte offsets of the Connect command fields in the SQE (for IPO with IATTR = 0).
pub mod connect_sqe_off {
    pub const RECFMT: u16 = 40;
    pub const QID: u16 = 42;
    pub const SQSIZE: u16 = 44;
    pub const CATTR: u16 = 46;
    pub const KATO: u16 = 48;
}

/// Byte offsets of the Connect data fields (for IPO with IATTR = 1).
pub mod connect_data_off {
    pub const HOSTID: u16 = 0;
    pub const CNTLID: u16 = 16;
    pub const SUBNQN: u16 = 256;
    pub const HOSTNQN: u16 = 512;
}

/// The fields of a Connect command (everything but the SGL that points at its data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConnectCommand {
    /// Record format, 0 for this version.
    pub recfmt: u16,
    /// Queue ID: 0 for the admin queue.
    pub qid: u16,
    /// Submission queue size, 0's based.
    pub sqsize: u16,
    /// Connect attributes: bits 1:0 priority class, bit 2 disable SQ flow control.
    pub cattr: u8,
    /// Keep Alive Timeout in milliseconds (admin queue only; 0 = disabled).
    pub kato_ms: u32,
}

impl ConnectCommand {
    /// The size of the Connect data in bytes.
    pub const DATA_BYTES: usize = ConnectData::BYTES;
    /// CATTR bit: the host disables SQ flow control (SQHD is then not reported).
    pub const CATTR_DISABLE_SQFLOW: u8 = 1 << 2;

    /// Reads the Connect fields of `c` (the caller checked opcode and FCTYPE).
    pub fn from_command(c: &Command) -> Self {
        ConnectCommand {
            recfmt: le16(&c.0, 40),
            qid: le16(&c.0, 42),
            sqsize: le16(&c.0, 44),
            cattr: c.0[46],
            kato_ms: le32(&c.0, 48),
        }
    }

    /// Writes the Connect fields into `c`, leaving the other bytes as they are.
    pub fn write_to(&self, c: &mut Command) {
        put16(&mut c.0, 40, self.recfmt);
        put16(&mut c.0, 42, self.qid);
        put16(&mut c.0, 44, self.sqsize);
        c.0[46] = self.cattr;
        put32(&mut c.0, 48, self.kato_ms);
    }

    /// A complete Connect SQE with `cid`, whose data follows in the capsule at offset 0.
    pub fn to_command(&self, cid: u16) -> Command {
        let mut c = Command::new(admin::FABRICS, cid, 0);
        c.set_fctype(fctype::CONNECT);
        c.set_sgl1(crate::sgl::SglDescriptor::in_capsule(
            0,
            ConnectData::BYTES as u32,
        ));
        self.write_to(&mut c);
        c
    }

    /// Number of SQ entries the host asked for (SQSIZE is 0's based).
    pub const fn queue_entries(&self) -> u32 {
        self.sqsize as u32 + 1
    }
}

/// The 1024-byte data of a Connect command.
///
/// Layout: 0..16 HOSTID, 16..18 CNTLID, 18..256 reserved, 256..512 SUBNQN,
/// 512..768 HOSTNQN, 768..1024 reserved. NQNs are NUL-terminated UTF-8.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectData {
    /// The host identifier (a UUID on Linux).
    pub hostid: [u8; 16],
    /// The controller to connect to; 0xFFFF on the admin queue asks for a dynamic one.
    pub cntlid: u16,
    pub subnqn: String,
    pub hostnqn: String,
}

impl ConnectData {
    pub const BYTES: usize = 1024;

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::BYTES {
            return Err(DecodeError::Short {
                what: "connect data",
                needed_bytes: Self::BYTES,
                got_bytes: b.len(),
            });
        }
        let mut hostid = [0u8; 16];
        hostid.copy_from_slice(&b[0..16]);
        Ok(ConnectData {
            hostid,
            cntlid: le16(b, 16),
            subnqn: nqn_field(b, connect_data_off::SUBNQN as usize)?,
            hostnqn: nqn_field(b, connect_data_off::HOSTNQN as usize)?,
        })
    }

    /// Writes the 1024 bytes into `out` (which must hold at least [`Self::BYTES`]; shorter
    /// buffers get what fits). NQNs longer than 255 bytes are truncated.
    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(Self::BYTES);
        out[..n].fill(0);
        put_bytes(out, 0, &self.hostid);
        put16(out, 16, self.cntlid);
        put_str_nul(out, 256, NQN_FIELD_BYTES, &self.subnqn);
        put_str_nul(out, 512, NQN_FIELD_BYTES, &self.hostnqn);
    }

    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        self.encode(&mut b);
        b
    }
}

/// Reads a 256-byte NUL-terminated UTF-8 NQN field at `off`.
pub(crate) fn nqn_field(b: &[u8], off: usize) -> Result<String, DecodeError> {
    let f = b
        .get(off..off + NQN_FIELD_BYTES)
        .ok_or(DecodeError::Short {
            what: "NQN field",
            needed_bytes: off + NQN_FIELD_BYTES,
            got_bytes: b.len(),
        })?;
    let end = f
        .iter()
        .position(|&c| c == 0)
        .ok_or(DecodeError::InvalidField {
            what: "NQN",
            offset: off,
            reason: "not NUL-terminated",
        })?;
    std::str::from_utf8(&f[..end])
        .map(str::to_owned)
        .map_err(|_| DecodeError::InvalidField {
            what: "NQN",
            offset: off,
            reason: "not UTF-8",
        })
}

/// DW0 of a successful Connect response: CNTLID in bits 15:0, AUTHREQ in bits 31:16.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConnectResponse {
    pub cntlid: u16,
    /// Authentication requirements: bit 1 ATR (authentication required), bit 2 ASCR
    /// (secure channel concatenation required).
    pub authreq: u16,
}

impl ConnectResponse {
    pub const AUTHREQ_ATR: u16 = 1 << 1;
    pub const AUTHREQ_ASCR: u16 = 1 << 2;

    pub const fn to_dw0(&self) -> u32 {
        (self.cntlid as u32) | ((self.authreq as u32) << 16)
    }
    pub const fn from_dw0(dw0: u32) -> Self {
        ConnectResponse {
            cntlid: dw0 as u16,
            authreq: (dw0 >> 16) as u16,
        }
    }
    /// The successful completion for Connect command `cid`.
    pub const fn completion(&self, cid: u16) -> Completion {
        let mut c = Completion::success(cid);
        c.dw0 = self.to_dw0();
        c
    }
}

/// DW0 of a Connect response with status Connect Invalid Parameters: which field was bad.
///
/// NVMe-oF 1.1 Figure 21 (as Linux nvmet and SPDK encode it): IPO, the byte offset of the
/// bad field, in bits 15:0; IATTR in bits 23:16, whose bit 0 (DW0 bit 16) is 1 when the
/// offset is into the Connect data and 0 when it is into the SQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InvalidParameter {
    /// Whether `offset` is into the Connect data (IATTR bit 0).
    pub in_data: bool,
    /// Byte offset of the field (IPO).
    pub offset: u16,
}

impl InvalidParameter {
    /// A bad field in the Connect data, e.g. `connect_data_off::SUBNQN`.
    pub const fn data(offset: u16) -> Self {
        InvalidParameter {
            in_data: true,
            offset,
        }
    }
    /// A bad field in the SQE, e.g. `connect_sqe_off::QID`.
    pub const fn sqe(offset: u16) -> Self {
        InvalidParameter {
            in_data: false,
            offset,
        }
    }
    pub const fn to_dw0(&self) -> u32 {
        (self.offset as u32) | ((self.in_data as u32) << 16)
    }
    pub const fn from_dw0(dw0: u32) -> Self {
        InvalidParameter {
            in_data: (dw0 >> 16) & 1 == 1,
            offset: dw0 as u16,
        }
    }
    /// The completion for Connect command `cid`: Connect Invalid Parameters with DNR.
    pub const fn completion(&self, cid: u16) -> Completion {
        let mut c = Completion::new(cid, Status::CONNECT_INVALID_PARAMETERS.dnr());
        c.dw0 = self.to_dw0();
        c
    }
}

/// The Disconnect command (FCTYPE 0x08): deletes the I/O queue it arrives on.
/// Its only field is RECFMT at bytes 40..42, 0 for this version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Disconnect {
    pub recfmt: u16,
}

impl Disconnect {
    pub fn from_command(c: &Command) -> Self {
        Disconnect {
            recfmt: le16(&c.0, 40),
        }
    }
    pub fn to_command(&self, cid: u16) -> Command {
        let mut c = Command::new(admin::FABRICS, cid, 0);
        c.set_fctype(fctype::DISCONNECT);
        put16(&mut c.0, 40, self.recfmt);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn connect_sqe_layout() {
        let cc = ConnectCommand {
            recfmt: 0,
            qid: 3,
            sqsize: 127,
            cattr: ConnectCommand::CATTR_DISABLE_SQFLOW,
            kato_ms: 5000,
        };
        let c = cc.to_command(0x10);
        let b = c.0;
        assert_eq!(b[0], 0x7F);
        assert_eq!(b[4], 0x01);
        assert_eq!(&b[2..4], &[0x10, 0]);
        assert_eq!(&b[40..42], &[0, 0]);
        assert_eq!(&b[42..44], &[3, 0]);
        assert_eq!(&b[44..46], &[127, 0]);
        assert_eq!(b[46], 0x04);
        assert_eq!(&b[48..52], &5000u32.to_le_bytes());
        // SGL1: in-capsule data, 1024 bytes at offset 0.
        assert_eq!(c.sgl1().length, 1024);
        assert_eq!(b[39], 0x01);
        assert_eq!(ConnectCommand::from_command(&c), cc);
        assert_eq!(cc.queue_entries(), 128);
    }

    #[test]
    fn connect_data_layout() {
        let d = ConnectData {
            hostid: [0x11; 16],
            cntlid: 0xFFFF,
            subnqn: "nqn.2026-01.io.ferrobay:n1:d0".into(),
            hostnqn: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001".into(),
        };
        let b = d.to_bytes();
        assert_eq!(&b[0..16], &[0x11; 16]);
        assert_eq!(&b[16..18], &[0xFF, 0xFF]);
        assert!(b[18..256].iter().all(|&x| x == 0));
        assert_eq!(&b[256..256 + 29], d.subnqn.as_bytes());
        assert_eq!(b[256 + 29], 0);
        assert_eq!(&b[512..516], b"nqn.");
        assert!(b[768..].iter().all(|&x| x == 0));
        assert_eq!(ConnectData::decode(&b).unwrap(), d);
    }

    #[test]
    fn connect_data_errors() {
        assert!(matches!(
            ConnectData::decode(&[0u8; 1023]),
            Err(DecodeError::Short {
                needed_bytes: 1024,
                ..
            })
        ));
        let mut b = [0u8; 1024];
        b[256..512].fill(b'a');
        assert_eq!(
            ConnectData::decode(&b),
            Err(DecodeError::InvalidField {
                what: "NQN",
                offset: 256,
                reason: "not NUL-terminated"
            })
        );
        let mut b = [0u8; 1024];
        b[512] = 0xFF;
        assert!(matches!(
            ConnectData::decode(&b),
            Err(DecodeError::InvalidField {
                offset: 512,
                reason: "not UTF-8",
                ..
            })
        ));
    }

    #[test]
    fn response_dw0() {
        let r = ConnectResponse {
            cntlid: 0x1234,
            authreq: ConnectResponse::AUTHREQ_ATR,
        };
        // ATR is DW0 bit 17 (Linux NVME_CONNECT_AUTHREQ_ATR).
        assert_eq!(r.to_dw0(), 0x0002_1234);
        assert_eq!(ConnectResponse::from_dw0(r.to_dw0()), r);
        let c = r.completion(9);
        assert_eq!((c.cid, c.dw0, c.status), (9, 0x0002_1234, Status::SUCCESS));
    }

    #[test]
    fn invalid_parameter_dw0() {
        // As Linux nvmet's IPO_IATTR_CONNECT_DATA(subsysnqn): (1 << 16) | 256.
        let p = InvalidParameter::data(connect_data_off::SUBNQN);
        assert_eq!(p.to_dw0(), 0x0001_0100);
        // As IPO_IATTR_CONNECT_SQE(qid): 42.
        assert_eq!(InvalidParameter::sqe(connect_sqe_off::QID).to_dw0(), 42);
        let c = p.completion(3);
        assert_eq!(c.status, Status::CONNECT_INVALID_PARAMETERS.dnr());
        assert_eq!(InvalidParameter::from_dw0(c.dw0), p);
    }

    #[test]
    fn disconnect_layout() {
        let c = Disconnect { recfmt: 0 }.to_command(4);
        assert_eq!((c.opcode(), c.fctype(), c.cid()), (0x7F, 0x08, 4));
        assert_eq!(Disconnect::from_command(&c), Disconnect { recfmt: 0 });
    }

    proptest! {
        #[test]
        fn data_roundtrip(hostid: [u8; 16], cntlid: u16, s in "[^\0]{0,60}", h in "[^\0]{0,60}") {
            let d = ConnectData { hostid, cntlid, subnqn: s, hostnqn: h };
            prop_assert_eq!(ConnectData::decode(&d.to_bytes()).unwrap(), d);
        }
        #[test]
        fn data_decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..1100)) {
            let _ = ConnectData::decode(&b);
        }
        #[test]
        fn command_roundtrip(recfmt: u16, qid: u16, sqsize: u16, cattr: u8, kato_ms: u32, cid: u16) {
            let cc = ConnectCommand { recfmt, qid, sqsize, cattr, kato_ms };
            prop_assert_eq!(ConnectCommand::from_command(&cc.to_command(cid)), cc);
        }
        #[test]
        fn dw0_roundtrips(cntlid: u16, authreq: u16, in_data: bool, offset: u16) {
            let r = ConnectResponse { cntlid, authreq };
            prop_assert_eq!(ConnectResponse::from_dw0(r.to_dw0()), r);
            let p = InvalidParameter { in_data, offset };
            prop_assert_eq!(InvalidParameter::from_dw0(p.to_dw0()), p);
        }
    }
}
