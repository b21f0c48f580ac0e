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

    /// For a step that resizes: the region of a `height × width` input it reads, and the size
    /// it makes of it. A JPEG decoded with [`crate::Draft::Auto`] before it in a
    /// [`crate::Compose`] is reduced as long as that region stays at least that size.
    fn shrink(&self, _key: Key, _height: usize, _width: usize) -> Option<Shrink> {
        None
    }

    /// [`Transform::apply_keyed`] for an input that was decoded reduced or only in part
    /// (`from`: the item holds `from.window` of the reduced image): the step reads the region
    /// [`Transform::shrink`] named, scaled, and makes the same size of it. Only steps whose
    /// `shrink` is `Some` are asked, and only with a part their [`Transform::window`] named;
    /// the default ignores the reduction.
    ///
    /// # Errors
    /// As [`Transform::apply`].
    fn apply_reduced(&self, key: Key, item: Item, _from: Reduced) -> Result<Item, Error> {
        self.apply_keyed(key, item)
    }

    /// For a step whose `shrink` is `Some`: the part of its input (the image `from` names,
    /// reduced as it says) that `apply_reduced` reads, when that is less than all of it. A
    /// JPEG before it in a [`crate::Compose`] is decoded only there, with the same values.
    fn window(&self, _key: Key, _from: Reduced) -> Option<Rect> {
        None
    }

    /// Whether the step keeps an image's height and width (the colour conversions): a
    /// [`crate::Compose`] looks past it for the step that resizes.
    fn keeps_size(&self) -> bool {
        false
    }

    /// The step as `Any`, for a [`crate::Compose`] to find its decoder among its steps
    /// (only a decoder answers; this module knows no step type).
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// A rectangle of pixels: first row, first column, rows, columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rect {
    /// First row.
    pub top: usize,
    /// First column.
    pub left: usize,
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
}

impl Rect {
    /// All of a `height × width` image.
    pub fn whole((height, width): (usize, usize)) -> Rect {
        Rect {
            top: 0,
            left: 0,
            height,
            width,
        }
    }

    /// The part of `self` inside a `height × width` image, or `None` when nothing is.
    pub fn within(&self, (height, width): (usize, usize)) -> Option<Rect> {
        let (top, left) = (self.top.min(height), self.left.min(width));
        let bottom = self.top.saturating_add(self.height).min(height);
        let right = self.left.saturating_add(self.width).min(width);
        (bottom > top && right > left).then_some(Rect {
            top,
            left,
            height: bottom - top,
            width: right - left,
        })
    }
}

/// An image decoded reduced, or only in part: the full size `(height, width)`, the factor
/// (each side of the reduced image is the full one divided by it, rounded up) and the part of
/// the reduced image decoded (all of it, unless a step's [`Transform::window`] named less).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reduced {
    /// The full size, `(height, width)`.
    pub full: (usize, usize),
    /// 1, 2, 4 or 8.
    pub scale: usize,
    /// The pixels of the reduced image that the decoded one holds.
    pub window: Rect,
}

impl Reduced {
    /// The whole image of size `full`, reduced by `scale`.
    pub fn whole(full: (usize, usize), scale: usize) -> Reduced {
        let mut r = Reduced {
            full,
            scale,
            window: Rect::whole((0, 0)),
        };
        r.window = Rect::whole(r.size());
        r
    }

    /// The reduced image's `(height, width)`.
    pub fn size(&self) -> (usize, usize) {
        (
            self.full.0.div_ceil(self.scale),
            self.full.1.div_ceil(self.scale),
        )
    }

    /// Whether it is all of the image at full size.
    pub fn is_whole(&self) -> bool {
        self.scale == 1 && self.window == Rect::whole(self.full)
    }
}

/// Pillow's `draft` rule: the largest of 8, 4, 2 and 1 that divides neither side of a
/// `width × height` region below `want_width × want_height`.
pub(crate) fn reduction(
    width: usize,
    height: usize,
    want_width: usize,
    want_height: usize,
) -> usize {
    let scale = (width / want_width.max(1)).min(height / want_height.max(1));
    [8, 4, 2].into_iter().find(|&d| scale >= d).unwrap_or(1)
}

/// What a resizing step reads of its input, and what it makes of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shrink {
    /// The region read: first row, first column, rows, columns.
    pub top: usize,
    /// First column.
    pub left: usize,
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
    /// The output's rows.
    pub out_height: usize,
    /// The output's columns.
    pub out_width: usize,
}

impl Shrink {
    /// The reduction (1, 2, 4 or 8) of the input that keeps the region at least the output's
    /// size, by Pillow's `draft` rule.
    pub fn reduction(&self) -> usize {
        reduction(self.width, self.height, self.out_width, self.out_height)
    }

    /// The region in the reduced input: `(top, left, height, width)`, fractional.
    pub fn scaled(&self, from: Reduced) -> (f64, f64, f64, f64) {
        let s = from.scale as f64;
        let f = |v: usize| v as f64 / s;
        (f(self.top), f(self.left), f(self.height), f(self.width))
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
