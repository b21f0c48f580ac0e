//! The controlled server ([`LoopbackServer::controlled`](super::LoopbackServer::controlled),
//! `dlrs serve --control`): the routes and query grammar of the Python tests' server
//! (`tests/servers/http.py` documents them), every request recorded, and a control port.
//!
//! Answers follow the query merged over the defaults and under the next scripted step of the
//! path; faults (`reset`, `truncate`, `stall`), `fail=<k>` counters, chunked bodies, ranges and
//! files with preconditions. The control port takes the test's settings and answers its
//! questions in JSON; see `control`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::Either;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use dlrs_core::sync::lock;

use super::{MAX_HEAD, Range, State, byte_range, reason};

/// Bodies are made of pseudo-random blocks of this size (the last one cut short).
pub const BLOCK_SIZE: usize = 65536;

/// The 64-bit words of the pool the blocks are windows of.
const POOL_WORDS: usize = 1 << 17;

/// The bytes a block may start at.
const POOL_SIZE: usize = POOL_WORDS * 8;

/// The bytes gathered before one write of a streamed body.
const WRITE_BATCH: usize = 256 << 10;

/// Query parameters, step or defaults: the last value of a name wins.
pub(super) type Params = BTreeMap<String, String>;

/// splitmix64's output for `z`: the one hash both sides compute (Python does it in a few lines).
fn mix(z: u64) -> u64 {
    let mut z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Word `k` of the pool is `mix(k)`, little-endian; a block more so that any window fits.
fn pool() -> &'static [u8] {
    static POOL: OnceLock<Vec<u8>> = OnceLock::new();
    POOL.get_or_init(|| {
        (0..(POOL_SIZE + BLOCK_SIZE) as u64 / 8)
            .flat_map(|k| mix(k).to_le_bytes())
            .collect()
    })
}

/// Block `index` of the bodies of `seed`: the window of the pool at a hash of both. Slicing, not
/// generating, keeps the server (and the Python side) fast.
fn block(seed: u64, index: u64) -> &'static [u8] {
    let offset = (mix(mix(seed) ^ index) % POOL_SIZE as u64) as usize;
    &pool()[offset..offset + BLOCK_SIZE]
}

/// The body of `/bytes/<n>?seed=<seed>` (`expected_body` in Python; a negative seed is taken
/// modulo 2⁶⁴): bodies of one seed share prefixes.
pub fn expected_body(n: usize, seed: i128) -> Vec<u8> {
    let body = Body::Random {
        seed: seed as u64,
        start: 0,
        end: n as u64,
    };
    let mut out = Vec::with_capacity(n);
    body.for_each_piece(|piece| out.extend_from_slice(piece));
    out
}

/// An answer's body: bytes, or a range of a generated body.
#[derive(Debug, Clone)]
pub(super) enum Body {
    Bytes(Bytes),
    Random { seed: u64, start: u64, end: u64 },
}

impl Body {
    fn len(&self) -> u64 {
        match self {
            Body::Bytes(b) => b.len() as u64,
            Body::Random { start, end, .. } => end - start,
        }
    }

    /// Bytes `from..to` of this body (`to` at most its length).
    fn slice(&self, from: u64, to: u64) -> Body {
        match self {
            Body::Bytes(b) => Body::Bytes(b.slice(from as usize..to as usize)),
            Body::Random { seed, start, .. } => Body::Random {
                seed: *seed,
                start: start + from,
                end: start + to,
            },
        }
    }

    /// The bytes from `pos` to the end of the block (or body) they are in; empty at the end.
    fn piece(&self, pos: u64) -> &[u8] {
        match self {
            Body::Bytes(b) => &b[pos as usize..],
            Body::Random { seed, start, end } => {
                let at = start + pos;
                let (index, offset) = (at / BLOCK_SIZE as u64, at % BLOCK_SIZE as u64);
                let take = (BLOCK_SIZE as u64 - offset).min(end.saturating_sub(at));
                &block(*seed, index)[offset as usize..(offset + take) as usize]
            }
        }
    }

    /// Calls `f` with the body's bytes in order, a block at most at a time.
    fn for_each_piece(&self, mut f: impl FnMut(&[u8])) {
        let mut pos = 0;
        while pos < self.len() {
            let piece = self.piece(pos);
            f(piece);
            pos += piece.len() as u64;
        }
    }
}

/// A file put by the test.
pub(super) struct File {
    pub(super) body: Bytes,
    pub(super) etag: Option<String>,
    pub(super) last_modified: Option<String>,
}

/// One request as the server saw it (`RequestRecord` in Python).
pub(super) struct Record {
    pub method: String,
    /// Decoded, without the query.
    pub path: String,
    /// As sent.
    pub target: String,
    pub query: Params,
    pub headers: Params,
    /// Seconds from the server's start to the end of the request's head.
    pub time: f64,
    pub connection: u64,
    pub outcome: String,
    pub params: Params,
}

/// What the test set and what the server counted.
#[derive(Default)]
pub(super) struct Inner {
    /// Parameters under every request's query.
    pub(super) defaults: Params,
    /// The steps still to come, per path.
    pub(super) scripts: HashMap<String, VecDeque<Params>>,
    /// The requests seen per `fail=` key.
    pub(super) counters: HashMap<String, u64>,
    pub(super) files: HashMap<String, File>,
    pub(super) records: Vec<Record>,
    /// Bumped by a reset, so that an answer finishing late leaves the new records alone.
    pub(super) epoch: u64,
    pub(super) in_flight: u64,
    pub(super) max_in_flight: u64,
    /// Connections open now, at most at once, and accepted since the start (never reset).
    pub(super) open: u64,
    pub(super) max_open: u64,
    pub(super) opened: u64,
}

/// The controlled routes' state.
pub(super) struct Grammar {
    pub(super) started: Instant,
    pub(super) idle_timeout: Option<Duration>,
    pub(super) inner: Mutex<Inner>,
}

impl Grammar {
    pub(super) fn new(idle_timeout: Option<Duration>) -> Grammar {
        Grammar {
            started: Instant::now(),
            idle_timeout,
            inner: Mutex::default(),
        }
    }

    /// Forgets the records, counters, steps and maxima (current counts stay).
    pub(super) fn reset(&self) {
        let mut inner = lock(&self.inner);
        inner.records.clear();
        inner.scripts.clear();
        inner.counters.clear();
        inner.epoch += 1;
        inner.max_in_flight = inner.in_flight;
        inner.max_open = inner.open;
    }

    /// Sets the outcome of a request still recorded, unless it was decided already and only a
    /// `client-gone` comes late.
    fn set_outcome(&self, at: (u64, usize), outcome: String) {
        let mut inner = lock(&self.inner);
        if inner.epoch != at.0 {
            return;
        }
        if let Some(record) = inner.records.get_mut(at.1) {
            let decided = !(record.outcome == "pending"
                || record.outcome == "ok"
                || record.outcome.starts_with("status:"));
            if !(decided && outcome == "client-gone") {
                record.outcome = outcome;
            }
        }
    }

    fn finish(&self) {
        lock(&self.inner).in_flight -= 1;
    }
}

/// A request read off a connection.
pub(super) struct Request {
    pub(super) method: String,
    pub(super) target: String,
    version: String,
    pub(super) headers: Params,
    pub(super) body: Vec<u8>,
    /// When its head had been read.
    read_at: Instant,
}

impl Request {
    /// The decoded path (no query or fragment) and the query.
    pub(super) fn path_and_query(&self) -> (String, Params) {
        let target = self.target.split('#').next().unwrap_or("");
        let (raw_path, raw_query) = target.split_once('?').unwrap_or((target, ""));
        let path = percent_encoding::percent_decode_str(raw_path)
            .decode_utf8_lossy()
            .into_owned();
        let query = url::form_urlencoded::parse(raw_query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        (path, query)
    }

    /// Whether the client wants the connection kept open.
    pub(super) fn keep_alive(&self) -> bool {
        let connection = self
            .headers
            .get("connection")
            .map(|v| v.to_ascii_lowercase());
        match connection.as_deref() {
            _ if self.version == "HTTP/1.1" => connection.as_deref() != Some("close"),
            Some("keep-alive") => true,
            _ => false,
        }
    }
}

/// What reading a connection gave.
pub(super) enum Read {
    Request(Request),
    /// The client closed, or stayed idle too long.
    Closed,
    /// A request this server cannot read: this status and reason, then the connection closes.
    Bad(u16, &'static str),
}

/// Reads the next request (head and body) from `stream`, `buf` holding what was read past the
/// last one; gives up after `idle` without a whole head.
pub(super) async fn read_request(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    idle: Option<Duration>,
) -> io::Result<Read> {
    let head = async {
        let mut chunk = [0u8; 8192];
        loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                return Ok::<_, io::Error>(Some(p + 4));
            }
            if buf.len() > MAX_HEAD {
                return Ok(None);
            }
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(Some(0));
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    let end = match idle {
        Some(idle) => match tokio::time::timeout(idle, head).await {
            Ok(end) => end?,
            Err(_) => return Ok(Read::Closed),
        },
        None => head.await?,
    };
    let end = match end {
        None => return Ok(Read::Bad(431, "request head too large")),
        Some(0) => return Ok(Read::Closed),
        Some(end) => end,
    };
    let read_at = Instant::now();
    let text: String = buf[..end - 4].iter().map(|&b| char::from(b)).collect();
    buf.drain(..end);
    let mut lines = text.split("\r\n");
    let parts: Vec<&str> = lines.next().unwrap_or("").split(' ').collect();
    let [method, target, version] = parts.as_slice() else {
        return Ok(Read::Bad(400, "bad request line"));
    };
    if !version.starts_with("HTTP/1.") {
        return Ok(Read::Bad(400, "bad request line"));
    }
    let headers: Params = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length = match headers.get("content-length").map(|l| l.parse::<usize>()) {
        None if headers.contains_key("transfer-encoding") => {
            return Ok(Read::Bad(501, "request bodies must have a Content-Length"));
        }
        None => 0,
        Some(Ok(length)) => length,
        Some(Err(_)) => return Ok(Read::Bad(400, "bad Content-Length")),
    };
    let mut chunk = [0u8; 8192];
    while buf.len() < length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Read::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = buf.drain(..length).collect();
    Ok(Read::Request(Request {
        method: (*method).to_owned(),
        target: (*target).to_owned(),
        version: (*version).to_owned(),
        headers,
        body,
        read_at,
    }))
}

/// The head of an answer (the tests' server's: `Server`, `Content-Type`, the framing and
/// `Connection` always).
pub(super) fn head(
    status: u16,
    length: Option<u64>,
    keep_alive: bool,
    headers: &[(&str, String)],
    content_type: &str,
) -> Vec<u8> {
    let framing = match length {
        Some(length) => format!("Content-Length: {length}"),
        None => "Transfer-Encoding: chunked".to_owned(),
    };
    let connection = if keep_alive { "keep-alive" } else { "close" };
    let mut text = format!(
        "HTTP/1.1 {status} {}\r\nServer: dlrs-test\r\nContent-Type: {content_type}\r\n\
         {framing}\r\nConnection: {connection}\r\n",
        reason(status)
    );
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.into_bytes()
}

/// A short `text/plain` answer: `text` and a newline.
pub(super) fn simple(status: u16, text: &str, keep_alive: bool) -> Vec<u8> {
    let body = format!("{text}\n");
    let mut out = head(
        status,
        Some(body.len() as u64),
        keep_alive,
        &[],
        "text/plain",
    );
    out.extend_from_slice(body.as_bytes());
    out
}

/// A connection fault and its settings.
enum Fault {
    /// A reset before anything is sent.
    Reset,
    /// The head and this many body bytes, then a reset, a close or a stall this long.
    After(u64, Then),
}

#[derive(Clone, Copy)]
enum Then {
    Reset,
    Close,
    Stall(Duration),
}

/// How a request is answered.
struct Decision {
    outcome: String,
    status: u16,
    headers: Vec<(&'static str, String)>,
    content_type: &'static str,
    body: Body,
    keep_alive: bool,
    /// The chunk size of a chunked body.
    chunk: Option<usize>,
    fault: Option<Fault>,
}

fn int_param(params: &Params, name: &str) -> Result<Option<i128>, String> {
    match params.get(name).map(String::as_str) {
        None | Some("") => Ok(None),
        Some(value) => value
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("{name} must be an integer, got '{value}'")),
    }
}

fn seconds_param(params: &Params, name: &str, default: Duration) -> Result<Duration, String> {
    match params.get(name).map(String::as_str) {
        None | Some("") => Ok(default),
        Some(value) => match value.trim().parse::<f64>() {
            Ok(s) if s < 0.0 => Err(format!("{name} must be >= 0, got '{value}'")),
            Ok(s) => Duration::try_from_secs_f64(s)
                .map_err(|_| format!("{name} must be a number, got '{value}'")),
            Err(_) => Err(format!("{name} must be a number, got '{value}'")),
        },
    }
}

fn truthy(value: Option<&String>) -> bool {
    value.is_some_and(|v| ["1", "true", "yes", "on"].contains(&v.to_ascii_lowercase().as_str()))
}

/// A path segment as a number (Python's `int()`), if it is one.
fn number(segment: &str) -> Option<i128> {
    segment.trim().parse().ok()
}

fn not_found() -> (u16, Body) {
    (404, Body::Bytes(Bytes::from_static(b"not found\n")))
}

/// The route's status and body for `path`.
fn route(
    req: &Request,
    path: &str,
    query: &Params,
    params: &Params,
) -> Result<(u16, Body), String> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    Ok(match segments.as_slice() {
        _ if path == "/" || path == "/health" => (200, Body::Bytes(Bytes::from_static(b"ok"))),
        ["bytes", n] => match number(n).and_then(|n| u64::try_from(n).ok()) {
            Some(n) => {
                let seed = int_param(params, "seed")?.unwrap_or(0) as u64;
                (
                    200,
                    Body::Random {
                        seed,
                        start: 0,
                        end: n,
                    },
                )
            }
            None => not_found(),
        },
        ["item", i] => match number(i) {
            Some(i) => match int_param(params, "size")? {
                None => (200, Body::Bytes(format!("item-{i}").into())),
                Some(size) if size < 0 => return Err(format!("size must be >= 0, got {size}")),
                Some(size) => (
                    200,
                    Body::Random {
                        seed: i as u64,
                        start: 0,
                        end: size as u64,
                    },
                ),
            },
            None => not_found(),
        },
        ["echo"] if path == "/echo" => {
            let doc = serde_json::json!({
                "method": req.method,
                "path": path,
                "query": query,
                "headers": req.headers,
                "params": params,
            });
            (200, Body::Bytes(doc.to_string().into()))
        }
        ["status", code] => match number(code).and_then(|c| u16::try_from(c).ok()) {
            Some(code) if (100..=599).contains(&code) => {
                (code, Body::Bytes(format!("status {code}\n").into()))
            }
            _ => not_found(),
        },
        _ => not_found(),
    })
}

impl Grammar {
    /// How to answer `req` for `path` with these merged `params`; an error is a 400's text.
    fn decide(
        &self,
        req: &Request,
        path: &str,
        query: &Params,
        params: &Params,
    ) -> Result<Decision, String> {
        let mut status = int_param(params, "status")?;
        let mut fault = params.get("fault").filter(|f| !f.is_empty()).cloned();
        if let Some(f) = &fault
            && !["reset", "truncate", "stall"].contains(&f.as_str())
        {
            return Err(format!(
                "fault must be one of reset, truncate, stall, got '{f}'"
            ));
        }
        if let Some(fail) = int_param(params, "fail")? {
            let key = params
                .get("key")
                .filter(|k| !k.is_empty())
                .map_or(path, |k| k);
            let count = {
                let mut inner = lock(&self.inner);
                let count = inner.counters.entry(key.to_owned()).or_insert(0);
                *count += 1;
                *count
            };
            if i128::from(count) <= fail {
                if status.is_none() && fault.is_none() {
                    status = Some(503);
                }
            } else {
                (status, fault) = (None, None);
            }
        }
        let mut headers = Vec::new();
        let served = lock(&self.inner)
            .files
            .get(path)
            .map(|f| (f.body.clone(), f.etag.clone(), f.last_modified.clone()));
        let (route_status, mut body) = match served {
            Some((data, etag, last_modified)) => {
                let if_match = req.headers.get("if-match");
                let if_unmodified = req.headers.get("if-unmodified-since");
                let refused = if_match.is_some_and(|m| m != "*" && Some(m) != etag.as_ref())
                    || (if_unmodified.is_some()
                        && last_modified.is_some()
                        && if_unmodified != last_modified.as_ref());
                headers.extend(etag.map(|e| ("ETag", e)));
                headers.extend(last_modified.map(|l| ("Last-Modified", l)));
                if refused {
                    (412, Body::Bytes(Bytes::from_static(b"status 412\n")))
                } else {
                    (200, Body::Bytes(data))
                }
            }
            None => route(req, path, query, params)?,
        };
        let mut status = match status {
            None => route_status,
            Some(s) => u16::try_from(s)
                .ok()
                .filter(|s| (100..=599).contains(s))
                .ok_or_else(|| format!("status must be 100 to 599, got {s}"))?,
        };
        let mut keep_alive = req.keep_alive() && !truthy(params.get("close"));
        if fault.as_deref() == Some("reset") && params.get("after").is_none() {
            return Ok(Decision {
                outcome: "reset".into(),
                status,
                headers,
                content_type: "",
                body,
                keep_alive: false,
                chunk: None,
                fault: Some(Fault::Reset),
            });
        }
        let mut ok_status = 200;
        if status == 200
            && let Some(range) = req.headers.get("range")
        {
            let total = body.len();
            match byte_range(range, total) {
                Range::Whole => {}
                Range::Part(start, end) => {
                    headers.push((
                        "Content-Range",
                        format!("bytes {start}-{}/{total}", end - 1),
                    ));
                    body = body.slice(start, end);
                    ok_status = 206;
                }
                Range::Unsatisfiable => {
                    status = 416;
                    headers.push(("Content-Range", format!("bytes */{total}")));
                }
            }
        }
        if status != 200 {
            if status == 408 {
                keep_alive = false;
            }
            if let Some(retry_after) = params.get("retry_after").filter(|r| !r.is_empty()) {
                headers.push(("Retry-After", retry_after.clone()));
            }
            if route_status != status {
                body = Body::Bytes(format!("status {status}\n").into());
            }
            return Ok(Decision {
                outcome: format!("status:{status}"),
                status,
                headers,
                content_type: "text/plain",
                body,
                keep_alive,
                chunk: None,
                fault: None,
            });
        }
        let chunk = if truthy(params.get("chunked")) {
            let chunk = int_param(params, "chunk")?.unwrap_or(16384);
            if chunk < 1 {
                return Err(format!("chunk must be >= 1, got {chunk}"));
            }
            Some(usize::try_from(chunk).unwrap_or(usize::MAX))
        } else {
            None
        };
        let content_type = if path == "/echo" {
            "application/json"
        } else {
            "application/octet-stream"
        };
        let outcome = fault.as_deref().unwrap_or("ok");
        let fault = match fault.as_deref() {
            None => None,
            Some(kind) => {
                let default_after = if kind == "truncate" {
                    body.len() / 2
                } else {
                    0
                };
                let after = int_param(params, "after")?
                    .map_or(default_after, |a| u64::try_from(a).unwrap_or(0));
                let then = match kind {
                    "reset" => Then::Reset,
                    "truncate" => Then::Close,
                    _ => Then::Stall(seconds_param(params, "stall", Duration::from_secs(3600))?),
                };
                keep_alive = false;
                Some(Fault::After(after.min(body.len()), then))
            }
        };
        Ok(Decision {
            outcome: outcome.to_owned(),
            status: ok_status,
            headers,
            content_type,
            body,
            keep_alive,
            chunk,
            fault,
        })
    }

    /// Records `req`, waits its delay and answers it; whether the connection stays open.
    async fn exchange(
        &self,
        state: &State,
        stream: &mut TcpStream,
        buf: &mut Vec<u8>,
        req: Request,
        connection: u64,
    ) -> io::Result<bool> {
        let (path, query) = req.path_and_query();
        let (params, at) = {
            let mut inner = lock(&self.inner);
            let mut params = inner.defaults.clone();
            params.extend(query.clone());
            if let Some(step) = inner.scripts.get_mut(&path).and_then(VecDeque::pop_front) {
                params.extend(step);
            }
            let at = (inner.epoch, inner.records.len());
            inner.records.push(Record {
                method: req.method.clone(),
                path: path.clone(),
                target: req.target.clone(),
                query: query.clone(),
                headers: req.headers.clone(),
                time: req.read_at.duration_since(self.started).as_secs_f64(),
                connection,
                outcome: "pending".into(),
                params: params.clone(),
            });
            inner.in_flight += 1;
            inner.max_in_flight = inner.max_in_flight.max(inner.in_flight);
            (params, at)
        };
        let decided = seconds_param(&params, "delay", Duration::ZERO);
        if let Ok(delay) = decided
            && !delay.is_zero()
        {
            // A delay past the end of time never ends.
            let sleep = async {
                match req.read_at.checked_add(delay) {
                    Some(due) => state.timer.sleep_until(due).await,
                    None => std::future::pending().await,
                }
            };
            if !wait_for_client(stream, buf, sleep).await {
                self.set_outcome(at, "client-gone".into());
                self.finish();
                return Ok(false);
            }
        }
        let decision = decided.and_then(|_| self.decide(&req, &path, &query, &params));
        let keep = match decision {
            Err(text) => {
                let keep_alive = req.keep_alive();
                self.set_outcome(at, "status:400".into());
                let sent = stream.write_all(&simple(400, &text, keep_alive)).await;
                sent.is_ok() && keep_alive
            }
            Ok(decision) => {
                self.set_outcome(at, decision.outcome.clone());
                let head_only = req.method == "HEAD";
                let sent = perform(stream, decision, head_only).await;
                if sent.is_err() {
                    self.set_outcome(at, "client-gone".into());
                }
                sent.unwrap_or(false)
            }
        };
        self.finish();
        Ok(keep)
    }
}

/// Runs `wait` while watching the client: what it sends meanwhile is kept in `buf`; false if
/// it left (or half-closed) first.
async fn wait_for_client(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    wait: impl Future<Output = ()>,
) -> bool {
    let mut wait = std::pin::pin!(wait);
    let mut chunk = [0u8; 4096];
    loop {
        let read = {
            let read = std::pin::pin!(stream.read(&mut chunk));
            match futures::future::select(wait.as_mut(), read).await {
                Either::Left(((), _)) => return true,
                Either::Right((read, _)) => read,
            }
        };
        match read {
            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return false,
        }
    }
}

/// Writes `head` and the first `limit` bytes of `body`, chunked if asked, the chunked body's
/// end too if `terminate`.
async fn send(
    stream: &mut TcpStream,
    head: Vec<u8>,
    body: &Body,
    chunk: Option<usize>,
    terminate: bool,
) -> io::Result<()> {
    let mut out = head;
    let mut pos = 0;
    while pos < body.len() {
        let piece = body.piece(pos);
        pos += piece.len() as u64;
        match chunk {
            Some(size) => {
                for part in piece.chunks(size) {
                    out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                    out.extend_from_slice(part);
                    out.extend_from_slice(b"\r\n");
                }
            }
            None => out.extend_from_slice(piece),
        }
        if out.len() >= WRITE_BATCH {
            stream.write_all(&out).await?;
            out.clear();
        }
    }
    if chunk.is_some() && terminate {
        out.extend_from_slice(b"0\r\n\r\n");
    }
    stream.write_all(&out).await
}

/// Writes the answer `decision` describes; whether the connection stays open.
async fn perform(stream: &mut TcpStream, decision: Decision, head_only: bool) -> io::Result<bool> {
    let Decision {
        fault,
        chunk,
        keep_alive,
        body,
        content_type,
        headers,
        status,
        ..
    } = decision;
    let length = chunk.is_none().then(|| body.len());
    let head = head(status, length, keep_alive, &headers, content_type);
    let body = if head_only {
        Body::Bytes(Bytes::new())
    } else {
        body
    };
    match fault {
        None => {
            send(stream, head, &body, chunk, true).await?;
            Ok(keep_alive)
        }
        Some(Fault::Reset) => {
            stream.set_zero_linger()?;
            Ok(false)
        }
        Some(Fault::After(after, then)) => {
            let sent = body.slice(0, after.min(body.len()));
            send(stream, head, &sent, chunk, false).await?;
            match then {
                Then::Reset => {
                    stream.flush().await?;
                    // A moment for the loopback to carry what was sent before the reset.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    stream.set_zero_linger()?;
                }
                Then::Close => stream.shutdown().await?,
                Then::Stall(stall) => {
                    // Ends early when the client sends anything, closes or leaves.
                    let mut chunk = [0u8; 1];
                    let _ = tokio::time::timeout(stall, stream.read(&mut chunk)).await;
                }
            }
            Ok(false)
        }
    }
}

/// Counts a connection open for as long as it lives.
struct Open<'a>(&'a Grammar);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        lock(&self.0.inner).open -= 1;
    }
}

/// Serves one connection of the controlled routes.
pub(super) async fn serve(mut stream: TcpStream, state: &State, grammar: &Grammar) {
    let connection = {
        let mut inner = lock(&grammar.inner);
        let id = inner.opened;
        inner.opened += 1;
        inner.open += 1;
        inner.max_open = inner.max_open.max(inner.open);
        id
    };
    let _open = Open(grammar);
    let mut buf = Vec::new();
    loop {
        match read_request(&mut stream, &mut buf, grammar.idle_timeout).await {
            Ok(Read::Request(req)) => {
                state
                    .requests
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                match grammar
                    .exchange(state, &mut stream, &mut buf, req, connection)
                    .await
                {
                    Ok(true) => {}
                    Ok(false) | Err(_) => return,
                }
            }
            Ok(Read::Bad(status, text)) => {
                let _ = stream.write_all(&simple(status, text, false)).await;
                return;
            }
            Ok(Read::Closed) | Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_share_prefixes_and_differ_by_seed_and_block() {
        let long = expected_body(3 * BLOCK_SIZE + 17, 5);
        for n in [0, 1, 100, BLOCK_SIZE, BLOCK_SIZE + 1] {
            assert_eq!(expected_body(n, 5), long[..n]);
        }
        assert_ne!(expected_body(4096, 1), expected_body(4096, 2));
        assert_ne!(long[..BLOCK_SIZE], long[BLOCK_SIZE..2 * BLOCK_SIZE]);
        assert_eq!(expected_body(10, -3), expected_body(10, (1 << 64) - 3));
        // The values Python's `expected_body` gives (tests/servers/http.py).
        assert_eq!(mix(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(expected_body(4, 0), [0xa9, 0xa2, 0xb1, 0x27]);
    }

    #[test]
    fn parameters_are_checked() {
        let params: Params = [("a", "x"), ("b", "-1"), ("c", "1.5"), ("d", "inf")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into();
        assert_eq!(
            int_param(&params, "a"),
            Err("a must be an integer, got 'x'".into())
        );
        assert_eq!(int_param(&params, "b"), Ok(Some(-1)));
        assert_eq!(int_param(&params, "z"), Ok(None));
        let zero = Duration::ZERO;
        assert_eq!(
            seconds_param(&params, "c", zero),
            Ok(Duration::from_millis(1500))
        );
        assert!(
            seconds_param(&params, "b", zero)
                .unwrap_err()
                .contains(">= 0")
        );
        assert!(seconds_param(&params, "d", zero).is_err());
        assert!(seconds_param(&params, "a", zero).is_err());
    }

    /// Sends `request` to `addr` and reads the whole answer as text.
    fn ask(addr: &str, request: &str) -> String {
        String::from_utf8_lossy(&crate::test_server::exchange(addr, request)).into_owned()
    }

    fn control(
        server: &super::super::LoopbackServer,
        method: &str,
        target: &str,
        body: &str,
    ) -> String {
        let url = server.control_url().unwrap();
        let addr = url.strip_prefix("http://").unwrap();
        let request = format!(
            "{method} {target} HTTP/1.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        ask(addr, &request)
    }

    #[test]
    fn the_grammar_scripts_and_records() {
        let server = super::super::LoopbackServer::controlled(None).unwrap();
        let addr = server.addr().to_string();
        let get = |target: &str| {
            ask(
                &addr,
                &format!("GET {target} HTTP/1.1\r\nConnection: close\r\n\r\n"),
            )
        };
        assert!(get("/bytes/10?delay=x").contains("\r\n\r\ndelay must be a number, got 'x'\n"));
        assert!(get("/item/1?fault=explode").starts_with("HTTP/1.1 400 "));
        // A delay too long for the clock waits for ever, as a client that leaves finds.
        let stalled = std::net::TcpStream::connect(&*addr).unwrap();
        let mut writer = &stalled;
        std::io::Write::write_all(&mut writer, b"GET /item/1?delay=1e19 HTTP/1.1\r\n\r\n").unwrap();
        drop(stalled);
        let gone = (0..500).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            control(&server, "GET", "/requests", "").contains(r#""outcome":"client-gone""#)
        });
        assert!(gone);
        let answer = get("/item/2?status=503&retry_after=1");
        assert!(answer.starts_with("HTTP/1.1 503 ") && answer.contains("Retry-After: 1\r\n"));
        assert!(get("/bytes/abc").starts_with("HTTP/1.1 404 "));
        let ok = control(
            &server,
            "POST",
            "/script?path=/item/3",
            r#"[{"status": 429}, {}]"#,
        );
        assert!(ok.starts_with("HTTP/1.1 200 "), "{ok}");
        assert!(get("/item/3").starts_with("HTTP/1.1 429 "));
        assert!(get("/item/3").ends_with("\r\n\r\nitem-3"));
        let ok = control(&server, "PUT", "/file?path=/f&etag=e1", "hello");
        assert!(ok.starts_with("HTTP/1.1 200 "), "{ok}");
        let range = ask(
            &addr,
            "GET /f HTTP/1.1\r\nRange: bytes=1-2\r\nConnection: close\r\n\r\n",
        );
        assert!(
            range.starts_with("HTTP/1.1 206 ") && range.ends_with("el"),
            "{range}"
        );
        let refused = ask(
            &addr,
            "GET /f HTTP/1.1\r\nIf-Match: e2\r\nConnection: close\r\n\r\n",
        );
        assert!(refused.starts_with("HTTP/1.1 412 "), "{refused}");
        let chunked = get("/bytes/5?chunked=1&chunk=2");
        let data = expected_body(5, 0);
        let mut want = Vec::new();
        for part in data.chunks(2) {
            want.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
            want.extend_from_slice(part);
            want.extend_from_slice(b"\r\n");
        }
        want.extend_from_slice(b"0\r\n\r\n");
        let raw = crate::test_server::exchange(
            &*addr,
            "GET /bytes/5?chunked=1&chunk=2 HTTP/1.1\r\nConnection: close\r\n\r\n",
        );
        assert!(raw.ends_with(&want), "{chunked}");
        let records = control(&server, "GET", "/requests", "");
        assert!(records.contains(r#""outcome":"status:429""#), "{records}");
        assert!(records.contains(r#""outcome":"status:400""#), "{records}");
        let reset = control(&server, "POST", "/reset", "");
        assert!(reset.starts_with("HTTP/1.1 200 "), "{reset}");
        assert!(control(&server, "GET", "/requests", "").ends_with("\r\n\r\n[]"));
    }

    #[test]
    fn bad_control_requests_get_400_or_404() {
        let server = super::super::LoopbackServer::controlled(None).unwrap();
        for (method, target, body, status) in [
            ("POST", "/script?path=/a", "nope", 400),
            ("POST", "/script?path=/a", "{}", 400),
            ("POST", "/script?path=/a", "[1]", 400),
            ("POST", "/script?path=/a", r#"[{"a": [1]}]"#, 400),
            ("POST", "/script", "[]", 400),
            ("PUT", "/defaults", "[]", 400),
            ("PUT", "/defaults", "\u{ff}", 400),
            ("DELETE", "/file", "", 400),
            ("GET", "/nothing", "", 404),
        ] {
            let answer = control(&server, method, target, body);
            assert!(
                answer.starts_with(&format!("HTTP/1.1 {status} ")),
                "{method} {target} {body}: {answer}"
            );
        }
        let ok = control(
            &server,
            "PUT",
            "/defaults",
            r#"{"delay": 0, "status": "503"}"#,
        );
        assert!(ok.starts_with("HTTP/1.1 200 "), "{ok}");
        let addr = server.addr().to_string();
        let answer = ask(&addr, "GET /item/1 HTTP/1.1\r\nConnection: close\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
        // A request line this server cannot read: a 400, then the connection closes.
        assert!(ask(&addr, "NONSENSE\r\n\r\n").starts_with("HTTP/1.1 400 "));
    }
}
