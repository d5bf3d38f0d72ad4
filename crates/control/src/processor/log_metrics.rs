//! `/metrics` families of the log-layout volumes a node owns (`ferrobay_volume_log_*`):
//! compression, logical and stored bytes, the map, free segments (stripes) and garbage
//! collection, from `volume::LogStatus` at scrape time. Volumes in place have none.

use httpapi::metrics::{Column, Labels, Page, labels};
use volume::LogStatus;

/// Adds the families for `volumes` (name, status), labelled with `node` and `volume`.
pub(crate) fn add_log_families(page: &mut Page, node: &str, volumes: &[(String, LogStatus)]) {
    if volumes.is_empty() {
        return;
    }
    let rows: Vec<(Labels, &LogStatus)> = volumes
        .iter()
        .map(|(v, s)| (labels(&[("node", node), ("volume", v)]), s))
        .collect();
    let gauges: [Column<LogStatus>; 8] = [
        (
            "ferrobay_volume_log_logical_bytes",
            "Bytes of the mapped logical blocks of a log-layout volume (written, not deallocated).",
            |s| s.logical_bytes,
        ),
        (
            "ferrobay_volume_log_stored_bytes",
            "Bytes those blocks take in the log after compression (physical, before parity).",
            |s| s.physical_bytes,
        ),
        (
            "ferrobay_volume_log_map_entries",
            "Logical blocks in the indirection map.",
            |s| s.map_entries,
        ),
        (
            "ferrobay_volume_log_map_bytes",
            "Bytes a checkpoint of the map takes.",
            |s| s.map_bytes,
        ),
        (
            "ferrobay_volume_log_segments",
            "Log segments (full stripes of data) of the volume.",
            |s| s.segments_total,
        ),
        (
            "ferrobay_volume_log_segments_free",
            "Free log segments (full stripes a write can fill).",
            |s| s.segments_free,
        ),
        (
            "ferrobay_volume_log_segments_pending_free",
            "Log segments emptied since the last checkpoint (free after the next one).",
            |s| s.segments_pending_free,
        ),
        (
            "ferrobay_volume_log_segment_bytes",
            "Data bytes of one log segment.",
            |s| s.segment_bytes,
        ),
    ];
    page.gauges(&rows, &gauges);
    let f = page.gauge(
        "ferrobay_volume_log_compression_ratio",
        "Logical bytes / stored bytes of the mapped blocks (1 when nothing is stored).",
    );
    for (l, s) in &rows {
        f.add_labels_f64(l.clone(), s.compression_ratio);
    }
    let f = page.gauge(
        "ferrobay_volume_log_gc_write_amplification",
        "(Bytes stored for hosts + bytes garbage collection moved) / bytes stored for hosts since assembly.",
    );
    for (l, s) in &rows {
        f.add_labels_f64(l.clone(), s.gc_write_amplification);
    }
    let counters: [Column<LogStatus>; 5] = [
        (
            "ferrobay_volume_log_host_write_bytes_total",
            "Bytes hosts wrote to the log-layout volume since assembly.",
            |s| s.host_write_bytes,
        ),
        (
            "ferrobay_volume_log_segments_written_total",
            "Log segments written (full-stripe writes) since assembly.",
            |s| s.segments_written,
        ),
        (
            "ferrobay_volume_log_gc_segments_total",
            "Log segments garbage collection emptied since assembly.",
            |s| s.gc_segments,
        ),
        (
            "ferrobay_volume_log_gc_moved_bytes_total",
            "Stored bytes garbage collection moved since assembly.",
            |s| s.gc_moved_bytes,
        ),
        (
            "ferrobay_volume_log_checkpoints_total",
            "Map checkpoints written since assembly.",
            |s| s.checkpoints,
        ),
    ];
    page.counters(&rows, &counters);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_carry_the_figures_in_base_units() {
        let st = LogStatus {
            compression: volume::Compression::Zstd(3),
            block_bytes: 16384,
            logical_bytes: 3 << 20,
            physical_bytes: 1 << 20,
            compression_ratio: 3.0,
            map_entries: 192,
            map_bytes: 4096 + 192 * 32,
            segment_bytes: 131072,
            segments_total: 400,
            segments_free: 390,
            segments_pending_free: 2,
            checkpoints: 1,
            segments_written: 10,
            host_write_bytes: 3 << 20,
            gc_segments: 4,
            gc_moved_bytes: 65536,
            gc_write_amplification: 1.25,
        };
        let mut page = Page::new();
        add_log_families(&mut page, "p1", &[("v1".into(), st)]);
        let text = page.render();
        for line in [
            "ferrobay_volume_log_logical_bytes{node=\"p1\",volume=\"v1\"} 3145728",
            "ferrobay_volume_log_stored_bytes{node=\"p1\",volume=\"v1\"} 1048576",
            "ferrobay_volume_log_compression_ratio{node=\"p1\",volume=\"v1\"} 3.0",
            "ferrobay_volume_log_map_entries{node=\"p1\",volume=\"v1\"} 192",
            "ferrobay_volume_log_segments_free{node=\"p1\",volume=\"v1\"} 390",
            "ferrobay_volume_log_gc_write_amplification{node=\"p1\",volume=\"v1\"} 1.25",
            "ferrobay_volume_log_gc_moved_bytes_total{node=\"p1\",volume=\"v1\"} 65536",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert!(
            text.contains("# TYPE ferrobay_volume_log_gc_segments_total counter"),
            "{text}"
        );
        let mut empty = Page::new();
        add_log_families(&mut empty, "p1", &[]);
        assert!(!empty.render().contains("ferrobay_volume_log"));
    }
}
