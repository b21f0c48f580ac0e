//! The `dlrs` command through `dlrs_cli::run`: exit codes of argument errors, help, prefetch.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use dlrs_cli::server::LoopbackServer;

mod serve_dir;

fn run(args: &[&str]) -> ExitCode {
    dlrs_cli::run(
        std::iter::once("dlrs")
            .chain(args.iter().copied())
            .map(OsString::from),
    )
}

fn temp_dir(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("dlrs-cli-it-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn bad_arguments_exit_with_2() {
    for args in [
        &[][..],
        &["nope"],
        &["prefetch"],
        &["prefetch", "http://h/{index}"],
        &[
            "prefetch",
            "http://h/{index}",
            "--out",
            "/tmp/x",
            "--concurrency",
            "0",
        ],
        &[
            "prefetch",
            "http://h/{index}",
            "--out",
            "/tmp/x",
            "-c",
            "novalues",
        ],
        &[
            "prefetch",
            "http://h/{index}",
            "--out",
            "/tmp/x",
            "--timeout=-1",
        ],
        &[
            "prefetch",
            "http://h/{index}",
            "--out",
            "/tmp/x",
            "-H",
            "noheader",
        ],
        &["bench", "nothing"],
        &["bench", "--batch-size", "0"],
        &["parity", "--unknown"],
        &["serve", "--port", "65536"],
        &["serve", "--port", "-1"],
        &["serve", "--latency-ms", "-1"],
        &["serve", "--latency-ms", "ten"],
        &["serve", "extra"],
    ] {
        assert_eq!(run(args), ExitCode::from(2), "{args:?}");
    }
}

#[test]
fn bad_templates_exit_with_2() {
    let out = temp_dir("templates");
    let out_s = out.to_str().unwrap();
    for args in [
        // no length and no columns
        &["prefetch", "http://127.0.0.1:9/{index}", "--out", out_s][..],
        // a placeholder without a column
        &[
            "prefetch",
            "http://127.0.0.1:9/{x}",
            "--length",
            "2",
            "--out",
            out_s,
        ],
        // a column the template does not use
        &[
            "prefetch",
            "http://127.0.0.1:9/{index}",
            "-c",
            "x=1",
            "--out",
            out_s,
        ],
        &[
            "prefetch",
            "ftp://h/{index}",
            "--length",
            "2",
            "--out",
            out_s,
        ],
        &["prefetch", "s3://{b}/x", "--length", "2", "--out", out_s],
        &[
            "prefetch",
            "/d/{index}",
            "--length",
            "2",
            "-H",
            "a:b",
            "--out",
            out_s,
        ],
        &["prefetch", "/d/{s}", "-c", "s=a/b", "--out", out_s],
    ] {
        assert_eq!(run(args), ExitCode::from(2), "{args:?}");
    }
    std::fs::remove_dir_all(&out).unwrap();
}

/// A range column is never made whole: lengths that differ are a usage error at once, whatever
/// the range's size (the binary, so a panic or an abort shows as its status).
#[test]
fn columns_of_different_lengths_exit_with_2_at_any_size() {
    let out = temp_dir("lengths");
    for (x, len) in [
        ("x=0..9223372036854775807", "9223372036854775807"),
        (
            "x=-9223372036854775808..9223372036854775807",
            "18446744073709551615",
        ),
        ("x=0..100000000000", "100000000000"),
        ("x=0..3", "3"),
    ] {
        let run = std::process::Command::new(env!("CARGO_BIN_EXE_dlrs"))
            .args([
                "prefetch",
                "http://127.0.0.1:9/{x}/{y}",
                "-c",
                x,
                "-c",
                "y=1,2",
            ])
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let stderr = String::from_utf8(run.stderr).unwrap();
        assert_eq!(run.status.code(), Some(2), "{x}: {stderr}");
        assert_eq!(
            stderr,
            format!("error: columns have different lengths: 'x' has {len} values, 'y' has 2\n"),
            "{x}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&out).unwrap().count(),
        0,
        "nothing written"
    );
    std::fs::remove_dir_all(&out).unwrap();
}

/// A range column of 10^11 values: nothing is made per item before the fetches start, so the
/// first items are written while the last ones are not even named (the run is then killed).
#[test]
fn prefetch_of_a_huge_range_starts_at_once() {
    let server = LoopbackServer::start(Duration::ZERO).unwrap();
    let out = temp_dir("huge");
    let template = format!("{}/item/{{x}}", server.base_url());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dlrs"))
        .args([
            "prefetch",
            &template,
            "-c",
            "x=7..100000000007",
            "--concurrency",
            "2",
        ])
        .arg("--out")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The first item's file (named by its index, padded to 11 digits); a hang guard only.
    let first = out.join("00000000000");
    let guard = std::time::Instant::now() + Duration::from_secs(20);
    while !first.exists() && std::time::Instant::now() < guard {
        assert_eq!(child.try_wait().unwrap(), None, "the run ended");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(std::fs::read(&first).unwrap(), b"item-7");
    assert!(server.requests() >= 1);
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn serve_of_a_dir_that_is_not_one_exits_with_2() {
    let dir = temp_dir("serve-not-a-dir");
    std::fs::write(dir.join("file"), b"x").unwrap();
    for (given, why) in [
        (
            dir.join("missing"),
            "No such file or directory (os error 2)",
        ),
        (dir.join("file"), "not a directory"),
    ] {
        let run = std::process::Command::new(env!("CARGO_BIN_EXE_dlrs"))
            .arg("serve")
            .arg("--dir")
            .arg(&given)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(run.status.code(), Some(2), "{given:?}");
        assert_eq!(
            String::from_utf8(run.stderr).unwrap(),
            format!("error: --dir {}: {why}\n", given.display())
        );
        assert!(run.stdout.is_empty(), "no URL printed");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn help_and_version_exit_with_0() {
    assert_eq!(run(&["--help"]), ExitCode::SUCCESS);
    assert_eq!(run(&["prefetch", "--help"]), ExitCode::SUCCESS);
    assert_eq!(run(&["serve", "--help"]), ExitCode::SUCCESS);
    assert_eq!(run(&["--version"]), ExitCode::SUCCESS);
}

/// The binary's `--version`: the Python package's version (pyproject.toml), and no interpreter.
#[test]
fn version_is_the_packages_and_names_no_python() {
    let pyproject = include_str!("../../../../pyproject.toml");
    let package = pyproject
        .lines()
        .find_map(|l| l.strip_prefix("version = \"")?.strip_suffix('"'))
        .expect("pyproject.toml has a version");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dlrs"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("dlrs {package} (Rust binary, without Python)\n")
    );
}

#[test]
fn prefetch_exit_codes_and_resume() {
    let server = LoopbackServer::start(Duration::from_millis(1)).unwrap();
    let out = temp_dir("prefetch");
    let out_s = out.to_str().unwrap();
    let good = format!("{}/item/{{index}}", server.base_url());
    assert_eq!(
        run(&["prefetch", &good, "--length", "5", "--out", out_s]),
        ExitCode::SUCCESS
    );
    assert_eq!(std::fs::read(out.join("4")).unwrap(), b"item-4");
    assert_eq!(server.requests(), 5);
    // One missing file and a leftover part: only that one is fetched again.
    std::fs::remove_file(out.join("2")).unwrap();
    std::fs::write(out.join("2.part"), b"it").unwrap();
    assert_eq!(
        run(&["prefetch", &good, "--length", "5", "--out", out_s]),
        ExitCode::SUCCESS
    );
    assert_eq!(server.requests(), 6);
    assert_eq!(std::fs::read(out.join("2")).unwrap(), b"item-2");
    let bad = format!("{}/status/{{code}}", server.base_url());
    let failed = out.join("failed");
    let failed = failed.to_str().unwrap();
    let args = [
        "prefetch",
        &bad,
        "-c",
        "code=200,503",
        "--retries",
        "0",
        "--out",
        failed,
    ];
    assert_eq!(run(&args), ExitCode::from(1));
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn serve_answers_until_stdin_closes() {
    use dlrs_io::test_server::get;
    use std::io::{BufRead, BufReader, Read};
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_dlrs"))
        .args(["serve", "--latency-ms", "2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let addr = line.trim_end().strip_prefix("http://").unwrap().to_owned();
    let (status, body) = get(&addr, "/bytes/70000?i=1");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(body, dlrs_cli::server::bytes_body(70000));
    assert_eq!(get(&addr, "/item/3").1, b"item-3");
    assert_eq!(
        get(&addr, "/status/503").0,
        "HTTP/1.1 503 Service Unavailable"
    );
    assert_eq!(child.try_wait().unwrap(), None, "still serving");
    drop(child.stdin.take()); // end of input: the server stops
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert_eq!(
        log,
        "dlrs serve: 3 requests on 3 connections, at most 1 at once\n"
    );
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "", "only the URL on stdout");
}

#[test]
fn serve_on_a_port_in_use_fails_with_1() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    assert_eq!(run(&["serve", "--port", &port]), ExitCode::from(1));
}
