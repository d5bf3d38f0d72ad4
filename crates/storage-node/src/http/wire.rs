//! Minimal HTTP/1.1 message parsing and writing: one request per connection, bodies by
//! Content-Length only, everything bounded. Enough for Prometheus and the node CLI.

use std::fmt::Write as _;

/// Largest request or response head (request line + headers).
pub const MAX_HEAD_BYTES: usize = 16 << 10;
/// Largest request body the server accepts.
pub const MAX_REQUEST_BODY_BYTES: usize = 1 << 20;
/// Largest response the client accepts.
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;
/// Most headers in one message.
pub const MAX_HEADERS: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// Path without the query, percent-decoding not applied.
    pub path: String,
    pub query: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Response {
    pub fn new(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            content_type,
            body: body.into(),
        }
    }

    /// `{"error": message}` with the message on one line.
    pub fn error(status: u16, message: &str) -> Response {
        let one_line = message.replace(['\n', '\r'], " ");
        let body = serde_json::to_vec(&crate::api::ErrorBody { error: one_line })
            .unwrap_or_else(|_| b"{\"error\":\"internal error\"}".to_vec());
        Response::new(status, "application/json", body)
    }

    pub fn json<T: serde::Serialize>(status: u16, v: &T) -> Response {
        match serde_json::to_vec_pretty(v) {
            Ok(mut body) => {
                body.push(b'\n');
                Response::new(status, "application/json", body)
            }
            Err(e) => Response::error(500, &format!("cannot encode response: {e}")),
        }
    }

    /// The bytes on the wire (the connection closes after it).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut head = String::new();
        let _ = write!(
            head,
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        let mut out = head.into_bytes();
        out.extend_from_slice(&self.body);
        out
    }
}

pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        507 => "Insufficient Storage",
        _ => "Unknown",
    }
}

/// Why a message could not be parsed; `status` is what the server answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct WireError {
    pub status: u16,
    pub message: String,
}

fn wire_err(status: u16, message: impl Into<String>) -> WireError {
    WireError {
        status,
        message: message.into(),
    }
}

/// Offset just past the blank line ending the head, if it is complete.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

fn parse_headers<'a>(
    lines: impl Iterator<Item = &'a str>,
) -> Result<Vec<(String, String)>, WireError> {
    let mut headers = Vec::new();
    for line in lines {
        if line.is_empty() {
            continue;
        }
        if headers.len() == MAX_HEADERS {
            return Err(wire_err(431, "too many headers"));
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| wire_err(400, format!("malformed header line {line:?}")))?;
        if name.is_empty() || name.contains(|c: char| c.is_whitespace()) {
            return Err(wire_err(400, format!("malformed header name {name:?}")));
        }
        headers.push((name.to_ascii_lowercase(), value.trim().to_string()));
    }
    Ok(headers)
}

/// Content-Length, if present (repeated different values are an error).
fn content_length(headers: &[(String, String)]) -> Result<Option<usize>, WireError> {
    let mut out: Option<usize> = None;
    for (_, v) in headers.iter().filter(|(n, _)| n == "content-length") {
        let n: usize = v
            .parse()
            .map_err(|_| wire_err(400, format!("bad Content-Length {v:?}")))?;
        if out.is_some_and(|o| o != n) {
            return Err(wire_err(400, "conflicting Content-Length headers"));
        }
        out = Some(n);
    }
    Ok(out)
}

/// A parsed request head and the body length it announces.
#[derive(Debug)]
pub struct RequestHead {
    pub request: Request,
    pub body_bytes: usize,
}

/// Parses a request head (through the blank line).
pub fn parse_request_head(head: &[u8]) -> Result<RequestHead, WireError> {
    let text = std::str::from_utf8(head).map_err(|_| wire_err(400, "request head is not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(wire_err(400, format!("malformed request line {line:?}")));
    };
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(wire_err(400, format!("unsupported version {version:?}")));
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(wire_err(400, format!("malformed method {method:?}")));
    }
    if !target.starts_with('/') {
        return Err(wire_err(
            400,
            format!("request target must be a path: {target:?}"),
        ));
    }
    let headers = parse_headers(lines)?;
    if headers.iter().any(|(n, _)| n == "transfer-encoding") {
        return Err(wire_err(
            501,
            "Transfer-Encoding is not supported; send Content-Length",
        ));
    }
    let body_bytes = content_length(&headers)?.unwrap_or(0);
    if body_bytes > MAX_REQUEST_BODY_BYTES {
        return Err(wire_err(
            413,
            format!("body over {MAX_REQUEST_BODY_BYTES} bytes"),
        ));
    }
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), Some(q.to_string())),
        None => (target.to_string(), None),
    };
    Ok(RequestHead {
        request: Request {
            method: method.to_string(),
            path,
            query,
            headers,
            body: Vec::new(),
        },
        body_bytes,
    })
}

/// A parsed response: status and body (by Content-Length, or everything after the head).
pub fn parse_response(bytes: &[u8]) -> Result<(u16, Vec<u8>), WireError> {
    let end = head_end(bytes).ok_or_else(|| wire_err(502, "truncated response head"))?;
    let text = std::str::from_utf8(&bytes[..end])
        .map_err(|_| wire_err(502, "response head is not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let (Some(version), Some(code)) = (parts.next(), parts.next()) else {
        return Err(wire_err(
            502,
            format!("malformed status line {status_line:?}"),
        ));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(wire_err(
            502,
            format!("malformed status line {status_line:?}"),
        ));
    }
    let status: u16 = code
        .parse()
        .ok()
        .filter(|c| (100..600).contains(c))
        .ok_or_else(|| wire_err(502, format!("malformed status code {code:?}")))?;
    let headers = parse_headers(lines)?;
    let rest = &bytes[end..];
    let body = match content_length(&headers)? {
        Some(n) if n <= rest.len() => rest[..n].to_vec(),
        Some(n) => {
            return Err(wire_err(
                502,
                format!("truncated body: {} of {n} bytes", rest.len()),
            ));
        }
        None => rest.to_vec(),
    };
    Ok((status, body))
}

/// Percent-encodes one path segment (NQNs keep their ':' and '.').
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:@".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Decodes one percent-encoded path segment.
pub fn decode_segment(s: &str) -> Result<String, WireError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .ok_or_else(|| wire_err(400, "truncated %-escape"))?;
            let hex = std::str::from_utf8(hex).map_err(|_| wire_err(400, "bad %-escape"))?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| wire_err(400, "bad %-escape"))?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| wire_err(400, "path segment is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn requests() {
        let h = parse_request_head(
            b"POST /api/v1/x?y=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n",
        )
        .unwrap();
        assert_eq!(h.request.method, "POST");
        assert_eq!(h.request.path, "/api/v1/x");
        assert_eq!(h.request.query.as_deref(), Some("y=1"));
        assert_eq!(h.body_bytes, 5);
        assert_eq!(h.request.headers[0], ("host".to_string(), "a".to_string()));
        let bad: &[(&[u8], u16)] = &[
            (b"GET / HTTP/2\r\n\r\n", 400),
            (b"GET /\r\n\r\n", 400),
            (b"get / HTTP/1.1\r\n\r\n", 400),
            (b"GET x HTTP/1.1\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nbad\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
            (b"GET / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", 413),
            (
                b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                400,
            ),
            (b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\n\xff: x\r\n\r\n", 400),
        ];
        for (input, status) in bad {
            assert_eq!(
                parse_request_head(input).unwrap_err().status,
                *status,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn responses() {
        let r = Response::json(201, &serde_json::json!({"a": 1}));
        let (status, body) = parse_response(&r.to_bytes()).unwrap();
        assert_eq!(status, 201);
        assert_eq!(body, r.body);
        let e = Response::error(404, "no\nsuch thing");
        assert_eq!(
            String::from_utf8(e.body).unwrap(),
            "{\"error\":\"no such thing\"}"
        );
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc").is_err());
        assert_eq!(
            parse_response(b"HTTP/1.0 204 No Content\r\n\r\n").unwrap(),
            (204, vec![])
        );
        assert!(parse_response(b"HTTP/1.1 2000 OK\r\n\r\n").is_err());
    }

    #[test]
    fn segments() {
        let nqn = "nqn.2026-01.io.ferrobay:n1:d0";
        assert_eq!(encode_segment(nqn), nqn);
        assert_eq!(encode_segment("a b/c%"), "a%20b%2Fc%25");
        assert_eq!(decode_segment("a%20b%2Fc%25").unwrap(), "a b/c%");
        assert!(decode_segment("%2").is_err());
        assert!(decode_segment("%zz").is_err());
        assert!(decode_segment("%ff").is_err());
    }

    proptest! {
        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_request_head(&bytes);
            let _ = parse_response(&bytes);
            let _ = head_end(&bytes);
            if let Ok(s) = std::str::from_utf8(&bytes) {
                let _ = decode_segment(s);
            }
        }

        #[test]
        fn segment_roundtrip(s in "\\PC*") {
            prop_assert_eq!(decode_segment(&encode_segment(&s)).unwrap(), s);
        }
    }
}
