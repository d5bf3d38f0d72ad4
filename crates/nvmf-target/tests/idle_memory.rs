//! A connection that has not sent ICReq costs next to nothing: its full-size receive
//! buffer and CID bitmap (about 137 KiB with the default limits) come only once ICReq is
//! accepted.
//!
//! Measured with a global allocator that keeps the number of live heap bytes: hundreds of
//! idle sockets are opened, then the same sockets send ICReq, and the growth per
//! connection is compared. Both steps are measured the same way, so the test also shows
//! that the measurement sees the buffers when they exist. One test in this binary, so
//! nothing else allocates meanwhile.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use nvme_proto::tcp::{Digests, Framing, IcReq, PduHeader, encode_header};
use nvmf_target::TargetConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[global_allocator]
static GLOBAL: testkit::alloc::CountingAllocator = testkit::alloc::CountingAllocator;

const SOCKETS: usize = 200;

async fn wait_connections(t: &TestTarget, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while t.target.connection_count() != n {
        assert!(Instant::now() < deadline, "{n} connections not reached");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Let the connection tasks reach their first wait.
    tokio::time::sleep(Duration::from_millis(200)).await;
}

fn live() -> i64 {
    testkit::alloc::live_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_get_their_buffers_only_after_icreq() {
    let t = start_target(TargetConfig {
        handshake_timeout_ms: 120_000,
        ..TargetConfig::default()
    })
    .await;
    let mut socks = Vec::with_capacity(SOCKETS);
    let before = live();
    for _ in 0..SOCKETS {
        socks.push(TcpStream::connect(t.addr).await.unwrap());
    }
    wait_connections(&t, SOCKETS).await;
    let idle_per_conn = (live() - before) / SOCKETS as i64;

    let icreq = encode_header(
        &PduHeader::IcReq(IcReq {
            pfv: 0,
            hpda: 0,
            digests: Digests::default(),
            maxr2t: 0,
        }),
        0,
        0,
        Framing::default(),
    );
    let before_icreq = live();
    for s in &mut socks {
        s.write_all(icreq.as_bytes()).await.unwrap();
        let mut resp = [0u8; 128];
        s.read_exact(&mut resp).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let icreq_per_conn = (live() - before_icreq) / SOCKETS as i64;
    println!(
        "heap per connection: {idle_per_conn} bytes before ICReq, {icreq_per_conn} more after"
    );

    assert!(
        idle_per_conn < 16 << 10,
        "a connection without ICReq holds {idle_per_conn} bytes"
    );
    // The same measurement sees the buffers once they exist.
    assert!(
        icreq_per_conn >= 128 << 10,
        "after ICReq a connection holds its receive buffer (grew {icreq_per_conn} bytes)"
    );
    drop(socks);
}
