//! The image side of `dataloader_rs._native`: the Rust transforms as Python classes, `Image`,
//! `ImageCollator` / `ImageBatch`, and their zero-copy views.
//!
//! - [`fixed`]: the `Transform` base class, the fixed transforms, and items between Python and
//!   Rust.
//! - [`random`]: the `RandomTransform` base class, the random transforms and their `params`.
//! - [`image`]: `Image` and `Image.from_array`.
//! - [`batch`]: `ImageCollator` and `ImageBatch`.
//! - [`dlpack`]: the buffer protocol and DLPack exports of `Image` and `ImageBatch`.
//! - [`text`]: `Tokenize`, a Hugging Face tokenizer run in Rust.

use pyo3::prelude::*;

pub mod batch;
pub mod dlpack;
pub mod fixed;
pub mod image;
pub mod random;
pub mod text;

/// Adds the transform, image and batch classes to `m`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    use fixed::{
        CenterCrop, Compose, Crop, Decode, HFlip, Normalize, Pad, PadTo, PyTransform, Resize,
        Rotate90, ToChw, ToFloat, ToGray, ToHwc, ToRgb, ToRgba, VFlip,
    };
    use random::{
        ColorJitter, PyRandom, RandomApply, RandomCrop, RandomErasing, RandomGrayscale,
        RandomHorizontalFlip, RandomResizedCrop, RandomVerticalFlip, TrivialAugmentWide,
    };
    m.add_class::<PyTransform>()?;
    m.add_class::<Decode>()?;
    m.add_class::<ToRgb>()?;
    m.add_class::<ToRgba>()?;
    m.add_class::<ToGray>()?;
    m.add_class::<Crop>()?;
    m.add_class::<CenterCrop>()?;
    m.add_class::<Pad>()?;
    m.add_class::<PadTo>()?;
    m.add_class::<Resize>()?;
    m.add_class::<HFlip>()?;
    m.add_class::<VFlip>()?;
    m.add_class::<Rotate90>()?;
    m.add_class::<ToFloat>()?;
    m.add_class::<Normalize>()?;
    m.add_class::<ToChw>()?;
    m.add_class::<ToHwc>()?;
    m.add_class::<Compose>()?;
    m.add_class::<PyRandom>()?;
    m.add_class::<RandomResizedCrop>()?;
    m.add_class::<RandomCrop>()?;
    m.add_class::<RandomHorizontalFlip>()?;
    m.add_class::<RandomVerticalFlip>()?;
    m.add_class::<RandomErasing>()?;
    m.add_class::<RandomApply>()?;
    m.add_class::<ColorJitter>()?;
    m.add_class::<RandomGrayscale>()?;
    m.add_class::<TrivialAugmentWide>()?;
    m.add_class::<image::PyImage>()?;
    m.add_class::<batch::ImageCollator>()?;
    m.add_class::<batch::ImageBatch>()?;
    m.add_class::<text::Tokenize>()?;
    Ok(())
}
