//! What makes two paths reach the same namespace: the subsystem NQN and NSID they were
//! opened with, and the identifiers the controller reports for it (NGUID, EUI-64, UUID,
//! from Identify Namespace and the Namespace Identification Descriptor list), plus the
//! size and LBA size. As Linux (`nvme_ns_ids_equal`), identifiers must be equal, zero
//! (absent) included: a path that reports another identifier, or drops one, reaches
//! another namespace (or one re-created under the same NSID) and is not used.

use nvme_proto::identify::csi;
use nvme_proto::identify::descriptors::NsIdDescriptor;

use crate::controller::Controller;
use crate::error::{HostError, Result};

/// One namespace's identity as seen through one controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NsIdentity {
    pub nsid: u32,
    /// The I/O command set (`nvme_proto::identify::csi`).
    pub csi: u8,
    pub size_bytes: u64,
    pub lba_bytes: u64,
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    pub uuid: [u8; 16],
    /// The namespace's ANA group ID through this controller.
    pub anagrpid: u32,
}

impl NsIdentity {
    /// Reads NVM namespace `nsid`'s identity through `ctrl` (Identify Namespace, then the
    /// descriptor list on controllers of NVMe 1.3 or later; a controller that answers
    /// the list with an error status is taken as reporting no descriptors).
    pub async fn read(ctrl: &Controller, nsid: u32) -> Result<NsIdentity> {
        let id = ctrl.identify_namespace(nsid).await?;
        let context = || format!("namespace {nsid} of {} at {}", ctrl.subnqn(), ctrl.addr());
        if id.nsze == 0 {
            return Err(HostError::invalid(context(), "not active (NSZE is 0)"));
        }
        let lba_bytes = id.lba_format().lba_bytes();
        let mut me = NsIdentity {
            nsid,
            csi: csi::NVM,
            size_bytes: id.nsze.saturating_mul(lba_bytes),
            lba_bytes,
            nguid: id.nguid,
            eui64: id.eui64,
            uuid: [0; 16],
            anagrpid: id.anagrpid,
        };
        let Some(list) = ctrl.ns_descriptors(nsid).await? else {
            return Ok(me);
        };
        for d in list.descriptors {
            match d {
                NsIdDescriptor::Nguid(v) => me.nguid = v,
                NsIdDescriptor::Eui64(v) => me.eui64 = v,
                NsIdDescriptor::Uuid(v) => me.uuid = v,
                NsIdDescriptor::Csi(c) => me.csi = c,
            }
        }
        Ok(me)
    }

    /// The identity of a Key Value namespace, from what [`crate::kv`] reads to open it
    /// (its size is NSZE in bytes; it has no blocks).
    pub fn of_kv(info: &crate::kv::KvNamespaceInfo) -> NsIdentity {
        NsIdentity {
            nsid: info.nsid,
            csi: csi::KEY_VALUE,
            size_bytes: info.capacity_bytes,
            lba_bytes: 0,
            nguid: info.nguid,
            eui64: info.eui64,
            uuid: info.uuid,
            anagrpid: info.anagrpid,
        }
    }

    /// Whether it names anything: a namespace without identifiers cannot be told from
    /// another with the same NSID and size.
    pub fn has_ids(&self) -> bool {
        self.nguid != [0; 16] || self.eui64 != [0; 8] || self.uuid != [0; 16]
    }

    /// Why `other` is not the namespace `self` is, or None when it is (the ANA group may
    /// differ: it is a property of the path).
    pub fn differs(&self, other: &NsIdentity) -> Option<String> {
        if other.nsid != self.nsid {
            return Some(format!("NSID {} instead of {}", other.nsid, self.nsid));
        }
        if other.csi != self.csi {
            return Some(format!(
                "a namespace of I/O command set {:#04x} instead of {:#04x}",
                other.csi, self.csi
            ));
        }
        if other.lba_bytes == 0 && self.lba_bytes == 0 && other.size_bytes != self.size_bytes {
            return Some(format!(
                "{} bytes instead of {}",
                other.size_bytes, self.size_bytes
            ));
        }
        if other.size_bytes != self.size_bytes || other.lba_bytes != self.lba_bytes {
            return Some(format!(
                "{} bytes in {}-byte blocks instead of {} in {}-byte blocks",
                other.size_bytes, other.lba_bytes, self.size_bytes, self.lba_bytes
            ));
        }
        let ids: [(&str, &[u8], &[u8]); 3] = [
            ("NGUID", &other.nguid, &self.nguid),
            ("EUI-64", &other.eui64, &self.eui64),
            ("UUID", &other.uuid, &self.uuid),
        ];
        ids.iter()
            .find(|(_, got, want)| got != want)
            .map(|(name, got, want)| {
                format!(
                    "another namespace: {name} {} instead of {}",
                    hex::encode(got),
                    hex::encode(want)
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns() -> NsIdentity {
        NsIdentity {
            nsid: 1,
            csi: 0,
            size_bytes: 1 << 30,
            lba_bytes: 4096,
            nguid: [7; 16],
            eui64: [7; 8],
            uuid: [9; 16],
            anagrpid: 1,
        }
    }

    #[test]
    fn each_identifier_counts_and_the_ana_group_does_not() {
        let a = ns();
        assert_eq!(a.differs(&a.clone()), None);
        assert_eq!(
            a.differs(&NsIdentity {
                anagrpid: 2,
                ..ns()
            }),
            None
        );
        let uuid = a
            .differs(&NsIdentity {
                uuid: [8; 16],
                ..ns()
            })
            .expect("another UUID");
        assert!(
            uuid.contains("UUID 0808") && uuid.contains("instead of 0909"),
            "{uuid}"
        );
        // An identifier that disappears is a difference too (Linux compares them all).
        assert!(
            a.differs(&NsIdentity {
                nguid: [0; 16],
                ..ns()
            })
            .is_some()
        );
        assert!(
            a.differs(&NsIdentity {
                eui64: [1; 8],
                ..ns()
            })
            .is_some()
        );
        assert!(a.differs(&NsIdentity { nsid: 2, ..ns() }).is_some());
        let kv = a
            .differs(&NsIdentity { csi: 1, ..ns() })
            .expect("another set");
        assert!(kv.contains("command set 0x01"), "{kv}");
        let size = a
            .differs(&NsIdentity {
                size_bytes: 1 << 20,
                ..ns()
            })
            .expect("another size");
        assert!(size.contains("1048576 bytes"), "{size}");
        assert!(
            !NsIdentity {
                nguid: [0; 16],
                eui64: [0; 8],
                uuid: [0; 16],
                ..ns()
            }
            .has_ids()
        );
    }
}
