//! The error every API answers with: an HTTP status and `{"error": "<one line>"}`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

/// Body of every error response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong, on one line.
    pub error: String,
}

/// An error answer: status and message (made one line when sent).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    /// `status` must be a 4xx or 5xx code; anything else becomes 500.
    pub fn new(status: u16, message: impl Into<String>) -> ApiError {
        let status = StatusCode::from_u16(status)
            .ok()
            .filter(|s| s.is_client_error() || s.is_server_error())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(404, message)
    }
}

/// The message on one line (CR/LF become spaces).
pub fn one_line(message: &str) -> String {
    message.replace(['\n', '\r'], " ")
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: one_line(&self.message),
        };
        let bytes = serde_json::to_vec(&body)
            .unwrap_or_else(|_| b"{\"error\":\"internal error\"}".to_vec());
        let mut r = (self.status, bytes).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    }
}

/// A JSON answer with `status` (pretty-printed, newline-terminated, for people with curl).
pub fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec_pretty(value) {
        Ok(mut body) => {
            body.push(b'\n');
            let mut r = (status, body).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }
        Err(e) => ApiError::new(500, format!("cannot encode response: {e}")).into_response(),
    }
}

/// `200` with `value` as JSON.
pub fn ok<T: Serialize>(value: &T) -> Response {
    json(StatusCode::OK, value)
}

/// The handler of paths no route matches: `404` with the path.
pub async fn no_such_path(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no such path {}", uri.path()))
}

/// The handler of a known path with a method it does not serve: `405`.
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(405, format!("{method} is not allowed on {}", uri.path()))
}
