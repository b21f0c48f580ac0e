//! Entropy-coded scans (T.81 F.2 and G.1.2): sequential Huffman scans, each block handed on
//! as it is decoded, and progressive scans, refining coefficients kept for the whole image.

use super::header::{Frame, NATURAL, Scan, Tables};
use super::huffman::{Bits, Huffman};
use crate::{Error, Format};

pub(super) type Block = [i16; 64];

fn table<'t>(
    tables: &'t [Option<Huffman>; 4],
    id: usize,
    kind: &str,
) -> Result<&'t Huffman, Error> {
    tables[id].as_ref().ok_or_else(|| {
        Error::corrupt(
            Format::Jpeg,
            format!("a scan uses {kind} table {id}, not defined"),
        )
    })
}

/// What a restart marker resets: the DC predictions (one per component of the scan) and
/// the run of end-of-bands of a progressive AC scan.
struct State {
    dc_pred: Vec<i32>,
    eob_run: u32,
}

/// Calls `f(bits, state, slot, bx, by)` for each block of the scan in its order, `slot`
/// indexing the scan's components, resetting `state` at each restart marker (every
/// `restart_interval` units); the blocks of the units from `first` (0, or a restart boundary
/// with `bits` at the marker before it) within the first `rows` rows of MCUs only.
#[inline(always)]
fn walk<'a>(
    frame: &Frame,
    scan: &Scan,
    (restart_interval, first, rows): (usize, usize, usize),
    bits: &mut Bits<'a>,
    mut f: impl FnMut(&mut Bits<'a>, &mut State, usize, usize, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut state = State {
        dc_pred: vec![0; scan.components.len()],
        eob_run: 0,
    };
    let mut units = first;
    // Past the restart marker before the next unit, if one comes there.
    let mut next_unit = |bits: &mut Bits<'a>, state: &mut State| {
        if restart_interval > 0 && units > 0 && units % restart_interval == 0 {
            bits.restart();
            state.dc_pred.fill(0);
            state.eob_run = 0;
        }
        units += 1;
    };
    if let [(ci, _, _)] = scan.components[..] {
        // One component: its blocks in raster order, each a unit.
        let c = &frame.components[ci];
        let (w, h) = frame.samples(c);
        let across = w.div_ceil(8);
        for u in first..h.div_ceil(8).min(rows * c.v) * across {
            next_unit(bits, &mut state);
            f(bits, &mut state, 0, u % across, u / across)?;
        }
    } else {
        for u in first..frame.mcus_y.min(rows) * frame.mcus_x {
            let (my, mx) = (u / frame.mcus_x, u % frame.mcus_x);
            next_unit(bits, &mut state);
            for (slot, &(ci, _, _)) in scan.components.iter().enumerate() {
                let c = &frame.components[ci];
                for v in 0..c.v {
                    for h in 0..c.h {
                        f(bits, &mut state, slot, mx * c.h + h, my * c.v + v)?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// The unit (see `walk`) at which MCU row `row` of the scan starts.
pub(super) fn first_unit_of_row(frame: &Frame, scan: &Scan, row: usize) -> usize {
    if let [(ci, _, _)] = scan.components[..] {
        let c = &frame.components[ci];
        row * c.v * frame.samples(c).0.div_ceil(8)
    } else {
        row * frame.mcus_x
    }
}

/// Where the `n`-th restart marker (from 1) of the entropy-coded data at `at` is, if the data
/// gets there with its markers in order (RST0 to RST7, round again) and no other marker first.
pub(super) fn restart_marker(data: &[u8], mut at: usize, n: usize) -> Option<usize> {
    let mut seen = 0;
    while let Some(i) = data.get(at..)?.iter().position(|&b| b == 0xff) {
        let p = at + i;
        match *data.get(p + 1)? {
            // A stuffed zero, or a fill byte before what follows.
            0x00 => at = p + 2,
            0xff => at = p + 1,
            m @ 0xd0..=0xd7 => {
                if usize::from(m - 0xd0) != seen % 8 {
                    return None;
                }
                seen += 1;
                if seen == n {
                    return Some(p);
                }
                at = p + 2;
            }
            _ => return None,
        }
    }
    None
}

/// A sequential scan, its units from `first` (see `walk`) in its first `rows` rows of MCUs:
/// `sink(component, bx, by, block)` for each decoded block.
pub(super) fn sequential<'a>(
    frame: &Frame,
    scan: &Scan,
    tables: &Tables,
    bits: &mut Bits<'a>,
    (first, rows): (usize, usize),
    mut sink: impl FnMut(usize, usize, usize, &Block),
) -> Result<(), Error> {
    let mut codes = Vec::with_capacity(scan.components.len());
    for &(_, dc, ac) in &scan.components {
        codes.push((table(&tables.dc, dc, "DC")?, table(&tables.ac, ac, "AC")?));
    }
    let limits = (tables.restart_interval, first, rows);
    walk(frame, scan, limits, bits, |outer, state, slot, bx, by| {
        let (dc, ac) = codes[slot];
        // A copy of the reader, so that its state stays in registers.
        let mut local = *outer;
        let bits = &mut local;
        let mut block = [0i16; 64];
        let diff = match dc.fast_value(bits) {
            Some((_, diff)) => i32::from(diff),
            None => dc.decode_value(bits)?.1,
        };
        let pred = &mut state.dc_pred[slot];
        *pred = pred.wrapping_add(diff);
        block[0] = *pred as i16;
        let mut k = 1;
        while k < 64 {
            // `fill` leaves at least 32 bits: three short values (10 bits at most) in a row.
            bits.fill();
            let mut short = 0;
            while short < 3 && k < 64 {
                let Some((run, value)) = ac.fast_value_filled(bits) else {
                    break;
                };
                k += run;
                block[usize::from(NATURAL[k.min(79)])] = value;
                k += 1;
                short += 1;
            }
            if short == 3 || k >= 64 {
                continue;
            }
            let (rs, value) = ac.decode_value(bits)?;
            let r = usize::from(rs >> 4);
            if rs & 15 != 0 {
                k += r;
                block[usize::from(NATURAL[k.min(79)])] = value as i16;
                k += 1;
            } else if r == 15 {
                k += 16;
            } else {
                break;
            }
        }
        *outer = local;
        sink(scan.components[slot].0, bx, by, &block);
        Ok(())
    })
}

/// One progressive scan, its first `rows` rows of MCUs, refining `coefs[component]` (blocks in
/// rows of `blocks_w`).
pub(super) fn progressive<'a>(
    frame: &Frame,
    scan: &Scan,
    tables: &Tables,
    bits: &mut Bits<'a>,
    rows: usize,
    coefs: &mut [Vec<Block>],
) -> Result<(), Error> {
    let (ss, se, ah, al) = (scan.ss, scan.se, scan.ah, scan.al);
    let mut dc_codes = Vec::new();
    let mut band = None;
    for &(_, dc, ac) in &scan.components {
        if ss == 0 && ah == 0 {
            dc_codes.push(table(&tables.dc, dc, "DC")?);
        }
        if ss > 0 {
            let ac = table(&tables.ac, ac, "AC")?;
            band = Some(Band { ss, se, al, ac });
        }
    }
    let limits = (tables.restart_interval, 0, rows);
    walk(frame, scan, limits, bits, |bits, state, slot, bx, by| {
        let ci = scan.components[slot].0;
        let blocks_w = frame.components[ci].blocks_w;
        let block = &mut coefs[ci][by * blocks_w + bx];
        match (ss, ah, band) {
            (0, 0, _) => {
                let s = u32::from(dc_codes[slot].decode(bits)?);
                let pred = &mut state.dc_pred[slot];
                *pred = pred.wrapping_add(bits.extend(s.min(16)));
                block[0] = pred.wrapping_shl(al) as i16;
            }
            (0, _, _) => {
                if bits.bit() {
                    block[0] |= 1 << al;
                }
            }
            (_, 0, Some(band)) => band.first(bits, block, &mut state.eob_run)?,
            (_, _, Some(band)) => band.refine(bits, block, &mut state.eob_run)?,
            (_, _, None) => unreachable!("AC scans have their table"),
        }
        Ok(())
    })
}

/// An AC scan's band of coefficients (zig-zag `ss..=se`) and the bit it brings (`al`).
/// `run` is the scan's run of end-of-bands.
#[derive(Clone, Copy)]
struct Band<'t> {
    ss: usize,
    se: usize,
    al: u32,
    ac: &'t Huffman,
}

impl Band<'_> {
    /// The first scan of an AC band (G.1.2.2).
    fn first(&self, bits: &mut Bits<'_>, block: &mut Block, run: &mut u32) -> Result<(), Error> {
        let Band { ss, se, al, ac } = *self;
        if *run > 0 {
            *run -= 1;
            return Ok(());
        }
        let mut k = ss;
        while k <= se {
            let rs = ac.decode(bits)?;
            let (r, s) = (u32::from(rs >> 4), u32::from(rs & 15));
            if s != 0 {
                k += r as usize;
                block[usize::from(NATURAL[k.min(79)])] = (bits.extend(s) << al) as i16;
            } else if r == 15 {
                k += 15;
            } else {
                // A run of end-of-bands: this block and 2^r - 1 + (r more bits) after it.
                *run = (1 << r) - 1 + bits.bits(r);
                break;
            }
            k += 1;
        }
        Ok(())
    }

    /// A refining scan of an AC band (G.1.2.3): one more bit of each known coefficient, and new
    /// coefficients of magnitude 1 << al placed among the zeros.
    fn refine(&self, bits: &mut Bits<'_>, block: &mut Block, run: &mut u32) -> Result<(), Error> {
        let Band { ss, se, al, ac } = *self;
        let (p1, m1) = (1i16 << al, (-1i16) << al);
        let refine = |bits: &mut Bits<'_>, c: &mut i16| {
            if bits.bit() && *c & p1 == 0 {
                *c = c.wrapping_add(if *c >= 0 { p1 } else { m1 });
            }
        };
        let mut k = ss;
        if *run == 0 {
            while k <= se {
                let rs = ac.decode(bits)?;
                let (mut r, s) = (u32::from(rs >> 4), rs & 15);
                let value = match s {
                    0 if r != 15 => {
                        *run = (1 << r) + bits.bits(r);
                        break;
                    }
                    0 => 0,
                    // Only magnitude 1 is valid here; libjpeg reads the sign bit whatever `s` is.
                    _ => {
                        if bits.bit() {
                            p1
                        } else {
                            m1
                        }
                    }
                };
                // Past the coefficients already known (each refined) and `r` zeros.
                while k <= se {
                    let c = &mut block[usize::from(NATURAL[k])];
                    if *c != 0 {
                        refine(bits, c);
                    } else {
                        if r == 0 {
                            break;
                        }
                        r -= 1;
                    }
                    k += 1;
                }
                if value != 0 && k <= se {
                    block[usize::from(NATURAL[k])] = value;
                }
                k += 1;
            }
        }
        if *run > 0 {
            // The rest of the band holds no new coefficient: refine the known ones.
            while k <= se {
                let c = &mut block[usize::from(NATURAL[k])];
                if *c != 0 {
                    refine(bits, c);
                }
                k += 1;
            }
            *run -= 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::restart_marker;

    #[test]
    fn restart_markers_in_order_only() {
        // Data, a stuffed 0xff, RST0, fill bytes before RST1, data, RST2.
        let data = [
            1, 0xff, 0x00, 2, 0xff, 0xd0, 3, 0xff, 0xff, 0xd1, 4, 0xff, 0xd2, 5,
        ];
        assert_eq!(restart_marker(&data, 0, 1), Some(4));
        assert_eq!(restart_marker(&data, 0, 2), Some(8));
        assert_eq!(restart_marker(&data, 0, 3), Some(11));
        assert_eq!(restart_marker(&data, 0, 4), None);
        // Out of order (RST0 then RST2), or another marker first: no skipping.
        assert_eq!(restart_marker(&[0xff, 0xd0, 0xff, 0xd2], 0, 2), None);
        assert_eq!(restart_marker(&[0xff, 0xd9, 0xff, 0xd0], 0, 1), None);
    }
}
