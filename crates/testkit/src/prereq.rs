//! What a test does when something it needs is missing on this machine: the one policy
//! every test crate routes through, so a skip is never a silent pass.
//!
//! - A missing prerequisite of the environment (root, loop devices, QEMU, the guest
//!   image, etcd, libisal): the test says plainly that it did not run and returns, or,
//!   under `FERROBAY_REQUIRE_ALL=1` (set by `scripts/test.sh`), fails.
//! - A missing CPU feature (AVX-512, GFNI): the test says plainly that it did not run and
//!   returns, also under `FERROBAY_REQUIRE_ALL=1`: CI machines differ, and a kernel the
//!   CPU cannot run is not a fault of this machine's setup.
//!
//! The notice goes straight to the process's stderr, past libtest's output capture, so
//! it shows in a plain `cargo test` run. The caller returns after the call:
//!
//! ```
//! fn qemu_missing() -> Option<String> { None }
//! if let Some(why) = qemu_missing() {
//!     testkit::prereq::missing(why);
//!     return;
//! }
//! ```

use std::fmt::Display;
use std::io::Write;
use std::panic::Location;

/// Set to `1` to turn every missing prerequisite into a test failure.
pub const REQUIRE_ALL_ENV: &str = "FERROBAY_REQUIRE_ALL";

/// Whether `FERROBAY_REQUIRE_ALL` asks for every prerequisite (`1`, `true`, `yes`).
pub fn require_all() -> bool {
    std::env::var(REQUIRE_ALL_ENV)
        .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

/// A prerequisite `why` names is missing: prints that the calling test did not run (the
/// caller then returns), or panics under `FERROBAY_REQUIRE_ALL=1`.
#[track_caller]
pub fn missing(why: impl Display) {
    let test = test_name(Location::caller());
    if require_all() {
        panic!("{test} could not run: {why} ({REQUIRE_ALL_ENV}=1 requires every prerequisite)");
    }
    notice(&format!(
        "SKIPPED {test}: {why}. This test did not run; {REQUIRE_ALL_ENV}=1 makes that a failure."
    ));
}

/// The CPU lacks what `what` names: prints that the calling test (or part of it) did not
/// run. Never a failure, whatever `FERROBAY_REQUIRE_ALL` says.
#[track_caller]
pub fn missing_cpu_feature(what: impl Display) {
    let test = test_name(Location::caller());
    notice(&format!(
        "NOT RUN {test}: this CPU lacks {what}; that part did not run here."
    ));
}

/// The libtest thread's name (the test's path) and where the check is.
fn test_name(at: &Location<'_>) -> String {
    let location = format!("{}:{}", at.file(), at.line());
    match std::thread::current().name() {
        Some(name) if name != "main" => format!("{name} ({location})"),
        _ => location,
    }
}

fn notice(line: &str) {
    // Not eprintln!: libtest captures that for passing tests, and a skip must be seen.
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_test_and_the_place() {
        let name = test_name(Location::caller());
        assert!(name.contains("names_the_test_and_the_place") || name.contains("prereq.rs"));
        assert!(name.contains("prereq.rs:"), "{name}");
    }
}
