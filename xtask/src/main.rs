//! Repeatable chores of the workspace: `cargo xtask <command>`.
//!
//! - `ci`: everything CI checks, in order: Rust lints, API docs and tests, the Rust examples,
//!   the model checks, a short run of every fuzz target, ruff
//!   and mypy, the Python package built into a venv, stubtest (the stubs against the built
//!   extension), pytest, the parity files under each of torch's CPU kernel sets and with our SIMD
//!   off; then the same pytest suite on free-threaded CPython 3.13t and 3.14t; then the release's
//!   short form: `package`, then `wheels --quick` (the abi3 wheel on 3.11, the 3.14t wheel).
//! - `model`: dlrs-core's model-checked tests (the epoch ring and the pool's lot under shuttle).
//! - `rust-examples`: the Rust programs of `examples/rust` (a package outside the workspace):
//!   clippy, their tests, every example run.
//! - `test`: cargo tests, then the Python package and pytest (no lints, no free-threaded runs).
//! - `py-test [pytest args]`: build the extension into `.venv` and run pytest.
//! - `python-ft [3.13t | 3.14t | 3.14] [pytest args]`: build that CPython if absent, then the suite
//!   on it (scripts/python-ft.sh); without a version, on each free-threaded one.
//! - `demo`: install the package from the checkout and run the quick start on generated data.
//! - `bench [--save] [names]`: the benchmarks (Python harnesses against torch, criterion); with
//!   `--save`, their JSON in `benches/results/` and the figures of BENCH.md drawn from it.
//! - `bench plot`: the figures (`docs/bench/*.png`) drawn again from `benches/results/`.
//! - `fuzz [seconds]`: every cargo-fuzz target (the decoders, the tar parser) for a bounded time
//!   from its seed corpus (`0`: replay the seeds only); `ci` explores for `CI_FUZZ_SECONDS` each.
//! - `package`: `cargo publish --dry-run` of the library crates, then a crate outside the
//!   workspace built from their `.crate` files runs an epoch.
//! - `wheels [--quick] [--profile P]`: manylinux wheels (abi3 for the GIL builds, 3.13t, 3.14t)
//!   and the sdist, audited and tried in fresh venvs without Rust; the figures in
//!   `target/wheels/<profile>/report.md`.

mod release;
mod tidy;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: {cmd:?}");
    if cmd.get_current_dir().is_none() {
        cmd.current_dir(root());
    }
    let status = cmd
        .status()
        .with_context(|| format!("could not start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// Runs `cmd` (in the workspace root unless told otherwise) and writes its stdout to `path`.
fn run_to_file(cmd: &mut Command, path: &Path) -> Result<()> {
    eprintln!("xtask: {cmd:?} > {}", path.display());
    if cmd.get_current_dir().is_none() {
        cmd.current_dir(root());
    }
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("could not start {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", out.status);
    }
    std::fs::write(path, out.stdout).with_context(|| format!("could not write {}", path.display()))
}

fn cargo(args: &[&str]) -> Result<()> {
    run(Command::new(env!("CARGO")).args(args))
}

/// The venv of the GIL build used by the tests, made once; returns its python.
fn venv() -> Result<PathBuf> {
    let dir = root().join(".venv");
    let python = dir.join("bin/python");
    if !python.exists() {
        let host = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
        run(Command::new(host).args(["-m", "venv"]).arg(&dir))?;
    }
    run(Command::new(&python).args(["-m", "pip", "install", "-q", "--upgrade", "pip"]))?;
    pip_install_requirements(&python, "tests/requirements.txt")?;
    // The local S3, GCS and Azure servers of the I/O tests (tests/servers).
    run(Command::new("bash")
        .arg("scripts/install-test-services.sh")
        .env("PYTHON", &python))?;
    Ok(python)
}

/// Builds the extension into the venv of `python`: a debug build for the tests (it reuses what
/// `cargo test` compiled), a release build for benchmarks and demos. The profile is always named:
/// without one, maturin would take pyproject.toml's (`wheel`, minutes of LTO).
fn develop(python: &Path, release: bool) -> Result<()> {
    let venv = python
        .parent()
        .and_then(Path::parent)
        .context("venv layout")?;
    run(Command::new(venv.join("bin/maturin"))
        .args(["develop", "--quiet"])
        .args(["--profile", if release { "release" } else { "dev" }])
        .env("VIRTUAL_ENV", venv)
        .env_remove("CONDA_PREFIX"))
}

/// The stubs (`_native.pyi`) and the package's annotations against the extension as built: every
/// signature, default and name must match; `python/stubtest-allowlist.txt` holds only what
/// stubtest cannot judge, each entry with its reason.
fn stubtest(python: &Path) -> Result<()> {
    run(Command::new(python).args([
        "-m",
        "mypy.stubtest",
        "dataloader_rs",
        "--allowlist",
        "python/stubtest-allowlist.txt",
    ]))
}

fn pytest(python: &Path, extra: &[String]) -> Result<()> {
    run(Command::new(python)
        .args(["-m", "pytest", "-q", "tests"])
        .args(extra))
}

/// The test files whose expected values come from torch's kernels or from our SIMD paths.
const PARITY_FILES: [&str; 2] = ["tests/test_augment_parity.py", "tests/test_image_parity.py"];

/// The parity files again under each set of CPU kernels torch can pick (its float results
/// differ by kernel set, and a machine picks one of them), then with our own SIMD paths off:
/// the promise must hold on any x86-64 CPU, not only on this one.
fn parity_everywhere(python: &Path) -> Result<()> {
    let parity = |var: &str, value: &str| {
        run(Command::new(python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .args(PARITY_FILES)
            .env(var, value))
    };
    for capability in ["default", "avx2", "avx512"] {
        parity("ATEN_CPU_CAPABILITY", capability)?;
    }
    parity("DLRS_SIMD", "off")
}

/// The Rust programs of `examples/rust`, a package outside the workspace that depends on the
/// library crates as a user's would: formatted, clippy-clean, its tests, and every example run
/// (each checks its own results). It shares the workspace's target directory.
fn rust_examples() -> Result<()> {
    let manifest = root().join("examples/rust/Cargo.toml");
    let manifest = manifest.to_str().context("a UTF-8 path")?;
    let target = root().join("target");
    let with_target = |args: &[&str]| -> Result<()> {
        // The manifest goes right after the subcommand: what follows a `--` is the tool's.
        let (command, rest) = args.split_first().context("a cargo subcommand")?;
        run(Command::new(env!("CARGO"))
            .arg(command)
            .args(["--manifest-path", manifest])
            .args(rest)
            .env("CARGO_TARGET_DIR", &target))
    };
    with_target(&["fmt", "--check"])?;
    with_target(&[
        "clippy",
        "--locked",
        "--all-targets",
        "--quiet",
        "--",
        "-D",
        "warnings",
    ])?;
    with_target(&["test", "--locked", "--quiet"])?;
    let examples = std::fs::read_dir(root().join("examples/rust/examples"))?;
    let mut names: Vec<String> = examples
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_suffix(".rs")
                .map(str::to_owned)
        })
        .collect();
    names.sort();
    for name in &names {
        with_target(&["run", "--locked", "--quiet", "--example", name])?;
    }
    Ok(())
}

fn py_test(extra: &[String]) -> Result<()> {
    let python = venv()?;
    develop(&python, false)?;
    pytest(&python, extra)
}

fn lint() -> Result<()> {
    cargo(&["fmt", "--all", "--", "--check"])?;
    let clippy = |what: &[&str]| {
        let mut args = vec!["clippy"];
        args.extend_from_slice(what);
        args.extend_from_slice(&["--all-targets", "--quiet", "--", "-D", "warnings"]);
        cargo(&args)
    };
    clippy(&["--workspace"])?;
    // dlrs-io with only its `file` feature (no HTTP or TLS stack) still builds, warning-free.
    clippy(&["-p", "dlrs-io", "--no-default-features", "-F", "file"])?;
    // The API docs build without a broken link or a missing doc (`missing_docs` is on).
    run(Command::new(env!("CARGO"))
        .args(["doc", "--workspace", "--no-deps", "--quiet"])
        .env("RUSTDOCFLAGS", "-D warnings"))
}

/// dlrs-core's `model::` tests, built with `--cfg dlrs_model` (its primitives become shuttle's:
/// see crates/core/src/sync.rs), warnings denied. The cfg changes every crate's flags, so the
/// build has a target dir of its own (`target/model`) and leaves the usual one untouched.
fn model() -> Result<()> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root().join("target"), PathBuf::from)
        .join("model");
    run(Command::new(env!("CARGO"))
        .args([
            "test",
            "-p",
            "dlrs-core",
            "--lib",
            "--quiet",
            "--",
            "model::",
        ])
        .env("RUSTFLAGS", "--cfg dlrs_model -D warnings")
        .env("CARGO_TARGET_DIR", target))
}

fn ruff(python: &Path) -> Result<()> {
    let venv = python.parent().context("venv layout")?;
    run(Command::new(venv.join("ruff")).args(["check", "python", "tests", "examples", "benches"]))?;
    run(Command::new(venv.join("ruff")).args([
        "format", "--check", "python", "tests", "examples", "benches",
    ]))?;
    // The package's own code, strictly typed (settings in pyproject.toml).
    run(&mut Command::new(venv.join("mypy")))
}

/// The free-threaded CPythons the suite runs on besides the GIL build: 3.14t is the spec's
/// target, and 3.13t stays while PyO3 0.28 supports it.
const FREE_THREADED: [&str; 2] = ["3.13t", "3.14t"];

/// The CPythons scripts/python-ft.sh builds: the venv it makes on each, and the file of each one's
/// scaling results in `benches/results/`.
const BUILT_PYTHONS: [(&str, &str, &str); 3] = [
    ("3.13t", ".venv-ft", "scaling-ft.json"),
    ("3.14t", ".venv-ft314", "scaling-ft314.json"),
    ("3.14", ".venv-314", "scaling-314.json"),
];

/// The pytest suite on CPython `version` (built by scripts/python-ft.sh if absent), with its
/// venv. The S3 and GCS emulators have no free-threaded wheels: they run from the GIL venv
/// `services`.
fn python_ft(services: &Path, version: &str, extra: &[String]) -> Result<()> {
    run(Command::new("bash")
        .arg("scripts/python-ft.sh")
        .arg("test")
        .args(extra)
        .env("DLRS_PYFT_VERSION", version)
        .env("DLRS_SERVICES_PYTHON", services))
}

/// `cargo xtask python-ft [VERSION] [pytest args]`: one built CPython, or each free-threaded one.
fn python_ft_command(rest: &[String]) -> Result<()> {
    let services = venv()?;
    match rest.split_first() {
        Some((v, extra)) if BUILT_PYTHONS.iter().any(|(b, ..)| b == v) => {
            python_ft(&services, v, extra)
        }
        _ => FREE_THREADED
            .iter()
            .try_for_each(|v| python_ft(&services, v, rest)),
    }
}

/// How long `cargo xtask ci` lets each fuzz target explore.
const CI_FUZZ_SECONDS: &str = "30";

/// Each fuzz target and the directories of `fuzz/seeds` it starts from.
const FUZZ_SEEDS: &[(&str, &[&str])] = &[
    ("decode_bmp", &["bmp"]),
    ("decode_jpeg", &["jpeg"]),
    ("decode_jpeg_reduced", &["jpeg_reduced"]),
    ("decode_jpeg_window", &["jpeg_window"]),
    ("decode_png", &["png"]),
    ("decode_tiff", &["tiff"]),
    ("decode_webp", &["webp"]),
    ("tar_fragment", &["tar_fragment"]),
    ("tar_header", &["tar", "tar_fragment"]),
    ("tar_index", &["tar"]),
    ("tar_stream", &["tar", "tar_gz"]),
];

/// Runs every cargo-fuzz target for a bounded time (default 60 s each) from its seeds, with
/// libFuzzer's limits: no input over 1 s, at most 2 GiB resident. cargo-fuzz is installed when
/// missing; it needs nightly features, which `RUSTC_BOOTSTRAP=1` lets a stable toolchain use.
/// What a run finds is kept in `fuzz/corpus/<target>` (not committed), crashes in
/// `fuzz/artifacts/<target>`.
fn fuzz(rest: &[String]) -> Result<()> {
    let seconds = rest.first().map_or("60", String::as_str);
    seconds
        .parse::<u32>()
        .context("usage: cargo xtask fuzz [seconds per target]")?;
    let dir = root().join("fuzz");
    let mut targets = std::fs::read_dir(dir.join("fuzz_targets"))?
        .filter_map(|e| e.ok()?.path().file_stem()?.to_str().map(str::to_owned))
        .collect::<Vec<_>>();
    targets.sort();
    let has_cargo_fuzz = Command::new(env!("CARGO"))
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !has_cargo_fuzz {
        cargo(&["install", "cargo-fuzz", "--locked"])?;
    }
    // Its own target directory: the sanitizer's flags would rebuild the workspace's.
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| dir.join("target"), |d| PathBuf::from(d).join("fuzz"));
    let fuzz_cmd = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.arg("fuzz")
            .args(args)
            .arg("--target-dir")
            .arg(&target_dir)
            .env("RUSTC_BOOTSTRAP", "1")
            .current_dir(&dir);
        cmd
    };
    run(&mut fuzz_cmd(&["build"]))?;
    for target in &targets {
        let Some((_, seeds)) = FUZZ_SEEDS.iter().find(|(t, _)| t == target) else {
            bail!("fuzz target {target} has no seeds in FUZZ_SEEDS (xtask/src/main.rs)");
        };
        let corpus = dir.join("corpus").join(target);
        std::fs::create_dir_all(&corpus)?;
        let mut cmd = fuzz_cmd(&["run", target]);
        cmd.arg(&corpus);
        for seed in *seeds {
            cmd.arg(dir.join("seeds").join(seed));
        }
        run(cmd.args([
            "--",
            // 0: replay the seeds only (a regression check that cannot turn up a new finding by
            // chance); otherwise explore for that many seconds.
            &if seconds == "0" {
                "-runs=0".to_owned()
            } else {
                format!("-max_total_time={seconds}")
            },
            "-timeout=1",
            "-rss_limit_mb=2048",
            "-print_final_stats=1",
        ]))?;
    }
    Ok(())
}

/// `pip install -q -r <file>` into the venv of `python`. torch's wheels are large: a download
/// cut off midway is resumed rather than failing the run.
fn pip_install_requirements(python: &Path, file: &str) -> Result<()> {
    run(Command::new(python).args([
        "-m",
        "pip",
        "install",
        "-q",
        "--resume-retries",
        "20",
        "-r",
        file,
    ]))
}

/// The venv of the benchmarks: the test venv and `benches/requirements.txt` (matplotlib).
fn bench_venv() -> Result<PathBuf> {
    let python = venv()?;
    pip_install_requirements(&python, "benches/requirements.txt")?;
    Ok(python)
}

/// Draws the figures of BENCH.md (`docs/bench/*.png`) from the JSON in `benches/results/`.
fn plot(python: &Path) -> Result<()> {
    run(Command::new(python).arg("benches/plot.py"))
}

/// The benchmarks, each side by side with its baseline: `cargo xtask bench [--save] [name ...]`
/// with names from `overhead http tar images scaling memory criterion` (all by default). With
/// `--save`, each Python harness prints JSON into `benches/results/<name>.json` (scaling also
/// into `scaling-ft.json` on free-threaded 3.13t, `scaling-ft314.json` on 3.14t and
/// `scaling-314.json` on 3.14 when their venvs exist), and the figures are
/// drawn from the results. `cargo xtask bench plot` only draws them.
fn bench(args: &[String]) -> Result<()> {
    const ALL: [&str; 7] = [
        "overhead",
        "http",
        "tar",
        "images",
        "scaling",
        "memory",
        "criterion",
    ];
    if args.first().map(String::as_str) == Some("plot") {
        return plot(&bench_venv()?);
    }
    let save = args.first().map(String::as_str) == Some("--save");
    let names = if save { &args[1..] } else { args };
    let names: Vec<&str> = if names.is_empty() {
        ALL.to_vec()
    } else {
        names.iter().map(String::as_str).collect()
    };
    if let Some(bad) = names.iter().find(|n| !ALL.contains(n)) {
        bail!("unknown benchmark {bad}: choose from {}", ALL.join(" "));
    }
    let python = bench_venv()?;
    develop(&python, true)?;
    let results = root().join("benches/results");
    if save {
        std::fs::create_dir_all(&results)?;
    }
    for name in names {
        let script = match name {
            "overhead" => "benches/compare.py",
            "http" => "benches/http_loaders.py",
            "tar" => "benches/tar_shards.py",
            "images" => "benches/images.py",
            "scaling" => "benches/scaling.py",
            "memory" => "benches/memory.py",
            _ => {
                cargo(&["bench", "--workspace"])?;
                continue;
            }
        };
        if !save {
            run(Command::new(&python).arg(script))?;
            continue;
        }
        let json = results.join(format!("{name}.json"));
        run_to_file(Command::new(&python).args([script, "--json"]), &json)?;
        if name != "scaling" {
            continue;
        }
        for (_, dir, file) in BUILT_PYTHONS {
            let other = root().join(dir).join("bin/python");
            if other.exists() {
                develop(&other, true)?;
                run_to_file(
                    Command::new(&other).args([script, "--json"]),
                    &results.join(file),
                )?;
            }
        }
    }
    if save {
        plot(&python)?;
    }
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = args
        .split_first()
        .map_or(("help", &[][..]), |(c, r)| (c.as_str(), r));
    match cmd {
        "ci" => {
            lint()?;
            cargo(&["test", "--workspace", "--quiet"])?;
            rust_examples()?;
            model()?;
            // Every target explores for a bounded time from its seeds (which it replays first).
            fuzz(&[CI_FUZZ_SECONDS.to_owned()])?;
            let python = venv()?;
            ruff(&python)?;
            develop(&python, false)?;
            stubtest(&python)?;
            pytest(&python, rest)?;
            parity_everywhere(&python)?;
            FREE_THREADED
                .iter()
                .try_for_each(|v| python_ft(&python, v, rest))?;
            release::package()?;
            // The `wheel` profile, as released: cold, it takes about as long as `release` here.
            release::wheels(&["--quick".to_owned()])
        }
        "test" => {
            cargo(&["test", "--workspace", "--quiet"])?;
            py_test(rest)
        }
        "model" => model(),
        "rust-examples" => rust_examples(),
        "py-test" => py_test(rest),
        "python-ft" => python_ft_command(rest),
        "lint" => lint(),
        "fuzz" => fuzz(rest),
        "demo" => {
            let python = venv()?;
            develop(&python, true)?;
            run(Command::new(&python).arg("examples/quickstart.py"))
        }
        "bench" => bench(rest),
        "package" => release::package(),
        "wheels" => release::wheels(rest),
        _ => {
            eprintln!(
                "usage: cargo xtask <ci | test | model | rust-examples | py-test | python-ft | lint | demo | bench | fuzz | package | wheels> [args]"
            );
            if cmd == "help" {
                Ok(())
            } else {
                bail!("unknown command {cmd}")
            }
        }
    }
}
