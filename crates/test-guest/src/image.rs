//! The guest artefacts (kernel + initramfs) and building them on demand with
//! `scripts/guest/build.sh`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use crate::error::{GuestError, Result};

/// Name of the QEMU binary the harness runs.
pub const QEMU: &str = "qemu-system-x86_64";

/// Run logs older than this are deleted when an image is first ensured.
const RUN_LOG_MAX_AGE: Duration = Duration::from_secs(3 * 24 * 3600);

/// Which guest image to boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Flavour {
    /// Debian bookworm: kernel 6.1, nvme-cli 2.3 (`build.sh`).
    #[default]
    Base,
    /// The base image with fio and its libraries appended (`build.sh --fio`;
    /// a larger initramfs, a few seconds more per boot).
    Fio,
    /// Debian trixie (`build.sh --trixie`): kernel 6.12 with DH-HMAC-CHAP
    /// (`CONFIG_NVME_HOST_AUTH`) and NVMe/TCP TLS (`CONFIG_NVME_TCP_TLS`,
    /// `tls`, `nvme-keyring`), nvme-cli 2.13, `tlshd` and `keyctl`. Its own
    /// kernel, so a separate build and ~3 s more per boot than the base image.
    Trixie,
}

impl Flavour {
    /// Every flavour.
    pub const ALL: [Flavour; 3] = [Flavour::Base, Flavour::Fio, Flavour::Trixie];

    /// The `build.sh` argument that builds it.
    fn build_arg(self) -> Option<&'static str> {
        match self {
            Flavour::Base => None,
            Flavour::Fio => Some("--fio"),
            Flavour::Trixie => Some("--trixie"),
        }
    }

    /// Its artefacts, relative to `<cache>/out`: (directory, initramfs).
    fn out_paths(self) -> (&'static str, &'static str) {
        match self {
            Flavour::Base => ("", "initramfs.cpio"),
            Flavour::Fio => ("", "initramfs-fio.cpio"),
            Flavour::Trixie => ("trixie", "initramfs.cpio"),
        }
    }

    fn index(self) -> usize {
        match self {
            Flavour::Base => 0,
            Flavour::Fio => 1,
            Flavour::Trixie => 2,
        }
    }
}

impl std::fmt::Display for Flavour {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Flavour::Base => "bookworm",
            Flavour::Fio => "bookworm with fio",
            Flavour::Trixie => "trixie",
        })
    }
}

/// Paths of a built guest: an uncompressed kernel (booted through QEMU's PVH
/// entry) and an initramfs, plus where run logs go.
#[derive(Debug, Clone)]
pub struct GuestImage {
    /// The cache directory (`$FERROBAY_GUEST_DIR`, default `<repo>/target/guest`).
    pub dir: PathBuf,
    /// `out/vmlinux` (`out/trixie/vmlinux` for the trixie flavour).
    pub kernel: PathBuf,
    /// `out/initramfs.cpio`, `out/initramfs-fio.cpio` for the fio flavour,
    /// `out/trixie/initramfs.cpio` for the trixie one.
    pub initramfs: PathBuf,
    /// The guest kernel release, e.g. `6.1.0-56-amd64`.
    pub kernel_version: String,
    /// Which image this is.
    pub flavour: Flavour,
}

static IMAGES: [OnceLock<std::result::Result<GuestImage, String>>; 3] =
    [OnceLock::new(), OnceLock::new(), OnceLock::new()];

impl GuestImage {
    /// The base image (busybox, nvme-cli, nvme-tcp/nvmet modules). Builds it on
    /// first use in this process; `build.sh` takes a file lock, so test
    /// binaries running at once build it only once. Fails with
    /// [`GuestError::QemuMissing`] when QEMU is not installed.
    pub fn ensure() -> Result<&'static GuestImage> {
        Self::ensure_flavour(Flavour::Base)
    }

    /// The image with fio (built with `build.sh --fio`; a larger initramfs,
    /// a few seconds more per boot).
    pub fn ensure_fio() -> Result<&'static GuestImage> {
        Self::ensure_flavour(Flavour::Fio)
    }

    /// The Debian trixie image (kernel 6.12 with DH-HMAC-CHAP and TLS,
    /// nvme-cli 2.13, tlshd; built with `build.sh --trixie`).
    pub fn ensure_trixie() -> Result<&'static GuestImage> {
        Self::ensure_flavour(Flavour::Trixie)
    }

    /// The image of `flavour`, built on first use in this process.
    pub fn ensure_flavour(flavour: Flavour) -> Result<&'static GuestImage> {
        find_qemu()?;
        match IMAGES[flavour.index()].get_or_init(|| build(flavour)) {
            Ok(image) => Ok(image),
            Err(message) => Err(GuestError::Build {
                command: build_command_line(flavour),
                status: "(first attempt in this process)".into(),
                output: message.clone(),
            }),
        }
    }

    /// Whether this image carries fio.
    pub fn fio(&self) -> bool {
        self.flavour == Flavour::Fio
    }

    /// The cache directory: `$FERROBAY_GUEST_DIR`, or `<repo>/target/guest`.
    pub fn cache_dir() -> PathBuf {
        match std::env::var_os("FERROBAY_GUEST_DIR") {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => repo_root().join("target").join("guest"),
        }
    }

    /// Where per-run logs and job files are written.
    pub fn runs_dir(&self) -> PathBuf {
        self.dir.join("runs")
    }
}

/// The workspace root (this crate lives in `<root>/crates/test-guest`).
pub fn repo_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = here.join("..").join("..");
    root.canonicalize().unwrap_or(root)
}

fn build_script() -> PathBuf {
    repo_root().join("scripts").join("guest").join("build.sh")
}

fn build_command_line(flavour: Flavour) -> String {
    let arg = flavour
        .build_arg()
        .map(|a| format!(" {a}"))
        .unwrap_or_default();
    format!(
        "FERROBAY_GUEST_DIR={} {}{arg}",
        GuestImage::cache_dir().display(),
        build_script().display(),
    )
}

/// Why a guest cannot run here (no QEMU, no guest image), or None: what a guest test
/// hands to `testkit::prereq::missing` before it skips.
pub fn unavailable() -> Option<String> {
    unavailable_flavour(Flavour::Base)
}

/// Like [`unavailable`], for the image of `flavour` (e.g. the trixie image, which
/// needs its packages from Debian's registry the first time).
pub fn unavailable_flavour(flavour: Flavour) -> Option<String> {
    if let Err(e) = find_qemu() {
        return Some(e.to_string());
    }
    GuestImage::ensure_flavour(flavour)
        .err()
        .map(|e| format!("no {flavour} guest image: {e}"))
}

/// Path of QEMU, or [`GuestError::QemuMissing`].
pub fn find_qemu() -> Result<PathBuf> {
    find_in_path(QEMU, std::env::var_os("PATH").as_deref()).ok_or(GuestError::QemuMissing)
}

fn find_in_path(name: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Runs build.sh; the error is the message to repeat to every later caller.
fn build(flavour: Flavour) -> std::result::Result<GuestImage, String> {
    let dir = GuestImage::cache_dir();
    let started = Instant::now();
    let mut cmd = Command::new("bash");
    cmd.arg(build_script()).env("FERROBAY_GUEST_DIR", &dir);
    cmd.args(flavour.build_arg());
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", build_command_line(flavour)))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        let lines: Vec<&str> = text.lines().collect();
        return Err(format!(
            "`{}` failed ({}):\n{}",
            build_command_line(flavour),
            out.status,
            lines[lines.len().saturating_sub(40)..].join("\n")
        ));
    }
    eprintln!(
        "test-guest: {flavour} guest image ready in {:.1}s: {}",
        started.elapsed().as_secs_f64(),
        text.lines().last().unwrap_or("")
    );
    let (sub, initramfs) = flavour.out_paths();
    let outdir = dir.join("out").join(sub);
    let kernel_version = std::fs::read_to_string(outdir.join("kernel-version"))
        .map_err(|e| format!("{}: {e}", outdir.join("kernel-version").display()))?
        .trim()
        .to_string();
    let image = GuestImage {
        kernel: outdir.join("vmlinux"),
        initramfs: outdir.join(initramfs),
        dir,
        kernel_version,
        flavour,
    };
    for p in [&image.kernel, &image.initramfs] {
        if !p.is_file() {
            return Err(format!("build.sh succeeded but {} is missing", p.display()));
        }
    }
    prune_old_runs(&image.runs_dir());
    Ok(image)
}

/// Deletes run logs and job files older than [`RUN_LOG_MAX_AGE`] (best effort).
fn prune_old_runs(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > RUN_LOG_MAX_AGE);
        if old {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_qemu_is_reported_with_the_install_hint() {
        let dir = std::env::temp_dir();
        assert_eq!(find_in_path(QEMU, Some(dir.as_os_str())), None);
        assert_eq!(find_in_path(QEMU, None), None);
        let msg = GuestError::QemuMissing.to_string();
        assert!(msg.contains("scripts/install-deps.sh"), "{msg}");
    }

    #[test]
    fn find_in_path_finds_files() {
        let found = find_in_path("sh", Some(OsStr::new("/nonexistent:/bin:/usr/bin")));
        assert!(found.is_some_and(|p| p.ends_with("sh")));
    }

    #[test]
    fn every_flavour_has_its_own_build_command_and_files() {
        let mut lines = std::collections::HashSet::new();
        let mut files = std::collections::HashSet::new();
        for f in Flavour::ALL {
            assert!(lines.insert(build_command_line(f)), "{f}");
            assert!(files.insert(f.out_paths()), "{f}");
            assert_eq!(Flavour::ALL[f.index()], f);
        }
        assert!(build_command_line(Flavour::Trixie).ends_with("build.sh --trixie"));
        assert!(build_command_line(Flavour::Base).ends_with("build.sh"));
    }

    #[test]
    fn build_script_is_in_the_repo() {
        assert!(build_script().is_file(), "{}", build_script().display());
    }
}
