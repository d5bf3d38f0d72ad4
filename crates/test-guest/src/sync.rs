//! The host side of `host_sync`: a TCP listener on 127.0.0.1 (the guest
//! reaches it as 10.0.2.2). Protocol, one line each way:
//!
//! ```text
//! guest -> host   SYNC <name> [message]
//! host  -> guest  GO <name> [payload]      (then the host closes)
//! ```
//!
//! The guest blocks until the test calls `release(name)`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use crate::output::{Arrival, MAX_SYNC_ARRIVALS, Shared, Source};

/// How long the guest may take to send its request line after connecting.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Poll interval of the non-blocking accept loops.
pub(crate) const ACCEPT_POLL: Duration = Duration::from_millis(25);
/// Longest request line accepted.
const MAX_REQUEST_BYTES: u64 = 4096;

/// True for names `host_sync` may use: `[A-Za-z0-9_.-]+`.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

/// Accepts guest connections until the guest stops.
pub(crate) fn serve(shared: Arc<Shared>, listener: TcpListener) {
    loop {
        if shared.lock().stop {
            return;
        }
        match listener.accept() {
            Ok((stream, _)) => {
                let shared = Arc::clone(&shared);
                let spawned = std::thread::Builder::new()
                    .name("test-guest-sync".into())
                    .spawn(move || handle(&shared, stream));
                if let Err(e) = spawned {
                    eprintln!("test-guest: cannot start a sync handler thread: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(ACCEPT_POLL);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                shared.push_line(Source::Host, &format!("sync listener failed: {e}"));
                return;
            }
        }
    }
}

fn handle(shared: &Shared, stream: TcpStream) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
    let mut line = String::new();
    let read = stream.try_clone().and_then(|s| {
        BufReader::new(s)
            .take(MAX_REQUEST_BYTES)
            .read_line(&mut line)
    });
    if let Err(e) = read {
        shared.push_line(
            Source::Host,
            &format!("sync: reading the request failed: {e}"),
        );
        return;
    }
    let line = line.trim_end();
    let Some(rest) = line.strip_prefix("SYNC ") else {
        shared.push_line(Source::Host, &format!("sync: bad request {line:?}"));
        return;
    };
    let (name, message) = rest.split_once(' ').unwrap_or((rest, ""));
    if !valid_name(name) {
        shared.push_line(Source::Host, &format!("sync: bad name in {line:?}"));
        return;
    }
    let mut st = shared.lock();
    if let Some(payload) = st.sync.released.remove(name) {
        st.push_line(
            Source::Host,
            &format!("sync {name}: guest arrived, already released"),
        );
        st.sync.arrived.insert(
            name.to_string(),
            Arrival {
                message: message.to_string(),
                stream: None,
            },
        );
        drop(st);
        shared.cond.notify_all();
        reply(shared, name, stream, &payload);
        return;
    }
    if st.sync.arrived.contains_key(name) || st.sync.arrived.len() >= MAX_SYNC_ARRIVALS {
        st.push_line(
            Source::Host,
            &format!("sync {name}: refused (name used twice, or too many sync points)"),
        );
        return;
    }
    st.push_line(
        Source::Host,
        &format!("sync {name}: guest arrived, message {message:?}"),
    );
    st.sync.arrived.insert(
        name.to_string(),
        Arrival {
            message: message.to_string(),
            stream: Some(stream),
        },
    );
    drop(st);
    shared.cond.notify_all();
}

/// Sends `GO name payload` and closes the connection.
pub(crate) fn reply(shared: &Shared, name: &str, mut stream: TcpStream, payload: &str) {
    let msg = if payload.is_empty() {
        format!("GO {name}\n")
    } else {
        format!("GO {name} {payload}\n")
    };
    let sent = stream
        .write_all(msg.as_bytes())
        .and_then(|()| stream.flush())
        .and_then(|()| stream.shutdown(std::net::Shutdown::Both));
    let note = match sent {
        Ok(()) => format!("sync {name}: released"),
        Err(e) => format!("sync {name}: release failed: {e}"),
    };
    shared.push_line(Source::Host, &note);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn start() -> (Arc<Shared>, u16, std::thread::JoinHandle<()>) {
        let shared = Arc::new(Shared::new("t", PathBuf::from("/nonexistent"), None));
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let s = Arc::clone(&shared);
        let h = std::thread::spawn(move || serve(s, listener));
        (shared, port, h)
    }

    fn wait_arrived(shared: &Shared, name: &str) -> Option<TcpStream> {
        let mut st = shared.lock();
        for _ in 0..200 {
            if let Some(a) = st.sync.arrived.get_mut(name) {
                return a.stream.take();
            }
            st = shared.wait(st, Duration::from_millis(50));
        }
        None
    }

    #[test]
    fn request_then_release_round_trip() {
        let (shared, port, h) = start();
        let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        c.write_all(b"SYNC step1 hello there\n").expect("send");
        let stream = wait_arrived(&shared, "step1").expect("arrival");
        assert_eq!(shared.lock().sync.arrived["step1"].message, "hello there");
        reply(&shared, "step1", stream, "payload-1");
        let mut got = String::new();
        c.read_to_string(&mut got).expect("read");
        assert_eq!(got, "GO step1 payload-1\n");
        shared.lock().stop = true;
        h.join().expect("join");
    }

    #[test]
    fn release_before_arrival_answers_at_once() {
        let (shared, port, h) = start();
        shared
            .lock()
            .sync
            .released
            .insert("early".into(), String::new());
        let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        c.write_all(b"SYNC early\n").expect("send");
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut got = String::new();
        c.read_to_string(&mut got).expect("read");
        assert_eq!(got, "GO early\n");
        shared.lock().stop = true;
        h.join().expect("join");
    }

    #[test]
    fn bad_requests_are_closed_and_logged() {
        let (shared, port, h) = start();
        let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        c.write_all(b"HELLO x\n").expect("send");
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut got = String::new();
        let _ = c.read_to_string(&mut got);
        assert_eq!(got, "");
        let mut st = shared.lock();
        for _ in 0..100 {
            if st.run.log.contains("bad request") {
                break;
            }
            st = shared.wait(st, Duration::from_millis(50));
        }
        assert!(st.run.log.contains("sync: bad request"), "{}", st.run.log);
        st.stop = true;
        drop(st);
        h.join().expect("join");
    }

    #[test]
    fn names_are_checked() {
        assert!(valid_name("step-1.a_b"));
        assert!(!valid_name(""));
        assert!(!valid_name("a b"));
        assert!(!valid_name("a\nb"));
    }
}
