//! Image decoders, Pillow-exact transforms and batch buffers for dataloader-rs.
//!
//! Pipelines are built of [`Transform`]s, each `apply(index, item)`: [`Decode`] turns encoded
//! bytes into a uint8 HWC [`Image`]; the others transform images; [`Compose`] chains them and
//! fuses the per-value steps; [`Collator`] stacks images into one reusable [`Batch`] buffer.
//!
//! The random transforms ([`RandomResizedCrop`], [`RandomCrop`], the flips, [`ColorJitter`],
//! [`RandomGrayscale`], [`RandomErasing`], [`RandomApply`], [`TrivialAugmentWide`]) draw from the
//! [`Key`] a loader passes to [`Transform::apply_keyed`] (the seed, the epoch, the item's index
//! and the step's position) and apply the kernels of [`tv`], torchvision's values on uint8
//! tensors.
//!
//! Getting started: a pipeline built step by step, with a transform of one's own (which takes
//! the image out of its [`Item`] with [`Item::into_image`]), applied to generated images and
//! collated into one NCHW float batch. Encoded bytes (`Item::Bytes`) would need [`Decode`] as
//! the first step.
//!
//! ```
//! use dlrs_transforms::{
//!     BatchLayout, Collator, Compose, Error, Image, Item, Layout, Normalize, Pixels, Resize,
//!     ResizeSize, Size, ToChw, ToFloat, Transform,
//! };
//!
//! /// Brightens an image by its dataset index (a per-item effect of one's own).
//! #[derive(Debug)]
//! struct AddIndex;
//!
//! impl Transform for AddIndex {
//!     fn apply(&self, index: u64, item: Item) -> Result<Item, Error> {
//!         let im = item.into_image("AddIndex")?;
//!         let (h, w, c) = (im.height(), im.width(), im.channels());
//!         let Pixels::U8(v) = im.into_pixels() else {
//!             let (expected, got) = ("uint8 pixels", "float32 pixels".to_owned());
//!             return Err(Error::WrongInput { transform: "AddIndex", expected, got });
//!         };
//!         let v = v.into_iter().map(|x| x.saturating_add(index as u8)).collect();
//!         Ok(Item::Image(Image::new(h, w, c, Layout::Hwc, Pixels::U8(v))?))
//!     }
//! }
//!
//! let size = Size { width: 8, height: 6 };
//! let pipeline = Compose::default()
//!     .then(AddIndex)
//!     .then(Resize::new(ResizeSize::from(size), Default::default(), None, true)?)
//!     .then(ToFloat::default())
//!     .then(Normalize::new(&[0.5, 0.5, 0.5], &[0.25, 0.25, 0.25])?)
//!     .then(ToChw);
//! // ToFloat, Normalize and ToChw run as one pass over the pixels.
//! assert_eq!(pipeline.passes(), 3);
//!
//! let mut images = Vec::new();
//! for index in 0..4u64 {
//!     // A 12 × 16 RGB gradient (height 12, width 16), as a decoder would make it.
//!     let pixels = (0..12 * 16 * 3).map(|i| (i % 200) as u8).collect();
//!     let item = Item::Image(Image::new(12, 16, 3, Layout::Hwc, Pixels::U8(pixels))?);
//!     images.push(pipeline.apply(index, item)?.into_image("collate")?);
//! }
//! let batch = Collator::new(BatchLayout::Nchw, None, 0).collate(images)?;
//! assert_eq!(batch.shape(), [4, 3, 6, 8]);
//! assert_eq!(batch.as_f32().map(<[f32]>::len), Some(4 * 3 * 6 * 8));
//! # Ok::<(), Error>(())
//! ```

#![warn(missing_docs)]

// The modules, bottom up; each line says what it holds.

// What every step takes and gives.
mod dtype; // `Dtype`, the type of an image's values
mod error; // `Error`, `Format`, and the parsing of names into enums
mod image; // `Image`, `Item`, `Pixels`, `Layout`, the size limits
mod rng; // `Key` and `Rng`: Philox4x64-10, one counter per draw
mod transform; // the `Transform` trait, and what a decoder does for the step after it

// The steps.
mod collate; // `Collator`: images stacked into a reusable `Batch`
mod compose; // `Compose`: steps chained, decoders paired with the resize after them
mod decode; // `Decode`: PNG, WebP, TIFF, and our own JPEG and BMP decoders
mod geometry; // crops, pads, flips, `Rotate90`: values moved, none computed
mod tensor; // `ToFloat`, `Normalize`, `ToChw`, `ToHwc`

// Whose values: Pillow's, torchvision's, and what their resizers share.
mod augment; // torchvision's random transforms: a draw from the `Key`, then a `tv` kernel
mod pil; // Pillow's values: `convert` (`ToRgb`, `ToRgba`, `ToGray`), `resize` (`Resize`)
mod resample; // `Interpolation`, the filters and the float weights of both resizers
pub mod tv; // torchvision's uint8 kernels: colour, resize, affine, enhance

pub mod simd; // the switch every SIMD kernel asks (`DLRS_SIMD=off`)
#[cfg(feature = "text")]
pub mod text; // `Tokenizer`: a Hugging Face tokenizer from its `tokenizer.json`

pub use augment::{
    ColorJitter, CropBox, EraseValue, Jitter, Op, RandomApply, RandomCrop, RandomErasing,
    RandomGrayscale, RandomHorizontalFlip, RandomResizedCrop, RandomVerticalFlip, Region,
    TrivialAugmentWide,
};
pub use collate::{Batch, BatchLayout, Collator};
pub use compose::Compose;
pub use decode::{Decode, DecodeLimits, Draft, sniff_format};
pub use dtype::Dtype;
pub use error::{Error, Format};
pub use geometry::{
    Anchor, CenterCrop, Crop, Fill, HFlip, Pad, PadTo, Padding, PaddingMode, Rotate90, Size, VFlip,
};
pub use image::{Image, Item, Layout, MAX_BYTES, MAX_SIDE, Pixels};
pub use pil::{Resize, ResizeSize, ToGray, ToRgb, ToRgba};
pub use resample::Interpolation;
pub use rng::{Key, Rng, philox4x64_10};
pub use tensor::{Normalize, ToChw, ToFloat, ToHwc};
pub use transform::{Params, Pointwise, RandomParams, Rect, Reduced, Shrink, Transform, Value};
