//! `FileDataset`: item i is the content of a file, read on tokio's blocking pool.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;

use crate::dataset::{Dataset, FIRST_RESERVE, FetchOptions, Locations};
use crate::error::Error;
use crate::retry::{self, Failure};
use crate::stats::IoStats;
use crate::template::{Target, from_template};

/// Item i is the content of the i-th path (from a list or a template).
#[derive(Clone)]
pub struct FileDataset {
    inner: Arc<Inner>,
}

struct Inner {
    paths: Paths,
    options: FetchOptions,
    stats: IoStats,
}

enum Paths {
    List(Vec<PathBuf>),
    Template(Locations),
}

impl std::fmt::Debug for FileDataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileDataset")
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl FileDataset {
    /// A dataset of the contents of `paths`.
    pub fn new(paths: Vec<PathBuf>, options: FetchOptions) -> Result<FileDataset, Error> {
        Ok(FileDataset::build(Paths::List(paths), options))
    }

    from_template!(
        /// A dataset of the contents of the paths made from `template` (see [`crate::template`]).
        [] options: FetchOptions, Target::Path,
        |locations| Ok(FileDataset::build(Paths::Template(locations), options))
    );

    fn build(paths: Paths, options: FetchOptions) -> FileDataset {
        FileDataset {
            inner: Arc::new(Inner {
                paths,
                options,
                stats: IoStats::default(),
            }),
        }
    }

    /// The options given.
    pub fn options(&self) -> &FetchOptions {
        &self.inner.options
    }
}

impl Inner {
    fn path(&self, index: u64) -> Result<PathBuf, Error> {
        match &self.paths {
            Paths::List(paths) => usize::try_from(index)
                .ok()
                .and_then(|i| paths.get(i))
                .cloned()
                .ok_or(Error::IndexOutOfRange {
                    index,
                    len: paths.len() as u64,
                }),
            Paths::Template(locations) => Ok(PathBuf::from(locations.get(index)?.into_owned())),
        }
    }

    fn len(&self) -> usize {
        match &self.paths {
            Paths::List(paths) => paths.len(),
            Paths::Template(locations) => locations.len(),
        }
    }
}

impl Dataset for FileDataset {
    fn len(&self) -> u64 {
        self.inner.len() as u64
    }

    fn fetch(&self, index: u64) -> BoxFuture<'static, Result<Bytes, Error>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let path = Arc::new(inner.path(index)?);
            let (max_bytes, stats) = (inner.options.max_bytes, &inner.stats);
            retry::run(
                inner.options.retry,
                inner.options.timeout,
                || path.display().to_string(),
                |n| {
                    stats.attempt(n);
                    let path = path.clone();
                    async move {
                        let _request = stats.request();
                        let read =
                            tokio::task::spawn_blocking(move || read_capped(&path, max_bytes));
                        match read.await {
                            Ok(result) => result.inspect(|body| stats.fetched(body.len())),
                            Err(join) => Err(Failure::Fatal(Error::Runtime(format!(
                                "the file read did not finish: {join}"
                            )))),
                        }
                    }
                },
            )
            .await
        })
    }

    fn io_stats(&self) -> Option<&IoStats> {
        Some(&self.inner.stats)
    }
}

/// Reads `path` whole, refusing more than `max_bytes` (from its metadata, then while reading).
fn read_capped(path: &Path, max_bytes: u64) -> Result<Bytes, Failure> {
    let io_failure = |e: io::Error| {
        let transient = retry::is_transient_io(e.kind());
        Failure::new(Error::io(&path.display().to_string(), e), transient)
    };
    let too_large = |size| {
        Failure::Fatal(Error::TooLarge {
            location: path.display().to_string(),
            limit: max_bytes,
            size,
        })
    };
    let file = std::fs::File::open(path).map_err(io_failure)?;
    let metadata = file.metadata().map_err(io_failure)?;
    if metadata.is_dir() {
        return Err(io_failure(io::Error::new(
            io::ErrorKind::IsADirectory,
            "is a directory",
        )));
    }
    let size = metadata.len();
    if size > max_bytes {
        return Err(too_large(Some(size)));
    }
    // The file may grow after the metadata was read: read at most one byte more than allowed.
    // Its size is a claim too (a network or FUSE file system says what it likes): the buffer
    // grows with the bytes read.
    let reserve = size.saturating_add(1).min(FIRST_RESERVE);
    let mut body = Vec::with_capacity(usize::try_from(reserve).unwrap_or(0));
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut body)
        .map_err(io_failure)?;
    if body.len() as u64 > max_bytes {
        return Err(too_large(None));
    }
    Ok(Bytes::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Runtime;
    use crate::template::Column;
    use crate::test_util::{TempDir, assert_io, assert_starts_with, assert_too_large};
    use crate::{ErrorKind, RetryOptions};
    use std::time::Duration;

    fn fetch(dataset: &FileDataset, index: u64) -> Result<Bytes, Error> {
        let runtime = Runtime::new(Some(1)).unwrap();
        runtime.block_on(dataset.fetch(index)).unwrap()
    }

    #[test]
    fn reads_files_and_refuses_out_of_range() {
        let dir = TempDir::new();
        std::fs::write(dir.join("a"), b"alpha").unwrap();
        std::fs::write(dir.join("b"), b"").unwrap();
        let dataset =
            FileDataset::new(vec![dir.join("a"), dir.join("b")], FetchOptions::FILE).unwrap();
        assert_eq!(dataset.len(), 2);
        assert_eq!(fetch(&dataset, 0).unwrap(), &b"alpha"[..]);
        assert_eq!(fetch(&dataset, 1).unwrap(), &b""[..]);
        assert!(matches!(
            fetch(&dataset, 2),
            Err(Error::IndexOutOfRange { index: 2, len: 2 })
        ));
    }

    #[test]
    fn a_missing_file_is_not_found() {
        let dir = TempDir::new();
        let missing = dir.join("missing.png");
        let options = FetchOptions {
            retry: RetryOptions {
                retries: 3,
                backoff: Duration::from_millis(1),
                max_backoff: Duration::from_millis(1),
            },
            ..FetchOptions::FILE
        };
        let dataset = FileDataset::new(vec![missing.clone()], options).unwrap();
        let error = fetch(&dataset, 0).unwrap_err();
        assert_io(&error, io::ErrorKind::NotFound);
        assert_eq!(error.kind(), ErrorKind::Io(io::ErrorKind::NotFound));
        assert_eq!(error.raw_os_error(), Some(2));
        assert_starts_with(&error, &format!("{}: ", missing.display()));
        let dir_error = fetch(
            &FileDataset::new(vec![dir.to_path_buf()], FetchOptions::FILE).unwrap(),
            0,
        )
        .unwrap_err();
        assert_io(&dir_error, io::ErrorKind::IsADirectory);
    }

    #[test]
    fn max_bytes_from_metadata() {
        let dir = TempDir::new();
        std::fs::write(dir.join("big"), vec![1; 101]).unwrap();
        std::fs::write(dir.join("fits"), vec![1; 100]).unwrap();
        let options = FetchOptions {
            max_bytes: 100,
            ..FetchOptions::FILE
        };
        let dataset = FileDataset::new(vec![dir.join("big"), dir.join("fits")], options).unwrap();
        let error = fetch(&dataset, 0).unwrap_err();
        assert_too_large(&error, 100, Some(101));
        assert_eq!(error.kind(), ErrorKind::TooLarge);
        assert_eq!(fetch(&dataset, 1).unwrap().len(), 100);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn max_bytes_while_reading() {
        // /proc files announce a size of 0 and have content: only the read can catch them.
        let path = PathBuf::from("/proc/self/status");
        let size = std::fs::metadata(&path).unwrap().len();
        assert_eq!(size, 0);
        let options = FetchOptions {
            max_bytes: 10,
            ..FetchOptions::FILE
        };
        let error = fetch(&FileDataset::new(vec![path.clone()], options).unwrap(), 0).unwrap_err();
        assert_too_large(&error, 10, None);
        let body = fetch(
            &FileDataset::new(vec![path], FetchOptions::FILE).unwrap(),
            0,
        )
        .unwrap();
        assert!(body.starts_with(b"Name:"), "{body:?}");
    }

    #[test]
    fn templates_make_paths() {
        let dir = TempDir::new();
        for (slide, index) in [("a.svs", 0), ("a.svs", 1), ("b c.svs", 2)] {
            std::fs::create_dir_all(dir.join(slide)).unwrap();
            std::fs::write(
                dir.join(slide).join(format!("{index}.png")),
                format!("{slide}#{index}"),
            )
            .unwrap();
        }
        let template = format!("{}/{{slide}}/{{index}}.png", dir.display());
        let slides = Column::Strs(vec!["a.svs".into(), "a.svs".into(), "b c.svs".into()]);
        let dataset = FileDataset::from_template(
            &template,
            vec![("slide".into(), slides)],
            None,
            FetchOptions::FILE,
        )
        .unwrap();
        assert_eq!(dataset.len(), 3);
        for (i, expected) in ["a.svs#0", "a.svs#1", "b c.svs#2"].iter().enumerate() {
            assert_eq!(fetch(&dataset, i as u64).unwrap(), expected.as_bytes());
        }
        let escape = FileDataset::from_template(
            &template,
            vec![("slide".into(), Column::Strs(vec!["..".into()]))],
            None,
            FetchOptions::FILE,
        );
        assert!(matches!(escape, Err(Error::InvalidArgument(_))));
    }

    /// `.{a}.` with an empty value is the component `..`: refused, although no value is `..`.
    #[test]
    fn an_assembled_dot_dot_component_is_refused() {
        let dir = TempDir::new();
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("x"), "outside sub").unwrap();
        std::fs::write(dir.join("sub/x"), "inside").unwrap();
        let escape = |template: &str, values: &[&str]| {
            let values = values.iter().map(|v| (*v).to_owned()).collect();
            FileDataset::from_template(
                &format!("{}/sub/{template}", dir.display()),
                vec![("a".into(), Column::Strs(values))],
                None,
                FetchOptions::FILE,
            )
        };
        for (template, values) in [
            (".{a}./x", &["b", ""][..]),
            ("{a}{a}/x", &["."][..]),
            ("{a}./x", &[""][..]),
        ] {
            let error = escape(template, values).unwrap_err();
            assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
            assert!(error.to_string().contains("is not allowed"), "{error}");
        }
        let error = escape(".{a}./x", &["b", ""]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "item 1: the path component \".{a}.\" of the template becomes \"..\", which is \
             not allowed (it would leave the template's directory)"
        );
        let fine = escape(".{a}./x", &["b"]).unwrap();
        assert_io(&fetch(&fine, 0).unwrap_err(), io::ErrorKind::NotFound);
        let inside = escape("{a}x", &[""]).unwrap();
        assert_eq!(fetch(&inside, 0).unwrap(), &b"inside"[..]);
    }

    #[test]
    fn a_stalled_read_times_out() {
        // A FIFO with no writer blocks open() forever: the attempt is cut at the timeout.
        let dir = TempDir::new();
        let fifo = dir.join("fifo");
        let status = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !status.is_ok_and(|s| s.success()) {
            panic!("mkfifo is needed for this test");
        }
        let options = FetchOptions {
            timeout: Some(Duration::from_millis(50)),
            retry: RetryOptions {
                retries: 1,
                backoff: Duration::from_millis(1),
                max_backoff: Duration::from_millis(1),
            },
            ..FetchOptions::FILE
        };
        let dataset = FileDataset::new(vec![fifo.clone()], options).unwrap();
        let runtime = Runtime::new(Some(1)).unwrap();
        let error = runtime.block_on(dataset.fetch(0)).unwrap().unwrap_err();
        assert!(
            matches!(&error, Error::Timeout { attempts: 2, .. }),
            "{error:?}"
        );
        assert_eq!(error.kind(), ErrorKind::TimedOut);
        // The two abandoned opens stay blocked on the blocking pool; dropping the runtime
        // does not wait for them, and the process exit ends them.
        drop(runtime);
    }
}
