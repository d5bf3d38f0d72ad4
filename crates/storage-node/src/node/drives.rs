//! Matching the drives given at start against the node state, and opening them.

use std::sync::Arc;

use blockdev::{BlockDevice, DriveSpec, IoEngine, open_drive, parse_drive_spec};

use crate::naming::{self, NodeDrive};
use crate::state::{DriveRecord, NodeState};

use super::NodeError;

/// A drive to open: known to the state already, or new.
#[derive(Debug, Clone)]
pub(crate) struct PlannedDrive {
    pub name: String,
    pub spec: DriveSpec,
    pub known: Option<DriveRecord>,
}

/// An opened drive.
pub(crate) struct OpenedDrive {
    pub plan: PlannedDrive,
    pub device: Arc<dyn BlockDevice>,
}

fn drive_err(name: &str, spec: &str, reason: impl Into<String>) -> NodeError {
    NodeError::Drive {
        name: name.into(),
        spec: spec.into(),
        reason: reason.into(),
    }
}

/// Decides which drives to open. With no drives given, every drive of the state comes
/// back. Otherwise every state drive must be given again (same name and spec, in any
/// order); drives not in the state are new. Names default to `d<position>`.
pub(crate) fn plan(state: &NodeState, given: &[NodeDrive]) -> Result<Vec<PlannedDrive>, NodeError> {
    if given.is_empty() {
        if state.drives.is_empty() {
            return Err(NodeError::Config(
                "no drives: give at least one drive (e.g. ram:1G or file:/path:100G)".into(),
            ));
        }
        return state
            .drives
            .iter()
            .map(|d| {
                let spec = parse_drive_spec(&d.spec).map_err(|e| {
                    drive_err(&d.name, &d.spec, format!("state holds a bad spec: {e}"))
                })?;
                Ok(PlannedDrive {
                    name: d.name.clone(),
                    spec,
                    known: Some(d.clone()),
                })
            })
            .collect();
    }
    let mut out: Vec<PlannedDrive> = Vec::with_capacity(given.len());
    for (i, g) in given.iter().enumerate() {
        let name = g
            .name
            .clone()
            .unwrap_or_else(|| naming::default_drive_name(i));
        naming::validate_name(&name)?;
        let spec_str = g.spec.to_string();
        if out.iter().any(|p| p.name == name) {
            return Err(drive_err(&name, &spec_str, "name given twice"));
        }
        if out.iter().any(|p| p.spec == g.spec) {
            return Err(drive_err(&name, &spec_str, "drive given twice"));
        }
        let known = match state.drive_by_name(&name) {
            Some(d) if d.spec == spec_str => Some(d.clone()),
            Some(d) => {
                return Err(drive_err(
                    &name,
                    &spec_str,
                    format!(
                        "the node state has {} as drive {name}; give the same drive again",
                        d.spec
                    ),
                ));
            }
            None => {
                if let Some(d) = state.drives.iter().find(|d| d.spec == spec_str) {
                    return Err(drive_err(
                        &name,
                        &spec_str,
                        format!(
                            "this drive is drive {} in the node state; name it {}={spec_str}",
                            d.name, d.name
                        ),
                    ));
                }
                None
            }
        };
        out.push(PlannedDrive {
            name,
            spec: g.spec.clone(),
            known,
        });
    }
    let missing: Vec<String> = state
        .drives
        .iter()
        .filter(|d| !out.iter().any(|p| p.name == d.name))
        .map(|d| format!("{}={}", d.name, d.spec))
        .collect();
    if !missing.is_empty() {
        return Err(NodeError::Config(format!(
            "drives in the node state were not given: {} (give them again, or give no drives to bring up the state as it is)",
            missing.join(", ")
        )));
    }
    Ok(out)
}

/// Opens the planned drives and checks known ones still look as the state says. A known
/// file drive whose file vanished is an error, never silently re-created empty.
pub(crate) async fn open_all(
    plans: Vec<PlannedDrive>,
    engine: IoEngine,
    volumes: &volume::registry::VolumeRegistry,
) -> Result<Vec<OpenedDrive>, NodeError> {
    let mut out = Vec::with_capacity(plans.len());
    for plan in plans {
        let spec_str = plan.spec.to_string();
        if let (Some(_), DriveSpec::File { path, .. } | DriveSpec::BlockDevice { path }) =
            (&plan.known, &plan.spec)
        {
            match path.try_exists() {
                Ok(true) => {}
                Ok(false) => {
                    return Err(drive_err(
                        &plan.name,
                        &spec_str,
                        format!(
                            "{} has vanished; it holds this node's namespaces",
                            path.display()
                        ),
                    ));
                }
                Err(e) => return Err(drive_err(&plan.name, &spec_str, e.to_string())),
            }
        }
        let device = match &plan.spec {
            // A local volume: assembled from the devices its registry entry lists.
            DriveSpec::Volume { name } => {
                let (_, vol) = volume::registry::assemble_registered(
                    volumes,
                    name,
                    engine,
                    volume::EngineOptions::default(),
                )
                .await
                .map_err(|e| drive_err(&plan.name, &spec_str, format!("cannot assemble: {e}")))?;
                Arc::new(vol) as Arc<dyn BlockDevice>
            }
            _ => open_drive(&plan.spec, engine)
                .await
                .map_err(|e| drive_err(&plan.name, &spec_str, format!("cannot open: {e}")))?,
        };
        let info = device.info();
        if let Some(known) = &plan.known {
            if info.size_bytes != known.size_bytes {
                return Err(drive_err(
                    &plan.name,
                    &spec_str,
                    format!(
                        "size changed: {} bytes in the node state, {} bytes now",
                        known.size_bytes, info.size_bytes
                    ),
                ));
            }
            if info.logical_block_bytes != known.block_size_bytes {
                return Err(drive_err(
                    &plan.name,
                    &spec_str,
                    format!(
                        "logical block size changed: {} in the node state, {} now",
                        known.block_size_bytes, info.logical_block_bytes
                    ),
                ));
            }
        }
        out.push(OpenedDrive { plan, device });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;
    use crate::naming::parse_node_drive;

    /// A registry nobody looks into (no `volume:` drives in these tests).
    fn no_volumes() -> volume::registry::VolumeRegistry {
        volume::registry::VolumeRegistry::new("/nonexistent/volumes")
    }

    fn state_with(drives: &[(&str, &str)]) -> NodeState {
        let mut s = NodeState::new("n1", Uuid::nil());
        for (i, (name, spec)) in drives.iter().enumerate() {
            s.drives.push(DriveRecord {
                name: name.to_string(),
                spec: spec.to_string(),
                uuid: Uuid::from_u128(i as u128 + 1),
                size_bytes: 1 << 30,
                block_size_bytes: 512,
                serial: String::new(),
            });
        }
        s
    }

    fn given(specs: &[&str]) -> Vec<NodeDrive> {
        specs.iter().map(|s| parse_node_drive(s).unwrap()).collect()
    }

    #[test]
    fn plans() {
        let s = state_with(&[("d0", "ram:1G"), ("fast", "file:/x:1G")]);
        // Same drives again, in another order with names.
        let p = plan(&s, &given(&["fast=file:/x:1G", "d1=ram:1G"]))
            .unwrap_err()
            .to_string();
        assert!(
            p.contains("this drive is drive d0 in the node state; name it d0=ram:1G"),
            "{p}"
        );
        let p = plan(&s, &given(&["ram:1G", "fast=file:/x:1G", "ram:2G"])).unwrap();
        assert_eq!(p.len(), 3);
        assert!(p[0].known.is_some() && p[1].known.is_some() && p[2].known.is_none());
        assert_eq!(p[2].name, "d2");
        // Nothing given: the state's drives.
        assert_eq!(plan(&s, &[]).unwrap().len(), 2);
        assert!(
            plan(&state_with(&[]), &[])
                .unwrap_err()
                .to_string()
                .starts_with("no drives")
        );
        let e = plan(&s, &given(&["ram:1G"])).unwrap_err().to_string();
        assert!(e.contains("were not given: fast=file:/x:1G"), "{e}");
        let e = plan(&s, &given(&["ram:2G", "fast=file:/x:1G"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("the node state has ram:1G as drive d0"), "{e}");
        let e = plan(&state_with(&[]), &given(&["ram:1G", "a=ram:1G"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("drive given twice"), "{e}");
    }

    #[tokio::test]
    async fn vanished_file_and_changed_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.img");
        let spec = format!("file:{}:4M", path.display());
        let mut s = state_with(&[("d0", &spec)]);
        let e = open_all(plan(&s, &[]).unwrap(), IoEngine::Auto, &no_volumes())
            .await
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            e,
            format!(
                "drive d0 ({spec}): {} has vanished; it holds this node's namespaces",
                path.display()
            )
        );
        // A new drive is created; learn what the backend reports.
        let fresh = open_all(
            plan(&state_with(&[]), &given(&[&spec])).unwrap(),
            IoEngine::Auto,
            &no_volumes(),
        )
        .await
        .unwrap();
        let info = fresh[0].device.info().clone();
        drop(fresh);
        assert_eq!(info.size_bytes, 4 << 20);
        let e = open_all(plan(&s, &[]).unwrap(), IoEngine::Auto, &no_volumes())
            .await
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            e,
            format!(
                "drive d0 ({spec}): size changed: 1073741824 bytes in the node state, 4194304 bytes now"
            )
        );
        s.drives[0].size_bytes = info.size_bytes;
        s.drives[0].block_size_bytes = info.logical_block_bytes;
        let o = open_all(plan(&s, &[]).unwrap(), IoEngine::Auto, &no_volumes())
            .await
            .unwrap();
        assert!(o[0].plan.known.is_some());
    }
}
