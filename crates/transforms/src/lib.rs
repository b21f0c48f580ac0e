//! Image decoders, Pillow-exact transforms and batch buffers for dataloader-rs.
//!
//! Pipelines are built of [`Transform`]s, each `apply(index, item)`: [`Decode`] turns encoded
//! bytes into a uint8 HWC [`Image`]; the others transform images; [`Compose`] chains them and
//! fuses the per-value steps; [`Collator`] stacks images into one reusable [`Batch`] buffer.

mod collate;
mod color;
mod compose;
mod decode;
mod error;
mod geometry;
mod image;
mod resize;
mod tensor;
mod transform;

pub use collate::{Batch, BatchLayout, Collator};
pub use color::{ToGray, ToRgb, ToRgba};
pub use compose::Compose;
pub use decode::{Decode, DecodeLimits, sniff_format};
pub use error::{Error, Format};
pub use geometry::{
    Anchor, CenterCrop, Crop, Fill, HFlip, Pad, PadTo, Padding, PaddingMode, Rotate90, Size, VFlip,
};
pub use image::{Dtype, Image, Item, Layout, MAX_BYTES, MAX_SIDE, Pixels};
pub use resize::{Interpolation, Resize, ResizeSize};
pub use tensor::{Normalize, ToChw, ToFloat, ToHwc};
pub use transform::{Pointwise, Transform};
