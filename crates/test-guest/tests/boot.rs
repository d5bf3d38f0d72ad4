//! Harness self-test: boot the guest, run a trivial job, and check that a
//! failing job is reported as failed (with its FAIL lines and log).
//! Needs QEMU (scripts/install-deps.sh); fails, not skips, without it.

use std::time::Duration;

use test_guest::{GuestConfig, GuestError, GuestImage, run_job, spawn};

#[test]
fn trivial_job_passes_and_records_are_parsed() {
    let job = r#"
info "kernel $(uname -r)"
check nvme_cli nvme version
pass trivial a=1 b=two
result answer=42 kernel=$(uname -r)
result quoted="$GREETING"
"#;
    let cfg = GuestConfig::new("selftest-trivial", job)
        .env("GREETING", "it's")
        .timeout(Duration::from_secs(120));
    let run = run_job(&cfg).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.rc, Some(0));
    assert!(run.ok());
    assert!(run.fails.is_empty());
    let trivial = run.passed("trivial").expect("PASS trivial");
    assert_eq!(trivial.get("b"), Some("two"));
    assert!(run.passed("nvme_cli").is_some(), "{}", run.diagnostics());
    assert_eq!(run.result("answer"), Some("42"));
    assert_eq!(run.result("quoted"), Some("it's"));
    let image = GuestImage::ensure().expect("image");
    assert_eq!(run.result("kernel"), Some(image.kernel_version.as_str()));
    let boot = run.boot_secs.expect("HARNESS_READY uptime");
    assert!(boot > 0.0 && boot < 120.0);
    // The per-run log file has everything, including the kernel console.
    let file = std::fs::read_to_string(&run.log_path).expect("run log");
    assert!(file.contains("PASS trivial a=1 b=two"));
    assert!(file.contains("HARNESS_DONE rc=0"));
    assert!(
        file.contains("console| "),
        "kernel console merged into the log"
    );
    eprintln!(
        "boot: guest uptime at job start {boot:.2}s, whole run {:.2}s (wall)",
        run.wall.as_secs_f64()
    );
}

#[test]
fn failing_job_is_reported_with_fail_lines_and_log() {
    let job = r#"
pass before_failure
fail deliberate reason=selftest
info "exiting with 3"
exit 3
"#;
    let cfg = GuestConfig::new("selftest-failing", job).timeout(Duration::from_secs(120));
    let guest = spawn(&cfg).unwrap_or_else(|e| panic!("{e}"));
    // The job ends without ever reaching this sync point: the wait must end
    // as soon as the job does, not at the timeout.
    let t = std::time::Instant::now();
    let err = guest
        .wait_for("never-reached", Duration::from_secs(100))
        .expect_err("the job never calls host_sync");
    assert!(matches!(err, GuestError::Ended { .. }), "{err}");
    assert!(t.elapsed() < Duration::from_secs(60));
    let msg = err.to_string();
    assert!(msg.contains("host_sync never-reached"), "{msg}");
    assert!(msg.contains("FAIL deliberate reason=selftest"), "{msg}");

    let err = guest
        .finish(Duration::from_secs(60))
        .expect_err("a job with FAIL and rc 3 must fail");
    let GuestError::JobFailed { run } = &err else {
        panic!("expected JobFailed, got {err}")
    };
    assert_eq!(run.rc, Some(3));
    assert_eq!(run.fails.len(), 1);
    assert_eq!(run.fails[0].name, "deliberate");
    assert_eq!(run.fails[0].get("reason"), Some("selftest"));
    assert!(run.passed("before_failure").is_some());
    let msg = err.to_string();
    assert!(msg.contains("FAIL deliberate reason=selftest"), "{msg}");
    assert!(
        msg.contains("INFO exiting with 3"),
        "log tail in the error: {msg}"
    );
    assert!(msg.contains(&run.log_path.display().to_string()), "{msg}");
}
