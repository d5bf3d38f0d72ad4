//! Reservations (NVMe Base 2.0 "Reservations"; NVM Command Set 1.0
//! "Reservation Register/Report/Acquire/Release command"; Linux `struct nvme_reservation_status`):
//! Register (0x0D), Report (0x0E), Acquire (0x11), Release (0x15).
//!
//! Register CDW10: 2:0 RREGA, 3 IEKEY, 31:30 CPTPL; data 0..8 CRKEY, 8..16 NRKEY.
//! Acquire CDW10: 2:0 RACQA, 3 IEKEY, 15:8 RTYPE; data 0..8 CRKEY, 8..16 PRKEY.
//! Release CDW10: 2:0 RRELA, 3 IEKEY, 15:8 RTYPE; data 0..8 CRKEY.
//! Report CDW10: NUMD (0's based dwords), CDW11 bit 0 EDS; data is the reservation status
//! data structure (24-byte header + 24-byte entries, or 64 + 64 with EDS).

use crate::bytes::{get_array, le16, le32, le64, put_bytes, put16, put32, put64};
use crate::command::Command;
use crate::error::DecodeError;
use crate::opcode::io;

/// Reservation types (RTYPE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReservationType {
    WriteExclusive = 1,
    ExclusiveAccess = 2,
    WriteExclusiveRegistrantsOnly = 3,
    ExclusiveAccessRegistrantsOnly = 4,
    WriteExclusiveAllRegistrants = 5,
    ExclusiveAccessAllRegistrants = 6,
}

impl ReservationType {
    pub const fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => ReservationType::WriteExclusive,
            2 => ReservationType::ExclusiveAccess,
            3 => ReservationType::WriteExclusiveRegistrantsOnly,
            4 => ReservationType::ExclusiveAccessRegistrantsOnly,
            5 => ReservationType::WriteExclusiveAllRegistrants,
            6 => ReservationType::ExclusiveAccessAllRegistrants,
            _ => return None,
        })
    }
    pub const fn as_u8(self) -> u8 {
        self as u8
    }
    /// Every registrant is a reservation holder (types 5 and 6).
    pub const fn all_registrants(self) -> bool {
        matches!(
            self,
            ReservationType::WriteExclusiveAllRegistrants
                | ReservationType::ExclusiveAccessAllRegistrants
        )
    }
    /// Registrants (not only the holder) have access (types 3 to 6).
    pub const fn registrants_have_access(self) -> bool {
        !matches!(
            self,
            ReservationType::WriteExclusive | ReservationType::ExclusiveAccess
        )
    }
    /// Whether a command that reads (`write` false) or writes the namespace is allowed for
    /// a host that is (or is not) a registrant / the holder, while this reservation is
    /// held (NVMe base 2.0 "Command Behavior in the Presence of a Reservation").
    /// A refused command gets Reservation Conflict.
    pub const fn allows(self, write: bool, registrant: bool, holder: bool) -> bool {
        if holder || (registrant && self.registrants_have_access()) {
            return true;
        }
        let write_exclusive = matches!(
            self,
            ReservationType::WriteExclusive
                | ReservationType::WriteExclusiveRegistrantsOnly
                | ReservationType::WriteExclusiveAllRegistrants
        );
        !write && write_exclusive
    }
}

/// Register actions (RREGA).
pub mod rrega {
    pub const REGISTER: u8 = 0;
    pub const UNREGISTER: u8 = 1;
    pub const REPLACE: u8 = 2;
}

/// Acquire actions (RACQA).
pub mod racqa {
    pub const ACQUIRE: u8 = 0;
    pub const PREEMPT: u8 = 1;
    pub const PREEMPT_AND_ABORT: u8 = 2;
}

/// Release actions (RRELA).
pub mod rrela {
    pub const RELEASE: u8 = 0;
    pub const CLEAR: u8 = 1;
}

/// Change Persist Through Power Loss (CPTPL) values of Register.
pub mod cptpl {
    pub const NO_CHANGE: u8 = 0;
    /// Set PTPL to 0: reservations are released and registrants cleared on power loss.
    pub const CLEAR: u8 = 2;
    /// Set PTPL to 1: reservations and registrants persist across power loss.
    pub const PERSIST: u8 = 3;
}

fn short(what: &'static str, needed_bytes: usize, got: &[u8]) -> DecodeError {
    DecodeError::Short {
        what,
        needed_bytes,
        got_bytes: got.len(),
    }
}

/// Reservation Register command fields and data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReservationRegister {
    pub rrega: u8,
    /// Ignore Existing Key: do not check CRKEY.
    pub iekey: bool,
    pub cptpl: u8,
}

/// Reservation Register data (16 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RegisterData {
    /// Current reservation key.
    pub crkey: u64,
    /// New reservation key.
    pub nrkey: u64,
}

impl ReservationRegister {
    pub fn from_command(c: &Command) -> Self {
        let v = c.cdw10();
        ReservationRegister {
            rrega: (v & 0x7) as u8,
            iekey: v & (1 << 3) != 0,
            cptpl: (v >> 30) as u8,
        }
    }
    pub fn to_command(&self, cid: u16, nsid: u32) -> Command {
        let mut c = Command::new(io::RESERVATION_REGISTER, cid, nsid);
        c.set_cdw10(
            ((self.rrega & 0x7) as u32)
                | ((self.iekey as u32) << 3)
                | (((self.cptpl & 0x3) as u32) << 30),
        );
        c
    }
}

impl RegisterData {
    pub const BYTES: usize = 16;
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::BYTES {
            return Err(short("reservation register data", Self::BYTES, b));
        }
        Ok(RegisterData {
            crkey: le64(b, 0),
            nrkey: le64(b, 8),
        })
    }
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        put64(&mut b, 0, self.crkey);
        put64(&mut b, 8, self.nrkey);
        b
    }
}

/// Reservation Acquire command fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReservationAcquire {
    pub racqa: u8,
    pub iekey: bool,
    /// Raw RTYPE; see [`ReservationType::from_u8`].
    pub rtype: u8,
}

/// Reservation Acquire data (16 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AcquireData {
    pub crkey: u64,
    /// Preempt reservation key: the registrant(s) to preempt.
    pub prkey: u64,
}

impl ReservationAcquire {
    pub fn from_command(c: &Command) -> Self {
        let v = c.cdw10();
        ReservationAcquire {
            racqa: (v & 0x7) as u8,
            iekey: v & (1 << 3) != 0,
            rtype: (v >> 8) as u8,
        }
    }
    pub fn to_command(&self, cid: u16, nsid: u32) -> Command {
        let mut c = Command::new(io::RESERVATION_ACQUIRE, cid, nsid);
        c.set_cdw10(
            ((self.racqa & 0x7) as u32) | ((self.iekey as u32) << 3) | ((self.rtype as u32) << 8),
        );
        c
    }
}

impl AcquireData {
    pub const BYTES: usize = 16;
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::BYTES {
            return Err(short("reservation acquire data", Self::BYTES, b));
        }
        Ok(AcquireData {
            crkey: le64(b, 0),
            prkey: le64(b, 8),
        })
    }
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        put64(&mut b, 0, self.crkey);
        put64(&mut b, 8, self.prkey);
        b
    }
}

/// Reservation Release command fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReservationRelease {
    pub rrela: u8,
    pub iekey: bool,
    pub rtype: u8,
}

/// Reservation Release data (8 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReleaseData {
    pub crkey: u64,
}

impl ReservationRelease {
    pub fn from_command(c: &Command) -> Self {
        let v = c.cdw10();
        ReservationRelease {
            rrela: (v & 0x7) as u8,
            iekey: v & (1 << 3) != 0,
            rtype: (v >> 8) as u8,
        }
    }
    pub fn to_command(&self, cid: u16, nsid: u32) -> Command {
        let mut c = Command::new(io::RESERVATION_RELEASE, cid, nsid);
        c.set_cdw10(
            ((self.rrela & 0x7) as u32) | ((self.iekey as u32) << 3) | ((self.rtype as u32) << 8),
        );
        c
    }
}

impl ReleaseData {
    pub const BYTES: usize = 8;
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::BYTES {
            return Err(short("reservation release data", Self::BYTES, b));
        }
        Ok(ReleaseData { crkey: le64(b, 0) })
    }
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        self.crkey.to_le_bytes()
    }
}

/// Reservation Report command fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReservationReport {
    /// Dwords to return, 0's based.
    pub numd: u32,
    /// Extended data structure (128-bit host identifiers): required on fabrics.
    pub eds: bool,
}

impl ReservationReport {
    pub fn from_command(c: &Command) -> Self {
        ReservationReport {
            numd: c.cdw10(),
            eds: c.cdw11() & 1 != 0,
        }
    }
    pub fn to_command(&self, cid: u16, nsid: u32) -> Command {
        let mut c = Command::new(io::RESERVATION_REPORT, cid, nsid);
        c.set_cdw10(self.numd);
        c.set_cdw11(self.eds as u32);
        c
    }
    /// Bytes the host asked for: (NUMD + 1) * 4.
    pub const fn len_bytes(&self) -> u64 {
        (self.numd as u64 + 1) * 4
    }
}

/// One registered controller in a reservation report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RegisteredController {
    /// Controller ID, or 0xFFFF if the host is registered but has no controller here.
    pub cntlid: u16,
    /// Bit 0: this controller's host holds the reservation.
    pub rcsts: u8,
    /// Host identifier: all 16 bytes in the extended form; only the first 8 in the
    /// 24-byte form (bytes 8..16 are then zero after decoding).
    pub hostid: [u8; 16],
    pub rkey: u64,
}

impl RegisteredController {
    pub const RCSTS_HOLDS_RESERVATION: u8 = 1 << 0;
}

/// The first fields of a reservation status data structure (enough to size the full read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReservationStatusHeader {
    /// Generation: incremented by Register (register/unregister/replace), preempt, clear.
    pub generation: u32,
    /// 0 = no reservation held, otherwise a [`ReservationType`].
    pub rtype: u8,
    /// Number of registered controllers.
    pub regctl: u16,
    /// Persist through power loss state.
    pub ptpls: bool,
}

impl ReservationStatusHeader {
    /// Bytes the decoder needs.
    pub const MIN_BYTES: usize = 10;

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::MIN_BYTES {
            return Err(short("reservation status", Self::MIN_BYTES, b));
        }
        Ok(ReservationStatusHeader {
            generation: le32(b, 0),
            rtype: b[4],
            regctl: le16(b, 5),
            ptpls: b[9] & 1 != 0,
        })
    }
}

/// The reservation status data structure returned by Reservation Report.
///
/// Header: 0..4 GEN, 4 RTYPE, 5..7 REGCTL, 9 PTPLS; 24 bytes (64 with EDS).
/// Entry (24 bytes): 0..2 CNTLID, 2 RCSTS, 8..16 HOSTID, 16..24 RKEY.
/// Extended entry (64 bytes): 0..2 CNTLID, 2 RCSTS, 8..16 RKEY, 16..32 HOSTID.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReservationStatus {
    pub generation: u32,
    pub rtype: u8,
    pub ptpls: bool,
    pub registrants: Vec<RegisteredController>,
}

impl ReservationStatus {
    pub const HEADER_BYTES: usize = 24;
    pub const ENTRY_BYTES: usize = 24;
    pub const EXT_HEADER_BYTES: usize = 64;
    pub const EXT_ENTRY_BYTES: usize = 64;

    const fn sizes(extended: bool) -> (usize, usize) {
        if extended {
            (Self::EXT_HEADER_BYTES, Self::EXT_ENTRY_BYTES)
        } else {
            (Self::HEADER_BYTES, Self::ENTRY_BYTES)
        }
    }

    pub fn encoded_len(&self, extended: bool) -> usize {
        let (h, e) = Self::sizes(extended);
        h + e * self.registrants.len()
    }

    /// Writes the structure into `out` (stops at the end of `out`; a host asking for less
    /// gets a prefix, with REGCTL still counting every registrant).
    pub fn encode(&self, extended: bool, out: &mut [u8]) {
        let (h, e) = Self::sizes(extended);
        let n = out.len().min(self.encoded_len(extended));
        let b = &mut out[..n];
        b.fill(0);
        put32(b, 0, self.generation);
        put_bytes(b, 4, &[self.rtype]);
        put16(b, 5, self.registrants.len().min(u16::MAX as usize) as u16);
        put_bytes(b, 9, &[self.ptpls as u8]);
        for (i, r) in self.registrants.iter().enumerate() {
            let o = h + e * i;
            put16(b, o, r.cntlid);
            put_bytes(b, o + 2, &[r.rcsts]);
            if extended {
                put64(b, o + 8, r.rkey);
                put_bytes(b, o + 16, &r.hostid);
            } else {
                put_bytes(b, o + 8, &r.hostid[..8]);
                put64(b, o + 16, r.rkey);
            }
        }
    }

    pub fn to_bytes(&self, extended: bool) -> Vec<u8> {
        let mut v = vec![0u8; self.encoded_len(extended)];
        self.encode(extended, &mut v);
        v
    }

    /// Decodes a complete structure: `b` must hold all REGCTL entries.
    pub fn decode(b: &[u8], extended: bool) -> Result<Self, DecodeError> {
        let hdr = ReservationStatusHeader::decode(b)?;
        let (h, e) = Self::sizes(extended);
        let need = h + e * hdr.regctl as usize;
        if b.len() < need {
            return Err(short("reservation status", need, b));
        }
        let registrants = (0..hdr.regctl as usize)
            .map(|i| {
                let o = h + e * i;
                let mut hostid = [0u8; 16];
                let rkey;
                if extended {
                    rkey = le64(b, o + 8);
                    hostid = get_array(b, o + 16);
                } else {
                    hostid[..8].copy_from_slice(&get_array::<8>(b, o + 8));
                    rkey = le64(b, o + 16);
                }
                RegisteredController {
                    cntlid: le16(b, o),
                    rcsts: b[o + 2],
                    hostid,
                    rkey,
                }
            })
            .collect();
        Ok(ReservationStatus {
            generation: hdr.generation,
            rtype: hdr.rtype,
            ptpls: hdr.ptpls,
            registrants,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn command_dwords() {
        let r = ReservationRegister {
            rrega: rrega::REPLACE,
            iekey: true,
            cptpl: cptpl::PERSIST,
        };
        let c = r.to_command(1, 1);
        assert_eq!((c.opcode(), c.cdw10()), (0x0D, 0xC000_000A));
        assert_eq!(ReservationRegister::from_command(&c), r);
        let a = ReservationAcquire {
            racqa: racqa::PREEMPT_AND_ABORT,
            iekey: false,
            rtype: 5,
        };
        let c = a.to_command(2, 1);
        assert_eq!((c.opcode(), c.cdw10()), (0x11, 0x0502));
        assert_eq!(ReservationAcquire::from_command(&c), a);
        let l = ReservationRelease {
            rrela: rrela::CLEAR,
            iekey: false,
            rtype: 0,
        };
        let c = l.to_command(3, 1);
        assert_eq!((c.opcode(), c.cdw10()), (0x15, 1));
        let rep = ReservationReport {
            numd: 15,
            eds: true,
        };
        let c = rep.to_command(4, 1);
        assert_eq!((c.opcode(), c.cdw10(), c.cdw11()), (0x0E, 15, 1));
        assert_eq!(rep.len_bytes(), 64);
    }

    #[test]
    fn data_layouts() {
        let d = RegisterData {
            crkey: 0x0102,
            nrkey: 0x0304,
        };
        assert_eq!(
            d.to_bytes(),
            [2, 1, 0, 0, 0, 0, 0, 0, 4, 3, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(RegisterData::decode(&d.to_bytes()).unwrap(), d);
        assert!(RegisterData::decode(&[0; 15]).is_err());
        let a = AcquireData { crkey: 1, prkey: 2 };
        assert_eq!(AcquireData::decode(&a.to_bytes()).unwrap(), a);
        assert_eq!(
            ReleaseData::decode(&[9, 0, 0, 0, 0, 0, 0, 0])
                .unwrap()
                .crkey,
            9
        );
    }

    fn sample() -> ReservationStatus {
        ReservationStatus {
            generation: 7,
            rtype: ReservationType::WriteExclusiveRegistrantsOnly.as_u8(),
            ptpls: true,
            registrants: vec![
                RegisteredController {
                    cntlid: 1,
                    rcsts: 1,
                    hostid: [0xA1; 16],
                    rkey: 0x1111,
                },
                RegisteredController {
                    cntlid: 0xFFFF,
                    rcsts: 0,
                    hostid: [0xB2; 16],
                    rkey: 0x2222,
                },
            ],
        }
    }

    #[test]
    fn status_layout_extended() {
        let s = sample();
        let b = s.to_bytes(true);
        assert_eq!(b.len(), 64 + 2 * 64);
        assert_eq!(&b[..10], &[7, 0, 0, 0, 3, 2, 0, 0, 0, 1]);
        assert!(b[10..64].iter().all(|&x| x == 0));
        assert_eq!(&b[64..67], &[1, 0, 1]);
        assert_eq!(&b[72..80], &[0x11, 0x11, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[80..96], &[0xA1; 16]);
        assert_eq!(&b[128..130], &[0xFF, 0xFF]);
        assert_eq!(ReservationStatus::decode(&b, true).unwrap(), s);
        assert!(ReservationStatus::decode(&b[..191], true).is_err());
        assert_eq!(ReservationStatusHeader::decode(&b).unwrap().regctl, 2);
    }

    #[test]
    fn status_layout_compact() {
        let mut s = sample();
        for r in &mut s.registrants {
            r.hostid[8..].fill(0);
        }
        let b = s.to_bytes(false);
        assert_eq!(b.len(), 24 + 2 * 24);
        assert_eq!(&b[24..27], &[1, 0, 1]);
        assert_eq!(&b[32..40], &[0xA1; 8]);
        assert_eq!(&b[40..48], &[0x11, 0x11, 0, 0, 0, 0, 0, 0]);
        assert_eq!(ReservationStatus::decode(&b, false).unwrap(), s);
    }

    #[test]
    fn access_table() {
        use ReservationType::*;
        // (type, write, registrant, holder) -> allowed
        assert!(WriteExclusive.allows(false, false, false));
        assert!(!WriteExclusive.allows(true, true, false));
        assert!(WriteExclusive.allows(true, true, true));
        assert!(!ExclusiveAccess.allows(false, true, false));
        assert!(WriteExclusiveRegistrantsOnly.allows(true, true, false));
        assert!(!WriteExclusiveRegistrantsOnly.allows(true, false, false));
        assert!(WriteExclusiveRegistrantsOnly.allows(false, false, false));
        assert!(!ExclusiveAccessRegistrantsOnly.allows(false, false, false));
        assert!(ExclusiveAccessRegistrantsOnly.allows(false, true, false));
        assert!(WriteExclusiveAllRegistrants.allows(true, true, false));
        assert!(!ExclusiveAccessAllRegistrants.allows(false, false, false));
        assert!(ExclusiveAccessAllRegistrants.all_registrants());
        assert_eq!(ReservationType::from_u8(0), None);
        assert_eq!(ReservationType::from_u8(7), None);
        for v in 1..=6 {
            assert_eq!(ReservationType::from_u8(v).map(|t| t.as_u8()), Some(v));
        }
    }

    fn any_reg() -> impl Strategy<Value = RegisteredController> {
        (any::<u16>(), any::<u8>(), any::<[u8; 16]>(), any::<u64>()).prop_map(
            |(cntlid, rcsts, hostid, rkey)| RegisteredController {
                cntlid,
                rcsts,
                hostid,
                rkey,
            },
        )
    }

    proptest! {
        #[test]
        fn roundtrip(generation: u32, rtype: u8, ptpls: bool, registrants in proptest::collection::vec(any_reg(), 0..8)) {
            let s = ReservationStatus { generation, rtype, ptpls, registrants };
            prop_assert_eq!(ReservationStatus::decode(&s.to_bytes(true), true).unwrap(), s.clone());
            let mut c = s;
            for r in &mut c.registrants { r.hostid[8..].fill(0); }
            prop_assert_eq!(ReservationStatus::decode(&c.to_bytes(false), false).unwrap(), c);
        }
        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..600), ext: bool) {
            if let Ok(s) = ReservationStatus::decode(&b, ext) {
                prop_assert_eq!(ReservationStatus::decode(&s.to_bytes(ext), ext).unwrap(), s);
            }
            let _ = RegisterData::decode(&b);
            let _ = AcquireData::decode(&b);
            let _ = ReleaseData::decode(&b);
        }
        #[test]
        fn command_roundtrips(a in 0u8..8, iekey: bool, cp in 0u8..4, rtype: u8, numd: u32, eds: bool, cid: u16, nsid: u32) {
            let r = ReservationRegister { rrega: a, iekey, cptpl: cp };
            prop_assert_eq!(ReservationRegister::from_command(&r.to_command(cid, nsid)), r);
            let q = ReservationAcquire { racqa: a, iekey, rtype };
            prop_assert_eq!(ReservationAcquire::from_command(&q.to_command(cid, nsid)), q);
            let l = ReservationRelease { rrela: a, iekey, rtype };
            prop_assert_eq!(ReservationRelease::from_command(&l.to_command(cid, nsid)), l);
            let p = ReservationReport { numd, eds };
            prop_assert_eq!(ReservationReport::from_command(&p.to_command(cid, nsid)), p);
        }
    }
}
