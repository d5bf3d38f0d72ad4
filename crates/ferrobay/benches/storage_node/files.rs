//! A tiny HTTP/1.0 file server on 127.0.0.1 that hands the guest the binary under test and
//! the shared libraries its initramfs lacks (busybox `wget http://10.0.2.2:PORT/NAME`).
//! It serves a fixed list of names only and stops when dropped.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

const ACCEPT_POLL: Duration = Duration::from_millis(20);
const IO_TIMEOUT: Duration = Duration::from_secs(60);
const MAX_REQUEST_LINE_BYTES: usize = 1024;
const MAX_HEADER_LINES: usize = 64;

pub struct FileServer {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FileServer {
    /// Serves `files` (URL path without the leading '/' -> file) on a free port.
    pub fn start(files: BTreeMap<String, PathBuf>) -> std::io::Result<FileServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("bench-file-server".into())
            .spawn(move || serve(&listener, &files, &flag))?;
        Ok(FileServer {
            port,
            stop,
            thread: Some(thread),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(listener: &TcpListener, files: &BTreeMap<String, PathBuf>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = answer(stream, files) {
                    eprintln!("storage_node bench: file server: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_POLL),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                eprintln!("storage_node bench: file server accept: {e}");
                std::thread::sleep(ACCEPT_POLL);
            }
        }
    }
}

fn answer(stream: TcpStream, files: &BTreeMap<String, PathBuf>) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = Vec::new();
    reader
        .by_ref()
        .take(MAX_REQUEST_LINE_BYTES as u64)
        .read_until(b'\n', &mut line)?;
    let line = String::from_utf8_lossy(&line);
    // Skip the headers (busybox wget sends a few short lines) up to the blank line.
    for _ in 0..MAX_HEADER_LINES {
        let mut header = Vec::new();
        let n = reader
            .by_ref()
            .take(MAX_REQUEST_LINE_BYTES as u64)
            .read_until(b'\n', &mut header)?;
        if n <= 2 {
            break;
        }
    }
    let mut out = stream;
    let name = match line.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["GET", path, ..] => path.trim_start_matches('/').to_string(),
        _ => return out.write_all(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n"),
    };
    let Some(path) = files.get(&name) else {
        return out.write_all(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n");
    };
    let body = std::fs::read(path)?;
    out.write_all(
        format!(
            "HTTP/1.0 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )?;
    out.write_all(&body)?;
    out.flush()
}
