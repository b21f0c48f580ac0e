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

/// Calls `f(bits, slot, bx, by)` for each block of the scan in its order, `slot` indexing
/// the scan's components, and `reset()` at each restart marker.
#[inline(always)]
fn walk<'a>(
    frame: &Frame,
    scan: &Scan,
    restart_interval: usize,
    bits: &mut Bits<'a>,
    mut reset: impl FnMut(),
    mut f: impl FnMut(&mut Bits<'a>, usize, usize, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut units = 0usize;
    let mut next_unit = |bits: &mut Bits<'a>, reset: &mut dyn FnMut()| {
        if restart_interval > 0 && units > 0 && units % restart_interval == 0 {
            bits.restart();
            reset();
        }
        units += 1;
    };
    if let [(ci, _, _)] = scan.components[..] {
        // One component: its blocks in raster order, each a unit.
        let c = &frame.components[ci];
        let (w, h) = frame.samples(c);
        for by in 0..h.div_ceil(8) {
            for bx in 0..w.div_ceil(8) {
                next_unit(bits, &mut reset);
                f(bits, 0, bx, by)?;
            }
        }
    } else {
        for my in 0..frame.mcus_y {
            for mx in 0..frame.mcus_x {
                next_unit(bits, &mut reset);
                for (slot, &(ci, _, _)) in scan.components.iter().enumerate() {
                    let c = &frame.components[ci];
                    for v in 0..c.v {
                        for h in 0..c.h {
                            f(bits, slot, mx * c.h + h, my * c.v + v)?;
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// A sequential scan: `sink(component, bx, by, block)` for each decoded block.
pub(super) fn sequential<'a>(
    frame: &Frame,
    scan: &Scan,
    tables: &Tables,
    bits: &mut Bits<'a>,
    mut sink: impl FnMut(usize, usize, usize, &Block),
) -> Result<(), Error> {
    let mut codes = Vec::with_capacity(scan.components.len());
    for &(_, dc, ac) in &scan.components {
        codes.push((table(&tables.dc, dc, "DC")?, table(&tables.ac, ac, "AC")?));
    }
    let mut dc_pred = vec![0i32; scan.components.len()];
    let reset_flag = std::cell::Cell::new(false);
    walk(
        frame,
        scan,
        tables.restart_interval,
        bits,
        || reset_flag.set(true),
        |outer, slot, bx, by| {
            if reset_flag.replace(false) {
                dc_pred.fill(0);
            }
            let (dc, ac) = codes[slot];
            // A copy of the reader, so that its state stays in registers.
            let mut local = *outer;
            let bits = &mut local;
            let mut block = [0i16; 64];
            let (_, diff) = dc.decode_value(bits)?;
            dc_pred[slot] = dc_pred[slot].wrapping_add(diff);
            block[0] = dc_pred[slot] as i16;
            let mut k = 1;
            while k < 64 {
                if let Some((run, value)) = ac.fast_ac(bits) {
                    k += run;
                    block[usize::from(NATURAL[k.min(79)])] = value;
                    k += 1;
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
        },
    )
}

/// One progressive scan, refining `coefs[component]` (blocks in rows of `blocks_w`).
pub(super) fn progressive<'a>(
    frame: &Frame,
    scan: &Scan,
    tables: &Tables,
    bits: &mut Bits<'a>,
    coefs: &mut [Vec<Block>],
) -> Result<(), Error> {
    let (ss, se, ah, al) = (scan.ss, scan.se, scan.ah, scan.al);
    let mut dc_codes = Vec::new();
    let mut ac_code = None;
    for &(_, dc, ac) in &scan.components {
        if ss == 0 && ah == 0 {
            dc_codes.push(table(&tables.dc, dc, "DC")?);
        }
        if ss > 0 {
            ac_code = Some(table(&tables.ac, ac, "AC")?);
        }
    }
    let mut dc_pred = vec![0i32; scan.components.len()];
    let mut eob_run = 0u32;
    let reset_flag = std::cell::Cell::new(false);
    walk(
        frame,
        scan,
        tables.restart_interval,
        bits,
        || reset_flag.set(true),
        |bits, slot, bx, by| {
            if reset_flag.replace(false) {
                dc_pred.fill(0);
                eob_run = 0;
            }
            let ci = scan.components[slot].0;
            let blocks_w = frame.components[ci].blocks_w;
            let block = &mut coefs[ci][by * blocks_w + bx];
            match (ss, ah, ac_code) {
                (0, 0, _) => {
                    let s = u32::from(dc_codes[slot].decode(bits)?);
                    dc_pred[slot] = dc_pred[slot].wrapping_add(bits.extend(s.min(16)));
                    block[0] = dc_pred[slot].wrapping_shl(al) as i16;
                }
                (0, _, _) => {
                    if bits.bit() {
                        block[0] |= 1 << al;
                    }
                }
                (_, 0, Some(ac)) => ac_first(bits, ac, block, ss, se, al, &mut eob_run)?,
                (_, _, Some(ac)) => ac_refine(bits, ac, block, ss, se, al, &mut eob_run)?,
                (_, _, None) => unreachable!("AC scans have their table"),
            }
            Ok(())
        },
    )
}

/// The first scan of an AC band (G.1.2.2).
fn ac_first(
    bits: &mut Bits<'_>,
    ac: &Huffman,
    block: &mut Block,
    ss: usize,
    se: usize,
    al: u32,
    eob_run: &mut u32,
) -> Result<(), Error> {
    if *eob_run > 0 {
        *eob_run -= 1;
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
            *eob_run = (1 << r) - 1 + bits.bits(r);
            break;
        }
        k += 1;
    }
    Ok(())
}

/// A refining scan of an AC band (G.1.2.3): one more bit of each known coefficient, and new
/// coefficients of magnitude 1 << al placed among the zeros.
fn ac_refine(
    bits: &mut Bits<'_>,
    ac: &Huffman,
    block: &mut Block,
    ss: usize,
    se: usize,
    al: u32,
    eob_run: &mut u32,
) -> Result<(), Error> {
    let (p1, m1) = (1i16 << al, (-1i16) << al);
    let refine = |bits: &mut Bits<'_>, c: &mut i16| {
        if bits.bit() && *c & p1 == 0 {
            *c = c.wrapping_add(if *c >= 0 { p1 } else { m1 });
        }
    };
    let mut k = ss;
    if *eob_run == 0 {
        while k <= se {
            let rs = ac.decode(bits)?;
            let (mut r, s) = (u32::from(rs >> 4), rs & 15);
            let value = match s {
                0 if r != 15 => {
                    *eob_run = (1 << r) + bits.bits(r);
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
    if *eob_run > 0 {
        // The rest of the band holds no new coefficient: refine the known ones.
        while k <= se {
            let c = &mut block[usize::from(NATURAL[k])];
            if *c != 0 {
                refine(bits, c);
            }
            k += 1;
        }
        *eob_run -= 1;
    }
    Ok(())
}
