//! `dlrs parity`: transform chains in Rust against Pillow/NumPy in a Python interpreter.
//!
//! 1. Images: a generated set (PNG: L, LA, RGB, RGBA, odd sizes) and the user's folder.
//! 2. Rust decodes each one and writes the pixels as `.npy`.
//! 3. The embedded script (`parity.py`) loads each file with Pillow and runs every chain on the
//!    pixels Rust decoded, writing `.npy` results.
//! 4. Rust runs the same chains and compares: the largest and the mean absolute difference per
//!    chain, and a failure where a chain that must be exact differs (or could not be compared).
//!
//! - [`npy`]: reading and writing `.npy` arrays.
//! - [`chains`]: the chains and their Rust side.
//! - [`compare`]: differences, aggregated per chain, the table and the JSON.

pub mod chains;
pub mod compare;
pub mod npy;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use dlrs_transforms::{Decode, Format, Image, sniff_format};
use serde_json::json;

use crate::args::ParityArgs;
use crate::progress::Progress;
use crate::{synth, usage};
use chains::{CHAINS, Chain};
use compare::{Row, Tally};
use npy::Array;

/// The Python side, embedded in the binary.
pub const SCRIPT: &str = include_str!("parity.py");

/// The environment variable the `dlrs` console script sets to its interpreter.
pub const PYTHON_ENV: &str = "DLRS_PYTHON";

/// The image extensions read from `--images`.
const EXTENSIONS: [&str; 7] = ["png", "jpg", "jpeg", "webp", "tif", "tiff", "bmp"];

/// The generated images: name, height, width, channels.
const GENERATED: [(&str, usize, usize, usize); 6] = [
    ("rgb-224", 224, 224, 3),
    ("rgb-odd", 37, 53, 3),
    ("rgba", 48, 64, 4),
    ("gray", 31, 29, 1),
    ("gray-alpha", 40, 33, 2),
    ("rgb-wide", 17, 90, 3),
];

/// Runs `dlrs parity`; the exit status: 1 when a chain that must be exact differs.
pub fn run(args: &ParityArgs) -> Result<u8> {
    let Outcome {
        rows,
        images,
        versions,
    } = parity(args)?;
    if args.json {
        println!("{}", compare::json(&rows, images, &versions));
    } else {
        println!("{images} images; Rust against {versions}");
        print!("{}", compare::table(&rows));
    }
    let failed: Vec<&str> = rows
        .iter()
        .filter(|r| r.failed())
        .map(|r| r.name.as_str())
        .collect();
    if failed.is_empty() {
        let verdict = format!("parity: {} chains, every exact one equal", rows.len());
        if args.json {
            eprintln!("{verdict}");
        } else {
            println!("{verdict}");
        }
        Ok(0)
    } else {
        eprintln!(
            "parity: {} must be exact and differ: {}",
            failed.len(),
            failed.join(", ")
        );
        for row in rows.iter().filter(|r| r.failed()) {
            for note in row.notes.iter().take(5) {
                eprintln!("  {}: {note}", row.name);
            }
        }
        Ok(crate::EXIT_FAILED)
    }
}

/// The interpreter to run: `--python`, else `$DLRS_PYTHON`, else `python3`.
pub fn python(args: &ParityArgs) -> PathBuf {
    args.python
        .clone()
        .or_else(|| {
            std::env::var_os(PYTHON_ENV)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// An image to check: where it is and its Rust decoding.
struct Source {
    id: String,
    path: PathBuf,
    /// How messages name it: `generated/rgb-224.png`, or the user's path.
    label: PathBuf,
    format: Option<Format>,
    decoded: Image,
}

/// What a parity run found.
#[derive(Debug)]
pub struct Outcome {
    /// One row per chain, decoding first.
    pub rows: Vec<Row>,
    /// The number of images Rust decoded and compared.
    pub images: usize,
    /// The Python side's versions: `python 3.11.7, numpy 2.4.6, pillow 13.0.0`.
    pub versions: String,
}

/// Runs the comparison.
pub fn parity(args: &ParityArgs) -> Result<Outcome> {
    if let Some(chain) = &args.inject_difference
        && chain != "decode"
        && !CHAINS.iter().any(|c| c.name == chain)
    {
        return Err(usage(format!(
            "--inject-difference: no chain is named {chain:?}"
        )));
    }
    let work = WorkDir::new(args.work_dir.as_deref())?;
    let (images_dir, inputs, outputs) = (
        work.path.join("images"),
        work.path.join("in"),
        work.path.join("out"),
    );
    for dir in [&images_dir, &inputs, &outputs] {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }

    let mut files = generate(&images_dir)?;
    let generated = files.len();
    if let Some(dir) = &args.images {
        files.extend(user_images(dir)?);
    }
    let mut rows: Vec<Row> = std::iter::once(Row::new("decode png/bmp/tiff", true))
        .chain(std::iter::once(Row::new("decode jpeg/webp", false)))
        .chain(CHAINS.iter().map(|c| Row::new(c.name, c.exact)))
        .collect();

    let decode = Decode::default();
    let mut sources = Vec::new();
    for (n, path) in files.into_iter().enumerate() {
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let format = sniff_format(&bytes);
        let row = decode_row(&mut rows, format);
        match decode.decode(&bytes) {
            Ok(decoded) => {
                let id = format!("{n:03}");
                chains::to_array(&decoded).write(&inputs.join(format!("{id}.npy")))?;
                let label = match path.file_name() {
                    Some(name) if n < generated => Path::new("generated").join(name),
                    _ => path.clone(),
                };
                sources.push(Source {
                    id,
                    path,
                    label,
                    format,
                    decoded,
                });
            }
            Err(e) => row.note(format!("{}: Rust cannot decode it: {e}", path.display())),
        }
    }

    let manifest = json!({
        "images": sources.iter().map(|s| json!({
            "id": s.id,
            "path": s.path,
            "input": inputs.join(format!("{}.npy", s.id)),
        })).collect::<Vec<_>>(),
        "chains": CHAINS.iter().map(|c| json!({"name": c.name, "ops": c.ops})).collect::<Vec<_>>(),
    });
    let manifest_path = work.path.join("manifest.json");
    std::fs::write(&manifest_path, manifest.to_string()).context("cannot write the manifest")?;
    let script = work.path.join("parity.py");
    std::fs::write(&script, SCRIPT).context("cannot write the Python script")?;
    run_python(&python(args), &script, &manifest_path, &outputs)?;
    let results: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(outputs.join("results.json"))
            .context("the Python side wrote no results")?,
    )?;
    let errors = &results["errors"];

    let progress = Progress::new(
        (sources.len() * (CHAINS.len() + 1)) as u64,
        "parity",
        "checks",
    );
    let inject = args.inject_difference.as_deref();
    for source in &sources {
        let key = |chain: &str| format!("{}/{chain}", source.id);
        // Decoding: the Rust pixels against Pillow's.
        let mut rust = chains::to_array(&source.decoded);
        if inject == Some("decode") {
            compare::perturb(&mut rust);
        }
        let row = decode_row(&mut rows, source.format);
        check(
            row,
            &source.label,
            &rust,
            &outputs.join(format!("{}.decode.npy", source.id)),
            errors.get(key("decode")),
        );
        progress.inc(1);
        for (chain, row) in CHAINS.iter().zip(rows.iter_mut().skip(2)) {
            let rust = match chains::run(chain.ops, source.decoded.clone()) {
                Ok(out) => {
                    let mut a = chains::to_array(&out);
                    if inject == Some(chain.name) {
                        compare::perturb(&mut a);
                    }
                    a
                }
                Err(e) => {
                    row.error(format!("{}: Rust: {e}", source.label.display()));
                    continue;
                }
            };
            let expected = outputs.join(format!("{}.{}.npy", source.id, chain.name));
            check(
                row,
                &source.label,
                &rust,
                &expected,
                errors.get(key(chain.name)),
            );
            progress.inc(1);
        }
    }
    progress.finish();
    let versions = ["python", "numpy", "pillow"]
        .iter()
        .map(|k| format!("{k} {}", results["versions"][k].as_str().unwrap_or("?")))
        .collect::<Vec<_>>()
        .join(", ");
    Ok(Outcome {
        rows,
        images: sources.len(),
        versions,
    })
}

/// The row that counts the decoding of `format`.
fn decode_row(rows: &mut [Row], format: Option<Format>) -> &mut Row {
    match format {
        Some(Format::Jpeg | Format::WebP) => &mut rows[1],
        _ => &mut rows[0],
    }
}

/// Compares `rust` with the array at `expected` into `row` (or records the Python error).
fn check(
    row: &mut Row,
    image: &Path,
    rust: &Array,
    expected: &Path,
    error: Option<&serde_json::Value>,
) {
    if let Some(error) = error {
        row.error(format!(
            "{}: Python: {}",
            image.display(),
            error.as_str().unwrap_or("?")
        ));
        return;
    }
    match Array::read(expected) {
        Ok(expected) => match Tally::of(rust, &expected) {
            Ok(tally) => row.add(&tally, image),
            Err(why) => row.error(format!("{}: {why}", image.display())),
        },
        Err(e) => row.error(format!("{}: {e:#}", image.display())),
    }
}

/// Runs the script; its stderr is the message when it fails.
fn run_python(python: &Path, script: &Path, manifest: &Path, out: &Path) -> Result<()> {
    let output = Command::new(python)
        .arg(script)
        .arg(manifest)
        .arg(out)
        .output()
        .with_context(|| {
            format!(
                "cannot run the Python {} (give one with --python)",
                python.display()
            )
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        bail!(
            "the Python side failed ({}, {}): {last}\n(it needs numpy and Pillow)",
            python.display(),
            output.status
        );
    }
    Ok(())
}

/// Writes the generated images into `dir`; their paths.
fn generate(dir: &Path) -> Result<Vec<PathBuf>> {
    GENERATED
        .iter()
        .enumerate()
        .map(|(seed, &(name, h, w, c))| {
            let png = synth::png(h, w, c, &synth::pixels(h, w, c, seed as u64 + 1))?;
            let path = dir.join(format!("{name}.png"));
            std::fs::write(&path, png)
                .with_context(|| format!("cannot write {}", path.display()))?;
            Ok(path)
        })
        .collect()
}

/// The image files of `dir` (by extension), sorted.
fn user_images(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| usage(format!("--images {}: {e}", dir.display())))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let known = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()));
        if known && path.is_file() {
            files.push(path);
        }
    }
    if files.is_empty() {
        return Err(usage(format!(
            "--images {}: no {} file",
            dir.display(),
            EXTENSIONS.join("/")
        )));
    }
    files.sort();
    Ok(files)
}

/// The directory of the arrays: the given one (kept), or a temporary one (removed).
struct WorkDir {
    path: PathBuf,
    remove: bool,
}

impl WorkDir {
    fn new(given: Option<&Path>) -> Result<WorkDir> {
        let (path, remove) = match given {
            Some(p) => (p.to_path_buf(), false),
            None => {
                static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let p =
                    std::env::temp_dir().join(format!("dlrs-parity-{}-{n}", std::process::id()));
                let _ = std::fs::remove_dir_all(&p);
                (p, true)
            }
        };
        std::fs::create_dir_all(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        Ok(WorkDir { path, remove })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// A chain by name (for tests and the injection flag).
pub fn chain(name: &str) -> Option<&'static Chain> {
    CHAINS.iter().find(|c| c.name == name)
}

#[cfg(test)]
mod tests;
