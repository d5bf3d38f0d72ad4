//! On-disk encoding of one key's record in the redb `kv` table:
//! `[version u8 = 1][mod_revision u64 LE][create_revision u64 LE][lease i64 LE, 0 = none][value]`.

use crate::error::MetaError;
use crate::types::{KeyValue, LeaseId, Revision};

const RECORD_VERSION: u8 = 1;
const HEADER_BYTES: usize = 1 + 8 + 8 + 8;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Record {
    pub mod_revision: Revision,
    pub create_revision: Revision,
    pub lease: Option<LeaseId>,
    pub value: Vec<u8>,
}

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + self.value.len());
        out.push(RECORD_VERSION);
        out.extend_from_slice(&self.mod_revision.to_le_bytes());
        out.extend_from_slice(&self.create_revision.to_le_bytes());
        out.extend_from_slice(&self.lease.map_or(0, |l| l.0).to_le_bytes());
        out.extend_from_slice(&self.value);
        out
    }

    pub fn decode(key: &str, bytes: &[u8]) -> Result<Self, MetaError> {
        let corrupt = |what: &str| MetaError::Corrupt(format!("record of {key:?}: {what}"));
        let (header, value) = bytes
            .split_at_checked(HEADER_BYTES)
            .ok_or_else(|| corrupt("shorter than its header"))?;
        let (version, rest) = header.split_first().ok_or_else(|| corrupt("empty"))?;
        if *version != RECORD_VERSION {
            return Err(corrupt(&format!("unknown record version {version}")));
        }
        let word = |i: usize| -> Result<[u8; 8], MetaError> {
            rest.get(i * 8..i * 8 + 8)
                .and_then(|s| s.try_into().ok())
                .ok_or_else(|| corrupt("truncated header"))
        };
        let lease = i64::from_le_bytes(word(2)?);
        Ok(Record {
            mod_revision: u64::from_le_bytes(word(0)?),
            create_revision: u64::from_le_bytes(word(1)?),
            lease: (lease != 0).then_some(LeaseId(lease)),
            value: value.to_vec(),
        })
    }

    pub fn into_kv(self, key: &str) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: self.value,
            mod_revision: self.mod_revision,
            create_revision: self.create_revision,
            lease: self.lease,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_fixed_vector() {
        let rec = Record {
            mod_revision: 7,
            create_revision: 3,
            lease: Some(LeaseId(2)),
            value: b"hi".to_vec(),
        };
        let bytes = rec.encode();
        let mut expected = vec![1u8];
        expected.extend_from_slice(&[7, 0, 0, 0, 0, 0, 0, 0]);
        expected.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0]);
        expected.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 0]);
        expected.extend_from_slice(b"hi");
        assert_eq!(bytes, expected);
        assert_eq!(Record::decode("k", &bytes).expect("decodes"), rec);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for len in 0..HEADER_BYTES {
            assert!(Record::decode("k", &vec![1u8; len]).is_err());
        }
        let mut bytes = vec![9u8; HEADER_BYTES];
        bytes[0] = 2;
        assert!(Record::decode("k", &bytes).is_err());
    }
}
