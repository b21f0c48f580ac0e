//! `TarStream` end to end: tar and gzip shards as files and from servers without ranges, in
//! chunks of every size; shard orders, positions, and hostile shards.

use std::io::Write;
use std::path::Path;

use futures::StreamExt;

use super::super::parse::tests::{Long, Writer};
use super::*;
use crate::FetchOptions;
use crate::runtime::Runtime;
#[cfg(feature = "http")]
use crate::test_server::{LoopbackServer, Reply};
use crate::test_util::{TempDir, assert_too_large};

/// Sample `key`'s members in the test shards: a `jpg` of a few hundred bytes and a `cls`.
fn members_of(key: &str) -> Vec<(String, Vec<u8>)> {
    let seed = key.bytes().map(usize::from).sum::<usize>();
    let jpg = (0..300 + seed % 700)
        .map(|i| (i * 31 + seed) as u8)
        .collect();
    vec![("jpg".into(), jpg), ("cls".into(), key.as_bytes().to_vec())]
}

/// A shard of samples `keys`, with a directory and a member of no sample among them.
fn shard(keys: &[&str]) -> Vec<u8> {
    let mut w = Writer::new();
    w.special("images/", b'5');
    for key in keys {
        for (ext, data) in members_of(key) {
            w.file(&format!("{key}.{ext}"), &data, Long::Pax);
        }
    }
    w.file("README", b"of no sample", Long::Ustar);
    w.finish()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}

fn open(locations: &[String], options: TarOptions) -> TarStream {
    TarStream::new(locations.to_vec(), options).unwrap()
}

fn read_all(stream: &TarStream, shards: Vec<usize>, start: Position) -> Vec<Read> {
    let runtime = Runtime::new(Some(1)).unwrap();
    runtime
        .block_on(stream.read(shards, start).collect::<Vec<_>>())
        .unwrap()
}

type Shape = Result<(String, Vec<(String, Vec<u8>)>), String>;

/// Each read as its key and members, or its error's message.
fn shapes(reads: &[Read]) -> Vec<Shape> {
    reads
        .iter()
        .map(|r| match &r.sample {
            Ok(s) => Ok((
                s.key().to_owned(),
                s.members()
                    .map(|(e, b)| (e.to_owned(), b.to_vec()))
                    .collect(),
            )),
            Err(e) => Err(e.to_string()),
        })
        .collect()
}

fn expected(keys: &[&str]) -> Vec<Shape> {
    keys.iter()
        .map(|k| Ok(((*k).to_owned(), members_of(k))))
        .collect()
}

#[test]
fn tar_and_gzip_files_are_read_in_order() {
    let dir = TempDir::new();
    let a = write(&dir, "a.tar", &shard(&["000001", "000002"]));
    let b = write(&dir, "b.tar.gz", &gzip(&shard(&["000003"])));
    let c = write(&dir, "c.tgz", &gzip(&shard(&["000004", "000005"])));
    let stream = open(&[a, b, c], TarOptions::default());
    assert_eq!(stream.shards(), 3);
    let reads = read_all(&stream, vec![0, 1, 2], Position::default());
    let keys = ["000001", "000002", "000003", "000004", "000005"];
    assert_eq!(shapes(&reads), expected(&keys));
    let shards: Vec<usize> = reads.iter().map(|r| r.shard).collect();
    assert_eq!(shards, [0, 0, 1, 2, 2]);
    let after: Vec<(usize, u64)> = reads
        .iter()
        .map(|r| (r.after.shard, r.after.sample))
        .collect();
    assert_eq!(after, [(0, 1), (0, 2), (1, 1), (2, 1), (2, 2)]);
}

#[cfg(feature = "http")]
/// A server without ranges, sending each shard in chunks of `size` bytes.
fn chunked_server(shards: Vec<(&'static str, Vec<u8>)>, size: usize) -> LoopbackServer {
    LoopbackServer::scripted(move |target, _| {
        match shards.iter().find(|(name, _)| target == format!("/{name}")) {
            Some((_, bytes)) => Reply::Chunked(bytes.chunks(size).map(<[u8]>::to_vec).collect()),
            None => Reply::Status(404, Vec::new()),
        }
    })
    .unwrap()
}

#[cfg(feature = "http")]
#[test]
fn chunks_of_any_size_from_a_server_without_ranges() {
    let plain = shard(&["000001", "000002"]);
    let packed = gzip(&shard(&["000003"]));
    for size in [1, 7, 512, 513, 100_000] {
        let server = chunked_server(
            vec![("a.tar", plain.clone()), ("b.tgz", packed.clone())],
            size,
        );
        let stream = open(
            &[server.url("/a.tar"), server.url("/b.tgz")],
            TarOptions::default(),
        );
        let reads = read_all(&stream, vec![0, 1], Position::default());
        assert_eq!(
            shapes(&reads),
            expected(&["000001", "000002", "000003"]),
            "{size}"
        );
    }
}

#[test]
fn orders_are_shuffled_by_seed_and_epoch_and_split_by_reader() {
    let locations: Vec<String> = (0..10).map(|i| format!("/s/{i}.tar")).collect();
    let stream = open(&locations, TarOptions::default());
    assert_eq!(stream.shards_of(None, 3, 0, 1), (0..10).collect::<Vec<_>>());
    let first = stream.shards_of(Some(7), 0, 0, 1);
    assert_eq!(
        first,
        stream.shards_of(Some(7), 0, 0, 1),
        "the same for a seed and epoch"
    );
    assert_ne!(
        first,
        stream.shards_of(Some(7), 1, 0, 1),
        "another epoch, another order"
    );
    assert_ne!(
        first,
        stream.shards_of(Some(8), 0, 0, 1),
        "another seed, another order"
    );
    let mut sorted = first.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..10).collect::<Vec<_>>());
    // Shard i of the order goes to reader i % 3.
    let readers: Vec<Vec<usize>> = (0..3).map(|k| stream.shards_of(Some(7), 0, k, 3)).collect();
    assert_eq!(readers[0], [first[0], first[3], first[6], first[9]]);
    assert_eq!(readers[1], [first[1], first[4], first[7]]);
    assert_eq!(readers[2], [first[2], first[5], first[8]]);
}

#[test]
fn a_read_goes_on_from_any_position() {
    let dir = TempDir::new();
    let a = write(&dir, "a.tar", &shard(&["000001", "000002", "000003"]));
    let b = write(&dir, "b.tar.gz", &gzip(&shard(&["000004", "000005"])));
    let stream = open(&[a, b], TarOptions::default());
    let all = shapes(&read_all(&stream, vec![1, 0], Position::default()));
    let reads = read_all(&stream, vec![1, 0], Position::default());
    for (k, read) in reads.iter().enumerate() {
        let rest = shapes(&read_all(&stream, vec![1, 0], read.after));
        assert_eq!(rest, all[k + 1..], "after item {k}");
    }
}

#[test]
fn a_truncated_shard_is_an_error_and_the_next_shard_is_read() {
    let dir = TempDir::new();
    let whole = shard(&["000001", "000002"]);
    let cut = &whole[..whole.len() - 1024 - 700];
    let a = write(&dir, "a.tar", cut);
    let b = write(&dir, "b.tar.gz", &gzip(cut));
    let c = write(&dir, "c.tar", &shard(&["000003"]));
    let stream = open(&[a.clone(), b.clone(), c], TarOptions::default());
    let reads = read_all(&stream, vec![0, 1, 2], Position::default());
    let shapes = shapes(&reads);
    assert_eq!(shapes.len(), 5, "{shapes:?}");
    for (at, location) in [(1, &a), (3, &b)] {
        assert_eq!(shapes[at - 1], expected(&["000001"])[0]);
        let error = reads[at].sample.as_ref().unwrap_err();
        assert!(matches!(error, Error::InvalidData { location: l, .. } if l == location));
        assert!(error.to_string().contains("truncated"), "{error}");
        assert_eq!(
            reads[at].after,
            Position {
                shard: at / 2 + 1,
                sample: 0
            }
        );
    }
    assert_eq!(shapes[4], expected(&["000003"])[0]);
}

#[test]
fn a_claimed_huge_size_is_an_error_not_an_allocation() {
    let dir = TempDir::new();
    let mut w = Writer::new();
    w.file("000001.cls", b"1", Long::Ustar);
    w.claim("000002.jpg", 1 << 40, b"only a few bytes");
    let bytes = w.finish();
    // A file's size is known: the claim is past its end.
    let plain = write(&dir, "a.tar", &bytes);
    // Through gzip nothing says the size: the claim is over max_bytes.
    let packed = write(&dir, "a.tar.gz", &gzip(&bytes));
    let options = TarOptions {
        fetch: FetchOptions {
            max_bytes: 1 << 20,
            ..FetchOptions::HTTP
        },
        ..TarOptions::default()
    };
    let stream = open(&[plain, packed], options);
    // The header is refused before 000001 is known to be whole: the error stands for both.
    let reads = read_all(&stream, vec![0], Position::default());
    assert_eq!(reads.len(), 1);
    let error = reads[0].sample.as_ref().unwrap_err();
    assert!(error.to_string().contains("truncated"), "{error}");
    let reads = read_all(&stream, vec![1], Position::default());
    assert_eq!(
        shapes(&reads)[0],
        Ok(("000001".into(), vec![("cls".into(), b"1".to_vec())]))
    );
    // 000002 is over max_bytes: none of its claimed bytes is kept, and the shard ends
    // inside them.
    assert_eq!(reads.len(), 2);
    let error = reads[1].sample.as_ref().unwrap_err();
    assert!(error.to_string().contains("truncated"), "{error}");
}

#[test]
fn bytes_that_are_not_tar_or_not_gzip_are_errors() {
    let dir = TempDir::new();
    let noise: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 1) as u8).collect();
    // A gzip header, then a deflate block of the reserved type.
    let mut bad_gzip = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    bad_gzip.extend([0xff; 100]);
    let packed = gzip(&shard(&["000001", "000002"]));
    let cut = packed[..packed.len() - 20].to_vec();
    let cases = [
        ("noise.tar", noise.clone(), "not a tar header"),
        ("noise.tar.gz", noise, "not gzip data"),
        ("bad.tar.gz", bad_gzip, "bad gzip data"),
        ("cut.tar.gz", cut, "bad gzip data"),
        ("empty.tar", Vec::new(), "truncated"),
        ("x.tar", b"x".to_vec(), "truncated"),
    ];
    for (name, bytes, message) in cases {
        let location = write(&dir, name, &bytes);
        let stream = open(std::slice::from_ref(&location), TarOptions::default());
        let reads = read_all(&stream, vec![0], Position::default());
        let error = reads.last().unwrap().sample.as_ref().unwrap_err();
        assert!(
            matches!(error, Error::InvalidData { location: l, .. } if *l == location),
            "{name}: {error}"
        );
        assert!(error.to_string().contains(message), "{name}: {error}");
    }
}

#[test]
fn a_member_and_max_bytes() {
    let dir = TempDir::new();
    let mut w = Writer::new();
    w.file("000001.jpg", &[1; 600], Long::Ustar);
    w.file("000001.cls", b"1", Long::Ustar);
    w.file("000002.cls", b"2", Long::Ustar);
    w.file("000003.jpg", &[3; 2000], Long::Ustar);
    w.file("000004.jpg", &[4; 400], Long::Ustar);
    w.file("000004.png", &[5; 400], Long::Ustar);
    w.file("000005.cls", b"5", Long::Ustar);
    w.file("000005.cls", b"5", Long::Ustar);
    let location = write(&dir, "a.tar", &w.finish());
    let fetch = FetchOptions {
        max_bytes: 1000,
        ..FetchOptions::HTTP
    };
    let member = TarOptions {
        fetch,
        member: Some("jpg".into()),
        ..TarOptions::default()
    };
    let reads = read_all(
        &open(std::slice::from_ref(&location), member),
        vec![0],
        Position::default(),
    );
    let shown = shapes(&reads);
    assert_eq!(
        shown[0],
        Ok(("000001".into(), vec![("jpg".into(), vec![1; 600])]))
    );
    assert_ends_with(
        &shown[1],
        "sample 000002: it has no member \"jpg\" (its members: cls)",
    );
    assert_too_large(reads[2].sample.as_ref().unwrap_err(), 1000, Some(2000));
    assert_eq!(
        shown[3],
        Ok(("000004".into(), vec![("jpg".into(), vec![4; 400])]))
    );
    assert_ends_with(&shown[4], "it has two members with extension \"cls\"");
    // A whole sample is bounded too: 000004's two members make 800 bytes.
    let whole = TarOptions {
        fetch: FetchOptions {
            max_bytes: 700,
            ..fetch
        },
        ..TarOptions::default()
    };
    let reads = read_all(&open(&[location], whole), vec![0], Position::default());
    assert_too_large(reads[3].sample.as_ref().unwrap_err(), 700, Some(800));
    assert_eq!(reads.len(), 5);
}

#[cfg(unix)]
#[test]
fn links_are_followed_and_a_fifo_is_refused_without_waiting() {
    let dir = TempDir::new();
    let real = write(&dir, "real.tar", &shard(&["000001"]));
    let link = dir.join("link.tar");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let fifo = dir.join("fifo.tar");
    super::super::index::tests::mkfifo(&fifo);
    let locations = [link.display().to_string(), fifo.display().to_string()];
    let stream = open(&locations, TarOptions::default());
    let reads = super::super::index::tests::unless_stuck_on(&fifo, move || {
        shapes(&read_all(&stream, vec![0, 1], Position::default()))
    });
    assert_eq!(reads[0], expected(&["000001"])[0]);
    let error = reads[1].as_ref().unwrap_err();
    assert!(
        error.ends_with("not a regular file (a directory, a FIFO or a device)"),
        "{error}"
    );
}

#[cfg(all(feature = "http", feature = "file"))]
#[test]
fn http_errors_keep_their_status_and_missing_files_their_kind() {
    let server = LoopbackServer::scripted(|_, _| Reply::Status(404, Vec::new())).unwrap();
    let dir = TempDir::new();
    let missing = dir.join("missing.tar").display().to_string();
    let stream = open(
        &[server.url("/a.tar?token=secret"), missing],
        TarOptions::default(),
    );
    let reads = read_all(&stream, vec![0, 1], Position::default());
    let error = reads[0].sample.as_ref().unwrap_err();
    assert_eq!(error.kind(), crate::ErrorKind::Http(404));
    assert!(!error.to_string().contains("secret"), "{error}");
    let error = reads[1].sample.as_ref().unwrap_err();
    assert_eq!(
        error.kind(),
        crate::ErrorKind::Io(std::io::ErrorKind::NotFound)
    );
    assert_eq!(reads.len(), 2);
}

mod chunks {
    use proptest::prelude::*;

    use super::*;

    /// The samples of `bytes` (a shard named `name`) fed to a shard's reader in pieces of
    /// `sizes` (cycled), as a server might send them.
    fn unpack(name: &str, bytes: &[u8], sizes: &[usize]) -> Vec<Shape> {
        let stream = open(&[name.to_owned()], TarOptions::default());
        let mut reader = ShardRead::new(stream.inner.clone(), 0, 0, 0);
        let mut rest = bytes;
        let mut sizes = sizes.iter().cycle();
        let mut out = Vec::new();
        while !rest.is_empty() {
            let n = (*sizes.next().unwrap()).min(rest.len());
            reader.push(&rest[..n]).unwrap();
            rest = &rest[n..];
            out.extend(reader.unpack.iter_mut().flat_map(|u| u.ready.drain(..)));
        }
        reader.finish().unwrap();
        out.extend(reader.unpack.iter_mut().flat_map(|u| u.ready.drain(..)));
        out.into_iter()
            .map(|s| {
                let s = s.map_err(|e| e.to_string())?;
                let members = s
                    .members()
                    .map(|(e, b)| (e.to_owned(), b.to_vec()))
                    .collect();
                Ok((s.key().to_owned(), members))
            })
            .collect()
    }

    fn format() -> impl Strategy<Value = Long> {
        prop_oneof![Just(Long::Ustar), Just(Long::Gnu), Just(Long::Pax)]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever the pieces, plain or gzip: the samples written, in order.
        #[test]
        fn pieces_of_any_size_give_the_samples_written(
            samples in prop::collection::vec(
                prop::collection::vec((0usize..3, 0usize..1500, any::<u8>()), 1..4),
                0..6,
            ),
            sizes in prop::collection::vec(1usize..2000, 1..8),
            long in format(),
            packed in any::<bool>(),
        ) {
            let exts = ["jpg", "cls", "json"];
            let mut w = Writer::new();
            let mut want = Vec::new();
            for (i, members) in samples.iter().enumerate() {
                let key = format!("{i:06}");
                let mut kept: Vec<(String, Vec<u8>)> = Vec::new();
                for &(e, size, fill) in members {
                    if kept.iter().any(|(x, _)| x == exts[e]) {
                        continue;
                    }
                    let data = vec![fill; size];
                    w.file(&format!("{key}.{}", exts[e]), &data, long);
                    kept.push((exts[e].to_owned(), data));
                }
                want.push(Ok((key, kept)));
            }
            let archive = w.finish();
            let (name, bytes) = if packed {
                ("s.tar.gz", gzip(&archive))
            } else {
                ("s.tar", archive)
            };
            prop_assert_eq!(unpack(name, &bytes, &sizes), want);
        }
    }
}

/// `shown` is an error whose message ends with `tail`.
fn assert_ends_with<T: std::fmt::Debug>(shown: &Result<T, String>, tail: &str) {
    let message = shown.as_ref().unwrap_err();
    assert!(message.ends_with(tail), "{message}");
}

#[test]
fn a_gzip_shard_is_checked_to_its_trailer() {
    // The archive ends before the gzip stream does: its checksum and size come after.
    let dir = TempDir::new();
    let keys = ["000001", "000002"];
    let packed = gzip(&shard(&keys));
    let n = packed.len();
    let flipped = |at: usize| {
        let mut bytes = packed.clone();
        bytes[at] ^= 1;
        bytes
    };
    let mut zero_padded = packed.clone();
    zero_padded.extend([0; 512]);
    let mut twice = packed.clone();
    twice.extend(gzip(b"a second gzip member"));
    let good = [("padded.tar.gz", zero_padded), ("two.tar.gz", twice)];
    for (name, bytes) in good {
        let location = write(&dir, name, &bytes);
        let stream = open(std::slice::from_ref(&location), TarOptions::default());
        let reads = read_all(&stream, vec![0], Position::default());
        assert_eq!(shapes(&reads), expected(&keys), "{name}");
    }
    let bad = [
        ("crc.tar.gz", flipped(n - 8), "checksum"),
        ("size.tar.gz", flipped(n - 1), "checksum"),
        ("cut.tar.gz", packed[..n - 4].to_vec(), "checksum"),
        (
            "junk.tar.gz",
            [&packed[..], b"junk after it"].concat(),
            "invalid gzip header",
        ),
        (
            "padded-junk.tar.gz",
            [&packed[..], &[0; 9], b"x"].concat(),
            "other than zeros",
        ),
    ];
    for (name, bytes, message) in bad {
        let location = write(&dir, name, &bytes);
        let stream = open(std::slice::from_ref(&location), TarOptions::default());
        let reads = read_all(&stream, vec![0], Position::default());
        let shapes = shapes(&reads);
        assert_eq!(
            shapes[..2],
            expected(&keys),
            "{name}: the samples come first"
        );
        assert_eq!(shapes.len(), 3, "{name}: {shapes:?}");
        let error = reads[2].sample.as_ref().unwrap_err();
        assert!(
            matches!(error, Error::InvalidData { location: l, .. } if *l == location),
            "{name}: {error}"
        );
        assert!(error.to_string().contains(message), "{name}: {error}");
        assert_eq!(
            reads[2].after,
            Position {
                shard: 1,
                sample: 0
            }
        );
    }
}

#[test]
fn what_follows_a_gzip_archive_is_read_only_so_far() {
    // Past the archive's end, only the gzip stream's end is looked for: a shard whose
    // compressed tail goes on and on is an error, not a read without end.
    let dir = TempDir::new();
    let keys = ["000001"];
    let packed = gzip(&shard(&keys));
    // Zeros that inflate past the limit; bytes that do not compress, past the other one.
    let zeros = gzip(&vec![0; (MAX_INFLATED_AFTER_END + 1024) as usize]);
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let noise: Vec<u8> = (0..MAX_AFTER_END + 2 * GZIP_PIECE as u64)
        .map(|_| {
            // xorshift64: bytes deflate cannot shrink.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 56) as u8
        })
        .collect();
    for (name, tail) in [("zeros.tar.gz", zeros), ("noise.tar.gz", gzip(&noise))] {
        let location = write(&dir, name, &[&packed[..], &tail].concat());
        let stream = open(std::slice::from_ref(&location), TarOptions::default());
        let reads = read_all(&stream, vec![0], Position::default());
        assert_eq!(shapes(&reads)[..1], expected(&keys), "{name}");
        assert_eq!(reads.len(), 2, "{name}: {:?}", shapes(&reads));
        let error = reads[1].sample.as_ref().unwrap_err();
        assert!(
            error.to_string().contains("after the end of the archive"),
            "{name}: {error}"
        );
    }
}

#[test]
fn a_file_changed_while_read_is_an_error() {
    // Samples larger than one read of the file, so that the read is under way when it changes.
    let mut w = Writer::new();
    for i in 0..4u8 {
        w.file(&format!("00000{i}.bin"), &vec![i; 300 << 10], Long::Ustar);
    }
    let bytes = w.finish();
    type Change = fn(&std::fs::File, u64);
    let changes: [(&str, Change); 2] = [
        ("rewritten", |file, len| {
            use std::os::unix::fs::FileExt;
            file.write_all_at(&[9; 4096], len - 300_000).unwrap();
            let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
            file.set_modified(later).unwrap();
        }),
        ("cut", |file, len| file.set_len(len / 2).unwrap()),
    ];
    for (name, change) in changes {
        let dir = TempDir::new();
        let location = write(&dir, "a.tar", &bytes);
        let stream = open(std::slice::from_ref(&location), TarOptions::default());
        let runtime = Runtime::new(Some(1)).unwrap();
        let mut read = stream.read(vec![0], Position::default());
        let first = runtime.block_on(read.next()).unwrap().unwrap();
        assert_eq!(first.sample.unwrap().key(), "000000");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&location)
            .unwrap();
        change(&file, bytes.len() as u64);
        let rest = runtime.block_on(read.collect::<Vec<_>>()).unwrap();
        let Err(error) = &rest.last().unwrap().sample else {
            panic!("{name}: the read ended without an error");
        };
        assert!(
            matches!(error, Error::InvalidData { location: l, .. } if *l == location),
            "{name}: {error}"
        );
        assert!(
            error.to_string().contains("changed while it was read"),
            "{name}: {error}"
        );
    }
}
