//! The web dashboard (`docs/dashboard.md`): static HTML, CSS and JavaScript (ES modules)
//! compiled into the binary and served at `/ui/` of a processor node's HTTP API (and so
//! of `ferrobay up`); `/` redirects there. The page reads everything through the REST API
//! with the bearer token it holds in `sessionStorage`: these routes serve only the files,
//! need no token and see none (the token travels in the URL fragment at most, which never
//! reaches a server).
//!
//! No build step: what is in `assets/` is what the browser runs, so building Ferrobay
//! needs only the Rust toolchain.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use httpapi::ApiError;

/// Where the dashboard lives on the API port.
pub const UI_PATH: &str = "/ui/";

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
    /// Strong validator: a hash of the body, fixed at compile time.
    etag: &'static str,
}

/// FNV-1a 64 at compile time: the ETag changes whenever a file does.
const fn fnv64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    h
}

/// `"` + 16 hex digits + `"`.
const fn etag_of(bytes: &[u8]) -> [u8; 18] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let h = fnv64(bytes);
    let mut out = [b'"'; 18];
    let mut i = 0;
    while i < 16 {
        out[1 + i] = HEX[((h >> (60 - 4 * i)) & 0xf) as usize];
        i += 1;
    }
    out
}

macro_rules! asset {
    ($name:literal, $type:expr) => {{
        const BODY: &[u8] = include_bytes!(concat!("assets/", $name));
        const TAG: [u8; 18] = etag_of(BODY);
        Asset {
            name: $name,
            content_type: $type,
            body: BODY,
            // ASCII by construction (checked by `etags_are_ascii_and_distinct`).
            etag: match std::str::from_utf8(&TAG) {
                Ok(s) => s,
                Err(_) => "\"0\"",
            },
        }
    }};
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file of the dashboard. `index.html` is the page; the rest are what it loads.
static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("format.js", JS),
    asset!("metrics.js", JS),
    asset!("chart.js", JS),
    asset!("views.js", JS),
    asset!("actions.js", JS),
    asset!("events.js", JS),
];

/// The page may load only its own files and call only its own origin.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
    form-action 'self'; frame-ancestors 'none'";

/// The dashboard's routes, to merge into an API router (they need no state).
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { Redirect::to(UI_PATH) }))
        .route("/ui", get(|| async { Redirect::to(UI_PATH) }))
        .route(
            "/ui/",
            get(|h: HeaderMap| async move { serve("index.html", &h) }),
        )
        .route(
            "/ui/{file}",
            get(|Path(file): Path<String>, h: HeaderMap| async move { serve(&file, &h) }),
        )
}

fn find(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

/// The file with its type and validators; `304` when the browser's copy is current.
/// Every answer says `no-cache`: the browser keeps the file but asks again each load,
/// so a new binary's dashboard shows at once.
fn serve(name: &str, headers: &HeaderMap) -> Response {
    let Some(a) = find(name) else {
        return ApiError::not_found(format!("no dashboard file {name:?}")).into_response();
    };
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == a.etag || t.trim() == "*"));
    let mut r = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (StatusCode::OK, a.body).into_response()
    };
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(a.content_type),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::ETAG, HeaderValue::from_static(a.etag));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if a.name == "index.html" {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One raw HTTP/1.1 exchange: (status line, lower-case headers, body).
    async fn get(
        addr: std::net::SocketAddr,
        path: &str,
        extra: &str,
    ) -> (String, Vec<(String, String)>, Vec<u8>) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8(raw[..split].to_vec()).unwrap();
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap().to_string();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        (status, headers, raw[split + 4..].to_vec())
    }

    fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
        h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    #[tokio::test]
    async fn files_are_served_with_their_type_and_validators() {
        let server = httpapi::HttpServer::serve(
            "127.0.0.1:0".parse().unwrap(),
            httpapi::server::finish(router()),
            None,
        )
        .await
        .unwrap();
        let addr = server.local_addr();

        let (status, h, _) = get(addr, "/", "").await;
        assert!(status.contains(" 303 "), "{status}");
        assert_eq!(header(&h, "location"), Some("/ui/"));

        let (status, h, body) = get(addr, "/ui/", "").await;
        assert!(status.contains(" 200 "), "{status}");
        assert_eq!(header(&h, "content-type"), Some("text/html; charset=utf-8"));
        assert_eq!(header(&h, "cache-control"), Some("no-cache"));
        assert_eq!(header(&h, "x-content-type-options"), Some("nosniff"));
        assert!(
            header(&h, "content-security-policy").is_some_and(|c| c.contains("script-src 'self'"))
        );
        assert_eq!(body, find("index.html").unwrap().body);

        let (status, h, body) = get(addr, "/ui/app.js", "").await;
        assert!(status.contains(" 200 "), "{status}");
        assert_eq!(
            header(&h, "content-type"),
            Some("text/javascript; charset=utf-8")
        );
        let etag = header(&h, "etag").unwrap().to_string();
        assert_eq!(body, find("app.js").unwrap().body);
        // The browser's copy is current: 304, no body; an old copy gets the file.
        let (status, _, body) =
            get(addr, "/ui/app.js", &format!("If-None-Match: {etag}\r\n")).await;
        assert!(status.contains(" 304 "), "{status}");
        assert!(body.is_empty());
        let (status, _, _) = get(addr, "/ui/app.js", "If-None-Match: \"0000\"\r\n").await;
        assert!(status.contains(" 200 "), "{status}");

        let (status, h, body) = get(addr, "/ui/style.css", "").await;
        assert!(status.contains(" 200 "), "{status}");
        assert_eq!(header(&h, "content-type"), Some("text/css; charset=utf-8"));
        assert!(header(&h, "content-security-policy").is_none());
        assert!(!body.is_empty());

        let (status, h, body) = get(addr, "/ui/..%2Fmod.rs", "").await;
        assert!(status.contains(" 404 "), "{status}");
        assert_eq!(header(&h, "content-type"), Some("application/json"));
        assert!(String::from_utf8_lossy(&body).contains("no dashboard file"));
        server.stop().await;
    }

    #[test]
    fn etags_are_ascii_and_distinct() {
        let mut seen = std::collections::HashSet::new();
        for a in ASSETS {
            assert_eq!(a.etag.len(), 18, "{}", a.name);
            assert!(a.etag.starts_with('"') && a.etag.ends_with('"'));
            assert!(seen.insert(a.etag), "two files share an ETag");
            assert!(!a.body.is_empty(), "{} is empty", a.name);
        }
    }

    #[test]
    fn every_module_the_page_imports_is_served() {
        // `import ... from './x.js'` in any script must name an embedded file, or the
        // page fails to load in the browser.
        for a in ASSETS.iter().filter(|a| a.name.ends_with(".js")) {
            let text = std::str::from_utf8(a.body).expect("UTF-8");
            for line in text
                .lines()
                .filter(|l| l.trim_start().starts_with("import "))
            {
                let Some(start) = line.find("'./") else {
                    continue;
                };
                let rest = &line[start + 3..];
                let end = rest.find('\'').expect("closing quote");
                let file = &rest[..end];
                assert!(
                    find(file).is_some(),
                    "{} imports {file}, not embedded",
                    a.name
                );
            }
        }
        let index = std::str::from_utf8(find("index.html").expect("index").body).expect("UTF-8");
        for needed in ["app.js", "style.css", "favicon.svg"] {
            assert!(index.contains(needed), "index.html does not load {needed}");
        }
    }
}
