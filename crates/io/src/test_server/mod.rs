//! A loopback HTTP/1.1 server for tests and benchmarks (cargo feature `test-server`, off by
//! default): generated bodies after a fixed latency, statuses, and scripted replies with faults.
//! It is not part of the loading API: it serves `dlrs serve` and `dlrs bench http` (the server of
//! the Python HTTP benchmarks), the CLI's tests and this crate's.
//!
//! It listens on `127.0.0.1` (at a free port unless one is asked for), on a thread of its own
//! with a single-threaded tokio runtime (so it stands apart from the runtime of the datasets it
//! serves), keeps connections open, and answers GET requests (a request body is read and
//! ignored). [`LoopbackServer::start`] serves these routes (the query is ignored):
//!
//! | path | answer |
//! |---|---|
//! | `/bytes/<n>` | `n` bytes, [`bytes_body`]`(n)` |
//! | `/item/<i>` | `item-<i>` |
//! | `/status/<code>` | that status, body `status <code>` |
//! | `/flaky/<k>/<rest>` | 503 for the first `k` requests of this exact path, then `/<rest>` |
//! | other | 404 |
//!
//! [`LoopbackServer::scripted`] answers each request with the [`Reply`] its route gives instead,
//! faults included, and records the requests' headers.
//!
//! [`LoopbackServer::files`] serves files (GET and HEAD) with single byte ranges (206,
//! `Content-Range`), an `ETag` and `If-Match` (412 when it differs): files put in memory by
//! the test ([`LoopbackServer::put_file`]). [`LoopbackServer::serve_dir`] serves the standard
//! routes and, before them, the regular files under a directory the same way (`/<path>`
//! percent-decoded, no `..`, nothing outside the directory, links included; the ETag is made
//! of the size and modification time; the range asked for is streamed in chunks: see `dir`).
//! A range header that is not one byte range (another unit, several ranges, bad syntax) is
//! ignored (200); a last byte past the end is clamped (206); only a first byte at or past the
//! end gets 416.
//!
//! Each connection is a task, at most [`MAX_CONNECTIONS`] at once; file reads run on a small
//! blocking pool, so neither a slow client nor a slow file holds up the others.
//!
//! Every answer waits for the latency first, counted from the end of the request's head, timed
//! by a thread of the server's own (never early, about 0.1 ms late: see `timer`). Bodies of
//! `/bytes/<n>` are made once (a prefix of the longest one made so far) and written without a
//! copy. Dropping the server stops it and joins its threads.

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use futures::future::select;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use dlrs_core::sync::lock;

mod control;
mod dir;
mod grammar;
mod timer;

pub use grammar::{BLOCK_SIZE, expected_body};

use timer::{Timer, TimerQueue};

/// The longest request head read.
const MAX_HEAD: usize = 64 << 10;

/// The largest `/bytes/<n>` answered.
const MAX_BODY: usize = 256 << 20;

/// The most connections served at once; more wait to be accepted.
pub const MAX_CONNECTIONS: usize = 1024;

/// The threads that read files for the connections.
const FILE_THREADS: usize = 16;

/// The body of `/bytes/<n>`: byte `j` is `(j × 31 + 7) mod 256`.
pub fn bytes_body(n: usize) -> Vec<u8> {
    (0..n)
        .map(|j| (j.wrapping_mul(31).wrapping_add(7)) as u8)
        .collect()
}

/// One GET of `path` on a new blocking connection to `addr`, for tests of a server that runs on
/// another thread or in another process: the status line and the body. Panics on any failure.
pub fn get(addr: impl std::net::ToSocketAddrs, path: &str) -> (String, Vec<u8>) {
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let out = exchange(addr, &request);
    let end = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8(out[..end].to_vec()).unwrap();
    (head.lines().next().unwrap().to_owned(), out[end..].to_vec())
}

/// Sends `request` on a new blocking connection to `addr` and reads the whole answer.
fn exchange(addr: impl std::net::ToSocketAddrs, request: &str) -> Vec<u8> {
    exchange_writes(addr, &[request.as_bytes()])
}

/// Sends `writes` one write each on a new blocking connection to `addr` and reads the whole
/// answer.
fn exchange_writes(addr: impl std::net::ToSocketAddrs, writes: &[&[u8]]) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    for write in writes {
        s.write_all(write).unwrap();
    }
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    out
}

/// What a scripted server answers to one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 with this body and a Content-Length.
    Body(Vec<u8>),
    /// This status, an empty body, and these extra headers.
    Status(u16, Vec<(&'static str, String)>),
    /// 200 with these chunks, chunked (no Content-Length).
    Chunked(Vec<Vec<u8>>),
    /// 200 announcing `announced` bytes, sending `sent`, then closing.
    Truncated {
        /// The Content-Length sent.
        announced: usize,
        /// The body bytes sent before closing.
        sent: Vec<u8>,
    },
    /// Closes the connection with a TCP reset, without answering.
    Reset,
    /// Never answers.
    Stall,
    /// 200 with this body after this delay (on top of the server's latency).
    Delayed(Duration, Vec<u8>),
}

/// A scripted server's answer to the `n`th request (from 1) for a target (path and query).
type Route = dyn Fn(&str, u32) -> Reply + Send + Sync;

/// An answer as it is written.
enum Answer {
    Full {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Bytes,
    },
    /// Bytes `start..start + length` of an open file, streamed; without a file, the head of an
    /// answer to HEAD: the length the body would have, no body.
    Stream {
        status: u16,
        headers: Vec<(&'static str, String)>,
        file: Option<std::fs::File>,
        start: u64,
        length: u64,
    },
    /// A [`Reply::Chunked`], [`Reply::Truncated`], [`Reply::Reset`] or [`Reply::Stall`]:
    /// written as the route scripted it.
    Scripted(Reply),
}

impl Answer {
    fn new(status: u16, body: impl Into<Bytes>) -> Answer {
        Answer::Full {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }
}

/// How requests are answered.
enum Routes {
    /// The routes of the module's table.
    Standard {
        /// A directory whose files are served before the routes (its path with links
        /// resolved).
        root: Option<std::path::PathBuf>,
        /// Requests seen per `/flaky/...` path.
        flaky: Mutex<HashMap<String, u32>>,
        /// The longest `/bytes/<n>` body made so far; shorter ones are its prefixes.
        bodies: Mutex<Bytes>,
    },
    /// Files in memory, with ranges.
    Files {
        memory: Mutex<HashMap<String, (Bytes, String)>>,
        /// The headers of every request (lower-case names), in arrival order.
        headers: Mutex<Vec<HashMap<String, String>>>,
    },
    /// The Python tests' routes and query grammar, set through a control port: see `grammar`.
    Controlled(grammar::Grammar),
    /// A route given by the test, with what the requests were.
    Scripted {
        route: Box<Route>,
        /// Requests seen per target (path and query).
        hits: Mutex<HashMap<String, u32>>,
        /// The headers of every request (lower-case names), in arrival order.
        headers: Mutex<Vec<HashMap<String, String>>>,
    },
}

struct State {
    delay: Duration,
    connections: AtomicU64,
    requests: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    routes: Routes,
    timer: Arc<TimerQueue>,
}

impl State {
    /// What to answer to a request for `target` with these headers, and the wait before (a
    /// [`Reply::Delayed`]'s).
    fn answer(
        &self,
        method: &str,
        target: &str,
        headers: HashMap<String, String>,
    ) -> (Duration, Answer) {
        match &self.routes {
            Routes::Files {
                memory,
                headers: all,
            } => {
                let path = target.split(['?', '#']).next().unwrap_or("/");
                let found = {
                    let memory = lock(memory);
                    memory.get(target).or_else(|| memory.get(path)).cloned()
                };
                let answer = match found {
                    Some((body, etag)) => {
                        let total = body.len() as u64;
                        file_answer(total, etag, Ok(body), method, &headers)
                    }
                    None => Answer::new(404, &b"not found"[..]),
                };
                lock(all).push(headers);
                (Duration::ZERO, answer)
            }
            Routes::Standard {
                root,
                flaky,
                bodies,
            } => {
                let path = target.split(['?', '#']).next().unwrap_or("/");
                let found = root.as_deref().map(|root| dir::lookup(root, path));
                let answer = match found {
                    Some(dir::Lookup::File { file, len, etag }) => {
                        file_answer(len, etag, Err(file), method, &headers)
                    }
                    Some(dir::Lookup::Refused) => {
                        Answer::new(403, &b"not a regular file inside the served directory"[..])
                    }
                    Some(dir::Lookup::Absent) | None => standard(path, flaky, bodies),
                };
                (Duration::ZERO, answer)
            }
            Routes::Scripted {
                route,
                hits,
                headers: all,
            } => {
                lock(all).push(headers);
                let n = {
                    let mut hits = lock(hits);
                    let n = hits.entry(target.to_owned()).or_insert(0);
                    *n += 1;
                    *n
                };
                let answer = match route(target, n) {
                    Reply::Delayed(wait, body) => return (wait, Answer::new(200, body)),
                    Reply::Body(body) => Answer::new(200, body),
                    Reply::Status(status, headers) => Answer::Full {
                        status,
                        headers,
                        body: Bytes::new(),
                    },
                    scripted @ (Reply::Chunked(_)
                    | Reply::Truncated { .. }
                    | Reply::Reset
                    | Reply::Stall) => Answer::Scripted(scripted),
                };
                (Duration::ZERO, answer)
            }
            Routes::Controlled(_) => unreachable!("`grammar::serve` answers these"),
        }
    }

    /// Whether answering may wait on the file system (a served directory).
    fn reads_files(&self) -> bool {
        matches!(&self.routes, Routes::Standard { root: Some(_), .. })
    }

    /// [`bytes_body`]`(n)`, shared.
    fn body(bodies: &Mutex<Bytes>, n: usize) -> Bytes {
        let mut longest = lock(bodies);
        if longest.len() < n {
            *longest = Bytes::from(bytes_body(n));
        }
        longest.slice(..n)
    }
}

/// The answer to `method` for a file of `total` bytes and this ETag, whose content is in
/// memory (`Ok`) or in an open file streamed in the range asked for (`Err`), with these
/// request headers.
fn file_answer(
    total: u64,
    etag: String,
    content: Result<Bytes, std::fs::File>,
    method: &str,
    headers: &HashMap<String, String>,
) -> Answer {
    if let Some(wanted) = headers.get("if-match")
        && wanted != "*"
        && wanted != &etag
    {
        return Answer::new(412, &b"precondition failed"[..]);
    }
    let mut answer_headers = vec![("Accept-Ranges", "bytes".to_owned())];
    if !etag.is_empty() {
        answer_headers.push(("ETag", etag));
    }
    let range = headers
        .get("range")
        .map_or(Range::Whole, |r| byte_range(r, total));
    let (status, (start, end)) = match range {
        Range::Part(start, end) => {
            answer_headers.push((
                "Content-Range",
                format!("bytes {start}-{}/{total}", end - 1),
            ));
            (206, (start, end))
        }
        Range::Unsatisfiable => {
            return Answer::Full {
                status: 416,
                headers: vec![("Content-Range", format!("bytes */{total}"))],
                body: Bytes::new(),
            };
        }
        Range::Whole => (200, (0, total)),
    };
    if method == "HEAD" {
        return Answer::Stream {
            status,
            headers: answer_headers,
            file: None,
            start,
            length: end - start,
        };
    }
    match content {
        Ok(body) => Answer::Full {
            status,
            headers: answer_headers,
            body: body.slice(start as usize..end as usize),
        },
        Err(file) => Answer::Stream {
            status,
            headers: answer_headers,
            file: Some(file),
            start,
            length: end - start,
        },
    }
}

/// What a `Range` header asks of a representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Range {
    /// All of it: no range, or one that is ignored (another unit, several ranges, bad syntax).
    Whole,
    /// The bytes `start..end` (never empty, `end` at most the size).
    Part(u64, u64),
    /// A first byte at or past the end (or any range of an empty one): 416.
    Unsatisfiable,
}

/// What a `Range` header `value` asks of `total` bytes (RFC 9110, section 14): one
/// `bytes=a-b`, `bytes=a-` or `bytes=-n`, a last byte past the end clamped to it. Whatever
/// else is ignored (serving all of it is allowed), several ranges included.
fn byte_range(value: &str, total: u64) -> Range {
    let Some((unit, spec)) = value.split_once('=') else {
        return Range::Whole;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") || spec.contains(',') {
        return Range::Whole;
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return Range::Whole;
    };
    // Digits only; a number too large for u64 is past any end.
    let number = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u64>().unwrap_or(u64::MAX))
    };
    match (number(first), number(last)) {
        (None, Some(suffix)) if first.is_empty() => {
            if suffix == 0 || total == 0 {
                Range::Unsatisfiable
            } else {
                Range::Part(total - suffix.min(total), total)
            }
        }
        (Some(start), None) if last.is_empty() => {
            if start >= total {
                Range::Unsatisfiable
            } else {
                Range::Part(start, total)
            }
        }
        (Some(start), Some(last)) if last >= start => {
            if start >= total {
                Range::Unsatisfiable
            } else {
                Range::Part(start, last.saturating_add(1).min(total))
            }
        }
        _ => Range::Whole,
    }
}

/// The answer of the standard routes to `path` (without its query).
fn standard(path: &str, flaky: &Mutex<HashMap<String, u32>>, bodies: &Mutex<Bytes>) -> Answer {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["bytes", n] => match n.parse::<usize>() {
            Ok(n) if n <= MAX_BODY => Answer::new(200, State::body(bodies, n)),
            _ => Answer::new(400, &b"bad size"[..]),
        },
        ["item", i] => Answer::new(200, format!("item-{i}")),
        ["status", code] => match code.parse::<u16>() {
            Ok(code) if (200..600).contains(&code) => Answer::new(code, format!("status {code}")),
            _ => Answer::new(400, &b"bad status"[..]),
        },
        ["flaky", k, rest @ ..] if !rest.is_empty() => {
            let Ok(k) = k.parse::<u32>() else {
                return Answer::new(400, &b"bad count"[..]);
            };
            let seen = {
                let mut flaky = lock(flaky);
                let seen = flaky.entry(path.to_owned()).or_insert(0);
                *seen += 1;
                *seen
            };
            if seen <= k {
                Answer::new(503, &b"status 503"[..])
            } else {
                standard(&format!("/{}", rest.join("/")), flaky, bodies)
            }
        }
        _ => Answer::new(404, &b"not found"[..]),
    }
}

/// A running loopback server; dropping it stops it.
pub struct LoopbackServer {
    addr: SocketAddr,
    /// The control port of a controlled server.
    control: Option<SocketAddr>,
    state: Arc<State>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    // Dropped after the server's thread has been joined (no task waits on it any more).
    _timer: Timer,
}

impl std::fmt::Debug for LoopbackServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopbackServer")
            .field("addr", &self.addr)
            .field("delay", &self.state.delay)
            .finish_non_exhaustive()
    }
}

impl LoopbackServer {
    /// Starts a server of the standard routes on a free port that answers every request after
    /// `delay`.
    pub fn start(delay: Duration) -> io::Result<LoopbackServer> {
        LoopbackServer::start_on(0, delay)
    }

    /// Starts a server of the standard routes on `127.0.0.1:port` (0: a free port) that answers
    /// every request after `delay`.
    pub fn start_on(port: u16, delay: Duration) -> io::Result<LoopbackServer> {
        LoopbackServer::serve_dir(port, delay, None)
    }

    /// Starts a server of the standard routes on `127.0.0.1:port` (0: a free port) that
    /// answers every request after `delay`, serving the files under `root` (if any) first.
    pub fn serve_dir(
        port: u16,
        delay: Duration,
        root: Option<std::path::PathBuf>,
    ) -> io::Result<LoopbackServer> {
        let root = root.as_deref().map(dir::resolve_root).transpose()?;
        let routes = Routes::Standard {
            root,
            flaky: Mutex::default(),
            bodies: Mutex::default(),
        };
        LoopbackServer::spawn(port, delay, routes)
    }

    /// Starts a server on a free port whose answer to the `n`th request (from 1) for a target
    /// (path and query) is `route(target, n)`.
    pub fn scripted(
        route: impl Fn(&str, u32) -> Reply + Send + Sync + 'static,
    ) -> io::Result<LoopbackServer> {
        let routes = Routes::Scripted {
            route: Box::new(route),
            hits: Mutex::default(),
            headers: Mutex::default(),
        };
        LoopbackServer::spawn(0, Duration::ZERO, routes)
    }

    /// Starts a server on a free port of the files put with [`LoopbackServer::put_file`]
    /// (anything else is a 404), recording the requests' headers.
    pub fn files() -> io::Result<LoopbackServer> {
        let routes = Routes::Files {
            memory: Mutex::default(),
            headers: Mutex::default(),
        };
        LoopbackServer::spawn(0, Duration::ZERO, routes)
    }

    /// Starts a server of the Python tests' routes on a free port, and its control port (see
    /// [`LoopbackServer::control_url`]); a connection idle for `idle_timeout` without a request
    /// is closed.
    pub fn controlled(idle_timeout: Option<Duration>) -> io::Result<LoopbackServer> {
        let routes = Routes::Controlled(grammar::Grammar::new(idle_timeout));
        LoopbackServer::spawn(0, Duration::ZERO, routes)
    }

    /// The base URL of a controlled server's control port.
    pub fn control_url(&self) -> Option<String> {
        self.control.map(|addr| format!("http://{addr}"))
    }

    /// Serves `body` at `path` with this `etag` (replacing what was there) on a files server.
    /// A `path` with a query is served for that exact target only; an empty `etag` sends none.
    pub fn put_file(&self, path: &str, body: impl Into<Bytes>, etag: &str) {
        if let Routes::Files { memory, .. } = &self.state.routes {
            lock(memory).insert(path.to_owned(), (body.into(), etag.to_owned()));
        }
    }

    /// Stops serving `path` (a 404 from now on) on a files server.
    pub fn remove_file(&self, path: &str) {
        if let Routes::Files { memory, .. } = &self.state.routes {
            lock(memory).remove(path);
        }
    }

    fn spawn(port: u16, delay: Duration, routes: Routes) -> io::Result<LoopbackServer> {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .max_blocking_threads(FILE_THREADS)
            .build()?;
        let timer = Timer::start()?;
        let state = Arc::new(State {
            delay,
            connections: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            max_in_flight: AtomicU64::new(0),
            routes,
            timer: Arc::clone(&timer.queue),
        });
        let control = match &state.routes {
            Routes::Controlled(_) => {
                let control = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
                control.set_nonblocking(true)?;
                Some(control)
            }
            _ => None,
        };
        let control_addr = control.as_ref().map(|c| c.local_addr()).transpose()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let shared = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("dlrs-loopback".to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    let data = accept(listener, Arc::clone(&shared), false);
                    let control = async move {
                        match control {
                            Some(control) => accept(control, shared, true).await,
                            None => std::future::pending().await,
                        }
                    };
                    let serving = futures::future::join(data, control);
                    let _ = select(std::pin::pin!(serving), stopped).await;
                });
                // Dropping the runtime here cancels the connections still open.
            })?;
        Ok(LoopbackServer {
            addr,
            control: control_addr,
            state,
            stop: Some(stop),
            thread: Some(thread),
            _timer: timer,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The URL of `target` (a path and query) on this server.
    pub fn url(&self, target: &str) -> String {
        format!("http://{}{target}", self.addr)
    }

    /// The address listened on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The number of connections accepted.
    pub fn connections(&self) -> u64 {
        self.state.connections.load(Ordering::Relaxed)
    }

    /// The number of requests answered or being answered.
    pub fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::Relaxed)
    }

    /// The most requests that were being answered at once.
    pub fn max_in_flight(&self) -> u64 {
        self.state.max_in_flight.load(Ordering::Relaxed)
    }

    /// The requests made for `target` (a path with its query) so far; 0 when not scripted.
    pub fn hits(&self, target: &str) -> u32 {
        match &self.state.routes {
            Routes::Scripted { hits, .. } => lock(hits).get(target).copied().unwrap_or(0),
            Routes::Standard { .. } | Routes::Files { .. } | Routes::Controlled(_) => 0,
        }
    }

    /// The headers of every request so far (lower-case names); none from the standard routes.
    pub fn request_headers(&self) -> Vec<HashMap<String, String>> {
        match &self.state.routes {
            Routes::Scripted { headers, .. } | Routes::Files { headers, .. } => {
                lock(headers).clone()
            }
            Routes::Standard { .. } | Routes::Controlled(_) => Vec::new(),
        }
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

/// Accepts connections on `listener` (the control port's if `control`) until cancelled.
async fn accept(listener: std::net::TcpListener, state: Arc<State>, control: bool) {
    let Ok(listener) = TcpListener::from_std(listener) else {
        return;
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        // A free slot first: past the limit, connections wait in the backlog.
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                if !control {
                    state.connections.fetch_add(1, Ordering::Relaxed);
                }
                let state = Arc::clone(&state);
                tokio::spawn(async move {
                    let _slot = slot;
                    match (&state.routes, control) {
                        (Routes::Controlled(grammar), true) => {
                            control::serve(stream, grammar).await;
                        }
                        (Routes::Controlled(grammar), false) => {
                            grammar::serve(stream, &state, grammar).await;
                        }
                        _ => {
                            let _ = serve(stream, Arc::clone(&state)).await;
                        }
                    }
                });
            }
            // A failed accept (out of descriptors): try again shortly.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
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
        let due = Instant::now() + state.delay;
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let mut lines = head.split("\r\n");
        let mut request_line = lines.next().unwrap_or("").split_whitespace();
        let method = request_line.next().unwrap_or("GET").to_owned();
        let target = request_line.next().unwrap_or("/").to_owned();
        let headers: HashMap<String, String> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
            .collect();
        let close = headers
            .get("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        if let Some(length) = headers.get("content-length").and_then(|l| l.parse().ok()) {
            while buf.len() < length {
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    return Ok(());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            buf.drain(..length);
        }

        state.requests.fetch_add(1, Ordering::Relaxed);
        let now = state.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        state.max_in_flight.fetch_max(now, Ordering::Relaxed);
        if !state.delay.is_zero() {
            state.timer.sleep_until(due).await;
        }
        let (wait, answer) = if state.reads_files() {
            // Opening and checking a file may wait on the disk: not on the server's thread.
            let state = Arc::clone(&state);
            tokio::task::spawn_blocking(move || state.answer(&method, &target, headers))
                .await
                .map_err(io::Error::other)?
        } else {
            state.answer(&method, &target, headers)
        };
        if !wait.is_zero() {
            state.timer.sleep_until(Instant::now() + wait).await;
        }
        state.in_flight.fetch_sub(1, Ordering::Relaxed);
        if !write(&mut stream, answer, close).await? {
            return Ok(());
        }
    }
}

/// Writes `answer`; whether the connection stays open for the next request.
async fn write(stream: &mut TcpStream, answer: Answer, close: bool) -> io::Result<bool> {
    let connection = if close { "Connection: close\r\n" } else { "" };
    match answer {
        Answer::Full {
            status,
            headers,
            body,
        } => {
            let head = head(status, body.len() as u64, true, connection, &headers);
            // Head and body in one vectored write, the body not copied.
            let mut answer = Bytes::from(head.into_bytes()).chain(body);
            stream.write_all_buf(&mut answer).await?;
            Ok(!close)
        }
        Answer::Stream {
            status,
            headers,
            file,
            start,
            length,
        } => {
            let head = head(status, length, file.is_some(), connection, &headers);
            stream.write_all(head.as_bytes()).await?;
            if let Some(file) = file {
                dir::send_range(stream, file, start, length).await?;
            }
            Ok(!close)
        }
        Answer::Scripted(Reply::Chunked(chunks)) => {
            let mut out =
                format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{connection}\r\n")
                    .into_bytes();
            for chunk in chunks {
                out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                out.extend_from_slice(&chunk);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
            stream.write_all(&out).await?;
            Ok(!close)
        }
        Answer::Scripted(Reply::Truncated { announced, sent }) => {
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {announced}\r\n\r\n");
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(&sent).await?;
            stream.shutdown().await?;
            Ok(false)
        }
        Answer::Scripted(Reply::Reset) => {
            stream.set_zero_linger()?;
            Ok(false)
        }
        Answer::Scripted(Reply::Stall) => std::future::pending().await,
        Answer::Scripted(Reply::Body(_) | Reply::Status(..) | Reply::Delayed(..)) => {
            unreachable!("`answer` makes full answers of these")
        }
    }
}

/// The head of an answer of `length` bytes, up to its blank line; a body that follows is
/// announced as octets.
fn head(
    status: u16,
    length: u64,
    body: bool,
    connection: &str,
    headers: &[(&str, String)],
) -> String {
    let content_type = if body {
        "Content-Type: application/octet-stream\r\n"
    } else {
        ""
    };
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Length: {length}\r\n{content_type}{connection}",
        reason(status),
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        307 => "Temporary Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        504 => "Gateway Timeout",
        403 => "Forbidden",
        404 => "Not Found",
        412 => "Precondition Failed",
        416 => "Range Not Satisfiable",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::TempDir;

    #[test]
    fn routes() {
        let server = LoopbackServer::start(Duration::ZERO).unwrap();
        assert_eq!(
            get(server.addr(), "/item/7?x=1"),
            ("HTTP/1.1 200 OK".into(), b"item-7".to_vec())
        );
        assert_eq!(get(server.addr(), "/bytes/300").1, bytes_body(300));
        assert_eq!(bytes_body(3), [7, 38, 69]);
        assert_eq!(
            get(server.addr(), "/status/503").0,
            "HTTP/1.1 503 Service Unavailable"
        );
        assert_eq!(get(server.addr(), "/nothing").0, "HTTP/1.1 404 Not Found");
        assert_eq!(
            get(server.addr(), "/flaky/2/item/1").0,
            "HTTP/1.1 503 Service Unavailable"
        );
        assert_eq!(
            get(server.addr(), "/flaky/2/item/1").0,
            "HTTP/1.1 503 Service Unavailable"
        );
        assert_eq!(get(server.addr(), "/flaky/2/item/1").1, b"item-1");
        assert_eq!(server.requests(), 7);
        assert_eq!(server.connections(), 7);
        assert_eq!(server.max_in_flight(), 1);
    }

    #[test]
    fn bodies_are_prefixes_of_the_longest_made() {
        let server = LoopbackServer::start(Duration::ZERO).unwrap();
        assert_eq!(get(server.addr(), "/bytes/5000").1, bytes_body(5000));
        assert_eq!(get(server.addr(), "/bytes/17").1, bytes_body(17));
        assert_eq!(get(server.addr(), "/bytes/0").1, b"");
        assert_eq!(get(server.addr(), "/bytes/9000?i=3").1, bytes_body(9000));
        match &server.state.routes {
            Routes::Standard { bodies, .. } => assert_eq!(lock(bodies).len(), 9000),
            _ => unreachable!(),
        }
        assert_eq!(
            get(server.addr(), &format!("/bytes/{}", MAX_BODY + 1)).0,
            "HTTP/1.1 400 Bad Request"
        );
    }

    #[test]
    fn keeps_connections_open() {
        let server = LoopbackServer::start(Duration::ZERO).unwrap();
        // Two requests in one write, then one more: all three on one connection.
        let out = exchange_writes(
            server.addr,
            &[
                b"GET /item/1 HTTP/1.1\r\n\r\nGET /item/2 HTTP/1.1\r\n\r\n",
                b"GET /item/3 HTTP/1.1\r\nConnection: close\r\n\r\n",
            ],
        );
        let out = String::from_utf8(out).unwrap();
        assert_eq!(out.matches("HTTP/1.1 200 OK").count(), 3);
        assert!(out.ends_with("item-3"), "{out}");
    }

    #[test]
    fn scripted_replies_count_targets_and_record_headers() {
        let server = LoopbackServer::scripted(|target, n| match (target, n) {
            ("/a?x=1", 1) => Reply::Status(503, vec![("Retry-After", "0".into())]),
            (_, n) => Reply::Body(format!("{target} {n}").into_bytes()),
        })
        .unwrap();
        // A request body is skipped: the next request on the connection is read after it.
        let out = exchange_writes(
            server.addr,
            &[
                b"POST /a?x=1 HTTP/1.1\r\nContent-Length: 5\r\nX-Token: t\r\n\r\nhello",
                b"GET /a?x=1 HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\nConnection: close\r\n\r\n",
            ],
        );
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{out}"
        );
        assert!(out.contains("Retry-After: 0\r\n"), "{out}");
        assert!(out.contains("\r\n\r\n/a?x=1 2HTTP/1.1 200 OK"), "{out}");
        assert!(out.ends_with("/b 1"), "{out}");
        assert_eq!(
            (server.hits("/a?x=1"), server.hits("/b"), server.hits("/a")),
            (2, 1, 0)
        );
        let headers = server.request_headers();
        assert_eq!(headers.len(), 3);
        assert_eq!(headers[0]["x-token"], "t");
        assert_eq!(headers[2]["connection"], "close");
        assert_eq!((server.requests(), server.connections()), (3, 1));
    }

    /// Sends `request` on a new connection and reads the whole answer (head and body).
    fn exchange(server: &LoopbackServer, request: &str) -> String {
        String::from_utf8_lossy(&super::exchange(server.addr, request)).into_owned()
    }

    #[test]
    fn byte_ranges_follow_rfc_9110() {
        use Range::{Part, Unsatisfiable, Whole};
        for (value, total, range) in [
            ("bytes=2-4", 10, Part(2, 5)),
            ("bytes=2-", 10, Part(2, 10)),
            ("bytes=-3", 10, Part(7, 10)),
            ("bytes=-30", 10, Part(0, 10)),
            ("bytes=5-100", 10, Part(5, 10)),
            ("bytes=9-99999999999999999999", 10, Part(9, 10)),
            ("Bytes = 1-1", 10, Part(1, 2)),
            ("bytes=10-", 10, Unsatisfiable),
            ("bytes=10-11", 10, Unsatisfiable),
            ("bytes=99999999999999999999-", 10, Unsatisfiable),
            ("bytes=-0", 10, Unsatisfiable),
            ("bytes=-1", 0, Unsatisfiable),
        ] {
            assert_eq!(byte_range(value, total), range, "{value} of {total}");
        }
        // Another unit, several ranges or bad syntax: ignored.
        for value in [
            "bytes=0-1,3-4",
            "items=0-1",
            "bytes=4-2",
            "bytes=+1-2",
            "bytes=1",
            "bytes",
            "bytes=-",
        ] {
            assert_eq!(byte_range(value, 10), Whole, "{value}");
        }
    }

    #[test]
    fn a_directory_is_served_with_ranges_before_the_routes() {
        let dir = TempDir::new();
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/f.bin"), b"0123456789").unwrap();
        let server = LoopbackServer::serve_dir(0, Duration::ZERO, Some(dir.to_path_buf())).unwrap();
        let close = "Connection: close\r\n";
        let range = exchange(
            &server,
            &format!("GET /sub/f.bin HTTP/1.1\r\nRange: bytes=2-4\r\n{close}\r\n"),
        );
        assert!(
            range.starts_with("HTTP/1.1 206 Partial Content\r\n"),
            "{range}"
        );
        assert!(range.contains("Content-Range: bytes 2-4/10\r\n"), "{range}");
        assert!(range.ends_with("\r\n\r\n234"), "{range}");
        let etag = range
            .lines()
            .find_map(|l| l.strip_prefix("ETag: "))
            .unwrap()
            .to_owned();
        let head = exchange(&server, &format!("HEAD /sub/f.bin HTTP/1.1\r\n{close}\r\n"));
        assert!(head.contains("Content-Length: 10\r\n") && head.ends_with("\r\n\r\n"));
        let matched = exchange(
            &server,
            &format!("GET /sub/f.bin HTTP/1.1\r\nIf-Match: {etag}\r\n{close}\r\n"),
        );
        assert!(matched.ends_with("0123456789"), "{matched}");
        let refused = exchange(
            &server,
            &format!("GET /sub/f.bin HTTP/1.1\r\nIf-Match: \"x\"\r\n{close}\r\n"),
        );
        assert!(refused.starts_with("HTTP/1.1 412 "), "{refused}");
        let past = exchange(
            &server,
            &format!("GET /sub/f.bin HTTP/1.1\r\nRange: bytes=10-\r\n{close}\r\n"),
        );
        assert!(past.starts_with("HTTP/1.1 416 "), "{past}");
        assert_eq!(get(server.addr(), "/item/3").1, b"item-3");
        assert_eq!(
            get(server.addr(), "/sub/../sub/f.bin").0,
            "HTTP/1.1 404 Not Found"
        );
    }
}
