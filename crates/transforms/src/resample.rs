//! What Pillow's resizer (`pil::resize`) and torch's (`tv::resize`) share: the one
//! [`Interpolation`] enum, the filters, the float weights of an antialiased axis, and the
//! nearest modes' copy.

use crate::Error;
use crate::error::from_names;

/// The resampling filter, of Pillow's `Resize` and of torchvision's kernels alike. `Resize`
/// refuses `NearestExact` (Pillow has no such mode); the `tv` kernels take them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Interpolation {
    /// The nearest pixel (Pillow's rule in `Resize`; torch's `floor(x × in / out)` in float32
    /// in `tv`).
    Nearest,
    /// torchvision's `"nearest-exact"`: `floor((x + 0.5) × in / out)` (`tv` only).
    NearestExact,
    #[default]
    /// Linear in both directions.
    Bilinear,
    /// Cubic convolution (`a = −0.5`; torch's `−0.75` in `tv` without antialiasing).
    Bicubic,
    /// Lanczos with 3 lobes (antialiasing only, in `tv`).
    Lanczos3,
}

// `str::parse` takes the names `Resize` takes, with its error; `Interpolation::parse` takes
// torchvision's. Two lists, so that each resizer's errors read as they always have.
from_names!(Interpolation, "Resize", {
    "nearest" => Nearest,
    "bilinear" => Bilinear,
    "bicubic" => Bicubic,
    "lanczos3" | "lanczos" => Lanczos3,
}, other => pil_refusal(other));

/// `Resize`'s error for a name (or mode) it does not take.
pub(crate) fn pil_refusal(name: &str) -> String {
    format!("interpolation {name:?} is not one of nearest, bilinear, bicubic, lanczos3")
}

impl Interpolation {
    /// The name torchvision gives it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Interpolation::Nearest => "nearest",
            Interpolation::NearestExact => "nearest-exact",
            Interpolation::Bilinear => "bilinear",
            Interpolation::Bicubic => "bicubic",
            Interpolation::Lanczos3 => "lanczos",
        }
    }

    /// Parses torchvision's name (`"lanczos3"` is taken for `"lanczos"`); `owner` names the
    /// transform in the error.
    ///
    /// # Errors
    /// Any other name.
    pub fn parse(owner: &'static str, s: &str) -> Result<Interpolation, Error> {
        match s {
            "nearest" => Ok(Interpolation::Nearest),
            "nearest-exact" | "nearest_exact" => Ok(Interpolation::NearestExact),
            "bilinear" => Ok(Interpolation::Bilinear),
            "bicubic" => Ok(Interpolation::Bicubic),
            "lanczos" | "lanczos3" => Ok(Interpolation::Lanczos3),
            other => Err(Error::arg(
                owner,
                format!(
                    "interpolation {other:?} is not one of nearest, nearest-exact, bilinear, \
                     bicubic, lanczos (box and hamming are for PIL images only)"
                ),
            )),
        }
    }

    /// Whether antialiasing applies (torchvision ignores it for the nearest modes).
    #[must_use]
    pub fn filters(self) -> bool {
        !matches!(self, Interpolation::Nearest | Interpolation::NearestExact)
    }
}

/// A filter: its support (radius at scale 1) and its kernel.
#[derive(Clone, Copy)]
pub(crate) struct Filter {
    pub support: f64,
    pub kernel: fn(f64) -> f64,
}

impl Filter {
    /// Pillow's filter for `i` (the nearest modes have none: bilinear stands in).
    pub fn pillow(i: Interpolation) -> Filter {
        match i {
            Interpolation::Bicubic => Filter {
                support: 2.0,
                kernel: |x| cubic(x, -0.5),
            },
            Interpolation::Lanczos3 => Filter {
                support: 3.0,
                kernel: pillow_lanczos3,
            },
            _ => Filter {
                support: 1.0,
                kernel: triangle,
            },
        }
    }

    /// torch's filter for `i`: bicubic's `a` is `−0.75` without antialiasing.
    pub fn torch(i: Interpolation, antialias: bool) -> Filter {
        match i {
            Interpolation::Bicubic => Filter {
                support: 2.0,
                kernel: if antialias {
                    |x| cubic(x, -0.5)
                } else {
                    |x| cubic(x, -0.75)
                },
            },
            Interpolation::Lanczos3 => Filter {
                support: 3.0,
                kernel: torch_lanczos3,
            },
            _ => Filter {
                support: 1.0,
                kernel: triangle,
            },
        }
    }
}

/// `1 − |x|` within 1: the bilinear kernel.
pub(crate) fn triangle(x: f64) -> f64 {
    let x = x.abs();
    if x < 1.0 { 1.0 - x } else { 0.0 }
}

/// Keys' cubic convolution with parameter `a`, in torch's form. Pillow writes the outer piece
/// `(((x − 5) x + 8) x − 4) a`; for its `a = −0.5`, a power of two, each step is Pillow's
/// halved, so both round alike (a zero may differ in sign, which no rounded weight keeps).
pub(crate) fn cubic(x: f64, a: f64) -> f64 {
    let x = x.abs();
    if x < 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    } else {
        0.0
    }
}

/// sin(πx)/(πx), 1 at 0: the Lanczos window (Pillow's and torch's are the same to the bit).
pub(crate) fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let x = x * std::f64::consts::PI;
        x.sin() / x
    }
}

/// Pillow's Lanczos-3, on `[−3, 3)`: its C keeps `x = −3`, where torch's has 0.
fn pillow_lanczos3(x: f64) -> f64 {
    if (-3.0..3.0).contains(&x) {
        sinc(x) * sinc(x / 3.0)
    } else {
        0.0
    }
}

/// torch's Lanczos-3, on `(−3, 3)`.
fn torch_lanczos3(x: f64) -> f64 {
    let x = x.abs();
    if x < 3.0 {
        sinc(x) * sinc(x / 3.0)
    } else {
        0.0
    }
}

/// The float weights of one axis, before each resizer rounds them to its fixed point: per
/// output index the first input index and the number of inputs, and rows of `ksize` weights.
pub(crate) struct Window {
    pub ksize: usize,
    pub bounds: Vec<(usize, usize)>,
    pub weights: Vec<f64>,
    /// The largest weight of the rows that were normalised (those whose sum is not 0).
    pub max: f64,
}

/// The weights of `output` samples over the span `[from, to)` of `input` ones, as Pillow's
/// `precompute_coeffs` and torch's antialiased `_compute_indices_weights_aa` alike compute
/// them: output `i` centred at `from + scale × (i + 0.5)`, the support widened by the scale
/// when shrinking if `widen`, each row divided by its sum.
pub(crate) fn window(
    input: usize,
    (from, to): (f64, f64),
    output: usize,
    filter: Filter,
    widen: bool,
) -> Window {
    let scale = (to - from) / output as f64;
    let filterscale = if widen { scale.max(1.0) } else { 1.0 };
    let support = filter.support * filterscale;
    let ksize = support.ceil() as usize * 2 + 1;
    let ss = 1.0 / filterscale;
    let mut weights = vec![0f64; output * ksize];
    let mut bounds = Vec::with_capacity(output);
    let mut max = 0f64;
    for (i, row) in weights.chunks_exact_mut(ksize).enumerate() {
        let center = from + scale * (i as f64 + 0.5);
        // C casts: truncation toward zero, after adding 0.5.
        let xmin = ((center - support + 0.5) as i64).max(0);
        let xmax = ((center + support + 0.5) as i64).min(input as i64);
        let n = (xmax - xmin).clamp(0, ksize as i64) as usize;
        let mut total = 0.0;
        for (j, w) in row.iter_mut().enumerate().take(n) {
            *w = (filter.kernel)(((j as i64 + xmin) as f64 - center + 0.5) * ss);
            total += *w;
        }
        if total != 0.0 {
            for w in &mut row[..n] {
                *w /= total;
                max = max.max(*w);
            }
        }
        bounds.push((xmin as usize, n));
    }
    Window {
        ksize,
        bounds,
        weights,
        max,
    }
}

/// The pixels at rows `ys` and columns `xs` of an image `w` wide of `c` channels: the nearest
/// modes of both resizers, once each has its table of source indices.
pub(crate) fn pick(src: &[u8], w: usize, c: usize, xs: &[usize], ys: &[usize]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ys.len() * xs.len() * c);
    for &sy in ys {
        let row = &src[sy * w * c..][..w * c];
        for &sx in xs {
            out.extend_from_slice(&row[sx * c..][..c]);
        }
    }
    out
}
