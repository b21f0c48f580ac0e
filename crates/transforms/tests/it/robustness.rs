//! No byte string makes a decoder panic; damaged fixtures give a decoding error.

use dlrs_transforms::{Decode, Error, Format};
use proptest::prelude::*;

use crate::fixture;

const FIXTURES: [&str; 14] = [
    "interlaced.png",
    "progressive.jpg",
    "rgb420.jpg",
    "rgb444.jpg",
    "gray.jpg",
    "cmyk.jpg",
    "rgb_lossless.webp",
    "rgba_lossless.webp",
    "rgb_lossy.webp",
    "rgb.tiff",
    "rgb_lzw.tiff",
    "gray_deflate.tiff",
    "cmyk.tiff",
    "gray16.tiff",
];

fn is_decoding_error(e: &Error) -> bool {
    matches!(
        e,
        Error::Corrupt { .. }
            | Error::Truncated { .. }
            | Error::Unsupported { .. }
            | Error::UnknownFormat { .. }
            | Error::TooLarge { .. }
            | Error::AllocationTooLarge { .. }
            | Error::InvalidImage { .. }
    )
}

#[test]
fn every_truncation_is_an_error_or_an_image() {
    let decode = Decode::new(4096, 4096, 64 << 20).unwrap();
    for name in FIXTURES {
        let data = fixture(name);
        for len in 0..data.len() {
            if let Err(e) = decode.decode(&data[..len]) {
                assert!(is_decoding_error(&e), "{name}[..{len}]: {e:?}");
            }
        }
    }
}

/// The error of decoding fixture `name` cut to `keep(its length)` bytes, which must fail.
fn cut_error(name: &str, keep: impl Fn(usize) -> usize) -> Error {
    let data = fixture(name);
    Decode::default()
        .decode(&data[..keep(data.len())])
        .unwrap_err()
}

/// Pillow refuses a JPEG without its end marker ("image file is truncated"); so does Decode.
#[test]
fn jpeg_without_end_marker_is_refused() {
    for cut in [2, 3, 10] {
        let err = cut_error("rgb420.jpg", |n| n - cut);
        assert!(
            matches!(err, Error::Truncated { .. } | Error::Corrupt { .. }),
            "{cut}: {err:?}"
        );
    }
}

/// libwebp (so Pillow) refuses a WebP shorter than its RIFF header says, even by one byte.
#[test]
fn webp_shorter_than_its_header_is_truncated() {
    for name in ["rgb_lossless.webp", "rgb_lossy.webp"] {
        let err = cut_error(name, |n| n - 1);
        assert!(matches!(err, Error::Truncated { .. }), "{name}: {err:?}");
    }
}

#[test]
fn truncated_fixtures_say_so() {
    for name in ["rgb.tiff", "rgb_lossless.webp", "rgb420.jpg"] {
        let err = cut_error(name, |n| n * 2 / 3);
        assert!(
            matches!(err, Error::Truncated { .. } | Error::Corrupt { .. }),
            "{name}: {err:?}"
        );
    }
}

fn mutated() -> impl Strategy<Value = Vec<u8>> {
    (
        0..FIXTURES.len(),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(i, flips, cut)| {
            let mut data = fixture(FIXTURES[i]);
            for (at, v) in flips {
                let at = at.index(data.len());
                data[at] = v;
            }
            let keep = cut.index(data.len() + 1).max(data.len() / 2);
            data.truncate(keep);
            data
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512), sig in 0usize..6) {
        let mut data = data;
        let magic: &[u8] = match sig {
            0 => b"\x89PNG\r\n\x1a\n",
            1 => &[0xff, 0xd8, 0xff],
            2 => b"RIFF\x20\0\0\0WEBPVP8L",
            3 => b"II*\0",
            4 => b"BM",
            _ => b"",
        };
        for format in [Format::Png, Format::Jpeg, Format::WebP, Format::Tiff, Format::Bmp] {
            if let Err(e) = Decode::default().decode_as(format, &data) {
                prop_assert!(is_decoding_error(&e), "{format}: {e:?}");
            }
        }
        data.splice(0..0, magic.iter().copied());
        if let Err(e) = Decode::default().decode(&data) {
            prop_assert!(is_decoding_error(&e), "{e:?}");
        }
    }

    #[test]
    fn mutated_fixtures_never_panic(data in mutated(), draft in 1usize..30) {
        let full = Decode::new(4096, 4096, 64 << 20).unwrap();
        // Reduced JPEG decoding (1/2 to 1/8 on these 20 × 24 fixtures) too.
        let reduced = full.clone().with_draft(draft, draft).unwrap();
        for decoder in [full, reduced] {
            if let Err(e) = decoder.decode(&data) {
                prop_assert!(is_decoding_error(&e), "{e:?}");
            }
        }
    }
}

/// The JPEGs decoded in part (`decode.rs`), damaged: a window of any place and size, at any
/// reduction, gives an error or an image of the window it reports.
fn mutated_jpeg() -> impl Strategy<Value = Vec<u8>> {
    const JPEGS: [&str; 4] = [
        "window420r.jpg",
        "window422p.jpg",
        "windowgray.jpg",
        "windowcmyk.jpg",
    ];
    (
        0..JPEGS.len(),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    )
        .prop_map(|(i, flips)| {
            let mut data = fixture(JPEGS[i]);
            for (at, v) in flips {
                let at = at.index(data.len());
                data[at] = v;
            }
            data
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn damaged_windows_never_panic(
        data in mutated_jpeg(),
        scale in prop::sample::select(vec![1usize, 2, 4, 8]),
        (top, left, height, width) in (0usize..200, 0usize..250, 0usize..200, 0usize..250),
    ) {
        let window = dlrs_transforms::Rect { top, left, height, width };
        match Decode::default().decode_window(&data, &|_, _| (scale, Some(window))) {
            Ok((image, from)) => {
                prop_assert_eq!((image.height(), image.width()), (from.window.height, from.window.width));
            }
            Err(e) => prop_assert!(is_decoding_error(&e), "{e:?}"),
        }
    }
}
