//! The local volume registry: which devices make up each volume on this machine, like
//! `mdadm.conf`. One JSON file per volume in a directory; the volume's own truth stays in
//! its superblocks — the registry only says where to look for its devices.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use blockdev::{BlockDevice, IoEngine};
use serde::{Deserialize, Serialize};

/// Environment variable that overrides [`VolumeRegistry::default_dir`].
pub const VOLUMES_DIR_ENV: &str = "FERROBAY_VOLUMES_DIR";

/// Where a volume's devices are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeEntry {
    pub name: String,
    pub uuid: uuid::Uuid,
    /// Level as given at creation (`raid6`, `4+2`, ...), for listings.
    pub level: String,
    /// Member device specs (blockdev drive specs), in member order.
    pub members: Vec<String>,
    /// Spare device specs.
    pub spares: Vec<String>,
}

/// Why the registry could not answer.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("no volume named {name:?} in {dir} (create it with `ferrobay volume create`)")]
    NotFound { name: String, dir: PathBuf },
    #[error("volume {name:?} already exists in {dir}")]
    Exists { name: String, dir: PathBuf },
    #[error("invalid volume name {0:?}: use letters, digits, '-', '_' and '.' (at most 64)")]
    InvalidName(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a volume registry entry: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("assemble volume {name}: {source}")]
    Assemble {
        name: String,
        #[source]
        source: crate::VolumeError,
    },
    #[error("device {spec}: {source}")]
    Device {
        spec: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A directory of [`VolumeEntry`] files.
#[derive(Clone, Debug)]
pub struct VolumeRegistry {
    dir: PathBuf,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl VolumeRegistry {
    pub fn new(dir: impl Into<PathBuf>) -> VolumeRegistry {
        VolumeRegistry { dir: dir.into() }
    }

    /// `$FERROBAY_VOLUMES_DIR`, else `/var/lib/ferrobay/volumes`.
    pub fn default_dir() -> PathBuf {
        std::env::var_os(VOLUMES_DIR_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/lib/ferrobay/volumes"))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, name: &str) -> Result<PathBuf, RegistryError> {
        if !valid_name(name) {
            return Err(RegistryError::InvalidName(name.to_string()));
        }
        Ok(self.dir.join(format!("{name}.json")))
    }

    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RegistryError + '_ {
        move |source| RegistryError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Records a new volume; refuses to overwrite an existing entry unless `replace`.
    pub fn save(&self, entry: &VolumeEntry, replace: bool) -> Result<(), RegistryError> {
        let path = self.path(&entry.name)?;
        if !replace && path.exists() {
            return Err(RegistryError::Exists {
                name: entry.name.clone(),
                dir: self.dir.clone(),
            });
        }
        std::fs::create_dir_all(&self.dir).map_err(Self::io(&self.dir))?;
        let body = serde_json::to_vec_pretty(entry).map_err(|e| RegistryError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        // The entry is either old or new, also after a power cut.
        blockdev::write_atomic(&path, &body).map_err(Self::io(&path))
    }

    pub fn load(&self, name: &str) -> Result<VolumeEntry, RegistryError> {
        let path = self.path(name)?;
        let body = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(RegistryError::NotFound {
                    name: name.to_string(),
                    dir: self.dir.clone(),
                });
            }
            Err(e) => return Err(RegistryError::Io { path, source: e }),
        };
        let entry: VolumeEntry =
            serde_json::from_slice(&body).map_err(|e| RegistryError::Corrupt {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        if entry.name != name {
            return Err(RegistryError::Corrupt {
                path,
                reason: format!("it names volume {:?}", entry.name),
            });
        }
        Ok(entry)
    }

    /// Every entry, sorted by name; unreadable files are skipped with a warning.
    pub fn list(&self) -> Result<Vec<VolumeEntry>, RegistryError> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(RegistryError::Io {
                    path: self.dir.clone(),
                    source: e,
                });
            }
        };
        let mut out = Vec::new();
        for de in rd.flatten() {
            let file = de.file_name();
            let Some(name) = file.to_str().and_then(|f| f.strip_suffix(".json")) else {
                continue;
            };
            if !valid_name(name) {
                continue;
            }
            match self.load(name) {
                Ok(e) => out.push(e),
                Err(e) => tracing::warn!("skipping volume registry entry: {e}"),
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    pub fn remove(&self, name: &str) -> Result<(), RegistryError> {
        let path = self.path(name)?;
        std::fs::remove_file(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => RegistryError::NotFound {
                name: name.to_string(),
                dir: self.dir.clone(),
            },
            _ => RegistryError::Io {
                path: path.clone(),
                source: e,
            },
        })
    }
}

/// Opens device specs (`file:PATH[:SIZE]`, `/dev/...`, `ram:SIZE`) in order.
pub async fn open_devices(
    specs: &[String],
    engine: IoEngine,
) -> Result<Vec<Arc<dyn BlockDevice>>, RegistryError> {
    let mut out = Vec::with_capacity(specs.len());
    for s in specs {
        let spec = blockdev::parse_drive_spec(s).map_err(|e| RegistryError::Device {
            spec: s.clone(),
            source: Box::new(e),
        })?;
        let dev = blockdev::open_drive(&spec, engine)
            .await
            .map_err(|e| RegistryError::Device {
                spec: s.clone(),
                source: Box::new(e),
            })?;
        out.push(dev);
    }
    Ok(out)
}

/// Assembles the registered volume `name` from its member and spare devices.
pub async fn assemble_registered(
    registry: &VolumeRegistry,
    name: &str,
    engine: IoEngine,
    options: crate::EngineOptions,
) -> Result<(VolumeEntry, crate::Volume), RegistryError> {
    let entry = registry.load(name)?;
    let mut specs = entry.members.clone();
    specs.extend(entry.spares.iter().cloned());
    let devices = open_devices(&specs, engine).await?;
    let vol = crate::Volume::assemble_with(devices, options)
        .await
        .map_err(|source| RegistryError::Assemble {
            name: name.to_string(),
            source,
        })?;
    Ok((entry, vol))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> VolumeEntry {
        VolumeEntry {
            name: name.into(),
            uuid: uuid::Uuid::new_v4(),
            level: "raid5".into(),
            members: vec!["file:/a".into(), "file:/b".into(), "file:/c".into()],
            spares: vec![],
        }
    }

    #[test]
    fn save_load_list_remove() {
        let dir = tempfile::tempdir().unwrap();
        let r = VolumeRegistry::new(dir.path().join("vols"));
        assert!(r.list().unwrap().is_empty());
        let e = entry("v1");
        r.save(&e, false).unwrap();
        assert!(matches!(
            r.save(&e, false),
            Err(RegistryError::Exists { .. })
        ));
        r.save(&entry("v0"), false).unwrap();
        assert_eq!(r.load("v1").unwrap(), e);
        let names: Vec<_> = r.list().unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["v0", "v1"]);
        r.remove("v1").unwrap();
        assert!(matches!(r.load("v1"), Err(RegistryError::NotFound { .. })));
        assert!(matches!(
            r.load("../etc"),
            Err(RegistryError::InvalidName(_))
        ));
        let msg = r.load("nope").unwrap_err().to_string();
        assert!(
            msg.contains("ferrobay volume create") && !msg.contains('\n'),
            "{msg}"
        );
    }

    #[test]
    fn corrupt_entry_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let r = VolumeRegistry::new(dir.path());
        std::fs::write(dir.path().join("bad.json"), b"{not json").unwrap();
        assert!(matches!(r.load("bad"), Err(RegistryError::Corrupt { .. })));
        assert!(r.list().unwrap().is_empty());
    }
}
