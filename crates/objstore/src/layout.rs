//! How an object's bytes map onto shards: pieces, stripes, shard lengths. A piece is
//! one run of stripes under one id (a whole object, or one multipart part), all coded
//! k+m and placed on the same k+m stores (`stores[i]` holds shard i of every stripe).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::format::{PieceId, ShardAddress};

/// k+m: data and parity shards per stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    pub data: u8,
    pub parity: u8,
}

impl Geometry {
    pub fn total(&self) -> usize {
        usize::from(self.data) + usize::from(self.parity)
    }
}

impl fmt::Display for Geometry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{}", self.data, self.parity)
    }
}

impl FromStr for Geometry {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (k, m) = s
            .split_once('+')
            .ok_or_else(|| format!("{s:?} is not K+M (e.g. 2+1, 4+2)"))?;
        let parse = |v: &str, what: &str, max: usize| -> Result<u8, String> {
            let n: usize = v
                .trim()
                .parse()
                .map_err(|_| format!("{s:?}: {what} {v:?} is not a number"))?;
            if n == 0 || n > max {
                return Err(format!("{s:?}: {what} must be 1..={max}"));
            }
            Ok(n as u8)
        };
        Ok(Geometry {
            data: parse(k, "data shards", erasure::MAX_DATA_SHARDS)?,
            parity: parse(m, "parity shards", erasure::MAX_PARITY_SHARDS)?,
        })
    }
}

/// One erasure-coded run of stripes: what the index records for it (its shard map).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Piece {
    #[serde(with = "hex_id")]
    pub id: PieceId,
    /// Object bytes in this piece.
    pub size: u64,
    pub geometry: Geometry,
    /// Payload bytes of each shard of a full stripe.
    pub shard_bytes: u32,
    /// Store ids, shard index order (k data, then m parity).
    pub stores: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad shard map for piece {piece}: {reason}")]
pub struct LayoutError {
    pub piece: String,
    pub reason: String,
}

impl Piece {
    /// Checks what a decoder relies on (a shard map read from the index could be damaged).
    pub fn validate(&self) -> Result<(), LayoutError> {
        let bad = |reason: String| LayoutError {
            piece: hex::encode(self.id),
            reason,
        };
        if self.geometry.data == 0 || self.geometry.parity == 0 {
            return Err(bad(format!("geometry {}", self.geometry)));
        }
        if self.stores.len() != self.geometry.total() {
            return Err(bad(format!(
                "{} stores for {} shards",
                self.stores.len(),
                self.geometry.total()
            )));
        }
        if self.shard_bytes == 0 || self.shard_bytes as usize > crate::format::MAX_PAYLOAD_BYTES {
            return Err(bad(format!("shard size {}", self.shard_bytes)));
        }
        if self.size > 0 && self.stripes_u64() > u64::from(u32::MAX) {
            return Err(bad(format!("{} bytes is too many stripes", self.size)));
        }
        Ok(())
    }

    pub fn k(&self) -> usize {
        usize::from(self.geometry.data)
    }

    pub fn m(&self) -> usize {
        usize::from(self.geometry.parity)
    }

    /// Object bytes in a full stripe.
    pub fn stripe_data_bytes(&self) -> u64 {
        self.k() as u64 * u64::from(self.shard_bytes)
    }

    fn stripes_u64(&self) -> u64 {
        self.size.div_ceil(self.stripe_data_bytes())
    }

    pub fn stripes(&self) -> u32 {
        // validate() bounds this.
        u32::try_from(self.stripes_u64()).unwrap_or(u32::MAX)
    }

    /// Object bytes in stripe `s`.
    pub fn stripe_len(&self, s: u32) -> usize {
        let start = u64::from(s) * self.stripe_data_bytes();
        self.size
            .saturating_sub(start)
            .min(self.stripe_data_bytes()) as usize
    }

    /// Payload bytes of every shard of stripe `s` (data shards are zero-padded).
    pub fn payload_len(&self, s: u32) -> usize {
        self.stripe_len(s).div_ceil(self.k())
    }

    pub fn address(&self, stripe: u32, shard: usize) -> ShardAddress {
        ShardAddress {
            piece: self.id,
            stripe,
            shard: shard as u8,
        }
    }
}

mod hex_id {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(id: &[u8; 16], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(id))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 16], D::Error> {
        let text = String::deserialize(d)?;
        let mut id = [0u8; 16];
        hex::decode_to_slice(&text, &mut id).map_err(serde::de::Error::custom)?;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(size: u64) -> Piece {
        Piece {
            id: [1; 16],
            size,
            geometry: Geometry { data: 2, parity: 1 },
            shard_bytes: 10,
            stores: vec!["a".into(), "b".into(), "c".into()],
        }
    }

    #[test]
    fn stripe_math() {
        let p = piece(45);
        assert_eq!(p.stripes(), 3);
        assert_eq!(p.stripe_len(0), 20);
        assert_eq!(p.stripe_len(2), 5);
        assert_eq!(p.payload_len(2), 3);
        assert_eq!(piece(40).stripes(), 2);
        assert_eq!(piece(0).stripes(), 0);
    }

    #[test]
    fn geometry_parses() {
        assert_eq!("4+2".parse(), Ok(Geometry { data: 4, parity: 2 }));
        assert!("4".parse::<Geometry>().is_err());
        assert!("0+1".parse::<Geometry>().is_err());
        assert!("2+9".parse::<Geometry>().is_err());
    }

    #[test]
    fn shard_map_round_trips_as_json() {
        let p = piece(45);
        let json = serde_json::to_string(&p).expect("json");
        assert!(json.contains("01010101"), "{json}");
        assert_eq!(serde_json::from_str::<Piece>(&json).expect("parse"), p);
    }
}
