//! Connections that only take resources: limits per listener and per host address close
//! them at accept, and a handshake timeout closes those that never send ICReq or Connect.
//! Hundreds of such sockets are opened while a real host (our initiator, nvmf-host) keeps
//! doing verified I/O.
//!
//! The idle sockets come from 127.0.0.2, the host from 127.0.0.1, so the per-host limit
//! tells them apart. The tests run one at a time (hundreds of sockets each).

#![allow(clippy::unwrap_used)]

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use blockdev::IoBuf;
use common::*;
use futures::future::join_all;
use nvme_proto::tcp::fes;
use nvmf_host::{ConnectOptions, Controller, HostIdentity};
use nvmf_target::{AdmissionStats, TargetConfig};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};

/// One test at a time: each opens hundreds of sockets.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const IDLE_ADDR: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

fn host() -> HostIdentity {
    HostIdentity {
        hostnqn: HOSTNQN.to_string(),
        hostid: HOSTID,
    }
}

fn host_opts() -> ConnectOptions {
    ConnectOptions {
        io_queues: 2,
        queue_size: 32,
        connect_timeout_ms: 5000,
        // A refused first connect is an error at once (no reconnects).
        ctrl_loss_tmo_ms: Some(0),
        ..ConnectOptions::default()
    }
}

/// A TCP connection from 127.0.0.2 that sends nothing.
async fn idle_socket(addr: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::from((IDLE_ADDR, 0))).unwrap();
    s.connect(addr).await.unwrap()
}

/// Opens `n` idle sockets.
async fn idle_sockets(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(idle_socket(addr).await);
    }
    v
}

/// Whether the target closed `sock` (end of stream or reset) within `within`; anything
/// it sends before closing is skipped.
async fn closed_within(sock: &mut TcpStream, within: Duration) -> bool {
    let mut b = [0u8; 512];
    tokio::time::timeout(within, async {
        loop {
            match sock.read(&mut b).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// How many of `socks` the target closed within `within`.
async fn count_closed(socks: &mut [TcpStream], within: Duration) -> usize {
    join_all(socks.iter_mut().map(|s| closed_within(s, within)))
        .await
        .into_iter()
        .filter(|&c| c)
        .count()
}

/// Waits (up to 10 s) until the target's admission counters satisfy `ok`.
async fn wait_admission(t: &TestTarget, ok: impl Fn(&AdmissionStats) -> bool) -> AdmissionStats {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let a = t.target.stats().admission;
        if ok(&a) || Instant::now() > deadline {
            return a;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_connections(t: &TestTarget, n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    while t.target.connection_count() != n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    t.target.connection_count()
}

/// Writes `rounds` × 64 KiB of a pattern through the real host and reads each back.
async fn host_io(ctrl: &Controller, rounds: u64, seed: u64) {
    let ns = ctrl.namespace(1).await.unwrap();
    for i in 0..rounds {
        let off = (i % 256) * 65536;
        let want = pattern(65536, seed + i);
        ns.write_at(off, IoBuf::from_slice(&want), false)
            .await
            .unwrap();
        let got = ns.read_at(off, IoBuf::new_zeroed(65536)).await.unwrap();
        assert_eq!(&got[..], &want[..], "round {i}: data read back differs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_past_the_host_limit_are_closed_at_accept_while_a_host_does_io() {
    let _serial = SERIAL.lock().await;
    let t = start_target(TargetConfig {
        max_connections_per_host: 64,
        handshake_timeout_ms: 120_000,
        ..TargetConfig::default()
    })
    .await;
    let mut idle = idle_sockets(t.addr, 300).await;
    let a = wait_admission(&t, |a| a.refused_host_limit == 236).await;
    assert_eq!(
        a,
        AdmissionStats {
            refused_host_limit: 236,
            ..Default::default()
        },
        "300 sockets from one address, 64 allowed"
    );
    assert_eq!(wait_connections(&t, 64).await, 64);

    // Another address is not affected: a host connects and its data round-trips.
    let ctrl = Controller::connect(t.addr, SUBNQN, &host(), &host_opts())
        .await
        .unwrap();
    host_io(&ctrl, 64, 1).await;
    assert_eq!(
        t.target.connection_count(),
        64 + 3,
        "64 idle + admin + 2 I/O"
    );

    // The refused sockets were closed at once; the 64 admitted ones stay open.
    assert_eq!(count_closed(&mut idle, Duration::from_secs(2)).await, 236);
    ctrl.disconnect().await;
    drop(idle);
    assert_eq!(wait_connections(&t, 0).await, 0);
    assert_eq!(t.target.stats().admission.refused_host_limit, 236);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_limit_turns_everyone_away_until_connections_go() {
    let _serial = SERIAL.lock().await;
    let t = start_target(TargetConfig {
        max_connections_per_listener: 200,
        handshake_timeout_ms: 120_000,
        ..TargetConfig::default()
    })
    .await;
    let mut idle = idle_sockets(t.addr, 250).await;
    let a = wait_admission(&t, |a| a.refused_listener_limit == 50).await;
    assert_eq!(a.refused_listener_limit, 50);
    assert_eq!(a.refused_host_limit, 0);
    assert_eq!(count_closed(&mut idle, Duration::from_secs(2)).await, 50);

    // The listener is full: a host from another address is turned away too, promptly.
    let started = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        Controller::connect(t.addr, SUBNQN, &host(), &host_opts()),
    )
    .await
    .expect("a refused connect fails, it does not hang");
    assert!(r.is_err(), "connect to a full listener must fail");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused after {:?}",
        started.elapsed()
    );
    assert_eq!(t.target.stats().admission.refused_listener_limit, 51);

    // Once the idle sockets go, the host gets in and works.
    drop(idle);
    assert_eq!(wait_connections(&t, 0).await, 0);
    let ctrl = Controller::connect(t.addr, SUBNQN, &host(), &host_opts())
        .await
        .unwrap();
    host_io(&ctrl, 32, 2).await;
    ctrl.disconnect().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_without_icreq_or_connect_are_closed_after_the_handshake_timeout() {
    let _serial = SERIAL.lock().await;
    const TIMEOUT: Duration = Duration::from_millis(1500);
    let t = start_target(TargetConfig {
        handshake_timeout_ms: TIMEOUT.as_millis() as u32,
        ..TargetConfig::default()
    })
    .await;

    // A host connected before: it keeps doing verified I/O the whole time.
    let ctrl = Arc::new(
        Controller::connect(t.addr, SUBNQN, &host(), &host_opts())
            .await
            .unwrap(),
    );
    let cntlid = ctrl.cntlid();
    let rounds = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let io = {
        let (ctrl, rounds, stop) = (ctrl.clone(), rounds.clone(), stop.clone());
        tokio::spawn(async move {
            let mut seed = 100;
            while !stop.load(Ordering::Relaxed) {
                host_io(&ctrl, 4, seed).await;
                seed += 4;
                rounds.fetch_add(4, Ordering::Relaxed);
            }
        })
    };

    // 300 sockets that send nothing, 50 that stop after ICReq.
    let mut idle = Vec::new();
    for _ in 0..300 {
        let s = idle_socket(t.addr).await;
        idle.push((s, Instant::now()));
    }
    let mut after_icreq = Vec::new();
    for _ in 0..50 {
        let mut c = Client::tcp(t.addr).await;
        c.icreq(false, false).await;
        after_icreq.push(c);
    }
    let idle_closed = join_all(idle.iter_mut().map(|(s, connected)| async {
        let closed = closed_within(s, TIMEOUT + Duration::from_secs(8)).await;
        (closed, connected.elapsed())
    }));
    let icreq_closed = join_all(after_icreq.iter_mut().map(|c| async {
        // The host is told why: a C2HTermReq with PDU Sequence Error, then the close.
        let ev = c.next_event().await;
        let closed = c.recv_pdu().await.is_none();
        (ev, closed)
    }));
    let (idle_closed, icreq_closed) = tokio::join!(idle_closed, icreq_closed);
    let rounds_at_timeouts = rounds.load(Ordering::Relaxed);
    for (closed, open_for) in &idle_closed {
        assert!(*closed, "an idle socket was not closed");
        // The timer starts at accept (which may run just before the client sees its
        // connect complete: a little slack).
        assert!(
            *open_for >= TIMEOUT - Duration::from_millis(100),
            "closed after {open_for:?}, before the timeout"
        );
    }
    for (ev, closed) in icreq_closed {
        match ev {
            Event::Term(term) => assert_eq!(term.fes, fes::PDU_SEQUENCE_ERROR),
            e => panic!("expected a C2HTermReq after ICReq without Connect, got {e:?}"),
        }
        assert!(closed, "closed after the termination request");
    }
    let a = wait_admission(&t, |a| a.handshake_timeouts >= 350).await;
    assert_eq!(
        a,
        AdmissionStats {
            handshake_timeouts: 350,
            ..Default::default()
        },
        "only the 350 sockets timed out, not the host's queues"
    );

    // The host kept working through it, on the same controller, and still does.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while rounds.load(Ordering::Relaxed) <= rounds_at_timeouts && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(rounds.load(Ordering::Relaxed) > rounds_at_timeouts);
    stop.store(true, Ordering::Relaxed);
    io.await.unwrap();
    assert!(
        rounds_at_timeouts > 0,
        "no host I/O while the sockets were open"
    );
    drop((idle, after_icreq));
    assert_eq!(wait_connections(&t, 3).await, 3, "admin + 2 I/O queues");
    assert_eq!(
        t.target.controllers(SUBNQN),
        vec![(cntlid, HOSTNQN.to_string())]
    );
    ctrl.disconnect().await;
}
