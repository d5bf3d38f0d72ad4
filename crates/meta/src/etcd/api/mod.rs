//! etcd's v3 gRPC API, client side: messages and service clients generated from etcd's
//! .proto files by protox and tonic-prost-build, and committed so that building needs no
//! protoc. `tests/etcd_api.rs` generates them again and fails if these files differ; it
//! also rewrites them: `FERROBAY_WRITE_ETCD_API=1 cargo test -p meta --test etcd_api`.
//! The files are `include!`d so that rustfmt leaves them as generated.

#![allow(dead_code, missing_docs, unreachable_pub)]
#![allow(clippy::all, clippy::pedantic)]

pub mod authpb {
    include!("authpb.rs");
}

pub mod etcdserverpb {
    include!("etcdserverpb.rs");
}

pub mod mvccpb {
    include!("mvccpb.rs");
}
