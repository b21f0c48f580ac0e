//! What `torchvision.transforms.v2.functional` computes on uint8 tensors, where it differs
//! from Pillow: the kernels of the random transforms (`crate::augment`).

pub mod affine;
pub mod color;
pub mod enhance;
mod resize;

pub use resize::{Interpolation, resize_u8};
