//! Prefetch against the loopback server and files: resume, failures, retries, names.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use clap::Parser;

use super::*;
use crate::args::{Cli, Command};
use crate::server::LoopbackServer;

/// A fresh directory under the system's temporary directory, removed when dropped.
pub(crate) struct TempDir(pub PathBuf);

impl TempDir {
    pub(crate) fn new(what: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("dlrs-cli-{what}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `dlrs prefetch TEMPLATE --out OUT` and `flags`, split at white space like a command line.
fn args(template: &str, out: &Path, flags: &str) -> PrefetchArgs {
    let out = out.to_str().unwrap();
    let argv = ["dlrs", "prefetch", template, "--out", out];
    let cli = Cli::try_parse_from(argv.into_iter().chain(flags.split_whitespace())).unwrap();
    match cli.command {
        Command::Prefetch(a) => a,
        other => panic!("{other:?}"),
    }
}

/// A loopback server, a fresh directory named after `what`, and the template of `path` on the
/// server.
fn setup(what: &str, path: &str) -> (LoopbackServer, TempDir, String) {
    let server = LoopbackServer::start(Duration::ZERO).unwrap();
    let template = format!("{}{path}", server.base_url());
    (server, TempDir::new(what), template)
}

/// Runs `a`, which must fetch its `n` items without a failure.
fn fetch_all(a: &PrefetchArgs, n: u64) {
    let report = prefetch(a, quiet()).unwrap();
    assert_eq!((report.fetched, report.failures.len()), (n, 0));
}

fn quiet() -> Option<Progress> {
    Some(Progress::with_drawing(0, "test", "items", false))
}

fn read(path: PathBuf) -> String {
    String::from_utf8(std::fs::read(&path).unwrap()).unwrap()
}

#[test]
fn fetches_every_item_into_padded_names() {
    let (server, dir, template) = setup("all", "/item/{index}");
    let out = dir.0.join("out");
    let a = args(&template, &out, "--length 12 --concurrency 4");
    let report = prefetch(&a, quiet()).unwrap();
    assert_eq!(
        (
            report.total,
            report.fetched,
            report.skipped,
            report.failures.len()
        ),
        (12, 12, 0, 0)
    );
    assert_eq!(
        report.bytes,
        (0..12)
            .map(|i| format!("item-{i}").len() as u64)
            .sum::<u64>()
    );
    for i in 0..12 {
        assert_eq!(read(out.join(format!("{i:02}"))), format!("item-{i}"));
    }
    let files = std::fs::read_dir(&out).unwrap().count();
    assert_eq!(files, 12, "no .part file is left");
    assert!(server.max_in_flight() <= 4);
    assert_eq!(server.requests(), 12);
}

#[test]
fn a_second_run_skips_complete_files_and_refetches_partial_ones() {
    let (server, dir, template) = setup("resume", "/item/{index}?format=x");
    let out = dir.0.clone();
    // Item 3 is complete (its content says so), item 5 was interrupted while it was written.
    std::fs::write(out.join("3.bin"), "kept").unwrap();
    std::fs::write(out.join("5.bin.part"), "ite").unwrap();
    let a = args(&template, &out, "--length 8 --name {index}.bin");
    let report = prefetch(&a, quiet()).unwrap();
    assert_eq!((report.fetched, report.skipped), (7, 1));
    assert_eq!(read(out.join("3.bin")), "kept");
    assert_eq!(read(out.join("5.bin")), "item-5");
    assert!(!out.join("5.bin.part").exists());
    assert_eq!(server.requests(), 7);
    // Everything is complete now: nothing is fetched.
    let again = prefetch(&a, quiet()).unwrap();
    assert_eq!((again.fetched, again.skipped, again.bytes), (0, 8, 0));
    assert_eq!(server.requests(), 7);
    assert!(summary(&again, &out).contains(": 8 items in "));
}

#[test]
fn failures_are_listed_by_index_with_redacted_locations() {
    let (server, dir, template) = setup("fail", "/{kind}/{n}?token=secret");
    let a = args(
        &template,
        &dir.0,
        "-c kind=item,status,item,status -c n=1,404,2,500 --retries 0",
    );
    let report = prefetch(&a, quiet()).unwrap();
    assert_eq!((report.fetched, report.failures.len()), (2, 2));
    let f = &report.failures[0];
    assert_eq!(f.index, 1);
    assert_eq!(f.location, format!("{}/status/404", server.base_url()));
    assert!(f.error.starts_with("HTTP status 404"), "{}", f.error);
    assert_eq!(report.failures[1].index, 3);
    let list = failure_list(&report.failures);
    assert!(
        list.starts_with("2 items failed (index, location, error):\n  1\t"),
        "{list}"
    );
    assert!(!list.contains("secret"));
    assert_eq!(read(dir.0.join("0")), "item-1");
    assert!(!dir.0.join("1").exists() && !dir.0.join("1.part").exists());
}

#[test]
fn range_columns_give_their_values_item_by_item() {
    let (server, dir, template) = setup("range", "/item/{x}?y={y}");
    let a = args(&template, &dir.0, "-c x=-1..2 -c y=a,b,c --name {y}_{x}");
    fetch_all(&a, 3);
    assert_eq!(read(dir.0.join("a_-1")), "item--1");
    assert_eq!(read(dir.0.join("b_0")), "item-0");
    assert_eq!(read(dir.0.join("c_1")), "item-1");
    // A range near the ends of i64 is made item by item too.
    let template = format!("{}/item/{{x}}", server.base_url());
    let a = args(
        &template,
        &dir.0.join("far"),
        "-c x=9223372036854775805..9223372036854775807",
    );
    let report = prefetch(&a, quiet()).unwrap();
    assert_eq!(report.fetched, 2);
    assert_eq!(read(dir.0.join("far/1")), format!("item-{}", i64::MAX - 1));
}

#[test]
fn transient_failures_are_retried() {
    let (server, dir, template) = setup("retry", "/flaky/2/item/{index}");
    let a = args(&template, &dir.0, "--length 3 --retries 2");
    fetch_all(&a, 3);
    assert_eq!(server.requests(), 9);
    assert_eq!(read(dir.0.join("2")), "item-2");
}

#[test]
fn files_are_copied_with_a_name_template() {
    let dir = TempDir::new("files");
    let src = dir.0.join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::create_dir_all(src.join("b")).unwrap();
    for (s, i) in [("a", 0), ("a", 1), ("b", 2)] {
        std::fs::write(src.join(s).join(format!("{i}.txt")), format!("{s}{i}")).unwrap();
    }
    let template = format!("{}/{{slide}}/{{index}}.txt", src.display());
    let out = dir.0.join("out");
    let a = args(&template, &out, "-c slide=a,a,b --name {slide}/{index}.txt");
    let report = prefetch(&a, quiet()).unwrap();
    assert_eq!(report.fetched, 3);
    assert_eq!(read(out.join("b/2.txt")), "b2");
    assert_eq!(read(out.join("a/1.txt")), "a1");
    // A missing file fails with the file's path.
    let a = args(&template, &out, "-c slide=a,b,b");
    let report = prefetch(&a, quiet()).unwrap();
    assert_eq!(report.failures.len(), 1);
    assert_eq!(report.failures[0].index, 1);
    assert_eq!(
        report.failures[0].location,
        format!("{}/b/1.txt", src.display())
    );
}

/// The pending items of `0..len` under `out` named by `name_of`, and the skips told.
fn pending(
    len: u64,
    out: &Path,
    name_of: impl Fn(u64) -> Result<String>,
) -> Result<(Vec<(u64, PathBuf)>, u64)> {
    let told = std::cell::Cell::new(0);
    let mut items = Pending::new(len, out, name_of, |n| told.set(told.get() + n))?;
    let todo: Vec<_> = items.by_ref().collect();
    if let Some(e) = items.error.take() {
        return Err(e);
    }
    assert_eq!(told.get(), items.skipped, "every skip is told");
    Ok((todo, items.skipped))
}

#[test]
fn pending_lists_what_is_missing() {
    let dir = TempDir::new("pending");
    std::fs::write(dir.0.join("1"), "x").unwrap();
    std::fs::write(dir.0.join("2.part"), "x").unwrap();
    std::fs::create_dir(dir.0.join("3")).unwrap();
    let (todo, skipped) = pending(4, &dir.0, |i| Ok(i.to_string())).unwrap();
    assert_eq!(skipped, 1);
    let indices: Vec<u64> = todo.iter().map(|(i, _)| *i).collect();
    assert_eq!(indices, [0, 2, 3]);
    assert_eq!(todo[1].1, dir.0.join("2"));
    // Names in subdirectories are looked up one by one.
    std::fs::create_dir(dir.0.join("sub")).unwrap();
    std::fs::write(dir.0.join("sub/1"), "x").unwrap();
    let (todo, skipped) = pending(3, &dir.0, |i| Ok(format!("sub/{i}"))).unwrap();
    assert_eq!(skipped, 1);
    assert_eq!(todo.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [0, 2]);
    assert!(pending(1, &dir.0.join("missing"), |i| Ok(i.to_string())).is_err());
    // A name that cannot be made ends the items, with its error kept.
    let err = pending(4, &dir.0, |i| {
        if i == 2 {
            Err(crate::usage("bad name"))
        } else {
            Ok(i.to_string())
        }
    })
    .unwrap_err();
    assert!(err.is::<crate::UsageError>(), "{err}");
}

/// Items are found as they are fetched: a run of any length keeps nothing per item, and the
/// first items are fetched before the last ones are even named.
#[test]
fn pending_items_are_found_as_they_are_asked_for() {
    let dir = TempDir::new("lazy");
    std::fs::write(dir.0.join("1"), "x").unwrap();
    let named = std::cell::Cell::new(0u64);
    let told = std::cell::Cell::new(0u64);
    let mut items = Pending::new(
        u64::MAX,
        &dir.0,
        |i| {
            named.set(named.get() + 1);
            Ok(i.to_string())
        },
        |n| told.set(told.get() + n),
    )
    .unwrap();
    assert_eq!(items.next().map(|(i, _)| i), Some(0));
    assert_eq!(items.next().map(|(i, _)| i), Some(2));
    assert_eq!((named.get(), told.get(), items.skipped), (3, 1, 1));
    let far: Vec<u64> = items
        .by_ref()
        .skip(999_997)
        .take(1)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(far, [1_000_000]);
    assert_eq!(named.get(), 1_000_001);
}

#[test]
fn human_sizes() {
    assert_eq!(human_bytes(0.0), "0 B");
    assert_eq!(human_bytes(1023.0), "1023 B");
    assert_eq!(human_bytes(1536.0), "1.5 KiB");
    assert_eq!(
        human_bytes(3.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0),
        "3072.0 GiB"
    );
    assert_eq!(strip_location("/a: gone", "/a"), "gone");
    assert_eq!(strip_location("other", "/a"), "other");
}

/// A server, and a temporary directory with an `out` directory and a directory `outside` it.
#[cfg(unix)]
fn out_and_outside(name: &str) -> (LoopbackServer, TempDir, PathBuf, PathBuf) {
    let server = LoopbackServer::start(Duration::ZERO).unwrap();
    let dir = TempDir::new(name);
    let (out, outside) = (dir.0.join("out"), dir.0.join("outside"));
    std::fs::create_dir_all(&out).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    (server, dir, out, outside)
}

#[cfg(unix)]
#[test]
fn links_planted_in_out_are_not_followed() {
    use std::os::unix::fs::symlink;
    let (server, _dir, out, outside) = out_and_outside("links");
    for victim in ["part", "final"] {
        std::fs::write(outside.join(victim), "precious").unwrap();
    }
    // Item 0's part file and item 1's final name point outside --out.
    symlink(outside.join("part"), out.join("0.part")).unwrap();
    symlink(outside.join("final"), out.join("1")).unwrap();
    let template = format!("{}/item/{{index}}", server.base_url());
    let a = args(&template, &out, "--length 2");
    fetch_all(&a, 2);
    for victim in ["part", "final"] {
        assert_eq!(read(outside.join(victim)), "precious", "{victim}");
    }
    for (name, body) in [("0", "item-0"), ("1", "item-1")] {
        let meta = std::fs::symlink_metadata(out.join(name)).unwrap();
        assert!(meta.file_type().is_file(), "{name} is a file, not a link");
        assert_eq!(read(out.join(name)), body);
    }
    assert!(std::fs::symlink_metadata(out.join("0.part")).is_err());
}

#[cfg(unix)]
#[test]
fn a_symlinked_subdirectory_in_out_is_refused() {
    use std::os::unix::fs::symlink;
    let (server, _dir, out, outside) = out_and_outside("linked-dir");
    std::fs::create_dir_all(out.join("real")).unwrap();
    symlink(&outside, out.join("sub")).unwrap();
    symlink(&outside, out.join("real/deeper")).unwrap();
    let template = format!("{}/item/{{index}}", server.base_url());
    let one_named = |name: &str| args(&template, &out, &format!("--length 1 --name {name}"));
    for name in ["sub/{index}", "real/deeper/x/{index}"] {
        let report = prefetch(&one_named(name), quiet()).unwrap();
        assert_eq!((report.fetched, report.failures.len()), (0, 1), "{name}");
        let error = &report.failures[0].error;
        assert!(
            error.contains("is a symbolic link") && error.contains("not followed"),
            "{error}"
        );
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "{name}");
    }
    // A real subdirectory is created and written to.
    assert_eq!(
        prefetch(&one_named("real/new/{index}"), quiet())
            .unwrap()
            .fetched,
        1
    );
    assert_eq!(read(out.join("real/new/0")), "item-0");
}
