//! Text views of API answers for the CLI (tables like `nvme list`; `--json` prints the
//! answers themselves).

use storage_node::text::{table, unix_ms_text};

use super::NodePredictions;
use crate::records::NodeRole;

/// Every graded drive and volume member of the cluster, worst first, then nodes that did
/// not answer: `ferrobay predictions`.
pub fn cluster_predictions_text(nodes: &[NodePredictions]) -> String {
    let mut rows: Vec<(telemetry::Grade, Vec<String>)> = Vec::new();
    for n in nodes {
        let role = match n.role {
            NodeRole::Storage => "storage",
            NodeRole::Processor => "processor",
        };
        for d in &n.drives {
            rows.push((
                d.prediction.grade,
                row(&n.node, role, &format!("drive {}", d.drive), &d.prediction),
            ));
        }
        for m in &n.members {
            let what = format!(
                "{} member {}{}",
                m.volume,
                m.member,
                if m.proactive_copy { " (copying)" } else { "" }
            );
            rows.push((m.prediction.grade, row(&n.node, role, &what, &m.prediction)));
        }
    }
    // Worst first; the listing order within a grade.
    rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    let rows: Vec<Vec<String>> = rows.into_iter().map(|(_, r)| r).collect();
    let mut out = table(
        &["NODE", "ROLE", "GRADED", "GRADE", "SINCE", "REASON"],
        &rows,
    );
    for n in nodes {
        if let Some(e) = &n.error {
            out.push_str(&format!("node {}: not asked: {e}\n", n.node));
        }
    }
    out
}

fn row(node: &str, role: &str, what: &str, p: &storage_node::api::Prediction) -> Vec<String> {
    vec![
        node.to_string(),
        role.to_string(),
        what.to_string(),
        p.grade.to_string(),
        p.since_unix_ms
            .map_or_else(|| "-".to_string(), unix_ms_text),
        if p.reason.is_empty() {
            "-".to_string()
        } else {
            p.reason.clone()
        },
    ]
}
