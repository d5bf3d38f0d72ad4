//! Bearer-token authentication: every request needs `Authorization: Bearer <token>`
//! except the few public ones (`/metrics`, `/healthz`, the OpenAPI document); a missing or
//! wrong token gets `401` with `{"error"}` and `WWW-Authenticate: Bearer`.
//!
//! A token is 64 lower-case hex characters (32 random bytes) when generated; one given by
//! an operator is 16 to 256 visible ASCII characters. Token files are written 0600.

use std::path::Path;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Name of the token file in a data dir.
pub const TOKEN_FILE: &str = "api-token";
/// Environment variable that gives a token (daemons and the CLI).
pub const TOKEN_ENV: &str = "FERROBAY_API_TOKEN";

/// Why a token could not be had.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("API token: {0}")]
    Invalid(String),
    #[error("API token file {path}: {reason}")]
    File { path: String, reason: String },
}

/// A bearer token. `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<secret>)")
    }
}

impl Token {
    /// A token of 32 bytes from the operating system's randomness.
    pub fn generate() -> Token {
        let bytes: [u8; 32] = rand::random();
        Token(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// Checks a token given by an operator (surrounding whitespace is dropped).
    pub fn new(s: &str) -> Result<Token, TokenError> {
        let s = s.trim();
        if !(16..=256).contains(&s.len()) {
            return Err(TokenError::Invalid(format!(
                "{} characters; it needs 16 to 256",
                s.len()
            )));
        }
        if !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError::Invalid(
                "only visible ASCII characters (no spaces) are allowed".into(),
            ));
        }
        Ok(Token(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The token in `$FERROBAY_API_TOKEN`, if set.
    pub fn from_env() -> Result<Option<Token>, TokenError> {
        match std::env::var(TOKEN_ENV) {
            Ok(v) if !v.trim().is_empty() => Token::new(&v).map(Some),
            _ => Ok(None),
        }
    }

    /// Reads a token file.
    pub fn read(path: &Path) -> Result<Token, TokenError> {
        let file_err = |reason: String| TokenError::File {
            path: path.display().to_string(),
            reason,
        };
        let s = std::fs::read_to_string(path).map_err(|e| file_err(e.to_string()))?;
        Token::new(&s).map_err(|e| file_err(e.to_string()))
    }

    /// Writes the token to `path` (created 0600, replaced atomically).
    pub fn write(&self, path: &Path) -> Result<(), TokenError> {
        crate::files::write_replacing(path, format!("{}\n", self.0).as_bytes(), 0o600).map_err(
            |e| TokenError::File {
                path: path.display().to_string(),
                reason: e.to_string(),
            },
        )
    }

    /// The token in `path`, or a new one written there (0600) if the file does not exist.
    /// Returns whether it was created.
    pub fn load_or_create(path: &Path) -> Result<(Token, bool), TokenError> {
        if path.exists() {
            return Token::read(path).map(|t| (t, false));
        }
        let t = Token::generate();
        t.write(path)?;
        Ok((t, true))
    }

    /// Whether `candidate` is this token, in time independent of where they differ.
    fn matches(&self, candidate: &[u8]) -> bool {
        let mine = self.0.as_bytes();
        // Constant-time compare; the length is not a secret worth hiding.
        mine.len() == candidate.len()
            && mine
                .iter()
                .zip(candidate)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

/// Paths served without a token, to `GET`/`HEAD`.
#[derive(Clone, Debug)]
struct Guard {
    token: Token,
    public: &'static [&'static str],
}

/// Requires `token` on every route of `router` except `public` paths (exact, GET/HEAD).
pub fn require_token(router: Router, token: Token, public: &'static [&'static str]) -> Router {
    router.layer(axum::middleware::from_fn_with_state(
        Guard { token, public },
        check,
    ))
}

async fn check(State(g): State<Guard>, req: Request, next: Next) -> Response {
    let public =
        matches!(*req.method(), Method::GET | Method::HEAD) && g.public.contains(&req.uri().path());
    if public {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        });
    let refusal = match given {
        None => "missing bearer token: send `Authorization: Bearer <token>` (docs/api.md)",
        Some(t) if g.token.matches(t.trim().as_bytes()) => return next.run(req).await,
        Some(_) => "wrong bearer token",
    };
    let mut r = ApiError::new(401, refusal).into_response();
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked_generated_and_kept_0600() {
        assert!(Token::new("short").is_err());
        assert!(Token::new("has a space in it here").is_err());
        let t = Token::new("  0123456789abcdef\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.as_str(), "0123456789abcdef");
        assert!(t.matches(b"0123456789abcdef"));
        assert!(!t.matches(b"0123456789abcdeF"));
        assert!(!t.matches(b"0123456789abcde"));
        assert!(!format!("{t:?}").contains("0123"));

        let g = Token::generate();
        assert_eq!(g.as_str().len(), 64);
        assert_ne!(g, Token::generate());

        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join(TOKEN_FILE);
        let (a, created) = Token::load_or_create(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(created);
        let (b, created) = Token::load_or_create(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(!created);
        assert_eq!(a, b);
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("{e}"))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
