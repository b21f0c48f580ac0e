//! `dlrs serve`: dlrs-io's loopback HTTP server (`dlrs_io::test_server`, with its latency timed
//! to about 0.1 ms) in a process of its own, for `benches/http_loaders.py`; `dlrs bench http`
//! and the tests start the same server in-process. With `--dir`, it also serves the regular
//! files inside a directory, streamed, with ranges and ETags (`benches/tar_shards.py`). With
//! `--control`, it is the server of the Python tests (`tests/servers/http.py`).

use std::io::{BufRead, Write};
use std::time::Duration;

use anyhow::{Context, Result};

pub use dlrs_io::test_server::{LoopbackServer, bytes_body};

use crate::args::ServeArgs;
use crate::usage;

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
    if let Some(dir) = &args.dir {
        let kind = std::fs::metadata(dir).map(|m| m.is_dir());
        match kind {
            Ok(true) => {}
            Ok(false) => return Err(usage(format!("--dir {}: not a directory", dir.display()))),
            Err(e) => return Err(usage(format!("--dir {}: {e}", dir.display()))),
        }
    }
    let server = if args.control {
        LoopbackServer::controlled(args.idle_timeout)
    } else {
        LoopbackServer::serve_dir(args.port, delay, args.dir.clone())
    };
    let server = server.with_context(|| format!("cannot listen on 127.0.0.1:{}", args.port))?;
    writeln!(out, "{}", server.base_url())?;
    if let Some(control) = server.control_url() {
        writeln!(out, "{control}")?;
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{self, Read};
    use std::net::SocketAddr;

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
                dir: None,
                control: false,
                idle_timeout: None,
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
    fn a_controlled_server_prints_its_control_url_too() {
        let args = ServeArgs {
            latency_ms: 0.0,
            port: 0,
            until_killed: false,
            dir: None,
            control: true,
            idle_timeout: Some(Duration::from_secs(1)),
        };
        let (mut out, mut log) = (Vec::new(), Vec::new());
        let status = run(&args, &mut out, &mut io::empty(), &mut log).unwrap();
        assert_eq!(status, 0);
        let out = String::from_utf8(out).unwrap();
        let urls: Vec<&str> = out.lines().collect();
        assert_eq!(urls.len(), 2, "{out}");
        assert!(
            urls.iter().all(|u| u.starts_with("http://127.0.0.1:")),
            "{out}"
        );
        assert_ne!(urls[0], urls[1]);
    }
}
