//! The Namespace Identification Descriptor list (CNS 0x03), 4096 bytes.
//!
//! Each descriptor: 0 NIDT (type), 1 NIDL (length of NID), 2..4 reserved, 4.. NID.
//! Types: 1 EUI-64 (8 bytes), 2 NGUID (16), 3 UUID (16), 4 CSI (1). The list ends at the
//! first descriptor with NIDL 0 (or type 0), or at the end of the 4096 bytes.

use crate::error::DecodeError;

use super::IDENTIFY_DATA_BYTES;

/// Descriptor type codes (NIDT).
pub mod nidt {
    pub const EUI64: u8 = 0x01;
    pub const NGUID: u8 = 0x02;
    pub const UUID: u8 = 0x03;
    pub const CSI: u8 = 0x04;
}

/// Header bytes before each NID.
const DESC_HEADER_BYTES: usize = 4;

/// One namespace identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NsIdDescriptor {
    Eui64([u8; 8]),
    Nguid([u8; 16]),
    Uuid([u8; 16]),
    /// Command set identifier, see [`super::csi`].
    Csi(u8),
}

impl NsIdDescriptor {
    pub const fn nidt(&self) -> u8 {
        match self {
            NsIdDescriptor::Eui64(_) => nidt::EUI64,
            NsIdDescriptor::Nguid(_) => nidt::NGUID,
            NsIdDescriptor::Uuid(_) => nidt::UUID,
            NsIdDescriptor::Csi(_) => nidt::CSI,
        }
    }
    fn nid(&self) -> &[u8] {
        match self {
            NsIdDescriptor::Eui64(v) => v,
            NsIdDescriptor::Nguid(v) | NsIdDescriptor::Uuid(v) => v,
            NsIdDescriptor::Csi(v) => std::slice::from_ref(v),
        }
    }
    /// Bytes this descriptor takes in the list.
    pub fn encoded_len(&self) -> usize {
        DESC_HEADER_BYTES + self.nid().len()
    }
}

/// A Namespace Identification Descriptor list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NsIdDescriptorList {
    pub descriptors: Vec<NsIdDescriptor>,
}

impl NsIdDescriptorList {
    pub const BYTES: usize = IDENTIFY_DATA_BYTES;

    /// Writes the list into `out` (zero-filled after the last descriptor). Descriptors that
    /// do not fit are left out.
    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(Self::BYTES);
        let b = &mut out[..n];
        b.fill(0);
        let mut o = 0;
        for d in &self.descriptors {
            let nid = d.nid();
            let Some(dst) = b.get_mut(o..o + DESC_HEADER_BYTES + nid.len()) else {
                break;
            };
            dst[0] = d.nidt();
            dst[1] = nid.len() as u8;
            dst[DESC_HEADER_BYTES..].copy_from_slice(nid);
            o += dst.len();
        }
    }

    pub fn to_bytes(&self) -> Box<[u8; IDENTIFY_DATA_BYTES]> {
        let mut b = Box::new([0u8; IDENTIFY_DATA_BYTES]);
        self.encode(&mut b[..]);
        b
    }

    /// The namespace's command set (the first CSI descriptor), which a host needs to pick
    /// the I/O commands it sends. `None` if the list has none (a pre-2.0 controller: NVM).
    pub fn csi(&self) -> Option<u8> {
        self.descriptors.iter().find_map(|d| match d {
            NsIdDescriptor::Csi(c) => Some(*c),
            _ => None,
        })
    }

    /// Decodes descriptors up to the terminator or the end of `b` (which may be shorter
    /// than 4096 bytes). Unknown types are skipped using their NIDL; a known type with the
    /// wrong NIDL or a descriptor running past the end is an error.
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        let b = &b[..b.len().min(Self::BYTES)];
        let mut descriptors = Vec::new();
        let mut o = 0;
        while o + DESC_HEADER_BYTES <= b.len() {
            let (t, len) = (b[o], b[o + 1] as usize);
            if t == 0 || len == 0 {
                break;
            }
            let nid = b
                .get(o + DESC_HEADER_BYTES..o + DESC_HEADER_BYTES + len)
                .ok_or(DecodeError::InvalidField {
                    what: "namespace identification descriptor",
                    offset: o + 1,
                    reason: "NIDL runs past the end of the list",
                })?;
            let wrong_len = DecodeError::InvalidField {
                what: "namespace identification descriptor",
                offset: o + 1,
                reason: "NIDL does not match the type",
            };
            let d = match t {
                nidt::EUI64 => Some(NsIdDescriptor::Eui64(
                    nid.try_into().map_err(|_| wrong_len)?,
                )),
                nidt::NGUID => Some(NsIdDescriptor::Nguid(
                    nid.try_into().map_err(|_| wrong_len)?,
                )),
                nidt::UUID => Some(NsIdDescriptor::Uuid(nid.try_into().map_err(|_| wrong_len)?)),
                nidt::CSI => match nid {
                    [v] => Some(NsIdDescriptor::Csi(*v)),
                    _ => return Err(wrong_len),
                },
                _ => None,
            };
            descriptors.extend(d);
            o += DESC_HEADER_BYTES + len;
        }
        Ok(NsIdDescriptorList { descriptors })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout() {
        let l = NsIdDescriptorList {
            descriptors: vec![
                NsIdDescriptor::Eui64([1; 8]),
                NsIdDescriptor::Nguid([2; 16]),
                NsIdDescriptor::Uuid([3; 16]),
                NsIdDescriptor::Csi(0),
            ],
        };
        let b = l.to_bytes();
        assert_eq!(&b[0..4], &[1, 8, 0, 0]);
        assert_eq!(&b[4..12], &[1; 8]);
        assert_eq!(&b[12..16], &[2, 16, 0, 0]);
        assert_eq!(&b[16..32], &[2; 16]);
        assert_eq!(&b[32..36], &[3, 16, 0, 0]);
        assert_eq!(&b[36..52], &[3; 16]);
        assert_eq!(&b[52..57], &[4, 1, 0, 0, 0]);
        assert!(b[57..].iter().all(|&x| x == 0));
        assert_eq!(NsIdDescriptorList::decode(&b[..]).unwrap(), l);
        assert_eq!(l.csi(), Some(0));
    }

    #[test]
    fn kv_namespace_csi() {
        // NGUID then CSI 01h (Key Value), as a target lists a KV namespace.
        let l = NsIdDescriptorList {
            descriptors: vec![NsIdDescriptor::Nguid([7; 16]), NsIdDescriptor::Csi(1)],
        };
        let b = l.to_bytes();
        assert_eq!(&b[20..25], &[4, 1, 0, 0, 1]);
        assert_eq!(NsIdDescriptorList::decode(&b[..]).unwrap().csi(), Some(1));
        assert_eq!(NsIdDescriptorList::default().csi(), None);
    }

    #[test]
    fn unknown_types_are_skipped_and_bad_lengths_rejected() {
        let mut b = [0u8; 64];
        b[..6].copy_from_slice(&[0x09, 2, 0, 0, 0xAA, 0xBB]);
        b[6..11].copy_from_slice(&[4, 1, 0, 0, 2]);
        let l = NsIdDescriptorList::decode(&b).unwrap();
        assert_eq!(l.descriptors, vec![NsIdDescriptor::Csi(2)]);
        let bad = [1u8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(NsIdDescriptorList::decode(&bad).is_err());
        let past = [2u8, 16, 0, 0, 1];
        assert!(NsIdDescriptorList::decode(&past).is_err());
    }

    fn any_desc() -> impl Strategy<Value = NsIdDescriptor> {
        prop_oneof![
            any::<[u8; 8]>().prop_map(NsIdDescriptor::Eui64),
            any::<[u8; 16]>().prop_map(NsIdDescriptor::Nguid),
            any::<[u8; 16]>().prop_map(NsIdDescriptor::Uuid),
            any::<u8>().prop_map(NsIdDescriptor::Csi),
        ]
    }

    proptest! {
        #[test]
        fn roundtrip(descriptors in proptest::collection::vec(any_desc(), 0..40)) {
            let l = NsIdDescriptorList { descriptors };
            prop_assert_eq!(NsIdDescriptorList::decode(&l.to_bytes()[..]).unwrap(), l);
        }
        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = NsIdDescriptorList::decode(&b);
        }
    }
}
