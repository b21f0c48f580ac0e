//! Fuzzes the JPEG decoder's crop-window decode: five parameter bytes (the factor, whether to
//! name a window, and where it lies in the reduced image), then the JPEG. A window decoded is
//! the window asked for (clamped to the image), and when the whole reduced image decodes too,
//! its pixels are exactly the window's part of it.
#![no_main]

use dlrs_fuzz::{params, scale};
use dlrs_transforms::{Decode, Rect};
use libfuzzer_sys::fuzz_target;

/// A span of `side` from two parameter bytes: a start and a length, as fractions of the side,
/// or (`raw`) the bytes themselves, which may lie past the side.
fn span(side: usize, start: u8, len: u8, raw: bool) -> (usize, usize) {
    if raw {
        (usize::from(start), usize::from(len))
    } else {
        let from = usize::from(start) * side / 256;
        (from, (usize::from(len) * side / 256).max(1))
    }
}

fuzz_target!(|data: &[u8]| {
    let ([pick, top, left, height, width], jpeg) = params::<5>(data);
    let decode = Decode::new(1024, 1024, 1 << 20).expect("valid limits");
    let factor = scale(pick);
    let named = pick & 0x40 == 0;
    let raw = pick & 0x80 != 0;
    let plan = |h: usize, w: usize| {
        let s = if matches!(factor, 2 | 4 | 8) {
            factor
        } else {
            1
        };
        let (rh, rw) = (h.div_ceil(s), w.div_ceil(s));
        let (t, hh) = span(rh, top, height, raw);
        let (l, ww) = span(rw, left, width, raw);
        let window = Rect {
            top: t,
            left: l,
            height: hh,
            width: ww,
        };
        (factor, named.then_some(window))
    };
    let Ok((image, from)) = decode.decode_window(jpeg, &plan) else {
        return;
    };
    let (h, w) = from.full;
    assert!(h <= 1024 && w <= 1024);
    assert_eq!(
        from.scale,
        if matches!(factor, 2 | 4 | 8) {
            factor
        } else {
            1
        }
    );
    let (rh, rw) = from.size();
    let win = from.window;
    assert!(win.height > 0 && win.width > 0, "an empty window {win:?}");
    assert!(win.top + win.height <= rh && win.left + win.width <= rw);
    if let (_, Some(asked)) = plan(h, w) {
        assert_eq!(
            Some(win),
            asked.within((rh, rw)).or(Some(Rect::whole((rh, rw))))
        );
    } else {
        assert_eq!(win, Rect::whole((rh, rw)));
    }
    assert_eq!((image.height(), image.width()), (win.height, win.width));
    let c = image.channels();
    assert_eq!(image.as_bytes().len(), win.height * win.width * c);

    // The same image, whole at the same factor: the window is a crop of it.
    let Ok((whole, full, s)) = decode.decode_reduced(jpeg, &|_, _| factor) else {
        return;
    };
    assert_eq!((full, s), (from.full, from.scale));
    assert_eq!(
        (whole.height(), whole.width(), whole.channels()),
        (rh, rw, c)
    );
    let (a, b) = (image.as_bytes(), whole.as_bytes());
    for y in 0..win.height {
        let row = &a[y * win.width * c..][..win.width * c];
        let at = ((win.top + y) * rw + win.left) * c;
        assert!(
            row == &b[at..at + win.width * c],
            "row {y} of window {win:?} differs from the whole image at scale {s}"
        );
    }
});
