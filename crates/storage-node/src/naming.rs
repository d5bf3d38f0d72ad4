//! Names and identifiers: default NQNs, drive names, serial numbers, NGUID/EUI-64/UUID.
//!
//! Identifiers are generated once, persisted in the node state and never regenerated:
//! hosts key multipath and `/dev/disk/by-id` on them.

use rand::Rng;
use uuid::Uuid;

use blockdev::{DriveSpec, parse_drive_spec};

/// The NQN date/authority prefix of every Ferrobay subsystem.
pub const NQN_PREFIX: &str = "nqn.2026-01.io.ferrobay";
/// Maximum length of an NQN (NVMe base spec).
pub const MAX_NQN_BYTES: usize = 223;
/// Maximum length of node and drive names.
pub const MAX_NAME_BYTES: usize = 64;
/// Serial numbers (Identify Controller SN) are at most 20 ASCII characters.
pub const MAX_SERIAL_BYTES: usize = 20;
/// Hex digits of the per-node sequence in a serial number.
const SERIAL_SEQ_DIGITS: usize = 6;
/// Model number reported by every subsystem (at most 40 ASCII characters).
pub const MODEL_NUMBER: &str = "Ferrobay storage node";

const _: () = assert!(2 + 12 + SERIAL_SEQ_DIGITS == MAX_SERIAL_BYTES);
const _: () = assert!(MODEL_NUMBER.len() <= 40);
const _: () = assert!(NQN_PREFIX.len() + 2 + 2 * MAX_NAME_BYTES <= MAX_NQN_BYTES);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamingError {
    #[error("invalid name \"{name}\": {reason}")]
    Name { name: String, reason: &'static str },
    #[error("invalid NQN \"{nqn}\": {reason}")]
    Nqn { nqn: String, reason: &'static str },
    #[error("serial number sequence exhausted on this node")]
    SerialsExhausted,
    #[error(transparent)]
    Spec(#[from] blockdev::SpecError),
}

/// Checks a node or drive name: 1..=64 of `[A-Za-z0-9._-]`, starting with a letter or digit.
/// These go into NQNs, so no ':' and no spaces.
pub fn validate_name(name: &str) -> Result<(), NamingError> {
    let err = |reason| {
        Err(NamingError::Name {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return err("must be 1 to 64 characters");
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return err("must start with a letter or digit");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return err("only letters, digits, '.', '_' and '-' are allowed");
    }
    Ok(())
}

/// Checks a host or subsystem NQN as accepted from a user or the wire.
pub fn validate_nqn(nqn: &str) -> Result<(), NamingError> {
    let err = |reason| {
        Err(NamingError::Nqn {
            nqn: nqn.to_string(),
            reason,
        })
    };
    if nqn.len() > MAX_NQN_BYTES {
        return err("longer than 223 bytes");
    }
    if !nqn.starts_with("nqn.") {
        return err("must start with \"nqn.\"");
    }
    if nqn.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return err("contains whitespace or control characters");
    }
    Ok(())
}

/// The default subsystem NQN of a drive: `nqn.2026-01.io.ferrobay:<node>:<drive>`.
pub fn default_nqn(node: &str, drive: &str) -> String {
    format!("{NQN_PREFIX}:{node}:{drive}")
}

/// The default name of the drive given at position `index` (0-based): `d0`, `d1`, ...
pub fn default_drive_name(index: usize) -> String {
    format!("d{index}")
}

/// A drive as given to the node: an optional user-chosen name and its spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeDrive {
    pub name: Option<String>,
    pub spec: DriveSpec,
}

impl From<DriveSpec> for NodeDrive {
    fn from(spec: DriveSpec) -> NodeDrive {
        NodeDrive { name: None, spec }
    }
}

/// Parses `[NAME=]SPEC`, e.g. `fast=ram:1G` or `file:/img:100G`. A prefix before '=' that
/// is not a valid name (e.g. contains '/' or ':') is part of the spec.
pub fn parse_node_drive(s: &str) -> Result<NodeDrive, NamingError> {
    if let Some((name, spec)) = s.split_once('=')
        && validate_name(name).is_ok()
    {
        return Ok(NodeDrive {
            name: Some(name.to_string()),
            spec: parse_drive_spec(spec)?,
        });
    }
    Ok(NodeDrive {
        name: None,
        spec: parse_drive_spec(s)?,
    })
}

/// A serial number unique per node and per `seq`: `<prefix><12 hex of the node UUID><6 hex
/// of seq>`, exactly 20 ASCII characters. `prefix` is two ASCII letters ("FB" for
/// subsystems, "FD" for drives).
pub fn serial_number(prefix: &str, node_uuid: Uuid, seq: u64) -> Result<String, NamingError> {
    debug_assert!(prefix.len() == 2 && prefix.is_ascii());
    if seq >= 1 << (4 * SERIAL_SEQ_DIGITS) {
        return Err(NamingError::SerialsExhausted);
    }
    let node_hex = crate::state::hex_encode(&node_uuid.as_bytes()[..6]).to_ascii_uppercase();
    Ok(format!(
        "{prefix}{node_hex}{seq:0width$X}",
        width = SERIAL_SEQ_DIGITS
    ))
}

/// The identifiers a namespace reports, generated once at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceIds {
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    pub uuid: Uuid,
}

impl NamespaceIds {
    /// Random identifiers; never all-zero (zero means "not reported" in NVMe).
    pub fn generate(rng: &mut impl Rng) -> NamespaceIds {
        let mut nguid = [0u8; 16];
        while nguid == [0; 16] {
            rng.fill(&mut nguid);
        }
        let mut eui64 = [0u8; 8];
        while eui64 == [0; 8] {
            rng.fill(&mut eui64);
        }
        let uuid = uuid::Builder::from_random_bytes(rng.random()).into_uuid();
        NamespaceIds { nguid, eui64, uuid }
    }
}

/// A random (version 4) UUID from `rng`.
pub fn random_uuid(rng: &mut impl Rng) -> Uuid {
    uuid::Builder::from_random_bytes(rng.random()).into_uuid()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn nqn_and_drive_names() {
        assert_eq!(default_nqn("n1", "d0"), "nqn.2026-01.io.ferrobay:n1:d0");
        assert_eq!(default_drive_name(11), "d11");
        validate_nqn(&default_nqn(&"a".repeat(64), &"b".repeat(64))).unwrap();
        for ok in ["n1", "node-7.rack_2", "0"] {
            validate_name(ok).unwrap();
        }
        for bad in ["", "-x", ".x", "a:b", "a b", "a/b", "é"] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        assert!(validate_name(&"x".repeat(65)).is_err());
        assert!(validate_nqn("host").is_err());
        assert!(validate_nqn("nqn.x y").is_err());
        assert!(validate_nqn(&format!("nqn.{}", "x".repeat(220))).is_err());
    }

    #[test]
    fn named_drives() {
        let d = parse_node_drive("fast=ram:1G").unwrap();
        assert_eq!(d.name.as_deref(), Some("fast"));
        assert_eq!(
            d.spec,
            DriveSpec::Ram {
                size_bytes: 1 << 30
            }
        );
        let d = parse_node_drive("file:/a=b:1G").unwrap();
        assert_eq!(d.name, None);
        assert_eq!(
            d.spec,
            DriveSpec::File {
                path: "/a=b".into(),
                create_size_bytes: Some(1 << 30)
            }
        );
        assert_eq!(parse_node_drive("/dev/sdb").unwrap().name, None);
        let e = parse_node_drive("x=bogus").unwrap_err().to_string();
        assert!(e.starts_with("invalid drive \"bogus\""), "{e}");
    }

    #[test]
    fn serials() {
        let node = Uuid::from_u128(0x0123_4567_89ab_4def_8123_4567_89ab_cdef);
        assert_eq!(
            serial_number("FB", node, 1).unwrap(),
            "FB0123456789AB000001"
        );
        assert_eq!(
            serial_number("FD", node, 0xabcdef).unwrap(),
            "FD0123456789ABABCDEF"
        );
        assert_eq!(
            serial_number("FB", node, 1 << 24),
            Err(NamingError::SerialsExhausted)
        );
    }

    #[test]
    fn namespace_ids_differ_and_are_nonzero() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut seen = HashSet::new();
        for _ in 0..1000 {
            let ids = NamespaceIds::generate(&mut rng);
            assert_ne!(ids.nguid, [0; 16]);
            assert_ne!(ids.eui64, [0; 8]);
            assert_eq!(ids.uuid.get_version_num(), 4);
            assert!(seen.insert(ids.nguid));
        }
    }

    proptest! {
        #[test]
        fn serials_are_20_ascii_and_unique_per_seq(hi in any::<u128>(), a in 0u64..1 << 24, b in 0u64..1 << 24) {
            let node = Uuid::from_u128(hi);
            let (sa, sb) = (serial_number("FB", node, a).unwrap(), serial_number("FB", node, b).unwrap());
            prop_assert_eq!(sa.len(), MAX_SERIAL_BYTES);
            prop_assert!(sa.bytes().all(|c| c.is_ascii_alphanumeric()));
            prop_assert_eq!(a == b, sa == sb);
        }
    }
}
