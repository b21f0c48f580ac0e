//! A shard's index as it is kept on disk: a small versioned file naming the shard, what it was
//! when indexed (size, ETag, modification time or Last-Modified) and its members, with a
//! CRC-32 of the whole. Written to a temporary name and renamed, so a reader sees a whole
//! index or none; one that does not parse is ignored (the shard is indexed again).
//!
//! The directory may hold what others put there: no symbolic link in it is followed (an index
//! is opened with `O_NOFOLLOW`, a temporary file created with `O_CREAT | O_EXCL` too), and an
//! index that is not a regular file (a FIFO) is ignored without waiting on it.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use super::parse::Member;
use crate::cache::stable_hash;
use crate::no_follow;

/// The file's first bytes; the format's version is the last digit.
const MAGIC: &[u8; 8] = b"DLRSTIX1";

/// What a shard was when it was indexed (or is now), to tell whether it changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Version {
    /// The size in bytes.
    pub size: u64,
    /// The ETag (HTTP, object stores) or device and inode (files).
    pub etag: Option<String>,
    /// Last-Modified (HTTP, object stores) or the modification time in nanoseconds (files).
    pub modified: Option<String>,
}

impl Version {
    /// How `self` differs from `indexed`, if it does.
    #[cfg_attr(not(any(feature = "file", feature = "object-store")), allow(dead_code))]
    pub(crate) fn differs(&self, indexed: &Version) -> Option<String> {
        if self.size != indexed.size {
            return Some(format!(
                "{} bytes, indexed at {} bytes",
                self.size, indexed.size
            ));
        }
        let shown = |v: &Option<String>| v.as_deref().unwrap_or("none").to_owned();
        if self.etag != indexed.etag {
            return Some(format!(
                "ETag {}, indexed with {}",
                shown(&self.etag),
                shown(&indexed.etag)
            ));
        }
        if self.modified != indexed.modified {
            return Some(format!(
                "modified {}, indexed as modified {}",
                shown(&self.modified),
                shown(&indexed.modified)
            ));
        }
        None
    }
}

/// The index file of the shard at `location` in `dir`.
pub(crate) fn path(dir: &Path, location: &str) -> PathBuf {
    dir.join(format!(
        "{:016x}.tarindex",
        stable_hash(location.as_bytes(), 3)
    ))
}

/// The largest index file read (a larger one is ignored).
const MAX_INDEX_FILE: u64 = 1 << 30;

/// The names a process tries for its temporary file, one after the other when a name is taken.
const TEMP_NAMES: u32 = 4;

/// The index of `location` kept in `dir`, if there is a whole one for that location.
pub(crate) fn load(dir: &Path, location: &str) -> Option<(Version, Vec<Member>)> {
    let data = read_regular(&path(dir, location)).ok()?;
    decode(&data, location)
}

/// The bytes of the regular file at `path`; anything else (a link, a FIFO, a device) is an
/// error, told by the open file's own metadata.
fn read_regular(path: &Path) -> io::Result<Vec<u8>> {
    let file = no_follow::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() > MAX_INDEX_FILE {
        return Err(io::Error::other("not a regular index file"));
    }
    let mut data = Vec::new();
    file.take(meta.len()).read_to_end(&mut data)?;
    Ok(data)
}

/// The `attempt`-th temporary name of the index file `target` for this process.
fn temp_path(target: &Path, attempt: u32) -> PathBuf {
    let pid = std::process::id();
    match attempt {
        0 => target.with_extension(format!("tmp.{pid}")),
        n => target.with_extension(format!("tmp.{pid}.{n}")),
    }
}

/// Keeps the index of `location` in `dir` (best effort: an index that cannot be written only
/// makes the next run index the shard again). The temporary file is a new file of its own:
/// whatever is at its name already (a link planted there, another thread's file) is left be.
pub(crate) fn save(dir: &Path, location: &str, version: &Version, members: &[Member]) {
    let target = path(dir, location);
    if fs::create_dir_all(dir).is_err() {
        return;
    }
    let encoded = encode(location, version, members);
    let Ok((temp, mut file)) = no_follow::create_new(TEMP_NAMES, |n| temp_path(&target, n)) else {
        return;
    };
    let written = file
        .write_all(&encoded)
        .and_then(|()| fs::rename(&temp, &target));
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_opt(out: &mut Vec<u8>, s: &Option<String>) {
    match s {
        Some(s) => {
            out.push(1);
            put_str(out, s);
        }
        None => out.push(0),
    }
}

pub(crate) fn encode(location: &str, version: &Version, members: &[Member]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + members.len() * 48);
    out.extend_from_slice(MAGIC);
    put_str(&mut out, location);
    out.extend_from_slice(&version.size.to_le_bytes());
    put_opt(&mut out, &version.etag);
    put_opt(&mut out, &version.modified);
    out.extend_from_slice(&(members.len() as u64).to_le_bytes());
    for m in members {
        for n in [m.header, m.data, m.size] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        put_str(&mut out, &m.name);
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Reads an encoded index; `None` if it is not whole, not of this format, or of another
/// location.
pub(crate) fn decode(data: &[u8], location: &str) -> Option<(Version, Vec<Member>)> {
    let (body, crc) = data.split_at_checked(data.len().checked_sub(4)?)?;
    if crc32fast::hash(body).to_le_bytes() != crc {
        return None;
    }
    let mut r = Reader(body);
    if r.take(8)? != MAGIC || r.string()? != location {
        return None;
    }
    let size = r.u64()?;
    let etag = r.optional()?;
    let modified = r.optional()?;
    let count = r.u64()?;
    let mut members = Vec::with_capacity(usize::try_from(count.min(1 << 20)).ok()?);
    for _ in 0..count {
        let (header, data, size) = (r.u64()?, r.u64()?, r.u64()?);
        let name = r.string()?.to_owned();
        members.push(Member {
            name,
            header,
            data,
            size,
        });
    }
    if !r.0.is_empty() {
        return None;
    }
    let version = Version {
        size,
        etag,
        modified,
    };
    Some((version, members))
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn string(&mut self) -> Option<&'a str> {
        let len = u32::from_le_bytes(self.take(4)?.try_into().ok()?);
        std::str::from_utf8(self.take(len as usize)?).ok()
    }

    fn optional(&mut self) -> Option<Option<String>> {
        match self.take(1)?[0] {
            0 => Some(None),
            1 => Some(Some(self.string()?.to_owned())),
            _ => None,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Makes a FIFO at `path`.
    #[cfg(unix)]
    pub(crate) fn mkfifo(path: &Path) {
        let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c_path` is a NUL-terminated path that lives across the call.
        let made = unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) };
        assert_eq!(made, 0, "{path:?}");
    }

    /// `f()`, run on a thread of its own. A hang guard, not a timing: if `f` is still stuck
    /// after a minute (opening the FIFO at `fifo` for reading waits for a writer), the FIFO is
    /// opened for writing once to release it and the test fails.
    #[cfg(unix)]
    pub(crate) fn unless_stuck_on<T: Send + 'static>(
        fifo: &Path,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        use std::os::unix::fs::OpenOptionsExt;
        use std::sync::mpsc::RecvTimeoutError;
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(value) => {
                thread.join().unwrap();
                value
            }
            Err(RecvTimeoutError::Disconnected) => {
                std::panic::resume_unwind(thread.join().unwrap_err())
            }
            Err(RecvTimeoutError::Timeout) => {
                let _ = fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(fifo);
                let _ = thread.join();
                panic!("stuck on the FIFO {}", fifo.display());
            }
        }
    }

    fn sample() -> (Version, Vec<Member>) {
        let version = Version {
            size: 10240,
            etag: Some("\"abc\"".into()),
            modified: None,
        };
        let members = vec![
            Member {
                name: "000001.jpg".into(),
                header: 0,
                data: 512,
                size: 3,
            },
            Member {
                name: "dir/é.cls".into(),
                header: 1024,
                data: 2048,
                size: 0,
            },
        ];
        (version, members)
    }

    #[test]
    fn round_trips_and_refuses_damage() {
        let (version, members) = sample();
        let data = encode("http://h/s.tar", &version, &members);
        assert_eq!(
            decode(&data, "http://h/s.tar"),
            Some((version.clone(), members.clone()))
        );
        assert_eq!(decode(&data, "http://h/other.tar"), None);
        for cut in [0, 1, 8, data.len() - 1] {
            assert_eq!(decode(&data[..cut], "http://h/s.tar"), None, "cut at {cut}");
        }
        for flip in [0, 9, 30, data.len() - 2] {
            let mut bad = data.clone();
            bad[flip] ^= 1;
            assert_eq!(decode(&bad, "http://h/s.tar"), None, "byte {flip}");
        }
    }

    #[test]
    fn saved_beside_other_indexes() {
        let dir = std::env::temp_dir().join(format!("dlrs-tarindex-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (version, members) = sample();
        assert_eq!(load(&dir, "/data/a.tar"), None);
        save(&dir, "/data/a.tar", &version, &members);
        save(&dir, "/data/b.tar", &Version::default(), &[]);
        assert_eq!(load(&dir, "/data/a.tar"), Some((version, members)));
        assert_eq!(
            load(&dir, "/data/b.tar"),
            Some((Version::default(), vec![]))
        );
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            2,
            "no temporary file left"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_link_at_the_temporary_name_is_not_written_through() {
        let dir = crate::test_util::TempDir::new();
        let index_dir = dir.join("index");
        fs::create_dir(&index_dir).unwrap();
        let victim = dir.join("victim");
        fs::write(&victim, b"keep me").unwrap();
        let (version, members) = sample();
        let target = path(&index_dir, "/data/a.tar");
        std::os::unix::fs::symlink(&victim, temp_path(&target, 0)).unwrap();
        save(&index_dir, "/data/a.tar", &version, &members);
        assert_eq!(fs::read(&victim).unwrap(), b"keep me");
        assert_eq!(
            load(&index_dir, "/data/a.tar"),
            Some((version.clone(), members.clone())),
            "saved under another temporary name"
        );
        // Every name taken: nothing is kept, nothing is written through.
        fs::remove_file(&target).unwrap();
        for attempt in 1..TEMP_NAMES {
            std::os::unix::fs::symlink(&victim, temp_path(&target, attempt)).unwrap();
        }
        save(&index_dir, "/data/a.tar", &version, &members);
        assert_eq!(fs::read(&victim).unwrap(), b"keep me");
        assert_eq!(load(&index_dir, "/data/a.tar"), None);
        // A link in place of the index itself is not followed, and a save replaces the link.
        let elsewhere = dir.join("elsewhere.tarindex");
        fs::write(&elsewhere, encode("/data/a.tar", &version, &members)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &target).unwrap();
        assert_eq!(load(&index_dir, "/data/a.tar"), None);
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_or_a_directory_in_place_of_an_index_is_no_index() {
        let dir = crate::test_util::TempDir::new();
        let target = path(&dir, "/data/a.tar");
        mkfifo(&target);
        // Opened without waiting for a writer: a FIFO is not a regular file, so no index.
        let loaded = {
            let dir = dir.to_path_buf();
            unless_stuck_on(&target, move || load(&dir, "/data/a.tar"))
        };
        assert_eq!(loaded, None);
        fs::remove_file(&target).unwrap();
        fs::create_dir(&target).unwrap();
        assert_eq!(load(&dir, "/data/a.tar"), None);
    }

    #[test]
    fn differences_are_named() {
        let v = |size, etag: Option<&str>, modified: Option<&str>| Version {
            size,
            etag: etag.map(str::to_owned),
            modified: modified.map(str::to_owned),
        };
        let indexed = v(100, Some("\"a\""), Some("Mon"));
        assert_eq!(v(100, Some("\"a\""), Some("Mon")).differs(&indexed), None);
        assert_eq!(
            v(90, Some("\"a\""), Some("Mon")).differs(&indexed).unwrap(),
            "90 bytes, indexed at 100 bytes"
        );
        assert_eq!(
            v(100, Some("\"b\""), Some("Mon"))
                .differs(&indexed)
                .unwrap(),
            "ETag \"b\", indexed with \"a\""
        );
        assert_eq!(
            v(100, Some("\"a\""), None).differs(&indexed).unwrap(),
            "modified none, indexed as modified Mon"
        );
    }
}
