//! The node's [`MediaHealthSource`]: the SMART log of a subsystem shows the temperature
//! and spare of the NVMe drives behind its namespaces (`crate::nvme_smart`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nvmf_target::{MediaHealth, MediaHealthSource};
use uuid::Uuid;

use crate::catalog::Catalog;
use crate::nvme_smart::{NvmeAdmin, nvme_controller_of, read_media_health};

use super::lock_catalog;

pub(crate) struct NodeMediaHealth {
    catalog: Arc<Mutex<Catalog>>,
    /// The NVMe controller of each drive that is an NVMe block device.
    controllers: BTreeMap<Uuid, PathBuf>,
    admin: Arc<dyn NvmeAdmin>,
}

impl NodeMediaHealth {
    /// Finds the controllers of the catalog's drives once (drives come only at start).
    pub(crate) fn new(
        catalog: Arc<Mutex<Catalog>>,
        sys_root: &Path,
        admin: Arc<dyn NvmeAdmin>,
    ) -> NodeMediaHealth {
        let controllers = lock_catalog(&catalog)
            .state()
            .drives
            .iter()
            .filter_map(|d| match blockdev::parse_drive_spec(&d.spec) {
                Ok(blockdev::DriveSpec::BlockDevice { path }) => {
                    let c = nvme_controller_of(&path, sys_root)?;
                    tracing::info!(drive = %d.name, controller = %c.display(),
                        "SMART temperature and spare from the drive's controller");
                    Some((d.uuid, c))
                }
                _ => None,
            })
            .collect();
        NodeMediaHealth {
            catalog,
            controllers,
            admin,
        }
    }
}

impl MediaHealthSource for NodeMediaHealth {
    fn media_health(&self, subnqn: &str) -> MediaHealth {
        if self.controllers.is_empty() {
            return MediaHealth::default();
        }
        let drives: Vec<Uuid> = {
            let c = lock_catalog(&self.catalog);
            let st = c.state();
            let mut d: Vec<Uuid> = st
                .subsystems
                .iter()
                .filter(|s| s.nqn == subnqn)
                .map(|s| s.drive_uuid)
                .chain(
                    st.namespaces
                        .iter()
                        .filter(|n| n.subsystem_nqn == subnqn)
                        .map(|n| n.drive_uuid),
                )
                .collect();
            d.sort_unstable();
            d.dedup();
            d
        };
        let mut controllers: Vec<&PathBuf> = drives
            .iter()
            .filter_map(|d| self.controllers.get(d))
            .collect();
        controllers.sort_unstable();
        controllers.dedup();
        controllers
            .into_iter()
            .map(|c| read_media_health(self.admin.as_ref(), c))
            .fold(MediaHealth::default(), MediaHealth::worst)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::io;
    use std::os::unix::fs::symlink;

    use nvme_proto::log::SmartLog;
    use nvmf_target::AvailableSpare;
    use rand::SeedableRng;

    use super::*;
    use crate::catalog::Catalog;
    use crate::state::FsStore;

    /// Every controller answers with a temperature of 300 K + its number.
    struct NumberedControllers;

    impl NvmeAdmin for NumberedControllers {
        fn smart_log(&self, controller: &Path) -> io::Result<[u8; SmartLog::BYTES]> {
            let n: u16 = controller.to_str().unwrap()["/dev/nvme".len()..]
                .parse()
                .unwrap();
            Ok(SmartLog {
                composite_temperature_k: 300 + n,
                available_spare_pct: 100 - n as u8,
                available_spare_threshold_pct: 10,
                ..SmartLog::default()
            }
            .to_bytes())
        }
    }

    #[test]
    fn a_subsystem_reports_the_nvme_drives_behind_it() {
        let sys = tempfile::tempdir().unwrap();
        for (ctrl, ns) in [("nvme3", "nvme3n1"), ("nvme7", "nvme7n1")] {
            let c = sys.path().join("devices").join(ctrl);
            let n = c.join(ns);
            std::fs::create_dir_all(&n).unwrap();
            symlink(&c, n.join("device")).unwrap();
            std::fs::create_dir_all(sys.path().join("class/block")).unwrap();
            symlink(&n, sys.path().join("class/block").join(ns)).unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let (mut c, _) = Catalog::open(
            Box::new(FsStore::new(dir.path())),
            "n1",
            Box::new(rand::rngs::StdRng::seed_from_u64(1)),
        )
        .unwrap();
        c.record_start().unwrap();
        let mib = crate::extent::EXTENT_UNIT_BYTES;
        let a = c.add_drive("a", "/dev/nvme3n1", 8 * mib, 512).unwrap();
        let b = c.add_drive("b", "/dev/nvme7n1", 8 * mib, 512).unwrap();
        let f = c.add_drive("f", "file:/img:8M", 8 * mib, 512).unwrap();
        let m = NodeMediaHealth::new(
            Arc::new(Mutex::new(c)),
            sys.path(),
            Arc::new(NumberedControllers),
        );
        let reading = |k: u16, pct: u8| MediaHealth {
            composite_temperature_k: Some(k),
            available_spare: Some(AvailableSpare {
                pct,
                threshold_pct: 10,
            }),
        };
        assert_eq!(m.media_health(&a), reading(303, 97));
        assert_eq!(m.media_health(&b), reading(307, 93));
        assert_eq!(m.media_health(&f), MediaHealth::default(), "a file drive");
        assert_eq!(
            m.media_health("nqn.2026-01.io.ferrobay:n1:none"),
            MediaHealth::default()
        );
    }
}
