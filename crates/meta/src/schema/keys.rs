//! Key layout. Every key lives under [`ROOT`]; names inside keys are checked so that no
//! name can reach into another record's key space.

use super::SchemaError;

pub const ROOT: &str = "/ferrobay/";
/// `/ferrobay/nodes/<node>`: a storage or processor node.
pub const NODES: &str = "/ferrobay/nodes/";
/// `/ferrobay/drives/<node>/<drive>`: a drive of a storage node.
pub const DRIVES: &str = "/ferrobay/drives/";
/// `/ferrobay/volumes/<volume>`: a volume and its placement.
pub const VOLUMES: &str = "/ferrobay/volumes/";
/// `/ferrobay/volume-auth/<volume>`: the DH-HMAC-CHAP secrets of the hosts that must
/// authenticate to the volume (apart from the volume record, which the API shows).
pub const VOLUME_AUTH: &str = "/ferrobay/volume-auth/";
/// `/ferrobay/owners/<volume>`: the current owner, attached to the owner's lease.
pub const OWNERS: &str = "/ferrobay/owners/";
/// `/ferrobay/owner-epochs/<volume>`: the last ownership granted (no lease: it outlives
/// the owner so that epochs only grow).
pub const OWNER_EPOCHS: &str = "/ferrobay/owner-epochs/";

const MAX_NAME_BYTES: usize = 128;

/// A name is 1..=128 bytes of `[A-Za-z0-9._:-]`, not starting with `.` (so NQNs and
/// drive names fit, and no name holds `/`).
pub fn validate_name(name: &str) -> Result<(), SchemaError> {
    let invalid = |reason| SchemaError::InvalidName {
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("empty"));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(invalid("longer than 128 bytes"));
    }
    if name.starts_with('.') {
        return Err(invalid("starts with '.'"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    {
        return Err(invalid("only letters, digits and . _ : - are allowed"));
    }
    Ok(())
}

fn under(prefix: &str, name: &str) -> Result<String, SchemaError> {
    validate_name(name)?;
    Ok(format!("{prefix}{name}"))
}

pub fn node_key(node: &str) -> Result<String, SchemaError> {
    under(NODES, node)
}

pub fn volume_key(volume: &str) -> Result<String, SchemaError> {
    under(VOLUMES, volume)
}

pub fn volume_auth_key(volume: &str) -> Result<String, SchemaError> {
    under(VOLUME_AUTH, volume)
}

pub fn owner_key(volume: &str) -> Result<String, SchemaError> {
    under(OWNERS, volume)
}

pub fn owner_epoch_key(volume: &str) -> Result<String, SchemaError> {
    under(OWNER_EPOCHS, volume)
}

pub fn drive_key(node: &str, drive: &str) -> Result<String, SchemaError> {
    validate_name(drive)?;
    Ok(format!("{}{drive}", drives_of_node(node)?))
}

/// The prefix of every drive of `node`.
pub fn drives_of_node(node: &str) -> Result<String, SchemaError> {
    Ok(format!("{}/", under(DRIVES, node)?))
}

/// The name a key holds under `prefix` (`name_in(NODES, "/ferrobay/nodes/n1") == Some("n1")`),
/// `None` if the key is not directly under it.
pub fn name_in<'k>(prefix: &str, key: &'k str) -> Option<&'k str> {
    key.strip_prefix(prefix)
        .filter(|rest| validate_name(rest).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_names() {
        assert_eq!(node_key("n1").expect("valid"), "/ferrobay/nodes/n1");
        assert_eq!(
            drive_key("n1", "nvme0n1").expect("valid"),
            "/ferrobay/drives/n1/nvme0n1"
        );
        assert_eq!(
            owner_key("nqn.2026-01.io.ferrobay:vol:a").expect("valid"),
            "/ferrobay/owners/nqn.2026-01.io.ferrobay:vol:a"
        );
        for bad in ["", "a/b", "..", ".hidden", "a b", "é", &"x".repeat(129)] {
            assert!(validate_name(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(name_in(NODES, "/ferrobay/nodes/n1"), Some("n1"));
        assert_eq!(name_in(NODES, "/ferrobay/nodes/n1/x"), None);
        assert_eq!(name_in(NODES, "/ferrobay/volumes/v"), None);
    }
}
