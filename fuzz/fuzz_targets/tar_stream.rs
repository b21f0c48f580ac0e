//! Fuzzes the sequential reader of shards (`TarStream`): the input is written to a file and
//! read front to back. An input that starts with gzip's magic is a `.tar.gz` as it is (the
//! inflater meets corrupt deflate data); any other is a tar whose header checksums are made
//! right (as in `tar_header`). Any input reads to its end with errors, never a panic, and the
//! positions a read reports only move forward. When the shard is also a valid tar for the
//! map-style `TarDataset` and the stream met no error, both give the same samples in order.
#![no_main]

use dlrs_fuzz::{file_shard_options, fix_tar_checksums, shard_file};
use dlrs_io::{Dataset, TarDataset, TarStream};
use futures::StreamExt;
use libfuzzer_sys::fuzz_target;

/// The samples compared with the map-style dataset, at most.
const COMPARED: usize = 64;

fuzz_target!(|data: &[u8]| {
    let (runtime, path) = shard_file("tar-stream");
    let gzip = data.starts_with(&[0x1f, 0x8b]);
    let mut data = data.to_vec();
    if !gzip {
        fix_tar_checksums(&mut data);
    }
    std::fs::write(path, &data).expect("the shard written");
    let options = file_shard_options();
    let location = path.display().to_string();
    let stream = TarStream::new(vec![location.clone()], options.clone()).expect("a file location");
    let reads = runtime
        .block_on(stream.read(vec![0], Default::default()).collect::<Vec<_>>())
        .expect("no runtime error");
    let mut last = (0, 0);
    let mut keys = Vec::new();
    let mut failed = false;
    for read in &reads {
        let at = (read.after.shard, read.after.sample);
        assert!(at > last, "positions move forward: {last:?} then {at:?}");
        last = at;
        match &read.sample {
            Ok(sample) => keys.push(sample.key().to_owned()),
            Err(_) => failed = true,
        }
    }
    if !gzip && !failed {
        let opened = runtime
            .block_on(TarDataset::open(vec![location], options))
            .expect("no runtime error");
        if let Ok(dataset) = opened {
            let indexed: Vec<String> = (0..dataset.len())
                .take(COMPARED)
                .map(|i| dataset.key(i).expect("a key").to_owned())
                .collect();
            let n = indexed.len();
            assert_eq!(
                keys[..n.min(keys.len())],
                indexed[..],
                "the same samples in order"
            );
        }
    }
    let _ = std::fs::remove_file(path);
});
