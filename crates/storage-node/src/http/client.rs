//! [`NodeClient`]: a running node's control API as functions, for the `ferrobay node ...`
//! commands and the control plane (over [`httpapi::HttpClient`]).

use std::time::Duration;

use httpapi::client::path as api_path;
use httpapi::{ClientError, HttpClient};

use nvmf_target::{QosKey, QosLimits};

use crate::api::{
    API_PREFIX, AllowAnyHostRequest, AttachRequest, CreateNamespaceRequest, HealthReport,
    HostRequest, NamespaceView, NodeInfo, PredictionReport, QosEntry, QosList, SubsystemView,
    TelemetryReport,
};

/// Calls a node's control API at `host:port`.
#[derive(Debug, Clone)]
pub struct NodeClient {
    http: HttpClient,
}

fn path(parts: &[&str]) -> String {
    api_path(API_PREFIX, parts)
}

/// `/api/v1/qos/{nqn}/{nsid|all}/{host|all}`.
fn qos_path(key: &QosKey) -> String {
    let (nsid, host) = super::qos_routes::key_segments(key);
    path(&["qos", &key.subsystem_nqn, &nsid, host])
}

impl NodeClient {
    pub fn new(addr: impl Into<String>) -> NodeClient {
        NodeClient {
            http: HttpClient::new(addr),
        }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> NodeClient {
        self.http = self.http.with_timeout(timeout);
        self
    }

    /// The bearer token the node requires (`docs/api.md`).
    pub fn with_token(mut self, token: Option<String>) -> NodeClient {
        self.http = self.http.with_token(token);
        self
    }

    pub fn addr(&self) -> &str {
        self.http.addr()
    }

    /// One exchange; returns the status and body of any response.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(u16, Vec<u8>), ClientError> {
        self.http.request(method, path, body).await
    }

    pub async fn info(&self) -> Result<NodeInfo, ClientError> {
        self.http.call("GET", &path(&["node"]), None).await
    }

    pub async fn list_namespaces(&self) -> Result<Vec<NamespaceView>, ClientError> {
        self.http.call("GET", &path(&["namespaces"]), None).await
    }

    pub async fn namespace(&self, nqn: &str, nsid: u32) -> Result<NamespaceView, ClientError> {
        self.http
            .call("GET", &path(&["namespaces", nqn, &nsid.to_string()]), None)
            .await
    }

    pub async fn create_namespace(
        &self,
        req: &CreateNamespaceRequest,
    ) -> Result<NamespaceView, ClientError> {
        self.http
            .call_json("POST", &path(&["namespaces"]), req)
            .await
    }

    pub async fn delete_namespace(&self, nqn: &str, nsid: u32) -> Result<(), ClientError> {
        let _: serde_json::Value = self
            .http
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
        self.http
            .call_json(
                "POST",
                &path(&["namespaces", nqn, &nsid.to_string(), "attach"]),
                req,
            )
            .await
    }

    pub async fn detach_namespace(
        &self,
        nqn: &str,
        nsid: u32,
        req: &AttachRequest,
    ) -> Result<NamespaceView, ClientError> {
        self.http
            .call_json(
                "POST",
                &path(&["namespaces", nqn, &nsid.to_string(), "detach"]),
                req,
            )
            .await
    }

    pub async fn subsystems(&self) -> Result<Vec<SubsystemView>, ClientError> {
        self.http.call("GET", &path(&["subsystems"]), None).await
    }

    pub async fn allow_host(
        &self,
        nqn: &str,
        host_nqn: &str,
    ) -> Result<SubsystemView, ClientError> {
        self.allow_host_with(nqn, &HostRequest::new(host_nqn)).await
    }

    /// Allows a host with the rest of `req` (DH-HMAC-CHAP secrets and choices).
    pub async fn allow_host_with(
        &self,
        nqn: &str,
        req: &HostRequest,
    ) -> Result<SubsystemView, ClientError> {
        self.http
            .call_json("POST", &path(&["subsystems", nqn, "hosts"]), req)
            .await
    }

    pub async fn deny_host(&self, nqn: &str, host_nqn: &str) -> Result<SubsystemView, ClientError> {
        self.http
            .call(
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
        self.http
            .call_json("PUT", &path(&["subsystems", nqn, "allow_any_host"]), &req)
            .await
    }

    /// Every QoS limit with its statistics, and the contention caps in force.
    pub async fn qos_list(&self) -> Result<QosList, ClientError> {
        self.http.call("GET", &path(&["qos"]), None).await
    }

    /// Sets the limits of `key` (they replace what it had; empty limits clear it).
    pub async fn set_qos(&self, key: &QosKey, limits: &QosLimits) -> Result<QosEntry, ClientError> {
        self.http.call_json("PUT", &qos_path(key), limits).await
    }

    /// Removes the limits of `key`; the limits it had.
    pub async fn clear_qos(&self, key: &QosKey) -> Result<QosLimits, ClientError> {
        self.http.call("DELETE", &qos_path(key), None).await
    }

    pub async fn telemetry(&self) -> Result<TelemetryReport, ClientError> {
        self.http.call("GET", &path(&["telemetry"]), None).await
    }

    pub async fn predictions(&self) -> Result<PredictionReport, ClientError> {
        self.http.call("GET", &path(&["predictions"]), None).await
    }

    pub async fn health(&self) -> Result<HealthReport, ClientError> {
        self.http.call("GET", &path(&["health"]), None).await
    }

    /// The Prometheus text of `/metrics`.
    pub async fn metrics(&self) -> Result<String, ClientError> {
        self.http.text("/metrics").await
    }
}
