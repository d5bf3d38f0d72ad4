//! A TCP forwarder on 127.0.0.1 standing for one network path: tests cut it (every
//! connection through it drops and its port refuses new ones), restore it (same port),
//! and may point it at another target in between.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

pub struct Proxy {
    pub addr: SocketAddr,
    upstream: Mutex<SocketAddr>,
    /// The accept loop; it owns the forwarding tasks, so aborting it drops them all.
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    pub connections: Arc<std::sync::atomic::AtomicU64>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let p = Proxy {
            addr,
            upstream: Mutex::new(upstream),
            task: Mutex::new(None),
            connections: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        };
        p.serve(listener);
        p
    }

    fn serve(&self, listener: TcpListener) {
        let upstream = *self.upstream.lock().expect("lock");
        let count = self.connections.clone();
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            while let Ok((mut client, _)) = listener.accept().await {
                count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                conns.spawn(async move {
                    let _ = client.set_nodelay(true);
                    let Ok(mut up) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = up.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
                });
            }
        });
        *self.task.lock().expect("lock") = Some(task);
    }

    /// Drops every connection through the proxy and stops listening.
    pub fn cut(&self) {
        if let Some(t) = self.task.lock().expect("lock").take() {
            t.abort();
        }
    }

    /// Where connections made from now on (after a restore) go.
    pub fn set_upstream(&self, upstream: SocketAddr) {
        *self.upstream.lock().expect("lock") = upstream;
    }

    /// Listens again on the same port.
    pub async fn restore(&self) {
        self.cut();
        // The aborted task releases the port asynchronously: retry the bind briefly.
        for _ in 0..100 {
            if let Ok(l) = TcpListener::bind(self.addr).await {
                self.serve(l);
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("cannot listen on {} again", self.addr);
    }
}

/// Shares a proxy between tasks.
pub type SharedProxy = Arc<Proxy>;
