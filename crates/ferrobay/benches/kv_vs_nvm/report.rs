//! The JSON document and the table.

use serde_json::{Value, json};

use crate::settings::Settings;

/// Version of the JSON layout.
const SCHEMA: &str = "ferrobay.bench.kv_vs_nvm/1";

pub fn document(s: &Settings, media: Vec<Value>) -> Value {
    json!({
        "schema": SCHEMA,
        "full": s.full,
        "run_secs": s.run.as_secs_f64(),
        "rounds": s.rounds,
        "cpus": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "load_average": std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_default(),
        "media": media,
    })
}

const PAIRS: [(&str, &str, &str, &str); 3] = [
    (
        "store_1m_qd8",
        "nvm_seq_write_1m_qd8",
        "kv_store_1m_qd8",
        "1 MiB Store QD8 vs seq write",
    ),
    (
        "retrieve_4k_qd32",
        "nvm_rand_read_4k_qd32",
        "kv_retrieve_4k_qd32",
        "4 KiB Retrieve QD32 vs rand read",
    ),
    (
        "store_4k_qd32",
        "nvm_seq_write_4k_qd32_flush_per_32",
        "kv_store_4k_qd32",
        "4 KiB Store QD32 vs write+flush/32",
    ),
];

/// One line per pair and medium.
pub fn table(doc: &Value) -> String {
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    let mut out = String::new();
    for m in doc["media"].as_array().into_iter().flatten() {
        let medium = m["medium"].as_str().unwrap_or("?");
        for (key, nvm, kv, name) in PAIRS {
            let p = &m[key];
            let (unit, field) = if p["figure"] == "mb_per_s" {
                ("MB/s", "median_mb_per_s")
            } else {
                ("IOPS", "median_iops")
            };
            out += &format!(
                "{medium:<4} {name:<36} kv {:>9.1} {unit}  nvm {:>9.1} {unit}  ratio {:.2} (goal >= 0.9)  p99 kv {:.0} us nvm {:.0} us\n",
                f(&p[kv][field]),
                f(&p[nvm][field]),
                f(&p["ratio"]),
                f(&p[kv]["median_p99_us"]),
                f(&p[nvm]["median_p99_us"]),
            );
        }
        let d = &m["store_1m_qd8_vs_durable_writes"];
        out += &format!(
            "{medium:<4} {:<36} nvm {:>9.1} MB/s  kv/this {:.2} (reference)\n",
            "1 MiB seq write QD8, each FUA",
            f(&d["nvm_seq_write_1m_qd8_fua"]["median_mb_per_s"]),
            f(&d["ratio"]),
        );
    }
    out
}

/// The smoke pass: every figure is there and positive.
pub fn check(doc: &Value) -> Result<(), String> {
    let media = doc["media"].as_array().ok_or("no media")?;
    if media.is_empty() {
        return Err("no media measured".into());
    }
    for m in media {
        for (key, nvm, kv, _) in PAIRS {
            for side in [nvm, kv] {
                let v = m[key][side]["median_iops"].as_f64().unwrap_or(0.0);
                if v <= 0.0 {
                    return Err(format!("{key}.{side}: no operations"));
                }
            }
            if m[key]["ratio"].as_f64().unwrap_or(0.0) <= 0.0 {
                return Err(format!("{key}: no ratio"));
            }
        }
    }
    Ok(())
}
