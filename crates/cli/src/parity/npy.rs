//! The `.npy` format (version 1.0), for the uint8 and float32 arrays the two sides exchange.

use std::path::Path;

use anyhow::{Context, Result, bail};

const MAGIC: &[u8] = b"\x93NUMPY";

/// An array read from or written to a `.npy` file.
#[derive(Debug, Clone, PartialEq)]
pub enum Array {
    U8 { shape: Vec<usize>, data: Vec<u8> },
    F32 { shape: Vec<usize>, data: Vec<f32> },
}

impl Array {
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        match self {
            Array::U8 { shape, .. } | Array::F32 { shape, .. } => shape,
        }
    }

    /// The numpy name of the element type.
    pub fn dtype(&self) -> &'static str {
        match self {
            Array::U8 { .. } => "uint8",
            Array::F32 { .. } => "float32",
        }
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        match self {
            Array::U8 { data, .. } => data.len(),
            Array::F32 { data, .. } => data.len(),
        }
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `.npy` bytes.
    pub fn to_npy(&self) -> Vec<u8> {
        let (descr, payload): (&str, Vec<u8>) = match self {
            Array::U8 { data, .. } => ("|u1", data.clone()),
            Array::F32 { data, .. } => ("<f4", data.iter().flat_map(|v| v.to_le_bytes()).collect()),
        };
        let dims: Vec<String> = self.shape().iter().map(usize::to_string).collect();
        let shape = match dims.len() {
            1 => format!("({},)", dims[0]),
            _ => format!("({})", dims.join(", ")),
        };
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        // Magic (6) + version (2) + length (2) + header + '\n', a multiple of 64.
        let total = 10 + header.len() + 1;
        header.push_str(&" ".repeat((64 - total % 64) % 64));
        header.push('\n');
        let mut out = Vec::with_capacity(10 + header.len() + payload.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(&payload);
        out
    }

    /// Parses `.npy` bytes of a C-ordered uint8 or little-endian float32 array.
    pub fn from_npy(bytes: &[u8]) -> Result<Array> {
        if bytes.len() < 10 || &bytes[..6] != MAGIC {
            bail!("not a .npy file");
        }
        let (header_len, start) = match bytes[6] {
            1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
            2 | 3 if bytes.len() >= 12 => (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            ),
            v => bail!(".npy version {v} is not supported"),
        };
        let header = bytes
            .get(start..start + header_len)
            .context("truncated .npy header")?;
        let header = std::str::from_utf8(header).context(".npy header is not UTF-8")?;
        let field = |name: &str| -> Result<&str> {
            let at = header
                .find(&format!("'{name}':"))
                .with_context(|| format!(".npy header without {name}: {header}"))?;
            Ok(header[at + name.len() + 3..].trim_start())
        };
        if !field("fortran_order")?.starts_with("False") {
            bail!("Fortran-ordered .npy arrays are not supported");
        }
        let descr = field("descr")?;
        let descr = descr.get(1..4).context("bad descr")?;
        let shape = field("shape")?;
        let shape = &shape[1..shape.find(')').context("bad shape")?];
        let shape: Vec<usize> = shape
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().with_context(|| format!("bad dimension {s:?}")))
            .collect::<Result<_>>()?;
        let n: usize = shape.iter().product();
        let data = &bytes[start + header_len..];
        match descr {
            "|u1" => {
                if data.len() != n {
                    bail!("a uint8 array of shape {shape:?} has {} bytes", data.len());
                }
                Ok(Array::U8 {
                    shape,
                    data: data.to_vec(),
                })
            }
            "<f4" => {
                if data.len() != n * 4 {
                    bail!(
                        "a float32 array of shape {shape:?} has {} bytes",
                        data.len()
                    );
                }
                let data = data
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                Ok(Array::F32 { shape, data })
            }
            other => bail!("dtype {other:?} is not uint8 or float32"),
        }
    }

    /// Writes the array to `path`.
    pub fn write(&self, path: &Path) -> Result<()> {
        std::fs::write(path, self.to_npy())
            .with_context(|| format!("cannot write {}", path.display()))
    }

    /// Reads the array at `path`.
    pub fn read(path: &Path) -> Result<Array> {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        Array::from_npy(&bytes).with_context(|| format!("{}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_layout() {
        let a = Array::U8 {
            shape: vec![2, 3, 1],
            data: vec![1, 2, 3, 4, 5, 6],
        };
        let bytes = a.to_npy();
        assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
        let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!((10 + header_len) % 64, 0);
        let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
        assert!(
            header.starts_with("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3, 1), }")
        );
        assert!(header.ends_with('\n'));
        assert_eq!(&bytes[10 + header_len..], &[1, 2, 3, 4, 5, 6]);
        let one = Array::F32 {
            shape: vec![1],
            data: vec![0.5],
        }
        .to_npy();
        assert!(String::from_utf8_lossy(&one).contains("'shape': (1,), }"));
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        assert!(Array::from_npy(b"nope").is_err());
        let mut bad = Array::U8 {
            shape: vec![2],
            data: vec![1, 2],
        }
        .to_npy();
        bad.pop();
        assert_eq!(
            Array::from_npy(&bad).unwrap_err().to_string(),
            "a uint8 array of shape [2] has 1 bytes"
        );
        let mut f64s = Array::U8 {
            shape: vec![0],
            data: vec![],
        }
        .to_npy();
        let at = f64s.windows(3).position(|w| w == b"|u1").unwrap();
        f64s[at..at + 3].copy_from_slice(b"<f8");
        let err = Array::from_npy(&f64s).unwrap_err().to_string();
        assert_eq!(err, "dtype \"<f8\" is not uint8 or float32");
    }

    proptest! {
        #[test]
        fn round_trips(shape in proptest::collection::vec(1usize..5, 1..4), seed in any::<u32>()) {
            let n: usize = shape.iter().product();
            let u = Array::U8 { shape: shape.clone(), data: (0..n).map(|i| (i as u32 ^ seed) as u8).collect() };
            prop_assert_eq!(Array::from_npy(&u.to_npy()).unwrap(), u);
            let f = Array::F32 { shape, data: (0..n).map(|i| i as f32 * 0.1 - seed as f32).collect() };
            prop_assert_eq!(Array::from_npy(&f.to_npy()).unwrap(), f);
        }
    }
}
