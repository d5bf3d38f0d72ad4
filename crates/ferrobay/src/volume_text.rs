//! How a local volume reads on a terminal: `mdadm --detail` style, the same shape as the
//! cluster volume status (`volume_cluster_cmd`), sizes humanized (exact bytes in --json).

use volume::{MemberState, MemberStatus, VolumeState, VolumeStatus};

use crate::cluster::human_bytes;

fn volume_state_text(s: &VolumeStatus) -> String {
    let out = s.members.iter().filter(|m| !member_counts(m)).count();
    match s.state {
        VolumeState::Healthy if s.clean => "healthy, clean".to_string(),
        VolumeState::Healthy => {
            "healthy, not cleanly stopped (dirty regions resync at the next assembly)".to_string()
        }
        VolumeState::Degraded => format!(
            "degraded ({out} of {} members out of service)",
            s.members.len()
        ),
        VolumeState::Rebuilding => "rebuilding".to_string(),
        VolumeState::Failed => format!(
            "failed ({out} of {} members out of service, the layout survives {})",
            s.members.len(),
            s.layout.tolerance()
        ),
        VolumeState::Stopped => "stopped".to_string(),
        VolumeState::Fenced => "fenced".to_string(),
    }
}

/// In service with its device present.
fn member_counts(m: &MemberStatus) -> bool {
    m.state == MemberState::Active && !m.missing
}

/// `active`, `rebuilding`, `missing`, `failed`, `failed (operator)`, `spare`.
pub fn member_state_text(m: &MemberStatus) -> &'static str {
    match m.state {
        MemberState::Failed if m.failed_by_operator => "failed (operator)",
        MemberState::Failed => "failed",
        _ if m.missing => "missing",
        MemberState::Active => "active",
        MemberState::Rebuilding => "rebuilding",
        MemberState::Spare => "spare",
        MemberState::Replacing => "replacing",
    }
}

fn percent(done: u64, total: u64) -> String {
    if total == 0 {
        "100%".to_string()
    } else {
        format!("{:.1}%", done as f64 * 100.0 / total as f64)
    }
}

/// The detail view of a local volume, every line ending in a newline.
pub fn status_text(s: &VolumeStatus) -> String {
    let mut out = String::new();
    let mut line = |k: &str, val: String| out += &format!("{k:>16} : {val}\n");
    line("Name", s.name.clone());
    line("UUID", s.uuid.to_string());
    line("Level", s.layout.to_string());
    line(
        "Size",
        format!("{} ({} bytes)", human_bytes(s.size_bytes), s.size_bytes),
    );
    line(
        "Member Data",
        format!(
            "{} per member from offset {}",
            human_bytes(s.member_data_bytes),
            human_bytes(s.data_offset_bytes)
        ),
    );
    if let Some(l) = &s.log {
        for (k, v) in log_status_lines(l) {
            line(k, v);
        }
    }
    line("State", volume_state_text(s));
    line("Generation", s.generation.to_string());
    line(
        "Dirty Regions",
        format!(
            "{} of {} ({} each)",
            s.dirty_regions,
            s.region_count,
            human_bytes(s.region_bytes)
        ),
    );
    if let Some(p) = &s.rebuild {
        line(
            "Rebuild",
            format!(
                "member {}: {} ({} of {}){}{}",
                p.member,
                percent(p.bytes_done, p.bytes_total),
                human_bytes(p.bytes_done),
                human_bytes(p.bytes_total),
                match (p.partial, p.in_use_only) {
                    (true, true) => ", dirty regions in use only",
                    (true, false) => ", dirty regions only",
                    (false, true) => ", segments in use only",
                    (false, false) => "",
                },
                p.eta_secs
                    .map_or_else(String::new, |e| format!(", ETA {e:.0} s"))
            ),
        );
    }
    if let Some(p) = &s.copy {
        line(
            "Copy",
            format!(
                "member {} onto {}: {} ({} of {}), {:?}",
                p.member,
                p.target,
                percent(p.bytes_done, p.bytes_total),
                human_bytes(p.bytes_done),
                human_bytes(p.bytes_total),
                p.phase
            ),
        );
    }
    if let Some(p) = &s.scrub {
        line(
            "Scrub",
            format!(
                "{} ({} of {}), {}/s",
                percent(p.bytes_done, p.bytes_total),
                human_bytes(p.bytes_done),
                human_bytes(p.bytes_total),
                human_bytes(p.rate_bytes_per_sec as u64)
            ),
        );
    }
    if let Some(r) = s.last_resync.as_ref().filter(|r| r.regions > 0) {
        line(
            "Last Resync",
            format!(
                "{} regions ({}), {} stripes rewritten, {:.2} s",
                r.regions,
                human_bytes(r.bytes_resynced),
                r.stripes_rewritten,
                r.duration_secs
            ),
        );
    }
    out += &format!(
        "\n{:>4}  {:<18} {:<8} {:<10} {}\n",
        "#", "STATE", "REBUILT", "DOMAIN", "DEVICE"
    );
    let domain = |m: &MemberStatus| {
        if m.failure_domain.is_empty() {
            "-".to_string()
        } else {
            m.failure_domain.clone()
        }
    };
    for m in &s.members {
        let rebuilt = if m.state == MemberState::Rebuilding {
            percent(m.rebuild_offset_bytes, s.member_data_bytes)
        } else {
            "-".to_string()
        };
        out += &format!(
            "{:>4}  {:<18} {:<8} {:<10} {}\n",
            m.index,
            member_state_text(m),
            rebuilt,
            domain(m),
            m.device.as_deref().unwrap_or("-")
        );
    }
    for m in &s.spares {
        let (state, copied) = match m.replaces {
            Some(slot) => (
                format!("replacing {slot}"),
                percent(m.rebuild_offset_bytes, s.member_data_bytes),
            ),
            None => ("spare".to_string(), "-".to_string()),
        };
        out += &format!(
            "{:>4}  {:<18} {:<8} {:<10} {}\n",
            format!("s{}", m.index),
            state,
            copied,
            domain(m),
            m.device.as_deref().unwrap_or("-")
        );
    }
    for n in &s.notes {
        out += &format!("note: {n}\n");
    }
    out
}

/// The log layout's figures as status lines (local and cluster volumes alike).
pub fn log_status_lines(l: &volume::LogStatus) -> Vec<(&'static str, String)> {
    vec![
        (
            "Layout",
            format!(
                "log, compression {}, {} blocks",
                l.compression,
                human_bytes(u64::from(l.block_bytes))
            ),
        ),
        (
            "Compression",
            format!(
                "{:.2}x: {} logical in {} stored",
                l.compression_ratio,
                human_bytes(l.logical_bytes),
                human_bytes(l.physical_bytes)
            ),
        ),
        (
            "Map",
            format!(
                "{} blocks mapped ({} per checkpoint)",
                l.map_entries,
                human_bytes(l.map_bytes)
            ),
        ),
        (
            "Stripes",
            format!(
                "{} free of {} ({} pending the next checkpoint), {} each",
                l.segments_free,
                l.segments_total,
                l.segments_pending_free,
                human_bytes(l.segment_bytes)
            ),
        ),
        (
            "GC",
            format!(
                "{} stripes cleaned, {} moved, write amplification {:.2}",
                l.gc_segments,
                human_bytes(l.gc_moved_bytes),
                l.gc_write_amplification
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use volume::LayoutParams;

    fn status() -> VolumeStatus {
        let member = |i: usize, state: MemberState| MemberStatus {
            index: i,
            uuid: Default::default(),
            device: Some(format!("/tmp/m{i}.img")),
            state,
            failure_domain: String::new(),
            rebuild_offset_bytes: 0,
            valid_bytes: 0,
            failed_by_operator: false,
            missing: false,
            replaces: None,
        };
        VolumeStatus {
            name: "v6".into(),
            uuid: Default::default(),
            layout: LayoutParams::raid6(4),
            size_bytes: 110 << 20,
            logical_block_bytes: 4096,
            member_data_bytes: 55 << 20,
            data_offset_bytes: 9 << 20,
            state: VolumeState::Degraded,
            generation: 3,
            clean: false,
            members: vec![
                member(0, MemberState::Active),
                MemberStatus {
                    failed_by_operator: true,
                    ..member(1, MemberState::Failed)
                },
                MemberStatus {
                    missing: true,
                    device: Some("file:/tmp/m2.img".into()),
                    ..member(2, MemberState::Active)
                },
                MemberStatus {
                    rebuild_offset_bytes: 11 << 20,
                    ..member(3, MemberState::Rebuilding)
                },
            ],
            spares: vec![],
            region_bytes: 64 << 20,
            region_count: 1,
            dirty_regions: 1,
            rebuild: None,
            copy: None,
            last_scrub: None,
            scrub: None,
            last_resync: None,
            resync: None,
            notes: vec!["member 2 is missing".into()],
            read_bytes: 0,
            write_bytes: 0,
            log: None,
        }
    }

    #[test]
    fn reads_like_mdadm_detail() {
        let t = status_text(&status());
        assert!(
            t.contains("           Level : raid6 (2+2), 4 members, stripe unit 64 KiB\n"),
            "{t}"
        );
        assert!(
            t.contains("            Size : 110.0 MiB (115343360 bytes)\n"),
            "{t}"
        );
        assert!(
            t.contains("State : degraded (3 of 4 members out of service)"),
            "{t}"
        );
        assert!(t.contains("   1  failed (operator)"), "{t}");
        assert!(t.contains("   2  missing            -"), "{t}");
        assert!(t.contains("   3  rebuilding         20.0%"), "{t}");
        assert!(t.ends_with("note: member 2 is missing\n"), "{t}");
        assert!(!t.contains("LayoutParams") && !t.contains("Raid6"), "{t}");
    }
}
