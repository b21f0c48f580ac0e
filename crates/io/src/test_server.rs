//! A tiny HTTP/1.1 server on 127.0.0.1 for the tests, with scripted faults.

#![cfg_attr(not(feature = "http"), allow(dead_code))]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// What the server answers to one request.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// 200 with this body and a Content-Length.
    Body(Vec<u8>),
    /// This status, an empty body, and these extra headers.
    Status(u16, Vec<(&'static str, String)>),
    /// 200 with these chunks, chunked (no Content-Length).
    Chunked(Vec<Vec<u8>>),
    /// 200 announcing `announced` bytes, sending `sent`, then closing.
    Truncated { announced: usize, sent: Vec<u8> },
    /// Closes the connection with a TCP reset, without answering.
    Reset,
    /// Never answers.
    Stall,
    /// 200 with this body after this delay.
    Delayed(Duration, Vec<u8>),
}

type Route = dyn Fn(&str, u32) -> Reply + Send + Sync;

/// A running server; it stops when its runtime is dropped.
pub(crate) struct TestServer {
    pub(crate) base: String,
    hits: Arc<Mutex<HashMap<String, u32>>>,
    headers: Arc<Mutex<Vec<HashMap<String, String>>>>,
    connections: Arc<AtomicU32>,
}

impl TestServer {
    /// Starts a server whose answer to the `n`th request (from 1) for a path (with its query)
    /// is `route(path, n)`.
    pub(crate) fn start(
        handle: &tokio::runtime::Handle,
        route: impl Fn(&str, u32) -> Reply + Send + Sync + 'static,
    ) -> TestServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = TestServer {
            base,
            hits: Arc::default(),
            headers: Arc::default(),
            connections: Arc::default(),
        };
        let route: Arc<Route> = Arc::new(route);
        let (hits, headers, connections) = (
            server.hits.clone(),
            server.headers.clone(),
            server.connections.clone(),
        );
        handle.spawn(async move {
            let listener = TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                connections.fetch_add(1, Ordering::SeqCst);
                let (route, hits, headers) = (route.clone(), hits.clone(), headers.clone());
                tokio::spawn(serve(stream, route, hits, headers));
            }
        });
        server
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The requests made for `path` (with its query) so far.
    pub(crate) fn hits(&self, path: &str) -> u32 {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    /// The connections accepted so far.
    pub(crate) fn connections(&self) -> u32 {
        self.connections.load(Ordering::SeqCst)
    }

    /// The headers of every request so far (lower-case names).
    pub(crate) fn request_headers(&self) -> Vec<HashMap<String, String>> {
        self.headers.lock().unwrap().clone()
    }
}

async fn serve(
    stream: TcpStream,
    route: Arc<Route>,
    hits: Arc<Mutex<HashMap<String, u32>>>,
    all_headers: Arc<Mutex<Vec<HashMap<String, String>>>>,
) {
    let mut stream = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
        let mut headers = HashMap::new();
        loop {
            let mut header = String::new();
            if stream.read_line(&mut header).await.unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
            }
        }
        if let Some(length) = headers.get("content-length").and_then(|l| l.parse().ok()) {
            let mut body = vec![0; length];
            if stream.read_exact(&mut body).await.is_err() {
                return;
            }
        }
        all_headers.lock().unwrap().push(headers);
        let n = {
            let mut hits = hits.lock().unwrap();
            let n = hits.entry(path.clone()).or_insert(0);
            *n += 1;
            *n
        };
        let stream = stream.get_mut();
        let keep_going = match route(&path, n) {
            Reply::Body(body) => {
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                write(stream, &[head.as_bytes(), &body]).await
            }
            Reply::Status(status, extra) => {
                let mut head = format!("HTTP/1.1 {status} Whatever\r\nContent-Length: 0\r\n");
                for (name, value) in extra {
                    head.push_str(&format!("{name}: {value}\r\n"));
                }
                head.push_str("\r\n");
                write(stream, &[head.as_bytes()]).await
            }
            Reply::Chunked(chunks) => {
                let mut out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
                for chunk in chunks {
                    out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                    out.extend_from_slice(&chunk);
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(b"0\r\n\r\n");
                write(stream, &[&out]).await
            }
            Reply::Truncated { announced, sent } => {
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {announced}\r\n\r\n");
                write(stream, &[head.as_bytes(), &sent]).await;
                let _ = stream.shutdown().await;
                false
            }
            Reply::Reset => {
                let _ = stream.set_zero_linger();
                false
            }
            Reply::Delayed(delay, body) => {
                tokio::time::sleep(delay).await;
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                write(stream, &[head.as_bytes(), &body]).await
            }
            Reply::Stall => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                false
            }
        };
        if !keep_going {
            return;
        }
    }
}

async fn write(stream: &mut TcpStream, parts: &[&[u8]]) -> bool {
    for part in parts {
        if stream.write_all(part).await.is_err() {
            return false;
        }
    }
    stream.flush().await.is_ok()
}
