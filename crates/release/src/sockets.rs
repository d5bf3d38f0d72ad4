//! Listening sockets handed from a daemon to the binary it re-executes as: the new
//! process serves on the very sockets the old one listened on, so the ports stay the
//! same (also those picked at random with port 0) and a host that connects during the
//! restart waits in the accept backlog instead of being refused.
//!
//! Only a daemon that calls [`enable_handover`] takes part; libraries bind through
//! [`bind`] with a role name (`nvme0`, `discovery`, `http`...) that is stable across
//! versions. The sockets travel in `FERROBAY_LISTEN_FDS=role=fd,...` (docs/upgrade.md).

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The environment variable the sockets are handed down in.
pub const LISTEN_FDS_ENV: &str = "FERROBAY_LISTEN_FDS";

#[derive(Default)]
struct Handover {
    enabled: bool,
    /// Sockets the previous process handed down, by role, not yet bound again.
    inherited: HashMap<String, TcpListener>,
    /// A copy of each socket this process listens on, by role, to hand down.
    kept: Vec<(String, TcpListener)>,
}

fn state() -> MutexGuard<'static, Handover> {
    static STATE: OnceLock<Mutex<Handover>> = OnceLock::new();
    STATE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Takes part in socket hand-over: adopts the sockets named in [`LISTEN_FDS_ENV`] (if
/// this process was started by an upgrade) and keeps a copy of every socket bound with
/// a role from now on. Returns how many sockets were inherited.
pub fn enable_handover() -> usize {
    let mut s = state();
    s.enabled = true;
    let Some(list) = std::env::var_os(LISTEN_FDS_ENV) else {
        return 0;
    };
    for entry in list.to_string_lossy().split(',').filter(|e| !e.is_empty()) {
        let Some((role, fd)) = entry.split_once('=') else {
            continue;
        };
        let Ok(fd) = fd.parse::<RawFd>() else {
            continue;
        };
        if let Some(l) = adopt(fd) {
            s.inherited.insert(role.to_string(), l);
        }
    }
    s.inherited.len()
}

/// The inherited descriptor `fd`, if it is a listening TCP socket.
fn adopt(fd: RawFd) -> Option<TcpListener> {
    // A descriptor number from the environment may be anything: check that it is an
    // open socket that listens before taking ownership of it.
    let mut accepting: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `accepting`, a c_int we own; an
    // invalid or non-socket descriptor makes it fail with no other effect.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&raw mut accepting).cast(),
            &mut len,
        )
    };
    if rc != 0 || accepting == 0 {
        return None;
    }
    // SAFETY: `fd` is an open listening socket handed down to this process and used by
    // nothing else in it (the environment names each descriptor once, and it is
    // adopted once, here); the TcpListener owns and closes it from now on.
    #[allow(unsafe_code)]
    let l = unsafe { TcpListener::from_raw_fd(fd) };
    set_cloexec(l.as_raw_fd(), true).ok()?;
    Some(l)
}

fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: F_GETFD/F_SETFD only read and change the descriptor flags of `fd`, which
    // the caller owns (an open listener).
    #[allow(unsafe_code)]
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        let flags = if on {
            flags | libc::FD_CLOEXEC
        } else {
            flags & !libc::FD_CLOEXEC
        };
        if libc::fcntl(fd, libc::F_SETFD, flags) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Binds a listener for `role` on `addr`: the inherited socket of that role when there
/// is one on the same address (any port when `addr` asks for port 0), else a new one.
/// Non-blocking, ready for `tokio::net::TcpListener::from_std`.
pub fn bind(role: Option<&str>, addr: SocketAddr) -> io::Result<TcpListener> {
    let mut s = state();
    let inherited = match role {
        Some(r) if s.enabled => s.inherited.remove(r).filter(|l| {
            l.local_addr()
                .is_ok_and(|a| a.ip() == addr.ip() && (addr.port() == 0 || a.port() == addr.port()))
        }),
        _ => None,
    };
    let l = match inherited {
        Some(l) => l,
        None => TcpListener::bind(addr)?,
    };
    l.set_nonblocking(true)?;
    if let Some(r) = role
        && s.enabled
    {
        let copy = l.try_clone()?;
        s.kept.retain(|(k, _)| k != r);
        s.kept.push((r.to_string(), copy));
    }
    Ok(l)
}

/// The value of [`LISTEN_FDS_ENV`] for the process this one is about to execute: every
/// kept socket and every inherited one not bound again yet (a start that failed half way
/// hands all of them on), made inheritable. None when there is none.
pub fn handover_env() -> Option<String> {
    let s = state();
    let mut out = Vec::new();
    for (role, l) in s.kept.iter().map(|(r, l)| (r, l)).chain(s.inherited.iter()) {
        if set_cloexec(l.as_raw_fd(), false).is_ok() {
            out.push(format!("{role}={}", l.as_raw_fd()));
        }
    }
    (!out.is_empty()).then(|| out.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::IntoRawFd as _;

    #[test]
    fn a_bound_socket_is_kept_for_the_next_process() {
        enable_handover();
        let l = bind(Some("test-nvme0"), "127.0.0.1:0".parse().unwrap()).unwrap();
        let env = handover_env().unwrap();
        let fd: RawFd = env
            .split(',')
            .find_map(|e| e.strip_prefix("test-nvme0="))
            .unwrap()
            .parse()
            .unwrap();
        assert_ne!(
            fd,
            l.as_raw_fd(),
            "a copy is handed down, not the one in use"
        );
        // SAFETY: F_GETFD reads the flags of a descriptor the state keeps open.
        #[allow(unsafe_code)]
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, 0, "inheritable");
    }

    #[test]
    fn only_a_listening_socket_is_adopted() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let adopted = adopt(l.into_raw_fd()).expect("a listening socket");
        assert_eq!(adopted.local_addr().unwrap().port(), port);
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        assert!(adopt(file.as_raw_fd()).is_none());
        let connected = std::net::TcpStream::connect(adopted.local_addr().unwrap()).unwrap();
        assert!(adopt(connected.as_raw_fd()).is_none());
    }
}
