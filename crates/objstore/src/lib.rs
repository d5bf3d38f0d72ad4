//! The S3 gateway: objects erasure-coded across KV namespaces of storage nodes, with an
//! object index (buckets, versions, multipart uploads, listings) in SQLite or PostgreSQL.
//! Design and formats: `docs/object.md`.

pub mod datapath;
pub mod format;
pub mod index;
pub mod layout;
pub mod placement;
pub mod shard;
pub mod testing;
pub mod checksum;
pub mod clock;
pub mod objects;
