//! Tidy checks of the whole tree, run as ordinary tests by `cargo test`.

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use serde_json::Value;

    use crate::root;

    fn metadata() -> Value {
        let out = Command::new(env!("CARGO"))
            .args(["metadata", "--format-version", "1", "--manifest-path"])
            .arg(root().join("Cargo.toml"))
            .output()
            .expect("cargo metadata runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
    }

    /// Names of every package reachable from `name` through normal (not dev, not build) edges.
    fn normal_closure(meta: &Value, name: &str) -> BTreeSet<String> {
        let packages = meta["packages"].as_array().unwrap();
        let id_of = |n: &str| {
            packages
                .iter()
                .find(|p| p["name"] == n)
                .map(|p| p["id"].as_str().unwrap().to_owned())
        };
        let name_of: BTreeMap<&str, &str> = packages
            .iter()
            .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
            .collect();
        let mut edges: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for node in meta["resolve"]["nodes"].as_array().unwrap() {
            let deps = node["deps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| {
                    d["dep_kinds"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|k| k["kind"].is_null())
                })
                .map(|d| d["pkg"].as_str().unwrap())
                .collect();
            edges.insert(node["id"].as_str().unwrap(), deps);
        }
        let start = id_of(name).unwrap_or_else(|| panic!("no package {name}"));
        let mut seen = BTreeSet::new();
        let mut todo = vec![start.as_str().to_owned()];
        while let Some(id) = todo.pop() {
            if seen.insert(id.clone()) {
                todo.extend(
                    edges
                        .get(id.as_str())
                        .into_iter()
                        .flatten()
                        .map(|s| (*s).to_owned()),
                );
            }
        }
        seen.iter()
            .map(|id| name_of[id.as_str()].to_owned())
            .collect()
    }

    #[test]
    fn core_knows_nothing_of_python_tokio_or_images() {
        let meta = metadata();
        let core = normal_closure(&meta, "dlrs-core");
        for forbidden in [
            "pyo3",
            "tokio",
            "reqwest",
            "object_store",
            "png",
            "tiff",
            "dlrs-io",
            "dlrs-transforms",
            "dlrs-py",
        ] {
            assert!(
                !core.contains(forbidden),
                "dlrs-core depends on {forbidden}"
            );
        }
        for pkg in ["dlrs-core", "dlrs-io", "dlrs-transforms", "dlrs-cli"] {
            assert!(
                !normal_closure(&meta, pkg).contains("pyo3"),
                "{pkg} depends on pyo3: only dlrs-py may"
            );
        }
        let transforms = normal_closure(&meta, "dlrs-transforms");
        assert!(
            !transforms.contains("tokio"),
            "dlrs-transforms depends on tokio"
        );
    }

    #[test]
    fn io_file_feature_builds_no_http_stack() {
        // `cargo metadata` resolves every feature of the workspace: only `cargo tree` shows one
        // package's closure under the features a user picks.
        let out = Command::new(env!("CARGO"))
            .args([
                "tree",
                "-e",
                "normal",
                "--no-default-features",
                "-F",
                "file",
            ])
            .args([
                "-p",
                "dlrs-io",
                "--prefix",
                "none",
                "-f",
                "{p}",
                "--manifest-path",
            ])
            .arg(root().join("Cargo.toml"))
            .output()
            .expect("cargo tree runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let tree = String::from_utf8(out.stdout).unwrap();
        let names: BTreeSet<&str> = tree
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert!(
            names.contains("dlrs-io") && names.contains("tokio"),
            "{tree}"
        );
        for forbidden in [
            "reqwest",
            "object_store",
            "rustls",
            "hyper",
            "webpki-root-certs",
        ] {
            assert!(
                !names.contains(forbidden),
                "dlrs-io with only `file` depends on {forbidden}"
            );
        }
    }

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "target") {
                    rust_files(&p, out);
                }
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }

    #[test]
    fn pyo3_advisory_apis_are_not_used() {
        // RUSTSEC-2026-0176 (`nth`/`nth_back` on PyList/PyTuple iterators) and
        // RUSTSEC-2026-0177 (`PyCFunction::new_closure`) of PyO3 0.28.3.
        let mut files = Vec::new();
        rust_files(&root().join("crates/py"), &mut files);
        assert!(!files.is_empty());
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for needle in ["new_closure", ".nth(", ".nth_back("] {
                assert!(!text.contains(needle), "{} uses {needle}", f.display());
            }
        }
    }

    #[test]
    fn io_names_no_python_exception() {
        // dlrs-io classifies its errors by `ErrorKind`; only crates/py knows Python's names.
        let mut files = Vec::new();
        rust_files(&root().join("crates/io"), &mut files);
        assert!(!files.is_empty());
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for needle in [
                "PyKind",
                "python_kind",
                "ValueError",
                "TypeError",
                "IndexError",
                "TimeoutError",
                "RuntimeError",
                "OSError",
            ] {
                // A whole word: std's `RecvTimeoutError` is not Python's `TimeoutError`.
                let named = text.match_indices(needle).any(|(at, _)| {
                    let before = text[..at].chars().next_back();
                    !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                });
                assert!(!named, "{} names {needle}", f.display());
            }
        }
    }

    #[test]
    fn every_module_says_what_it_owns() {
        let mut files = Vec::new();
        for dir in ["crates", "xtask"] {
            rust_files(&root().join(dir), &mut files);
        }
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            assert!(
                first.starts_with("//!"),
                "{} does not start with a //! line",
                f.display()
            );
        }
    }

    #[test]
    fn architecture_names_every_crate() {
        let arch = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
        for krate in [
            "crates/core",
            "crates/io",
            "crates/transforms",
            "crates/py",
            "crates/cli",
            "xtask",
        ] {
            assert!(
                arch.contains(krate),
                "ARCHITECTURE.md does not describe {krate}"
            );
        }
    }
}
