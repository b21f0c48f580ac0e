//! torchvision's random augmentations. Each draws its parameters from the item's [`Key`] (the
//! distributions of torchvision's `make_params`, not its random stream) and then applies what
//! `torchvision.transforms.v2.functional` does to a uint8 tensor with those parameters.
//!
//! Without a key (`Transform::apply(index, item)`), a random transform draws from
//! `Key::new(0, 0, index)`.

mod color;
mod crop;
mod erase;
mod flip;
mod trivial;

pub use color::{ColorJitter, Jitter, RandomGrayscale};
pub use crop::{CropBox, RandomCrop, RandomResizedCrop};
pub use erase::{EraseValue, RandomErasing, Region};
pub use flip::{RandomApply, RandomHorizontalFlip, RandomVerticalFlip};
pub use trivial::{Op, TrivialAugmentWide};

use crate::{Error, Key, Rng};

/// A coin's probability, checked as torchvision checks `p`.
pub(crate) fn check_p(owner: &'static str, p: f64) -> Result<f64, Error> {
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(Error::arg(
            owner,
            format!("p should be a floating point value in the interval [0.0, 1.0], got {p}"),
        ))
    }
}

/// A `(min, max)` pair of finite numbers, `min <= max`, both within `bounds`.
pub(crate) fn check_range(
    owner: &'static str,
    name: &str,
    (lo, hi): (f64, f64),
    bounds: (f64, f64),
) -> Result<(f64, f64), Error> {
    if !lo.is_finite() || !hi.is_finite() {
        return Err(Error::arg(
            owner,
            format!("{name} must be finite, got ({lo}, {hi})"),
        ));
    }
    if lo > hi {
        return Err(Error::arg(
            owner,
            format!("{name} should be of kind (min, max), got ({lo}, {hi})"),
        ));
    }
    if lo < bounds.0 || hi > bounds.1 {
        return Err(Error::arg(
            owner,
            format!(
                "{name} should be between {} and {}, got ({lo}, {hi})",
                bounds.0, bounds.1
            ),
        ));
    }
    Ok((lo, hi))
}

/// The random rectangles of `RandomResizedCrop` and `RandomErasing` (torchvision's
/// `make_params`): an area fraction uniform in `scale`, an aspect ratio log-uniform in `ratio`.
#[derive(Debug, Clone)]
pub(crate) struct Rectangles {
    scale: (f64, f64),
    log_ratio: (f64, f64),
    /// The ratio's bounds, as given.
    pub ratio: (f64, f64),
}

impl Rectangles {
    /// Checks `scale` (within `[0, max_scale]`), then `ratio` (within `(0, ∞)`), for `owner`.
    pub fn new(
        owner: &'static str,
        scale: (f64, f64),
        ratio: (f64, f64),
        max_scale: f64,
    ) -> Result<Rectangles, Error> {
        let scale = check_range(owner, "scale", scale, (0.0, max_scale))?;
        let ratio = check_range(owner, "ratio", ratio, (f64::MIN_POSITIVE, f64::INFINITY))?;
        Ok(Rectangles {
            scale,
            log_ratio: (ratio.0.ln(), ratio.1.ln()),
            ratio,
        })
    }

    /// One try's sides in an image of `area` pixels, rounded as Python rounds (half to even):
    /// the side the ratio lengthens, then the other.
    pub fn draw(&self, rng: &mut Rng, area: f64) -> (f64, f64) {
        let target = area * rng.uniform_in(self.scale.0, self.scale.1);
        let aspect = rng.uniform_in(self.log_ratio.0, self.log_ratio.1).exp();
        (
            (target * aspect).sqrt().round_ties_even(),
            (target / aspect).sqrt().round_ties_even(),
        )
    }

    /// Where a rectangle of `h × w` that fits goes in an image of `height × width`: the top
    /// row, then the left column, each uniform (torchvision's two `torch.randint`).
    pub fn place(
        rng: &mut Rng,
        (h, w): (usize, usize),
        (height, width): (usize, usize),
    ) -> (i64, i64) {
        let top = rng.int_in(0, (height - h) as i64);
        let left = rng.int_in(0, (width - w) as i64);
        (top, left)
    }
}

/// The key of a transform applied without one.
pub(crate) fn unkeyed(index: u64) -> Key {
    Key::new(0, 0, index)
}
