//! Ports for test servers.

use std::io;
use std::net::TcpListener;

/// A port that was free on 127.0.0.1 a moment ago (bind to port 0, read it, release it).
/// Another process may take it before the caller binds it: servers that can, bind port 0
/// themselves and report the port.
pub fn free_port() -> io::Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// `n` distinct ports that were free a moment ago (all bound at once, then released).
pub fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_and_bindable() {
        let ports = free_ports(4).expect("ports");
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 4);
        let p = free_port().expect("port");
        assert_ne!(p, 0);
        TcpListener::bind(("127.0.0.1", p)).expect("free port binds");
    }
}
