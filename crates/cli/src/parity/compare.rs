//! Differences between the two sides: per array ([`Tally`]), per chain ([`Row`]), and the
//! table and JSON of the rows.

use std::path::Path;

use serde_json::json;

use super::npy::Array;

/// The differences between two arrays of one shape and type.
#[derive(Debug, Clone, PartialEq)]
pub struct Tally {
    /// Values compared.
    pub values: u64,
    /// Values that differ.
    pub differing: u64,
    /// The largest absolute difference (infinite where one side is NaN and the other not).
    pub max: f64,
    /// The sum of the absolute differences.
    pub sum: f64,
}

impl Tally {
    /// Compares `got` with `expected`; why they cannot be compared (type, shape).
    pub fn of(got: &Array, expected: &Array) -> Result<Tally, String> {
        if got.dtype() != expected.dtype() || got.shape() != expected.shape() {
            return Err(format!(
                "Rust gave {} {:?}, Python {} {:?}",
                got.dtype(),
                got.shape(),
                expected.dtype(),
                expected.shape()
            ));
        }
        let diffs: Vec<f64> = match (got, expected) {
            (Array::U8 { data: a, .. }, Array::U8 { data: b, .. }) => a
                .iter()
                .zip(b)
                .map(|(x, y)| f64::from(x.abs_diff(*y)))
                .collect(),
            (Array::F32 { data: a, .. }, Array::F32 { data: b, .. }) => a
                .iter()
                .zip(b)
                .map(|(x, y)| match (x.is_nan(), y.is_nan()) {
                    (true, true) => 0.0,
                    (false, false) => f64::from((x - y).abs()),
                    _ => f64::INFINITY,
                })
                .collect(),
            _ => unreachable!("the types were checked"),
        };
        Ok(Tally {
            values: diffs.len() as u64,
            differing: diffs.iter().filter(|d| **d != 0.0).count() as u64,
            max: diffs.iter().copied().fold(0.0, f64::max),
            sum: diffs.iter().sum(),
        })
    }
}

/// Changes the first value of `a` (the testing aid `--inject-difference`).
pub fn perturb(a: &mut Array) {
    match a {
        Array::U8 { data, .. } => {
            if let Some(v) = data.first_mut() {
                *v = v.wrapping_add(1);
            }
        }
        Array::F32 { data, .. } => {
            if let Some(v) = data.first_mut() {
                *v += 0.5;
            }
        }
    }
}

/// One chain over every image.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub name: String,
    /// Whether the chain must be equal bit for bit.
    pub exact: bool,
    /// Images compared.
    pub images: usize,
    /// Images with at least one differing value.
    pub differing_images: usize,
    pub values: u64,
    pub differing_values: u64,
    pub max: f64,
    pub sum: f64,
    /// Images that could not be compared (an error on one side, another shape).
    pub errors: usize,
    /// What differed or failed, one line each.
    pub notes: Vec<String>,
}

impl Row {
    pub fn new(name: &str, exact: bool) -> Row {
        Row {
            name: name.to_owned(),
            exact,
            images: 0,
            differing_images: 0,
            values: 0,
            differing_values: 0,
            max: 0.0,
            sum: 0.0,
            errors: 0,
            notes: Vec::new(),
        }
    }

    /// Counts one image's comparison.
    pub fn add(&mut self, tally: &Tally, image: &Path) {
        self.images += 1;
        self.values += tally.values;
        self.differing_values += tally.differing;
        self.max = self.max.max(tally.max);
        self.sum += tally.sum;
        if tally.differing > 0 {
            self.differing_images += 1;
            self.notes.push(format!(
                "{}: {} of {} values differ, at most by {}",
                image.display(),
                tally.differing,
                tally.values,
                tally.max
            ));
        }
    }

    /// Counts an image that could not be compared.
    pub fn error(&mut self, message: String) {
        self.errors += 1;
        self.notes.push(message);
    }

    /// Keeps a remark that is no failure (an image Rust does not decode).
    pub fn note(&mut self, message: String) {
        self.notes.push(message);
    }

    /// The mean absolute difference over every value compared.
    pub fn mean(&self) -> f64 {
        if self.values == 0 {
            0.0
        } else {
            self.sum / self.values as f64
        }
    }

    /// Whether the row fails the run: an exact chain that differs or could not be compared.
    pub fn failed(&self) -> bool {
        self.exact && (self.differing_images > 0 || self.errors > 0)
    }

    /// The verdict shown in the table.
    pub fn verdict(&self) -> &'static str {
        match (
            self.images + self.errors,
            self.failed(),
            self.differing_images > 0,
        ) {
            (0, _, _) => "no images",
            (_, true, _) => "DIFFERS",
            (_, false, true) => "close (not exact)",
            _ if self.errors > 0 => "errors (not exact)",
            _ => "equal",
        }
    }
}

fn number(v: f64) -> String {
    if v == 0.0 {
        "0".to_owned()
    } else if v >= 0.01 || v.is_infinite() {
        format!("{v:.3}")
    } else {
        format!("{v:.2e}")
    }
}

/// The table: one line per chain.
pub fn table(rows: &[Row]) -> String {
    let header = [
        "chain",
        "exact",
        "images",
        "differing",
        "max diff",
        "mean diff",
        "result",
    ];
    crate::table::render(header, rows, &[0, 6], |r| {
        [
            r.name.clone(),
            if r.exact { "yes" } else { "no" }.to_owned(),
            r.images.to_string(),
            r.differing_images.to_string(),
            number(r.max),
            number(r.mean()),
            r.verdict().to_owned(),
        ]
    })
}

/// The JSON: the versions, the number of images, and one object per chain.
pub fn json(rows: &[Row], images: usize, versions: &str) -> String {
    let list: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            json!({
                "chain": r.name,
                "exact": r.exact,
                "images": r.images,
                "differing_images": r.differing_images,
                "values": r.values,
                "differing_values": r.differing_values,
                "max_diff": if r.max.is_finite() { json!(r.max) } else { json!("inf") },
                "mean_diff": r.mean(),
                "errors": r.errors,
                "failed": r.failed(),
                "notes": r.notes,
            })
        })
        .collect();
    json!({"images": images, "versions": versions, "chains": list}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u8s(v: &[u8]) -> Array {
        Array::U8 {
            shape: vec![v.len()],
            data: v.to_vec(),
        }
    }

    #[test]
    fn tallies() {
        let t = Tally::of(&u8s(&[1, 2, 3, 4]), &u8s(&[1, 5, 3, 0])).unwrap();
        assert_eq!(
            t,
            Tally {
                values: 4,
                differing: 2,
                max: 4.0,
                sum: 7.0
            }
        );
        let f = |v: &[f32]| Array::F32 {
            shape: vec![v.len()],
            data: v.to_vec(),
        };
        let t = Tally::of(&f(&[0.5, f32::NAN, 1.0]), &f(&[0.25, f32::NAN, f32::NAN])).unwrap();
        assert_eq!((t.differing, t.max), (2, f64::INFINITY));
        assert_eq!(
            Tally::of(&u8s(&[1]), &f(&[1.0])).unwrap_err(),
            "Rust gave uint8 [1], Python float32 [1]"
        );
        assert!(Tally::of(&u8s(&[1]), &u8s(&[1, 2])).is_err());
    }

    #[test]
    fn rows_fail_only_when_exact() {
        let mut exact = Row::new("a", true);
        let mut loose = Row::new("b", false);
        let t = Tally::of(&u8s(&[1, 2]), &u8s(&[1, 4])).unwrap();
        for row in [&mut exact, &mut loose] {
            row.add(&t, Path::new("x.png"));
        }
        assert!(exact.failed() && !loose.failed());
        assert_eq!(
            (exact.verdict(), loose.verdict()),
            ("DIFFERS", "close (not exact)")
        );
        assert_eq!(exact.mean(), 1.0);
        assert_eq!(exact.notes, ["x.png: 1 of 2 values differ, at most by 2"]);
        let mut errored = Row::new("c", true);
        errored.error("boom".into());
        assert!(errored.failed());
        let mut noted = Row::new("d", true);
        noted.note("Rust cannot decode it".into());
        assert!(!noted.failed());
        assert_eq!(noted.verdict(), "no images");
    }

    #[test]
    fn perturbing_changes_one_value() {
        let mut a = u8s(&[255, 1]);
        perturb(&mut a);
        assert_eq!(a, u8s(&[0, 1]));
        let mut e = u8s(&[]);
        perturb(&mut e);
        assert!(e.is_empty());
    }

    #[test]
    fn table_and_json() {
        let mut r = Row::new("resize", true);
        r.add(&Tally::of(&u8s(&[1]), &u8s(&[1])).unwrap(), Path::new("a"));
        let t = table(&[r.clone()]);
        assert_eq!(t.lines().count(), 2);
        assert!(t.lines().nth(1).unwrap().ends_with("equal"), "{t}");
        let v: serde_json::Value = serde_json::from_str(&json(&[r], 1, "numpy 2")).unwrap();
        assert_eq!(v["images"], 1);
        assert_eq!(v["versions"], "numpy 2");
        assert_eq!(v["chains"][0]["chain"], "resize");
        assert_eq!(v["chains"][0]["failed"], false);
        assert_eq!(v["chains"][0]["max_diff"], 0.0);
    }
}
