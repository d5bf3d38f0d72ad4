//! The HTTP listener: bounded connections, one request each, with timeouts.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use super::wire::{self, MAX_HEAD_BYTES, Request, Response};

/// Most connections served at once; more get 503.
pub const MAX_CONNECTIONS: usize = 64;
/// Time allowed to receive a whole request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed to send a response.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

pub type HandlerFuture = Pin<Box<dyn Future<Output = Response> + Send>>;

/// Turns a request into a response.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, req: Request) -> HandlerFuture;
}

/// A running HTTP server; stopped with [`HttpServer::stop`] (or when dropped).
pub struct HttpServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl HttpServer {
    /// Serves the node's metrics and control API on `addr`.
    pub async fn start(addr: SocketAddr, node: crate::StorageNode) -> io::Result<HttpServer> {
        HttpServer::serve(addr, Arc::new(super::routes::NodeHandler::new(node))).await
    }

    /// Serves any handler on `addr` (port 0 picks a free port).
    pub async fn serve(addr: SocketAddr, handler: Arc<dyn Handler>) -> io::Result<HttpServer> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(accept_loop(listener, handler, stopped));
        Ok(HttpServer {
            addr,
            stop,
            task: Some(task),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and waits for the accept loop to end (requests in flight finish on
    /// their own, bounded by the timeouts).
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
    handler: Arc<dyn Handler>,
    mut stopped: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stopped.changed() => return,
        };
        let mut stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "HTTP accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let handler = handler.clone();
        match slots.clone().try_acquire_owned() {
            Ok(permit) => {
                tokio::spawn(async move {
                    serve_conn(&mut stream, handler).await;
                    drop(permit);
                });
            }
            Err(_) => {
                tokio::spawn(async move {
                    let r = Response::error(503, "too many connections");
                    let _ =
                        tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(&r.to_bytes())).await;
                });
            }
        }
    }
}

async fn serve_conn(stream: &mut TcpStream, handler: Arc<dyn Handler>) {
    let response = match tokio::time::timeout(READ_TIMEOUT, read_request(stream)).await {
        Ok(Ok(req)) => handler.handle(req).await,
        Ok(Err(e)) => Response::error(e.status, &e.message),
        Err(_) => Response::error(408, "request not received in time"),
    };
    let write = async {
        stream.write_all(&response.to_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(WRITE_TIMEOUT, write).await;
}

async fn read_request(stream: &mut TcpStream) -> Result<Request, wire::WireError> {
    let io_err = |e: io::Error| wire::WireError {
        status: 400,
        message: format!("read: {e}"),
    };
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let end = loop {
        let found = wire::head_end(&buf);
        if found.unwrap_or(buf.len()) > MAX_HEAD_BYTES {
            return Err(wire::WireError {
                status: 431,
                message: "request head too large".into(),
            });
        }
        if let Some(end) = found {
            break end;
        }
        let n = stream.read(&mut chunk).await.map_err(io_err)?;
        if n == 0 {
            return Err(wire::WireError {
                status: 400,
                message: "connection closed mid-request".into(),
            });
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = wire::parse_request_head(&buf[..end])?;
    let mut req = head.request;
    let mut body = buf.split_off(end);
    if body.len() > head.body_bytes {
        return Err(wire::WireError {
            status: 400,
            message: "more data than Content-Length".into(),
        });
    }
    let have = body.len();
    body.resize(head.body_bytes, 0);
    stream.read_exact(&mut body[have..]).await.map_err(io_err)?;
    req.body = body;
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::client::{ClientError, NodeClient};

    /// Echoes method, path and body length.
    struct Echo;

    impl Handler for Echo {
        fn handle(&self, req: Request) -> HandlerFuture {
            Box::pin(async move {
                if req.path == "/fail" {
                    return Response::error(409, "it\nconflicts");
                }
                Response::json(
                    200,
                    &serde_json::json!({"m": req.method, "p": req.path, "n": req.body.len()}),
                )
            })
        }
    }

    async fn raw(addr: SocketAddr, bytes: &[u8]) -> (u16, String) {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(bytes).await.unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        let (status, body) = wire::parse_response(&out).unwrap();
        (status, String::from_utf8(body).unwrap())
    }

    #[tokio::test]
    async fn serves_and_rejects_bad_requests() {
        let server = HttpServer::serve("127.0.0.1:0".parse().unwrap(), Arc::new(Echo))
            .await
            .unwrap();
        let addr = server.local_addr();
        let c = NodeClient::new(addr.to_string());
        let (status, body) = c
            .request("POST", "/x", Some(b"{\"a\":1}".to_vec()))
            .await
            .unwrap();
        assert_eq!(status, 200);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v, serde_json::json!({"m": "POST", "p": "/x", "n": 7}));
        match c.info().await {
            Err(ClientError::BadResponse { .. }) => {} // Echo's JSON is not a NodeInfo
            other => panic!("{other:?}"),
        }
        let (status, body) = c.request("GET", "/fail", None).await.unwrap();
        assert_eq!(
            (status, body),
            (409, b"{\"error\":\"it conflicts\"}".to_vec())
        );

        assert_eq!(raw(addr, b"GARBAGE\r\n\r\n").await.0, 400);
        let big = format!(
            "GET / HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_HEAD_BYTES + 10)
        );
        assert_eq!(raw(addr, big.as_bytes()).await.0, 431);
        assert_eq!(
            raw(addr, b"GET / HTTP/1.1\r\nContent-Length: 2\r\n\r\nabc")
                .await
                .0,
            400
        );
        let (status, body) = raw(
            addr,
            b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
        .await;
        assert_eq!(status, 501);
        assert!(body.contains("Content-Length"), "{body}");
        // A body arriving in a later packet is read.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"PUT /y HTTP/1.1\r\nContent-Length: 3\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        s.write_all(b"abc").await.unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        let (status, body) = wire::parse_response(&out).unwrap();
        assert_eq!(status, 200);
        assert!(String::from_utf8(body).unwrap().contains("\"n\": 3"));

        server.stop().await;
        assert!(matches!(
            c.request("GET", "/", None).await,
            Err(ClientError::Connect { .. })
        ));
    }
}
