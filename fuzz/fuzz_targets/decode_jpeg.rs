//! Fuzzes the Jpeg decoder: any input gives an image or an error, never a panic, and never
//! allocates beyond the limits.
#![no_main]

use dlrs_transforms::{Decode, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let decode = Decode::new(4096, 4096, 64 << 20).expect("valid limits");
    if let Ok(image) = decode.decode_as(Format::Jpeg, data) {
        assert!(image.width() <= 4096 && image.height() <= 4096);
        assert_eq!(
            image.as_bytes().len(),
            image.width() * image.height() * image.channels()
        );
    }
});
