//! The switch of our SIMD kernels. Each kernel with an AVX2 (and FMA) version asks here
//! before taking it; the portable version gives the same values, and `DLRS_SIMD=off` in the
//! environment makes every kernel take it, so that the two can be compared end to end.
//!
//! The variable is read once, at the first kernel that asks: set it before the process starts.
//! `off`, `0`, `false` or `no` (any case) turn SIMD off; unset or any other value leaves it on.

use std::sync::OnceLock;

/// The name of the environment variable that turns SIMD off.
pub const ENV: &str = "DLRS_SIMD";

fn allowed_by_env() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var(ENV).map_or(true, |v| {
            !matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "off" | "0" | "false" | "no"
            )
        })
    })
}

#[cfg(test)]
thread_local! {
    static PORTABLE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the SIMD kernels may run (the CPU's features are asked apart): `false` under
/// `DLRS_SIMD=off`.
#[must_use]
pub fn enabled() -> bool {
    #[cfg(test)]
    if PORTABLE.with(std::cell::Cell::get) {
        return false;
    }
    allowed_by_env()
}

/// The AVX2 kernels may run: SIMD is on and the CPU has AVX2.
#[inline]
pub(crate) fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        enabled() && std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The AVX2 and FMA kernels may run: SIMD is on and the CPU has both.
#[inline]
pub(crate) fn avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx2() && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Runs `f` with SIMD off on this thread, as `DLRS_SIMD=off` would for the process.
#[cfg(test)]
pub(crate) fn portable<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            PORTABLE.with(|p| p.set(self.0));
        }
    }
    let _reset = Reset(PORTABLE.with(|p| p.replace(true)));
    f()
}

/// Each kernel with a SIMD version, through the function the transforms call, against itself
/// with SIMD off: the same values on random inputs. (On a CPU without AVX2 both sides are
/// portable.)
#[cfg(test)]
mod tests {
    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::portable;
    use crate::tv::affine::{Sampling, affine_u8};
    use crate::tv::{Interpolation, color, enhance, resize_u8};
    use crate::{Decode, Item, Transform};

    /// `f` with SIMD on, then off, on a copy of `v` each.
    fn both(v: &[u8], f: impl Fn(&mut [u8])) -> (Vec<u8>, Vec<u8>) {
        let (mut on, mut off) = (v.to_vec(), v.to_vec());
        f(&mut on);
        portable(|| f(&mut off));
        (on, off)
    }

    #[test]
    fn the_switch_is_per_thread_and_restored() {
        let before = super::enabled();
        portable(|| {
            assert!(!super::enabled());
            assert!(!super::avx2() && !super::avx2_fma());
            assert_eq!(std::thread::spawn(super::enabled).join().unwrap(), before);
        });
        assert_eq!(super::enabled(), before);
    }

    fn image(max_side: usize, c: usize) -> impl Strategy<Value = (usize, usize, Vec<u8>)> {
        (1..=max_side, 1..=max_side)
            .prop_flat_map(move |(h, w)| (Just(h), Just(w), vec(any::<u8>(), h * w * c)))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn resize(
            (c, (h, w, v)) in (1usize..=4).prop_flat_map(|c| (Just(c), image(40, c))),
            (oh, ow) in (1usize..60, 1usize..60),
            interp in prop::sample::select(vec![
                Interpolation::Bilinear, Interpolation::Bicubic, Interpolation::Lanczos3,
            ]),
            antialias in any::<bool>(),
        ) {
            let antialias = antialias || interp == Interpolation::Lanczos3;
            let on = resize_u8(&v, (h, w, c), (oh, ow), interp, antialias);
            let off = portable(|| resize_u8(&v, (h, w, c), (oh, ow), interp, antialias));
            prop_assert_eq!(on, off);
        }

        #[test]
        fn affine(
            (h, w, v) in image(40, 3),
            m in vec(-2.0f64..2.0, 6),
            bilinear in any::<bool>(),
            fill in any::<bool>(),
        ) {
            let matrix: [f64; 6] = std::array::from_fn(|i| m[i] * if i % 3 == 2 { 10.0 } else { 1.0 });
            let sampling = if bilinear { Sampling::Bilinear } else { Sampling::Nearest };
            let fill = fill.then_some(&[10.0f32, 200.0, 30.0][..]);
            let on = affine_u8(&v, (h, w, 3), matrix, sampling, fill);
            let off = portable(|| affine_u8(&v, (h, w, 3), matrix, sampling, fill));
            prop_assert_eq!(on, off);
        }

        #[test]
        fn colour((_, _, v) in image(40, 3), f in 0.0f64..3.0, hue in -0.5f64..0.5) {
            let (on, off) = both(&v, |x| color::saturation(x, 3, f));
            prop_assert_eq!(on, off);
            let (on, off) = both(&v, |x| color::contrast(x, 3, f));
            prop_assert_eq!(on, off);
            let (on, off) = both(&v, |x| color::brightness(x, f));
            prop_assert_eq!(on, off);
            let (on, off) = both(&v, |x| color::hue(x, 3, hue));
            prop_assert_eq!(on, off);
            let (on, off) = both(&v, |x| color::grayscale(x, 3));
            prop_assert_eq!(on, off);
        }

        #[test]
        fn sharpness((h, w, v) in image(40, 3), f in 0.0f64..3.0) {
            let (on, off) = both(&v, |x| enhance::sharpness(x, (h, w, 3), f));
            prop_assert_eq!(on, off);
        }

        /// The JPEG fixtures, whole, reduced and with bytes of their scans changed (the
        /// decoder's answer, image or error, is the same).
        #[test]
        fn jpeg(
            which in 0usize..JPEGS.len(),
            draft in prop::sample::select(vec![0usize, 12, 6, 3]),
            changes in vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        ) {
            let mut data = JPEGS[which].to_vec();
            // Past the headers: the scans are the last part of these small files.
            let from = data.len() / 2;
            for (at, byte) in changes {
                let i = from + at.index(data.len() - 2 - from);
                data[i] = byte;
            }
            let mut decode = Decode::new(1 << 14, 1 << 14, 1 << 28).unwrap();
            if draft > 0 {
                decode = decode.with_draft(draft, draft).unwrap();
            }
            let run = || {
                decode
                    .apply(0, Item::Bytes(data.clone().into()))
                    .and_then(|item| item.into_image("test"))
                    .map(|im| (im.height(), im.width(), im.channels(), im.into_pixels()))
                    .map_err(|e| e.to_string())
            };
            let on = run();
            let off = portable(run);
            prop_assert_eq!(on, off);
        }
    }

    const JPEGS: [&[u8]; 10] = [
        include_bytes!("../tests/data/rgb444.jpg"),
        include_bytes!("../tests/data/rgb420.jpg"),
        include_bytes!("../tests/data/gray.jpg"),
        include_bytes!("../tests/data/cmyk.jpg"),
        include_bytes!("../tests/data/progressive.jpg"),
        include_bytes!("../tests/data/window420r.jpg"),
        include_bytes!("../tests/data/window422p.jpg"),
        include_bytes!("../tests/data/window444.jpg"),
        include_bytes!("../tests/data/windowcmyk.jpg"),
        include_bytes!("../tests/data/windowgray.jpg"),
    ];
}
