//! [`HttpClient`]: calls a JSON API at `host:port`, `http://host:port` or
//! `https://host:port` over hyper's pooled client (keep-alive), with a timeout per call, a
//! response size bound and the bearer token. https trusts the CAs of a [`ClientTls`]
//! only; a bare `host:port` is https when the process has a default trust
//! ([`crate::tls::set_default_client`]), else plain HTTP.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo};
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::ErrorBody;
use crate::tls::{ClientStream, ClientTls, MaybeTls};

/// Default time for a whole exchange (request sent, response read).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest response the client reads.
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;
/// Idle keep-alive connections are closed after this long.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a call failed; every message is one line.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach {addr}: {reason}")]
    Connect { addr: String, reason: String },
    /// The TLS handshake failed: most often a server certificate no trusted CA signed.
    #[error("{addr}: TLS: {reason}")]
    Tls { addr: String, reason: String },
    #[error("{addr}: {reason}")]
    Io { addr: String, reason: String },
    #[error("{addr} did not answer within {timeout:?}")]
    Timeout { addr: String, timeout: Duration },
    #[error("{addr} sent a bad response: {reason}")]
    BadResponse { addr: String, reason: String },
    /// The server refused the request (its message).
    #[error("{message}")]
    Api { status: u16, message: String },
}

impl ClientError {
    /// The HTTP status of an [`ClientError::Api`] answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Characters escaped in one path segment: controls, space, and what would end or split
/// a segment (`/ ? # %`) or confuse a reader (`" < > \` ...).
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'\\')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// Percent-encodes one path segment.
pub fn encode_segment(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// `prefix/seg1/seg2...` with each segment percent-encoded.
pub fn path(prefix: &str, segments: &[&str]) -> String {
    let mut p = prefix.to_string();
    for s in segments {
        p.push('/');
        p.push_str(&encode_segment(s));
    }
    p
}

/// A client of one server. Cheap to clone (clones share the connection pool).
#[derive(Clone)]
pub struct HttpClient {
    /// As given (messages name it so).
    addr: String,
    /// `host:port`, without the scheme.
    authority: String,
    https: bool,
    /// The scheme was given (a bare `host:port` follows the TLS configuration).
    explicit_scheme: bool,
    timeout: Duration,
    token: Option<String>,
    tls: Option<ClientTls>,
    inner: Client<Connector, Full<Bytes>>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("addr", &self.addr)
            .field("https", &self.https)
            .field("timeout", &self.timeout)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .finish_non_exhaustive()
    }
}

impl HttpClient {
    /// A client of the server at `addr`: `host:port`, `http://host:port` or
    /// `https://host:port`. It trusts the process's default CAs
    /// ([`crate::tls::set_default_client`]); with those set, `host:port` is https.
    pub fn new(addr: impl Into<String>) -> HttpClient {
        let addr = addr.into();
        let (https, explicit_scheme, authority) = match split_scheme(&addr) {
            (Some(https), rest) => (https, true, rest),
            (None, rest) => (false, false, rest),
        };
        let authority = authority.to_string();
        let client = HttpClient {
            addr,
            authority,
            https,
            explicit_scheme,
            timeout: DEFAULT_TIMEOUT,
            token: None,
            tls: None,
            inner: pooled(None),
        };
        match crate::tls::default_client() {
            Some(tls) => client.with_tls(tls),
            None => client,
        }
    }

    /// Trusts the CAs of `tls` for https; a bare `host:port` address becomes https.
    pub fn with_tls(mut self, tls: ClientTls) -> HttpClient {
        if !self.explicit_scheme {
            self.https = true;
        }
        self.inner = pooled(Some(tls.clone()));
        self.tls = Some(tls);
        self
    }

    /// Whether calls go over TLS.
    pub fn is_https(&self) -> bool {
        self.https
    }

    /// Limit of one whole exchange.
    pub fn with_timeout(mut self, timeout: Duration) -> HttpClient {
        self.timeout = timeout;
        self
    }

    /// Sends `Authorization: Bearer TOKEN` with every request.
    pub fn with_token(mut self, token: Option<String>) -> HttpClient {
        self.token = token;
        self
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// One exchange; returns the status and body of any response.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(u16, Vec<u8>), ClientError> {
        match tokio::time::timeout(self.timeout, self.exchange(method, path, body)).await {
            Ok(r) => r,
            Err(_) => Err(ClientError::Timeout {
                addr: self.addr.clone(),
                timeout: self.timeout,
            }),
        }
    }

    fn bad(&self, reason: impl Into<String>) -> ClientError {
        ClientError::BadResponse {
            addr: self.addr.clone(),
            reason: reason.into(),
        }
    }

    async fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(u16, Vec<u8>), ClientError> {
        let method = Method::from_bytes(method.as_bytes()).map_err(|e| ClientError::Io {
            addr: self.addr.clone(),
            reason: format!("bad method {method:?}: {e}"),
        })?;
        let scheme = if self.https { "https" } else { "http" };
        let uri = format!("{scheme}://{}{path}", self.authority);
        let mut req = Request::builder()
            .method(method)
            .uri(&uri)
            .header(header::ACCEPT, "application/json");
        if body.is_some() {
            req = req.header(header::CONTENT_TYPE, "application/json");
        }
        if let Some(t) = &self.token {
            let v = HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| ClientError::Io {
                addr: self.addr.clone(),
                reason: "the API token has characters a header cannot carry".into(),
            })?;
            req = req.header(header::AUTHORIZATION, v);
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| ClientError::Io {
                addr: self.addr.clone(),
                reason: format!("bad request {uri}: {e}"),
            })?;
        let resp = self.inner.request(req).await.map_err(|e| {
            if let Some(reason) = tls_cause(&e) {
                return ClientError::Tls {
                    addr: self.addr.clone(),
                    reason,
                };
            }
            let reason = error_chain(&e);
            if e.is_connect() {
                ClientError::Connect {
                    addr: self.addr.clone(),
                    reason,
                }
            } else {
                ClientError::Io {
                    addr: self.addr.clone(),
                    reason,
                }
            }
        })?;
        let status = resp.status().as_u16();
        let bytes = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| self.bad(format!("reading the body: {e}")))?
            .to_bytes();
        Ok((status, bytes.to_vec()))
    }

    /// One call whose answer is JSON: a 4xx/5xx answer becomes [`ClientError::Api`] with
    /// the server's message.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T, ClientError> {
        let (status, bytes) = self.request(method, path, body).await?;
        if status >= 400 {
            return Err(api_error(status, &bytes));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| self.bad(format!("cannot decode JSON of {path}: {e}")))
    }

    /// [`HttpClient::call`] with a JSON body.
    pub async fn call_json<B: Serialize, T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let bytes = serde_json::to_vec(body).map_err(|e| ClientError::Io {
            addr: self.addr.clone(),
            reason: format!("request does not encode: {e}"),
        })?;
        self.call(method, path, Some(bytes)).await
    }

    /// A text page (e.g. `/metrics`).
    pub async fn text(&self, path: &str) -> Result<String, ClientError> {
        let (status, bytes) = self.request("GET", path, None).await?;
        if status != 200 {
            return Err(api_error(status, &bytes));
        }
        String::from_utf8(bytes).map_err(|_| self.bad(format!("{path} is not UTF-8")))
    }
}

/// The error of a 4xx/5xx answer: the `{"error"}` message, else the body's text.
pub fn api_error(status: u16, body: &[u8]) -> ClientError {
    let message = serde_json::from_slice::<ErrorBody>(body)
        .map(|e| e.error)
        .unwrap_or_else(|_| format!("HTTP {status}: {}", String::from_utf8_lossy(body).trim()));
    ClientError::Api { status, message }
}

/// An error and its sources on one line (hyper's top-level message alone says little).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s.replace(['\n', '\r'], " ")
}

/// `(Some(is_https), rest)` for an address with a scheme, `(None, addr)` without; a
/// trailing `/` is dropped.
fn split_scheme(addr: &str) -> (Option<bool>, &str) {
    let trimmed = addr.trim_end_matches('/');
    if let Some(rest) = trimmed.strip_prefix("https://") {
        (Some(true), rest)
    } else if let Some(rest) = trimmed.strip_prefix("http://") {
        (Some(false), rest)
    } else {
        (None, trimmed)
    }
}

/// The TLS error behind a failed request, as one line with what to do about the usual one.
fn tls_cause(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        let found = c.downcast_ref::<rustls::Error>().or_else(|| {
            c.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(t) = found {
            let hint = match t {
                rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer) => {
                    " (no trusted CA signed the server's certificate: give its CA with --ca-cert FILE or FERROBAY_CA_CERT)"
                }
                rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForName
                    | rustls::CertificateError::NotValidForNameContext { .. },
                ) => " (the certificate does not name this host: see `ferrobay gen-cert --name`)",
                _ => "",
            };
            return Some(format!("{t}{hint}").replace(['\n', '\r'], " "));
        }
        cur = c.source();
    }
    None
}

fn pooled(tls: Option<ClientTls>) -> Client<Connector, Full<Bytes>> {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_secs(10)));
    // The scheme decides TLS in Connector; HttpConnector only opens the TCP connection.
    http.enforce_http(false);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_max_idle_per_host(8)
        .build(Connector { http, tls })
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// TCP, then the TLS handshake for `https://` URIs (trusting `tls`, or nothing).
#[derive(Clone)]
struct Connector {
    http: HttpConnector,
    tls: Option<ClientTls>,
}

impl tower_service::Service<http::Uri> for Connector {
    type Response = TokioIo<ClientStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        tower_service::Service::<http::Uri>::poll_ready(&mut self.http, cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let mut http = self.http.clone();
        let tls = self.tls.clone();
        Box::pin(async move {
            let https = uri.scheme_str() == Some("https");
            let host = uri
                .host()
                .unwrap_or_default()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let tcp = tower_service::Service::call(&mut http, uri)
                .await?
                .into_inner();
            if !https {
                return Ok(TokioIo::new(MaybeTls::Plain(tcp)));
            }
            let name = rustls::pki_types::ServerName::try_from(host)
                .map_err(|e| format!("bad server name: {e}"))?;
            let tls = tls.unwrap_or_else(ClientTls::trust_nothing);
            let stream = tls.connector().connect(name, tcp).await?;
            Ok(TokioIo::new(MaybeTls::Tls(Box::new(stream))))
        })
    }
}

impl Connection for ClientStream {
    fn connected(&self) -> Connected {
        match self {
            MaybeTls::Plain(s) => s.connected(),
            MaybeTls::Tls(s) => s.get_ref().0.connected(),
        }
    }
}
