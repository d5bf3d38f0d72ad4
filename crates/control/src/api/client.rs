//! [`ApiClient`]: the cluster API as functions, for `ferrobay volume ... --api`,
//! `ferrobay events --api` and tests.

use std::time::Duration;

use httpapi::client::path;
use httpapi::{ClientError, HttpClient};
use meta::schema::EventPage;
use serde::de::DeserializeOwned;

use super::{
    API_PREFIX, MoveRequest, NodeDrives, NodeHosts, NodeNamespaces, NodePredictions, NodeTelemetry,
};
use crate::error::ControlError;
use crate::provision::replace::{ReplaceMember, ReplaceRequest};
use crate::provision::{CreateVolume, VolumeView};
use crate::records::{NodeRecord, VolumeQos, VolumeRecord, VolumeStatusRecord};
use nvmf_target::QosLimits;

/// Calls the cluster API at `host:port`.
#[derive(Clone, Debug)]
pub struct ApiClient {
    http: HttpClient,
}

impl ApiClient {
    pub fn new(addr: impl Into<String>) -> ApiClient {
        ApiClient {
            http: HttpClient::new(addr),
        }
    }

    /// Limit of a whole exchange (default 60 s; creating a large volume zeroes its
    /// members, so give it more).
    pub fn with_timeout(mut self, timeout: Duration) -> ApiClient {
        self.http = self.http.with_timeout(timeout);
        self
    }

    /// The bearer token the API requires (`docs/api.md`).
    pub fn with_token(mut self, token: Option<String>) -> ApiClient {
        self.http = self.http.with_token(token);
        self
    }

    pub fn addr(&self) -> &str {
        self.http.addr()
    }

    /// The underlying HTTP client (raw requests).
    pub fn http(&self) -> &HttpClient {
        &self.http
    }

    fn transport(&self, e: ClientError) -> ControlError {
        match e {
            ClientError::Api { status, message } => ControlError::Api { status, message },
            other => ControlError::ApiTransport {
                addr: self.addr().to_string(),
                reason: other.to_string(),
            },
        }
    }

    /// One call; any refusal (404 too) is an error.
    async fn must<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T, ControlError> {
        self.http
            .call(method, path, body)
            .await
            .map_err(|e| self.transport(e))
    }

    fn json<T: serde::Serialize>(v: &T) -> Result<Option<Vec<u8>>, ControlError> {
        serde_json::to_vec(v)
            .map(Some)
            .map_err(|e| ControlError::Invalid(format!("request does not encode: {e}")))
    }

    fn p(parts: &[&str]) -> String {
        path(API_PREFIX, parts)
    }

    pub async fn list_volumes(&self) -> Result<Vec<VolumeView>, ControlError> {
        self.must("GET", &Self::p(&["volumes"]), None).await
    }

    /// `None` when there is no such volume.
    pub async fn volume(&self, name: &str) -> Result<Option<VolumeView>, ControlError> {
        match self
            .http
            .call("GET", &Self::p(&["volumes", name]), None)
            .await
        {
            Ok(v) => Ok(Some(v)),
            Err(ClientError::Api { status: 404, .. }) => Ok(None),
            Err(e) => Err(self.transport(e)),
        }
    }

    /// The owner's live status of a volume (404 when no processor node owns it).
    pub async fn volume_status(&self, name: &str) -> Result<VolumeStatusRecord, ControlError> {
        self.must("GET", &Self::p(&["volumes", name, "status"]), None)
            .await
    }

    pub async fn create_volume(&self, req: &CreateVolume) -> Result<VolumeRecord, ControlError> {
        self.must("POST", &Self::p(&["volumes"]), Self::json(req)?)
            .await
    }

    pub async fn delete_volume(
        &self,
        name: &str,
        force: bool,
    ) -> Result<VolumeRecord, ControlError> {
        let mut path = Self::p(&["volumes", name]);
        if force {
            path.push_str("?force=true");
        }
        self.must("DELETE", &path, None).await
    }

    pub async fn move_volume(&self, name: &str, to: &str) -> Result<(), ControlError> {
        let body = Self::json(&MoveRequest { to: to.to_string() })?;
        let _: serde_json::Value = self
            .must("POST", &Self::p(&["volumes", name, "move"]), body)
            .await?;
        Ok(())
    }

    /// Replaces member `slot` of volume `name` with a new namespace on `storage_node`
    /// (`POST .../members/{slot}/replace`).
    pub async fn replace_member(
        &self,
        name: &str,
        slot: usize,
        storage_node: &str,
    ) -> Result<ReplaceRequest, ControlError> {
        let body = Self::json(&ReplaceMember {
            storage_node: storage_node.to_string(),
        })?;
        let slot = slot.to_string();
        self.must(
            "POST",
            &Self::p(&["volumes", name, "members", &slot, "replace"]),
            body,
        )
        .await
    }

    pub async fn nodes(&self) -> Result<Vec<NodeRecord>, ControlError> {
        self.must("GET", &Self::p(&["nodes"]), None).await
    }

    /// The drives of every storage node.
    pub async fn drives(&self) -> Result<Vec<NodeDrives>, ControlError> {
        self.must("GET", &Self::p(&["drives"]), None).await
    }

    /// The namespaces of every storage node.
    pub async fn namespaces(&self) -> Result<Vec<NodeNamespaces>, ControlError> {
        self.must("GET", &Self::p(&["namespaces"]), None).await
    }

    /// The drive and namespace telemetry of every storage node.
    pub async fn telemetry(&self) -> Result<Vec<NodeTelemetry>, ControlError> {
        self.must("GET", &Self::p(&["telemetry"]), None).await
    }

    /// The telemetry of one storage node.
    pub async fn node_telemetry(
        &self,
        node: &str,
    ) -> Result<storage_node::api::TelemetryReport, ControlError> {
        self.must("GET", &Self::p(&["nodes", node, "telemetry"]), None)
            .await
    }

    /// The failure-prediction grades of every node (drives and volume members).
    pub async fn predictions(&self) -> Result<Vec<NodePredictions>, ControlError> {
        self.must("GET", &Self::p(&["predictions"]), None).await
    }

    /// The grades of one node.
    pub async fn node_predictions(&self, node: &str) -> Result<NodePredictions, ControlError> {
        self.must("GET", &Self::p(&["nodes", node, "predictions"]), None)
            .await
    }

    /// The access lists of every storage node.
    pub async fn hosts(&self) -> Result<Vec<NodeHosts>, ControlError> {
        self.must("GET", &Self::p(&["hosts"]), None).await
    }

    /// A page of events, newest first (`since`, `before`: ids; `limit`: 1..=1000).
    pub async fn events(
        &self,
        since: u64,
        before: Option<u64>,
        limit: usize,
    ) -> Result<EventPage, ControlError> {
        let mut path = format!("{}?since={since}&limit={limit}", Self::p(&["events"]));
        if let Some(b) = before {
            path.push_str(&format!("&before={b}"));
        }
        self.must("GET", &path, None).await
    }

    /// The volume's QoS limits.
    pub async fn volume_qos(&self, name: &str) -> Result<VolumeQos, ControlError> {
        self.must("GET", &Self::p(&["volumes", name, "qos"]), None)
            .await
    }

    /// Sets the limits of the volume (`host` `None`) or of one host on it.
    pub async fn set_volume_qos(
        &self,
        name: &str,
        host: Option<&str>,
        limits: QosLimits,
    ) -> Result<VolumeQos, ControlError> {
        let body = Self::json(&limits)?;
        self.must(
            "PUT",
            &Self::p(&["volumes", name, "qos", host.unwrap_or("all")]),
            body,
        )
        .await
    }

    /// Removes the limits of the volume (`host` `None`) or of one host on it.
    pub async fn clear_volume_qos(
        &self,
        name: &str,
        host: Option<&str>,
    ) -> Result<QosLimits, ControlError> {
        self.must(
            "DELETE",
            &Self::p(&["volumes", name, "qos", host.unwrap_or("all")]),
            None,
        )
        .await
    }

    /// The Prometheus text of `/metrics`.
    pub async fn metrics(&self) -> Result<String, ControlError> {
        self.http
            .text("/metrics")
            .await
            .map_err(|e| self.transport(e))
    }
}
