//! A minimal S3 client for tests: SigV4 header signing with UNSIGNED-PAYLOAD, one
//! HTTP/1.1 request per connection. A request that cannot be sent or whose answer is not
//! HTTP comes back as status 0 with the reason as body (a test decides what that means).

use std::net::SocketAddr;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub struct S3Client {
    addr: SocketAddr,
    access: String,
    secret: String,
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The body is as long as Content-Length says (false: the server cut it short).
    pub complete: bool,
}

impl Response {
    fn transport(why: String) -> Response {
        Response {
            status: 0,
            headers: Vec::new(),
            body: why.into_bytes(),
            complete: false,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `<Code>` of an error body.
    pub fn code(&self) -> Option<String> {
        let text = String::from_utf8_lossy(&self.body);
        let start = text.find("<Code>")? + 6;
        let end = text[start..].find("</Code>")? + start;
        Some(text[start..end].to_string())
    }

    pub fn etag(&self) -> Option<String> {
        self.header("etag").map(|e| e.trim_matches('"').to_string())
    }
}

fn hmac(key: &[u8], msg: &[u8]) -> Vec<u8> {
    const BLOCK: usize = 64;
    let mut k = if key.len() > BLOCK {
        Sha256::digest(key).to_vec()
    } else {
        key.to_vec()
    };
    k.resize(BLOCK, 0);
    let ipad: Vec<u8> = k.iter().map(|b| b ^ 0x36).collect();
    let opad: Vec<u8> = k.iter().map(|b| b ^ 0x5c).collect();
    let inner = Sha256::digest([ipad.as_slice(), msg].concat());
    Sha256::digest([opad.as_slice(), inner.as_slice()].concat()).to_vec()
}

fn uri_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b'/' if keep_slash => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `YYYYMMDDTHHMMSSZ`, now: RFC 3339 to the second without its separators.
fn amz_date() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .replace(['-', ':'], "")
}

impl S3Client {
    /// A client of the gateway at `addr` (an `http://HOST:PORT` endpoint works too:
    /// [`S3Client::for_endpoint`]).
    pub fn new(addr: SocketAddr, access: &str, secret: &str) -> Self {
        S3Client {
            addr,
            access: access.into(),
            secret: secret.into(),
        }
    }

    /// A client of `http://ADDR:PORT`.
    pub fn for_endpoint(endpoint: &str, access: &str, secret: &str) -> Option<Self> {
        let addr = endpoint
            .strip_prefix("http://")?
            .trim_end_matches('/')
            .parse()
            .ok()?;
        Some(Self::new(addr, access, secret))
    }

    /// Sends one signed request. `path` is the decoded path (`/bucket/key`), `query`
    /// pairs are encoded here.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        let date = amz_date();
        let host = self.addr.to_string();
        let mut h: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        h.push(("host".into(), host.clone()));
        h.push(("x-amz-date".into(), date.clone()));
        h.push(("x-amz-content-sha256".into(), "UNSIGNED-PAYLOAD".into()));
        h.sort();
        let mut q: Vec<(String, String)> = query
            .iter()
            .map(|(k, v)| (uri_encode(k, false), uri_encode(v, false)))
            .collect();
        q.sort();
        let canon_query = q
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        let encoded_path = uri_encode(path, true);
        let signed: Vec<&str> = h.iter().map(|(k, _)| k.as_str()).collect();
        let canonical = format!(
            "{method}\n{encoded_path}\n{canon_query}\n{}\n{}\nUNSIGNED-PAYLOAD",
            h.iter()
                .map(|(k, v)| format!("{k}:{v}\n"))
                .collect::<String>(),
            signed.join(";")
        );
        let scope = format!("{}/us-east-1/s3/aws4_request", &date[..8]);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
            hex::encode(Sha256::digest(canonical.as_bytes()))
        );
        let mut key = hmac(
            format!("AWS4{}", self.secret).as_bytes(),
            &date.as_bytes()[..8],
        );
        for part in ["us-east-1", "s3", "aws4_request"] {
            key = hmac(&key, part.as_bytes());
        }
        let sig = hex::encode(hmac(&key, to_sign.as_bytes()));
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={}, Signature={sig}",
            self.access,
            signed.join(";")
        );
        let target = if canon_query.is_empty() {
            encoded_path
        } else {
            format!("{encoded_path}?{canon_query}")
        };
        let mut req = format!("{method} {target} HTTP/1.1\r\n");
        for (k, v) in &h {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str(&format!(
            "authorization: {auth}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        ));
        self.exchange(req.as_bytes(), body).await
    }

    async fn exchange(&self, head: &[u8], body: &[u8]) -> Response {
        let mut s = match tokio::net::TcpStream::connect(self.addr).await {
            Ok(s) => s,
            Err(e) => return Response::transport(format!("connect {}: {e}", self.addr)),
        };
        if let Err(e) = s.write_all(head).await {
            return Response::transport(format!("send: {e}"));
        }
        // The server may answer (an error) before the whole body is sent.
        let _ = s.write_all(body).await;
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw).await;
        parse(&raw)
    }

    pub async fn put(&self, bucket: &str, key: &str, body: &[u8]) -> Response {
        self.request("PUT", &format!("/{bucket}/{key}"), &[], &[], body)
            .await
    }

    pub async fn get(&self, bucket: &str, key: &str) -> Response {
        self.request("GET", &format!("/{bucket}/{key}"), &[], &[], b"")
            .await
    }

    pub async fn delete(&self, bucket: &str, key: &str) -> Response {
        self.request("DELETE", &format!("/{bucket}/{key}"), &[], &[], b"")
            .await
    }

    pub async fn create_bucket(&self, bucket: &str) -> Response {
        self.request("PUT", &format!("/{bucket}"), &[], &[], b"")
            .await
    }
}

fn parse(raw: &[u8]) -> Response {
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Response::transport(format!("no HTTP response ({} bytes)", raw.len()));
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.split("\r\n");
    let Some(status) = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse::<u16>().ok())
    else {
        return Response::transport(format!("not an HTTP status line: {head}"));
    };
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            l.split_once(':')
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        })
        .collect();
    let rest = &raw[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    let complete = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .is_none_or(|n| n == body.len());
    Response {
        status,
        headers,
        body,
        complete,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&b[..eol])
                .split(';')
                .next()
                .unwrap_or("0")
                .trim(),
            16,
        )
        .unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = eol + 2;
        out.extend_from_slice(&b[start..(start + size).min(b.len())]);
        b = &b[(start + size + 2).min(b.len())..];
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn amz_date_is_basic_iso8601() {
        let d = super::amz_date();
        assert_eq!(d.len(), 16, "{d}");
        assert!(
            d.starts_with("20") && d.ends_with('Z') && &d[8..9] == "T",
            "{d}"
        );
        assert!(
            d[..8]
                .bytes()
                .chain(d[9..15].bytes())
                .all(|b| b.is_ascii_digit()),
            "{d}"
        );
    }
}
