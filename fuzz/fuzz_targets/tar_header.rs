//! Fuzzes tar header parsing: the input is read as a fragment after the checksum of each block
//! that may be a header is made right, so that mutated fields (sizes in octal or base-256,
//! names and ustar prefixes, type flags, GNU long names, pax records) are parsed rather than
//! refused at the checksum. Any input gives a sample or an error, never a panic.
#![no_main]

use bytes::Bytes;
use dlrs_fuzz::fix_tar_checksums;
use dlrs_io::Sample;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut data = data.to_vec();
    fix_tar_checksums(&mut data);
    let fragment = Bytes::from(data);
    if let Ok(sample) = Sample::from_fragment(&fragment) {
        let end = fragment.as_ptr_range().end;
        for (ext, bytes) in sample.members() {
            assert!(!sample.key().is_empty() && !ext.contains('/'));
            assert!(bytes.as_ptr_range().end <= end || bytes.is_empty());
        }
    }
});
