//! Test support shared with other crates' tests: a real PostgreSQL server on loopback.
//! (What a test does when PostgreSQL is missing is `testkit::prereq`'s rule.)

mod pg_server;

pub use pg_server::{PG_BIN_ENV, PgServer};
