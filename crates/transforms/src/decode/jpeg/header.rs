//! The segments around the scans: the frame, its tables, the restart interval and the
//! markers that name the colour space, read as libjpeg reads them.

use super::huffman::Huffman;
use crate::{Error, Format};

/// Natural (row-major) position of the `k`-th coefficient in zig-zag order, with 16 more
/// entries so that a corrupt run past the end lands on the last coefficient (as in libjpeg).
pub(super) const NATURAL: [u8; 80] = natural_order();

const fn natural_order() -> [u8; 80] {
    let mut out = [63u8; 80];
    let (mut k, mut s) = (0, 0);
    // Diagonal `s` holds the positions with row + column = s, walked up or down in turn.
    while s < 15 {
        let mut i = 0;
        while i <= s {
            let (row, col) = if s % 2 == 0 { (s - i, i) } else { (i, s - i) };
            if row < 8 && col < 8 {
                out[k] = (row * 8 + col) as u8;
                k += 1;
            }
            i += 1;
        }
        s += 1;
    }
    out
}

/// The colour space the components are in, as libjpeg guesses it from the markers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ColorModel {
    Gray,
    YCbCr,
    Rgb,
    Cmyk,
    Ycck,
}

#[derive(Clone, Debug)]
pub(super) struct Component {
    pub id: u8,
    /// Sampling factors across and down.
    pub h: usize,
    pub v: usize,
    /// Its quantisation table.
    pub tq: usize,
    /// Blocks across and down in the grid of whole MCUs.
    pub blocks_w: usize,
    pub blocks_h: usize,
}

#[derive(Clone, Debug)]
pub(super) struct Frame {
    pub width: usize,
    pub height: usize,
    pub progressive: bool,
    pub components: Vec<Component>,
    pub max_h: usize,
    pub max_v: usize,
    pub mcus_x: usize,
    pub mcus_y: usize,
}

impl Frame {
    /// A component's size in samples at full scale (libjpeg's `downsampled_width`).
    pub(super) fn samples(&self, c: &Component) -> (usize, usize) {
        (
            (self.width * c.h).div_ceil(self.max_h),
            (self.height * c.v).div_ceil(self.max_v),
        )
    }
}

/// One scan's header.
pub(super) struct Scan {
    /// Indices into the frame's components, with their DC and AC table numbers.
    pub components: Vec<(usize, usize, usize)>,
    /// Spectral selection and successive approximation (T.81 G.1.1).
    pub ss: usize,
    pub se: usize,
    pub ah: u32,
    pub al: u32,
}

/// The tables and markers seen so far.
#[derive(Default)]
pub(super) struct Tables {
    /// In natural order.
    pub quant: [Option<[u16; 64]>; 4],
    pub dc: [Option<Huffman>; 4],
    pub ac: [Option<Huffman>; 4],
    pub restart_interval: usize,
    pub jfif: bool,
    /// The transform byte of an Adobe APP14 marker.
    pub adobe: Option<u8>,
}

fn short(what: &str) -> Error {
    Error::truncated(Format::Jpeg, format!("the data ends inside {what}"))
}

/// A segment's payload (after its length) and the position after it.
pub(super) fn segment<'a>(
    data: &'a [u8],
    at: usize,
    what: &str,
) -> Result<(&'a [u8], usize), Error> {
    let len = data
        .get(at..at + 2)
        .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
        .ok_or_else(|| short(what))?;
    if len < 2 {
        return Err(Error::corrupt(
            Format::Jpeg,
            format!("{what} of length {len}"),
        ));
    }
    let body = data.get(at + 2..at + len).ok_or_else(|| short(what))?;
    Ok((body, at + len))
}

impl Tables {
    /// DQT: one or more tables of 8- or 16-bit values in zig-zag order.
    pub(super) fn read_quant(&mut self, mut body: &[u8]) -> Result<(), Error> {
        while let [pq_tq, rest @ ..] = body {
            let (precision, id) = (pq_tq >> 4, usize::from(pq_tq & 15));
            let size = if precision == 0 { 64 } else { 128 };
            if id > 3 || precision > 1 || rest.len() < size {
                return Err(Error::corrupt(Format::Jpeg, "bad quantisation table"));
            }
            let mut table = [0u16; 64];
            for k in 0..64 {
                let v = if precision == 0 {
                    u16::from(rest[k])
                } else {
                    u16::from_be_bytes([rest[2 * k], rest[2 * k + 1]])
                };
                table[usize::from(NATURAL[k])] = v;
            }
            self.quant[id] = Some(table);
            body = &rest[size..];
        }
        Ok(())
    }

    /// DHT: one or more Huffman tables.
    pub(super) fn read_huffman(&mut self, mut body: &[u8]) -> Result<(), Error> {
        while let [tc_th, rest @ ..] = body {
            let (class, id) = (tc_th >> 4, usize::from(tc_th & 15));
            let counts: [u8; 16] = rest
                .get(..16)
                .and_then(|c| c.try_into().ok())
                .ok_or_else(|| Error::corrupt(Format::Jpeg, "bad Huffman table"))?;
            let n: usize = counts.iter().map(|&c| usize::from(c)).sum();
            let symbols = rest
                .get(16..16 + n)
                .ok_or_else(|| Error::corrupt(Format::Jpeg, "bad Huffman table"))?;
            if id > 3 || class > 1 {
                return Err(Error::corrupt(Format::Jpeg, "bad Huffman table"));
            }
            let table = Some(Huffman::new(&counts, symbols, class == 1)?);
            if class == 0 {
                self.dc[id] = table;
            } else {
                self.ac[id] = table;
            }
            body = &rest[16 + n..];
        }
        Ok(())
    }

    /// APP0 (JFIF) and APP14 (Adobe): what libjpeg looks at to guess the colour space.
    pub(super) fn read_app(&mut self, marker: u8, body: &[u8]) {
        if marker == 0xe0 && body.starts_with(b"JFIF\0") {
            self.jfif = true;
        } else if marker == 0xee && body.len() >= 12 && body.starts_with(b"Adobe") {
            self.adobe = Some(body[11]);
        }
    }

    /// libjpeg's guess (`default_decompress_parms`) for the frame's components.
    pub(super) fn color_model(&self, frame: &Frame) -> Result<ColorModel, Error> {
        let ids: Vec<u8> = frame.components.iter().map(|c| c.id).collect();
        Ok(match ids.len() {
            1 => ColorModel::Gray,
            3 => {
                if self.jfif {
                    ColorModel::YCbCr
                } else if let Some(t) = self.adobe {
                    if t == 0 {
                        ColorModel::Rgb
                    } else {
                        ColorModel::YCbCr
                    }
                } else if ids == [82, 71, 66] {
                    ColorModel::Rgb
                } else {
                    ColorModel::YCbCr
                }
            }
            4 => match self.adobe {
                Some(0) | None => ColorModel::Cmyk,
                Some(_) => ColorModel::Ycck,
            },
            n => {
                return Err(Error::unsupported(Format::Jpeg, format!("{n} components")));
            }
        })
    }
}

/// SOF0/1/2: the frame header.
pub(super) fn read_frame(body: &[u8], progressive: bool) -> Result<Frame, Error> {
    let bad = || Error::corrupt(Format::Jpeg, "bad frame header");
    let &[precision, h0, h1, w0, w1, n, ref rest @ ..] = body else {
        return Err(bad());
    };
    if precision != 8 {
        return Err(Error::unsupported(
            Format::Jpeg,
            format!("{precision}-bit samples"),
        ));
    }
    let (height, width) = (
        usize::from(u16::from_be_bytes([h0, h1])),
        usize::from(u16::from_be_bytes([w0, w1])),
    );
    if width == 0 || height == 0 {
        return Err(Error::unsupported(
            Format::Jpeg,
            "an image of no rows (a DNL marker) or no columns",
        ));
    }
    let n = usize::from(n);
    if rest.len() < 3 * n {
        return Err(bad());
    }
    if !matches!(n, 1 | 3 | 4) {
        return Err(Error::unsupported(Format::Jpeg, format!("{n} components")));
    }
    let mut components = Vec::with_capacity(n);
    for c in rest[..3 * n].chunks_exact(3) {
        let (h, v, tq) = (
            usize::from(c[1] >> 4),
            usize::from(c[1] & 15),
            usize::from(c[2]),
        );
        if !(1..=4).contains(&h) || !(1..=4).contains(&v) || tq > 3 {
            return Err(bad());
        }
        components.push(Component {
            id: c[0],
            h,
            v,
            tq,
            blocks_w: 0,
            blocks_h: 0,
        });
    }
    // A single component is not interleaved: its "MCU" is one block whatever its factors.
    if n == 1 {
        components[0].h = 1;
        components[0].v = 1;
    }
    let max_h = components.iter().map(|c| c.h).max().unwrap_or(1);
    let max_v = components.iter().map(|c| c.v).max().unwrap_or(1);
    let (mcus_x, mcus_y) = (width.div_ceil(8 * max_h), height.div_ceil(8 * max_v));
    for c in &mut components {
        c.blocks_w = mcus_x * c.h;
        c.blocks_h = mcus_y * c.v;
    }
    Ok(Frame {
        width,
        height,
        progressive,
        components,
        max_h,
        max_v,
        mcus_x,
        mcus_y,
    })
}

/// SOS: the scan header, checked against the frame.
pub(super) fn read_scan(body: &[u8], frame: &Frame) -> Result<Scan, Error> {
    let bad = |why: &str| Error::corrupt(Format::Jpeg, format!("bad scan header: {why}"));
    let n = usize::from(*body.first().ok_or_else(|| bad("empty"))?);
    if n == 0 || n > 4 || body.len() < 1 + 2 * n + 3 {
        return Err(bad("its length"));
    }
    let mut components = Vec::with_capacity(n);
    for c in body[1..1 + 2 * n].chunks_exact(2) {
        let index = frame
            .components
            .iter()
            .position(|f| f.id == c[0])
            .ok_or_else(|| bad("a component not in the frame"))?;
        if components.iter().any(|&(i, _, _)| i == index) {
            return Err(bad("a component twice"));
        }
        let (dc, ac) = (usize::from(c[1] >> 4), usize::from(c[1] & 15));
        if dc > 3 || ac > 3 {
            return Err(bad("a table number"));
        }
        components.push((index, dc, ac));
    }
    let tail = &body[1 + 2 * n..];
    let (ss, se, ah, al) = (
        usize::from(tail[0]),
        usize::from(tail[1]),
        u32::from(tail[2] >> 4),
        u32::from(tail[2] & 15),
    );
    if !frame.progressive {
        // libjpeg ignores these in a sequential scan; so do we.
        return Ok(Scan {
            components,
            ss: 0,
            se: 63,
            ah: 0,
            al: 0,
        });
    }
    let dc_scan = ss == 0;
    if (dc_scan && se != 0)
        || (!dc_scan && (se < ss || se > 63 || n != 1))
        || (ah != 0 && al + 1 != ah)
        || al > 13
    {
        return Err(bad("its spectral selection"));
    }
    Ok(Scan {
        components,
        ss,
        se,
        ah,
        al,
    })
}

#[cfg(test)]
mod tests {
    use super::NATURAL;

    #[test]
    fn zig_zag_order() {
        assert_eq!(NATURAL[..10], [0, 1, 8, 16, 9, 2, 3, 10, 17, 24]);
        assert_eq!(NATURAL[60..64], [47, 55, 62, 63]);
        let mut seen = NATURAL[..64].to_vec();
        seen.sort_unstable();
        assert_eq!(seen, (0..64).collect::<Vec<u8>>());
        assert!(NATURAL[64..].iter().all(|&k| k == 63));
    }
}
