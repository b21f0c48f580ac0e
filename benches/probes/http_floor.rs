//! The floor of the HTTP benchmark on this machine: the fastest a client can fetch N items of
//! `dlrs serve --latency-ms 10` with 64 requests in flight, with no HTTP library, no runtime,
//! no Python and no loader. What a loader loses beyond this is its own; what this loses to the
//! latency bound (N / 64 × latency) is the machine's.
//!
//! Build and run (std only, no crates):
//!
//!     rustc -O --edition 2021 benches/probes/http_floor.rs -o /tmp/http_floor
//!     dlrs serve --latency-ms 10 &        # prints its base URL, e.g. http://127.0.0.1:PORT
//!     /tmp/http_floor 127.0.0.1:PORT [items=2048] [size=65536] [epochs=5]
//!
//! Three shapes, each on 64 keep-alive connections opened once the clock runs (the benchmark
//! makes a fresh loader per epoch):
//! - `waves T×C`: T threads, each taking every T-th batch of 64 and fetching it in waves of C
//!   blocking requests (send C, then read C): what a loader with T workers and C items in flight
//!   per worker does when it fetches one batch at a time.
//! - `batches T×C`: the same threads, each keeping C requests of its current batch in flight (a
//!   new one of the batch as soon as an answer is read), and starting its next batch once the
//!   last answer of this one is read: a loader's contract (T batches in flight, C items of each)
//!   with nothing of a loader's own work.
//! - `window T×C`: the same threads, each keeping C requests in flight all the time (a new one
//!   as soon as an answer is read), batches ignored: no client with C × T in flight can do better.
//!
//! Per shape: the median epoch, its ratio to the latency bound, and the time to the first 64
//! items of the epoch (the first batch).
//!
//! `COPIES=n` in the environment copies each body n times more in the sliding shapes, each copy
//! into new memory kept until its batch is done (the epoch, in the window shape), as a loader that gathers a body and then makes
//! a Python `bytes` of it does: what those copies cost on this machine, without the rest of a
//! loader.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const BATCH: usize = 64;

struct Conn {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    body: Vec<u8>,
}

impl Conn {
    fn open(addr: &str) -> Conn {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_nodelay(true).unwrap();
        Conn {
            writer: s.try_clone().unwrap(),
            reader: BufReader::with_capacity(1 << 16, s),
            body: Vec::new(),
        }
    }

    fn send(&mut self, size: usize, i: usize) {
        let req = format!("GET /bytes/{size}?i={i} HTTP/1.1\r\nHost: probe\r\n\r\n");
        self.writer.write_all(req.as_bytes()).expect("send");
    }

    /// Reads one response; returns its body's length.
    fn read(&mut self) -> usize {
        let mut len = None;
        let mut line = String::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line).expect("read header");
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = Some(v.trim().parse::<usize>().expect("content-length"));
                }
            }
        }
        let len = len.expect("a content-length");
        self.body.resize(len, 0);
        self.reader.read_exact(&mut self.body).expect("body");
        len
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Waves,
    Batches,
    Window,
}

/// Fetches `items` keeping up to one request in flight per connection, a new one on a connection
/// as soon as its answer is read; counts the answers in `done` and calls `each` after each.
fn sliding(cs: &mut [Conn], size: usize, items: &[usize], copies: usize, mut each: impl FnMut()) {
    let mut pending = VecDeque::new();
    let mut kept: Vec<Vec<u8>> = Vec::new();
    let mut next = 0;
    for (k, c) in cs.iter_mut().enumerate().take(items.len()) {
        c.send(size, items[next]);
        next += 1;
        pending.push_back(k);
    }
    while let Some(k) = pending.pop_front() {
        assert_eq!(cs[k].read(), size);
        kept.extend((0..copies).map(|_| cs[k].body.clone()));
        each();
        if next < items.len() {
            cs[k].send(size, items[next]);
            next += 1;
            pending.push_back(k);
        }
    }
}

/// One epoch of `items` by `threads` threads of `conns` connections each; returns (epoch,
/// first batch) in seconds.
fn epoch(addr: &str, items: usize, size: usize, threads: usize, conns: usize, shape: Shape) -> (f64, f64) {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let addr = addr.to_owned();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let start = Instant::now();
                // Connecting is inside the clock: the benchmark makes a fresh loader per epoch.
                let mut cs: Vec<Conn> = (0..conns).map(|_| Conn::open(&addr)).collect();
                let mut first = None;
                // The items of this thread's batches, in order.
                let mine: Vec<usize> = (0..items)
                    .filter(|i| (i / BATCH) % threads == t)
                    .collect();
                let mut done = 0;
                let mut count = |first: &mut Option<Duration>| {
                    done += 1;
                    if done == BATCH.min(mine.len()) && first.is_none() {
                        *first = Some(start.elapsed());
                    }
                };
                let copies = std::env::var("COPIES").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
                if shape == Shape::Window {
                    sliding(&mut cs, size, &mine, copies, || count(&mut first));
                } else if shape == Shape::Batches {
                    for batch in mine.chunks(BATCH) {
                        sliding(&mut cs, size, batch, copies, || count(&mut first));
                    }
                } else {
                    for (n, wave) in mine.chunks(conns).enumerate() {
                        for (c, &i) in cs.iter_mut().zip(wave) {
                            c.send(size, i);
                        }
                        for c in cs.iter_mut().take(wave.len()) {
                            assert_eq!(c.read(), size);
                        }
                        if first.is_none() && (n + 1) * conns >= BATCH.min(mine.len()) {
                            first = Some(start.elapsed());
                        }
                    }
                }
                first.unwrap_or_default()
            })
        })
        .collect();
    barrier.wait();
    let started = Instant::now();
    let mut first = Duration::MAX;
    for h in handles {
        let f = h.join().expect("thread");
        first = first.min(f);
    }
    (started.elapsed().as_secs_f64(), first.as_secs_f64())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let addr = args.get(1).expect("usage: http_floor HOST:PORT [items] [size] [epochs]");
    let addr = addr.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let items: usize = args.get(2).map_or(2048, |a| a.parse().unwrap());
    let size: usize = args.get(3).map_or(65536, |a| a.parse().unwrap());
    let epochs: usize = args.get(4).map_or(5, |a| a.parse().unwrap());
    let latency = 0.010;
    let bound = items as f64 / 64.0 * latency;
    println!("items {items} x {size} B, bound {bound:.3} s (64 in flight, 10 ms each)");
    for (name, threads, conns, shape) in [
        ("waves 2x32", 2, 32, Shape::Waves),
        ("waves 1x64", 1, 64, Shape::Waves),
        ("batches 2x32", 2, 32, Shape::Batches),
        ("batches 1x64", 1, 64, Shape::Batches),
        ("batches 4x16", 4, 16, Shape::Batches),
        ("window 2x32", 2, 32, Shape::Window),
        ("window 1x64", 1, 64, Shape::Window),
    ] {
        // One warm-up epoch, then the measured ones.
        epoch(&addr, items, size, threads, conns, shape);
        let runs: Vec<(f64, f64)> = (0..epochs)
            .map(|_| epoch(&addr, items, size, threads, conns, shape))
            .collect();
        let e = median(runs.iter().map(|r| r.0).collect());
        let f = median(runs.iter().map(|r| r.1).collect());
        println!(
            "{name:12} epoch {e:.3} s = {:.2}x bound, first batch {:.1} ms",
            e / bound,
            f * 1000.0
        );
    }
}
