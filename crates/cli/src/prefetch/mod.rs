//! `dlrs prefetch`: the items a template names, fetched into files of a directory.
//!
//! Completeness rule: an item's bytes are written to `NAME.part` and renamed to `NAME` once they
//! are all written, so a file with its final name is complete. A run skips the items whose
//! final file exists and fetches the others again from the start (a leftover `.part` file is
//! replaced). No link inside the output directory is followed: a link in a part file's place
//! or at a final name is replaced, a linked subdirectory fails the item. Up to `--concurrency` fetches are in flight; each is retried by its dataset.
//!
//! One thread writes the files, in turn: on a disk, writes from many threads into one directory
//! contend for it and take longer than the same writes one after another.

pub mod names;
pub mod source;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use dlrs_io::{Dataset, Runtime};
use futures::StreamExt;
use tokio::sync::{mpsc, oneshot};

use crate::args::PrefetchArgs;
use crate::progress::Progress;
use names::{Names, check_unique, part_path};
use source::Items;

/// An item that was not fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The item index.
    pub index: u64,
    /// Where the item is (no query string, no credentials).
    pub location: String,
    /// What went wrong.
    pub error: String,
}

/// What a prefetch did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The number of items.
    pub total: u64,
    /// Items fetched and written by this run.
    pub fetched: u64,
    /// Items whose file was already complete.
    pub skipped: u64,
    /// Bytes written by this run.
    pub bytes: u64,
    /// Items that failed, by index.
    pub failures: Vec<Failure>,
    /// The time the run took.
    pub elapsed: Duration,
}

/// Runs `dlrs prefetch`; the exit status: 1 when an item failed.
pub fn run(args: &PrefetchArgs) -> Result<u8> {
    let report = prefetch(args, None)?;
    println!("{}", summary(&report, &args.out));
    if report.failures.is_empty() {
        return Ok(0);
    }
    eprintln!("{}", failure_list(&report.failures));
    Ok(crate::EXIT_FAILED)
}

/// Fetches every item that is not complete in `args.out`. `progress` replaces the default bar
/// (drawn when stderr is a terminal).
pub fn prefetch(args: &PrefetchArgs, progress: Option<Progress>) -> Result<Report> {
    let start = Instant::now();
    let items = Items::from_args(args)?;
    let len = items.len() as u64;
    let names = Names::new(args.name.as_deref(), &args.columns, items.len())?;
    let name_of = |i: u64| names.name(i, items.raw_location(i).as_deref());
    if names.may_collide() {
        check_unique(len, name_of)?;
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create the output directory {}", args.out.display()))?;
    let progress = progress.unwrap_or_else(|| Progress::new(len, "prefetch", "items"));
    let mut pending = Pending::new(len, &args.out, name_of, |n| progress.skip(n))?;
    let first = pending.next();

    let mut report = Report {
        total: len,
        ..Report::default()
    };
    if let Some(first) = first {
        let runtime = Runtime::new(None)?;
        let concurrency = args.concurrency as usize;
        let dataset = Arc::clone(&items.dataset);
        let out = &args.out;
        // The items are named as the fetches go: nothing is kept per item but what is in flight.
        let todo = std::iter::once(first).chain(pending.by_ref());
        let (writes, mut to_write) = mpsc::channel::<Write>(concurrency.max(1));
        let outcomes = std::thread::scope(|scope| {
            scope.spawn(move || {
                while let Some(w) = to_write.blocking_recv() {
                    let _ = w.done.send(write_item(out, &w.path, &w.bytes));
                }
            });
            // The writer ends once every sender is gone: the tasks' and this one.
            let writes = writes;
            runtime.block_on(
                futures::stream::iter(todo)
                    .map(|(index, path)| {
                        let (dataset, writes) = (Arc::clone(&dataset), writes.clone());
                        tokio::spawn(async move {
                            let fetched = fetch_one(&*dataset, index, path, writes).await;
                            (index, fetched)
                        })
                    })
                    .buffer_unordered(concurrency)
                    .map(|joined| {
                        progress.inc(1);
                        joined
                    })
                    .collect::<Vec<_>>(),
            )
        })?;
        for outcome in outcomes {
            match outcome {
                Ok((_, Ok(bytes))) => {
                    report.fetched += 1;
                    report.bytes += bytes;
                }
                Ok((index, Err(error))) => {
                    let location = items.location(index);
                    let error = strip_location(&error, &location);
                    report.failures.push(Failure {
                        index,
                        location,
                        error,
                    });
                }
                Err(e) => anyhow::bail!("a fetch task did not finish: {e}"),
            }
        }
    }
    report.skipped = pending.skipped;
    if let Some(error) = pending.error.take() {
        progress.finish();
        return Err(error);
    }
    progress.finish();
    report.failures.sort_by_key(|f| f.index);
    report.elapsed = start.elapsed();
    Ok(report)
}

/// The items of `0..len` whose final file is missing under `out`, with their paths, found as
/// they are asked for (a run of any length keeps nothing per item); `on_skip` is told how many
/// complete ones were passed over before each item given and at the end.
///
/// The files directly in `out` are listed once (one `stat` per item would cost seconds for
/// millions of items); a name in a subdirectory is looked up on its own. The first name that
/// cannot be made ends the items; it is kept in `error`.
pub struct Pending<'a, N, S> {
    listed: HashSet<std::ffi::OsString>,
    out: &'a Path,
    name_of: N,
    on_skip: S,
    next: u64,
    len: u64,
    /// Complete items passed over so far.
    pub skipped: u64,
    /// Complete items not yet told to `on_skip`.
    untold: u64,
    /// Why the items ended early.
    pub error: Option<anyhow::Error>,
}

impl<'a, N, S> Pending<'a, N, S>
where
    N: Fn(u64) -> Result<String>,
    S: Fn(u64),
{
    /// The pending items of `0..len` under `out`, each named by `name_of`.
    pub fn new(len: u64, out: &'a Path, name_of: N, on_skip: S) -> Result<Self> {
        let listed = std::fs::read_dir(out)
            .with_context(|| format!("cannot list {}", out.display()))?
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.file_type().is_ok_and(|t| t.is_file()))
            .map(|entry| entry.file_name())
            .collect();
        Ok(Pending {
            listed,
            out,
            name_of,
            on_skip,
            next: 0,
            len,
            skipped: 0,
            untold: 0,
            error: None,
        })
    }

    fn tell(&mut self) {
        if self.untold > 0 {
            (self.on_skip)(self.untold);
            self.untold = 0;
        }
    }
}

impl<N, S> Iterator for Pending<'_, N, S>
where
    N: Fn(u64) -> Result<String>,
    S: Fn(u64),
{
    type Item = (u64, PathBuf);

    fn next(&mut self) -> Option<Self::Item> {
        while self.next < self.len {
            let index = self.next;
            self.next += 1;
            let name = match (self.name_of)(index) {
                Ok(name) => name,
                Err(e) => {
                    self.next = self.len;
                    self.tell();
                    self.error = Some(e);
                    return None;
                }
            };
            let complete = if name.contains(['/', '\\']) {
                is_complete(self.out, &name)
            } else {
                self.listed.contains(std::ffi::OsStr::new(&name))
            };
            if complete {
                self.skipped += 1;
                self.untold += 1;
            } else {
                self.tell();
                return Some((index, self.out.join(name)));
            }
        }
        self.tell();
        None
    }
}

/// An item for the writer thread, and where to say how its write went.
struct Write {
    path: PathBuf,
    bytes: Bytes,
    done: oneshot::Sender<std::io::Result<()>>,
}

/// Fetches item `index` and has the writer thread write it to `path` through `path.part`; the
/// number of bytes.
async fn fetch_one(
    dataset: &dyn Dataset,
    index: u64,
    path: PathBuf,
    writes: mpsc::Sender<Write>,
) -> Result<u64, String> {
    let bytes = dataset.fetch(index).await.map_err(|e| e.to_string())?;
    let len = bytes.len() as u64;
    let shown = path.display().to_string();
    let (done, written) = oneshot::channel();
    let gone = || std::io::Error::other("the writer thread stopped");
    let written = match writes.send(Write { path, bytes, done }).await {
        Ok(()) => written.await.unwrap_or_else(|_| Err(gone())),
        Err(_) => Err(gone()),
    };
    written.map_err(|e| format!("cannot write {shown}: {e}"))?;
    Ok(len)
}

/// Writes `bytes` to `path` through `path.part`, following no link inside `out`: each directory
/// on the way must be a real one (made when missing), a part file left behind (or a link in its
/// place) is removed and made anew with create-new semantics, and the rename replaces a link
/// at `path` rather than writing through it.
fn write_item(out: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::{ErrorKind, Write};
    let name = path.strip_prefix(out).map_err(std::io::Error::other)?;
    let mut dir = out.to_path_buf();
    for component in name.parent().into_iter().flat_map(Path::components) {
        dir.push(component);
        match real_dir(out, &dir) {
            Err(e) if e.kind() == ErrorKind::NotFound => match std::fs::create_dir(&dir) {
                Err(e) if e.kind() == ErrorKind::AlreadyExists => real_dir(out, &dir)?,
                other => other?,
            },
            other => other?,
        }
    }
    let part = part_path(path);
    match std::fs::remove_file(&part) {
        Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&part)
        .and_then(|mut file| file.write_all(bytes))
        .and_then(|()| std::fs::rename(&part, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&part);
    }
    written
}

/// Ok when `dir` is a directory and not a link (NotFound when it is missing).
fn real_dir(out: &Path, dir: &Path) -> std::io::Result<()> {
    let kind = std::fs::symlink_metadata(dir)?.file_type();
    let shown = dir.strip_prefix(out).unwrap_or(dir).display();
    if kind.is_symlink() {
        return Err(std::io::Error::other(format!(
            "{shown} is a symbolic link; links inside --out are not followed"
        )));
    }
    if !kind.is_dir() {
        return Err(std::io::Error::other(format!("{shown} is not a directory")));
    }
    Ok(())
}

/// Whether `out/name` is a complete file reached without following a link inside `out`.
fn is_complete(out: &Path, name: &str) -> bool {
    let path = Path::new(name);
    let mut dir = out.to_path_buf();
    for component in path.parent().into_iter().flat_map(Path::components) {
        dir.push(component);
        if real_dir(out, &dir).is_err() {
            return false;
        }
    }
    std::fs::symlink_metadata(out.join(path)).is_ok_and(|m| m.file_type().is_file())
}

/// `error` without a leading `location: ` (dlrs-io messages start with the location).
fn strip_location(error: &str, location: &str) -> String {
    error
        .strip_prefix(location)
        .and_then(|rest| rest.strip_prefix(": "))
        .unwrap_or(error)
        .to_owned()
}

/// The summary line of a run.
pub fn summary(report: &Report, out: &Path) -> String {
    let secs = report.elapsed.as_secs_f64().max(1e-9);
    format!(
        "prefetch: {} items in {}: {} fetched ({}), {} already complete, {} failed; {:.2} s, {:.1} items/s, {}/s",
        report.total,
        out.display(),
        report.fetched,
        human_bytes(report.bytes as f64),
        report.skipped,
        report.failures.len(),
        secs,
        report.fetched as f64 / secs,
        human_bytes(report.bytes as f64 / secs),
    )
}

/// The failures, one a line: index, location, error.
pub fn failure_list(failures: &[Failure]) -> String {
    let mut out = format!(
        "{} item{} failed (index, location, error):",
        failures.len(),
        if failures.len() == 1 { "" } else { "s" }
    );
    for f in failures {
        out.push_str(&format!("\n  {}\t{}\t{}", f.index, f.location, f.error));
    }
    out
}

/// `n` bytes in B, KiB, MiB or GiB.
pub fn human_bytes(n: f64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = n;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value:.0} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
pub(crate) mod tests;
