//! The local volume registry: which devices make up each volume on this machine, like
//! `mdadm.conf`. One JSON file per volume in a directory; the volume's own truth stays in
//! its superblocks — the registry only says where to look for its devices.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use blockdev::{BlockDevice, BlockError, DriveSpec, IoEngine};
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

/// Why the registry could not answer. Every message is one line with its cause (see the
/// error convention in `error.rs`).
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("no volume named {name:?} in {dir} (create it with `ferrobay volume create`)")]
    NotFound { name: String, dir: PathBuf },
    #[error("volume {name:?} already exists in {dir}")]
    Exists { name: String, dir: PathBuf },
    #[error("invalid volume name {0:?}: use letters, digits, '-', '_' and '.' (at most 64)")]
    InvalidName(String),
    #[error("{path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{path}: not a volume registry entry: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("assemble volume {name}: {cause}")]
    Assemble {
        name: String,
        cause: crate::VolumeError,
    },
    #[error("examine volume {name}: {cause}")]
    Examine {
        name: String,
        cause: crate::VolumeError,
    },
    /// Too few current members to start the volume; nothing was written.
    #[error(
        "cannot assemble volume {name}: {shortfall}; {}",
        too_few_hint(name, shortfall, entry_path)
    )]
    TooFewMembers {
        name: String,
        shortfall: Box<crate::Shortfall>,
        /// The registry entry that lists the devices.
        entry_path: PathBuf,
    },
    #[error("cannot open any device of volume {name}: {}", problems.join("; "))]
    NoDevices { name: String, problems: Vec<String> },
    #[error("volume {name} has no member {arg:?}: {why}")]
    NoSuchMember {
        name: String,
        arg: String,
        why: String,
    },
    #[error("device {spec}: {cause}")]
    Device {
        spec: String,
        cause: Box<dyn std::error::Error + Send + Sync>,
    },
}

fn too_few_hint(name: &str, s: &crate::Shortfall, entry_path: &Path) -> String {
    let mut hint = format!(
        "bring the missing members back (their devices are listed in {})",
        entry_path.display()
    );
    if s.force_helps {
        hint += &format!(
            ", or run `ferrobay volume assemble {name} --force` to count {} as \
             current (regions written since they left may read stale data)",
            s.forceable_members()
        );
    }
    hint
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
        move |cause| RegistryError::Io {
            path: path.to_path_buf(),
            cause,
        }
    }

    /// The file that holds volume `name`'s entry.
    pub fn entry_path(&self, name: &str) -> Result<PathBuf, RegistryError> {
        self.path(name)
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
            Err(e) => return Err(RegistryError::Io { path, cause: e }),
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
                    cause: e,
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
                cause: e,
            },
        })
    }
}

/// Opens device specs (`file:PATH[:SIZE]`, `/dev/...`, `ram:SIZE`) in order; a
/// `file:PATH:SIZE` is created if missing (new members and spares).
pub async fn open_devices(
    specs: &[String],
    engine: IoEngine,
) -> Result<Vec<Arc<dyn BlockDevice>>, RegistryError> {
    let mut out = Vec::with_capacity(specs.len());
    for s in specs {
        let spec = blockdev::parse_drive_spec(s).map_err(|e| RegistryError::Device {
            spec: s.clone(),
            cause: Box::new(e),
        })?;
        let dev = blockdev::open_drive(&spec, engine)
            .await
            .map_err(|e| RegistryError::Device {
                spec: s.clone(),
                cause: Box::new(e),
            })?;
        out.push(dev);
    }
    Ok(out)
}

/// Opens the device of an existing member: never creates a file (a member file that is
/// gone is missing, not a new empty member).
async fn open_existing(spec: &str, engine: IoEngine) -> Result<Arc<dyn BlockDevice>, String> {
    let parsed = match blockdev::parse_drive_spec(spec).map_err(|e| e.to_string())? {
        DriveSpec::File { path, .. } => DriveSpec::File {
            path,
            create_size_bytes: None,
        },
        other => other,
    };
    blockdev::open_drive(&parsed, engine)
        .await
        .map_err(|e| match e {
            BlockError::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
                "no such file or device".to_string()
            }
            other => other.to_string(),
        })
}

/// The key a spec is compared by: the path of a file or block device, else the spec.
fn spec_key(spec: &str) -> String {
    match blockdev::parse_drive_spec(spec) {
        Ok(DriveSpec::File { path, .. } | DriveSpec::BlockDevice { path }) => {
            path.display().to_string()
        }
        _ => spec.to_string(),
    }
}

/// A registered volume's devices, opened for an existing volume.
struct Opened {
    devices: Vec<Arc<dyn BlockDevice>>,
    /// Specs that could not be opened, with why.
    failed: Vec<(String, String)>,
}

async fn open_entry(entry: &VolumeEntry, engine: IoEngine) -> Result<Opened, RegistryError> {
    let mut opened = Opened {
        devices: Vec::new(),
        failed: Vec::new(),
    };
    for spec in entry.members.iter().chain(&entry.spares) {
        match open_existing(spec, engine).await {
            Ok(d) => opened.devices.push(d),
            Err(why) => opened.failed.push((spec.clone(), why)),
        }
    }
    if opened.devices.is_empty() {
        return Err(RegistryError::NoDevices {
            name: entry.name.clone(),
            problems: opened
                .failed
                .iter()
                .map(|(s, why)| format!("{s}: {why}"))
                .collect(),
        });
    }
    Ok(opened)
}

impl Opened {
    /// Why `spec` could not be opened, if it could not.
    fn failure(&self, spec: &str) -> Option<&str> {
        self.failed
            .iter()
            .find(|(s, _)| s == spec)
            .map(|(_, why)| why.as_str())
    }

    /// Slots without a device: the spec the registry lists for them, and why it could
    /// not be opened.
    fn annotate(&self, entry: &VolumeEntry, shortfall: &mut crate::Shortfall) {
        for slot in shortfall.slots.iter_mut().filter(|s| s.device.is_none()) {
            let Some(spec) = entry.members.get(slot.index) else {
                continue;
            };
            if let Some(why) = self.failure(spec) {
                slot.problem = Some(format!("cannot open: {why}"));
            }
            slot.device = Some(spec.clone());
        }
    }
}

/// Assembles the registered volume `name` from its member and spare devices. Members
/// whose device cannot be opened count as missing: the volume starts degraded while the
/// layout tolerates it (the members are marked failed), and otherwise the error says
/// which members are there, which are not and why.
pub async fn assemble_registered(
    registry: &VolumeRegistry,
    name: &str,
    engine: IoEngine,
    options: crate::EngineOptions,
) -> Result<(VolumeEntry, crate::Volume), RegistryError> {
    let entry = registry.load(name)?;
    let opened = open_entry(&entry, engine).await?;
    match crate::Volume::assemble_with(opened.devices.clone(), options).await {
        Ok(vol) => {
            for (spec, why) in &opened.failed {
                vol.add_note(format!("{spec}: cannot open: {why}"));
            }
            let entry = match synced_entry(&entry, &vol.status()) {
                Some(new) => match registry.save(&new, true) {
                    Ok(()) => new,
                    Err(e) => {
                        tracing::warn!(volume = name, "registry entry not updated: {e}");
                        entry
                    }
                },
                None => entry,
            };
            Ok((entry, vol))
        }
        Err(crate::VolumeError::TooFewMembers(mut shortfall)) => {
            opened.annotate(&entry, &mut shortfall);
            Err(RegistryError::TooFewMembers {
                name: name.to_string(),
                shortfall,
                entry_path: registry.path(name)?,
            })
        }
        Err(cause) => Err(RegistryError::Assemble {
            name: name.to_string(),
            cause,
        }),
    }
}

/// `entry` brought in line with the volume's membership after an assembly (a spare
/// that took a slot is listed as that member, a replaced device is dropped); `None` if
/// nothing changed. A slot without a device keeps its spec, so that its device is
/// looked for again.
fn synced_entry(entry: &VolumeEntry, status: &crate::VolumeStatus) -> Option<VolumeEntry> {
    let specs: Vec<&String> = entry.members.iter().chain(&entry.spares).collect();
    let spec_of = |device: &str| {
        specs
            .iter()
            .find(|s| spec_key(s) == device)
            .map(|s| (*s).clone())
    };
    let members: Vec<String> = status
        .members
        .iter()
        .map(|m| {
            m.device
                .as_deref()
                .and_then(spec_of)
                .or_else(|| entry.members.get(m.index).cloned())
                .unwrap_or_default()
        })
        .collect();
    let spares: Vec<String> = status
        .spares
        .iter()
        .filter_map(|m| m.device.as_deref().and_then(spec_of))
        .collect();
    if members.iter().any(String::is_empty) || (members == entry.members && spares == entry.spares)
    {
        return None;
    }
    Some(VolumeEntry {
        members,
        spares,
        ..entry.clone()
    })
}

/// The registered volume `name` as its devices describe it ([`crate::Volume::examine`]),
/// without writing anything. A member without a device shows the spec the registry lists
/// for it; devices that cannot be opened are in the notes.
pub async fn examine_registered(
    registry: &VolumeRegistry,
    name: &str,
    engine: IoEngine,
) -> Result<(VolumeEntry, crate::VolumeStatus), RegistryError> {
    let entry = registry.load(name)?;
    let opened = open_entry(&entry, engine).await?;
    let found = crate::Volume::examine(opened.devices.clone())
        .await
        .map_err(|cause| RegistryError::Examine {
            name: name.to_string(),
            cause,
        })?;
    let mut st = found.status;
    for m in st.members.iter_mut().filter(|m| m.device.is_none()) {
        if let Some(spec) = entry.members.get(m.index) {
            m.device = Some(spec.clone());
        }
    }
    for (spec, why) in &opened.failed {
        st.notes.push(format!("{spec}: cannot open: {why}"));
    }
    if let Some(mut shortfall) = found.shortfall {
        opened.annotate(&entry, &mut shortfall);
        let refusal = RegistryError::TooFewMembers {
            name: name.to_string(),
            shortfall: Box::new(shortfall),
            entry_path: registry.path(name)?,
        };
        st.notes.push(refusal.to_string());
    }
    Ok((entry, st))
}

/// Which slot `arg` names: an index, or the spec of a member's device (the device it
/// has now, or, for a slot without one, the spec the registry lists for it, or any
/// device whose superblock says it is that member).
pub async fn resolve_member(
    entry: &VolumeEntry,
    status: &crate::VolumeStatus,
    arg: &str,
    engine: IoEngine,
) -> Result<usize, RegistryError> {
    let no_such = |why: String| RegistryError::NoSuchMember {
        name: entry.name.clone(),
        arg: arg.to_string(),
        why,
    };
    let slots = status.members.len();
    if let Ok(i) = arg.parse::<usize>() {
        return if i < slots {
            Ok(i)
        } else {
            Err(no_such(format!(
                "it has {slots} members, 0 to {}",
                slots - 1
            )))
        };
    }
    let key = spec_key(arg);
    if let Some(m) = status
        .members
        .iter()
        .find(|m| m.device.as_deref().is_some_and(|d| spec_key(d) == key))
    {
        return Ok(m.index);
    }
    if let Some(i) = (0..slots).find(|&i| {
        status.members[i].device.is_none()
            && entry.members.get(i).is_some_and(|s| spec_key(s) == key)
    }) {
        return Ok(i);
    }
    if let Ok(dev) = open_existing(arg, engine).await
        && let Ok(Some(p)) = crate::probe_device(&*dev).await
        && p.volume_uuid == status.uuid
        && let Some(m) = status.members.iter().find(|m| m.uuid == p.member_uuid)
    {
        return Ok(m.index);
    }
    let known: Vec<String> = status
        .members
        .iter()
        .map(|m| {
            let dev = m
                .device
                .clone()
                .or_else(|| entry.members.get(m.index).cloned())
                .unwrap_or_else(|| "-".into());
            format!("{} {dev}", m.index)
        })
        .collect();
    Err(no_such(format!(
        "it is not the device of any member (members: {})",
        known.join(", ")
    )))
}

/// The device of failed member `member` for a re-add: the device `arg` names (a spec),
/// or for an index the registered device whose superblock says it is that member.
/// Returns the spec and the opened device.
pub async fn member_device(
    entry: &VolumeEntry,
    status: &crate::VolumeStatus,
    member: usize,
    arg: &str,
    engine: IoEngine,
) -> Result<(String, Arc<dyn BlockDevice>), RegistryError> {
    let device_err = |spec: &str, why: String| RegistryError::Device {
        spec: spec.to_string(),
        cause: why.into(),
    };
    if arg.parse::<usize>().is_err() {
        let dev = open_existing(arg, engine)
            .await
            .map_err(|why| device_err(arg, why))?;
        return Ok((arg.to_string(), dev));
    }
    let Some(want) = status.members.get(member).map(|m| m.uuid) else {
        return Err(RegistryError::NoSuchMember {
            name: entry.name.clone(),
            arg: arg.to_string(),
            why: "out of range".into(),
        });
    };
    let mut tried = Vec::new();
    for spec in entry.members.iter().chain(&entry.spares) {
        match open_existing(spec, engine).await {
            Ok(dev) => match crate::probe_device(&*dev).await {
                Ok(Some(p)) if p.volume_uuid == status.uuid && p.member_uuid == want => {
                    return Ok((spec.clone(), dev));
                }
                _ => {}
            },
            Err(why) => tried.push(format!("{spec}: {why}")),
        }
    }
    Err(RegistryError::NoSuchMember {
        name: entry.name.clone(),
        arg: arg.to_string(),
        why: format!(
            "none of the registered devices holds member {member}{}; name its device instead \
             of the index",
            if tried.is_empty() {
                String::new()
            } else {
                format!(" ({})", tried.join("; "))
            }
        ),
    })
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

    fn member(index: usize, device: Option<&str>) -> crate::MemberStatus {
        crate::MemberStatus {
            index,
            uuid: uuid::Uuid::from_u128(index as u128 + 1),
            device: device.map(str::to_string),
            state: crate::MemberState::Active,
            failure_domain: String::new(),
            rebuild_offset_bytes: 0,
            valid_bytes: 0,
            failed_by_operator: false,
            missing: false,
            replaces: None,
        }
    }

    fn status(
        members: Vec<crate::MemberStatus>,
        spares: Vec<crate::MemberStatus>,
    ) -> crate::VolumeStatus {
        crate::VolumeStatus {
            name: "v1".into(),
            uuid: uuid::Uuid::nil(),
            layout: crate::LayoutParams::raid5(3),
            size_bytes: 0,
            logical_block_bytes: 512,
            member_data_bytes: 0,
            data_offset_bytes: 0,
            state: crate::VolumeState::Healthy,
            generation: 1,
            clean: true,
            members,
            spares,
            region_bytes: 0,
            region_count: 0,
            dirty_regions: 0,
            rebuild: None,
            copy: None,
            last_scrub: None,
            scrub: None,
            last_resync: None,
            resync: None,
            notes: vec![],
            read_bytes: 0,
            write_bytes: 0,
            log: None,
        }
    }

    /// A spare that took slot 1 becomes member 1 of the entry; the replaced device goes;
    /// a slot without a device keeps its spec.
    #[test]
    fn entry_follows_the_membership() {
        let e = VolumeEntry {
            spares: vec!["file:/s:1G".into()],
            members: vec!["file:/a:1G".into(), "file:/b:1G".into(), "file:/c".into()],
            ..entry("v1")
        };
        let st = status(
            vec![
                member(0, Some("/a")),
                member(1, Some("/s")),
                member(2, None),
            ],
            vec![],
        );
        let new = synced_entry(&e, &st).unwrap();
        assert_eq!(new.members, ["file:/a:1G", "file:/s:1G", "file:/c"]);
        assert!(new.spares.is_empty());
        let same = status(
            vec![
                member(0, Some("/a")),
                member(1, Some("/b")),
                member(2, None),
            ],
            vec![member(0, Some("/s"))],
        );
        assert_eq!(synced_entry(&e, &same), None);
    }

    #[tokio::test]
    async fn members_by_index_or_device() {
        let e = entry("v1");
        let st = status(
            vec![
                member(0, Some("/a")),
                member(1, None),
                member(2, Some("/c")),
            ],
            vec![],
        );
        let engine = IoEngine::ThreadPool;
        assert_eq!(resolve_member(&e, &st, "2", engine).await.unwrap(), 2);
        assert_eq!(resolve_member(&e, &st, "file:/c", engine).await.unwrap(), 2);
        assert_eq!(
            resolve_member(&e, &st, "file:/a:1G", engine).await.unwrap(),
            0
        );
        // Member 1 has no device now: the spec the registry lists for it.
        assert_eq!(resolve_member(&e, &st, "file:/b", engine).await.unwrap(), 1);
        let err = resolve_member(&e, &st, "3", engine)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("has no member \"3\": it has 3 members, 0 to 2"),
            "{err}"
        );
        let err = resolve_member(&e, &st, "file:/zz", engine)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not the device of any member (members: 0 /a, 1 file:/b, 2 /c)"),
            "{err}"
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
