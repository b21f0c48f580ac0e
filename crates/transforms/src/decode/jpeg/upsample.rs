//! A component brought to the image's size with libjpeg's rules (its default "fancy"
//! upsampling): 2:1 triangular filters (3/4 of the nearer sample, 1/4 of the farther) with
//! alternating rounding biases and the edge sample repeated, replication otherwise.

use crate::{Error, Format};

/// One decoded component: `width × height` samples, rows `stride` bytes apart.
#[derive(Clone, Copy)]
pub(super) struct Plane<'a> {
    pub data: &'a [u8],
    pub stride: usize,
    pub width: usize,
    pub height: usize,
}

impl<'a> Plane<'a> {
    #[inline]
    fn row(&self, y: usize) -> &'a [u8] {
        &self.data[y * self.stride..][..self.width]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    /// Full resolution: the plane's rows as they are.
    Full,
    /// Twice as wide: a horizontal triangle filter.
    Fancy2x1,
    /// Twice as wide and tall: the triangle filter vertically, then horizontally.
    Fancy2x2,
    /// Twice as tall: the triangle filter vertically.
    Fancy1x2,
    /// Each sample repeated `fx` times across and `fy` times down.
    Replicate { fx: usize, fy: usize },
}

/// Rows of one component at the image's size, one at a time.
pub(super) struct Upsampler<'a> {
    plane: Plane<'a>,
    method: Method,
    width: usize,
    /// The output row (the filters write it here; `Full` borrows the plane's row).
    out: Vec<u8>,
    /// The vertical filter's column sums (`Fancy2x2`), at most 4 * 255.
    sums: Vec<u16>,
}

impl<'a> Upsampler<'a> {
    /// A component sampled `fx` times less often across than the densest one, `fy` times less
    /// down, for an image `width` samples wide. `plane` may be part of a component `full_width`
    /// samples wide: its edges are then filtered as the image's, and only the samples one away
    /// from them on are the image's.
    /// `filter` false: replication only (libjpeg at 1/8 scale, where it has no context rows).
    pub(super) fn new(
        plane: Plane<'a>,
        (fx, fy): (usize, usize),
        width: usize,
        full_width: usize,
        filter: bool,
    ) -> Result<Self, Error> {
        // libjpeg filters only a component more than 2 samples wide; a narrower one repeats.
        let fancy = filter && full_width > 2 && plane.width >= 2;
        let method = match (fx, fy) {
            (1, 1) => Method::Full,
            (2, 1) if fancy => Method::Fancy2x1,
            (2, 2) if fancy => Method::Fancy2x2,
            (1, 2) if filter => Method::Fancy1x2,
            (1..=4, 1..=4) => Method::Replicate { fx, fy },
            _ => {
                return Err(Error::unsupported(
                    Format::Jpeg,
                    format!("a component sampled 1/{fx} across and 1/{fy} down"),
                ));
            }
        };
        let out = match method {
            Method::Full => Vec::new(),
            _ => vec![0; plane.width * fx],
        };
        let sums = match method {
            Method::Fancy2x2 => vec![0; plane.width],
            _ => Vec::new(),
        };
        Ok(Upsampler {
            plane,
            method,
            width,
            out,
            sums,
        })
    }

    /// Output row `y` of the image, `width` samples.
    #[inline(always)]
    pub(super) fn row(&mut self, y: usize) -> &[u8] {
        let p = self.plane;
        match self.method {
            Method::Full => return &p.row(y)[..self.width],
            Method::Fancy2x1 => triangle_across(p.row(y), &mut self.out, [1, 2], 2),
            Method::Fancy2x2 => {
                let (near, far) = near_far(&p, y);
                for ((s, &a), &b) in self.sums.iter_mut().zip(near).zip(far) {
                    *s = 3 * u16::from(a) + u16::from(b);
                }
                triangle_across(&self.sums, &mut self.out, [8, 7], 4);
            }
            Method::Fancy1x2 => {
                let (near, far) = near_far(&p, y);
                // The upper row of a pair rounds with 1, the lower with 2.
                let bias = 1 + (y & 1) as u16;
                for ((o, &a), &b) in self.out.iter_mut().zip(near).zip(far) {
                    *o = ((3 * u16::from(a) + u16::from(b) + bias) >> 2) as u8;
                }
            }
            Method::Replicate { fx, fy } => {
                let src = p.row(y / fy);
                for (chunk, &v) in self.out.chunks_exact_mut(fx).zip(src) {
                    chunk.fill(v);
                }
            }
        }
        &self.out[..self.width]
    }
}

/// The input rows of output row `y` of a component twice as tall: the nearer one and the
/// other neighbour (above for an even `y`, below for an odd one), the edge row repeated.
#[inline(always)]
fn near_far<'a>(p: &Plane<'a>, y: usize) -> (&'a [u8], &'a [u8]) {
    let r = y / 2;
    let far = if y & 1 == 0 {
        r.saturating_sub(1)
    } else {
        (r + 1).min(p.height - 1)
    };
    (p.row(r), p.row(far))
}

/// Doubles a row: output `2i` is `(3 s[i] + s[i-1] + bias[0]) >> shift`, `2i+1` is
/// `(3 s[i] + s[i+1] + bias[1]) >> shift`, with `s[-1] = s[0]` and `s[n] = s[n-1]`.
#[inline(always)]
fn triangle_across<T: Copy + Into<u16>>(s: &[T], out: &mut [u8], bias: [u16; 2], shift: u32) {
    let n = s.len();
    debug_assert!(n >= 2 && out.len() >= 2 * n);
    let (first, last) = (s[0].into(), s[n - 1].into());
    out[0] = ((4 * first + bias[0]) >> shift) as u8;
    out[2 * n - 1] = ((4 * last + bias[1]) >> shift) as u8;
    // Each output pair from three neighbours, in a form the compiler vectorizes.
    let pairs = out[1..2 * n - 1].chunks_exact_mut(2);
    for ((o, &a), &b) in pairs.zip(&s[..n - 1]).zip(&s[1..]) {
        let (a, b): (u16, u16) = (a.into(), b.into());
        o[0] = ((3 * a + b + bias[1]) >> shift) as u8;
        o[1] = ((3 * b + a + bias[0]) >> shift) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plane(data: &[u8], width: usize, height: usize) -> Plane<'_> {
        Plane {
            data,
            stride: width,
            width,
            height,
        }
    }

    fn rows(
        data: &[u8],
        w: usize,
        h: usize,
        fx: usize,
        fy: usize,
        out_w: usize,
        out_h: usize,
    ) -> Vec<Vec<u8>> {
        let mut up = Upsampler::new(plane(data, w, h), (fx, fy), out_w, w, true).unwrap();
        (0..out_h).map(|y| up.row(y).to_vec()).collect()
    }

    #[test]
    fn across_by_hand() {
        // 10, 50, 90: 10 | (30+50+2)/4=20 | (150+10+1)/4=40 | (150+90+2)/4=60 | (270+50+1)/4=80 | 90.
        assert_eq!(
            rows(&[10, 50, 90], 3, 1, 2, 1, 6, 1),
            [vec![10, 20, 40, 60, 80, 90]]
        );
        // An odd image width drops the last output sample.
        assert_eq!(
            rows(&[10, 50, 90], 3, 1, 2, 1, 5, 1),
            [vec![10, 20, 40, 60, 80]]
        );
        // Two samples or fewer are repeated, not filtered.
        assert_eq!(rows(&[10, 50], 2, 1, 2, 1, 4, 1), [vec![10, 10, 50, 50]]);
    }

    #[test]
    fn both_ways_by_hand() {
        // Rows 0, 16, 32 across (all columns equal): output row 0 sums 4*0 -> 0; row 1:
        // 3*0+16=16 -> (64+7)/16=4 on the left edge ((4*16+8)>>4 = 4 as well); row 2: 3*16+0.
        let data = [0, 0, 0, 16, 16, 16];
        let out = rows(&data, 3, 2, 2, 2, 6, 4);
        assert_eq!(out[0], vec![0; 6]);
        assert_eq!(out[1], vec![4, 4, 4, 4, 4, 4]);
        assert_eq!(out[2], vec![12, 12, 12, 12, 12, 12]);
        assert_eq!(out[3], vec![16; 6]);
    }

    #[test]
    fn down_by_hand() {
        let out = rows(&[0, 100], 1, 2, 1, 2, 1, 4);
        // Row 0: 0; row 1: (0+100+2)/4 = 25; row 2: (300+0+1)/4 = 75; row 3: 100.
        assert_eq!(out, [vec![0], vec![25], vec![75], vec![100]]);
    }

    proptest::proptest! {
        /// A flat component stays flat, whatever the method and the sizes.
        #[test]
        fn flat_stays_flat(v: u8, w in 1usize..20, h in 1usize..6, fx in 1usize..=2, fy in 1usize..=2) {
            let data = vec![v; w * h];
            for row in rows(&data, w, h, fx, fy, w * fx, h * fy) {
                proptest::prop_assert!(row.iter().all(|&x| x == v));
            }
        }

        /// Each filtered sample lies between its two input samples.
        #[test]
        fn between_neighbours(data in proptest::collection::vec(0u8..=255, 3..40)) {
            let out = rows(&data, data.len(), 1, 2, 1, 2 * data.len(), 1).remove(0);
            for (x, &o) in out.iter().enumerate() {
                let i = x / 2;
                let j = if x % 2 == 0 { i.saturating_sub(1) } else { (i + 1).min(data.len() - 1) };
                let (lo, hi) = (data[i].min(data[j]), data[i].max(data[j]));
                proptest::prop_assert!(lo <= o && o <= hi);
            }
        }
    }
}
