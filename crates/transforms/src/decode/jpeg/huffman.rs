//! Huffman tables and the bit reader of entropy-coded segments.

use crate::{Error, Format};

/// Bits looked up at once; longer codes take the slow path.
const FAST_BITS: u32 = 10;

/// One Huffman table (ITU T.81 annex C): a lookup of the first `FAST_BITS` bits, and the
/// canonical-code bounds per length for the rest.
#[derive(Clone)]
pub(super) struct Huffman {
    /// `length << 8 | symbol` for the codes of `FAST_BITS` bits or fewer, indexed by the next
    /// `FAST_BITS` bits; 0 where a longer code starts.
    fast: Box<[u16; 1 << FAST_BITS]>,
    /// Where the next `FAST_BITS` bits hold a whole value (its code and its bits): `value <<
    /// 16 | run << 8 | bits taken`, 0 elsewhere. For a sequential AC table the value is a
    /// coefficient after a run of zeros, the end of the block a run of 64 and sixteen zeros a
    /// run of 15 and a zero; for a DC table, a difference (run 0).
    fast_value: Box<[i32; 1 << FAST_BITS]>,
    /// The largest code of each length (index 1..=16), -1 where there is none.
    max_code: [i32; 17],
    /// What to add to a code of each length to get the index of its symbol.
    offset: [i32; 17],
    symbols: Vec<u8>,
}

impl Huffman {
    /// The table of `counts[l]` codes of length `l + 1` for `symbols`, in order; `ac` for a
    /// table of AC coefficients, else of DC differences.
    pub(super) fn new(counts: &[u8; 16], symbols: &[u8], ac: bool) -> Result<Huffman, Error> {
        let total: usize = counts.iter().map(|&c| usize::from(c)).sum();
        if total != symbols.len() || total > 256 {
            return Err(Error::corrupt(Format::Jpeg, "bad Huffman table"));
        }
        let mut fast = Box::new([0u16; 1 << FAST_BITS]);
        let mut max_code = [-1i32; 17];
        let mut offset = [0i32; 17];
        let (mut code, mut k) = (0i32, 0usize);
        for len in 1..=16u32 {
            let n = counts[len as usize - 1];
            offset[len as usize] = k as i32 - code;
            for _ in 0..n {
                // A code of all ones is not allowed, so `code` stays below 2^len - 1.
                if code >= (1 << len) - 1 {
                    return Err(Error::corrupt(Format::Jpeg, "bad Huffman table"));
                }
                if len <= FAST_BITS {
                    let first = (code as usize) << (FAST_BITS - len);
                    let entry = (len as u16) << 8 | u16::from(symbols[k]);
                    fast[first..first + (1 << (FAST_BITS - len))].fill(entry);
                }
                code += 1;
                k += 1;
            }
            if n > 0 {
                max_code[len as usize] = code - 1;
            }
            code <<= 1;
        }
        let mut fast_value = Box::new([0i32; 1 << FAST_BITS]);
        for (i, (&entry, slot)) in fast.iter().zip(fast_value.iter_mut()).enumerate() {
            let (len, symbol) = (u32::from(entry >> 8), entry as u8);
            let (run, size) = (i32::from(symbol >> 4), u32::from(symbol & 15));
            if entry == 0 || (!ac && run != 0) {
                continue;
            }
            if size == 0 && !ac {
                *slot = len as i32;
                continue;
            }
            if size == 0 {
                // Sixteen zeros (a run of 15 and a zero), or the end of the block: a run of
                // 64 takes the position past the last coefficient, where a zero is harmless.
                *slot = if run == 15 { 15 } else { 64 } << 8 | len as i32;
                continue;
            }
            if len + size > FAST_BITS {
                continue;
            }
            let raw = (i as i32 >> (FAST_BITS - len - size)) & ((1 << size) - 1);
            *slot = extend(raw, size) << 16 | run << 8 | (len + size) as i32;
        }
        Ok(Huffman {
            fast,
            fast_value,
            max_code,
            offset,
            symbols: symbols.to_vec(),
        })
    }

    /// The next symbol.
    #[inline(always)]
    pub(super) fn decode(&self, bits: &mut Bits<'_>) -> Result<u8, Error> {
        bits.fill();
        let entry = self.fast[bits.peek(FAST_BITS) as usize];
        if entry != 0 {
            bits.consume(u32::from(entry >> 8));
            return Ok(entry as u8);
        }
        let (len, symbol) = self.decode_slow(bits.peek(16))?;
        bits.consume(len);
        Ok(symbol)
    }

    /// A whole value from the next bits, if they hold one of the short ones: `(run, value)`
    /// (see `fast_value`).
    #[inline(always)]
    pub(super) fn fast_value(&self, bits: &mut Bits<'_>) -> Option<(usize, i16)> {
        bits.fill();
        self.fast_value_filled(bits)
    }

    /// [`Huffman::fast_value`] when `fill` has left at least `FAST_BITS` bits.
    #[inline(always)]
    pub(super) fn fast_value_filled(&self, bits: &mut Bits<'_>) -> Option<(usize, i16)> {
        let e = self.fast_value[bits.peek(FAST_BITS) as usize];
        if e == 0 {
            return None;
        }
        bits.consume((e & 31) as u32);
        Some((((e >> 8) & 0xff) as usize, (e >> 16) as i16))
    }

    /// The next symbol and the value of the `symbol & 15` bits that follow it (a DC
    /// difference, or an AC coefficient with the run in the symbol's high nibble), from one
    /// refill of the reader.
    #[inline(always)]
    pub(super) fn decode_value(&self, bits: &mut Bits<'_>) -> Result<(u8, i32), Error> {
        // `decode` leaves at least 40 bits: enough for any value (at most 15 bits).
        let symbol = self.decode(bits)?;
        Ok((symbol, bits.extend_filled(u32::from(symbol & 15))))
    }

    /// A code longer than `FAST_BITS` at the start of the 16 bits of `word`: its length and
    /// symbol. Takes the bits by value so that the reader's state stays in registers.
    #[cold]
    fn decode_slow(&self, word: u32) -> Result<(u32, u8), Error> {
        let word = word as i32;
        for len in FAST_BITS + 1..=16 {
            let code = word >> (16 - len);
            if code <= self.max_code[len as usize] {
                let at = (code + self.offset[len as usize]) as usize;
                return Ok((len, self.symbols[at]));
            }
        }
        Err(Error::corrupt(Format::Jpeg, "bad Huffman code"))
    }
}

/// The bits of an entropy-coded segment, most significant first, with the stuffed zero
/// after each 0xff removed. At a marker (or the end of the data) it reads zeros, as libjpeg
/// does, and remembers where the marker is.
#[derive(Clone, Copy)]
pub(super) struct Bits<'a> {
    data: &'a [u8],
    /// The next byte not yet in `buf`.
    pos: usize,
    /// The next bits in its high end.
    buf: u64,
    /// How many bits of `buf` are data.
    count: u32,
    /// Whether `pos` is at a marker (or the end), where reading stopped.
    stopped: bool,
}

impl<'a> Bits<'a> {
    pub(super) fn new(data: &'a [u8], pos: usize) -> Bits<'a> {
        Bits {
            data,
            pos,
            buf: 0,
            count: 0,
            stopped: false,
        }
    }

    /// At least 57 bits in `buf` (zeros past a marker).
    #[inline(always)]
    pub(super) fn fill(&mut self) {
        if self.count >= 32 {
            return;
        }
        // The common case: eight bytes ahead and none of them 0xff.
        if let Some(chunk) = self.data.get(self.pos..self.pos + 8)
            && !self.stopped
        {
            let word = u64::from_be_bytes(chunk.try_into().unwrap_or_default());
            // A byte is 0xff where `!word` has a zero byte.
            let inv = !word;
            let has_ff = inv.wrapping_sub(0x0101_0101_0101_0101) & !inv & 0x8080_8080_8080_8080;
            if has_ff == 0 {
                let take = (63 - self.count) / 8;
                self.buf |= (word >> (64 - 8 * take)) << (64 - self.count - 8 * take);
                self.count += 8 * take;
                self.pos += take as usize;
                return;
            }
        }
        self.fill_slow();
    }

    #[inline(always)]
    fn fill_slow(&mut self) {
        while self.count <= 56 {
            let byte = if self.stopped {
                0
            } else {
                match self.data.get(self.pos) {
                    None => {
                        self.stopped = true;
                        0
                    }
                    Some(0xff) => match self.data.get(self.pos + 1) {
                        Some(0x00) => {
                            self.pos += 2;
                            0xff
                        }
                        // A fill byte before a marker.
                        Some(0xff) => {
                            self.pos += 1;
                            continue;
                        }
                        _ => {
                            self.stopped = true;
                            0
                        }
                    },
                    Some(&b) => {
                        self.pos += 1;
                        b
                    }
                }
            };
            self.buf |= u64::from(byte) << (56 - self.count);
            self.count += 8;
        }
    }

    /// The next `n` bits (1..=16) without taking them; `fill` must have run.
    #[inline(always)]
    pub(super) fn peek(&self, n: u32) -> u32 {
        (self.buf >> (64 - n)) as u32
    }

    /// Drops `n` bits (1..=16); `fill` must have run.
    #[inline(always)]
    pub(super) fn consume(&mut self, n: u32) {
        self.buf <<= n;
        // After `fill` there are more bits than anyone takes before the next one (past a
        // marker they are zeros); were that broken, the reader would read zeros, not panic.
        self.count = self.count.wrapping_sub(n);
    }

    /// The next `n` bits (0..=16) as an unsigned number.
    #[inline(always)]
    pub(super) fn bits(&mut self, n: u32) -> u32 {
        if n == 0 {
            return 0;
        }
        self.fill();
        let v = self.peek(n);
        self.consume(n);
        v
    }

    /// The next bit.
    #[inline(always)]
    pub(super) fn bit(&mut self) -> bool {
        self.bits(1) == 1
    }

    /// The next `n` bits (0..=16) as a signed magnitude-category value (T.81 F.2.2.1).
    #[inline(always)]
    pub(super) fn extend(&mut self, n: u32) -> i32 {
        let v = self.bits(n) as i32;
        if n == 0 { 0 } else { extend(v, n) }
    }

    /// [`Bits::extend`] when `fill` has left at least `n` bits.
    #[inline(always)]
    fn extend_filled(&mut self, n: u32) -> i32 {
        if n == 0 {
            return 0;
        }
        let v = self.peek(n) as i32;
        self.consume(n);
        extend(v, n)
    }

    /// Drops the bits left of the current byte and moves past the restart marker ahead,
    /// skipping anything before it, as a decoder resynchronises.
    pub(super) fn restart(&mut self) {
        self.buf = 0;
        self.count = 0;
        self.stopped = false;
        while self.pos + 1 < self.data.len() {
            if self.data[self.pos] == 0xff && (0xd0..=0xd7).contains(&self.data[self.pos + 1]) {
                self.pos += 2;
                return;
            }
            if self.data[self.pos] == 0xff && !matches!(self.data[self.pos + 1], 0x00 | 0xff) {
                // Another marker: the restart marker is missing; carry on from here.
                return;
            }
            self.pos += 1;
        }
    }

    /// Where the segments after this scan start: the next marker at or after the bytes read.
    pub(super) fn end(&self) -> usize {
        let mut at = self.pos;
        while at + 1 < self.data.len() {
            if self.data[at] == 0xff && !matches!(self.data[at + 1], 0x00 | 0xff) {
                if !(0xd0..=0xd7).contains(&self.data[at + 1]) {
                    return at;
                }
                at += 2;
                continue;
            }
            at += 1;
        }
        self.data.len()
    }
}

/// `n` (1..=16) raw bits `v` as the signed value they code (T.81 F.2.2.1).
#[inline(always)]
fn extend(v: i32, n: u32) -> i32 {
    if v < 1 << (n - 1) {
        v - (1 << n) + 1
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bits_and_unstuffs() {
        let data = [0b1010_0000, 0xff, 0x00, 0x12, 0xff, 0xd9];
        let mut b = Bits::new(&data, 0);
        assert_eq!(b.bits(3), 0b101);
        assert_eq!(b.bits(5), 0);
        assert_eq!(b.bits(8), 0xff);
        assert_eq!(b.bits(8), 0x12);
        // At the marker: zeros.
        assert_eq!(b.bits(16), 0);
        assert_eq!(b.end(), 4);
    }

    #[test]
    fn extends_signed_values() {
        // 2 bits "00" is -3, "11" is 3; 1 bit "0" is -1.
        let data = [0b0011_0000];
        let mut b = Bits::new(&data, 0);
        assert_eq!(b.extend(2), -3);
        assert_eq!(b.extend(2), 3);
        assert_eq!(b.extend(1), -1);
        assert_eq!(b.extend(0), 0);
    }

    #[test]
    fn decodes_short_and_long_codes() {
        // One code of length 1 ("0" -> 7), then one of each length 2..=12: "10" -> 1,
        // "110" -> 2, ..., "111111111110" -> 11.
        let mut counts = [0u8; 16];
        counts[..12].fill(1);
        let symbols: Vec<u8> = std::iter::once(7).chain(1..=11).collect();
        let h = Huffman::new(&counts, &symbols, true).unwrap();
        // "0", "10", "11111111110" (11 bits -> 10), "111111111110" (12 bits -> 11)
        let codes = [
            (0b0, 1),
            (0b10, 2),
            (0b111_1111_1110, 11),
            (0b1111_1111_1110, 12),
        ];
        let stream: u64 = codes.iter().fold(0, |acc, &(c, n)| acc << n | c) << (64 - 26);
        // Stuffed as an encoder writes it: a zero after each 0xff.
        let data: Vec<u8> = stream
            .to_be_bytes()
            .iter()
            .flat_map(|&b| if b == 0xff { vec![b, 0] } else { vec![b] })
            .collect();
        let mut b = Bits::new(&data, 0);
        for want in [7, 1, 10, 11] {
            assert_eq!(h.decode(&mut b).unwrap(), want);
        }
        // A table whose codes overflow their lengths is refused.
        assert!(
            Huffman::new(
                &[3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                &[1, 2, 3],
                false
            )
            .is_err()
        );
    }

    #[test]
    fn whole_values_from_one_lookup() {
        // Codes "0", "10", "110": DC sizes 0, 2, 3; AC end of block, 0x12 (run 1, size 2), ZRL.
        let counts = [1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let dc = Huffman::new(&counts, &[0, 2, 3], false).unwrap();
        let ac = Huffman::new(&counts, &[0x00, 0x12, 0xf0], true).unwrap();
        // "0" | "10" "01" | "110" "101": DC 0, -2 (01 of 2 bits), 5; then the same bits as AC.
        let data = [0b0100_1110, 0b1010_0000, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut b = Bits::new(&data, 0);
        assert_eq!(dc.fast_value(&mut b), Some((0, 0)));
        assert_eq!(dc.fast_value(&mut b), Some((0, -2)));
        assert_eq!(dc.fast_value(&mut b), Some((0, 5)));
        let mut b = Bits::new(&data, 0);
        assert_eq!(ac.fast_value(&mut b), Some((64, 0)));
        assert_eq!(ac.fast_value(&mut b), Some((1, -2)));
        assert_eq!(ac.fast_value(&mut b), Some((15, 0)));
    }
}
