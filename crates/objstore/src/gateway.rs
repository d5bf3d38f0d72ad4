//! The library entry point of an S3 gateway: [`Gateway::start`] takes a configuration,
//! an opened index and the shard stores, and serves S3 on a TCP listener until
//! [`Gateway::shutdown`]. Everything a gateway knows is in the index and the stores, so
//! any number of gateways may serve one cluster.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use s3s::service::S3ServiceBuilder;

use crate::clock::{Clock, SystemClock};
use crate::drain;
use crate::index::Index;
use crate::linger::LingeringIo;
use crate::objects::{BackgroundConfig, ObjectConfig, ObjectLayer, spawn_background};
use crate::placement::{PlacementError, StoreSet};
use crate::s3::{AccessControl, Credentials, KeyStore, S3Gateway};
use crate::shard::ShardStore;

/// Largest request header section accepted, as on AWS (8 KiB).
pub const MAX_HEADER_BYTES: usize = 8 << 10;

#[derive(Clone, Debug)]
pub struct GatewayConfig {
    pub listen: SocketAddr,
    /// The region reported to clients and expected in signatures.
    pub region: String,
    /// The root user's access key (full access; more keys live in the index).
    pub root: Credentials,
    pub objects: ObjectConfig,
    /// Reaper, healer and scanner; None runs none of them (tests drive them by hand).
    pub background: Option<BackgroundConfig>,
    /// Smallest multipart part but the last (AWS: 5 MiB).
    pub min_part_bytes: u64,
    /// Serve S3 over TLS with this certificate (`None`: plain HTTP).
    pub tls: Option<httpapi::tls::ServerTls>,
}

impl GatewayConfig {
    pub fn new(listen: SocketAddr, root: Credentials) -> Self {
        GatewayConfig {
            listen,
            region: "us-east-1".to_string(),
            root,
            objects: ObjectConfig::default(),
            background: Some(BackgroundConfig::default()),
            min_part_bytes: crate::s3::MIN_PART_BYTES,
            tls: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error(transparent)]
    Placement(#[from] PlacementError),
    #[error("no shard stores configured")]
    NoStores,
    #[error("default erasure code {geometry}: {source}")]
    Geometry {
        geometry: crate::layout::Geometry,
        source: PlacementError,
    },
    #[error("listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A running gateway.
pub struct Gateway {
    addr: SocketAddr,
    layer: Arc<ObjectLayer>,
    stop: tokio::sync::watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    background: Option<tokio::task::JoinHandle<()>>,
}

fn header_section_bytes(req: &http::Request<Incoming>) -> usize {
    req.headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum::<usize>()
        + req.uri().to_string().len()
}

fn header_too_large() -> http::Response<s3s::Body> {
    let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>RequestHeaderSectionTooLarge</Code>\
                <Message>Your request header section exceeds the maximum allowed size.</Message>\
                <MaxSizeAllowed>8192</MaxSizeAllowed></Error>";
    let mut resp = http::Response::new(s3s::Body::from(body.to_string()));
    *resp.status_mut() = http::StatusCode::BAD_REQUEST;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    resp
}

impl Gateway {
    /// Starts serving S3 on `config.listen` over `index` and `stores`.
    pub async fn start(
        config: GatewayConfig,
        index: Index,
        stores: Vec<Arc<dyn ShardStore>>,
    ) -> Result<Gateway, GatewayError> {
        Self::start_with_clock(config, index, stores, Arc::new(SystemClock)).await
    }

    /// [`start`](Self::start) with a clock of the caller's choosing (tests).
    pub async fn start_with_clock(
        config: GatewayConfig,
        index: Index,
        stores: Vec<Arc<dyn ShardStore>>,
        clock: Arc<dyn Clock>,
    ) -> Result<Gateway, GatewayError> {
        let set = checked_set(stores, config.objects.default_geometry)?;
        let layer = Arc::new(ObjectLayer::new(
            index.clone(),
            set,
            config.objects.clone(),
            clock,
        ));
        let s3 = S3Gateway::new(layer.clone(), config.region.clone())
            .with_min_part_bytes(config.min_part_bytes);
        let mut builder = S3ServiceBuilder::new(s3);
        builder.set_auth(KeyStore::new(config.root.clone(), index.clone()));
        builder.set_access(AccessControl::new(index));
        let service = builder.build();

        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| GatewayError::Listen {
                addr: config.listen,
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| GatewayError::Listen {
                addr: config.listen,
                source,
            })?;
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(serve(
            listener,
            service,
            config.tls.clone(),
            stop_rx.clone(),
        ));
        let background = config
            .background
            .clone()
            .map(|b| spawn_background(layer.clone(), b, stop_rx));
        tracing::info!(%addr, https = config.tls.is_some(), "S3 gateway listening");
        Ok(Gateway {
            addr,
            layer,
            stop,
            server,
            background,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Replaces the shard stores (a pool that grew; see [`DataPath::set_stores`]). The new
    /// set must still hold the default geometry; on error nothing changes.
    ///
    /// [`DataPath::set_stores`]: crate::datapath::DataPath::set_stores
    pub fn set_stores(&self, stores: Vec<Arc<dyn ShardStore>>) -> Result<(), GatewayError> {
        replace_stores(&self.layer, stores)
    }

    /// The object layer (background work on demand, inspection in tests).
    pub fn layer(&self) -> &Arc<ObjectLayer> {
        &self.layer
    }

    /// Stops accepting, lets requests in flight finish, stops background work.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.server.await;
        if let Some(b) = self.background {
            let _ = b.await;
        }
    }
}

/// [`Gateway::set_stores`] for whoever holds only the object layer (a task following a
/// store pool while the gateway is owned elsewhere).
pub fn replace_stores(
    layer: &ObjectLayer,
    stores: Vec<Arc<dyn ShardStore>>,
) -> Result<(), GatewayError> {
    let set = checked_set(stores, layer.config().default_geometry)?;
    layer.data().set_stores(set);
    Ok(())
}

fn checked_set(
    stores: Vec<Arc<dyn ShardStore>>,
    geometry: crate::layout::Geometry,
) -> Result<StoreSet, GatewayError> {
    if stores.is_empty() {
        return Err(GatewayError::NoStores);
    }
    let set = StoreSet::new(stores)?;
    set.check_geometry(geometry.total())
        .map_err(|source| GatewayError::Geometry { geometry, source })?;
    Ok(set)
}

async fn serve(
    listener: tokio::net::TcpListener,
    service: s3s::service::S3Service,
    tls: Option<httpapi::tls::ServerTls>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut http = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    // Let a few large headers through to the size check below, which answers with
    // AWS's error instead of hyper's bare 431.
    http.http1().max_headers(1000).max_buf_size(1 << 20);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let (socket, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let _ = socket.set_nodelay(true);
        let svc = service.clone();
        let handler = hyper::service::service_fn(move |req: http::Request<Incoming>| {
            let svc = svc.clone();
            async move {
                if header_section_bytes(&req) > MAX_HEADER_BYTES {
                    return Ok::<_, s3s::HttpError>(header_too_large());
                }
                let (parts, body) = req.into_parts();
                let (body, rest) = drain::share(body);
                let req = http::Request::from_parts(parts, s3s::Body::http_body(body));
                let mut resp = svc.call(req).await?;
                if drain::finish_body(rest).await == drain::Rest::Close {
                    resp.headers_mut().insert(
                        http::header::CONNECTION,
                        http::HeaderValue::from_static("close"),
                    );
                }
                Ok(resp)
            }
        });
        let http = http.clone();
        let tls = tls.clone();
        let watcher = graceful.watcher();
        let mut stopping = stop.clone();
        // The TLS handshake in the connection's own task: a slow or broken client holds
        // up no other. One still running at shutdown is dropped (it has no request yet).
        tokio::spawn(async move {
            let io = match &tls {
                None => httpapi::tls::MaybeTls::Plain(socket),
                Some(tls) => match tokio::select! {
                    r = tls.accept(socket) => r,
                    _ = stopping.changed() => return,
                } {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!("S3 TLS handshake failed: {e}");
                        return;
                    }
                },
            };
            let conn = http
                .serve_connection(TokioIo::new(LingeringIo::new(io)), handler)
                .into_owned();
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!("connection: {e}");
            }
        });
    }
    drop(listener);
    // Requests in flight get a bounded time to finish.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), graceful.shutdown()).await;
}
