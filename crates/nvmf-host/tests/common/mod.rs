//! Shared helpers for the initiator's integration tests.

#![allow(dead_code)]

pub mod fake_target;

use nvmf_host::HostIdentity;

pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:6c1f0e7a-1d2b-4c3d-8e9f-0a1b2c3d4e5f";

pub fn host() -> HostIdentity {
    HostIdentity {
        hostnqn: HOSTNQN.to_string(),
        hostid: [
            0x6c, 0x1f, 0x0e, 0x7a, 0x1d, 0x2b, 0x4c, 0x3d, 0x8e, 0x9f, 0x0a, 0x1b, 0x2c, 0x3d,
            0x4e, 0x5f,
        ],
    }
}

#[allow(unused_imports)] // not every test binary that includes this uses it
pub use testkit::data::pattern;
