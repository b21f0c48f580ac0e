//! What Pillow computes on uint8 HWC images, to the bit: `convert` and `resize`.

mod convert;
mod resize;

pub use convert::{ToGray, ToRgb, ToRgba};
pub use resize::{Resize, ResizeSize};
