//! The client the `ferrobay node ...` commands use to talk to a running node's HTTP port.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::wire::{self, MAX_RESPONSE_BYTES, encode_segment};
use crate::api::{
    API_PREFIX, AllowAnyHostRequest, AttachRequest, CreateNamespaceRequest, ErrorBody,
    HealthReport, HostRequest, NamespaceView, NodeInfo, SubsystemView,
};

/// Default time for a whole request/response exchange.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a call failed; every message is one line.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach node at {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("node at {addr}: {source}")]
    Io {
        addr: String,
        source: std::io::Error,
    },
    #[error("node at {addr} did not answer within {timeout:?}")]
    Timeout { addr: String, timeout: Duration },
    #[error("node at {addr} sent a bad response: {reason}")]
    BadResponse { addr: String, reason: String },
    /// The node refused the request (its message).
    #[error("{message}")]
    Api { status: u16, message: String },
}

/// Calls a node's control API at `host:port`.
#[derive(Debug, Clone)]
pub struct NodeClient {
    addr: String,
    timeout: Duration,
}

fn path(parts: &[&str]) -> String {
    let mut p = API_PREFIX.to_string();
    for s in parts {
        p.push('/');
        p.push_str(&encode_segment(s));
    }
    p
}

impl NodeClient {
    pub fn new(addr: impl Into<String>) -> NodeClient {
        NodeClient {
            addr: addr.into(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> NodeClient {
        self.timeout = timeout;
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

    async fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(u16, Vec<u8>), ClientError> {
        let io = |source| ClientError::Io {
            addr: self.addr.clone(),
            source,
        };
        let mut stream =
            TcpStream::connect(&self.addr)
                .await
                .map_err(|source| ClientError::Connect {
                    addr: self.addr.clone(),
                    source,
                })?;
        let body = body.unwrap_or_default();
        let mut msg = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nAccept: application/json\r\n",
            self.addr
        );
        if !body.is_empty() {
            msg.push_str("Content-Type: application/json\r\n");
        }
        msg.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        let mut bytes = msg.into_bytes();
        bytes.extend_from_slice(&body);
        stream.write_all(&bytes).await.map_err(io)?;
        let mut response = Vec::new();
        let mut limited = (&mut stream).take(MAX_RESPONSE_BYTES as u64 + 1);
        limited.read_to_end(&mut response).await.map_err(io)?;
        if response.len() > MAX_RESPONSE_BYTES {
            return Err(ClientError::BadResponse {
                addr: self.addr.clone(),
                reason: format!("response over {MAX_RESPONSE_BYTES} bytes"),
            });
        }
        wire::parse_response(&response).map_err(|e| ClientError::BadResponse {
            addr: self.addr.clone(),
            reason: e.message,
        })
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T, ClientError> {
        let (status, body) = self.request(method, path, body).await?;
        if status >= 400 {
            let message = serde_json::from_slice::<ErrorBody>(&body)
                .map(|e| e.error)
                .unwrap_or_else(|_| {
                    format!("HTTP {status}: {}", String::from_utf8_lossy(&body).trim())
                });
            return Err(ClientError::Api { status, message });
        }
        serde_json::from_slice(&body).map_err(|e| ClientError::BadResponse {
            addr: self.addr.clone(),
            reason: format!("cannot decode JSON: {e}"),
        })
    }

    fn json<T: Serialize>(v: &T) -> Option<Vec<u8>> {
        serde_json::to_vec(v).ok()
    }

    pub async fn info(&self) -> Result<NodeInfo, ClientError> {
        self.call("GET", &path(&["node"]), None).await
    }

    pub async fn list_namespaces(&self) -> Result<Vec<NamespaceView>, ClientError> {
        self.call("GET", &path(&["namespaces"]), None).await
    }

    pub async fn namespace(&self, nqn: &str, nsid: u32) -> Result<NamespaceView, ClientError> {
        self.call("GET", &path(&["namespaces", nqn, &nsid.to_string()]), None)
            .await
    }

    pub async fn create_namespace(
        &self,
        req: &CreateNamespaceRequest,
    ) -> Result<NamespaceView, ClientError> {
        self.call("POST", &path(&["namespaces"]), Self::json(req))
            .await
    }

    pub async fn delete_namespace(&self, nqn: &str, nsid: u32) -> Result<(), ClientError> {
        let _: serde_json::Value = self
            .call(
                "DELETE",
                &path(&["namespaces", nqn, &nsid.to_string()]),
                None,
            )
            .await?;
        Ok(())
    }

    pub async fn attach_namespace(
        &self,
        nqn: &str,
        nsid: u32,
        req: &AttachRequest,
    ) -> Result<NamespaceView, ClientError> {
        self.call(
            "POST",
            &path(&["namespaces", nqn, &nsid.to_string(), "attach"]),
            Self::json(req),
        )
        .await
    }

    pub async fn detach_namespace(
        &self,
        nqn: &str,
        nsid: u32,
        req: &AttachRequest,
    ) -> Result<NamespaceView, ClientError> {
        self.call(
            "POST",
            &path(&["namespaces", nqn, &nsid.to_string(), "detach"]),
            Self::json(req),
        )
        .await
    }

    pub async fn subsystems(&self) -> Result<Vec<SubsystemView>, ClientError> {
        self.call("GET", &path(&["subsystems"]), None).await
    }

    pub async fn allow_host(
        &self,
        nqn: &str,
        host_nqn: &str,
    ) -> Result<SubsystemView, ClientError> {
        let req = HostRequest {
            host_nqn: host_nqn.to_string(),
        };
        self.call(
            "POST",
            &path(&["subsystems", nqn, "hosts"]),
            Self::json(&req),
        )
        .await
    }

    pub async fn deny_host(&self, nqn: &str, host_nqn: &str) -> Result<SubsystemView, ClientError> {
        self.call(
            "DELETE",
            &path(&["subsystems", nqn, "hosts", host_nqn]),
            None,
        )
        .await
    }

    pub async fn set_allow_any_host(
        &self,
        nqn: &str,
        allow: bool,
    ) -> Result<SubsystemView, ClientError> {
        let req = AllowAnyHostRequest {
            allow_any_host: allow,
        };
        self.call(
            "PUT",
            &path(&["subsystems", nqn, "allow_any_host"]),
            Self::json(&req),
        )
        .await
    }

    pub async fn health(&self) -> Result<HealthReport, ClientError> {
        self.call("GET", &path(&["health"]), None).await
    }

    /// The Prometheus text of `/metrics`.
    pub async fn metrics(&self) -> Result<String, ClientError> {
        let (status, body) = self.request("GET", "/metrics", None).await?;
        if status != 200 {
            return Err(ClientError::Api {
                status,
                message: String::from_utf8_lossy(&body).trim().to_string(),
            });
        }
        String::from_utf8(body).map_err(|_| ClientError::BadResponse {
            addr: self.addr.clone(),
            reason: "metrics are not UTF-8".into(),
        })
    }
}
