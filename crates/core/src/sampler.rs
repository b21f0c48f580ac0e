//! The order of one epoch: which dataset index comes at each position.
//!
//! A shuffled epoch is a keyed bijection over `[0, len)` (a Feistel network on the next even
//! power of two, with cycle-walking), evaluated per position: starting an epoch of any size costs
//! nothing and holds no index list, and any position can be looked up directly (which is what
//! mid-epoch resume and sharding need). The keys come from a SplitMix64 stream seeded with the
//! loader's seed and the epoch number, so one seed gives one sequence of epoch orders.

use std::fmt;

/// Rounds of the Feistel network. Four rounds of a good mixing function already give a
/// pseudo-random permutation (Luby–Rackoff); six leave a margin for small domains.
const ROUNDS: usize = 6;

/// SplitMix64: a small, well-studied generator, used to derive round keys and seeds.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting from `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.0)
    }
}

/// The finaliser of MurmurHash3/SplitMix64: every input bit affects every output bit.
#[inline]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A random permutation of `[0, len)`, evaluated per position without memory.
#[derive(Clone)]
pub struct Permutation {
    len: u64,
    half_bits: u32,
    half_mask: u64,
    keys: [u64; ROUNDS],
}

impl fmt::Debug for Permutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permutation")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl Permutation {
    /// The permutation of `[0, len)` for `epoch` of a loader seeded with `seed`.
    #[must_use]
    pub fn new(len: u64, seed: u64, epoch: u64) -> Self {
        // Domain: 2^(2·half_bits) ≥ len, at least 4, so each half has at least one bit.
        let bits = if len <= 4 {
            2
        } else {
            64 - (len - 1).leading_zeros()
        };
        let half_bits = bits.div_ceil(2);
        let half_mask = if half_bits >= 64 {
            u64::MAX
        } else {
            (1u64 << half_bits) - 1
        };
        let mut rng = SplitMix64::new(seed ^ mix64(epoch.wrapping_add(0x5EED_5EED_5EED_5EED)));
        let keys = std::array::from_fn(|_| rng.next_u64());
        Self {
            len,
            half_bits,
            half_mask,
            keys,
        }
    }

    /// The number of positions.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the permutation is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// One pass of the Feistel network: a bijection on `[0, 2^(2·half_bits))`.
    #[inline]
    fn encrypt(&self, x: u64) -> u64 {
        let mut left = x >> self.half_bits;
        let mut right = x & self.half_mask;
        for key in self.keys {
            let f = mix64(right ^ key) & self.half_mask;
            (left, right) = (right, left ^ f);
        }
        (left << self.half_bits) | right
    }

    /// The index at `position` (`position < len`). Cycle-walking keeps the result in range:
    /// the walk from a position in range reaches another in range, and distinct positions
    /// reach distinct indices, because `encrypt` is a bijection of the larger domain.
    #[inline]
    #[must_use]
    pub fn get(&self, position: u64) -> u64 {
        debug_assert!(position < self.len);
        let mut x = position;
        loop {
            x = self.encrypt(x);
            if x < self.len {
                return x;
            }
        }
    }
}

/// How a loader shuffles: a seed, fixed or drawn from the OS once per loader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shuffle {
    seed: u64,
}

impl Shuffle {
    /// Shuffling with a fixed seed: two loaders with the same seed give the same epochs.
    #[must_use]
    pub fn seeded(seed: u64) -> Self {
        Self { seed }
    }

    /// Shuffling with a seed drawn from the operating system's entropy.
    #[must_use]
    pub fn from_entropy() -> Self {
        let seed = getrandom::u64().unwrap_or_else(|_| {
            // No entropy source: fall back on the clock and the address space layout.
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let local = 0u8;
            t ^ mix64(std::ptr::addr_of!(local) as u64)
        });
        Self { seed }
    }

    /// The seed.
    #[must_use]
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The order of `epoch` over `len` items.
    #[must_use]
    pub fn order(&self, len: u64, epoch: u64) -> Order {
        Order::Shuffled(Permutation::new(len, self.seed, epoch))
    }
}

/// An explicit list of indices (a user sampler), stored in 4 bytes per index when they fit.
#[derive(Clone, PartialEq, Eq)]
pub enum Indices {
    /// Every index is below 2^32.
    U32(Vec<u32>),
    /// Some index needs 64 bits.
    U64(Vec<u64>),
}

impl fmt::Debug for Indices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Indices")
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl Default for Indices {
    fn default() -> Self {
        Self::U32(Vec::new())
    }
}

impl Indices {
    /// An empty list with room for `capacity` indices.
    #[must_use]
    pub fn with_capacity(capacity: usize) -> Self {
        Self::U32(Vec::with_capacity(capacity))
    }

    /// Appends one index, widening the storage the first time one needs 64 bits.
    pub fn push(&mut self, index: u64) {
        match self {
            Self::U32(v) => match u32::try_from(index) {
                Ok(i) => v.push(i),
                Err(_) => {
                    let mut wide: Vec<u64> = Vec::with_capacity(v.capacity().max(v.len() + 1));
                    wide.extend(v.iter().map(|&i| u64::from(i)));
                    wide.push(index);
                    *self = Self::U64(wide);
                }
            },
            Self::U64(v) => v.push(index),
        }
    }

    /// The number of indices.
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            Self::U32(v) => v.len(),
            Self::U64(v) => v.len(),
        }
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The index at `position`.
    #[inline]
    #[must_use]
    pub fn get(&self, position: usize) -> u64 {
        match self {
            Self::U32(v) => u64::from(v[position]),
            Self::U64(v) => v[position],
        }
    }

    /// Frees the capacity that was reserved but not used.
    pub fn shrink_to_fit(&mut self) {
        match self {
            Self::U32(v) => v.shrink_to_fit(),
            Self::U64(v) => v.shrink_to_fit(),
        }
    }
}

impl FromIterator<u64> for Indices {
    fn from_iter<I: IntoIterator<Item = u64>>(iter: I) -> Self {
        let iter = iter.into_iter();
        let mut out = Self::with_capacity(iter.size_hint().0);
        for i in iter {
            out.push(i);
        }
        out
    }
}

/// The order of one epoch: the dataset index at each position.
#[derive(Debug, Clone)]
pub enum Order {
    /// `0, 1, …, len − 1`.
    Sequential {
        /// The number of items.
        len: u64,
    },
    /// A seeded permutation of `[0, len)`.
    Shuffled(Permutation),
    /// The indices a user sampler yielded, in its order.
    Explicit(std::sync::Arc<Indices>),
    /// One rank's share of another order (see [`Order::shard`]).
    Sharded(std::sync::Arc<Shard>),
}

/// One rank's share of an order, with the partition rule of torch's `DistributedSampler`.
#[derive(Debug, Clone)]
pub struct Shard {
    base: Order,
    rank: u64,
    world_size: u64,
    len: u64,
}

impl Order {
    /// The share of rank `rank` among `world_size` ranks, as torch's `DistributedSampler` cuts
    /// it: every rank gets the same number of items, the order padded by repeating it from its
    /// start (or trimmed with `drop_last`), and rank r takes every `world_size`-th position from
    /// r. Together the ranks cover the order; without padding they are disjoint.
    ///
    /// # Panics
    /// If `world_size` is 0 or `rank >= world_size` (checked by the callers).
    #[must_use]
    pub fn shard(self, rank: u64, world_size: u64, drop_last: bool) -> Order {
        assert!(
            world_size >= 1 && rank < world_size,
            "rank {rank} of {world_size}"
        );
        let n = self.len();
        let len = if n == 0 {
            0
        } else if drop_last {
            n / world_size
        } else {
            n.div_ceil(world_size)
        };
        Order::Sharded(std::sync::Arc::new(Shard {
            base: self,
            rank,
            world_size,
            len,
        }))
    }
}

impl Order {
    /// The number of positions in the epoch.
    #[must_use]
    pub fn len(&self) -> u64 {
        match self {
            Self::Sequential { len } => *len,
            Self::Shuffled(p) => p.len(),
            Self::Explicit(v) => v.len() as u64,
            Self::Sharded(s) => s.len,
        }
    }

    /// Whether the epoch is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The dataset index at `position` (`position < len`).
    #[inline]
    #[must_use]
    pub fn get(&self, position: u64) -> u64 {
        match self {
            Self::Sequential { .. } => position,
            Self::Shuffled(p) => p.get(position),
            #[allow(clippy::cast_possible_truncation)] // position < len, which is a usize
            Self::Explicit(v) => v.get(position as usize),
            // Padding repeats the order from its start: position q ≥ len maps to q mod len.
            Self::Sharded(s) => s
                .base
                .get((s.rank + position * s.world_size) % s.base.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn collect(order: &Order) -> Vec<u64> {
        (0..order.len()).map(|p| order.get(p)).collect()
    }

    fn is_permutation(v: &[u64]) -> bool {
        let mut seen = vec![false; v.len()];
        v.iter().all(|&i| {
            let i = usize::try_from(i).unwrap();
            i < seen.len() && !std::mem::replace(&mut seen[i], true)
        })
    }

    #[test]
    fn small_lengths_are_permutations() {
        for len in 0..=300u64 {
            for epoch in 0..3 {
                let v = collect(&Shuffle::seeded(7).order(len, epoch));
                assert_eq!(v.len() as u64, len);
                assert!(is_permutation(&v), "len {len} epoch {epoch}: {v:?}");
            }
        }
    }

    #[test]
    fn same_seed_same_epochs_and_epochs_differ() {
        let a = Shuffle::seeded(42);
        let b = Shuffle::seeded(42);
        let e0 = collect(&a.order(1000, 0));
        assert_eq!(e0, collect(&b.order(1000, 0)));
        let e1 = collect(&a.order(1000, 1));
        assert_eq!(e1, collect(&b.order(1000, 1)));
        assert_ne!(e0, e1);
        assert_ne!(e0, collect(&Shuffle::seeded(43).order(1000, 0)));
        assert_ne!(e0, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn positions_are_spread_evenly() {
        // Where does index 0 land, over many epochs? Roughly uniformly over 10 buckets.
        let s = Shuffle::seeded(3);
        let len = 100u64;
        let mut buckets = [0u32; 10];
        for epoch in 0..20_000 {
            let p = s.order(len, epoch);
            let pos = (0..len).position(|q| p.get(q) == 0).unwrap();
            buckets[pos / 10] += 1;
        }
        // Expected 2000 per bucket; a fair shuffle stays well within ±15%.
        for b in buckets {
            assert!((1700..=2300).contains(&b), "{buckets:?}");
        }
    }

    #[test]
    fn indices_widen_when_needed() {
        let mut v = Indices::default();
        v.push(1);
        v.push(u64::from(u32::MAX));
        assert!(matches!(v, Indices::U32(_)));
        v.push(1 << 40);
        assert!(matches!(v, Indices::U64(_)));
        assert_eq!(
            (0..v.len()).map(|i| v.get(i)).collect::<Vec<_>>(),
            [1, u64::from(u32::MAX), 1 << 40]
        );
    }

    /// torch's DistributedSampler on a list of positions, written out as in its documentation.
    fn torch_partition(n: u64, rank: u64, world: u64, drop_last: bool) -> Vec<u64> {
        let mut indices: Vec<u64> = (0..n).collect();
        if drop_last {
            indices.truncate(usize::try_from((n / world) * world).unwrap());
        } else {
            let total = n.div_ceil(world) * world;
            let mut i = 0;
            while (indices.len() as u64) < total {
                indices.push(indices[i]);
                i += 1;
            }
        }
        indices
            .into_iter()
            .skip(usize::try_from(rank).unwrap())
            .step_by(usize::try_from(world).unwrap())
            .collect()
    }

    proptest! {
        #[test]
        fn shards_follow_torchs_partition(n in 0u64..200, world in 1u64..9, drop_last: bool) {
            let mut all = Vec::new();
            for rank in 0..world {
                let shard = Order::Sequential { len: n }.shard(rank, world, drop_last);
                let got = collect(&shard);
                prop_assert_eq!(&got, &torch_partition(n, rank, world, drop_last));
                all.extend(got);
            }
            let mut distinct = all.clone();
            distinct.sort_unstable();
            distinct.dedup();
            if drop_last {
                prop_assert_eq!(all.len(), distinct.len(), "disjoint");
            } else {
                prop_assert_eq!(distinct.len() as u64, n, "covering");
            }
        }

        #[test]
        fn shuffled_shards_are_disjoint_and_cover(n in 1u64..300, world in 1u64..6, seed: u64) {
            let mut all = Vec::new();
            for rank in 0..world {
                all.extend(collect(&Shuffle::seeded(seed).order(n, 3).shard(rank, world, true)));
            }
            let mut sorted = all.clone();
            sorted.sort_unstable();
            sorted.dedup();
            prop_assert_eq!(sorted.len(), all.len());
            prop_assert_eq!(all.len() as u64, (n / world) * world);
        }

        #[test]
        fn every_index_exactly_once(len in 0u64..5000, seed: u64, epoch in 0u64..1000) {
            let v = collect(&Shuffle::seeded(seed).order(len, epoch));
            prop_assert!(is_permutation(&v));
        }

        #[test]
        fn huge_domains_stay_in_range(len in 1u64..u64::MAX, seed: u64, pos in any::<u64>()) {
            let p = Permutation::new(len, seed, 0);
            prop_assert!(p.get(pos % len) < len);
        }
    }
}
