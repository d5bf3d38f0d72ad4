//! Where a `cargo bench` binary writes its JSON report: one rule for every bench.

use std::path::{Path, PathBuf};

/// The cargo target directory: the parent of `target_tmpdir`, the bench's
/// `env!("CARGO_TARGET_TMPDIR")` (cargo sets it when it compiles benches and tests, so
/// the bench passes its own).
pub fn target_dir(target_tmpdir: &str) -> PathBuf {
    let tmp = PathBuf::from(target_tmpdir);
    tmp.parent().map_or_else(|| tmp.clone(), PathBuf::from)
}

/// `$env_var` when set and not empty, else `<target>/bench/<file_name>`.
pub fn output_path(env_var: &str, target_tmpdir: &str, file_name: &str) -> PathBuf {
    match std::env::var_os(env_var).filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => target_dir(target_tmpdir).join("bench").join(file_name),
    }
}

/// Writes `json` and a newline to `path`, creating its directory.
pub fn write_report(path: &Path, json: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, format!("{json}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_goes_under_the_target_dir_and_ends_with_a_newline() {
        assert_eq!(
            output_path("TESTKIT_BENCH_OUT_NEVER_SET", "/t/target/tmp", "x.json"),
            PathBuf::from("/t/target/bench/x.json")
        );
        let dir = std::env::temp_dir().join(format!("testkit-bench-{}", std::process::id()));
        let path = dir.join("bench").join("r.json");
        write_report(&path, "{}").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
