//! The server runner: an axum [`Router`] on hyper (HTTP/1.1 with keep-alive and chunked
//! bodies, and HTTP/2), with bounded connections, a request-head timeout, a body limit
//! and graceful shutdown; over TLS when given a [`ServerTls`] (each connection's handshake
//! runs in its own task, so a slow or broken one holds up no other).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use crate::error;
use crate::tls::{MaybeTls, ServerTls};

/// Most connections served at once; further ones wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 1024;
/// Largest request body (JSON requests are small).
pub const MAX_REQUEST_BODY_BYTES: usize = 1 << 20;
/// Time allowed to receive a request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`HttpServer::stop`] lets requests in flight finish.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// What every API router gets: JSON 404/405 answers and the body limit.
pub fn finish(router: Router) -> Router {
    router
        .fallback(error::no_such_path)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BODY_BYTES))
}

/// A running server; [`HttpServer::stop`] ends it gracefully, dropping it stops accepting.
pub struct HttpServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for HttpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl HttpServer {
    /// Serves `router` on `addr` (port 0 picks a free port), over TLS with `tls`. Call
    /// [`finish`] on the router first to get JSON 404/405 answers and the body limit.
    pub async fn serve(
        addr: SocketAddr,
        router: Router,
        tls: Option<ServerTls>,
    ) -> io::Result<HttpServer> {
        HttpServer::serve_as(None, addr, router, tls).await
    }

    /// [`HttpServer::serve`] on the socket of `role` (`http`, `api`) a daemon inherited
    /// from the binary it was upgraded from (`release::sockets`), else a new one.
    pub async fn serve_as(
        role: Option<&str>,
        addr: SocketAddr,
        router: Router,
        tls: Option<ServerTls>,
    ) -> io::Result<HttpServer> {
        let listener = TcpListener::from_std(release::sockets::bind(role, addr)?)?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(accept_loop(listener, router, tls, stopped));
        Ok(HttpServer {
            addr,
            stop,
            task: Some(task),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets requests in flight finish (at most [`SHUTDOWN_GRACE`]) and
    /// closes idle keep-alive connections.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn accept_loop(
    listener: TcpListener,
    router: Router,
    tls: Option<ServerTls>,
    mut stopped: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .keep_alive(true);
    let service = TowerToHyperService::new(router);
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = stopped.changed() => break,
        };
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stopped.changed() => break,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "HTTP accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let builder = builder.clone();
        let service = service.clone();
        let tls = tls.clone();
        let watcher = graceful.watcher();
        let mut stop = stopped.clone();
        tokio::spawn(async move {
            let io = match &tls {
                None => MaybeTls::Plain(stream),
                // A handshake still running at stop is dropped: it has no request yet.
                Some(tls) => match tokio::select! {
                    r = tls.accept(stream) => r,
                    _ = stop.changed() => return,
                } {
                    Ok(s) => s,
                    Err(e) => {
                        // A port scanner, a plain-HTTP client, an untrusting client:
                        // their connection alone ends.
                        tracing::debug!(error = %e, "HTTPS: TLS handshake failed");
                        drop(permit);
                        return;
                    }
                },
            };
            let conn = builder
                .serve_connection_with_upgrades(TokioIo::new(io), service)
                .into_owned();
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("HTTP: requests still running after the shutdown grace; dropped");
    }
}
