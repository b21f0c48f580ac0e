//! `Dtype`: the type of an image's values, known to images, errors and every transform.

/// The type of an image's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// 8-bit unsigned integers (what decoders make).
    U8,
    /// 32-bit floats (after ToFloat).
    F32,
}

impl Dtype {
    /// Bytes per value.
    pub fn size(self) -> usize {
        match self {
            Dtype::U8 => 1,
            Dtype::F32 => 4,
        }
    }

    /// NumPy's name of the type ("uint8", "float32").
    pub fn name(self) -> &'static str {
        match self {
            Dtype::U8 => "uint8",
            Dtype::F32 => "float32",
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
