//! The S3 gateway: objects erasure-coded across KV namespaces of storage nodes, with an
//! object index (buckets, versions, multipart uploads, listings) in SQLite or PostgreSQL.
//! Design and formats: `docs/object.md`.

pub mod checksum;
pub mod clock;
pub mod datapath;
pub mod drain;
pub mod format;
pub mod gateway;
pub mod index;
pub mod layout;
pub mod linger;
pub mod objects;
pub mod placement;
pub mod s3;
pub mod shard;
pub mod testing;
