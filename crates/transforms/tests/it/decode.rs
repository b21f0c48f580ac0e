//! Decoded fixtures against Pillow 13's values (`<file>.bin`: `np.asarray(im.convert(...))`,
//! CMYK converted to RGB and I;16 to L as Pillow does).

use crate::{decode, fixture, max_diff, u8s};

fn check_exact(name: &str, (h, w, c): (usize, usize, usize)) {
    let im = decode(name);
    assert_eq!(
        (im.height(), im.width(), im.channels()),
        (h, w, c),
        "{name}"
    );
    assert_eq!(u8s(&im), &fixture(&format!("{name}.bin"))[..], "{name}");
}

#[test]
fn lossless_formats_equal_pillow() {
    check_exact("rgb_lossless.webp", (13, 11, 3));
    check_exact("rgba_lossless.webp", (13, 11, 4));
    check_exact("rgb.tiff", (13, 11, 3));
    check_exact("rgb_lzw.tiff", (13, 11, 3));
    check_exact("gray_deflate.tiff", (13, 11, 1));
    check_exact("cmyk.tiff", (13, 11, 3));
    check_exact("gray16.tiff", (5, 7, 1));
    check_exact("la.tiff", (6, 9, 2));
    check_exact("bilevel.tiff", (7, 13, 1));
    check_exact("rgba_associated.tiff", (1, 5, 4));
    check_exact("interlaced.png", (11, 13, 3));
}

/// JPEG uses another inverse DCT and chroma upsampling than libjpeg: a few levels apart
/// (measured: 4:4:4 at most 2, 4:2:0 at most 4, grey 1, CMYK 0).
#[test]
fn jpeg_is_within_a_few_levels_of_pillow() {
    for (name, c, bound) in [
        ("rgb444.jpg", 3, 2),
        ("rgb420.jpg", 3, 4),
        ("gray.jpg", 1, 1),
        ("cmyk.jpg", 3, 2),
        ("progressive.jpg", 3, 4),
    ] {
        let im = decode(name);
        assert_eq!(
            (im.height(), im.width(), im.channels()),
            (24, 20, c),
            "{name}"
        );
        let d = max_diff(u8s(&im), &fixture(&format!("{name}.bin")));
        eprintln!("{name}: max difference {d}");
        assert!(d <= bound, "{name}: max difference {d} > {bound}");
    }
}

#[test]
fn lossy_webp_is_close_to_pillow() {
    let im = decode("rgb_lossy.webp");
    assert_eq!((im.height(), im.width(), im.channels()), (24, 20, 3));
    let d = max_diff(u8s(&im), &fixture("rgb_lossy.webp.bin"));
    assert!(d <= 3, "max difference {d}");
}

/// Every format checks the sides and the size from its header.
#[test]
fn limits_are_checked_for_every_format() {
    use dlrs_transforms::{Decode, Error};
    for (name, w, h, c) in [
        ("rgb420.jpg", 20, 24, 3),
        ("cmyk.jpg", 20, 24, 4),
        ("rgb_lossless.webp", 11, 13, 3),
        ("rgb.tiff", 11, 13, 3),
        ("la.tiff", 9, 6, 2),
    ] {
        let data = fixture(name);
        let err = Decode::new(w - 1, 100, 1 << 20)
            .unwrap()
            .decode(&data)
            .unwrap_err();
        assert!(
            matches!(err, Error::TooLarge { width, max_width, .. } if width == w as u64 && max_width == w as u64 - 1),
            "{name}: {err}"
        );
        let err = Decode::new(100, h - 1, 1 << 20)
            .unwrap()
            .decode(&data)
            .unwrap_err();
        assert!(matches!(err, Error::TooLarge { .. }), "{name}: {err}");
        let bytes = w * h * c;
        let err = Decode::new(100, 100, bytes - 1)
            .unwrap()
            .decode(&data)
            .unwrap_err();
        assert!(
            matches!(err, Error::AllocationTooLarge { bytes: b, .. } if b == bytes as u64),
            "{name}: {err}"
        );
        assert!(
            Decode::new(w, h, bytes).unwrap().decode(&data).is_ok(),
            "{name}"
        );
    }
}
