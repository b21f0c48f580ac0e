//! A loopback HTTP/1.1 server with a fixed latency, for `dlrs bench http`, `dlrs serve` (the
//! server of `benches/http_loaders.py`) and the tests.
//!
//! It listens on `127.0.0.1` (at a free port unless one is asked for), on a thread of its own
//! with a single-threaded tokio runtime (so it stands apart from the runtime of the datasets it
//! serves), keeps connections open, and answers GET requests (the query is ignored):
//!
//! | path | answer |
//! |---|---|
//! | `/bytes/<n>` | `n` bytes, [`bytes_body`]`(n)` |
//! | `/item/<i>` | `item-<i>` |
//! | `/status/<code>` | that status, body `status <code>` |
//! | `/flaky/<k>/<rest>` | 503 for the first `k` requests of this exact path, then `/<rest>` |
//! | other | 404 |
//!
//! Every answer waits for the latency first, counted from the end of the request's head. The
//! wait is timed by a thread of the server's own (`TimerQueue::run`: never early, about 0.1 ms
//! late here), not by tokio's timer, which rounds every deadline up to the next millisecond and
//! would answer a 10 ms latency after 10–11 ms. Bodies of `/bytes/<n>` are made once (a prefix of
//! the longest one made so far) and written without a copy. Dropping the server stops it and
//! joins its threads.

use std::cmp::Ordering as Order;
use std::collections::{BinaryHeap, HashMap};
use std::io::{self, BufRead, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::{Buf, Bytes};
use futures::future::{Either, select};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use dlrs_core::sync::lock;

use crate::args::ServeArgs;

/// The longest request head read.
const MAX_HEAD: usize = 64 << 10;

/// The largest `/bytes/<n>` answered.
const MAX_BODY: usize = 256 << 20;

/// The body of `/bytes/<n>`: byte `j` is `(j × 31 + 7) mod 256`.
pub fn bytes_body(n: usize) -> Vec<u8> {
    (0..n)
        .map(|j| (j.wrapping_mul(31).wrapping_add(7)) as u8)
        .collect()
}

#[derive(Debug, Default)]
struct State {
    delay: Duration,
    connections: AtomicU64,
    requests: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    flaky: Mutex<HashMap<String, u32>>,
    /// The longest `/bytes/<n>` body made so far; shorter ones are its prefixes.
    bodies: Mutex<Bytes>,
    timer: Arc<TimerQueue>,
}

impl State {
    /// [`bytes_body`]`(n)`, shared.
    fn body(&self, n: usize) -> Bytes {
        let mut longest = lock(&self.bodies);
        if longest.len() < n {
            *longest = Bytes::from(bytes_body(n));
        }
        longest.slice(..n)
    }
}

/// A running loopback server; dropping it stops it.
#[derive(Debug)]
pub struct LoopbackServer {
    addr: SocketAddr,
    state: Arc<State>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    // Dropped after the server's thread has been joined (no task waits on it any more).
    _timer: Timer,
}

impl LoopbackServer {
    /// Starts a server on a free port that answers every request after `delay`.
    pub fn start(delay: Duration) -> io::Result<LoopbackServer> {
        LoopbackServer::start_on(0, delay)
    }

    /// Starts a server on `127.0.0.1:port` (0: a free port) that answers every request after
    /// `delay`.
    pub fn start_on(port: u16, delay: Duration) -> io::Result<LoopbackServer> {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let timer = Timer::start()?;
        let state = Arc::new(State {
            delay,
            timer: Arc::clone(&timer.queue),
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
                                shared.connections.fetch_add(1, Ordering::Relaxed);
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
            _timer: timer,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
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

/// `dlrs serve`: starts a server, writes its base URL and a newline to `out`, serves until
/// `stop` reaches its end (or forever with `--until-killed`), then writes what it served to
/// `log`.
pub fn run(
    args: &ServeArgs,
    out: &mut dyn Write,
    stop: &mut dyn BufRead,
    log: &mut dyn Write,
) -> Result<u8> {
    let delay = Duration::from_secs_f64(args.latency_ms / 1e3);
    let server = LoopbackServer::start_on(args.port, delay)
        .with_context(|| format!("cannot listen on 127.0.0.1:{}", args.port))?;
    writeln!(out, "{}", server.base_url())?;
    out.flush()?;
    if args.until_killed {
        loop {
            std::thread::park();
        }
    }
    // Whatever comes in is ignored: only the end of the input (or an error reading it) stops.
    loop {
        match stop.fill_buf() {
            Ok([]) | Err(_) => break,
            Ok(buf) => {
                let n = buf.len();
                stop.consume(n);
            }
        }
    }
    let (requests, connections) = (server.requests(), server.connections());
    let most = server.max_in_flight();
    drop(server);
    writeln!(
        log,
        "dlrs serve: {requests} requests on {connections} connections, at most {most} at once"
    )?;
    Ok(0)
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
        let target = head.split_whitespace().nth(1).unwrap_or("/");
        let path = target.split(['?', '#']).next().unwrap_or("/").to_owned();
        let close = head
            .lines()
            .any(|l| l.to_ascii_lowercase().replace(' ', "") == "connection:close");

        state.requests.fetch_add(1, Ordering::Relaxed);
        let now = state.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        state.max_in_flight.fetch_max(now, Ordering::Relaxed);
        if !state.delay.is_zero() {
            state.timer.sleep_until(due).await;
        }
        let (status, body) = route(&path, &state);
        state.in_flight.fetch_sub(1, Ordering::Relaxed);

        let head = format!(
            "HTTP/1.1 {status} {}\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n{}\r\n",
            reason(status),
            body.len(),
            if close { "Connection: close\r\n" } else { "" }
        );
        // Head and body in one vectored write, the body not copied.
        let mut answer = Bytes::from(head.into_bytes()).chain(body);
        stream.write_all_buf(&mut answer).await?;
        if close {
            return Ok(());
        }
    }
}

fn route(path: &str, state: &State) -> (u16, Bytes) {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["bytes", n] => match n.parse::<usize>() {
            Ok(n) if n <= MAX_BODY => (200, state.body(n)),
            _ => (400, Bytes::from_static(b"bad size")),
        },
        ["item", i] => (200, Bytes::from(format!("item-{i}"))),
        ["status", code] => match code.parse::<u16>() {
            Ok(code) if (200..600).contains(&code) => (code, Bytes::from(format!("status {code}"))),
            _ => (400, Bytes::from_static(b"bad status")),
        },
        ["flaky", k, rest @ ..] if !rest.is_empty() => {
            let Ok(k) = k.parse::<u32>() else {
                return (400, Bytes::from_static(b"bad count"));
            };
            let seen = {
                let mut flaky = lock(&state.flaky);
                let seen = flaky.entry(path.to_owned()).or_insert(0);
                *seen += 1;
                *seen
            };
            if seen <= k {
                (503, Bytes::from_static(b"status 503"))
            } else {
                route(&format!("/{}", rest.join("/")), state)
            }
        }
        _ => (404, Bytes::from_static(b"not found")),
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

/// A wake-up due at an instant (the heap's order is reversed: the earliest first).
#[derive(Debug)]
struct Due {
    at: Instant,
    seq: u64,
    wake: oneshot::Sender<()>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Due) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Due) -> Option<Order> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Due) -> Order {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Debug, Default)]
struct Pending {
    heap: BinaryHeap<Due>,
    seq: u64,
    stopped: bool,
}

/// The wake-ups a [`Timer`]'s thread sends, earliest first.
#[derive(Debug, Default)]
struct TimerQueue {
    pending: Mutex<Pending>,
    changed: Condvar,
}

impl TimerQueue {
    /// Waits until `at` (at once if it has passed, forever if the timer has stopped).
    async fn sleep_until(&self, at: Instant) {
        if at <= Instant::now() {
            return;
        }
        let (wake, woken) = oneshot::channel();
        {
            let mut pending = lock(&self.pending);
            pending.seq += 1;
            let seq = pending.seq;
            let earliest = pending.heap.peek().is_none_or(|first| at < first.at);
            pending.heap.push(Due { at, seq, wake });
            if earliest {
                self.changed.notify_one();
            }
        }
        if woken.await.is_err() {
            // The timer stopped: the server is stopping too.
            std::future::pending::<()>().await;
        }
    }

    /// The timer thread: sends every wake-up when it is due, never before.
    ///
    /// A timed wait ends 100–200 µs late on a virtual machine (timer slack, the host's timers),
    /// so the thread asks to wake that much earlier, as learned from its last waits, and gives
    /// the processor away (yields) for what remains.
    fn run(&self) {
        let mut late = Duration::ZERO;
        let mut pending = lock(&self.pending);
        loop {
            if pending.stopped {
                return;
            }
            let now = Instant::now();
            while pending.heap.peek().is_some_and(|first| first.at <= now) {
                if let Some(due) = pending.heap.pop() {
                    let _ = due.wake.send(());
                }
            }
            let Some(at) = pending.heap.peek().map(|first| first.at) else {
                pending = self
                    .changed
                    .wait(pending)
                    .unwrap_or_else(|e| e.into_inner());
                continue;
            };
            if at - now > late {
                let target = at - late;
                pending = self
                    .changed
                    .wait_timeout(pending, target - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                let woke = Instant::now();
                // Woken by the timeout (not by a new earlier entry): learn how late it was.
                if woke >= target {
                    let over = (woke - target).min(MAX_LATE);
                    late = (late * 7 + over) / 8;
                }
            } else {
                drop(pending);
                std::thread::yield_now();
                pending = lock(&self.pending);
            }
        }
    }
}

/// The most lateness of a timed wait that [`TimerQueue::run`] learns from one wait.
const MAX_LATE: Duration = Duration::from_millis(1);

/// A thread that wakes tasks at instants, with the precision of a timed wait on a condition
/// variable; dropping it stops the thread.
#[derive(Debug)]
struct Timer {
    queue: Arc<TimerQueue>,
    thread: Option<JoinHandle<()>>,
}

impl Timer {
    fn start() -> io::Result<Timer> {
        let queue = Arc::new(TimerQueue::default());
        let shared = Arc::clone(&queue);
        let thread = std::thread::Builder::new()
            .name("dlrs-loopback-timer".to_owned())
            .spawn(move || shared.run())?;
        Ok(Timer {
            queue,
            thread: Some(thread),
        })
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        lock(&self.queue.pending).stopped = true;
        self.queue.changed.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
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
        assert_eq!(server.connections(), 7);
        assert_eq!(server.max_in_flight(), 1);
    }

    #[test]
    fn bodies_are_prefixes_of_the_longest_made() {
        let server = LoopbackServer::start(Duration::ZERO).unwrap();
        assert_eq!(get(&server, "/bytes/5000").1, bytes_body(5000));
        assert_eq!(get(&server, "/bytes/17").1, bytes_body(17));
        assert_eq!(get(&server, "/bytes/0").1, b"");
        assert_eq!(get(&server, "/bytes/9000?i=3").1, bytes_body(9000));
        assert_eq!(server.state.bodies.lock().unwrap().len(), 9000);
        assert_eq!(
            get(&server, &format!("/bytes/{}", MAX_BODY + 1)).0,
            "HTTP/1.1 400 Bad Request"
        );
    }

    #[test]
    fn timer_wakes_in_order_never_early() {
        let timer = Timer::start().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let start = Instant::now();
        let woke = Arc::new(Mutex::new(Vec::new()));
        runtime.block_on(async {
            // Tasks, not one joined future: a woken task runs in the order it was woken, so the
            // order they record is the timer's, even when several are due by the time they run.
            let sleeps = [30u64, 10, 20, 0, 10].map(|ms| {
                let (queue, woke) = (Arc::clone(&timer.queue), Arc::clone(&woke));
                tokio::spawn(async move {
                    let due = start + Duration::from_millis(ms);
                    queue.sleep_until(due).await;
                    assert!(Instant::now() >= due, "woken early");
                    woke.lock().unwrap().push(ms);
                })
            });
            for sleep in sleeps {
                sleep.await.unwrap();
            }
        });
        let woke = woke.lock().unwrap().clone();
        assert_eq!(woke.len(), 5);
        assert!(woke.is_sorted(), "{woke:?}");
        drop(timer); // joins its thread
    }

    /// An input that ends when its sender is dropped.
    struct Input(std::sync::mpsc::Receiver<Vec<u8>>);

    impl Read for Input {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.0.recv() {
                Ok(data) => {
                    let n = data.len().min(buf.len());
                    buf[..n].copy_from_slice(&data[..n]);
                    Ok(n)
                }
                Err(_) => Ok(0),
            }
        }
    }

    #[test]
    fn serve_prints_its_url_and_stops_when_its_input_ends() {
        let (feed, input) = std::sync::mpsc::channel();
        let (tx, url) = std::sync::mpsc::channel();
        let serving = std::thread::spawn(move || {
            let args = ServeArgs {
                latency_ms: 1.0,
                port: 0,
                until_killed: false,
            };
            /// Hands each write on to the test.
            struct Out(std::sync::mpsc::Sender<Vec<u8>>);
            impl Write for Out {
                fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                    let _ = self.0.send(buf.to_vec());
                    Ok(buf.len())
                }
                fn flush(&mut self) -> io::Result<()> {
                    Ok(())
                }
            }
            let mut log = Vec::new();
            let mut input = io::BufReader::new(Input(input));
            let status = run(&args, &mut Out(tx), &mut input, &mut log).unwrap();
            (status, String::from_utf8(log).unwrap())
        });
        let mut line = Vec::new();
        while !line.ends_with(b"\n") {
            line.extend(url.recv().unwrap());
        }
        let line = String::from_utf8(line).unwrap();
        let addr: SocketAddr = line
            .trim_end()
            .strip_prefix("http://")
            .unwrap()
            .parse()
            .unwrap();
        assert!(addr.ip().is_loopback() && addr.port() != 0, "{line}");
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /bytes/1000?i=1 HTTP/1.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        assert!(out.ends_with(&bytes_body(1000)));
        feed.send(b"anything typed is ignored\n".to_vec()).unwrap();
        assert!(!serving.is_finished());
        drop(feed);
        let (status, log) = serving.join().unwrap();
        assert_eq!(status, 0);
        assert_eq!(
            log,
            "dlrs serve: 1 requests on 1 connections, at most 1 at once\n"
        );
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
