//! Fuzzes `Sample::from_fragment` on raw bytes (checksums as they are): any input gives a
//! sample or an error, never a panic, and a sample's members are slices of the fragment.
#![no_main]

use bytes::Bytes;
use dlrs_io::Sample;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let fragment = Bytes::copy_from_slice(data);
    let Ok(sample) = Sample::from_fragment(&fragment) else {
        return;
    };
    let range = fragment.as_ptr_range();
    for (ext, bytes) in sample.members() {
        assert!(!sample.key().is_empty(), "a member {ext:?} without a key");
        assert_eq!(ext, ext.to_ascii_lowercase());
        let inner = bytes.as_ptr_range();
        assert!(
            bytes.is_empty() || (range.start <= inner.start && inner.end <= range.end),
            "member {ext:?} is not a slice of the fragment"
        );
    }
});
