//! The `Transform` trait: one step of a pipeline, applied to each item with its dataset index
//! (or its [`Key`], for the steps that draw random numbers); [`RandomParams`], what a random
//! step would draw.

use crate::{Error, Item, Key};

/// One step of an image pipeline.
///
/// `index` is the item's dataset index, as the sampler drew it; the built-in transforms ignore
/// it, a user transform may use it (for example to seed an augmentation).
///
/// Loaders call [`Transform::apply_keyed`] with the item's [`Key`]: the random transforms draw
/// from it, the others see only `key.index` (the default calls `apply`).
pub trait Transform: Send + Sync + std::fmt::Debug {
    /// Transforms `item`, the item of dataset index `index`. A random transform draws as
    /// `apply_keyed(Key::new(0, 0, index), item)` does.
    ///
    /// # Errors
    /// An item the step cannot take, or one it fails on.
    fn apply(&self, index: u64, item: Item) -> Result<Item, Error>;

    /// Transforms `item` drawing any random numbers from `key` (a [`crate::Compose`] gives each
    /// step [`Key::at`] its position).
    ///
    /// # Errors
    /// As [`Transform::apply`].
    fn apply_keyed(&self, key: Key, item: Item) -> Result<Item, Error> {
        self.apply(key.index, item)
    }

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

/// A transform that draws random numbers: the parameters it would draw for a key.
pub trait RandomParams: Transform {
    /// The parameters `apply_keyed(key, item)` uses on an image of `height × width`, as
    /// torchvision names them (`{"top", "left", "height", "width"}` for a crop, ...).
    ///
    /// # Errors
    /// What `apply_keyed` would fail with for that size (a crop larger than the image).
    fn params(&self, key: Key, height: usize, width: usize) -> Result<Params, Error>;
}

/// One drawn parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A coin.
    Bool(bool),
    /// A count or a coordinate.
    Int(i64),
    /// A factor.
    Float(f64),
    /// An order, or padding.
    Ints(Vec<i64>),
    /// A name (`TrivialAugmentWide`'s operation).
    Str(&'static str),
    /// A parameter not drawn (a `ColorJitter` factor that is off).
    None,
}

/// The drawn parameters of one call, by name, in a fixed order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Params(pub Vec<(&'static str, Value)>);

impl Params {
    /// The value named `name`.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}
