//! The randomness of the random transforms: a [`Key`] names one op of one item of one epoch of a
//! loader, and [`Rng`] is the counter-based generator that key selects.
//!
//! # The generator
//!
//! Philox4x64-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a
//! keyed bijection of 256-bit counters, ten rounds of two 64×64→128-bit multiplications, the
//! key bumped by Weyl constants between rounds. Output block `n` of an op's stream is
//! `philox(key = [seed, epoch], counter = [n, index, op, lane])`. Nothing is stored between
//! draws but the block number, so any draw of any item can be computed alone: that is what
//! makes a batch independent of the thread that loads it, of the order items are loaded in,
//! and of where a resumed epoch starts.
//!
//! For a fixed `(seed, epoch)`, distinct `(index, op, lane, n)` are distinct counters, so no two
//! draws of one epoch share a block (Philox is a bijection of the counter). Different seeds or
//! epochs are different keys: independent streams, as far as Philox is a good pseudo-random
//! function (it passes BigCrush with any key).
//!
//! The implementation is checked against NumPy's `Philox` (the same algorithm) in the tests.

/// The multipliers and the key increments of Philox4x64 (Random123's constants).
const M0: u64 = 0xD2E7_470E_E14C_6C93;
const M1: u64 = 0xCA5A_8263_9512_1157;
const W0: u64 = 0x9E37_79B9_7F4A_7C15;
const W1: u64 = 0xBB67_AE85_84CA_A73B;

#[inline]
fn mulhilo(a: u64, b: u64) -> (u64, u64) {
    let p = u128::from(a) * u128::from(b);
    ((p >> 64) as u64, p as u64)
}

/// Philox4x64 with 10 rounds: the block of `counter` under `key`.
#[must_use]
pub fn philox4x64_10(counter: [u64; 4], key: [u64; 2]) -> [u64; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = counter;
    let [mut k0, mut k1] = key;
    for round in 0..10 {
        if round > 0 {
            k0 = k0.wrapping_add(W0);
            k1 = k1.wrapping_add(W1);
        }
        let (hi0, lo0) = mulhilo(M0, c0);
        let (hi1, lo1) = mulhilo(M1, c2);
        (c0, c1, c2, c3) = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0);
    }
    [c0, c1, c2, c3]
}

/// The `op` of a key that no container has placed yet (a transform called on its own).
const TOP: u64 = u64::MAX;

/// Where a random transform's draws come from: the loader's base seed, the epoch, the item's
/// dataset index, and the transform's place in the pipeline.
///
/// A loader gives its transform `Key::new(seed, epoch, index)`; a [`crate::Compose`] gives the
/// step at position `i` [`Key::at`]`(i)`, so two steps never share draws, and a step's draws
/// do not depend on the steps before it (a step that draws more or less does not shift them).
/// A transform called on its own with seed `s` draws from `Key::new(s, 0, 0)`: what a loader of
/// base seed `s` draws for item 0 of epoch 0 when the transform is the whole pipeline or the
/// first step of a `Compose`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    /// The loader's base seed.
    pub seed: u64,
    /// The epoch number.
    pub epoch: u64,
    /// The item's dataset index.
    pub index: u64,
    /// The op's place: `TOP` before any container placed it, a position in a top-level
    /// `Compose`, or a hash of the path through nested containers (top bit set).
    op: u64,
}

impl Key {
    /// The key of item `index` in epoch `epoch` of a loader whose base seed is `seed`.
    #[must_use]
    pub const fn new(seed: u64, epoch: u64, index: u64) -> Key {
        Key {
            seed,
            epoch,
            index,
            op: TOP,
        }
    }

    /// The key of the step at `position` of a container (a `Compose`, `RandomApply`, ...) that
    /// was given `self`: the position itself in the outermost container, a hash of the path
    /// below it (with the top bit set, so never a position).
    #[must_use]
    pub fn at(self, position: usize) -> Key {
        let op = if self.op == TOP {
            position as u64
        } else {
            let h = splitmix(splitmix(self.op) ^ position as u64) | (1 << 63);
            // TOP is taken; the path hash that would equal it gets the next value down.
            if h == TOP { TOP - 1 } else { h }
        };
        Key { op, ..self }
    }

    /// The op's own generator.
    #[must_use]
    pub fn rng(self) -> Rng {
        self.lane(0)
    }

    /// The generator of a container's own draws (`RandomApply`'s coin, `TrivialAugmentWide`'s
    /// choice), apart from those of the step at position 0, which shares its `op`.
    #[must_use]
    pub fn container_rng(self) -> Rng {
        self.lane(1)
    }

    fn lane(self, lane: u64) -> Rng {
        Rng {
            key: [self.seed, self.epoch],
            index: self.index,
            op: if self.op == TOP { 0 } else { self.op },
            lane,
            block: 0,
            buf: [0; 4],
            used: 4,
        }
    }
}

/// SplitMix64's finalizer: a bijection that spreads every input bit over the output.
const fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The stream of one op for one key: blocks `0, 1, 2, ...` of Philox, four 64-bit words each.
#[derive(Debug, Clone)]
pub struct Rng {
    key: [u64; 2],
    index: u64,
    op: u64,
    lane: u64,
    block: u64,
    buf: [u64; 4],
    used: usize,
}

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        if self.used == 4 {
            self.buf = philox4x64_10([self.block, self.index, self.op, self.lane], self.key);
            self.block += 1;
            self.used = 0;
        }
        self.used += 1;
        self.buf[self.used - 1]
    }

    /// Uniform in `[0, 1)`, a multiple of 2^-53.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[low, high)` (`low` when they are equal).
    pub fn uniform_in(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.uniform()
    }

    /// Uniform in `0..n` (`n > 0`), without bias (Lemire's multiply-and-reject).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let threshold = n.wrapping_neg() % n;
        loop {
            let (hi, lo) = mulhilo(self.next_u64(), n);
            if lo >= threshold {
                return hi;
            }
        }
    }

    /// Uniform in `low..=high` (`low <= high`).
    pub fn int_in(&mut self, low: i64, high: i64) -> i64 {
        let span = high.wrapping_sub(low) as u64;
        if span == u64::MAX {
            return self.next_u64() as i64;
        }
        low.wrapping_add(self.below(span + 1) as i64)
    }

    /// `true` with probability `p`: a uniform draw below `p` (torchvision's `rand() < p`).
    pub fn chance(&mut self, p: f64) -> bool {
        self.uniform() < p
    }

    /// A standard normal draw (Box–Muller on two uniforms).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // in (0, 1]: the logarithm is finite
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// A uniformly random permutation of `0..n` (Fisher–Yates).
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = self.below(i as u64 + 1) as usize;
            p.swap(i, j);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn philox_matches_numpy() {
        // numpy.random.Philox(counter=c - 1, key=k).random_raw(4): NumPy increments the
        // counter before its first block.
        let cases: [([u64; 4], [u64; 2], [u64; 4]); 5] = [
            (
                [0; 4],
                [0; 2],
                [
                    0x1655_4d9e_ca36_314c,
                    0xdb20_fe9d_672d_0fdc,
                    0xd7e7_72ce_e186_176b,
                    0x7e68_b68a_ec7b_a23b,
                ],
            ),
            (
                [u64::MAX; 4],
                [u64::MAX; 2],
                [
                    0x87b0_92c3_013f_e90b,
                    0x438c_3c67_be8d_0224,
                    0x9cc7_d7c6_9cd7_77b6,
                    0xa09c_aebf_594f_0ba0,
                ],
            ),
            (
                [
                    0x243f_6a88_85a3_08d3,
                    0x1319_8a2e_0370_7344,
                    0xa409_3822_299f_31d0,
                    0x082e_fa98_ec4e_6c89,
                ],
                [0x4528_21e6_38d0_1377, 0xbe54_66cf_34e9_0c6c],
                [
                    0xa528_f454_03e6_1d95,
                    0x38c7_2dbd_566e_9788,
                    0xa5a1_610e_72fd_18b5,
                    0x57bd_43b5_e52b_7fe6,
                ],
            ),
            (
                [5, 7, 3, 1],
                [123_456_789, 42],
                [
                    0x991e_0b51_dc46_5df3,
                    0x6136_f79a_28b3_7078,
                    0xaf9b_3bf0_c1ec_c629,
                    0x2dda_216e_e36b_fee7,
                ],
            ),
            (
                [0, 0, (1 << 63) + 5, 3],
                [u64::MAX - 6, 1],
                [
                    0xa971_1522_fdf7_dc77,
                    0xfa9a_c05f_2346_3a0e,
                    0xff85_12e3_2edb_2dfc,
                    0x3ae7_fe82_fd37_dea0,
                ],
            ),
        ];
        for (counter, key, expected) in cases {
            assert_eq!(
                philox4x64_10(counter, key),
                expected,
                "{counter:x?} {key:x?}"
            );
        }
    }

    #[test]
    fn streams_are_the_counters_of_the_key() {
        let key = Key::new(11, 3, 42).at(2);
        let mut rng = key.rng();
        let words: Vec<u64> = (0..6).map(|_| rng.next_u64()).collect();
        let b0 = philox4x64_10([0, 42, 2, 0], [11, 3]);
        let b1 = philox4x64_10([1, 42, 2, 0], [11, 3]);
        assert_eq!(words, [b0[0], b0[1], b0[2], b0[3], b1[0], b1[1]]);
        // Every coordinate of the key selects another stream.
        let first = |k: Key| k.rng().next_u64();
        let base = Key::new(11, 3, 42);
        let others = [
            Key::new(12, 3, 42),
            Key::new(11, 4, 42),
            Key::new(11, 3, 43),
            base.at(1),
            base.at(0).at(0),
        ];
        for k in others {
            assert_ne!(first(k), first(base), "{k:?}");
        }
        assert_ne!(base.container_rng().next_u64(), first(base));
    }

    #[test]
    fn a_lone_op_draws_like_the_first_step_of_a_compose() {
        let k = Key::new(5, 0, 0);
        assert_eq!(k.rng().next_u64(), k.at(0).rng().next_u64());
        // A nested container's steps are not the outer ones.
        assert_ne!(k.at(0).at(1).rng().next_u64(), k.at(1).rng().next_u64());
        assert!(k.at(3).at(1).op >= 1 << 63);
    }

    #[test]
    fn draws_are_in_range_and_unbiased_enough() {
        let mut rng = Key::new(1, 2, 3).rng();
        let mut counts = [0u32; 6];
        for _ in 0..60_000 {
            let u = rng.uniform();
            assert!((0.0..1.0).contains(&u));
            counts[rng.below(6) as usize] += 1;
            let v = rng.int_in(-3, 3);
            assert!((-3..=3).contains(&v));
        }
        // Each face 10,000 ± 5 standard deviations (~ 91).
        for c in counts {
            assert!((9_545..=10_455).contains(&c), "{counts:?}");
        }
        let mut p = rng.permutation(5);
        p.sort_unstable();
        assert_eq!(p, [0, 1, 2, 3, 4]);
        assert_eq!(rng.int_in(7, 7), 7);
    }

    #[test]
    fn normal_has_unit_variance() {
        let mut rng = Key::new(9, 9, 9).rng();
        let n = 40_000;
        let xs: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
        let mean = xs.iter().sum::<f64>() / f64::from(n);
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / f64::from(n);
        assert!(mean.abs() < 0.03, "{mean}");
        assert!((var - 1.0).abs() < 0.03, "{var}");
    }
}
