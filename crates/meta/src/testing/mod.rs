//! Test support shared with other crates' tests: a real etcd server on loopback.

mod etcd_server;

pub use etcd_server::{ETCD_BINARY_ENV, EtcdServer};
