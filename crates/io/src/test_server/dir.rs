//! The files of a served directory: which request paths name one, what is refused, and how a
//! body is streamed from it.
//!
//! A request path is split at `/` and each segment percent-decoded (UTF-8 names as clients
//! encode them); an empty, `.` or `..` segment, or one that decodes to a `/` or NUL, names no
//! file. A path that names an entry of the directory is served only when it resolves to a
//! regular file inside the directory: the path is resolved (links followed) and must stay below
//! the directory's own resolved path; the file is opened without following a link and without
//! blocking (a FIFO opens at once), and what was opened must be a regular file inside the
//! directory. Anything else is refused (403). A body is read in chunks, never whole.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The bytes read from a file for one write of its body.
const CHUNK: u64 = 256 << 10;

/// What a request path is under a served directory.
pub(super) enum Lookup {
    /// No entry of the directory: the standard routes answer.
    Absent,
    /// An entry that is not served: not a regular file, or outside the directory.
    Refused,
    /// A regular file inside the directory, open, with its size and ETag.
    File { file: File, len: u64, etag: String },
}

/// The directory's path with its links resolved, which every served file must be below.
pub(super) fn resolve_root(root: &Path) -> io::Result<PathBuf> {
    let resolved = std::fs::canonicalize(root)?;
    if !resolved.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            format!("{} is not a directory", root.display()),
        ));
    }
    Ok(resolved)
}

/// The relative path a request path names (without its query), segments percent-decoded;
/// `None` when a segment is empty, `.`, `..`, or holds a `/` or NUL once decoded.
fn relative_path(path: &str) -> Option<PathBuf> {
    let mut relative = PathBuf::new();
    for segment in path.strip_prefix('/').unwrap_or(path).split('/') {
        let decoded: Vec<u8> = percent_encoding::percent_decode_str(segment).collect();
        if decoded.is_empty()
            || decoded == b"."
            || decoded == b".."
            || decoded.iter().any(|&b| b == b'/' || b == 0)
        {
            return None;
        }
        relative.push(segment_name(decoded)?);
    }
    Some(relative)
}

/// A decoded segment as a file name: any bytes on Unix, UTF-8 elsewhere.
#[cfg(unix)]
fn segment_name(decoded: Vec<u8>) -> Option<std::ffi::OsString> {
    use std::os::unix::ffi::OsStringExt;
    Some(std::ffi::OsString::from_vec(decoded))
}

#[cfg(not(unix))]
fn segment_name(decoded: Vec<u8>) -> Option<std::ffi::OsString> {
    String::from_utf8(decoded).ok().map(Into::into)
}

/// Reads into `buf` from `offset` of `file` (no shared position).
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        std::os::windows::fs::FileExt::seek_read(file, buf, offset)
    }
}

/// What `path` (a request path without its query) is under `root`, a resolved directory.
pub(super) fn lookup(root: &Path, path: &str) -> Lookup {
    let Some(relative) = relative_path(path) else {
        return Lookup::Absent;
    };
    let joined = root.join(relative);
    if std::fs::symlink_metadata(&joined).is_err() {
        return Lookup::Absent;
    }
    // Links are resolved first, so one that leads out of the directory is seen.
    let Ok(resolved) = std::fs::canonicalize(&joined) else {
        return Lookup::Refused;
    };
    if !resolved.starts_with(root) {
        return Lookup::Refused;
    }
    // No link is followed now (one swapped in since fails), and a FIFO does not wait for a
    // writer.
    let Ok(file) = crate::no_follow::open(&resolved) else {
        return Lookup::Refused;
    };
    let Ok(meta) = file.metadata() else {
        return Lookup::Refused;
    };
    if !meta.is_file() || !opened_inside(&file, root) {
        return Lookup::Refused;
    }
    let modified = meta
        .modified()
        .ok()
        .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let etag = format!("\"{:x}-{modified:x}\"", meta.len());
    Lookup::File {
        file,
        len: meta.len(),
        etag,
    }
}

/// Whether the open `file` is below `root`, as the kernel names it (a directory on the way
/// swapped for a link after the check is caught); true where the kernel does not say.
#[cfg(unix)]
fn opened_inside(file: &File, root: &Path) -> bool {
    use std::os::fd::AsRawFd;
    match std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())) {
        Ok(opened) => opened.starts_with(root),
        Err(_) => true,
    }
}

#[cfg(not(unix))]
fn opened_inside(_file: &File, _root: &Path) -> bool {
    true
}

/// Writes the bytes `start..start + len` of `file` to `stream`, a chunk at a time, each read
/// on the blocking pool. A file that ends early is an error (the connection is then closed).
pub(super) async fn send_range(
    stream: &mut TcpStream,
    file: File,
    start: u64,
    len: u64,
) -> io::Result<()> {
    let file = Arc::new(file);
    let mut buf = vec![0u8; CHUNK.min(len) as usize];
    let (mut at, end) = (start, start.saturating_add(len));
    while at < end {
        let want = CHUNK.min(end - at) as usize;
        let f = Arc::clone(&file);
        let (back, read) = tokio::task::spawn_blocking(move || {
            let read = read_at(&f, &mut buf[..want], at);
            (buf, read)
        })
        .await
        .map_err(io::Error::other)?;
        buf = back;
        let n = read?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file ended before the length announced",
            ));
        }
        stream.write_all(&buf[..n]).await?;
        at += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_paths_are_decoded_by_segment() {
        assert_eq!(
            relative_path("/a%20b/%C3%A9t%C3%A9.tar"),
            Some(PathBuf::from("a b/été.tar"))
        );
        assert_eq!(
            relative_path("/sub/f.bin"),
            Some(PathBuf::from("sub/f.bin"))
        );
        for bad in [
            "/",
            "//a",
            "/a/",
            "/../a",
            "/a/./b",
            "/%2e%2E/a",
            "/a%2fb",
            "/a%00",
        ] {
            assert_eq!(relative_path(bad), None, "{bad}");
        }
    }
}
