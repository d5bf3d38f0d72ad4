//! The skip policy end to end: this binary runs its own guarded test again as a child
//! process, with and without `FERROBAY_REQUIRE_ALL=1`, and checks the outcome a user sees.

use std::process::{Command, Output};

use testkit::prereq::{self, REQUIRE_ALL_ENV};

/// Set in the child: only then does `guarded` act.
const CHILD_ENV: &str = "FERROBAY_PREREQ_SELFTEST";

/// A test whose prerequisite is missing (or, with `cpu`, whose CPU feature is).
#[test]
fn guarded() {
    match std::env::var(CHILD_ENV).as_deref() {
        Ok("prerequisite") => {
            prereq::missing("the frobnicator is not installed");
            // Reached only when the policy lets the test return.
        }
        Ok("cpu") => prereq::missing_cpu_feature("AVX-1024"),
        _ => {}
    }
}

fn child(kind: &str, require_all: Option<&str>) -> Output {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", "guarded", "--test-threads", "1"])
        .env(CHILD_ENV, kind)
        .env_remove(REQUIRE_ALL_ENV);
    if let Some(v) = require_all {
        cmd.env(REQUIRE_ALL_ENV, v);
    }
    cmd.output().expect("run the test binary")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_missing_prerequisite_is_said_and_fails_only_when_required() {
    let lenient = child("prerequisite", None);
    assert!(lenient.status.success(), "{}", stderr(&lenient));
    let err = stderr(&lenient);
    assert!(
        err.contains("SKIPPED guarded") && err.contains("the frobnicator is not installed"),
        "{err}"
    );
    assert!(err.contains("did not run"), "{err}");

    let strict = child("prerequisite", Some("1"));
    assert!(!strict.status.success(), "passed under {REQUIRE_ALL_ENV}=1");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&strict.stdout),
        stderr(&strict)
    );
    assert!(
        out.contains("could not run: the frobnicator is not installed"),
        "{out}"
    );

    // Anything but a yes keeps the lenient policy.
    assert!(child("prerequisite", Some("0")).status.success());
}

#[test]
fn a_missing_cpu_feature_is_said_and_never_fails() {
    for require_all in [None, Some("1")] {
        let o = child("cpu", require_all);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("NOT RUN guarded") && stderr(&o).contains("AVX-1024"),
            "{}",
            stderr(&o)
        );
    }
}
