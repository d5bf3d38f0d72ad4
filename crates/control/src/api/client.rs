//! [`ApiClient`]: the processor node's API as functions, for `ferrobay volume ... --api`.

use std::time::Duration;

use httpapi::client::encode_segment;
use httpapi::{ClientError, HttpClient};
use serde::de::DeserializeOwned;

use super::{API_PREFIX, MoveRequest};
use crate::error::ControlError;
use crate::provision::{CreateVolume, VolumeView};
use crate::records::{NodeRecord, VolumeRecord};

/// Calls a processor node's API at `host:port`.
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

    fn transport(&self, e: ClientError) -> ControlError {
        match e {
            ClientError::Api { status, message } => ControlError::Api { status, message },
            other => ControlError::ApiTransport {
                addr: self.addr().to_string(),
                reason: other.to_string(),
            },
        }
    }

    /// One call; `Ok(None)` for 404 when `allow_404`.
    async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        allow_404: bool,
    ) -> Result<Option<T>, ControlError> {
        match self.http.call(method, path, body).await {
            Ok(v) => Ok(Some(v)),
            Err(ClientError::Api { status: 404, .. }) if allow_404 => Ok(None),
            Err(e) => Err(self.transport(e)),
        }
    }

    async fn must<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T, ControlError> {
        self.call(method, path, body, false)
            .await?
            .ok_or_else(|| ControlError::NotFound(format!("{path}: not found")))
    }

    fn json<T: serde::Serialize>(v: &T) -> Result<Option<Vec<u8>>, ControlError> {
        serde_json::to_vec(v)
            .map(Some)
            .map_err(|e| ControlError::Invalid(format!("request does not encode: {e}")))
    }

    fn volume_path(name: &str) -> String {
        format!("{API_PREFIX}/volumes/{}", encode_segment(name))
    }

    pub async fn list_volumes(&self) -> Result<Vec<VolumeView>, ControlError> {
        self.must("GET", &format!("{API_PREFIX}/volumes"), None)
            .await
    }

    /// `None` when there is no such volume.
    pub async fn volume(&self, name: &str) -> Result<Option<VolumeView>, ControlError> {
        self.call("GET", &Self::volume_path(name), None, true).await
    }

    pub async fn create_volume(&self, req: &CreateVolume) -> Result<VolumeRecord, ControlError> {
        self.must("POST", &format!("{API_PREFIX}/volumes"), Self::json(req)?)
            .await
    }

    pub async fn delete_volume(
        &self,
        name: &str,
        force: bool,
    ) -> Result<VolumeRecord, ControlError> {
        let mut path = Self::volume_path(name);
        if force {
            path.push_str("?force=true");
        }
        self.must("DELETE", &path, None).await
    }

    pub async fn move_volume(&self, name: &str, to: &str) -> Result<(), ControlError> {
        let body = Self::json(&MoveRequest { to: to.to_string() })?;
        let _: serde_json::Value = self
            .must("POST", &format!("{}/move", Self::volume_path(name)), body)
            .await?;
        Ok(())
    }

    pub async fn nodes(&self) -> Result<Vec<NodeRecord>, ControlError> {
        self.must("GET", &format!("{API_PREFIX}/nodes"), None).await
    }

    /// The Prometheus text of `/metrics`.
    pub async fn metrics(&self) -> Result<String, ControlError> {
        self.http
            .text("/metrics")
            .await
            .map_err(|e| self.transport(e))
    }
}
