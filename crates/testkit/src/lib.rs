//! Test plumbing every test crate shares, written once: use it as a **dev-dependency**
//! only (a library or binary never depends on it; `test-guest`, itself dev-only, does).
//!
//! - [`prereq`]: what a test does when something it needs is missing (the one skip
//!   policy, `FERROBAY_REQUIRE_ALL=1` turns skips into failures);
//! - [`process`]: child processes that die with the test ([`process::die_with_parent`]),
//!   daemons with a log file, killed on drop ([`process::Daemon`]);
//! - [`data`]: deterministic test bytes ([`data::pattern`]), a readable byte comparison;
//! - [`net::free_port`]: a port that was free a moment ago;
//! - [`alloc`]: a counting global allocator (allocations per thread tag, live bytes);
//! - [`proxy`]: a TCP forwarder standing for one network path, to cut and restore;
//! - [`s3`]: a small S3 client (SigV4, UNSIGNED-PAYLOAD, one request per connection);
//! - [`bench`]: where a `cargo bench` binary writes its JSON report;
//! - [`stats::median`].

pub mod alloc;
pub mod bench;
pub mod data;
pub mod net;
pub mod prereq;
pub mod process;
pub mod proxy;
pub mod s3;
pub mod stats;
