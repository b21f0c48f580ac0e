//! One epoch cut into batches: which positions of the [`Order`] make batch `b`.

use std::sync::Arc;

use crate::sampler::Order;

/// An epoch's order cut into batches of `batch_size`, the last one dropped when short and
/// `drop_last` is set, or at given boundaries (a batch sampler's batches). Batches are computed
/// on demand, so any batch can be looked up directly.
#[derive(Debug, Clone)]
pub struct EpochPlan {
    order: Order,
    batch_size: u64,
    drop_last: bool,
    /// Batch `b` is positions `bounds[b]..bounds[b + 1]` of the order, when given.
    bounds: Option<Arc<[u64]>>,
}

impl EpochPlan {
    /// A plan over `order` (`batch_size` ≥ 1, checked by [`crate::Config`]).
    #[must_use]
    pub fn new(order: Order, batch_size: usize, drop_last: bool) -> Self {
        assert!(batch_size >= 1, "batch_size must be at least 1");
        Self {
            order,
            batch_size: batch_size as u64,
            drop_last,
            bounds: None,
        }
    }

    /// A plan whose batch `b` is positions `bounds[b]..bounds[b + 1]` of `order`: `bounds`
    /// starts at 0, never decreases and ends at `order.len()`.
    ///
    /// # Panics
    /// When `bounds` is not such a list.
    #[must_use]
    pub fn with_bounds(order: Order, bounds: Arc<[u64]>) -> Self {
        assert!(
            bounds.first() == Some(&0)
                && bounds.last() == Some(&order.len())
                && bounds.windows(2).all(|w| w[0] <= w[1]),
            "batch bounds must rise from 0 to the order's length"
        );
        Self {
            order,
            batch_size: 1,
            drop_last: false,
            bounds: Some(bounds),
        }
    }

    /// Where batch `b` starts and ends in the order.
    fn span(&self, b: u64) -> (u64, u64) {
        if let Some(bounds) = &self.bounds {
            let b = usize::try_from(b).unwrap_or(usize::MAX);
            return (bounds[b], bounds[b + 1]);
        }
        let start = b * self.batch_size;
        (start, (start + self.batch_size).min(self.order.len()))
    }

    /// The items of the order before batch `b` (all of them for `b` past the last batch).
    pub(crate) fn items_before(&self, b: u64) -> u64 {
        if let Some(bounds) = &self.bounds {
            let b = usize::try_from(b)
                .unwrap_or(usize::MAX)
                .min(bounds.len() - 1);
            return bounds[b];
        }
        b.saturating_mul(self.batch_size).min(self.order.len())
    }

    /// The number of batches of the epoch.
    #[must_use]
    pub fn num_batches(&self) -> u64 {
        if let Some(bounds) = &self.bounds {
            return bounds.len() as u64 - 1;
        }
        Self::count(self.order.len(), self.batch_size as usize, self.drop_last)
    }

    /// The number of batches of an epoch of `len` items.
    #[must_use]
    pub fn count(len: u64, batch_size: usize, drop_last: bool) -> u64 {
        let bs = batch_size.max(1) as u64;
        if drop_last {
            len / bs
        } else {
            len.div_ceil(bs)
        }
    }

    /// The order the plan cuts.
    #[must_use]
    pub fn order(&self) -> &Order {
        &self.order
    }

    /// The number of items in batch `b` (`b < num_batches`).
    #[must_use]
    pub fn batch_len(&self, b: u64) -> usize {
        let (start, end) = self.span(b);
        #[allow(clippy::cast_possible_truncation)] // at most one batch, which fits in memory
        let n = end.saturating_sub(start) as usize;
        n
    }

    /// Writes the dataset indices of batch `b` into `out` (cleared first), in sampler order.
    pub fn fill_batch(&self, b: u64, out: &mut Vec<u64>) {
        out.clear();
        let (start, end) = self.span(b);
        match &self.order {
            Order::Sequential { .. } => out.extend(start..end),
            order => out.extend((start..end).map(|p| order.get(p))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_cut_batches_of_any_size() {
        let order = Order::Explicit(Arc::new([5u64, 3, 9, 1, 0].into_iter().collect()));
        let plan = EpochPlan::with_bounds(order, Arc::from([0u64, 2, 2, 5]));
        assert_eq!(plan.num_batches(), 3);
        let got: Vec<Vec<u64>> = (0..3)
            .map(|b| {
                let mut v = Vec::new();
                plan.fill_batch(b, &mut v);
                assert_eq!(v.len(), plan.batch_len(b));
                v
            })
            .collect();
        assert_eq!(got, vec![vec![5, 3], vec![], vec![9, 1, 0]]);
    }

    #[test]
    #[should_panic(expected = "batch bounds")]
    fn bounds_must_cover_the_order() {
        let _ = EpochPlan::with_bounds(Order::Sequential { len: 4 }, Arc::from([0u64, 3]));
    }

    fn batches(len: u64, bs: usize, drop_last: bool) -> Vec<Vec<u64>> {
        let plan = EpochPlan::new(Order::Sequential { len }, bs, drop_last);
        let mut out = Vec::new();
        (0..plan.num_batches())
            .map(|b| {
                plan.fill_batch(b, &mut out);
                assert_eq!(out.len(), plan.batch_len(b));
                out.clone()
            })
            .collect()
    }

    #[test]
    fn cuts_with_and_without_drop_last() {
        assert_eq!(
            batches(7, 3, false),
            vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]]
        );
        assert_eq!(batches(7, 3, true), vec![vec![0, 1, 2], vec![3, 4, 5]]);
        assert_eq!(batches(6, 3, true), vec![vec![0, 1, 2], vec![3, 4, 5]]);
        assert_eq!(batches(2, 3, true), Vec::<Vec<u64>>::new());
        assert_eq!(batches(0, 3, false), Vec::<Vec<u64>>::new());
        assert_eq!(batches(2, 1, false), vec![vec![0], vec![1]]);
    }

    #[test]
    fn counts() {
        assert_eq!(EpochPlan::count(10, 3, false), 4);
        assert_eq!(EpochPlan::count(10, 3, true), 3);
        assert_eq!(EpochPlan::count(0, 3, false), 0);
    }
}
