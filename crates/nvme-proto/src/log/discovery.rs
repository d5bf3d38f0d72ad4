//! Discovery log page (LID 0x70), NVMe-oF 1.1 "Discovery Log Page";
//! Linux `struct nvmf_disc_rsp_page_hdr`, `struct nvmf_disc_rsp_page_entry`.
//!
//! Header (1024 bytes): 0..8 GENCTR, 8..16 NUMREC, 16..18 RECFMT. Then NUMREC entries of
//! 1024 bytes: 0 TRTYPE, 1 ADRFAM, 2 SUBTYPE, 3 TREQ, 4..6 PORTID, 6..8 CNTLID,
//! 8..10 ASQSZ, 10..12 EFLAGS, 32..64 TRSVCID, 256..512 SUBNQN, 512..768 TRADDR,
//! 768..1024 TSAS (TCP: byte 0 SECTYPE).

use crate::bytes::{
    floor_char_boundary, get_ascii, get_str_nul, le16, le64, put_bytes, put_str_nul, put16, put64,
};
use crate::error::DecodeError;

/// Transport types (TRTYPE).
pub mod trtype {
    pub const RDMA: u8 = 1;
    pub const FC: u8 = 2;
    pub const TCP: u8 = 3;
    pub const LOOP: u8 = 254;
}

/// Address families (ADRFAM).
pub mod adrfam {
    pub const IPV4: u8 = 1;
    pub const IPV6: u8 = 2;
    pub const IB: u8 = 3;
    pub const FC: u8 = 4;
}

/// Subsystem types (SUBTYPE).
pub mod subtype {
    /// A referral to another discovery service.
    pub const REFERRAL: u8 = 1;
    /// An NVM subsystem.
    pub const NVME: u8 = 2;
    /// The discovery subsystem being queried.
    pub const CURRENT_DISCOVERY: u8 = 3;
}

/// Transport requirements (TREQ).
pub mod treq {
    pub const SECURE_CHANNEL_NOT_SPECIFIED: u8 = 0;
    pub const SECURE_CHANNEL_REQUIRED: u8 = 1;
    pub const SECURE_CHANNEL_NOT_REQUIRED: u8 = 2;
    /// The controller supports disabling SQ flow control.
    pub const DISABLE_SQFLOW: u8 = 1 << 2;
}

/// Entry flags (EFLAGS).
pub mod eflags {
    /// Duplicate returned information.
    pub const DUPRETINFO: u16 = 1 << 0;
    /// Explicit persistent connection support for discovery.
    pub const EPCSD: u16 = 1 << 1;
    /// No CDC connectivity (TP 8010): the subsystem is not reachable through a central
    /// discovery controller.
    pub const NCC: u16 = 1 << 2;
}

/// TCP security types (TSAS byte 0).
pub mod sectype {
    pub const NONE: u8 = 0;
    pub const TLS12: u8 = 1;
    pub const TLS13: u8 = 2;
}

/// The discovery log page header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DiscoveryLogHeader {
    /// Generation counter: changes whenever the entries change.
    pub genctr: u64,
    /// Number of records.
    pub numrec: u64,
    /// Record format, 0.
    pub recfmt: u16,
}

impl DiscoveryLogHeader {
    pub const BYTES: usize = 1024;
    /// Bytes the decoder needs (the defined fields); hosts may read just these.
    pub const MIN_BYTES: usize = 18;

    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(Self::BYTES);
        out[..n].fill(0);
        put64(out, 0, self.genctr);
        put64(out, 8, self.numrec);
        put16(out, 16, self.recfmt);
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::MIN_BYTES {
            return Err(DecodeError::Short {
                what: "discovery log header",
                needed_bytes: Self::MIN_BYTES,
                got_bytes: b.len(),
            });
        }
        Ok(DiscoveryLogHeader {
            genctr: le64(b, 0),
            numrec: le64(b, 8),
            recfmt: le16(b, 16),
        })
    }
}

/// One discovery log entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DiscoveryLogEntry {
    pub trtype: u8,
    pub adrfam: u8,
    pub subtype: u8,
    pub treq: u8,
    pub portid: u16,
    /// 0xFFFF: the subsystem uses the dynamic controller model.
    pub cntlid: u16,
    /// Maximum admin submission queue size.
    pub asqsz: u16,
    pub eflags: u16,
    /// Transport service identifier: the TCP port as ASCII, e.g. "4420".
    pub trsvcid: String,
    pub subnqn: String,
    /// Transport address: the IP address as ASCII.
    pub traddr: String,
    /// TCP security type (TSAS byte 0).
    pub sectype: u8,
}

impl DiscoveryLogEntry {
    pub const BYTES: usize = 1024;

    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(Self::BYTES);
        let b = &mut out[..n];
        b.fill(0);
        put_bytes(b, 0, &[self.trtype, self.adrfam, self.subtype, self.treq]);
        put16(b, 4, self.portid);
        put16(b, 6, self.cntlid);
        put16(b, 8, self.asqsz);
        put16(b, 10, self.eflags);
        // ASCII, NUL padded as Linux nvmet writes them (hosts also strip trailing spaces).
        put_ascii_nul_padded(b, 32, 32, &self.trsvcid);
        put_str_nul(b, 256, 256, &self.subnqn);
        put_ascii_nul_padded(b, 512, 256, &self.traddr);
        put_bytes(b, 768, &[self.sectype]);
    }

    pub fn to_bytes(&self) -> Box<[u8; Self::BYTES]> {
        let mut b = Box::new([0u8; Self::BYTES]);
        self.encode(&mut b[..]);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::BYTES {
            return Err(DecodeError::Short {
                what: "discovery log entry",
                needed_bytes: Self::BYTES,
                got_bytes: b.len(),
            });
        }
        Ok(DiscoveryLogEntry {
            trtype: b[0],
            adrfam: b[1],
            subtype: b[2],
            treq: b[3],
            portid: le16(b, 4),
            cntlid: le16(b, 6),
            asqsz: le16(b, 8),
            eflags: le16(b, 10),
            trsvcid: get_ascii(b, 32, 32),
            subnqn: get_str_nul(b, 256, 256),
            traddr: get_ascii(b, 512, 256),
            sectype: b[768],
        })
    }
}

/// Copies `s` into a zeroed field of `len` bytes (no terminator needed when full).
fn put_ascii_nul_padded(b: &mut [u8], off: usize, len: usize, s: &str) {
    if let Some(d) = b.get_mut(off..off + len) {
        d.fill(0);
        let n = floor_char_boundary(s, len);
        d[..n].copy_from_slice(&s.as_bytes()[..n]);
    }
}

/// A whole discovery log page: header and entries (NUMREC is the number of entries).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DiscoveryLog {
    pub genctr: u64,
    pub recfmt: u16,
    pub entries: Vec<DiscoveryLogEntry>,
}

impl DiscoveryLog {
    pub fn encoded_len(&self) -> usize {
        DiscoveryLogHeader::BYTES + self.entries.len() * DiscoveryLogEntry::BYTES
    }

    pub fn header(&self) -> DiscoveryLogHeader {
        DiscoveryLogHeader {
            genctr: self.genctr,
            numrec: self.entries.len() as u64,
            recfmt: self.recfmt,
        }
    }

    /// Writes the page into `out` (stops at the end of `out`).
    pub fn encode(&self, out: &mut [u8]) {
        self.header().encode(out);
        let rest = out.get_mut(DiscoveryLogHeader::BYTES..).unwrap_or_default();
        for (e, chunk) in self
            .entries
            .iter()
            .zip(rest.chunks_mut(DiscoveryLogEntry::BYTES))
        {
            e.encode(chunk);
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.encoded_len()];
        self.encode(&mut v);
        v
    }

    /// Decodes a whole page: the header and NUMREC entries, which `b` must hold.
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let h = DiscoveryLogHeader::decode(b)?;
        let need = usize::try_from(h.numrec)
            .ok()
            .and_then(|n| n.checked_mul(DiscoveryLogEntry::BYTES))
            .and_then(|n| n.checked_add(DiscoveryLogHeader::BYTES))
            .ok_or(DecodeError::InvalidField {
                what: "discovery log header",
                offset: 8,
                reason: "NUMREC too large",
            })?;
        if b.len() < need {
            return Err(DecodeError::Short {
                what: "discovery log",
                needed_bytes: need,
                got_bytes: b.len(),
            });
        }
        let entries = b[DiscoveryLogHeader::BYTES..need]
            .chunks_exact(DiscoveryLogEntry::BYTES)
            .map(DiscoveryLogEntry::decode)
            .collect::<Result<_, _>>()?;
        Ok(DiscoveryLog {
            genctr: h.genctr,
            recfmt: h.recfmt,
            entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabrics::DISCOVERY_NQN;
    use proptest::prelude::*;

    fn tcp_entry(subtype: u8, nqn: &str) -> DiscoveryLogEntry {
        DiscoveryLogEntry {
            trtype: trtype::TCP,
            adrfam: adrfam::IPV4,
            subtype,
            treq: treq::SECURE_CHANNEL_NOT_REQUIRED,
            portid: 1,
            cntlid: 0xFFFF,
            asqsz: 32,
            eflags: 0,
            trsvcid: "4420".into(),
            subnqn: nqn.into(),
            traddr: "127.0.0.1".into(),
            sectype: sectype::NONE,
        }
    }

    #[test]
    fn layout() {
        let l = DiscoveryLog {
            genctr: 5,
            recfmt: 0,
            entries: vec![
                tcp_entry(subtype::CURRENT_DISCOVERY, DISCOVERY_NQN),
                tcp_entry(subtype::NVME, "nqn.2026-01.io.ferrobay:n1:d0"),
            ],
        };
        let b = l.to_bytes();
        assert_eq!(b.len(), 3 * 1024);
        assert_eq!(
            &b[..18],
            &[5, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        let e = &b[2048..3072];
        assert_eq!(&e[..12], &[3, 1, 2, 2, 1, 0, 0xFF, 0xFF, 32, 0, 0, 0]);
        assert_eq!(&e[32..37], b"4420\0");
        assert_eq!(&e[256..260], b"nqn.");
        assert_eq!(&e[512..522], b"127.0.0.1\0");
        assert_eq!(e[768], 0);
        assert_eq!(DiscoveryLog::decode(&b).unwrap(), l);
        let h = DiscoveryLogHeader::decode(&b[..20]).unwrap();
        assert_eq!((h.genctr, h.numrec), (5, 2));
        assert!(DiscoveryLog::decode(&b[..3071]).is_err());
    }

    #[test]
    fn space_padded_fields_decode() {
        // Some targets pad TRSVCID/TRADDR with spaces.
        let mut e = [0u8; 1024];
        e[32..64].fill(b' ');
        e[32..36].copy_from_slice(b"8009");
        e[512..768].fill(b' ');
        e[512..515].copy_from_slice(b"::1");
        let d = DiscoveryLogEntry::decode(&e).unwrap();
        assert_eq!((d.trsvcid.as_str(), d.traddr.as_str()), ("8009", "::1"));
    }

    #[test]
    fn huge_numrec() {
        let mut b = [0u8; 1024];
        b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(DiscoveryLog::decode(&b).is_err());
    }

    fn any_entry() -> impl Strategy<Value = DiscoveryLogEntry> {
        (
            any::<[u8; 4]>(),
            any::<[u16; 4]>(),
            "[0-9]{0,32}",
            "[^\0]{0,60}",
            "[!-~]{0,64}",
            any::<u8>(),
        )
            .prop_map(
                |(a, w, trsvcid, subnqn, traddr, sectype)| DiscoveryLogEntry {
                    trtype: a[0],
                    adrfam: a[1],
                    subtype: a[2],
                    treq: a[3],
                    portid: w[0],
                    cntlid: w[1],
                    asqsz: w[2],
                    eflags: w[3],
                    trsvcid,
                    subnqn,
                    traddr,
                    sectype,
                },
            )
    }

    proptest! {
        #[test]
        fn roundtrip(genctr: u64, recfmt: u16, entries in proptest::collection::vec(any_entry(), 0..4)) {
            let l = DiscoveryLog { genctr, recfmt, entries };
            prop_assert_eq!(DiscoveryLog::decode(&l.to_bytes()).unwrap(), l);
        }
        #[test]
        fn entry_stable(b in proptest::collection::vec(any::<u8>(), 1024)) {
            let e = DiscoveryLogEntry::decode(&b).unwrap();
            prop_assert_eq!(DiscoveryLogEntry::decode(&e.to_bytes()[..]).unwrap(), e);
        }
        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..3000)) {
            let _ = DiscoveryLog::decode(&b);
            let _ = DiscoveryLogHeader::decode(&b);
        }
    }
}
