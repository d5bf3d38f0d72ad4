//! The persistence seam: a plain snapshot of a namespace's reservation state and the store
//! that keeps it across restarts when Persist Through Power Loss (PTPL) is on.

use std::io;

use serde::{Deserialize, Serialize};

/// The whole reservation state of one namespace, as plain data.
///
/// JSON: host IDs are 32 lower-case hex digits, most significant byte (byte 0 of the
/// Connect HOSTID field) first, i.e. `u128::from_be_bytes(hostid)` printed in hex.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationSnapshot {
    /// PRGEN as the Reservation Report shows it.
    pub generation: u32,
    /// Persist Through Power Loss. When false, nothing survives a restart: a snapshot with
    /// `ptpl == false` restores an empty state.
    pub ptpl: bool,
    /// Reservation type held (NVMe RTYPE 1..=6), 0 when none.
    pub rtype: u8,
    /// The holder's host ID for types 1..=4; `None` when nothing is held and for the
    /// all-registrants types 5 and 6 (there every registrant holds the reservation).
    #[serde(with = "hex_opt16")]
    pub holder: Option<[u8; 16]>,
    /// Registered hosts in registration order (the order Reservation Report lists them).
    pub registrants: Vec<RegistrantSnapshot>,
}

/// One registered host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistrantSnapshot {
    #[serde(with = "hex16")]
    pub hostid: [u8; 16],
    /// Reservation key.
    pub key: u64,
}

/// Where a namespace's reservation state goes when PTPL is on.
///
/// `save` is called synchronously, with the new state, before the command that changed it
/// completes; the change takes effect only if `save` returns `Ok` (on `Err` the command
/// fails with Internal Error and the state stays as it was). It must be durable when it
/// returns (fsync). It is called with the namespace's reservation command lock held: it
/// may call [`super::ReservationState::snapshot`] but no command of the same namespace.
///
/// Any `Fn(&ReservationSnapshot) -> io::Result<()> + Send + Sync` closure is a store.
pub trait ReservationStore: Send + Sync {
    fn save(&self, snapshot: &ReservationSnapshot) -> Result<(), io::Error>;
}

impl<F> ReservationStore for F
where
    F: Fn(&ReservationSnapshot) -> Result<(), io::Error> + Send + Sync,
{
    fn save(&self, snapshot: &ReservationSnapshot) -> Result<(), io::Error> {
        self(snapshot)
    }
}

fn to_hex(b: &[u8; 16]) -> String {
    hex::encode(b)
}

fn from_hex(s: &str) -> Result<[u8; 16], String> {
    <[u8; 16] as hex::FromHex>::from_hex(s).map_err(|e| format!("host ID {s:?}: {e}"))
}

mod hex16 {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(v: &[u8; 16], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::to_hex(v))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 16], D::Error> {
        super::from_hex(&String::deserialize(d)?).map_err(D::Error::custom)
    }
}

mod hex_opt16 {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(v: &Option<[u8; 16]>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_str(&super::to_hex(v)),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<[u8; 16]>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|s| super::from_hex(&s).map_err(D::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_layout() {
        let mut h = [0u8; 16];
        h[0] = 0xAB;
        h[15] = 0x01;
        let s = ReservationSnapshot {
            generation: 3,
            ptpl: true,
            rtype: 3,
            holder: Some(h),
            registrants: vec![RegistrantSnapshot {
                hostid: h,
                key: u64::MAX,
            }],
        };
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(
            j,
            r#"{"generation":3,"ptpl":true,"rtype":3,"holder":"ab000000000000000000000000000001","registrants":[{"hostid":"ab000000000000000000000000000001","key":18446744073709551615}]}"#
        );
        assert_eq!(serde_json::from_str::<ReservationSnapshot>(&j).unwrap(), s);
        // The hex order is u128::from_be_bytes (what storage-node's state file uses).
        assert_eq!(to_hex(&h), format!("{:032x}", u128::from_be_bytes(h)));
        let none = ReservationSnapshot::default();
        let j = serde_json::to_string(&none).unwrap();
        assert!(j.contains(r#""holder":null"#));
        assert_eq!(
            serde_json::from_str::<ReservationSnapshot>(&j).unwrap(),
            none
        );
    }

    #[test]
    fn bad_hex_is_an_error() {
        for bad in [
            "",
            "ab",
            "zz000000000000000000000000000001",
            "é0000000000000000000000000000001",
        ] {
            let j = format!(r#"{{"hostid":"{bad}","key":1}}"#);
            assert!(
                serde_json::from_str::<RegistrantSnapshot>(&j).is_err(),
                "{bad}"
            );
        }
        assert_eq!(
            from_hex("AB000000000000000000000000000001").unwrap()[0],
            0xAB
        );
    }
}
