//! Test support shared with other crates' tests: a real PostgreSQL server on loopback,
//! and the rule for missing prerequisites.

mod pg_server;

pub use pg_server::{PG_BIN_ENV, PgServer};

/// Set to 1 (by scripts/test.sh) to turn a missing test prerequisite into a failure.
pub const REQUIRE_ALL_ENV: &str = "FERROBAY_REQUIRE_ALL";

/// Whether tests must fail rather than skip when a prerequisite is missing.
pub fn require_all() -> bool {
    std::env::var(REQUIRE_ALL_ENV).is_ok_and(|v| v == "1")
}

/// Reports a missing prerequisite: panics under `FERROBAY_REQUIRE_ALL=1`, otherwise
/// prints `SKIP: why` for the caller to return early.
pub fn skip_or_fail(why: &str) {
    assert!(!require_all(), "{REQUIRE_ALL_ENV}=1 and {why}");
    eprintln!("SKIP: {why}");
}
