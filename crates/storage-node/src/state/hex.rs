//! Lower-case hex encodings of fixed-size identifiers for the state file's JSON body.

use serde::{Deserialize, Deserializer, Serializer, de::Error};

pub fn encode(bytes: &[u8]) -> String {
    ::hex::encode(bytes)
}

/// Decodes exactly `N` bytes from `2 * N` hex digits (either case).
pub fn decode<const N: usize>(s: &str) -> Result<[u8; N], String> {
    if s.len() != 2 * N {
        return Err(format!("expected {} hex digits, got {}", 2 * N, s.len()));
    }
    let mut out = [0u8; N];
    ::hex::decode_to_slice(s, &mut out).map_err(|e| format!("{s:?}: {e}"))?;
    Ok(out)
}

macro_rules! fixed_bytes {
    ($name:ident, $n:literal) => {
        pub mod $name {
            use super::*;
            pub fn serialize<S: Serializer>(v: &[u8; $n], s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&encode(v))
            }
            pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; $n], D::Error> {
                let s = String::deserialize(d)?;
                decode::<$n>(&s).map_err(D::Error::custom)
            }
        }
    };
}

fixed_bytes!(bytes16, 16);
fixed_bytes!(bytes8, 8);

/// A 128-bit host identifier as 32 hex digits, most significant first (as `nvme` prints).
pub mod u128_hex {
    use super::*;
    pub fn serialize<S: Serializer>(v: &u128, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&encode(&v.to_be_bytes()))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u128, D::Error> {
        let s = String::deserialize(d)?;
        decode::<16>(&s)
            .map(u128::from_be_bytes)
            .map_err(D::Error::custom)
    }
}

/// As [`u128_hex`], or `null`.
pub mod opt_u128 {
    use super::*;
    pub fn serialize<S: Serializer>(v: &Option<u128>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_str(&encode(&v.to_be_bytes())),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u128>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(s) => decode::<16>(&s)
                .map(|b| Some(u128::from_be_bytes(b)))
                .map_err(D::Error::custom),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_errors() {
        let b = [0x00, 0x1f, 0xa0, 0xff];
        assert_eq!(encode(&b), "001fa0ff");
        assert_eq!(decode::<4>("001fa0ff"), Ok(b));
        assert_eq!(decode::<4>("001FA0FF"), Ok(b));
        assert!(decode::<4>("001fa0f").is_err());
        assert!(decode::<4>("001fa0fg").is_err());
        assert!(decode::<4>("é1fa0f").is_err());
    }
}
