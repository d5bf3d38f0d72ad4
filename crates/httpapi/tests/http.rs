//! The shared stack over real TCP: keep-alive, chunked bodies, strict parsing, JSON errors
//! for bad input (bad JSON, bad path parameter, oversized body, unknown path/method), the
//! client's error mapping, and graceful stop.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use httpapi::error::{json, ok};
use httpapi::extract::{Json, Path};
use httpapi::{ApiError, ClientError, HttpClient, HttpServer};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// (method, path, body, status, text the error must contain).
type Case<'a> = (&'a str, &'a str, Option<&'a [u8]>, u16, &'a str);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Echo {
    text: String,
}

async fn echo(Json(e): Json<Echo>) -> Response {
    json(StatusCode::CREATED, &serde_json::json!({"text": e.text}))
}

async fn item(Path(id): Path<u32>) -> Result<Response, ApiError> {
    if id == 7 {
        return Err(ApiError::new(409, "seven\nis taken"));
    }
    Ok(ok(&serde_json::json!({"id": id})))
}

async fn server() -> HttpServer {
    let app = Router::new()
        .route("/echo", post(echo))
        .route("/items/{id}", get(item));
    HttpServer::serve(
        "127.0.0.1:0".parse().unwrap(),
        httpapi::server::finish(app),
        None,
    )
    .await
    .unwrap()
}

/// Sends raw bytes, reads until the server closes or `timeout`; returns the text.
async fn raw(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn status_of(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {response:?}"))
}

#[tokio::test]
async fn json_errors_for_bad_input() {
    let s = server().await;
    let c = HttpClient::new(s.local_addr().to_string());
    let v: serde_json::Value = c
        .call_json("POST", "/echo", &serde_json::json!({"text": "hi"}))
        .await
        .unwrap();
    assert_eq!(v, serde_json::json!({"text": "hi"}));

    let cases: [Case; 7] = [
        ("POST", "/echo", Some(b"{"), 400, "bad JSON body"),
        (
            "POST",
            "/echo",
            Some(b"{\"text\":\"a\",\"x\":1}"),
            400,
            "unknown field",
        ),
        ("POST", "/echo", None, 400, "empty"),
        ("GET", "/items/abc", None, 400, "bad path"),
        ("GET", "/items/7", None, 409, "seven is taken"),
        ("GET", "/nothing", None, 404, "no such path /nothing"),
        (
            "DELETE",
            "/echo",
            None,
            405,
            "DELETE is not allowed on /echo",
        ),
    ];
    for (method, path, body, status, text) in cases {
        match c
            .call::<serde_json::Value>(method, path, body.map(<[u8]>::to_vec))
            .await
        {
            Err(ClientError::Api { status: s, message }) => {
                assert_eq!(s, status, "{method} {path}: {message}");
                assert!(message.contains(text), "{method} {path}: {message}");
                assert!(!message.contains('\n'));
            }
            other => panic!("{method} {path}: {other:?}"),
        }
    }
    // Over the body limit: 413 with a JSON body.
    let big = vec![b' '; httpapi::server::MAX_REQUEST_BODY_BYTES + 1];
    let (status, body) = c.request("POST", "/echo", Some(big)).await.unwrap();
    assert_eq!(status, 413);
    let e: httpapi::ErrorBody = serde_json::from_slice(&body).unwrap();
    assert!(!e.error.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn strict_parsing_keep_alive_and_chunked_bodies() {
    let s = server().await;
    let addr = s.local_addr();
    // A signed Content-Length is not a length.
    let r = raw(
        addr,
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n{\"a\"}",
    )
    .await;
    assert_eq!(status_of(&r), 400, "{r}");
    // Two different lengths.
    let r = raw(
        addr,
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    )
    .await;
    assert_eq!(status_of(&r), 400, "{r}");
    // Garbage request line.
    let r = raw(addr, b"GARBAGE\r\n\r\n").await;
    assert_eq!(status_of(&r), 400, "{r}");
    // A chunked body is read.
    let r = raw(
        addr,
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n7\r\n{\"text\"\r\n6\r\n:\"ok\"}\r\n0\r\n\r\n",
    )
    .await;
    assert_eq!(status_of(&r), 201, "{r}");
    assert!(r.contains("\"ok\""), "{r}");
    // Two requests on one connection (keep-alive).
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let mut answers = String::new();
    for id in [1, 2] {
        conn.write_all(format!("GET /items/{id} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        answers.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert_eq!(answers.matches("HTTP/1.1 200").count(), 2, "{answers}");
    assert!(answers.contains("\"id\": 2"), "{answers}");
    drop(conn);

    // The client reuses its connection: many calls, all answered.
    let c = HttpClient::new(addr.to_string());
    for id in (0..50u32).filter(|i| *i != 7) {
        let v: serde_json::Value = c.call("GET", &format!("/items/{id}"), None).await.unwrap();
        assert_eq!(v["id"], id);
    }
    s.stop().await;
    match c.call::<serde_json::Value>("GET", "/items/1", None).await {
        Err(ClientError::Connect { .. } | ClientError::Io { .. }) => {}
        other => panic!("after stop: {other:?}"),
    }
}

#[tokio::test]
async fn client_times_out() {
    // A server that accepts and never answers.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let (_s, _) = l.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
    });
    let c = HttpClient::new(addr.to_string()).with_timeout(Duration::from_millis(200));
    match c.request("GET", "/", None).await {
        Err(ClientError::Timeout { .. }) => {}
        other => panic!("{other:?}"),
    }
    hold.abort();
}
