//! Release chores: the library crates packaged and used from their `.crate` files (`package`), the
//! manylinux wheels and the sdist built, checked and installed where no Rust toolchain is
//! (`wheels`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};

use crate::{cargo, root, run};

/// The crates published to crates.io, dependencies first.
const LIBRARY_CRATES: [&str; 3] = ["dlrs-core", "dlrs-transforms", "dlrs-io"];

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// `cargo xtask package`: `cargo publish --dry-run` of the three library crates together (cargo
/// resolves their dependencies on each other from the packages it has just made), then a crate
/// outside the workspace built from those `.crate` files alone, which runs an epoch.
pub fn package() -> Result<()> {
    let check = target_dir().join("publish-check");
    forget_earlier_packages(&check)?;
    let mut args = vec!["publish", "--dry-run", "--allow-dirty", "--quiet"];
    for krate in LIBRARY_CRATES {
        args.extend(["-p", krate]);
    }
    run(Command::new(env!("CARGO"))
        .args(&args)
        .env("CARGO_TARGET_DIR", &check))?;
    // The dry run keeps its packages in a temporary place; these, unverified (the dry run just
    // built them), land in target/package.
    let mut args = vec!["package", "--no-verify", "--allow-dirty", "--quiet"];
    for krate in LIBRARY_CRATES {
        args.extend(["-p", krate]);
    }
    cargo(&args)?;
    let packages = target_dir().join("package");
    let smoke = target_dir().join("package-smoke");
    if smoke.exists() {
        std::fs::remove_dir_all(&smoke)?;
    }
    let unpacked = smoke.join("crates");
    std::fs::create_dir_all(&unpacked)?;
    let mut patches = String::new();
    for krate in LIBRARY_CRATES {
        let file = packages.join(format!("{krate}-{}.crate", version()));
        ensure!(file.exists(), "{} was not made", file.display());
        run(Command::new("tar")
            .arg("-xzf")
            .arg(&file)
            .arg("-C")
            .arg(&unpacked))?;
        writeln!(
            patches,
            "{krate} = {{ path = \"crates/{krate}-{}\" }}",
            version()
        )?;
    }
    let v = version();
    std::fs::write(
        smoke.join("Cargo.toml"),
        format!(
            "[package]\nname = \"dlrs-package-smoke\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\
             publish = false\n\n[workspace]\n\n[dependencies]\n\
             dlrs-core = \"{v}\"\n\
             dlrs-transforms = \"{v}\"\n\
             dlrs-io = {{ version = \"{v}\", default-features = false, features = [\"file\", \"transforms\"] }}\n\n\
             # The packaged crates, as crates.io would serve them.\n[patch.crates-io]\n{patches}"
        ),
    )?;
    std::fs::create_dir_all(smoke.join("src/bin"))?;
    std::fs::write(smoke.join("src/main.rs"), SMOKE_MAIN)?;
    std::fs::write(smoke.join("src/bin/names.rs"), SMOKE_NAMES)?;
    // The workspace's lock file: the same versions of the dependencies, already built.
    std::fs::copy(root().join("Cargo.lock"), smoke.join("Cargo.lock"))?;
    let target = target_dir().join("package-smoke-target");
    run(Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--bins"])
        .current_dir(&smoke)
        .env("CARGO_TARGET_DIR", &target))?;
    run(Command::new(env!("CARGO"))
        .args(["run", "--quiet", "--bin", "dlrs-package-smoke"])
        .current_dir(&smoke)
        .env("CARGO_TARGET_DIR", &target))
}

/// Removes what an earlier dry run left of our packages, so that this one builds the packages it
/// makes. The dry run serves its packages from a registry of its own under the target dir, and
/// cargo treats them as registry crates: it unpacks each into
/// `$CARGO_HOME/registry/src/-<hash of that registry's path>/` only when that directory is missing,
/// and it takes a registry crate built before at the same version as unchanged. A second run from
/// the same path (CI clones to the same place every time) would build the first run's code.
fn forget_earlier_packages(check_target: &Path) -> Result<()> {
    let cargo_home = std::env::var_os("CARGO_HOME").map_or_else(
        || Path::new(&std::env::var_os("HOME").unwrap_or_default()).join(".cargo"),
        PathBuf::from,
    );
    let sources = cargo_home.join("registry/src");
    let registries = match std::fs::read_dir(&sources) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("could not list {}", sources.display())),
    };
    for registry in registries {
        let registry = registry?.path();
        // crates.io's directory is named after its host; a local registry's name is empty.
        let local = registry
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('-'));
        if !local {
            continue;
        }
        for krate in LIBRARY_CRATES {
            let unpacked = registry.join(format!("{krate}-{}", version()));
            if unpacked.exists() {
                std::fs::remove_dir_all(&unpacked)
                    .with_context(|| format!("could not remove {}", unpacked.display()))?;
            }
        }
    }
    // Only the dry run builds in this target dir, so every build of our crates in it is one of
    // the packages; the dependencies stay built.
    for profile in ["debug", "release"] {
        for (dir, prefix) in [
            (".fingerprint", "dlrs-"),
            ("deps", "libdlrs_"),
            ("deps", "dlrs_"),
        ] {
            let dir = check_target.join(profile).join(dir);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry?.path();
                let ours = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(prefix));
                if !ours {
                    continue;
                }
                if path.is_dir() {
                    std::fs::remove_dir_all(&path)?;
                } else {
                    std::fs::remove_file(&path)?;
                }
            }
        }
    }
    Ok(())
}

/// The program of the smoke package: dlrs-core's own example, two shuffled epochs of squares,
/// each batch checked as it loads.
const SMOKE_MAIN: &str = include_str!("../../crates/core/examples/squares.rs");

/// A second program of the smoke package, naming the other two crates so that they are built
/// from their packages too.
const SMOKE_NAMES: &str = r#"//! The other packaged crates, built.
fn main() {
    let _ = (dlrs_io::MAX_THREADS, std::any::type_name::<dlrs_transforms::Decode>());
}
"#;

/// One wheel to build: its name in the report, the interpreter maturin builds for, whether it is
/// the abi3 wheel, and the interpreters it is installed into.
struct Wheel {
    name: &'static str,
    build_python: PathBuf,
    abi3: bool,
    test_pythons: Vec<PathBuf>,
}

/// A CPython of this machine: pyenv's for the GIL builds, scripts/python-ft.sh's under
/// /opt/dlrs for the free-threaded ones (and for a GIL 3.14 if one was built there).
fn find_python(version: &str) -> Option<PathBuf> {
    let opt = PathBuf::from(format!("/opt/dlrs/python{version}/bin/python{version}"));
    if opt.exists() {
        return Some(opt);
    }
    let home = std::env::var_os("HOME")?;
    let versions = Path::new(&home).join(".pyenv/versions");
    let mut found: Vec<PathBuf> = std::fs::read_dir(versions)
        .ok()?
        .filter_map(|e| {
            let dir = e.ok()?.path();
            let name = dir.file_name()?.to_str()?.to_owned();
            let rest = name.strip_prefix(version)?.strip_prefix('.')?;
            rest.chars()
                .all(|c| c.is_ascii_digit())
                .then(|| dir.join(format!("bin/python{version}")))
        })
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found.pop()
}

fn cpython(version: &str) -> Result<PathBuf> {
    find_python(version).with_context(|| {
        format!("no CPython {version} (pyenv's, or scripts/python-ft.sh's under /opt/dlrs)")
    })
}

/// The tools of the release: maturin, zig (the `ziglang` package: the manylinux glibc without a
/// container) and auditwheel, in a venv of their own.
fn tools() -> Result<PathBuf> {
    let dir = root().join(".venv-release");
    let python = dir.join("bin/python");
    if !python.exists() {
        run(Command::new(cpython("3.11")?)
            .args(["-m", "venv"])
            .arg(&dir))?;
    }
    run(Command::new(&python).args([
        "-m",
        "pip",
        "install",
        "-q",
        "maturin==1.16.0",
        "ziglang==0.17.1",
        "auditwheel==6.8.2",
    ]))?;
    Ok(dir.join("bin"))
}

/// The manylinux policy the wheels are built for: glibc 2.17, the oldest Rust's std supports.
const MANYLINUX: &str = "manylinux_2_17";

/// `PATH` without any directory that holds cargo or rustc, nor the tools venv: the wheels must
/// install and run where no Rust toolchain is.
fn path_without_rust() -> Result<String> {
    let path = std::env::var("PATH").unwrap_or_default();
    let kept: Vec<&str> = path
        .split(':')
        .filter(|d| {
            !d.is_empty()
                && !Path::new(d).join("cargo").exists()
                && !Path::new(d).join("rustc").exists()
                && !d.contains(".venv")
        })
        .collect();
    Ok(kept.join(":"))
}

/// One line of the report: a wheel or the sdist and what was measured.
struct Row {
    file: String,
    bytes: u64,
    build_s: f64,
    policy: String,
    installs: Vec<(String, f64)>,
}

fn maturin(bin: &Path) -> Command {
    let mut cmd = Command::new(bin.join("maturin"));
    // `--zig` runs `python -m ziglang` with the first python on PATH: the tools venv's.
    let path = std::env::var("PATH").unwrap_or_default();
    cmd.env("PATH", format!("{}:{path}", bin.display()))
        .env_remove("VIRTUAL_ENV")
        .env_remove("CONDA_PREFIX");
    cmd
}

/// The single new file of `dir` whose name ends with `suffix`.
fn newest(dir: &Path, suffix: &str, before: &[PathBuf]) -> Result<PathBuf> {
    let mut new: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.to_str().is_some_and(|s| s.ends_with(suffix)) && !before.contains(p))
        .collect();
    ensure!(
        new.len() == 1,
        "expected one new *{suffix} in {}, found {new:?}",
        dir.display()
    );
    Ok(new.remove(0))
}

fn listing(dir: &Path) -> Result<Vec<PathBuf>> {
    Ok(std::fs::read_dir(dir)?
        .filter_map(|e| Some(e.ok()?.path()))
        .collect())
}

/// `auditwheel show`: the policy the wheel is consistent with, which must be at most
/// manylinux_2_28, and no library outside the policy's whitelist (auditwheel names such a
/// library as one the wheel would need to vendor).
fn audit(bin: &Path, wheel: &Path) -> Result<String> {
    let out = Command::new(bin.join("auditwheel"))
        .arg("show")
        .arg(wheel)
        .output()
        .context("could not start auditwheel")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{text}");
    ensure!(
        out.status.success(),
        "auditwheel show failed on {}",
        wheel.display()
    );
    let squashed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let tag = squashed
        .split("consistent with the following platform tag: \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .context("auditwheel named no platform tag")?
        .to_owned();
    let glibc_minor: u32 = tag
        .strip_prefix("manylinux_2_")
        .and_then(|r| r.strip_suffix("_x86_64"))
        .and_then(|m| m.parse().ok())
        .with_context(|| format!("{tag} is not a manylinux_2_X_x86_64 tag"))?;
    ensure!(glibc_minor <= 28, "{tag} is newer than manylinux_2_28");
    ensure!(
        !squashed.contains("system-provided shared libraries that are not")
            && !squashed.contains("need to be vendored"),
        "{} needs a library outside the policy",
        wheel.display()
    );
    Ok(tag)
}

/// The Python run in each fresh venv: the package imports from the venv (not the checkout), a
/// small epoch loads, and a free-threaded interpreter still has the GIL off afterwards.
const IMPORT_CHECK: &str = r#"
import sys, sysconfig
import dataloader_rs
from dataloader_rs import PyDataloader
assert "site-packages" in dataloader_rs.__file__, dataloader_rs.__file__
batches = list(PyDataloader(list(range(100)), batch_size=10, num_workers=2))
assert [x for b in batches for x in b] == list(range(100))
free = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
if free:
    assert not sys._is_gil_enabled(), "the extension turned the GIL on"
print(sys.version.split()[0], "free-threaded" if free else "GIL", dataloader_rs.__file__)
"#;

/// A fresh venv on `python` (under `work`), the wheel installed into it without dependencies
/// (timed), numpy beside it for the quick start, then the checks with no Rust on PATH. Returns
/// the seconds `pip install` took.
fn try_wheel(python: &Path, wheel: &Path, work: &Path) -> Result<f64> {
    let name = python
        .file_name()
        .and_then(|n| n.to_str())
        .context("an interpreter's name")?;
    let venv = work.join(format!("venv-{name}"));
    if venv.exists() {
        std::fs::remove_dir_all(&venv)?;
    }
    let path = path_without_rust()?;
    let bare = |program: &Path| {
        let mut cmd = Command::new(program);
        cmd.env("PATH", format!("{}:{path}", venv.join("bin").display()))
            .env("VIRTUAL_ENV", &venv)
            .env_remove("PYTHONPATH")
            .env_remove("PYTHON_GIL")
            .env_remove("CARGO")
            .env_remove("RUSTUP_TOOLCHAIN")
            .current_dir(work);
        cmd
    };
    run(bare(python).args(["-m", "venv"]).arg(&venv))?;
    let py = venv.join("bin/python");
    let started = Instant::now();
    run(bare(&py)
        .args(["-m", "pip", "install", "-q", "--no-deps", "--no-index"])
        .arg(wheel))?;
    let install_s = started.elapsed().as_secs_f64();
    // scripts/python-ft.sh's pin, wheels only: NumPy 2.5 has no cp313t wheel, and building it
    // from source takes many minutes.
    run(bare(&py).args([
        "-m",
        "pip",
        "install",
        "-q",
        "--only-binary",
        "numpy",
        "numpy==2.4.*",
    ]))?;
    run(bare(&py).args(["-c", IMPORT_CHECK]))?;
    run(bare(&py).arg(root().join("examples/quickstart.py")))?;
    run(bare(&venv.join("bin/dlrs")).arg("--version"))?;
    run(bare(&venv.join("bin/dlrs"))
        .args(["bench", "overhead", "--items", "200000", "--epochs", "1"]))?;
    Ok(install_s)
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// `cargo xtask wheels [--quick] [--profile P]`: the abi3 wheel (CPython 3.11 and later, GIL
/// builds), the 3.13t and 3.14t wheels and the sdist, each audited and tried in fresh venvs;
/// the sdist is built again into a wheel by pip and tried the same way. `--quick`: the abi3 wheel
/// tried on 3.11 and the 3.14t wheel, no sdist (CI). The profile defaults to pyproject.toml's
/// (`wheel`: fat LTO); `--profile release` builds faster and larger.
pub fn wheels(args: &[String]) -> Result<()> {
    let quick = args.iter().any(|a| a == "--quick");
    let profile = match args.iter().position(|a| a == "--profile") {
        Some(i) => args.get(i + 1).context("--profile needs a name")?.clone(),
        None => "wheel".to_owned(),
    };
    let bin = tools()?;
    let out = target_dir().join("wheels").join(&profile);
    if out.exists() {
        std::fs::remove_dir_all(&out)?;
    }
    let work = out.join("try");
    std::fs::create_dir_all(&work)?;

    let mut plan = vec![Wheel {
        name: "abi3 (CPython 3.11+)",
        build_python: cpython("3.11")?,
        abi3: true,
        test_pythons: if quick {
            vec![cpython("3.11")?]
        } else {
            // A GIL 3.14 only where scripts/python-ft.sh built one: pyenv has none here.
            let mut all = vec![cpython("3.11")?, cpython("3.12")?, cpython("3.13")?];
            all.extend(find_python("3.14"));
            all
        },
    }];
    let free_threaded: &[&str] = if quick {
        &["3.14t"]
    } else {
        &["3.13t", "3.14t"]
    };
    for v in free_threaded {
        plan.push(Wheel {
            name: if *v == "3.13t" { "3.13t" } else { "3.14t" },
            build_python: cpython(v)?,
            abi3: false,
            test_pythons: vec![cpython(v)?],
        });
    }

    let mut rows = Vec::new();
    for wheel in &plan {
        let before = listing(&out)?;
        let mut cmd = maturin(&bin);
        cmd.args(["build", "--quiet", "--zig", "--compatibility", MANYLINUX])
            .args(["--profile", &profile])
            .arg("--interpreter")
            .arg(&wheel.build_python)
            .arg("--out")
            .arg(&out);
        if wheel.abi3 {
            // PyO3's limited API from 3.11 on: one wheel for every GIL build.
            cmd.args(["--features", "pyo3/abi3-py311"]);
        }
        let started = Instant::now();
        run(&mut cmd)?;
        let build_s = started.elapsed().as_secs_f64();
        let file = newest(&out, ".whl", &before)?;
        eprintln!("xtask: built {} ({})", file.display(), wheel.name);
        let bytes = std::fs::metadata(&file)?.len();
        ensure!(
            bytes <= 10_000_000 || profile != "wheel",
            "{} is over 10 MB",
            file.display()
        );
        let policy = audit(&bin, &file)?;
        let mut installs = Vec::new();
        for py in &wheel.test_pythons {
            installs.push((py.display().to_string(), try_wheel(py, &file, &work)?));
        }
        rows.push(Row {
            file: file
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
            bytes,
            build_s,
            policy,
            installs,
        });
    }

    if !quick {
        let before = listing(&out)?;
        let started = Instant::now();
        run(maturin(&bin).args(["sdist", "--out"]).arg(&out))?;
        let sdist_s = started.elapsed().as_secs_f64();
        let sdist = newest(&out, ".tar.gz", &before)?;
        // pip builds the sdist as a user would (its own isolated environment, maturin from PyPI),
        // with the Rust toolchain on PATH; the wheel it makes is tried where there is none.
        let built = out.join("from-sdist");
        std::fs::create_dir_all(&built)?;
        let started = Instant::now();
        run(Command::new(bin.join("python"))
            .args(["-m", "pip", "wheel", "-q", "--no-deps", "-w"])
            .arg(&built)
            .arg(&sdist)
            .env("CARGO_TARGET_DIR", target_dir().join("sdist-build")))?;
        let build_s = started.elapsed().as_secs_f64();
        let file = newest(&built, ".whl", &[])?;
        let install_s = try_wheel(&cpython("3.11")?, &file, &work)?;
        rows.push(Row {
            file: sdist
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
            bytes: std::fs::metadata(&sdist)?.len(),
            build_s: sdist_s,
            policy: "sdist".to_owned(),
            installs: vec![],
        });
        rows.push(Row {
            file: format!(
                "{} (pip wheel of the sdist)",
                file.file_name().unwrap_or_default().to_string_lossy()
            ),
            bytes: std::fs::metadata(&file)?.len(),
            build_s,
            policy: "— (not audited: pip's own build, for the host)".to_owned(),
            installs: vec![("3.11".to_owned(), install_s)],
        });
    }

    let mut report = String::from(
        "| file | size | build | auditwheel | pip install (per interpreter) |\n|---|---:|---:|---|---|\n",
    );
    for r in &rows {
        let installs = r
            .installs
            .iter()
            .map(|(py, s)| format!("{py}: {s:.1} s"))
            .collect::<Vec<_>>()
            .join("; ");
        writeln!(
            report,
            "| `{}` | {:.2} MB | {:.0} s | {} | {} |",
            r.file,
            mb(r.bytes),
            r.build_s,
            r.policy,
            installs
        )?;
    }
    std::fs::write(out.join("report.md"), &report)?;
    println!("{report}");
    if rows.is_empty() {
        bail!("no wheel was built");
    }
    Ok(())
}
