//! Fuzzes the JPEG decoder's reduced (draft) decode: three parameter bytes (the factor, and the
//! size asked of a draft), then the JPEG. A reduced image has each side of the full one divided
//! by its factor, rounded up, and `Decode::with_draft` picks Pillow's factor and gives the same
//! pixels as the reduced decode at that factor.
#![no_main]

use dlrs_fuzz::{params, scale};
use dlrs_transforms::{Decode, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let ([pick, want_w, want_h], jpeg) = params::<3>(data);
    let decode = Decode::new(1024, 1024, 1 << 20).expect("valid limits");
    let factor = scale(pick);
    let Ok((image, (h, w), s)) = decode.decode_reduced(jpeg, &|_, _| factor) else {
        return;
    };
    assert_eq!(
        s,
        if matches!(factor, 2 | 4 | 8) {
            factor
        } else {
            1
        }
    );
    assert_eq!(
        (image.height(), image.width()),
        (h.div_ceil(s), w.div_ceil(s))
    );
    assert_eq!(
        image.as_bytes().len(),
        image.height() * image.width() * image.channels()
    );

    // The draft asks for at least `want` on each side (8 × the byte, or the byte).
    let side = |b: u8| usize::from(b).max(1) * if pick & 0x80 != 0 { 8 } else { 1 };
    let (ww, wh) = (side(want_w), side(want_h));
    let draft = decode.clone().with_draft(ww, wh).expect("a positive draft");
    let Ok(drafted) = draft.decode_as(Format::Jpeg, jpeg) else {
        return;
    };
    // Pillow's rule: the largest of 8, 4 and 2 that keeps both sides at least the draft's.
    let d = [8, 4, 2]
        .into_iter()
        .find(|&d| w / d >= ww && h / d >= wh)
        .unwrap_or(1);
    let got = (drafted.height(), drafted.width());
    assert_eq!(
        got,
        (h.div_ceil(d), w.div_ceil(d)),
        "a draft of {ww}x{wh} by {d}"
    );
    if d == s {
        assert!(
            drafted.as_bytes() == image.as_bytes(),
            "draft and reduced differ at {d}"
        );
    } else if let Ok((again, _, _)) = decode.decode_reduced(jpeg, &|_, _| d) {
        assert!(
            drafted.as_bytes() == again.as_bytes(),
            "draft and reduced differ at {d}"
        );
    }
});
