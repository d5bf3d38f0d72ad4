//! OpenAPI conventions shared by the node and cluster documents: the bearer security
//! scheme, the error schema, and serving the document.

use axum::response::Response;
use utoipa::Modify;
use utoipa::openapi::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

/// Name of the security scheme every protected operation refers to.
pub const SECURITY_SCHEME: &str = "bearer";

/// Adds the `bearer` HTTP security scheme and makes it the document's default.
pub struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            SECURITY_SCHEME,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The API token: `Authorization: Bearer <token>` (docs/api.md)",
                    ))
                    .build(),
            ),
        );
        openapi.security = Some(vec![utoipa::openapi::security::SecurityRequirement::new(
            SECURITY_SCHEME,
            Vec::<String>::new(),
        )]);
    }
}

/// The document as served and committed: pretty JSON with a trailing newline.
pub fn to_json(doc: &OpenApi) -> String {
    let mut s = doc
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"cannot encode the document: {e}\"}}"));
    s.push('\n');
    s
}

/// A `200` with the document.
pub fn serve(doc: &OpenApi) -> Response {
    use axum::response::IntoResponse as _;
    let mut r = to_json(doc).into_response();
    r.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    r
}
