//! Extractors whose rejections are [`ApiError`]s (`{"error": ...}` with a 4xx status),
//! never axum's plain-text bodies.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use bytes::Bytes;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON request body (any or no Content-Type; at most the router's body limit).
#[derive(Debug, Clone)]
pub struct Json<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::new(e.status().as_u16(), e.body_text()))?;
        if bytes.is_empty() {
            return Err(ApiError::bad_request(
                "request body is empty: expected a JSON object",
            ));
        }
        serde_json::from_slice(&bytes)
            .map(Json)
            .map_err(|e| ApiError::bad_request(format!("bad JSON body: {e}")))
    }
}

/// Path parameters (percent-decoded); a bad one is a `400`.
#[derive(Debug, Clone)]
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(v)| Path(v))
            .map_err(|e| ApiError::bad_request(format!("bad path: {}", e.body_text())))
    }
}

/// Query parameters; a bad or unknown one is a `400` (when `T` denies unknown fields).
#[derive(Debug, Clone)]
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(v)| Query(v))
            .map_err(|e| ApiError::bad_request(format!("bad query: {}", e.body_text())))
    }
}
