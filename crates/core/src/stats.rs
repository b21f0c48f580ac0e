//! Live counters of a loader, cheap enough to stay on: a few relaxed atomic additions and two
//! clock reads per batch; per item, atomic additions and two clock reads for one item in 64.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Sub-buckets per power of two of the latency histogram (quantiles within 1/8 of the value).
const SUB: u32 = 8;
const BUCKETS: usize = 64 * SUB as usize;

/// A log-linear histogram of durations in nanoseconds.
pub struct Histogram {
    counts: Box<[AtomicU64]>,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.count())
            .finish()
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

fn bucket(ns: u64) -> usize {
    if ns < u64::from(SUB) {
        return usize::try_from(ns).unwrap_or(0);
    }
    let exp = 63 - ns.leading_zeros(); // ≥ 3
    let sub = (ns >> (exp - 3)) & u64::from(SUB - 1);
    usize::try_from(u64::from(exp - 2) * u64::from(SUB) + sub)
        .unwrap_or(BUCKETS - 1)
        .min(BUCKETS - 1)
}

/// The smallest value of a bucket.
fn bucket_floor(i: usize) -> u64 {
    let i = i as u64;
    let sub = u64::from(SUB);
    if i < sub {
        return i;
    }
    let exp = i / sub + 2;
    let frac = i % sub;
    (1u64 << exp) | (frac << (exp - 3))
}

impl Histogram {
    /// Records one duration.
    pub fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.counts[bucket(ns)].fetch_add(1, Ordering::Relaxed);
    }

    /// The number of durations recorded.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The `q`-quantile (0 ≤ q ≤ 1), to within 1/8 of its value; `None` when empty.
    #[must_use]
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let counts: Vec<u64> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(Duration::from_nanos(bucket_floor(i)));
            }
        }
        None
    }
}

/// The counters of one loader, over all its epochs.
#[derive(Debug, Default)]
pub struct Stats {
    pub(crate) batches: AtomicU64,
    pub(crate) items: AtomicU64,
    pub(crate) failed_batches: AtomicU64,
    pub(crate) wait_ns: AtomicU64,
    pub(crate) load: Histogram,
}

/// A copy of a loader's counters at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct StatsSnapshot {
    /// Batches handed to the consumer (failed ones included).
    pub batches: u64,
    /// Items in the batches handed out that loaded.
    pub items: u64,
    /// Batches handed out as errors.
    pub failed_batches: u64,
    /// Time the consumer spent waiting for batches.
    pub wait: Duration,
    /// Median time to load one batch, when any loaded.
    pub load_p50: Option<Duration>,
    /// 99th percentile of the time to load one batch.
    pub load_p99: Option<Duration>,
    /// Batches loaded (handed out or not).
    pub loaded: u64,
}

impl Stats {
    /// The counters now.
    #[must_use]
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            batches: self.batches.load(Ordering::Relaxed),
            items: self.items.load(Ordering::Relaxed),
            failed_batches: self.failed_batches.load(Ordering::Relaxed),
            wait: Duration::from_nanos(self.wait_ns.load(Ordering::Relaxed)),
            load_p50: self.load.quantile(0.5),
            load_p99: self.load.quantile(0.99),
            loaded: self.load.count(),
        }
    }

    pub(crate) fn delivered(&self, items: usize, ok: bool) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        if ok {
            self.items.fetch_add(items as u64, Ordering::Relaxed);
        } else {
            self.failed_batches.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn waited(&self, d: Duration) {
        self.wait_ns.fetch_add(
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }
}

/// One item in this many has its fetch and transform timed: a clock read can cost
/// more than a trivial item (on this VM the clock is a system call, 2.5x the 0-worker epoch).
pub const TIMED_ONE_IN: u32 = 64;

/// Per-item counters a source keeps (the core loader counts batches): fetch and transform
/// latency apart (of one item in [`TIMED_ONE_IN`]), the items being fetched now, and the items
/// handed to the consumer.
#[derive(Debug, Default)]
pub struct ItemStats {
    /// One fetch: a `__getitem__` call, a request with its retries, a coroutine.
    pub fetch: Histogram,
    /// One transform call.
    pub transform: Histogram,
    in_flight: AtomicU64,
    delivered: AtomicU64,
    /// Fetches and transforms started, to pick those timed.
    fetch_ticks: AtomicU32,
    transform_ticks: AtomicU32,
}

/// An item being fetched; counted in flight until dropped.
#[must_use]
pub struct Fetching<'a>(&'a ItemStats);

impl Drop for Fetching<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ItemStats {
    /// The start of a fetch, for one in [`TIMED_ONE_IN`] (the first one included).
    #[must_use]
    #[inline]
    pub fn fetch_clock(&self) -> Option<Instant> {
        let n = self.fetch_ticks.fetch_add(1, Ordering::Relaxed);
        (n % TIMED_ONE_IN == 0).then(Instant::now)
    }

    /// The start of a transform, for one in [`TIMED_ONE_IN`] (the first one included).
    #[must_use]
    #[inline]
    pub fn transform_clock(&self) -> Option<Instant> {
        let n = self.transform_ticks.fetch_add(1, Ordering::Relaxed);
        (n % TIMED_ONE_IN == 0).then(Instant::now)
    }

    /// Records a fetch that started at `clock` (if it was timed).
    #[inline]
    pub fn fetch_took(&self, clock: Option<Instant>) {
        if let Some(t) = clock {
            self.fetch.record(t.elapsed());
        }
    }

    /// Records a transform that started at `clock` (if it was timed).
    #[inline]
    pub fn transform_took(&self, clock: Option<Instant>) {
        if let Some(t) = clock {
            self.transform.record(t.elapsed());
        }
    }

    /// Counts one item in flight until the guard is dropped.
    #[inline]
    pub fn fetching(&self) -> Fetching<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Fetching(self)
    }

    /// Counts an item in flight (for a fetch whose end is reported by [`ItemStats::fetched`]).
    pub fn started(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// Ends a fetch counted by [`ItemStats::started`], started at `clock`.
    pub fn fetched(&self, clock: Option<Instant>) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.fetch_took(clock);
    }

    /// Ends `n` fetches counted by [`ItemStats::started`] that were given up.
    pub fn abandoned(&self, n: usize) {
        self.in_flight.fetch_sub(n as u64, Ordering::Relaxed);
    }

    /// The items being fetched now.
    #[must_use]
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Counts `n` items handed to the consumer.
    pub fn delivered(&self, n: usize) {
        self.delivered.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// The items handed to the consumer.
    #[must_use]
    pub fn items_delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quantiles_of_known_values() {
        let h = Histogram::default();
        assert_eq!(h.quantile(0.5), None);
        for ms in 1..=100 {
            h.record(Duration::from_millis(ms));
        }
        assert_eq!(h.count(), 100);
        let p50 = h.quantile(0.5).unwrap().as_secs_f64() * 1000.0;
        let p99 = h.quantile(0.99).unwrap().as_secs_f64() * 1000.0;
        assert!((50.0 * 0.87..=50.0).contains(&p50), "{p50}");
        assert!((99.0 * 0.87..=99.0).contains(&p99), "{p99}");
    }

    proptest! {
        #[test]
        fn a_bucket_holds_its_value_within_an_eighth(ns in 0u64..u64::MAX / 2) {
            let floor = bucket_floor(bucket(ns));
            prop_assert!(floor <= ns);
            prop_assert!(ns - floor <= ns / 8 + 1, "{} {}", ns, floor);
        }
    }
}
