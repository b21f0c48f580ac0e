//! `dlrs serve --dir` in a process of its own, spoken to in raw HTTP: bodies streamed from
//! files of any size, only regular files inside the directory, percent-decoded names, ranges
//! as RFC 9110 says, and no request that holds up the others.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::temp_dir;

/// A guard against a hang: no answer in this time fails the test.
const HANG: Duration = Duration::from_secs(20);

/// `dlrs serve --dir DIR` on a free port; killed when dropped.
struct Served {
    child: Child,
    addr: String,
}

impl Served {
    fn start(dir: &Path) -> Served {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dlrs"))
            .arg("serve")
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line.trim_end().strip_prefix("http://").unwrap().to_owned();
        Served { child, addr }
    }

    /// A new connection whose reads give up after [`HANG`].
    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(HANG)).unwrap();
        s
    }

    /// `method path` with these extra header lines, on a new connection closed after it: the
    /// status line, the headers (lower-case names) and the body.
    fn ask(&self, method: &str, path: &str, extra: &str) -> Answer {
        let mut s = self.connect();
        let request =
            format!("{method} {path} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n");
        s.write_all(request.as_bytes()).unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out)
            .unwrap_or_else(|e| panic!("{method} {path}: no answer: {e}"));
        Answer::parse(&out)
    }

    /// Ends the server's input, checks that it stops cleanly, and removes the test's `dir`.
    fn finish(mut self, dir: &Path) {
        drop(self.child.stdin.take());
        assert!(self.child.wait().unwrap().success());
        std::fs::remove_dir_all(dir).unwrap();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// An answer: its status line, headers (lower-case names) and the body read.
#[derive(Debug)]
struct Answer {
    status: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

impl Answer {
    fn parse(out: &[u8]) -> Answer {
        let end = out
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(out)))
            + 4;
        let head = String::from_utf8(out[..end].to_vec()).unwrap();
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap().to_owned();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Answer {
            status,
            headers,
            body: out[end..].to_vec(),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// A sparse file of 1 TiB whose first bytes are `head` and last bytes `tail` (two blocks on
/// disk).
fn sparse_tib(path: &Path) {
    use std::io::{Seek, SeekFrom};
    let mut f = std::fs::File::create(path).unwrap();
    f.set_len(1 << 40).unwrap();
    f.write_all(b"head").unwrap();
    f.seek(SeekFrom::Start((1 << 40) - 4)).unwrap();
    f.write_all(b"tail").unwrap();
}

#[test]
fn serve_streams_a_sparse_tib_file() {
    let dir = temp_dir("serve-sparse");
    sparse_tib(&dir.join("big.bin"));
    let server = Served::start(&dir);
    let tail = server.ask("GET", "/big.bin", "Range: bytes=1099511627772-\r\n");
    assert_eq!(tail.status, "HTTP/1.1 206 Partial Content");
    assert_eq!(
        tail.header("content-range"),
        Some("bytes 1099511627772-1099511627775/1099511627776")
    );
    assert_eq!(tail.body, b"tail");
    let head = server.ask("HEAD", "/big.bin", "");
    assert_eq!(head.status, "HTTP/1.1 200 OK");
    assert_eq!(head.header("content-length"), Some("1099511627776"));
    assert_eq!(head.body, b"");
    // A GET of all of it: read its head and first bytes, then hang up.
    let mut s = server.connect();
    s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    let has_six_bytes = |got: &[u8]| {
        got.windows(4)
            .position(|w| w == b"\r\n\r\n")
            .is_some_and(|end| got.len() >= end + 4 + 6)
    };
    while !has_six_bytes(&got) {
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "closed early: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&chunk[..n]);
    }
    let whole = Answer::parse(&got);
    assert_eq!(whole.status, "HTTP/1.1 200 OK");
    assert_eq!(whole.header("content-length"), Some("1099511627776"));
    assert!(
        whole.body.starts_with(b"head\0\0"),
        "{:?}",
        &whole.body[..8]
    );
    drop(s);
    // The server is still there.
    let first = server.ask("GET", "/big.bin", "Range: bytes=0-3\r\n");
    assert_eq!(
        first.header("content-range"),
        Some("bytes 0-3/1099511627776")
    );
    assert_eq!(first.body, b"head");
    server.finish(&dir);
}

#[cfg(unix)]
#[test]
fn serve_answers_others_while_a_fifo_or_a_slow_client_is_pending() {
    let dir = temp_dir("serve-fifo");
    let made = Command::new("mkfifo")
        .arg(dir.join("pipe"))
        .status()
        .unwrap();
    assert!(made.success());
    std::fs::write(dir.join("f.txt"), b"file").unwrap();
    let big = std::fs::File::create(dir.join("big.bin")).unwrap();
    big.set_len(1 << 30).unwrap();
    let server = Served::start(&dir);
    // A GET of the FIFO (nobody writes to it), a client that never ends its request's head,
    // and one that reads nothing of a long body.
    let mut fifo = server.connect();
    fifo.write_all(b"GET /pipe HTTP/1.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut unfinished = server.connect();
    unfinished.write_all(b"GET /f.txt HTTP/1.1\r\n").unwrap();
    let mut not_reading = server.connect();
    not_reading
        .write_all(b"GET /big.bin HTTP/1.1\r\n\r\n")
        .unwrap();
    // Another client is answered all the same.
    let other = server.ask("GET", "/f.txt", "");
    assert_eq!(other.status, "HTTP/1.1 200 OK");
    assert_eq!(other.body, b"file");
    assert_eq!(server.ask("GET", "/item/4", "").body, b"item-4");
    // The FIFO is refused, not waited on.
    let mut out = Vec::new();
    fifo.read_to_end(&mut out).unwrap();
    let refused = Answer::parse(&out);
    assert_eq!(refused.status, "HTTP/1.1 403 Forbidden");
    assert_eq!(
        refused.body,
        b"not a regular file inside the served directory"
    );
    // A directory is not a file either.
    std::fs::create_dir(dir.join("sub")).unwrap();
    assert_eq!(
        server.ask("GET", "/sub", "").status,
        "HTTP/1.1 403 Forbidden"
    );
    drop((fifo, unfinished, not_reading));
    server.finish(&dir);
}

#[cfg(unix)]
#[test]
fn serve_gives_nothing_outside_its_directory() {
    use std::os::unix::fs::symlink;
    let base = temp_dir("serve-links");
    let served = base.join("served");
    std::fs::create_dir(&served).unwrap();
    std::fs::write(base.join("secret.txt"), b"secret").unwrap();
    std::fs::write(served.join("inside.txt"), b"inside").unwrap();
    symlink(base.join("secret.txt"), served.join("out.txt")).unwrap();
    symlink("../secret.txt", served.join("relative.txt")).unwrap();
    symlink(&base, served.join("up")).unwrap();
    symlink("/dev/zero", served.join("zero")).unwrap();
    symlink("missing", served.join("dangling")).unwrap();
    symlink("inside.txt", served.join("alias.txt")).unwrap();
    let server = Served::start(&served);
    let refused: &[u8] = b"not a regular file inside the served directory";
    for (paths, status, body) in [
        (
            [
                "/out.txt",
                "/relative.txt",
                "/up/secret.txt",
                "/zero",
                "/dangling",
            ],
            "403 Forbidden",
            refused,
        ),
        (
            [
                "/../secret.txt",
                "/%2e%2e/secret.txt",
                "/up/..%2fsecret.txt",
                "/inside.txt/../../secret.txt",
                "//secret.txt",
            ],
            "404 Not Found",
            b"not found",
        ),
    ] {
        for path in paths {
            let answer = server.ask("GET", path, "");
            assert_eq!(answer.status, format!("HTTP/1.1 {status}"), "{path}");
            assert_eq!(answer.body, body, "{path}");
        }
    }
    // A link that stays inside is followed.
    assert_eq!(server.ask("GET", "/alias.txt", "").body, b"inside");
    server.finish(&base);
}

#[test]
fn serve_decodes_names_and_reads_ranges_as_rfc_9110_says() {
    let dir = temp_dir("serve-ranges");
    std::fs::write(dir.join("a b.txt"), b"0123456789").unwrap();
    std::fs::write(dir.join("été.txt"), b"summer").unwrap();
    let server = Served::start(&dir);
    assert_eq!(server.ask("GET", "/a%20b.txt", "").body, b"0123456789");
    let summer = server.ask("GET", "/%C3%A9t%C3%A9.txt", "");
    assert_eq!(summer.status, "HTTP/1.1 200 OK");
    assert_eq!(summer.body, b"summer");
    let whole: &[u8] = b"0123456789";
    for (range, status, content_range, body) in [
        // Several ranges, another unit, bad syntax: ignored, all of it.
        ("bytes=0-1,3-4", "200 OK", None, whole),
        ("items=0-1", "200 OK", None, whole),
        ("bytes=4-2", "200 OK", None, whole),
        ("bytes=x-3", "200 OK", None, whole),
        // A last byte past the end is clamped.
        (
            "bytes=5-100",
            "206 Partial Content",
            Some("bytes 5-9/10"),
            b"56789",
        ),
        (
            "bytes=8-99999999999999999999999",
            "206 Partial Content",
            Some("bytes 8-9/10"),
            b"89",
        ),
        (
            "bytes=2-4",
            "206 Partial Content",
            Some("bytes 2-4/10"),
            b"234",
        ),
        (
            "bytes=7-",
            "206 Partial Content",
            Some("bytes 7-9/10"),
            b"789",
        ),
        (
            "bytes=-3",
            "206 Partial Content",
            Some("bytes 7-9/10"),
            b"789",
        ),
        (
            "bytes=-30",
            "206 Partial Content",
            Some("bytes 0-9/10"),
            whole,
        ),
        // Only a first byte at or past the end is unsatisfiable.
        (
            "bytes=10-",
            "416 Range Not Satisfiable",
            Some("bytes */10"),
            b"",
        ),
        (
            "bytes=10-20",
            "416 Range Not Satisfiable",
            Some("bytes */10"),
            b"",
        ),
        (
            "bytes=99999999999999999999-",
            "416 Range Not Satisfiable",
            Some("bytes */10"),
            b"",
        ),
    ] {
        let answer = server.ask("GET", "/a%20b.txt", &format!("Range: {range}\r\n"));
        assert_eq!(answer.status, format!("HTTP/1.1 {status}"), "{range}");
        assert_eq!(answer.header("content-range"), content_range, "{range}");
        assert_eq!(answer.body, body, "{range}");
        assert_eq!(
            answer.header("content-length"),
            Some(body.len().to_string().as_str()),
            "{range}"
        );
    }
    let head = server.ask("HEAD", "/a%20b.txt", "Range: bytes=5-100\r\n");
    assert_eq!(head.status, "HTTP/1.1 206 Partial Content");
    assert_eq!(head.header("content-length"), Some("5"));
    assert_eq!(head.body, b"");
    server.finish(&dir);
}
