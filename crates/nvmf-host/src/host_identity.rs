//! Who the host is: its NQN and 16-byte host identifier (Connect data HOSTID).

use std::path::Path;

use nvme_proto::fabrics::nqn::{UUID_NQN_PREFIX, uuid_nqn};
use nvme_proto::fabrics::validate_nqn;

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
    /// does); any other NQN gets a host ID derived from its text, so it is stable.
    pub fn from_hostnqn(hostnqn: &str) -> Result<HostIdentity> {
        validate_nqn(hostnqn)
            .map_err(|e| HostError::Usage(format!("host NQN {hostnqn:?}: {e}")))?;
        let hostid = hostnqn
            .strip_prefix(UUID_NQN_PREFIX)
            .and_then(parse_uuid)
            .unwrap_or_else(|| derived_id(hostnqn.as_bytes()));
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
        let mut id = derived_id(format!("ferrobay-host:{seed}").as_bytes());
        // Mark it as a version 4 / variant 1 UUID so tools accept it.
        id[6] = (id[6] & 0x0F) | 0x40;
        id[8] = (id[8] & 0x3F) | 0x80;
        Ok(HostIdentity::from_uuid(id))
    }
}

fn read_trimmed(p: &Path) -> Option<String> {
    let s = std::fs::read_to_string(p).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// Parses the 36-character text form of a UUID.
pub fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let hex: Vec<u8> = s.bytes().filter(|&c| c != b'-').collect();
    if s.len() != 36 || hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks_exact(2).enumerate() {
        let t = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(t, 16).ok()?;
    }
    Some(out)
}

/// 16 stable bytes from `data` (two FNV-1a 64 passes with different offsets).
fn derived_id(data: &[u8]) -> [u8; 16] {
    let fnv = |basis: u64| {
        data.iter().fold(basis, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
        })
    };
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&fnv(0xCBF2_9CE4_8422_2325).to_le_bytes());
    out[8..].copy_from_slice(&fnv(0x8422_2325_CBF2_9CE4).to_le_bytes());
    out
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
        assert_ne!(other.hostid, [0; 16]);
        assert!(HostIdentity::from_hostnqn("not-an-nqn").is_err());
        assert_eq!(parse_uuid("0f8fad5b-d9cb-469f-a165-70867728950"), None);
        let sys = HostIdentity::system().expect("system identity");
        validate_nqn(&sys.hostnqn).expect("valid NQN");
    }
}
