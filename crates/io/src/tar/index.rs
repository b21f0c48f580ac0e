//! A shard's index as it is kept on disk: a small versioned file naming the shard, what it was
//! when indexed (size, ETag, modification time or Last-Modified) and its members, with a
//! CRC-32 of the whole. Written to a temporary name and renamed, so a reader sees a whole
//! index or none; one that does not parse is ignored (the shard is indexed again).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::parse::Member;
use crate::cache::stable_hash;

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

/// The index of `location` kept in `dir`, if there is a whole one for that location.
pub(crate) fn load(dir: &Path, location: &str) -> Option<(Version, Vec<Member>)> {
    let data = fs::read(path(dir, location)).ok()?;
    decode(&data, location)
}

/// Keeps the index of `location` in `dir` (best effort: an index that cannot be written only
/// makes the next run index the shard again).
pub(crate) fn save(dir: &Path, location: &str, version: &Version, members: &[Member]) {
    let target = path(dir, location);
    let temp = target.with_extension(format!("tmp.{}", std::process::id()));
    let written = (|| {
        fs::create_dir_all(dir)?;
        let mut file = fs::File::create(&temp)?;
        file.write_all(&encode(location, version, members))?;
        fs::rename(&temp, &target)
    })();
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
mod tests {
    use super::*;

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
