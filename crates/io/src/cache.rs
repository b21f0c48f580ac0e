//! A local disk cache of fetched items, shared by the processes of one machine, and
//! [`Cached`], a dataset read through it.
//!
//! Entries are files named by a 64-bit hash of the item's key (its rank). Under the byte budget
//! the cache keeps the items of lowest rank: a new item is admitted while it fits, or when it
//! ranks below cached ones, which it evicts (highest rank first); otherwise it is not admitted.
//! The cached set therefore does not depend on the order items come in, and settles after
//! one epoch: under a full shuffle an LRU cache smaller than the data misses on almost every
//! item, this one hits on the same fraction of items every epoch.
//!
//! Each entry is written to a temporary file and renamed into place, so a reader sees a whole
//! entry or none. Its header holds a second hash of the key, the payload's length and its
//! CRC-32: a truncated or corrupt entry is removed and read again from the source. Processes
//! sharing a directory learn each other's entries by listing it again (at most once a
//! second, when they write). A write that fails (a full disk, a read-only directory) stops
//! the cache from writing, with one warning on stderr; reads of what is cached go on.
//!
//! Whoever can write in the directory can plant files there, so the cache follows no link
//! inside it: its directories must be directories, not links (a shard directory that is a
//! link is neither read nor written); an entry is opened without following a link and
//! without blocking, must be a regular file of the length its header records, and is read no
//! further; anything else is a broken entry, removed and fetched again. Temporary files are
//! created new, never opened through what is already there.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;

use dlrs_core::sync::lock;

use crate::dataset::{DEFAULT_MAX_BYTES, Dataset};
use crate::error::Error;
use crate::no_follow;
use crate::stats::IoStats;

/// The entry format's version, the name of the directory the entries are in.
const VERSION_DIR: &str = "v1";

/// An entry's first bytes.
const MAGIC: &[u8; 8] = b"DLRSCE1\0";

/// Magic, key check, payload length, CRC-32, reserved.
const HEADER: usize = 8 + 8 + 8 + 4 + 4;

/// How often a writer lists the directory again to learn the other processes' entries.
const RESCAN: Duration = Duration::from_secs(1);

/// Temporary files older than this are left over by a process that died; they are removed.
const STALE_TEMP: Duration = Duration::from_secs(600);

/// Names tried for one temporary file: a name taken (by a planted file) moves on to the next.
const TEMP_TRIES: u32 = 8;

/// A stable 64-bit hash of `data` (FNV-1a, then a SplitMix64 finish), the same in every
/// process and build: the cache's and the tar index's file names come from it.
pub(crate) fn stable_hash(data: &[u8], seed: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// An item's place in the cache: its rank (the file name, and the order of admission) and a
/// second hash that tells two keys of one rank apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheKey {
    rank: u64,
    check: u64,
}

impl CacheKey {
    /// The place of the item whose key is `key` (a URL, a shard and a byte range, ...).
    pub fn of(key: &str) -> CacheKey {
        CacheKey {
            rank: stable_hash(key.as_bytes(), 1),
            check: stable_hash(key.as_bytes(), 2),
        }
    }

    /// The rank: lower ranks are kept first when the budget is short.
    pub fn rank(&self) -> u64 {
        self.rank
    }
}

/// What the cache has done since it was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheSnapshot {
    /// Items read from the cache.
    pub hits: u64,
    /// Items looked up and not found (or found corrupt).
    pub misses: u64,
    /// Items written.
    pub written: u64,
    /// Items not admitted (over the budget, and ranked above every cached item).
    pub not_admitted: u64,
    /// Entries found truncated or corrupt (and removed).
    pub corrupt: u64,
    /// Entries removed to make room for items of lower rank.
    pub evicted: u64,
    /// The bytes this process counts in the directory (entries and their headers).
    pub bytes: u64,
    /// Whether writing stopped after a failed write.
    pub writes_off: bool,
}

#[derive(Debug, Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    written: AtomicU64,
    not_admitted: AtomicU64,
    corrupt: AtomicU64,
    evicted: AtomicU64,
}

/// What this process knows of the directory: rank → bytes on disk.
#[derive(Debug)]
struct Known {
    entries: BTreeMap<u64, u64>,
    used: u64,
    scanned: Instant,
}

impl Known {
    fn insert(&mut self, rank: u64, size: u64) {
        if let Some(old) = self.entries.insert(rank, size) {
            self.used -= old;
        }
        self.used += size;
    }

    fn remove(&mut self, rank: u64) {
        if let Some(old) = self.entries.remove(&rank) {
            self.used -= old;
        }
    }
}

/// A cache directory with a byte budget: the items of lowest rank that fit are kept, written
/// atomically and checked when read (see [`Cached`] for a dataset read through one).
#[derive(Debug)]
pub struct Cache {
    dir: PathBuf,
    root: PathBuf,
    budget: u64,
    known: Mutex<Known>,
    writes_off: AtomicBool,
    temp_names: AtomicU64,
    counters: Counters,
}

impl Cache {
    /// Opens (or creates) the cache in `dir`, which keeps at most `budget` bytes (`None`: no
    /// limit but the disk's). Lists what other runs left there.
    pub fn open(dir: impl Into<PathBuf>, budget: Option<u64>) -> Result<Arc<Cache>, Error> {
        let dir = dir.into();
        let root = dir.join(VERSION_DIR);
        let shown = dir.display().to_string();
        // The directory given may be a link (the user's choice); what is inside it may not.
        fs::create_dir_all(&dir).map_err(|e| Error::io(&shown, e))?;
        for inner in [root.clone(), root.join("tmp")] {
            own_dir(&inner).map_err(|e| Error::io(&inner.display().to_string(), e))?;
        }
        let cache = Cache {
            dir,
            root,
            budget: budget.unwrap_or(u64::MAX),
            known: Mutex::new(Known {
                entries: BTreeMap::new(),
                used: 0,
                scanned: Instant::now(),
            }),
            writes_off: AtomicBool::new(false),
            temp_names: AtomicU64::new(0),
            counters: Counters::default(),
        };
        cache.remove_stale_temps();
        cache.rescan();
        Ok(Arc::new(cache))
    }

    /// The directory given.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The budget in bytes (`u64::MAX`: none).
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// The counters now.
    pub fn snapshot(&self) -> CacheSnapshot {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CacheSnapshot {
            hits: load(&c.hits),
            misses: load(&c.misses),
            written: load(&c.written),
            not_admitted: load(&c.not_admitted),
            corrupt: load(&c.corrupt),
            evicted: load(&c.evicted),
            bytes: lock(&self.known).used,
            writes_off: self.writes_off.load(Ordering::Relaxed),
        }
    }

    fn path(&self, rank: u64) -> PathBuf {
        self.root
            .join(format!("{:02x}", rank >> 56))
            .join(format!("{rank:016x}"))
    }

    /// Reads the entry of `key`, if it is there and whole (blocking).
    pub fn get(&self, key: CacheKey) -> Option<Bytes> {
        let found = self.read(key);
        let counter = if found.is_some() {
            &self.counters.hits
        } else {
            &self.counters.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    fn read(&self, key: CacheKey) -> Option<Bytes> {
        let path = self.path(key.rank);
        // A link in place of a directory: nothing is read (or removed) through it.
        if !self.in_own_dirs(&path) {
            return None;
        }
        match read_entry(&path, key, self.budget) {
            Entry::Whole(data) => {
                lock(&self.known).insert(key.rank, data.len() as u64);
                Some(Bytes::from(data).slice(HEADER..))
            }
            // Nothing, or another key's entry of the same rank (not broken).
            Entry::OtherKey | Entry::Missing => None,
            Entry::Broken => {
                self.counters.corrupt.fetch_add(1, Ordering::Relaxed);
                let _ = fs::remove_file(&path);
                lock(&self.known).remove(key.rank);
                None
            }
        }
    }

    /// Removes the entry of `rank`, unless a link is in place of one of its directories.
    fn remove(&self, rank: u64) {
        let path = self.path(rank);
        if self.in_own_dirs(&path) {
            let _ = fs::remove_file(path);
        }
    }

    /// Whether the directories of the entry at `path` are directories, not links.
    fn in_own_dirs(&self, path: &Path) -> bool {
        is_own_dir(&self.root) && path.parent().is_some_and(is_own_dir)
    }

    /// Writes `body` as the entry of `key` if the budget admits it (blocking). A failed write
    /// stops the cache from writing (one warning); the item is simply not cached.
    pub fn put(&self, key: CacheKey, body: &[u8]) {
        if self.writes_off.load(Ordering::Relaxed) {
            return;
        }
        let size = (HEADER + body.len()) as u64;
        let Some(evicted) = self.admit(key.rank, size) else {
            self.counters.not_admitted.fetch_add(1, Ordering::Relaxed);
            return;
        };
        for rank in &evicted {
            self.remove(*rank);
        }
        self.counters
            .evicted
            .fetch_add(evicted.len() as u64, Ordering::Relaxed);
        match self.write(key, body) {
            Ok(true) => {
                self.counters.written.fetch_add(1, Ordering::Relaxed);
            }
            // The shard directory is a link: this item is not cached, the others are.
            Ok(false) => lock(&self.known).remove(key.rank),
            Err(e) => {
                lock(&self.known).remove(key.rank);
                self.stop_writing(&e);
            }
        }
    }

    /// Reserves `size` bytes for the entry of `rank`: the ranks to evict for it, or `None`
    /// when it is not admitted (or is cached already).
    fn admit(&self, rank: u64, size: u64) -> Option<Vec<u64>> {
        if size > self.budget {
            return None;
        }
        let stale = lock(&self.known).scanned.elapsed() >= RESCAN;
        if stale {
            self.rescan();
        }
        let mut known = lock(&self.known);
        if known.entries.contains_key(&rank) {
            return None;
        }
        let mut evicted = Vec::new();
        let mut used = known.used;
        for (&other, &other_size) in known.entries.iter().rev() {
            if used.saturating_add(size) <= self.budget || other <= rank {
                break;
            }
            used -= other_size;
            evicted.push(other);
        }
        if used.saturating_add(size) > self.budget {
            return None;
        }
        for other in &evicted {
            known.remove(*other);
        }
        known.insert(rank, size);
        Some(evicted)
    }

    /// Writes the entry of `key`: `Ok(false)` when its shard directory is a link (or not a
    /// directory) or a directory is in the entry's place, which are left alone.
    fn write(&self, key: CacheKey, body: &[u8]) -> io::Result<bool> {
        let target = self.path(key.rank);
        let Some(dir) = target.parent() else {
            return Ok(false);
        };
        for own in [&self.root, &self.root.join("tmp")] {
            if !is_own_dir(own) {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!("{} is not a directory", own.display()),
                ));
            }
        }
        match own_dir(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotADirectory => return Ok(false),
            other => other?,
        }
        let (temp, mut file) = self.create_temp(&self.root.join("tmp"), key.rank)?;
        let written = (|| {
            file.write_all(&header(key, body))?;
            file.write_all(body)?;
            drop(file);
            fs::rename(&temp, &target)
        })();
        if written.is_err() {
            let _ = fs::remove_file(&temp);
        }
        match written {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::IsADirectory => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// A new temporary file in `temps`, created where nothing is: never through a link or
    /// into a file planted under its name.
    fn create_temp(&self, temps: &Path, rank: u64) -> io::Result<(PathBuf, File)> {
        no_follow::create_new(TEMP_TRIES, |_| {
            temps.join(format!(
                "{rank:016x}.{}.{}",
                std::process::id(),
                self.temp_names.fetch_add(1, Ordering::Relaxed)
            ))
        })
    }

    fn stop_writing(&self, error: &io::Error) {
        if !self.writes_off.swap(true, Ordering::Relaxed) {
            eprintln!(
                "dataloader-rs: the cache in {} stops writing ({error}); items are fetched \
                 from their source",
                self.dir.display()
            );
        }
    }

    /// Lists the entries in the directory again (sizes of the entries not known yet read
    /// from their metadata).
    fn rescan(&self) {
        let old: BTreeMap<u64, u64> = lock(&self.known).entries.clone();
        let mut entries = BTreeMap::new();
        let Ok(dirs) = fs::read_dir(&self.root) else {
            return;
        };
        for dir in dirs.flatten() {
            let name = dir.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.len() != 2 || u8::from_str_radix(name, 16).is_err() {
                continue;
            }
            // The file type of the name itself: a link to a directory is not listed.
            if !dir.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let Ok(files) = fs::read_dir(dir.path()) else {
                continue;
            };
            for file in files.flatten() {
                let name = file.file_name();
                let Some(rank) = name
                    .to_str()
                    .filter(|n| n.len() == 16)
                    .and_then(|n| u64::from_str_radix(n, 16).ok())
                else {
                    continue;
                };
                if !file.file_type().is_ok_and(|t| t.is_file()) {
                    continue;
                }
                let size = match old.get(&rank) {
                    Some(&size) => size,
                    None => match file.metadata() {
                        Ok(m) => m.len(),
                        Err(_) => continue,
                    },
                };
                entries.insert(rank, size);
            }
        }
        let used = entries.values().sum();
        *lock(&self.known) = Known {
            entries,
            used,
            scanned: Instant::now(),
        };
    }

    fn remove_stale_temps(&self) {
        let Ok(temps) = fs::read_dir(self.root.join("tmp")) else {
            return;
        };
        for temp in temps.flatten() {
            let old = temp
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > STALE_TEMP);
            if old {
                let _ = fs::remove_file(temp.path());
            }
        }
    }
}

fn header(key: CacheKey, body: &[u8]) -> [u8; HEADER] {
    let mut out = [0u8; HEADER];
    out[..8].copy_from_slice(MAGIC);
    out[8..16].copy_from_slice(&key.check.to_le_bytes());
    out[16..24].copy_from_slice(&(body.len() as u64).to_le_bytes());
    out[24..28].copy_from_slice(&crc32fast::hash(body).to_le_bytes());
    out
}

/// Whether `path` is a directory itself (not a link to one).
fn is_own_dir(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// Makes the directory `path` of the cache if it is missing; an error if something else is
/// there (a link, a file).
fn own_dir(path: &Path) -> io::Result<()> {
    match fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
        Err(_) if is_own_dir(path) => Ok(()),
        Err(_) => Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            "not a directory (the cache follows no link inside its directory)",
        )),
    }
}

/// What is at an entry's place.
enum Entry {
    /// The entry of the key asked for, header and payload.
    Whole(Vec<u8>),
    /// Nothing, or nothing this process may read.
    Missing,
    /// The entry of another key of the same rank.
    OtherKey,
    /// Not a whole entry: to remove.
    Broken,
}

/// Reads the entry at `path`, of at most `budget` bytes: never through a link, never blocking
/// (on a FIFO), never further than the length its header records.
fn read_entry(path: &Path, key: CacheKey, budget: u64) -> Entry {
    let mut file = match no_follow::open(path) {
        Ok(file) => file,
        // A link (ELOOP), a socket (ENXIO): not an entry.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENXIO)) => {
            return Entry::Broken;
        }
        Err(_) => return Entry::Missing,
    };
    let Ok(meta) = file.metadata() else {
        return Entry::Missing;
    };
    if !meta.is_file() {
        return Entry::Broken;
    }
    let mut head = [0u8; HEADER];
    if file.read_exact(&mut head).is_err() || &head[..8] != MAGIC {
        return Entry::Broken;
    }
    let word = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().unwrap_or_default());
    if word(8) != key.check {
        return Entry::OtherKey;
    }
    let len = word(16);
    // An entry over the budget is never written, and its file holds exactly what it records.
    let size = len.checked_add(HEADER as u64).filter(|&s| s <= budget);
    let Some(size) = size.filter(|&s| s == meta.len()) else {
        return Entry::Broken;
    };
    // What is beyond an item's usual size is not reserved before it is read.
    let Ok(capacity) = usize::try_from(size.min(DEFAULT_MAX_BYTES)) else {
        return Entry::Broken;
    };
    let mut data = Vec::with_capacity(capacity);
    data.extend_from_slice(&head);
    // One byte more than recorded, to tell an entry that grew since.
    if file.take(len + 1).read_to_end(&mut data).is_err() {
        return Entry::Broken;
    }
    let body = &data[HEADER..];
    let crc = u32::from_le_bytes(head[24..28].try_into().unwrap_or_default());
    if body.len() as u64 != len || crc32fast::hash(body) != crc {
        return Entry::Broken;
    }
    Entry::Whole(data)
}

/// A dataset read through a [`Cache`]: an item found there is not fetched; an item fetched is
/// written there (if admitted) before it is returned. Items whose dataset gives no
/// [`Dataset::cache_key`] are fetched as they are.
#[derive(Clone)]
pub struct Cached {
    inner: Arc<dyn Dataset>,
    cache: Arc<Cache>,
}

impl std::fmt::Debug for Cached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cached")
            .field("len", &self.inner.len())
            .field("cache", &self.cache.dir)
            .finish_non_exhaustive()
    }
}

impl Cached {
    /// `dataset`, read through `cache`.
    pub fn new(dataset: Arc<dyn Dataset>, cache: Arc<Cache>) -> Cached {
        Cached {
            inner: dataset,
            cache,
        }
    }

    /// The cache.
    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }
}

impl Dataset for Cached {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn fetch(&self, index: u64) -> BoxFuture<'static, Result<Bytes, Error>> {
        let Some(key) = self.inner.cache_key(index) else {
            return self.inner.fetch(index);
        };
        let key = CacheKey::of(&key);
        let (inner, cache) = (self.inner.clone(), self.cache.clone());
        Box::pin(async move {
            let reader = cache.clone();
            if let Ok(Some(body)) = tokio::task::spawn_blocking(move || reader.get(key)).await {
                if let Some(stats) = inner.io_stats() {
                    stats.cache_hit();
                }
                return Ok(body);
            }
            let body = inner.fetch(index).await?;
            let copy = body.clone();
            // A failed write only leaves the item out of the cache.
            let _ = tokio::task::spawn_blocking(move || cache.put(key, &copy)).await;
            Ok(body)
        })
    }

    fn io_stats(&self) -> Option<&IoStats> {
        self.inner.io_stats()
    }

    fn cache_key(&self, index: u64) -> Option<String> {
        self.inner.cache_key(index)
    }
}

/// Makes the cache's writes fail, as a full disk does (tests only).
#[cfg(test)]
impl Cache {
    fn fail_writes(self: &Arc<Self>) -> Arc<Cache> {
        // A file where the temporary directory should be: every write fails.
        let tmp = self.root.join("tmp");
        fs::remove_dir_all(&tmp).unwrap();
        fs::write(&tmp, b"").unwrap();
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::TempDir;

    fn body(i: u64, len: usize) -> Vec<u8> {
        (0..len).map(|j| (i as usize * 7 + j) as u8).collect()
    }

    #[test]
    fn stable_hashes() {
        // Fixed values: a change would orphan every cache and index on disk.
        assert_eq!(stable_hash(b"", 0), stable_hash(b"", 0));
        assert_ne!(stable_hash(b"a", 1), stable_hash(b"a", 2));
        assert_ne!(stable_hash(b"a", 1), stable_hash(b"b", 1));
        assert_eq!(stable_hash(b"http://h/x", 1), 0xa883_be39_73e8_cac7);
    }

    #[test]
    fn entries_round_trip_across_opens() {
        let dir = TempDir::new();
        let cache = Cache::open(&dir.0, None).unwrap();
        let key = CacheKey::of("http://h/0");
        assert_eq!(cache.get(key), None);
        cache.put(key, &body(0, 1000));
        assert_eq!(cache.get(key).unwrap(), body(0, 1000));
        assert_eq!(cache.get(CacheKey::of("http://h/1")), None);
        let again = Cache::open(&dir.0, None).unwrap();
        assert_eq!(again.get(key).unwrap(), body(0, 1000));
        assert_eq!(again.snapshot().bytes, (HEADER + 1000) as u64);
        let s = cache.snapshot();
        assert_eq!((s.hits, s.misses, s.written), (1, 2, 1));
    }

    #[test]
    fn corrupt_and_truncated_entries_are_dropped() {
        let dir = TempDir::new();
        let cache = Cache::open(&dir.0, None).unwrap();
        for (i, damage) in [
            |d: &mut Vec<u8>| d.truncate(d.len() - 1),
            |d: &mut Vec<u8>| *d.last_mut().unwrap() ^= 1,
            |d: &mut Vec<u8>| d[0] = b'X',
            |d: &mut Vec<u8>| d.truncate(10),
        ]
        .into_iter()
        .enumerate()
        {
            let key = CacheKey::of(&format!("k{i}"));
            cache.put(key, &body(1, 300));
            let path = cache.path(key.rank);
            let mut data = fs::read(&path).unwrap();
            damage(&mut data);
            fs::write(&path, &data).unwrap();
            assert_eq!(cache.get(key), None, "damage {i}");
            assert!(!path.exists(), "damage {i}");
            // Written again, it is read again.
            cache.put(key, &body(1, 300));
            assert_eq!(cache.get(key).unwrap(), body(1, 300));
        }
        assert_eq!(cache.snapshot().corrupt, 4);
    }

    #[test]
    fn a_budget_keeps_the_lowest_ranks_whatever_the_order() {
        let keys: Vec<CacheKey> = (0..200)
            .map(|i| CacheKey::of(&format!("item {i}")))
            .collect();
        let entry = (HEADER + 100) as u64;
        let budget = 50 * entry;
        let mut by_rank: Vec<usize> = (0..200).collect();
        by_rank.sort_by_key(|&i| keys[i].rank);
        let lowest: Vec<usize> = by_rank[..50].to_vec();
        let mut sets = Vec::new();
        for order in [0u64, 1, 2] {
            let dir = TempDir::new();
            let cache = Cache::open(&dir.0, Some(budget)).unwrap();
            let mut indices: Vec<usize> = (0..200).collect();
            // Three different orders: forward, backward, interleaved.
            match order {
                1 => indices.reverse(),
                2 => indices.sort_by_key(|i| (i % 7, *i)),
                _ => {}
            }
            for epoch in 0..3 {
                let mut hits = 0;
                for &i in &indices {
                    if cache.get(keys[i]).is_some() {
                        hits += 1;
                    } else {
                        cache.put(keys[i], &body(i as u64, 100));
                    }
                }
                if epoch > 0 {
                    assert_eq!(hits, 50, "order {order}, epoch {epoch}");
                }
            }
            assert!(cache.snapshot().bytes <= budget);
            let mut cached: Vec<usize> = (0..200)
                .filter(|&i| cache.path(keys[i].rank).exists())
                .collect();
            cached.sort_by_key(|&i| keys[i].rank);
            assert_eq!(cached, lowest, "order {order}");
            sets.push(cached);
        }
        assert_eq!(sets[0], sets[1]);
    }

    #[test]
    fn processes_sharing_a_directory_learn_each_others_entries() {
        let dir = TempDir::new();
        let entry = (HEADER + 100) as u64;
        let a = Cache::open(&dir.0, Some(10 * entry)).unwrap();
        let b = Cache::open(&dir.0, Some(10 * entry)).unwrap();
        let keys: Vec<CacheKey> = (0..40)
            .map(|i| CacheKey::of(&format!("shared {i}")))
            .collect();
        for (i, key) in keys.iter().enumerate().take(20) {
            a.put(*key, &body(i as u64, 100));
        }
        // b reads what a wrote, without listing the directory.
        assert!(keys[..20].iter().filter_map(|k| b.get(*k)).count() == 10);
        // Once b lists the directory again, its writes respect the budget both share.
        b.known.lock().unwrap().scanned -= RESCAN;
        for (i, key) in keys.iter().enumerate().skip(20) {
            b.put(*key, &body(i as u64, 100));
        }
        let on_disk = keys.iter().filter(|k| b.path(k.rank).exists()).count();
        assert_eq!(on_disk, 10);
        let mut ranks: Vec<u64> = keys.iter().map(|k| k.rank).collect();
        ranks.sort_unstable();
        assert!(
            keys.iter()
                .filter(|k| b.path(k.rank).exists())
                .all(|k| k.rank <= ranks[9]),
            "the lowest ranks of all 40"
        );
    }

    #[test]
    fn a_failed_write_stops_writing_and_reads_go_on() {
        let dir = TempDir::new();
        let cache = Cache::open(&dir.0, None).unwrap();
        let kept = CacheKey::of("kept");
        cache.put(kept, b"before");
        let cache = cache.fail_writes();
        cache.put(CacheKey::of("lost"), b"after");
        cache.put(CacheKey::of("lost too"), b"after");
        let s = cache.snapshot();
        assert!(s.writes_off);
        assert_eq!(s.written, 1);
        assert_eq!(cache.get(CacheKey::of("lost")), None);
        assert_eq!(cache.get(kept).unwrap(), &b"before"[..]);
        assert_eq!(cache.snapshot().bytes, (HEADER + 6) as u64);
    }

    /// The place of `key`'s entry, its shard directory made.
    fn place(cache: &Cache, key: CacheKey) -> PathBuf {
        let path = cache.path(key.rank);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        path
    }

    /// A cache in a new directory, the key of `name` and the place of its entry.
    fn cache_and_place(name: &str) -> (TempDir, Arc<Cache>, CacheKey, PathBuf) {
        let dir = TempDir::new();
        let cache = Cache::open(dir.join("cache"), None).unwrap();
        let key = CacheKey::of(name);
        let path = place(&cache, key);
        (dir, cache, key, path)
    }

    /// The bytes of the entry of `key` holding `data`, as a cache writes it.
    fn entry_bytes(key: CacheKey, data: &[u8]) -> Vec<u8> {
        let dir = TempDir::new();
        let cache = Cache::open(&dir.0, None).unwrap();
        cache.put(key, data);
        fs::read(cache.path(key.rank)).unwrap()
    }

    /// A directory holding an empty `outside` and a cache opened in `cache`.
    fn cache_beside_outside() -> (TempDir, PathBuf, Arc<Cache>) {
        let dir = TempDir::new();
        let outside = dir.join("outside");
        fs::create_dir(&outside).unwrap();
        let cache = Cache::open(dir.join("cache"), None).unwrap();
        (dir, outside, cache)
    }

    /// `cache` still writes and reads `other` (its body numbered `n`): one write in all, and
    /// writes are not off.
    fn assert_other_items_cached(cache: &Cache, other: CacheKey, n: u64) {
        cache.put(other, &body(n, 100));
        assert_eq!(cache.get(other).unwrap(), body(n, 100));
        let s = cache.snapshot();
        assert_eq!((s.written, s.writes_off), (1, false));
    }

    #[test]
    fn a_link_in_place_of_an_entry_is_a_broken_entry() {
        let (dir, cache, key, path) = cache_and_place("linked");
        // Read through the link, /dev/zero fills the memory: it has no end.
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        assert_eq!(cache.get(key), None);
        assert!(fs::symlink_metadata(&path).is_err(), "the link is removed");
        assert_eq!(cache.snapshot().corrupt, 1);
        cache.put(key, &body(2, 100));
        assert_eq!(cache.get(key).unwrap(), body(2, 100));
        // A link to a whole entry of the key is not followed either, nor its target removed.
        let elsewhere = dir.join("elsewhere");
        fs::write(&elsewhere, entry_bytes(key, &body(3, 100))).unwrap();
        fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert_eq!(cache.get(key), None);
        assert!(elsewhere.exists());
        assert_eq!(cache.snapshot().corrupt, 2);
    }

    #[test]
    fn a_fifo_in_place_of_an_entry_is_a_broken_entry() {
        use std::os::unix::ffi::OsStrExt;
        let (_dir, cache, key, path) = cache_and_place("fifo");
        let name = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: `name` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        // Opened for reading, a FIFO without a writer blocks: the read runs on a thread, and
        // a minute without an answer is a hang.
        let (sender, answers) = std::sync::mpsc::channel();
        let reader = cache.clone();
        std::thread::spawn(move || sender.send(reader.get(key)));
        let answer = answers.recv_timeout(Duration::from_secs(60));
        assert_eq!(answer, Ok(None), "the read of a FIFO hangs");
        assert!(fs::symlink_metadata(&path).is_err(), "the FIFO is removed");
        assert_eq!(cache.snapshot().corrupt, 1);
        cache.put(key, &body(4, 100));
        assert_eq!(cache.get(key).unwrap(), body(4, 100));
    }

    #[test]
    fn a_directory_in_place_of_an_entry_leaves_that_item_uncached() {
        let (_dir, cache, key, path) = cache_and_place("a directory");
        fs::create_dir(&path).unwrap();
        assert_eq!(cache.get(key), None);
        cache.put(key, &body(9, 100));
        assert!(path.is_dir());
        assert_eq!(cache.get(key), None);
        // The cache goes on writing the other items.
        assert_other_items_cached(&cache, CacheKey::of("a file"), 10);
    }

    #[test]
    fn a_linked_shard_directory_is_neither_written_nor_read() {
        let (_dir, outside, cache) = cache_beside_outside();
        let key = CacheKey::of("through a link");
        let shard = cache.path(key.rank).parent().unwrap().to_owned();
        std::os::unix::fs::symlink(&outside, &shard).unwrap();
        cache.put(key, &body(5, 100));
        assert_eq!(
            fs::read_dir(&outside).unwrap().count(),
            0,
            "written outside"
        );
        assert_eq!(cache.get(key), None);
        // An entry outside is not read through the link, nor removed.
        let planted = outside.join(format!("{:016x}", key.rank));
        fs::write(&planted, entry_bytes(key, &body(6, 100))).unwrap();
        assert_eq!(cache.get(key), None);
        assert!(planted.exists());
        // The items of the other shard directories are cached.
        let other = (0..)
            .map(|i| CacheKey::of(&format!("other {i}")))
            .find(|k| k.rank >> 56 != key.rank >> 56)
            .unwrap();
        assert_other_items_cached(&cache, other, 7);
    }

    #[test]
    fn a_version_directory_linked_after_open_stops_the_writes() {
        let (dir, outside, cache) = cache_beside_outside();
        let kept = CacheKey::of("kept");
        cache.put(kept, &body(11, 100));
        fs::rename(&cache.root, dir.join("moved")).unwrap();
        fs::create_dir(outside.join("tmp")).unwrap();
        std::os::unix::fs::symlink(&outside, &cache.root).unwrap();
        let key = CacheKey::of("after the swap");
        cache.put(key, &body(12, 100));
        let mut names: Vec<_> = fs::read_dir(&outside).unwrap().flatten().collect();
        names.retain(|e| e.file_name() != "tmp");
        assert!(names.is_empty(), "written outside: {names:?}");
        assert_eq!(fs::read_dir(outside.join("tmp")).unwrap().count(), 0);
        assert!(cache.snapshot().writes_off);
        assert_eq!(cache.get(kept), None);
    }

    #[test]
    fn a_planted_temporary_name_is_not_written_through() {
        let dir = TempDir::new();
        let cache = Cache::open(dir.join("cache"), None).unwrap();
        let victim = dir.join("victim");
        fs::write(&victim, b"keep").unwrap();
        let key = CacheKey::of("planted");
        // The name of this process's first temporary file for `key`.
        let temp =
            cache
                .root
                .join("tmp")
                .join(format!("{:016x}.{}.0", key.rank, std::process::id()));
        std::os::unix::fs::symlink(&victim, &temp).unwrap();
        cache.put(key, &body(8, 100));
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
        assert_eq!(cache.get(key).unwrap(), body(8, 100));
        assert!(!cache.snapshot().writes_off);
    }

    #[test]
    fn a_linked_version_directory_is_refused() {
        let dir = TempDir::new();
        let outside = dir.join("outside");
        fs::create_dir(&outside).unwrap();
        fs::create_dir(dir.join("cache")).unwrap();
        let linked = dir.join("cache").join(VERSION_DIR);
        std::os::unix::fs::symlink(&outside, &linked).unwrap();
        let error = Cache::open(dir.join("cache"), None).unwrap_err();
        crate::test_util::assert_io(&error, io::ErrorKind::NotADirectory);
        crate::test_util::assert_starts_with(&error, &format!("{}: ", linked.display()));
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    }

    /// Two shards at one path and two queries, without ETag: each item is cached apart.
    #[cfg(feature = "http")]
    #[test]
    fn tar_shards_that_differ_by_their_query_are_cached_apart() {
        use crate::test_util::fetch;
        use crate::{Runtime, TarDataset, TarOptions, test_server::LoopbackServer};
        let shard = |text: &[u8]| -> Vec<u8> {
            let mut builder = ::tar::Builder::new(Vec::new());
            let mut header = ::tar::Header::new_ustar();
            header.set_size(text.len() as u64);
            header.set_mode(0o644);
            builder
                .append_data(&mut header, "000001.txt", text)
                .unwrap();
            builder.into_inner().unwrap()
        };
        let runtime = Runtime::new(Some(1)).unwrap();
        let server = LoopbackServer::files().unwrap();
        server.put_file("/get?name=one.tar", shard(b"shard one"), "");
        server.put_file("/get?name=two.tar", shard(b"shard two"), "");
        let locations = vec![
            server.url("/get?name=one.tar"),
            server.url("/get?name=two.tar"),
        ];
        let dataset = runtime
            .block_on(TarDataset::open(locations, TarOptions::default()))
            .unwrap()
            .unwrap();
        let dir = TempDir::new();
        let cache = Cache::open(&dir.0, None).unwrap();
        let cached = Cached::new(Arc::new(dataset), cache.clone());
        let holds = |item: &Bytes, text: &[u8]| item.windows(text.len()).any(|w| w == text);
        for epoch in 0..2 {
            let one = fetch(&runtime, &cached, 0).unwrap();
            let two = fetch(&runtime, &cached, 1).unwrap();
            assert!(holds(&one, b"shard one"), "epoch {epoch}");
            assert!(holds(&two, b"shard two"), "epoch {epoch}");
        }
        let s = cache.snapshot();
        assert_eq!((s.written, s.hits), (2, 2));
    }

    #[test]
    fn an_item_over_the_budget_is_not_admitted() {
        let dir = TempDir::new();
        let cache = Cache::open(&dir.0, Some(100)).unwrap();
        cache.put(CacheKey::of("big"), &[0; 100]);
        assert_eq!(cache.snapshot().not_admitted, 1);
        assert_eq!(cache.get(CacheKey::of("big")), None);
        assert!(Cache::open("/proc/no/such/dir", None).is_err());
    }
}
