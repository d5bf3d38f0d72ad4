//! The drives' own temperature and available spare, for the SMART / Health log hosts read
//! from the node. An NVMe drive is asked through the kernel's admin passthrough
//! (`NVME_IOCTL_ADMIN_CMD`: Get Log Page, SMART / Health, on the `/dev/nvmeX` character
//! device of the drive's controller); files, RAM drives and other block devices report
//! nothing, and the log says "not reported".

use std::io;
use std::path::{Path, PathBuf};

use nvme_proto::log::{GetLogPageCommand, SmartLog, lid};
use nvmf_target::{AvailableSpare, MediaHealth};

/// The admin commands the node sends to local NVMe controllers (the seam tests feed).
pub trait NvmeAdmin: Send + Sync {
    /// The controller's SMART / Health log (all namespaces), 512 bytes.
    fn smart_log(&self, controller: &Path) -> io::Result<[u8; SmartLog::BYTES]>;
}

/// [`NvmeAdmin`] through the Linux kernel's NVMe driver (needs CAP_SYS_ADMIN).
#[derive(Clone, Copy, Debug, Default)]
pub struct KernelNvmeAdmin;

impl NvmeAdmin for KernelNvmeAdmin {
    fn smart_log(&self, controller: &Path) -> io::Result<[u8; SmartLog::BYTES]> {
        let mut page = [0u8; SmartLog::BYTES];
        let get = GetLogPageCommand::new(lid::SMART_HEALTH, u32::MAX, 0, SmartLog::BYTES as u64)
            .to_command(0);
        let file = std::fs::File::open(controller)?;
        passthrough::admin_cmd(&file, &get, &mut page)?;
        Ok(page)
    }
}

mod passthrough {
    #![allow(unsafe_code)]

    use std::io;
    use std::os::fd::AsRawFd;

    use nvme_proto::Command;

    /// `struct nvme_passthru_cmd` of `<linux/nvme_ioctl.h>`.
    #[repr(C)]
    #[derive(Default)]
    struct PassthruCmd {
        opcode: u8,
        flags: u8,
        rsvd1: u16,
        nsid: u32,
        cdw2: u32,
        cdw3: u32,
        metadata: u64,
        addr: u64,
        metadata_len: u32,
        data_len: u32,
        cdw10: u32,
        cdw11: u32,
        cdw12: u32,
        cdw13: u32,
        cdw14: u32,
        cdw15: u32,
        timeout_ms: u32,
        result: u32,
    }

    const _: () = assert!(std::mem::size_of::<PassthruCmd>() == 72);

    /// `_IOWR('N', 0x41, struct nvme_passthru_cmd)`.
    const NVME_IOCTL_ADMIN_CMD: libc::c_ulong = (3 << 30)
        | ((std::mem::size_of::<PassthruCmd>() as libc::c_ulong) << 16)
        | ((b'N' as libc::c_ulong) << 8)
        | 0x41;
    const _: () = assert!(NVME_IOCTL_ADMIN_CMD == 0xC048_4E41);

    /// Runs admin command `c` with `data` as its controller-to-host buffer. A command that
    /// completes with an NVMe error status is an error.
    pub(super) fn admin_cmd(file: &std::fs::File, c: &Command, data: &mut [u8]) -> io::Result<()> {
        let data_len = u32::try_from(data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "buffer over 4 GiB"))?;
        let mut cmd = PassthruCmd {
            opcode: c.opcode(),
            nsid: c.nsid(),
            addr: data.as_mut_ptr() as u64,
            data_len,
            cdw10: c.cdw10(),
            cdw11: c.cdw11(),
            cdw12: c.cdw12(),
            cdw13: c.cdw13(),
            cdw14: c.cdw14(),
            cdw15: c.cdw15(),
            ..PassthruCmd::default()
        };
        // SAFETY: `cmd` is a live, properly laid out `nvme_passthru_cmd` (size checked at
        // compile time) for the duration of the call; `addr`/`data_len` describe `data`,
        // which is borrowed mutably for the whole call, so the kernel writes at most
        // `data_len` bytes into memory we own and nothing else refers to.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), NVME_IOCTL_ADMIN_CMD, &raw mut cmd) };
        match rc {
            0 => Ok(()),
            rc if rc < 0 => Err(io::Error::last_os_error()),
            status => Err(io::Error::other(format!(
                "admin command {:#04x} failed with NVMe status {status:#x}",
                c.opcode()
            ))),
        }
    }
}

/// The `/dev/nvmeX` character device of the controller behind NVMe block device
/// `device` (a namespace like `/dev/nvme0n1`, a partition of one, or a link to either),
/// found through `sys_root` (`/sys`); `None` for anything that is not NVMe. A
/// multipath namespace (`device` links to an `nvme-subsysN`) is asked through its first
/// controller.
pub fn nvme_controller_of(device: &Path, sys_root: &Path) -> Option<PathBuf> {
    let device = std::fs::canonicalize(device).unwrap_or_else(|_| device.to_path_buf());
    let name = device.file_name()?.to_str()?;
    let mut disk = std::fs::canonicalize(sys_root.join("class/block").join(name)).ok()?;
    if disk.join("partition").exists() {
        disk = disk.parent()?.to_path_buf();
    }
    let parent = std::fs::canonicalize(disk.join("device")).ok()?;
    let parent_name = parent.file_name()?.to_str()?;
    let controller = if is_controller_name(parent_name) {
        parent_name.to_string()
    } else if parent_name.starts_with("nvme-subsys") {
        let mut ctrls: Vec<String> = std::fs::read_dir(&parent)
            .ok()?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| is_controller_name(n))
            .collect();
        ctrls.sort_by_key(|n| (n.len(), n.clone()));
        ctrls.into_iter().next()?
    } else {
        return None;
    };
    Some(Path::new("/dev").join(controller))
}

/// `nvme` followed by digits only (`nvme0`, not `nvme0n1` or `nvme-subsys0`).
fn is_controller_name(n: &str) -> bool {
    n.strip_prefix("nvme")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// What controller `controller` reports; not reported when it cannot be asked (no
/// permission, gone, an error status) or when its log says so (temperature 0).
pub fn read_media_health(admin: &dyn NvmeAdmin, controller: &Path) -> MediaHealth {
    let m = read_media_reading(admin, controller);
    MediaHealth {
        composite_temperature_k: m.temperature_k,
        available_spare: m
            .available_spare_pct
            .zip(m.available_spare_threshold_pct)
            .map(|(pct, threshold_pct)| AvailableSpare { pct, threshold_pct }),
    }
}

/// Everything the drive's SMART log says that telemetry and prediction use (temperature,
/// wear, spare, its own media error count); all `None` when it cannot be asked.
pub fn read_media_reading(admin: &dyn NvmeAdmin, controller: &Path) -> telemetry::MediaReading {
    let page = match admin.smart_log(controller) {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!(controller = %controller.display(), error = %e, "no SMART log");
            return telemetry::MediaReading::default();
        }
    };
    let Ok(log) = SmartLog::decode(&page) else {
        return telemetry::MediaReading::default();
    };
    // Above 100 % is not a percentage: a drive that says so reports no spare.
    let spare_ok = log.available_spare_pct <= 100 && log.available_spare_threshold_pct <= 100;
    telemetry::MediaReading {
        temperature_k: (log.composite_temperature_k != 0).then_some(log.composite_temperature_k),
        percentage_used: Some(log.percentage_used),
        available_spare_pct: spare_ok.then_some(log.available_spare_pct),
        available_spare_threshold_pct: spare_ok.then_some(log.available_spare_threshold_pct),
        media_errors: Some(u64::try_from(log.media_errors).unwrap_or(u64::MAX)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;
    use std::os::unix::fs::symlink;
    use std::sync::Mutex;

    use super::*;

    /// Controllers and the SMART logs they return; records who was asked.
    #[derive(Default)]
    struct FakeAdmin {
        logs: BTreeMap<PathBuf, SmartLog>,
        asked: Mutex<Vec<PathBuf>>,
    }

    impl NvmeAdmin for FakeAdmin {
        fn smart_log(&self, controller: &Path) -> io::Result<[u8; SmartLog::BYTES]> {
            self.asked.lock().unwrap().push(controller.to_path_buf());
            self.logs
                .get(controller)
                .map(SmartLog::to_bytes)
                .ok_or_else(|| io::Error::from(io::ErrorKind::PermissionDenied))
        }
    }

    /// A sysfs tree: controller nvme0 with namespace nvme0n1 and its partition nvme0n1p1;
    /// a multipath head nvme1n1 over subsystem nvme-subsys1 with controllers nvme10 and
    /// nvme2; a SCSI disk sda.
    fn sysfs() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let dev = |p: &str| {
            let d = root.join("devices").join(p);
            std::fs::create_dir_all(&d).unwrap();
            d
        };
        let block = root.join("class/block");
        std::fs::create_dir_all(&block).unwrap();
        let nvme0 = dev("pci0000:00/0000:00:04.0/nvme/nvme0");
        let ns = dev("pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1");
        symlink(&nvme0, ns.join("device")).unwrap();
        let part = dev("pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1/nvme0n1p1");
        std::fs::write(part.join("partition"), "1\n").unwrap();
        symlink(&ns, block.join("nvme0n1")).unwrap();
        symlink(&part, block.join("nvme0n1p1")).unwrap();
        let subsys = dev("virtual/nvme-subsystem/nvme-subsys1");
        for c in ["nvme10", "nvme2"] {
            symlink(dev(&format!("pci0000:00/{c}")), subsys.join(c)).unwrap();
        }
        let head = dev("virtual/nvme-subsystem/nvme-subsys1/nvme1n1");
        symlink(&subsys, head.join("device")).unwrap();
        symlink(&head, block.join("nvme1n1")).unwrap();
        let sda = dev("pci0000:00/host0/target0:0:0/0:0:0:0/block/sda");
        symlink(
            dev("pci0000:00/host0/target0:0:0/0:0:0:0"),
            sda.join("device"),
        )
        .unwrap();
        symlink(&sda, block.join("sda")).unwrap();
        t
    }

    #[test]
    fn finds_the_controller_of_nvme_block_devices_only() {
        let sys = sysfs();
        let of = |d: &str| nvme_controller_of(Path::new(d), sys.path());
        assert_eq!(of("/dev/nvme0n1"), Some("/dev/nvme0".into()));
        assert_eq!(of("/dev/nvme0n1p1"), Some("/dev/nvme0".into()));
        assert_eq!(
            of("/dev/nvme1n1"),
            Some("/dev/nvme2".into()),
            "first controller"
        );
        assert_eq!(of("/dev/sda"), None);
        assert_eq!(of("/dev/loop0"), None, "not in sysfs");
    }

    #[test]
    fn reads_temperature_and_spare_or_reports_nothing() {
        let mut admin = FakeAdmin::default();
        admin.logs.insert(
            "/dev/nvme0".into(),
            SmartLog {
                composite_temperature_k: 318,
                available_spare_pct: 97,
                available_spare_threshold_pct: 10,
                ..SmartLog::default()
            },
        );
        admin.logs.insert("/dev/nvme1".into(), SmartLog::default());
        admin.logs.insert(
            "/dev/nvme3".into(),
            SmartLog {
                available_spare_pct: 255,
                ..SmartLog::default()
            },
        );
        assert_eq!(
            read_media_health(&admin, Path::new("/dev/nvme0")),
            MediaHealth {
                composite_temperature_k: Some(318),
                available_spare: Some(AvailableSpare {
                    pct: 97,
                    threshold_pct: 10
                }),
            }
        );
        // Temperature 0 is "not reported"; a spare of 0 % is a reading.
        assert_eq!(
            read_media_health(&admin, Path::new("/dev/nvme1")),
            MediaHealth {
                composite_temperature_k: None,
                available_spare: Some(AvailableSpare {
                    pct: 0,
                    threshold_pct: 0
                }),
            }
        );
        assert_eq!(
            read_media_health(&admin, Path::new("/dev/nvme3")).available_spare,
            None
        );
        assert_eq!(
            read_media_health(&admin, Path::new("/dev/nvme9")),
            MediaHealth::default(),
            "a controller that cannot be asked reports nothing"
        );
        assert_eq!(admin.asked.lock().unwrap().len(), 4);
    }

    #[test]
    fn kernel_admin_on_something_that_is_no_controller_is_an_error() {
        let f = tempfile::NamedTempFile::new().unwrap();
        assert!(KernelNvmeAdmin.smart_log(f.path()).is_err());
        assert!(
            KernelNvmeAdmin
                .smart_log(Path::new("/dev/nvme-does-not-exist"))
                .is_err()
        );
    }

    #[test]
    fn media_reading_has_wear_spare_temperature_and_media_errors() {
        let mut admin = FakeAdmin::default();
        let c = PathBuf::from("/dev/nvme0");
        admin.logs.insert(
            c.clone(),
            SmartLog {
                composite_temperature_k: 315,
                percentage_used: 104,
                available_spare_pct: 9,
                available_spare_threshold_pct: 10,
                media_errors: 12,
                ..SmartLog::default()
            },
        );
        let m = read_media_reading(&admin, &c);
        assert_eq!(
            m,
            telemetry::MediaReading {
                temperature_k: Some(315),
                percentage_used: Some(104),
                available_spare_pct: Some(9),
                available_spare_threshold_pct: Some(10),
                media_errors: Some(12),
            }
        );
        assert_eq!(
            read_media_reading(&admin, Path::new("/dev/nvme9")),
            telemetry::MediaReading::default(),
            "a controller that cannot be asked reports nothing"
        );
    }
}
