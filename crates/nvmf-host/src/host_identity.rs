//! Who the host is: its NQN and 16-byte host identifier (Connect data HOSTID).

use std::path::Path;

use nvme_proto::fabrics::nqn::{UUID_NQN_PREFIX, uuid_nqn};
use nvme_proto::fabrics::validate_nqn;
use uuid::Uuid;

use crate::error::{HostError, Result};

/// Where nvme-cli keeps the host NQN and host ID.
pub const HOSTNQN_PATH: &str = "/etc/nvme/hostnqn";
pub const HOSTID_PATH: &str = "/etc/nvme/hostid";

/// The host's NQN and host identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostIdentity {
    pub hostnqn: String,
    pub hostid: [u8; 16],
}

impl HostIdentity {
    /// The identity for `hostnqn`: a UUID-form NQN gives its UUID as host ID (as libnvme
    /// does); any other NQN gets the name-based (version 5) UUID of its text, so it is
    /// stable: the same NQN always gets the same host ID.
    pub fn from_hostnqn(hostnqn: &str) -> Result<HostIdentity> {
        validate_nqn(hostnqn)
            .map_err(|e| HostError::Usage(format!("host NQN {hostnqn:?}: {e}")))?;
        let hostid = hostnqn
            .strip_prefix(UUID_NQN_PREFIX)
            .and_then(parse_uuid)
            .unwrap_or_else(|| derived_id(hostnqn));
        Ok(HostIdentity {
            hostnqn: hostnqn.to_string(),
            hostid,
        })
    }

    /// The UUID-form identity for `uuid`.
    pub fn from_uuid(uuid: [u8; 16]) -> HostIdentity {
        HostIdentity {
            hostnqn: uuid_nqn(&uuid),
            hostid: uuid,
        }
    }

    /// This machine's identity as nvme-cli would use it: `/etc/nvme/hostnqn` (and
    /// `/etc/nvme/hostid` when present), else a UUID-form NQN derived from
    /// `/etc/machine-id`, else from the host name.
    pub fn system() -> Result<HostIdentity> {
        if let Some(nqn) = read_trimmed(Path::new(HOSTNQN_PATH)) {
            let mut id = HostIdentity::from_hostnqn(&nqn)?;
            if let Some(h) = read_trimmed(Path::new(HOSTID_PATH)).and_then(|s| parse_uuid(&s)) {
                id.hostid = h;
            }
            return Ok(id);
        }
        let seed = read_trimmed(Path::new("/etc/machine-id"))
            .or_else(|| read_trimmed(Path::new("/proc/sys/kernel/hostname")))
            .unwrap_or_else(|| "ferrobay".to_string());
        Ok(HostIdentity::from_uuid(derived_id(&format!(
            "ferrobay-host:{seed}"
        ))))
    }
}

fn read_trimmed(p: &Path) -> Option<String> {
    let s = std::fs::read_to_string(p).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// Parses the 36-character text form of a UUID (8-4-4-4-12 hex digits).
pub fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    // `Uuid::try_parse` also takes the 32-digit, braced and URN forms: nvme-cli writes
    // and reads only the hyphenated one.
    if s.len() != 36 {
        return None;
    }
    Uuid::try_parse(s).ok().map(Uuid::into_bytes)
}

/// The namespace of derived host IDs. Fixed: changing it changes every derived host ID
/// (and with it the host a target's reservations and ACLs know).
const HOST_ID_NAMESPACE: Uuid = uuid::uuid!("a60771b4-04b0-449e-abae-eb966cd80616");

/// The name-based (version 5, SHA-1) UUID of `name` in [`HOST_ID_NAMESPACE`].
fn derived_id(name: &str) -> [u8; 16] {
    Uuid::new_v5(&HOST_ID_NAMESPACE, name.as_bytes()).into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_nqn_gives_its_uuid() {
        let id = HostIdentity::from_hostnqn(
            "nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e",
        )
        .expect("valid");
        assert_eq!(id.hostid[0], 0x0f);
        assert_eq!(id.hostid[15], 0x0e);
        assert_eq!(HostIdentity::from_uuid(id.hostid), id);
        let other = HostIdentity::from_hostnqn("nqn.2026-01.io.ferrobay:proc1").expect("valid");
        assert_eq!(
            other,
            HostIdentity::from_hostnqn("nqn.2026-01.io.ferrobay:proc1").expect("valid")
        );
        // Derived IDs are version 5 UUIDs of the NQN, the same in every release.
        assert_eq!(
            Uuid::from_bytes(other.hostid).to_string(),
            "c4c0b38e-1605-5e27-a32b-5d87fdc89f70"
        );
        assert_eq!(Uuid::from_bytes(other.hostid).get_version_num(), 5);
        assert!(HostIdentity::from_hostnqn("not-an-nqn").is_err());
        assert_eq!(parse_uuid("0f8fad5b-d9cb-469f-a165-70867728950"), None);
        assert_eq!(parse_uuid("0f8fad5bd9cb469fa16570867728950e"), None);
        assert_eq!(parse_uuid("0f8fad5b-d9cb-469f-a165-70867728950g"), None);
        let sys = HostIdentity::system().expect("system identity");
        validate_nqn(&sys.hostnqn).expect("valid NQN");
    }
}
