//! A forked child uses the parent's runtime and datasets: they are rebuilt there, not joined.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use dlrs_io::{
    Dataset, FetchOptions, FileDataset, HttpDataset, HttpOptions, ObjectStoreDataset,
    ObjectStoreOptions, Runtime,
};

/// A keep-alive HTTP server on its own OS thread that answers every GET with its path.
fn start_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).unwrap_or(0) == 0 {
                            return;
                        }
                        if header.trim_end().is_empty() {
                            break;
                        }
                    }
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{path}",
                        path.len()
                    );
                    if writer.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    base
}

fn fetch_all(runtime: &Runtime, datasets: &[&dyn Dataset]) -> Vec<Vec<u8>> {
    datasets
        .iter()
        .map(|dataset| {
            runtime
                .block_on(dataset.fetch(0))
                .unwrap()
                .unwrap()
                .to_vec()
        })
        .collect()
}

#[test]
fn a_forked_child_rebuilds_the_runtime_and_clients() {
    let base = start_server();
    let dir = std::env::temp_dir().join(format!("dlrs-io-fork-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("item"), b"file item").unwrap();

    let runtime = Runtime::new(Some(2)).unwrap();
    let http = HttpDataset::new(vec![format!("{base}/tile/0")], HttpOptions::default()).unwrap();
    let files = FileDataset::new(vec![dir.join("item")], FetchOptions::FILE).unwrap();
    let objects = ObjectStoreDataset::new(
        &format!("file://{}", dir.display()),
        vec!["item".into()],
        ObjectStoreOptions::default(),
    )
    .unwrap();
    let datasets: [&dyn Dataset; 3] = [&http, &files, &objects];
    let expected = vec![
        b"/tile/0".to_vec(),
        b"file item".to_vec(),
        b"file item".to_vec(),
    ];
    // The parent's runtime threads and a pooled keep-alive connection now exist.
    assert_eq!(fetch_all(&runtime, &datasets), expected);

    // SAFETY: the child only runs this crate's code (which rebuilds what it inherited) and
    // leaves with `_exit`, without running destructors or atexit handlers of the parent's state.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            fetch_all(&runtime, &datasets) == expected
        }))
        .unwrap_or(false);
        // SAFETY: `_exit` ends the child at once; nothing of the parent's may be torn down here.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut status = 0;
    loop {
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        assert!(done >= 0, "waitpid failed");
        if done == pid {
            break;
        }
        if Instant::now() > deadline {
            // SAFETY: killing and reaping our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!("the forked child hung");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(libc::WIFEXITED(status), "child status {status}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "the child's fetches failed");

    // The parent's runtime and clients are untouched.
    assert_eq!(fetch_all(&runtime, &datasets), expected);
    std::fs::remove_dir_all(&dir).unwrap();
}
