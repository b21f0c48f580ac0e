//! JPEG as Pillow (libjpeg-turbo) decodes it, to the bit: our own baseline and progressive
//! Huffman decoding ([`entropy`]), libjpeg's integer inverse DCTs ([`idct`], also at 1/2, 1/4
//! and 1/8 scale), its upsampling ([`upsample`]) and YCbCr conversion ([`ycc`]); CMYK (Adobe,
//! inverted as Pillow assumes) converted with Pillow's formula.

mod entropy;
mod header;
mod huffman;
mod idct;
mod upsample;
mod ycc;

use self::entropy::Block;
use self::header::{ColorModel, Frame, Tables};
use self::huffman::Bits;
use self::upsample::{Plane, Upsampler};
use super::{DecodeLimits, Raw, cmyk_row_to_rgb};
use crate::{Error, Format, Rect};

/// Whether an end-of-image marker follows the first scan. A file cut inside its scans would
/// decode with the rest grey; Pillow refuses it as truncated, and so do we, before allocating.
fn has_end_marker(data: &[u8]) -> bool {
    // Walk the length-prefixed segments up to the first start-of-scan marker.
    let mut at = 2;
    while at + 4 <= data.len() {
        if data[at] != 0xff {
            // Stray bytes between segments (libjpeg skips them): search from here.
            break;
        }
        let marker = data[at + 1];
        if marker == 0xff {
            at += 1; // fill byte
            continue;
        }
        if marker == 0xda {
            break;
        }
        let len = usize::from(u16::from_be_bytes([data[at + 2], data[at + 3]]));
        at += 2 + len;
    }
    // Entropy-coded data escapes 0xff as 0xff 0x00, so 0xff 0xd9 there is the end marker;
    // searched from the end, where it usually is.
    data.get(at.min(data.len())..)
        .is_some_and(|scan| scan.windows(2).rev().any(|w| w == [0xff, 0xd9]))
}

/// The next marker at or after `at` and the position after it, passing over fill bytes and
/// (as libjpeg does, with a warning) any stray bytes before it.
fn next_marker(data: &[u8], mut at: usize) -> Option<(u8, usize)> {
    loop {
        while *data.get(at)? != 0xff {
            at += 1;
        }
        while *data.get(at)? == 0xff {
            at += 1;
        }
        if data[at] != 0 {
            return Some((data[at], at + 1));
        }
        at += 1;
    }
}

/// Where a component's samples go: its inverse DCT size and its plane, which holds the blocks
/// of the decoded MCUs only.
struct Output {
    /// Samples per block side: 8 at full scale, fewer when decoding reduced.
    size: usize,
    /// Rows of `stride` samples, allocated just before they are written (a progressive
    /// image's coefficients come first).
    plane: Vec<u8>,
    rows: usize,
    stride: usize,
    /// The first block column and row held, and how many of each.
    bx: usize,
    by: usize,
    bw: usize,
    bh: usize,
    /// The samples held across and down (libjpeg's `downsampled_width` and `_height`, less
    /// what lies outside the decoded MCUs), and the component's whole width.
    width: usize,
    height: usize,
    full_width: usize,
    /// Its quantisation table, as it stood at the component's first scan.
    quant: Option<[u16; 64]>,
    idct: idct::BlockFn,
}

impl Output {
    fn allocate(&mut self) {
        if self.plane.is_empty() {
            self.plane = vec![0; self.stride * self.rows];
        }
    }

    #[inline(always)]
    fn put(&mut self, bx: usize, by: usize, block: &Block) {
        // Blocks outside the decoded MCUs wrap to large values and are passed over.
        let (x, y) = (bx.wrapping_sub(self.bx), by.wrapping_sub(self.by));
        if x >= self.bw || y >= self.bh {
            return;
        }
        let s = self.size;
        let at = y * s * self.stride + x * s;
        if let Some(q) = &self.quant {
            (self.idct)(s, block, q, &mut self.plane[at..], self.stride);
        }
    }
}

/// The MCUs decoded, columns `x` and rows `y`: those under the window, and one more on each
/// side where the upsampling filters read. Scans stop after the last row.
struct Grid {
    x: std::ops::Range<usize>,
    y: std::ops::Range<usize>,
    /// An MCU's size in samples of the reduced image, across and down.
    mcu: (usize, usize),
}

impl Grid {
    fn new(f: &Frame, denom: usize, w: Rect) -> Grid {
        let mcu = (f.max_h * (8 / denom), f.max_v * (8 / denom));
        let span = |from: usize, len: usize, side: usize, count: usize| {
            (from / side).saturating_sub(1)..((from + len).div_ceil(side) + 1).min(count)
        };
        Grid {
            x: span(w.left, w.width, mcu.0, f.mcus_x),
            y: span(w.top, w.height, mcu.1, f.mcus_y),
            mcu,
        }
    }
}

/// The decoded image, reduced by the factor (1, 2, 4 or 8) that `plan(width, height)` chooses
/// for the frame's size (libjpeg's DCT scaling, each side rounded up), and of that only the
/// window it names, when it names one: every sample as in the whole image. Returns the window
/// decoded (the whole reduced image without one).
///
/// With a window, the entropy-coded data after its last row, and the restart intervals wholly
/// above it, are not read: damage there goes unnoticed.
pub(crate) fn decode(
    data: &[u8],
    limits: &DecodeLimits,
    plan: &dyn Fn(usize, usize) -> (usize, Option<Rect>),
) -> Result<(Raw, Rect), Error> {
    let mut denom = 1;
    let mut window = Rect::whole((0, 0));
    let mut grid = Grid {
        x: 0..0,
        y: 0..0,
        mcu: (1, 1),
    };
    if !data.starts_with(&[0xff, 0xd8]) {
        return Err(Error::corrupt(Format::Jpeg, "no start-of-image marker"));
    }
    let mut tables = Tables::default();
    let mut frame: Option<Frame> = None;
    let mut outputs: Vec<Output> = Vec::new();
    let mut coefs: Option<Vec<Vec<Block>>> = None;
    let mut model = None;
    let mut at = 2;
    loop {
        let Some((marker, after)) = next_marker(data, at) else {
            return Err(Error::truncated(
                Format::Jpeg,
                "the data ends before the end-of-image marker",
            ));
        };
        at = after;
        match marker {
            0xd9 => break,
            // Restart markers between segments, and TEM, stand alone.
            0xd0..=0xd7 | 0x01 => continue,
            0xd8 => {
                return Err(Error::corrupt(
                    Format::Jpeg,
                    "a second start-of-image marker",
                ));
            }
            _ => {}
        }
        let (body, next) = header::segment(data, at, "a marker segment")?;
        at = next;
        match marker {
            0xc0..=0xc2 => {
                if frame.is_some() {
                    return Err(Error::corrupt(Format::Jpeg, "a second frame header"));
                }
                let f = header::read_frame(body, marker == 0xc2)?;
                let channels = if f.components.len() == 1 { 1 } else { 3 };
                limits.check(f.width as u64, f.height as u64, channels)?;
                if !has_end_marker(data) {
                    return Err(Error::truncated(
                        Format::Jpeg,
                        "no end-of-image marker after the scan data",
                    ));
                }
                let (scale, want) = plan(f.width, f.height);
                denom = match scale {
                    d @ (1 | 2 | 4 | 8) => d,
                    _ => 1,
                };
                let size = (f.height.div_ceil(denom), f.width.div_ceil(denom));
                window = want
                    .and_then(|w| w.within(size))
                    .unwrap_or(Rect::whole(size));
                grid = Grid::new(&f, denom, window);
                outputs = outputs_for(&f, denom, &grid);
                frame = Some(f);
            }
            0xc3 | 0xc5..=0xc7 | 0xc9..=0xcb | 0xcd..=0xcf => {
                let kind = if marker >= 0xc9 {
                    "arithmetic-coded"
                } else {
                    "lossless or hierarchical"
                };
                return Err(Error::unsupported(Format::Jpeg, format!("{kind} JPEG")));
            }
            0xc4 => tables.read_huffman(body)?,
            0xdb => tables.read_quant(body)?,
            0xdd => {
                let [a, b, ..] = *body else {
                    return Err(Error::corrupt(Format::Jpeg, "bad restart interval"));
                };
                tables.restart_interval = usize::from(u16::from_be_bytes([a, b]));
            }
            0xe0..=0xef => tables.read_app(marker, body),
            0xda => {
                let f = frame.as_ref().ok_or_else(|| {
                    Error::corrupt(Format::Jpeg, "a scan before the frame header")
                })?;
                if model.is_none() {
                    model = Some(tables.color_model(f)?);
                }
                let scan = header::read_scan(body, f)?;
                for &(ci, _, _) in &scan.components {
                    let out = &mut outputs[ci];
                    if out.quant.is_none() {
                        let tq = f.components[ci].tq;
                        out.quant = Some(tables.quant[tq].ok_or_else(|| {
                            Error::corrupt(
                                Format::Jpeg,
                                format!("quantisation table {tq} not defined"),
                            )
                        })?);
                    }
                }
                let mut bits = Bits::new(data, at);
                let rows = grid.y.end;
                let whole = !f.progressive
                    && scan.components.len() == f.components.len()
                    && coefs.is_none();
                if whole {
                    // The common case: one scan of everything, each block to its plane at once.
                    outputs.iter_mut().for_each(Output::allocate);
                    // With restart markers, the intervals above the decoded MCUs are passed
                    // over unread: each starts its DC predictions afresh.
                    let mut first = 0;
                    let interval = tables.restart_interval;
                    let skip = match interval {
                        0 => 0,
                        r => entropy::first_unit_of_row(f, &scan, grid.y.start) / r,
                    };
                    if skip > 0
                        && let Some(marker) = entropy::restart_marker(data, at, skip)
                    {
                        bits = Bits::new(data, marker);
                        first = skip * interval;
                    }
                    entropy::sequential(
                        f,
                        &scan,
                        &tables,
                        &mut bits,
                        (first, rows),
                        |ci, bx, by, block| outputs[ci].put(bx, by, block),
                    )?;
                } else {
                    let store = coefs.get_or_insert_with(|| {
                        f.components
                            .iter()
                            .map(|c| vec![[0i16; 64]; c.blocks_w * c.blocks_h])
                            .collect()
                    });
                    if f.progressive {
                        entropy::progressive(f, &scan, &tables, &mut bits, rows, store)?;
                    } else {
                        entropy::sequential(
                            f,
                            &scan,
                            &tables,
                            &mut bits,
                            (0, rows),
                            |ci, bx, by, block| {
                                store[ci][by * f.components[ci].blocks_w + bx] = *block;
                            },
                        )?;
                    }
                }
                at = bits.end();
            }
            _ => {}
        }
    }
    let (Some(frame), Some(model)) = (frame, model) else {
        return Err(Error::corrupt(
            Format::Jpeg,
            "no scan before the end-of-image marker",
        ));
    };
    if let Some(store) = coefs {
        // Each component's coefficients freed once transformed: at most the coefficients and
        // one plane at a time.
        for ((c, out), blocks) in frame.components.iter().zip(&mut outputs).zip(store) {
            out.allocate();
            for (i, block) in blocks.iter().enumerate() {
                out.put(i % c.blocks_w, i / c.blocks_w, block);
            }
        }
    }
    // A component no scan held stays zero.
    outputs.iter_mut().for_each(Output::allocate);
    let width = frame.width.div_ceil(denom);
    let channels = if frame.components.len() == 1 { 1 } else { 3 };
    // Where the decoded MCUs start in the reduced image, and how much of it they cover across.
    let (x0, y0) = (grid.x.start * grid.mcu.0, grid.y.start * grid.mcu.1);
    let across = (grid.x.end * grid.mcu.0).min(width) - x0;
    // The densest component sets the image's size; the others are upsampled to it.
    let mut ups = Vec::with_capacity(outputs.len());
    let min_size = 8 / denom;
    for (c, out) in frame.components.iter().zip(&outputs) {
        let plane = Plane {
            data: &out.plane,
            stride: out.stride,
            width: out.width,
            height: out.height,
        };
        let (fx, fy) = (
            (frame.max_h * min_size) / (c.h * out.size),
            (frame.max_v * min_size) / (c.v * out.size),
        );
        if fx * c.h * out.size != frame.max_h * min_size
            || fy * c.v * out.size != frame.max_v * min_size
        {
            return Err(Error::unsupported(
                Format::Jpeg,
                format!(
                    "sampling factors {}x{} under {}x{}",
                    c.h, c.v, frame.max_h, frame.max_v
                ),
            ));
        }
        // At 1/8 scale libjpeg has no context rows, so it replicates instead of filtering.
        ups.push(Upsampler::new(
            plane,
            (fx, fy),
            across,
            out.full_width,
            min_size > 1,
        )?);
    }
    let mut out = vec![0u8; window.width * window.height * channels];
    let at = (window.top - y0, window.left - x0);
    let row_bytes = window.width * channels;
    convert_fast(
        model,
        &mut ups,
        Rows {
            out: &mut out,
            row_bytes,
            at,
        },
    );
    let raw = Raw {
        width: window.width,
        height: window.height,
        channels,
        data: out,
    };
    Ok((raw, window))
}

/// Each component's inverse DCT size at 1/`denom` scale and its plane for the MCUs of
/// `grid`. As libjpeg does, a subsampled component is decoded larger where that spares
/// upsampling it.
fn outputs_for(f: &Frame, denom: usize, grid: &Grid) -> Vec<Output> {
    let min = 8 / denom;
    let idct = idct::block_fn();
    f.components
        .iter()
        .map(|c| {
            let mut size = min;
            while size < 8
                && (f.max_h * min) % (c.h * size * 2) == 0
                && (f.max_v * min) % (c.v * size * 2) == 0
            {
                size *= 2;
            }
            let (bx, by) = (grid.x.start * c.h, grid.y.start * c.v);
            let (bw, bh) = (grid.x.len() * c.h, grid.y.len() * c.v);
            let full_width = (f.width * c.h * size).div_ceil(f.max_h * 8);
            let full_height = (f.height * c.v * size).div_ceil(f.max_v * 8);
            Output {
                size,
                plane: Vec::new(),
                rows: bh * size,
                stride: bw * size,
                bx,
                by,
                bw,
                bh,
                width: full_width.min((bx + bw) * size) - bx * size,
                height: full_height.min((by + bh) * size) - by * size,
                full_width,
                quant: None,
                idct,
            }
        })
        .collect()
}

/// Where [`convert`] writes: `out`, rows of `row_bytes`, from row `at.0` and column `at.1` of
/// the upsampled planes on.
struct Rows<'o> {
    out: &'o mut [u8],
    row_bytes: usize,
    at: (usize, usize),
}

/// The image's rows from its components: copied, colour converted, or CMYK converted to RGB.
#[inline(always)]
fn convert(input: ColorModel, ups: &mut [Upsampler<'_>], to: Rows<'_>) {
    let Rows {
        out,
        row_bytes,
        at: (y0, x0),
    } = to;
    let n = row_bytes
        / if matches!(input, ColorModel::Gray) {
            1
        } else {
            3
        };
    let rows = out.chunks_exact_mut(row_bytes);
    let at = |y: usize| (y0 + y, x0..x0 + n);
    match (input, &mut ups[..]) {
        (ColorModel::Gray, [l]) => {
            for (y, o) in rows.enumerate() {
                let (y, xs) = at(y);
                o.copy_from_slice(&l.row(y)[xs]);
            }
        }
        (ColorModel::YCbCr, [l, cb, cr]) => {
            let mut planes = vec![0u8; row_bytes];
            for (y, o) in rows.enumerate() {
                let (y, xs) = at(y);
                let (l, cb, cr) = (
                    &l.row(y)[xs.clone()],
                    &cb.row(y)[xs.clone()],
                    &cr.row(y)[xs],
                );
                ycc::row_to_rgb(l, cb, cr, &mut planes, o);
            }
        }
        (ColorModel::Rgb, [r, g, b]) => {
            for (y, o) in rows.enumerate() {
                let (y, xs) = at(y);
                let (r, g, b) = (&r.row(y)[xs.clone()], &g.row(y)[xs.clone()], &b.row(y)[xs]);
                ycc::interleave(r, g, b, o);
            }
        }
        (ColorModel::Cmyk | ColorModel::Ycck, [p, q, r, k]) => {
            let ycck = matches!(input, ColorModel::Ycck);
            let mut cmyk = vec![0u8; row_bytes / 3 * 4];
            for (y, o) in rows.enumerate() {
                let (y, xs) = at(y);
                let (p, q) = (&p.row(y)[xs.clone()], &q.row(y)[xs.clone()]);
                let (r, k) = (&r.row(y)[xs.clone()], &k.row(y)[xs]);
                for (i, px) in cmyk.chunks_exact_mut(4).enumerate() {
                    px.copy_from_slice(&if ycck {
                        // libjpeg makes CMYK of 255 - R, G, B; Pillow inverts it back.
                        let [r, g, b] = ycc::pixel(p[i], q[i], r[i]);
                        [r, g, b, 255 - k[i]]
                    } else {
                        // Pillow reads 4 components as inverted (Adobe) CMYK.
                        [255 - p[i], 255 - q[i], 255 - r[i], 255 - k[i]]
                    });
                }
                cmyk_row_to_rgb(&cmyk, o);
            }
        }
        _ => unreachable!("components counted from the colour space above"),
    }
}

/// [`convert`] compiled for AVX2 when the CPU has it (the build targets any x86-64), so that
/// its per-sample loops vectorize twice as wide. The values are the same either way.
fn convert_fast(input: ColorModel, ups: &mut [Upsampler<'_>], to: Rows<'_>) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        fn avx2(input: ColorModel, ups: &mut [Upsampler<'_>], to: Rows<'_>) {
            convert(input, ups, to);
        }
        if crate::simd::avx2() {
            // SAFETY: `avx2` only enables instructions the CPU was just found to have.
            return unsafe { avx2(input, ups, to) };
        }
    }
    convert(input, ups, to);
}

#[cfg(test)]
mod tests {
    use super::has_end_marker;

    #[test]
    fn end_marker_after_the_first_scan() {
        // SOI, APP0 of 4 bytes whose payload holds ff d9 (not an end marker), SOS, data, EOI.
        let head = [
            0xff, 0xd8, 0xff, 0xe0, 0x00, 0x04, 0xff, 0xd9, 0xff, 0xda, 0x00, 0x02,
        ];
        let mut file = head.to_vec();
        file.extend([0x12, 0xff, 0x00, 0x34]);
        assert!(!has_end_marker(&file));
        file.extend([0xff, 0xd9, 0x00]);
        assert!(has_end_marker(&file));
        // Stray bytes before a segment: the search starts there.
        assert!(has_end_marker(&[0xff, 0xd8, 0x00, 0x01, 0xff, 0xd9]));
        assert!(!has_end_marker(&[0xff, 0xd8, 0xff, 0xe0, 0x40, 0x00]));
    }
}
