//! A loopback HTTP/1.1 server with a fixed latency, for `dlrs bench http` and the tests.
//!
//! It listens on `127.0.0.1` at a free port, on a thread of its own with a single-threaded tokio
//! runtime (so it stands apart from the runtime of the datasets it serves), keeps connections
//! open, and answers GET requests (the query is ignored):
//!
//! | path | answer |
//! |---|---|
//! | `/bytes/<n>` | `n` bytes, [`bytes_body`]`(n)` |
//! | `/item/<i>` | `item-<i>` |
//! | `/status/<code>` | that status, body `status <code>` |
//! | `/flaky/<k>/<rest>` | 503 for the first `k` requests of this exact path, then `/<rest>` |
//! | other | 404 |
//!
//! Every answer waits for the latency first. Dropping the server stops it and joins its thread.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use futures::future::{Either, select};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// The longest request head read.
const MAX_HEAD: usize = 64 << 10;

/// The body of `/bytes/<n>`: byte `j` is `(j × 31 + 7) mod 256`.
pub fn bytes_body(n: usize) -> Vec<u8> {
    (0..n)
        .map(|j| (j.wrapping_mul(31).wrapping_add(7)) as u8)
        .collect()
}

#[derive(Debug, Default)]
struct State {
    delay: Duration,
    requests: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    flaky: Mutex<HashMap<String, u32>>,
}

/// A running loopback server; dropping it stops it.
#[derive(Debug)]
pub struct LoopbackServer {
    addr: SocketAddr,
    state: Arc<State>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl LoopbackServer {
    /// Starts a server that answers every request after `delay`.
    pub fn start(delay: Duration) -> io::Result<LoopbackServer> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let state = Arc::new(State {
            delay,
            ..State::default()
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let shared = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("dlrs-loopback".to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(listener) else {
                        return;
                    };
                    let mut stopped = stopped;
                    loop {
                        let accept = std::pin::pin!(listener.accept());
                        match select(accept, &mut stopped).await {
                            Either::Left((Ok((stream, _)), _)) => {
                                let _ = stream.set_nodelay(true);
                                tokio::spawn(serve(stream, Arc::clone(&shared)));
                            }
                            // A failed accept (out of descriptors): try again shortly.
                            Either::Left((Err(_), _)) => {
                                tokio::time::sleep(Duration::from_millis(10)).await;
                            }
                            Either::Right(_) => return,
                        }
                    }
                });
                // Dropping the runtime here cancels the connections still open.
            })?;
        Ok(LoopbackServer {
            addr,
            state,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The number of requests answered or being answered.
    pub fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::Relaxed)
    }

    /// The most requests that were being answered at once.
    pub fn max_in_flight(&self) -> u64 {
        self.state.max_in_flight.load(Ordering::Relaxed)
    }
}

impl Drop for LoopbackServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Serves one connection: requests one after the other until the client closes.
async fn serve(mut stream: TcpStream, state: Arc<State>) -> io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            if buf.len() > MAX_HEAD {
                return Ok(());
            }
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let target = head.split_whitespace().nth(1).unwrap_or("/");
        let path = target.split(['?', '#']).next().unwrap_or("/").to_owned();
        let close = head
            .lines()
            .any(|l| l.to_ascii_lowercase().replace(' ', "") == "connection:close");

        state.requests.fetch_add(1, Ordering::Relaxed);
        let now = state.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        state.max_in_flight.fetch_max(now, Ordering::Relaxed);
        if !state.delay.is_zero() {
            tokio::time::sleep(state.delay).await;
        }
        let (status, body) = route(&path, &state);
        state.in_flight.fetch_sub(1, Ordering::Relaxed);

        let head = format!(
            "HTTP/1.1 {status} {}\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n{}\r\n",
            reason(status),
            body.len(),
            if close { "Connection: close\r\n" } else { "" }
        );
        let mut answer = head.into_bytes();
        answer.extend_from_slice(&body);
        stream.write_all(&answer).await?;
        if close {
            return Ok(());
        }
    }
}

fn route(path: &str, state: &State) -> (u16, Vec<u8>) {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["bytes", n] => match n.parse::<usize>() {
            Ok(n) if n <= 256 << 20 => (200, bytes_body(n)),
            _ => (400, b"bad size".to_vec()),
        },
        ["item", i] => (200, format!("item-{i}").into_bytes()),
        ["status", code] => match code.parse::<u16>() {
            Ok(code) if (200..600).contains(&code) => (code, format!("status {code}").into_bytes()),
            _ => (400, b"bad status".to_vec()),
        },
        ["flaky", k, rest @ ..] if !rest.is_empty() => {
            let Ok(k) = k.parse::<u32>() else {
                return (400, b"bad count".to_vec());
            };
            let seen = {
                let mut flaky = state.flaky.lock().unwrap_or_else(|e| e.into_inner());
                let seen = flaky.entry(path.to_owned()).or_insert(0);
                *seen += 1;
                *seen
            };
            if seen <= k {
                (503, b"status 503".to_vec())
            } else {
                route(&format!("/{}", rest.join("/")), state)
            }
        }
        _ => (404, b"not found".to_vec()),
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn get(server: &LoopbackServer, path: &str) -> (String, Vec<u8>) {
        let mut s = std::net::TcpStream::connect(server.addr).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        let end = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8(out[..end].to_vec()).unwrap();
        (head.lines().next().unwrap().to_owned(), out[end..].to_vec())
    }

    #[test]
    fn routes() {
        let server = LoopbackServer::start(Duration::ZERO).unwrap();
        assert_eq!(
            get(&server, "/item/7?x=1"),
            ("HTTP/1.1 200 OK".into(), b"item-7".to_vec())
        );
        assert_eq!(get(&server, "/bytes/300").1, bytes_body(300));
        assert_eq!(bytes_body(3), [7, 38, 69]);
        assert_eq!(
            get(&server, "/status/503").0,
            "HTTP/1.1 503 Service Unavailable"
        );
        assert_eq!(get(&server, "/nothing").0, "HTTP/1.1 404 Not Found");
        assert_eq!(
            get(&server, "/flaky/2/item/1").0,
            "HTTP/1.1 503 Service Unavailable"
        );
        assert_eq!(
            get(&server, "/flaky/2/item/1").0,
            "HTTP/1.1 503 Service Unavailable"
        );
        assert_eq!(get(&server, "/flaky/2/item/1").1, b"item-1");
        assert_eq!(server.requests(), 7);
        assert_eq!(server.max_in_flight(), 1);
    }

    #[test]
    fn keeps_connections_open() {
        let server = LoopbackServer::start(Duration::ZERO).unwrap();
        let mut s = std::net::TcpStream::connect(server.addr).unwrap();
        // Two requests in one write, then one more: all three on one connection.
        s.write_all(b"GET /item/1 HTTP/1.1\r\n\r\nGET /item/2 HTTP/1.1\r\n\r\n")
            .unwrap();
        s.write_all(b"GET /item/3 HTTP/1.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert_eq!(out.matches("HTTP/1.1 200 OK").count(), 3);
        assert!(out.ends_with("item-3"), "{out}");
    }
}
