//! TarDataset end to end: shards of every tar format as files, on the loopback server with
//! ranges and ETags, changed or broken shards, kept indexes, and a cache over the dataset.

use std::path::Path;

use super::parse::tests::{Long, Writer};
use super::*;
use crate::runtime::Runtime;
use crate::test_server::LoopbackServer;
use crate::test_util::{TempDir, assert_too_large, fetch};
use crate::{Cache, Cached, ErrorKind, RetryOptions};

/// The bytes of member `ext` of sample `key` in the test shards.
fn content(key: &str, ext: &str) -> Vec<u8> {
    if ext == "cls" {
        return key.trim_start_matches('0').as_bytes().to_vec();
    }
    let seed = key.bytes().map(u32::from).sum::<u32>();
    (0..700 + seed as usize % 900)
        .map(|i| (i as u32 * 31 + seed) as u8)
        .collect()
}

/// A shard of samples `keys`, each a `jpg` and a `cls`, with a directory entry and a file
/// that belongs to no sample between them.
fn shard(keys: &[&str], long: Long) -> Vec<u8> {
    let mut w = Writer::new();
    w.special("images/", b'5');
    for key in keys {
        w.file(&format!("{key}.jpg"), &content(key, "jpg"), long);
        w.file(&format!("{key}.cls"), &content(key, "cls"), long);
    }
    w.file("README", b"not a sample", long);
    w.finish()
}

/// A one-thread runtime and a directory for the shards of a test.
fn runtime_and_dir() -> (Runtime, TempDir) {
    (Runtime::new(Some(1)).unwrap(), TempDir::new())
}

fn fast() -> FetchOptions {
    FetchOptions {
        retry: RetryOptions {
            retries: 1,
            backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(2),
        },
        ..FetchOptions::HTTP
    }
}

/// Writes the shard `s.tar` of `members` (name, content) in `dir`: its location.
fn write_shard(dir: &Path, members: &[(&str, &[u8])], long: Long) -> String {
    let mut w = Writer::new();
    for (name, data) in members {
        w.file(name, data, long);
    }
    let path = dir.join("s.tar");
    std::fs::write(&path, w.finish()).unwrap();
    path.display().to_string()
}

fn options(index_dir: Option<&Path>) -> TarOptions {
    TarOptions {
        fetch: fast(),
        index_dir: index_dir.map(Path::to_owned),
        ..TarOptions::default()
    }
}

fn open(runtime: &Runtime, locations: &[String], options: TarOptions) -> Result<TarDataset, Error> {
    runtime
        .block_on(TarDataset::open(locations.to_vec(), options))
        .unwrap()
}

fn members(sample: &Sample) -> Vec<(String, Vec<u8>)> {
    sample
        .members()
        .map(|(e, b)| (e.to_owned(), b.to_vec()))
        .collect()
}

fn expected(key: &str) -> Vec<(String, Vec<u8>)> {
    vec![
        ("jpg".to_owned(), content(key, "jpg")),
        ("cls".to_owned(), content(key, "cls")),
    ]
}

#[test]
fn file_shards_of_every_format() {
    let (runtime, dir) = runtime_and_dir();
    let long_key = format!("{}/{}", "nested".repeat(20), "000003");
    let formats = [Long::Ustar, Long::Gnu, Long::Pax];
    let mut locations = Vec::new();
    for (i, long) in formats.into_iter().enumerate() {
        let path = dir.join(format!("shard-{i}.tar"));
        std::fs::write(&path, shard(&["000001", "000002", &long_key], long)).unwrap();
        locations.push(path.display().to_string());
    }
    let dataset = open(&runtime, &locations, options(None)).unwrap();
    assert_eq!(dataset.len(), 9);
    assert_eq!(dataset.shards(), 3);
    for i in 0..9u64 {
        let key = ["000001", "000002", long_key.as_str()][i as usize % 3];
        assert_eq!(dataset.key(i), Some(key));
        assert_eq!(dataset.extensions(i), Some(vec!["jpg", "cls"]));
        assert_eq!(
            dataset.shard_of(i),
            Some(locations[i as usize / 3].as_str())
        );
        let item = fetch(&runtime, &dataset, i).unwrap();
        let sample = Sample::from_fragment(&item).unwrap();
        assert_eq!(sample.key(), key);
        assert_eq!(members(&sample), expected(key), "sample {i}");
        // The members are views of the one buffer read.
        let jpg = sample.get("jpg").unwrap();
        assert!(item.as_ptr_range().contains(&jpg.as_ptr()));
        let whole = runtime.block_on(dataset.sample(i)).unwrap().unwrap();
        assert_eq!(whole, sample);
    }
    let stats = dataset.io_stats().unwrap().snapshot();
    assert_eq!(stats.retries, 0);
    assert!(matches!(
        fetch(&runtime, &dataset, 9),
        Err(Error::IndexOutOfRange { index: 9, len: 9 })
    ));
    assert_eq!(dataset.key(9), None);
}

#[test]
fn one_member_per_item() {
    let (runtime, dir) = runtime_and_dir();
    let jpg = content("a", "jpg");
    let members: [(&str, &[u8]); 3] = [("a.jpg", &jpg), ("a.cls", b"1"), ("b.cls", b"2")];
    let locations = vec![write_shard(&dir, &members, Long::Pax)];
    let dataset = open(
        &runtime,
        &locations,
        TarOptions {
            member: Some("jpg".into()),
            ..options(None)
        },
    )
    .unwrap();
    assert_eq!(dataset.member(), Some("jpg"));
    assert_eq!(fetch(&runtime, &dataset, 0).unwrap(), content("a", "jpg"));
    let error = fetch(&runtime, &dataset, 1).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidData);
    assert_eq!(
        error.to_string(),
        format!(
            "{}: sample b: it has no member \"jpg\" (its members: cls)",
            locations[0]
        )
    );
}

#[test]
fn a_member_or_a_sample_over_max_bytes_is_too_large() {
    let (runtime, dir) = runtime_and_dir();
    let members: [(&str, &[u8]); 5] = [
        ("a.jpg", &[0; 2000]),
        ("a.cls", b"1"),
        ("b.jpg", &[0; 3101]),
        ("c.jpg", &[0; 1500]),
        ("c.cls", &[0; 1500]),
    ];
    let locations = vec![write_shard(&dir, &members, Long::Ustar)];
    let mut small = options(None);
    small.fetch.max_bytes = 3100;
    let dataset = open(&runtime, &locations, small).unwrap();
    // Sample a is read with its headers: 512 + 2048 + 512 + 1 bytes.
    let item = fetch(&runtime, &dataset, 0).unwrap();
    assert_eq!(item.len(), 3073);
    assert_eq!(Sample::from_fragment(&item).unwrap().key(), "a");
    // A member of b is too large; each member of c fits, the bytes read for the sample do not.
    for (index, what, size) in [(1, "b.jpg", 3101), (2, "sample c", 4060)] {
        let error = fetch(&runtime, &dataset, index).unwrap_err();
        assert_too_large(&error, 3100, Some(size));
        assert_eq!(
            error.to_string(),
            format!(
                "{}: {what}: the item ({size} bytes) is larger than max_bytes (3100 bytes)",
                locations[0]
            )
        );
    }
    let error = runtime.block_on(dataset.sample(2)).unwrap().unwrap_err();
    assert_too_large(&error, 3100, Some(4060));
    assert_eq!(dataset.io_stats().unwrap().snapshot().bytes, 3073);
}

#[test]
fn member_sizes_past_the_shard_fail_the_constructor_naming_it() {
    let runtime = Runtime::new(Some(2)).unwrap();
    let dir = TempDir::new();
    let server = LoopbackServer::files().unwrap();
    let mut pax = Writer::new();
    pax.file("a.txt", b"first", Long::Ustar);
    pax.pax(&[("size", "18446744073709551615")]);
    pax.file("s.txt", b"hello", Long::Ustar);
    pax.file("s.cls", b"1", Long::Ustar);
    let mut base256 = Writer::new();
    base256.file("a.txt", b"first", Long::Ustar);
    base256.claim("s.txt", u64::MAX, b"hello");
    base256.file("s.cls", b"1", Long::Ustar);
    for (name, bytes, header) in [
        ("pax.tar", pax.finish(), 2048),
        ("b256.tar", base256.finish(), 1024),
    ] {
        assert!(bytes.len() <= 5120, "a small shard");
        let path = dir.join(name);
        std::fs::write(&path, &bytes).unwrap();
        server.put_file(&format!("/{name}"), bytes.clone(), "\"v1\"");
        let file = path.display().to_string();
        for location in [file, server.url(&format!("/{name}"))] {
            // Whatever max_bytes allows.
            let mut raised = options(None);
            raised.fetch.max_bytes = u64::MAX;
            let error = open(&runtime, std::slice::from_ref(&location), raised).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidData, "{error:?}");
            assert_eq!(
                error.to_string(),
                format!(
                    "{location}: the archive is truncated: it ends inside a member's data (its \
                     header at byte {header} gives 18446744073709551615 bytes) (at byte {})",
                    bytes.len()
                )
            );
        }
        // The same bytes as a sample's fragment are an error too, not a panic.
        let fragment = Bytes::copy_from_slice(&bytes[1024..]);
        let error = Sample::from_fragment(&fragment).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidData, "{error:?}");
    }
}

#[test]
fn the_members_of_a_sample_are_read_without_what_lies_between() {
    let runtime = Runtime::new(Some(2)).unwrap();
    let dir = TempDir::new();
    let mut w = Writer::new();
    w.file("s.txt", b"text", Long::Ustar);
    // A keyless entry, far larger than the sample and than max_bytes.
    w.file("between", &vec![7; 1 << 20], Long::Ustar);
    w.pax(&[("path", "s.cls")]);
    w.file("named-by-pax", b"3", Long::Ustar);
    w.file("t.txt", b"next", Long::Ustar);
    let data = w.finish();
    let path = dir.join("s.tar");
    std::fs::write(&path, &data).unwrap();
    let server = LoopbackServer::files().unwrap();
    server.put_file("/s.tar", data, "\"v1\"");
    let cls_header = 1024 + 512 + (1 << 20);
    for location in [path.display().to_string(), server.url("/s.tar")] {
        let mut small = options(None);
        small.fetch.max_bytes = 64 << 10;
        let dataset = open(&runtime, std::slice::from_ref(&location), small).unwrap();
        assert_eq!(dataset.len(), 2);
        let before = dataset.io_stats().unwrap().snapshot().bytes;
        let requests = server.request_headers().len();
        let item = fetch(&runtime, &dataset, 0).unwrap();
        // s.txt's header and padded data, then s.cls's pax header, header and data.
        assert_eq!(item.len(), 1024 + 1024 + 512 + 1);
        assert_eq!(
            dataset.io_stats().unwrap().snapshot().bytes - before,
            item.len() as u64
        );
        let sample = Sample::from_fragment(&item).unwrap();
        assert_eq!(sample.key(), "s");
        assert_eq!(
            members(&sample),
            [
                ("txt".to_owned(), b"text".to_vec()),
                ("cls".to_owned(), b"3".to_vec())
            ]
        );
        if location.starts_with("http") {
            // Read at once, in any order.
            let mut ranges: Vec<String> = server.request_headers()[requests..]
                .iter()
                .map(|h| h["range"].clone())
                .collect();
            ranges.sort();
            assert_eq!(
                ranges,
                [
                    "bytes=0-1023".to_owned(),
                    format!("bytes={cls_header}-{}", cls_header + 1024 + 512)
                ]
            );
        }
    }
}

#[test]
fn broken_and_missing_shards_fail_the_dataset_naming_the_shard() {
    let (runtime, dir) = runtime_and_dir();
    let whole = shard(&["000001", "000002"], Long::Ustar);
    let good = dir.join("good.tar");
    std::fs::write(&good, &whole).unwrap();
    let cut = dir.join("cut.tar");
    std::fs::write(&cut, &whole[..whole.len() - 2048]).unwrap();
    let locations = [good.display().to_string(), cut.display().to_string()];
    let error = open(&runtime, &locations, options(None)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidData, "{error:?}");
    let message = error.to_string();
    assert!(
        message.starts_with(&format!("{}: the archive is truncated", locations[1])),
        "{message}"
    );
    let missing = dir.join("missing.tar").display().to_string();
    let error = open(&runtime, std::slice::from_ref(&missing), options(None)).unwrap_err();
    assert!(error.is_not_found(), "{error:?}");
    assert!(error.to_string().starts_with(&missing), "{error}");
    let garbage = dir.join("garbage.tar");
    std::fs::write(&garbage, vec![b'x'; 4096]).unwrap();
    let error = open(&runtime, &[garbage.display().to_string()], options(None)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidData);
    assert!(error.to_string().contains("not a tar header"), "{error}");
}

#[test]
fn a_file_changed_after_indexing_is_refused() {
    let (runtime, dir) = runtime_and_dir();
    let path = dir.join("s.tar");
    std::fs::write(&path, shard(&["000001", "000002"], Long::Ustar)).unwrap();
    let locations = vec![path.display().to_string()];
    let dataset = open(&runtime, &locations, options(None)).unwrap();
    fetch(&runtime, &dataset, 0).unwrap();
    // Another archive of the same size: only the modification time (or inode) tells.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&path, shard(&["000009", "000008"], Long::Ustar)).unwrap();
    let error = fetch(&runtime, &dataset, 1).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Changed, "{error:?}");
    assert!(
        error.to_string().starts_with(&format!(
            "{}: the shard changed since it was indexed (",
            locations[0]
        )),
        "{error}"
    );
    std::fs::write(&path, shard(&["000001"], Long::Ustar)).unwrap();
    let error = fetch(&runtime, &dataset, 0).unwrap_err();
    assert!(error.to_string().contains("bytes, indexed at"), "{error}");
    std::fs::remove_file(&path).unwrap();
    assert!(fetch(&runtime, &dataset, 0).unwrap_err().is_not_found());
}

#[test]
fn kept_indexes_are_used_while_the_shard_is_unchanged() {
    let runtime = Runtime::new(Some(2)).unwrap();
    let dir = TempDir::new();
    let index_dir = dir.join("index");
    let server = LoopbackServer::files().unwrap();
    server.put_file("/a.tar", shard(&["000001", "000002"], Long::Pax), "\"v1\"");
    server.put_file("/b.tar", shard(&["000003"], Long::Gnu), "\"v1\"");
    let locations = vec![server.url("/a.tar?sig=SECRET"), server.url("/b.tar")];
    let full_gets = || {
        server
            .request_headers()
            .iter()
            .filter(|h| !h.contains_key("range"))
            .count()
    };
    let first = open(&runtime, &locations, options(Some(&index_dir))).unwrap();
    assert_eq!(first.len(), 3);
    assert_eq!(full_gets(), 2);
    assert_eq!(std::fs::read_dir(&index_dir).unwrap().count(), 2);
    // The index was kept: the next dataset only asks each shard what it is now.
    let second = open(&runtime, &locations, options(Some(&index_dir))).unwrap();
    assert_eq!(full_gets(), 2);
    assert_eq!(second.len(), 3);
    for i in 0..3 {
        let sample = runtime.block_on(second.sample(i)).unwrap().unwrap();
        let key = ["000001", "000002", "000003"][i as usize];
        assert_eq!(members(&sample), expected(key));
    }
    // One request per sample, a single range, under the shard's ETag.
    let reads: Vec<_> = server.request_headers().into_iter().skip(6).collect();
    assert_eq!(reads.len(), 3);
    assert!(reads.iter().all(|h| h["if-match"] == "\"v1\""), "{reads:?}");
    assert!(reads.iter().all(|h| h["range"].starts_with("bytes=")));
    // A shard that changed is indexed again.
    server.put_file("/b.tar", shard(&["000003", "000004"], Long::Gnu), "\"v2\"");
    let third = open(&runtime, &locations, options(Some(&index_dir))).unwrap();
    assert_eq!(third.len(), 4);
    assert_eq!(full_gets(), 3);
    assert!(
        !std::fs::read(index::path(
            &index_dir,
            &remote_key(&locations[0], &redact_url(&locations[0]))
        ))
        .unwrap()
        .windows(6)
        .any(|w| w == b"SECRET"),
        "no query string in the index"
    );
}

#[test]
fn an_http_shard_changed_after_indexing_is_refused() {
    let runtime = Runtime::new(Some(2)).unwrap();
    let server = LoopbackServer::files().unwrap();
    let v1 = shard(&["000001", "000002"], Long::Ustar);
    server.put_file("/s.tar", v1.clone(), "\"v1\"");
    let locations = vec![server.url("/s.tar")];
    let dataset = open(&runtime, &locations, options(None)).unwrap();
    fetch(&runtime, &dataset, 0).unwrap();
    // Same bytes, another ETag: the server refuses the If-Match.
    server.put_file("/s.tar", v1, "\"v2\"");
    let error = fetch(&runtime, &dataset, 1).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Changed, "{error:?}");
    assert_eq!(
        error.to_string(),
        format!(
            "{}: the shard changed since it was indexed (the server refused the request under \
             the shard's indexed ETag or Last-Modified); build the dataset again to index it anew",
            locations[0]
        )
    );
    server.remove_file("/s.tar");
    let error = fetch(&runtime, &dataset, 1).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Http(404), "{error:?}");
    let error = open(&runtime, &locations, options(None)).unwrap_err();
    assert!(error.is_not_found(), "{error:?}");
}

#[test]
fn a_server_without_ranges_is_refused_at_open() {
    let runtime = Runtime::new(Some(1)).unwrap();
    let server = LoopbackServer::scripted(|_, _| Reply::Body(vec![0; 2048])).unwrap();
    let error = open(&runtime, &[server.url("/s.tar")], options(None)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidData);
    assert!(
        error.to_string().contains("does not serve byte ranges"),
        "{error}"
    );
}

use crate::test_server::Reply;

#[test]
fn a_cache_serves_the_second_epoch() {
    let runtime = Runtime::new(Some(2)).unwrap();
    let dir = TempDir::new();
    let server = LoopbackServer::files().unwrap();
    server.put_file(
        "/s.tar",
        shard(&["000001", "000002", "000003"], Long::Ustar),
        "\"v1\"",
    );
    let dataset = open(&runtime, &[server.url("/s.tar")], options(None)).unwrap();
    let cache = Cache::open(dir.join("cache"), None).unwrap();
    let cached = Cached::new(Arc::new(dataset.clone()), cache.clone());
    let epoch =
        |d: &Cached| -> Vec<Bytes> { (0..3).map(|i| fetch(&runtime, d, i).unwrap()).collect() };
    let first = epoch(&cached);
    let requests = server.request_headers().len();
    let second = epoch(&cached);
    assert_eq!(first, second);
    assert_eq!(
        server.request_headers().len(),
        requests,
        "all from the cache"
    );
    assert_eq!(cached.io_stats().unwrap().snapshot().cache_hits, 3);
    assert_eq!(cache.snapshot().written, 3);
    // The cache key names the shard's version: a new index never meets the old entries.
    server.put_file(
        "/s.tar",
        shard(&["000001", "000002", "000003"], Long::Ustar),
        "\"v2\"",
    );
    let again = open(&runtime, &[server.url("/s.tar")], options(None)).unwrap();
    assert_ne!(again.cache_key(0), dataset.cache_key(0));
    assert!(dataset.cache_key(0).unwrap().contains("\"v1\""));
}

/// Rewrites the file at `path` in place with `bytes` (same length, same inode) and puts its
/// modification time back, as `rsync --inplace -t` does.
fn rewrite_in_place(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let modified = std::fs::metadata(path).unwrap().modified().unwrap();
    let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    assert_eq!(file.metadata().unwrap().len(), bytes.len() as u64);
    file.write_all(bytes).unwrap();
    file.set_modified(modified).unwrap();
}

#[test]
fn a_shard_rewritten_under_its_old_version_is_an_error_not_a_panic() {
    let (runtime, dir) = runtime_and_dir();
    let write = |records: &[(&str, &str)]| {
        let mut w = Writer::new();
        w.pax(records);
        w.file("s.txt", b"hello", Long::Ustar);
        w.file("s.cls", b"1", Long::Ustar);
        w.finish()
    };
    let before = write(&[("comment", "a comment of some length")]);
    let after = write(&[("size", "18446744073709551615")]);
    assert_eq!(before.len(), after.len());
    let path = dir.join("s.tar");
    std::fs::write(&path, &before).unwrap();
    let location = path.display().to_string();
    let dataset = open(&runtime, std::slice::from_ref(&location), options(None)).unwrap();
    rewrite_in_place(&path, &after);
    let error = fetch(&runtime, &dataset, 0).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Changed, "{error:?}");
    let message = error.to_string();
    assert!(
        message.starts_with(&format!(
            "{location}: the shard changed since it was indexed (the bytes of sample s are not \
             a tar fragment: "
        )),
        "{message}"
    );
    let error = runtime.block_on(dataset.sample(0)).unwrap().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Changed, "{error:?}");
    // The bytes themselves, taken as a fragment: an error, not a slice out of range.
    let fragment = Bytes::copy_from_slice(&after[..1024 + 512 + 5 + 507 + 512 + 1]);
    let error = Sample::from_fragment(&fragment).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidData, "{error:?}");
    // Other bytes that parse, with another member in the place of one: not the members
    // indexed.
    let moved = write(&[("path", "s.xyz")]);
    assert_eq!(moved.len(), before.len());
    std::fs::write(&path, &before).unwrap();
    let dataset = open(&runtime, std::slice::from_ref(&location), options(None)).unwrap();
    rewrite_in_place(&path, &moved);
    let error = fetch(&runtime, &dataset, 0).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "{location}: the shard changed since it was indexed (the bytes of sample s are not \
             the members indexed); build the dataset again to index it anew"
        )
    );
}

#[test]
fn a_kept_index_that_does_not_fit_the_shard_is_made_again() {
    let (runtime, dir) = runtime_and_dir();
    let index_dir = dir.join("index");
    let jpg = content("a", "jpg");
    let files: [(&str, &[u8]); 2] = [("a.jpg", &jpg), ("a.cls", b"a")];
    let location = write_shard(&dir, &files, Long::Ustar);
    let key = std::fs::canonicalize(&location)
        .unwrap()
        .display()
        .to_string();
    open(
        &runtime,
        std::slice::from_ref(&location),
        options(Some(&index_dir)),
    )
    .unwrap();
    let (version, good) = index::load(&index_dir, &key).unwrap();
    let shard_size = std::fs::metadata(&location).unwrap().len();
    // A valid CRC, members that do not fit: a terabyte in, one byte past the end.
    type Damage = fn(&mut Vec<Member>, u64);
    let damages: [Damage; 3] = [
        |m, _| m[0].data = 1 << 40,
        |m, size| m[1].size = size - m[1].data + 1,
        |m, _| m[1].header = m[0].header,
    ];
    for damage in damages {
        let mut bad = good.clone();
        damage(&mut bad, shard_size);
        std::fs::write(
            index::path(&index_dir, &key),
            index::encode(&key, &version, &bad),
        )
        .unwrap();
        assert_eq!(index::load(&index_dir, &key), Some((version.clone(), bad)));
        let dataset = open(
            &runtime,
            std::slice::from_ref(&location),
            options(Some(&index_dir)),
        )
        .unwrap();
        let sample = runtime.block_on(dataset.sample(0)).unwrap().unwrap();
        assert_eq!(members(&sample), expected("a"));
        // Made again and kept.
        assert_eq!(
            index::load(&index_dir, &key),
            Some((version.clone(), good.clone()))
        );
    }
}

#[cfg(unix)]
#[test]
fn a_fifo_in_place_of_a_kept_index_is_no_index() {
    let dir = TempDir::new();
    let index_dir = dir.join("index");
    let members: [(&str, &[u8]); 2] = [("a.jpg", b"jpeg"), ("a.cls", b"1")];
    let location = write_shard(&dir, &members, Long::Ustar);
    let key = std::fs::canonicalize(&location)
        .unwrap()
        .display()
        .to_string();
    std::fs::create_dir(&index_dir).unwrap();
    let fifo = index::path(&index_dir, &key);
    index::tests::mkfifo(&fifo);
    let opened = {
        let (location, index_dir) = (location.clone(), index_dir.clone());
        index::tests::unless_stuck_on(&fifo, move || {
            let runtime = Runtime::new(Some(1)).unwrap();
            open(&runtime, &[location], options(Some(&index_dir))).map(|d| d.len())
        })
    };
    assert_eq!(opened.unwrap(), 1);
    // The new index took the FIFO's place.
    assert!(std::fs::symlink_metadata(&fifo).unwrap().is_file());
    assert!(index::load(&index_dir, &key).is_some());
}

/// A server of shards that differ only by their query (`/get?name=...`): byte ranges, no
/// ETag, no Last-Modified, one request per connection.
struct QueryServer {
    addr: std::net::SocketAddr,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl QueryServer {
    fn start(files: Vec<(String, Vec<u8>)>) -> QueryServer {
        use std::io::{BufRead, BufReader, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut head = Vec::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    head.push(line.trim_end().to_owned());
                }
                let target = head.first().and_then(|l| l.split(' ').nth(1)).unwrap_or("");
                let range = head.iter().find_map(|h| {
                    let (name, value) = h.split_once(':')?;
                    let spec = value.trim().strip_prefix("bytes=")?;
                    let (a, b) = spec.split_once('-')?;
                    name.eq_ignore_ascii_case("range")
                        .then(|| (a.parse::<usize>().ok(), b.parse::<usize>().ok()))
                });
                let Some((_, body)) = files.iter().find(|(t, _)| t == target) else {
                    let _ = stream.write_all(
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    );
                    continue;
                };
                let (status, extra, part) = match range {
                    Some((Some(a), Some(b))) if a <= b && a < body.len() => {
                        let b = b.min(body.len() - 1);
                        let extra = format!("content-range: bytes {a}-{b}/{}\r\n", body.len());
                        ("206 Partial Content", extra, &body[a..=b])
                    }
                    _ => ("200 OK", String::new(), &body[..]),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-length: {}\r\n{extra}connection: close\r\n\r\n",
                    part.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(part);
            }
        });
        QueryServer {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self, target: &str) -> String {
        format!("http://{}{target}", self.addr)
    }
}

impl Drop for QueryServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[test]
fn shards_that_differ_only_by_query_do_not_share_an_index() {
    let runtime = Runtime::new(Some(2)).unwrap();
    let dir = TempDir::new();
    let index_dir = dir.join("index");
    let mut one = Writer::new();
    one.file("a.txt", b"ten bytes!", Long::Ustar);
    one.file("a.cls", b"1", Long::Ustar);
    let one = one.finish();
    let mut two = Writer::new();
    two.file("b.txt", &[2; 1500], Long::Ustar);
    let two = two.finish();
    // The same size and no ETag: only the location tells them apart.
    assert_eq!(one.len(), two.len());
    let server = QueryServer::start(vec![
        ("/get?name=one.tar".into(), one),
        ("/get?name=two.tar".into(), two),
    ]);
    let open_one = |target: &str| {
        let location = server.url(target);
        open(&runtime, &[location], options(Some(&index_dir))).unwrap()
    };
    let first = open_one("/get?name=one.tar");
    assert_eq!(first.key(0), Some("a"));
    let second = open_one("/get?name=two.tar");
    assert_eq!(second.len(), 1);
    assert_eq!(second.key(0), Some("b"));
    let sample = runtime.block_on(second.sample(0)).unwrap().unwrap();
    assert_eq!(members(&sample), [("txt".to_owned(), vec![2; 1500])]);
    assert_eq!(std::fs::read_dir(&index_dir).unwrap().count(), 2);
    // Kept apart, and neither written nor keyed with the query in clear.
    assert_eq!(open_one("/get?name=one.tar").key(0), Some("a"));
    for entry in std::fs::read_dir(&index_dir).unwrap() {
        let kept = std::fs::read(entry.unwrap().path()).unwrap();
        assert!(
            !kept.windows(5).any(|w| w == b"name="),
            "no query in an index"
        );
    }
    let (k1, k2) = (first.cache_key(0).unwrap(), second.cache_key(0).unwrap());
    assert_ne!(k1, k2);
    assert!(!k1.contains("name=") && !k2.contains("name="), "{k1:?}");
}
