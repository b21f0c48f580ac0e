//! The crate's one error type, its variants grouped by who is at fault.

use crate::dtype::Dtype;

/// The image formats [`crate::Decode`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Portable Network Graphics.
    Png,
    /// JPEG (baseline and progressive).
    Jpeg,
    /// WebP, lossy or lossless.
    WebP,
    /// TIFF.
    Tiff,
    /// Windows bitmap.
    Bmp,
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Format::Png => "PNG",
            Format::Jpeg => "JPEG",
            Format::WebP => "WebP",
            Format::Tiff => "TIFF",
            Format::Bmp => "BMP",
        })
    }
}

/// Every error of `dlrs-transforms`.
///
/// All variants map to Python's `ValueError`, the spec's class for bad arguments, over-limit and
/// undecodable images and transforms given an image they do not take.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    // ----- the caller's argument -----
    /// A transform or collator was built (or called) with an argument it cannot use.
    #[error("{transform}: invalid argument: {reason}")]
    InvalidArgument {
        /// The transform's name.
        transform: &'static str,
        /// What is wrong with the argument.
        reason: String,
    },
    /// Raw pixels whose shape, channel count or length do not describe an image.
    #[error("invalid image: {reason}")]
    InvalidImage {
        /// What is wrong with the pixels.
        reason: String,
    },

    // ----- limits -----
    /// The image's sides exceed the limits (checked from the header, before decoding).
    #[error("image of {width}x{height} pixels exceeds the limit of {max_width}x{max_height}")]
    TooLarge {
        /// The image's width.
        width: u64,
        /// The image's height.
        height: u64,
        /// The largest width allowed.
        max_width: u64,
        /// The largest height allowed.
        max_height: u64,
    },
    /// Decoding (or holding) the image would need more memory than allowed.
    #[error(
        "image of {width}x{height} pixels needs {bytes} bytes, above the limit of {max_alloc} bytes"
    )]
    AllocationTooLarge {
        /// The image's width.
        width: u64,
        /// The image's height.
        height: u64,
        /// The bytes needed.
        bytes: u64,
        /// The most bytes allowed.
        max_alloc: u64,
    },

    // ----- the encoded data -----
    /// The bytes start with no signature of a supported format.
    #[error(
        "unknown image format (first bytes: {magic:02x?}); supported: PNG, JPEG, WebP, TIFF, BMP"
    )]
    UnknownFormat {
        /// The first bytes of the data.
        magic: Vec<u8>,
    },
    /// The data is not a valid image of its format.
    #[error("corrupt {format} image: {reason}")]
    Corrupt {
        /// The format the data claims.
        format: Format,
        /// What is wrong.
        reason: String,
    },
    /// The data ends before the image does.
    #[error("truncated {format} image: {reason}")]
    Truncated {
        /// The format the data claims.
        format: Format,
        /// Where it ends.
        reason: String,
    },
    /// A valid image using a feature this decoder does not implement.
    #[error("unsupported {format} image: {reason}")]
    Unsupported {
        /// The format the data claims.
        format: Format,
        /// The feature.
        reason: String,
    },

    // ----- the input given to a transform -----
    /// A transform was given an item it does not take (for example Normalize before ToFloat).
    #[error("{transform} expects {expected}, got {got}")]
    WrongInput {
        /// The transform's name.
        transform: &'static str,
        /// What the transform takes.
        expected: &'static str,
        /// What it was given.
        got: String,
    },
    /// An image of a batch does not have the size of the batch's first image.
    #[error(
        "image {index} of the batch is {}x{}x{} (height x width x channels), the first one is {}x{}x{}",
        got[0], got[1], got[2], expected[0], expected[1], expected[2]
    )]
    ShapeMismatch {
        /// The position of the image in the batch.
        index: usize,
        /// `[height, width, channels]` of the first image.
        expected: [usize; 3],
        /// `[height, width, channels]` of image `index`.
        got: [usize; 3],
    },
    /// An image of a batch does not have the collator's dtype (or the first image's).
    #[error("image {index} of the batch is {got}, expected {expected}")]
    DtypeMismatch {
        /// The position of the image in the batch.
        index: usize,
        /// The dtype the batch must have.
        expected: Dtype,
        /// The image's dtype.
        got: Dtype,
    },
    /// A batch of no image has no shape.
    #[error("cannot collate an empty batch")]
    EmptyBatch,
    /// A tokenizer failed on a text.
    #[error("Tokenize: {reason}")]
    Text {
        /// The tokenizer's message.
        reason: String,
    },
}

/// `FromStr` for an enum read from a name: `"name" | "alias" => Variant` per value; any other
/// name is `Error::arg(transform, reason)`, `reason` made from the name bound to `$other`.
macro_rules! from_names {
    ($ty:ident, $transform:literal, { $($names:pat => $variant:ident),+ $(,)? }, $other:ident => $reason:expr) => {
        impl std::str::FromStr for $ty {
            type Err = $crate::Error;
            fn from_str(s: &str) -> Result<Self, $crate::Error> {
                match s {
                    $($names => Ok($ty::$variant),)+
                    $other => Err($crate::Error::arg($transform, $reason)),
                }
            }
        }
    };
}
pub(crate) use from_names;

impl Error {
    pub(crate) fn arg(transform: &'static str, reason: impl Into<String>) -> Error {
        Error::InvalidArgument {
            transform,
            reason: reason.into(),
        }
    }

    pub(crate) fn corrupt(format: Format, reason: impl std::fmt::Display) -> Error {
        Error::Corrupt {
            format,
            reason: reason.to_string(),
        }
    }

    pub(crate) fn truncated(format: Format, reason: impl std::fmt::Display) -> Error {
        Error::Truncated {
            format,
            reason: reason.to_string(),
        }
    }

    /// The data of a `format` image end before the image does.
    pub(crate) fn ended(format: Format) -> Error {
        Error::truncated(format, "the data ends before the image does")
    }

    /// A decoder's failed read of the data: they end too soon (said so plainly) or another
    /// I/O error.
    pub(crate) fn read(format: Format, io: std::io::Error) -> Error {
        if io.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::ended(format)
        } else {
            Error::truncated(format, io)
        }
    }

    pub(crate) fn unsupported(format: Format, reason: impl std::fmt::Display) -> Error {
        Error::Unsupported {
            format,
            reason: reason.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_say_why() {
        let e = Error::WrongInput {
            transform: "Normalize",
            expected: "a float32 image (apply ToFloat first)",
            got: "a uint8 image".into(),
        };
        assert_eq!(
            e.to_string(),
            "Normalize expects a float32 image (apply ToFloat first), got a uint8 image"
        );
        let e = Error::TooLarge {
            width: 20000,
            height: 10,
            max_width: 16384,
            max_height: 16384,
        };
        assert_eq!(
            e.to_string(),
            "image of 20000x10 pixels exceeds the limit of 16384x16384"
        );
        assert_eq!(
            Error::UnknownFormat {
                magic: vec![0, 0xab]
            }
            .to_string(),
            "unknown image format (first bytes: [00, ab]); supported: PNG, JPEG, WebP, TIFF, BMP"
        );
        assert_eq!(
            Error::truncated(Format::Png, "unexpected end of file").to_string(),
            "truncated PNG image: unexpected end of file"
        );
    }
}
