//! Decoded fixtures against Pillow 13's values (`<file>.bin`: `np.asarray(im.convert(...))`,
//! CMYK converted to RGB and I;16 to L as Pillow does).

use crate::{bmp_file, decode, fixture, max_diff, u8s};

fn check_exact(name: &str, (h, w, c): (usize, usize, usize)) {
    let im = decode(name);
    assert_eq!(
        (im.height(), im.width(), im.channels()),
        (h, w, c),
        "{name}"
    );
    assert_eq!(u8s(&im), &fixture(&format!("{name}.bin"))[..], "{name}");
}

/// Lossless formats, and JPEG (libjpeg's arithmetic throughout: islow inverse DCT,
/// upsampling, colour conversion).
#[test]
fn decoders_equal_pillow() {
    check_exact("rgb444.jpg", (24, 20, 3));
    check_exact("rgb420.jpg", (24, 20, 3));
    check_exact("gray.jpg", (24, 20, 1));
    check_exact("cmyk.jpg", (24, 20, 3));
    check_exact("progressive.jpg", (24, 20, 3));
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

#[test]
fn lossy_webp_is_close_to_pillow() {
    let im = decode("rgb_lossy.webp");
    assert_eq!((im.height(), im.width(), im.channels()), (24, 20, 3));
    let d = max_diff(u8s(&im), &fixture("rgb_lossy.webp.bin"));
    assert!(d <= 3, "max difference {d}");
}

/// A PNG of `w × h` pixels of `color` and `depth` (zeros), made with the `png` crate.
fn png(w: u32, h: u32, color: png::ColorType, depth: png::BitDepth) -> Vec<u8> {
    let samples = color.samples()
        * if depth == png::BitDepth::Sixteen {
            2
        } else {
            1
        };
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(color);
    enc.set_depth(depth);
    let mut writer = enc.write_header().unwrap();
    writer
        .write_image_data(&vec![0; w as usize * h as usize * samples])
        .unwrap();
    writer.finish().unwrap();
    out
}

/// A BMP with a 40-byte header of `w × h` pixels of `bits` (zeros, or none at all), `palette`
/// entries first.
fn bmp(w: u32, h: u32, bits: u16, palette: &[[u8; 4]], with_pixels: bool) -> Vec<u8> {
    let stride = (w as usize * usize::from(bits)).div_ceil(32) * 4;
    let pixels = if with_pixels {
        vec![0; stride * h as usize]
    } else {
        Vec::new()
    };
    bmp_file::bmp(w as i32, h as i32, bits, 0, palette, &[], &pixels)
}

/// Every format checks the sides and the size from its header, the size being the decoded
/// image's (uint8, the channels `Decode` returns: CMYK becomes RGB, 16 bits become 8).
#[test]
fn limits_are_checked_for_every_format() {
    use dlrs_transforms::{Decode, Error};
    use png::{BitDepth, ColorType};
    let grey: Vec<[u8; 4]> = (0..=255).map(|i| [i, i, i, 0]).collect();
    let fixtures = [
        ("rgb420.jpg", 20, 24, 3),
        ("cmyk.jpg", 20, 24, 3),
        ("rgb_lossless.webp", 11, 13, 3),
        ("rgba_lossless.webp", 11, 13, 4),
        ("rgb.tiff", 11, 13, 3),
        ("la.tiff", 9, 6, 2),
        ("cmyk.tiff", 11, 13, 3),
        ("gray16.tiff", 7, 5, 1),
    ]
    .map(|(name, w, h, c)| (name, fixture(name), w, h, c));
    // The files made here are all 30 × 20.
    let made = [
        ("rgb png", png(30, 20, ColorType::Rgb, BitDepth::Eight), 3),
        (
            "rgb16 png",
            png(30, 20, ColorType::Rgb, BitDepth::Sixteen),
            3,
        ),
        (
            "grey png",
            png(30, 20, ColorType::Grayscale, BitDepth::Eight),
            1,
        ),
        ("rgba png", png(30, 20, ColorType::Rgba, BitDepth::Eight), 4),
        ("24-bit bmp", bmp(30, 20, 24, &[], true), 3),
        ("grey bmp", bmp(30, 20, 8, &grey, true), 1),
    ]
    .map(|(name, data, c)| (name, data, 30, 20, c));
    for (name, data, w, h, c) in fixtures.into_iter().chain(made) {
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

/// `data` with the frame size of its first SOF segment set to `w × h` and cut after its first
/// SOS header: no end marker, so the decoder stops before it allocates pixels.
fn jpeg_claiming(data: &[u8], w: u16, h: u16) -> Vec<u8> {
    let mut out = data.to_vec();
    let mut at = 2;
    loop {
        let (marker, len) = (
            out[at + 1],
            usize::from(u16::from_be_bytes([out[at + 2], out[at + 3]])),
        );
        if (0xc0..=0xc2).contains(&marker) {
            out[at + 5..at + 7].copy_from_slice(&h.to_be_bytes());
            out[at + 7..at + 9].copy_from_slice(&w.to_be_bytes());
        }
        at += 2 + len;
        if marker == 0xda {
            out.truncate(at);
            return out;
        }
    }
}

/// A PNG of its signature and IHDR alone, claiming `w × h` pixels of `color` (8 bits).
fn png_claiming(w: u32, h: u32, color: u8) -> Vec<u8> {
    fn crc32(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
    let mut body = b"IHDR".to_vec();
    body.extend(w.to_be_bytes());
    body.extend(h.to_be_bytes());
    body.extend([8, color, 0, 0, 0]);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    out.extend(13u32.to_be_bytes());
    out.extend(&body);
    out.extend(crc32(&body).to_be_bytes());
    out
}

/// A 9000 × 9000 RGB image decodes to 232 MiB, under the 256 MiB limit, in every format; at
/// 16384 × 16384 (768 MiB) every format refuses it. The headers alone claim the sizes: the
/// accepted ones fail later for lack of pixels, before their buffers are allocated.
#[test]
fn a_huge_header_is_judged_by_its_decoded_size() {
    use dlrs_transforms::{Decode, Error};
    let jpeg = fixture("rgb444.jpg");
    let claims = |side: u16| {
        let s = u32::from(side);
        vec![
            ("png", png_claiming(s, s, 2)),
            ("jpeg", jpeg_claiming(&jpeg, side, side)),
            ("bmp", bmp(s, s, 24, &[], false)),
        ]
    };
    for (name, data) in claims(9000) {
        let err = Decode::default().decode(&data).unwrap_err();
        assert!(
            !matches!(
                err,
                Error::AllocationTooLarge { .. } | Error::TooLarge { .. }
            ),
            "{name}: {err}"
        );
    }
    for (name, data) in claims(16384) {
        let err = Decode::default().decode(&data).unwrap_err();
        assert!(
            matches!(err, Error::AllocationTooLarge { bytes, .. } if bytes == 16384 * 16384 * 3),
            "{name}: {err}"
        );
    }
    // A lossy WebP claiming 16383 × 16383 (its largest): 768 MiB, refused.
    let mut webp = fixture("rgb_lossy.webp");
    webp[26..28].copy_from_slice(&0x3fffu16.to_le_bytes());
    webp[28..30].copy_from_slice(&0x3fffu16.to_le_bytes());
    let err = Decode::default().decode(&webp).unwrap_err();
    assert!(
        matches!(err, Error::AllocationTooLarge { bytes, .. } if bytes == 16383 * 16383 * 3),
        "webp: {err}"
    );
}

/// `Decode` with `Draft::Auto` before a `Resize` in a `Compose` (past a colour conversion)
/// reduces as `with_draft` of the output size does, and the `Resize` still makes that size;
/// without a resizing step after it, or alone, it decodes at full size.
#[test]
fn auto_draft_follows_the_next_resize() {
    use std::sync::Arc;

    use dlrs_transforms::{
        Compose, Decode, Draft, Interpolation, Item, Resize, ResizeSize, ToFloat, ToRgb, Transform,
    };
    let data = fixture("rgb420.jpg"); // 20 × 24
    let resize = |height, width| {
        Resize::new(
            ResizeSize::Exact { height, width },
            Interpolation::Bilinear,
            None,
            true,
        )
        .unwrap()
    };
    let run = |steps: Vec<Arc<dyn Transform>>| {
        let Item::Image(im) = Compose::new(steps)
            .apply(0, Item::Bytes(data.clone().into()))
            .unwrap()
        else {
            panic!("not an image")
        };
        im
    };
    let auto = Decode::default().with_auto_draft();
    assert_eq!(auto.draft(), Draft::Auto);
    for (h, w) in [(6, 5), (12, 10), (3, 2), (24, 20), (7, 9)] {
        let ours = run(vec![
            Arc::new(auto.clone()),
            Arc::new(ToRgb),
            Arc::new(resize(h, w)),
        ]);
        let explicit = run(vec![
            Arc::new(Decode::default().with_draft(w, h).unwrap()),
            Arc::new(resize(h, w)),
        ]);
        assert_eq!((ours.height(), ours.width()), (h, w));
        assert_eq!(u8s(&ours), u8s(&explicit), "{h}x{w}");
    }
    // 6 × 5 is a reduction by 4: not what a full decode gives.
    let full = run(vec![Arc::new(Decode::default()), Arc::new(resize(6, 5))]);
    let reduced = run(vec![Arc::new(auto.clone()), Arc::new(resize(6, 5))]);
    assert_ne!(u8s(&full), u8s(&reduced));
    // No resizing step next (ToFloat does not keep uint8): full size.
    let Item::Image(im) = Compose::new(vec![Arc::new(auto.clone()), Arc::new(ToFloat::new(true))])
        .apply(0, Item::Bytes(data.clone().into()))
        .unwrap()
    else {
        panic!("not an image")
    };
    assert_eq!((im.height(), im.width()), (24, 20));
    assert_eq!(auto.decode(&data).unwrap().height(), 24);
}

/// Under `Draft::Auto`, `RandomResizedCrop` crops the region it draws for the full image
/// (scaled into the reduced one) and makes its size of it.
#[test]
fn auto_draft_keeps_the_random_crop() {
    use std::sync::Arc;

    use dlrs_transforms::tv::{Interpolation, resize_region_u8};
    use dlrs_transforms::{Compose, Decode, Item, Key, RandomResizedCrop, Size, Transform};
    let data = fixture("rgb444.jpg"); // 20 × 24
    let rrc = RandomResizedCrop::new(
        Size::square(4),
        (0.08, 1.0),
        (0.75, 4.0 / 3.0),
        Interpolation::Bilinear,
        true,
    )
    .unwrap();
    let auto = Compose::new(vec![
        Arc::new(Decode::default().with_auto_draft()),
        Arc::new(rrc.clone()),
    ]);
    let mut scales = std::collections::BTreeSet::new();
    for index in 0..40 {
        let key = Key::new(7, 1, index);
        let shrink = rrc.shrink(key.at(1), 24, 20).unwrap();
        let scale = shrink.reduction();
        scales.insert(scale);
        let Item::Image(ours) = auto
            .apply_keyed(key, Item::Bytes(data.clone().into()))
            .unwrap()
        else {
            panic!("not an image")
        };
        // By hand: the reduced decode, then the scaled region (fractional) resized.
        let (small, _, used) = Decode::default()
            .decode_reduced(&data, &|_, _| scale)
            .unwrap();
        assert_eq!(used, scale);
        let region = shrink.scaled(dlrs_transforms::Reduced::whole((24, 20), scale));
        let s = scale as f64;
        assert_eq!(
            region,
            (
                shrink.top as f64 / s,
                shrink.left as f64 / s,
                shrink.height as f64 / s,
                shrink.width as f64 / s
            )
        );
        let dims = (small.height(), small.width(), 3);
        let want = resize_region_u8(
            u8s(&small),
            dims,
            region,
            (4, 4),
            Interpolation::Bilinear,
            true,
        );
        assert_eq!(u8s(&ours), &want[..], "index {index} scale {scale}");
    }
    // Crops of 8 to 20 pixels a side for an output of 4: reductions by 2 and by 4.
    assert_eq!(scales.into_iter().collect::<Vec<_>>(), [2, 4]);
}

/// The JPEGs decoded in part: 4:2:0 with restart markers, 4:2:2 progressive, 4:4:4, grey
/// progressive, CMYK (Pillow 13, odd sizes).
const WINDOWED: [&str; 5] = [
    "window420r.jpg",
    "window422p.jpg",
    "window444.jpg",
    "windowgray.jpg",
    "windowcmyk.jpg",
];

/// A few windows of an `h × w` image: corners, edges, single pixels, the whole, and some
/// drawn at random (some reaching past the image, which clips them).
fn windows(h: usize, w: usize, seed: u64) -> Vec<dlrs_transforms::Rect> {
    use dlrs_transforms::Rect;
    let mut x = seed | 1;
    let mut next = |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    let mut out = vec![
        Rect::whole((h, w)),
        Rect {
            top: 0,
            left: 0,
            height: 1,
            width: 1,
        },
        Rect {
            top: h - 1,
            left: w - 1,
            height: 1,
            width: 1,
        },
        Rect {
            top: h / 2,
            left: 0,
            height: h,
            width: w / 3 + 1,
        },
        Rect {
            top: 0,
            left: w / 2,
            height: h / 3 + 1,
            width: w,
        },
    ];
    for _ in 0..24 {
        let (top, left) = (next(h), next(w));
        out.push(Rect {
            top,
            left,
            height: 1 + next(h),
            width: 1 + next(w),
        });
    }
    out
}

/// Decoding a window gives that window of the whole image, at every reduction, bit for bit:
/// the upsampling filters read the MCUs around it, scans stop below it.
#[test]
fn a_window_is_that_part_of_the_whole_image() {
    use dlrs_transforms::Decode;
    let decode = Decode::default();
    for name in WINDOWED {
        let data = fixture(name);
        for scale in [1, 2, 4, 8] {
            let (whole, from) = decode.decode_window(&data, &|_, _| (scale, None)).unwrap();
            assert_eq!(
                (from.scale, from.window),
                (scale, dlrs_transforms::Rect::whole(from.size()))
            );
            let (h, w) = from.size();
            let c = whole.channels();
            for want in windows(h, w, scale as u64 + name.len() as u64) {
                let (part, got) = decode
                    .decode_window(&data, &|_, _| (scale, Some(want)))
                    .unwrap();
                let r = want.within((h, w)).unwrap();
                assert_eq!(got.window, r, "{name} 1/{scale} {want:?}");
                let mut crop = Vec::new();
                for y in r.top..r.top + r.height {
                    crop.extend_from_slice(&u8s(&whole)[(y * w + r.left) * c..][..r.width * c]);
                }
                assert_eq!((part.height(), part.width()), (r.height, r.width));
                assert_eq!(u8s(&part), &crop[..], "{name} 1/{scale} {want:?}");
            }
        }
    }
}

/// A `RandomResizedCrop` after `Decode` in a `Compose` has only its crop decoded: the same
/// output as the whole image cropped, at full size and (`Draft::Auto`) reduced.
#[test]
fn random_crops_decode_only_their_window() {
    use std::sync::Arc;

    use dlrs_transforms::tv::{Interpolation, resize_region_u8};
    use dlrs_transforms::{
        Compose, Decode, Item, Key, RandomResizedCrop, Reduced, Size, ToRgb, Transform,
    };
    let image = |item: Item| match item {
        Item::Image(im) => im,
        _ => panic!("not an image"),
    };
    for (k, interp) in [
        Interpolation::Bilinear,
        Interpolation::Bicubic,
        Interpolation::Nearest,
    ]
    .into_iter()
    .enumerate()
    {
        let rrc = RandomResizedCrop::new(
            Size::square(24),
            (0.08, 1.0),
            (0.75, 4.0 / 3.0),
            interp,
            k != 1,
        )
        .unwrap();
        for draft in [false, true] {
            let decode = if draft {
                Decode::default().with_auto_draft()
            } else {
                Decode::default()
            };
            let chain = Compose::new(vec![
                Arc::new(decode),
                Arc::new(ToRgb),
                Arc::new(rrc.clone()),
            ]);
            let mut scales = std::collections::BTreeSet::new();
            for name in WINDOWED {
                let data = fixture(name);
                let full = Decode::default().decode(&data).unwrap();
                let (h, w) = (full.height(), full.width());
                let full = image(ToRgb.apply(0, Item::Image(full)).unwrap());
                for index in 0..12 {
                    let key = Key::new(3, 2, index);
                    let ours = image(
                        chain
                            .apply_keyed(key, Item::Bytes(data.clone().into()))
                            .unwrap(),
                    );
                    let shrink = rrc.shrink(key.at(2), h, w).unwrap();
                    let scale = if draft { shrink.reduction() } else { 1 };
                    scales.insert(scale);
                    let want = if scale == 1 {
                        image(
                            rrc.apply_keyed(key.at(2), Item::Image(full.clone()))
                                .unwrap(),
                        )
                    } else {
                        // The whole reduced image, the crop scaled into it.
                        let (small, _, _) = Decode::default()
                            .decode_reduced(&data, &|_, _| scale)
                            .unwrap();
                        let small = image(ToRgb.apply(0, Item::Image(small)).unwrap());
                        let region = shrink.scaled(Reduced::whole((h, w), scale));
                        let dims = (small.height(), small.width(), 3);
                        let v =
                            resize_region_u8(u8s(&small), dims, region, (24, 24), interp, k != 1);
                        dlrs_transforms::Image::new(
                            24,
                            24,
                            3,
                            dlrs_transforms::Layout::Hwc,
                            dlrs_transforms::Pixels::U8(v),
                        )
                        .unwrap()
                    };
                    assert_eq!(
                        u8s(&ours),
                        u8s(&want),
                        "{name} {interp:?} index {index} 1/{scale}"
                    );
                }
            }
            if draft {
                assert!(scales.len() >= 2, "{scales:?}");
            }
        }
    }
}
