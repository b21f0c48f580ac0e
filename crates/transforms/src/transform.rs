//! The `Transform` trait: one step of a pipeline, applied to each item with its dataset index.

use crate::{Error, Item};

/// One step of an image pipeline.
///
/// `index` is the item's dataset index, as the sampler drew it; the built-in transforms ignore
/// it, a user transform may use it (for example to seed an augmentation).
pub trait Transform: Send + Sync + std::fmt::Debug {
    /// Transforms `item`, the item of dataset index `index`.
    ///
    /// # Errors
    /// An item the step cannot take, or one it fails on.
    fn apply(&self, index: u64, item: Item) -> Result<Item, Error>;

    /// The step's description when it is one of the per-value steps that [`crate::Compose`]
    /// fuses into one pass (ToFloat, Normalize, ToChw). Other transforms keep the default.
    fn pointwise(&self) -> Option<Pointwise> {
        None
    }
}

/// A per-value step that [`crate::Compose`] may fuse with its neighbours.
#[derive(Debug, Clone, PartialEq)]
pub enum Pointwise {
    /// uint8 to float32, divided by 255 when `scale`.
    ToFloat {
        /// Divided by 255.
        scale: bool,
    },
    /// `(x - mean) / std` per channel, in float32.
    Normalize {
        /// One mean per channel.
        mean: Vec<f32>,
        /// One standard deviation per channel.
        std: Vec<f32>,
    },
    /// Channels first.
    ToChw,
}
