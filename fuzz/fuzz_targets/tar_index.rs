//! Fuzzes the index of a whole shard: the input (each header's checksum made right, as in
//! `tar_header`) is written to a file and opened as a `TarDataset`, which indexes it with the
//! push parser, seeking over member data. Any input opens or fails with an error, never a
//! panic; each sample of a shard that opens reads back, and `Sample::from_fragment` finds in
//! it the key and extensions the index gave.
#![no_main]

use dlrs_fuzz::{file_shard_options, fix_tar_checksums, shard_file};
use dlrs_io::{Dataset, Sample, TarDataset};
use libfuzzer_sys::fuzz_target;

/// The samples read back per input, at most (the index itself covers them all).
const READ_BACK: u64 = 64;

fuzz_target!(|data: &[u8]| {
    let (runtime, path) = shard_file("tar-index");
    let mut data = data.to_vec();
    fix_tar_checksums(&mut data);
    std::fs::write(path, &data).expect("the shard written");
    let options = file_shard_options();
    let location = path.display().to_string();
    let opened = runtime
        .block_on(TarDataset::open(vec![location], options))
        .expect("no runtime error");
    if let Ok(dataset) = opened {
        for i in 0..dataset.len().min(READ_BACK) {
            let key = dataset.key(i).expect("a key").to_owned();
            let exts = dataset.extensions(i).expect("extensions");
            let exts: Vec<String> = exts.into_iter().map(str::to_owned).collect();
            let fragment = runtime
                .block_on(dataset.fetch(i))
                .expect("no runtime error")
                .unwrap_or_else(|e| panic!("sample {i} of an indexed shard: {e}"));
            let sample = Sample::from_fragment(&fragment)
                .unwrap_or_else(|e| panic!("sample {i} does not parse back: {e}"));
            assert_eq!(sample.key(), key, "sample {i}");
            let found: Vec<&str> = sample.members().map(|(e, _)| e).collect();
            assert_eq!(found, exts, "sample {i} ({key:?})");
        }
    }
    let _ = std::fs::remove_file(path);
});
