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
    fn only_the_seam_releases_the_interpreter() {
        // Every wait of Python on Rust, and every stretch of Rust work a Python thread does
        // without the interpreter, goes through crates/py/src/seam.rs (signals, exit counting).
        let mut files = Vec::new();
        rust_files(&root().join("crates/py/src"), &mut files);
        assert!(files.len() > 10);
        for f in files {
            if f.ends_with("seam.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&f).unwrap();
            for needle in [".detach(", "allow_threads(", "PyEval_SaveThread"] {
                let outside_comments = text
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("//"))
                    .any(|l| l.contains(needle));
                let kept_state = needle == "PyEval_SaveThread" && f.ends_with("attach.rs");
                assert!(
                    !outside_comments || kept_state,
                    "{} releases the interpreter itself ({needle}): go through seam.rs",
                    f.display()
                );
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

    /// The module path of each Rust file of a crate's `src/` (`lib.rs` is the root, `a/mod.rs`
    /// and `a.rs` are `a`, `a/b.rs` is `a::b`).
    fn module_files(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        files
            .into_iter()
            .filter(|f| f.file_name().is_some_and(|n| n != "main.rs"))
            .map(|f| {
                let rel = f.strip_prefix(src).unwrap().with_extension("");
                let mut path: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if path.last().is_some_and(|l| l == "mod" || l == "lib") {
                    path.pop();
                }
                (path, f)
            })
            .collect()
    }

    /// The text of a file without its unit tests (a trailing `#[cfg(test)] mod`) and comments.
    fn code_of(text: &str) -> String {
        let mut out = String::new();
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            let t = line.trim_start();
            if t.starts_with("#[cfg(test)]")
                && lines
                    .peek()
                    .is_some_and(|n| n.trim_start().starts_with("mod "))
            {
                break;
            }
            if !t.starts_with("//") {
                out.push_str(line.split(" //").next().unwrap_or(""));
                out.push('\n');
            }
        }
        out
    }

    /// Every path a `use` tree names, its groups expanded: `a::{b, c::{d}}` gives `a::b`, `a::c::d`.
    fn expand_use(prefix: &str, tree: &str, out: &mut Vec<String>) {
        let tree = tree.trim();
        if let Some(open) = tree.find('{') {
            let head = format!("{prefix}{}", &tree[..open]);
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let (mut depth, mut start) = (0, 0);
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand_use(&head, &inner[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            expand_use(&head, &inner[start..], out);
        } else if !tree.is_empty() {
            out.push(format!(
                "{prefix}{}",
                tree.split(" as ").next().unwrap_or(tree)
            ));
        }
    }

    /// The paths one module's code names: its `use` trees, and `crate::` / `super::` paths
    /// written inline.
    fn named_paths(code: &str) -> Vec<String> {
        let mut paths = Vec::new();
        for statement in code.split(';') {
            let t = statement.trim_start();
            let t = t
                .strip_prefix("pub(crate) ")
                .or(t.strip_prefix("pub "))
                .unwrap_or(t);
            if let Some(tree) = t.strip_prefix("use ") {
                expand_use("", tree, &mut paths);
            }
        }
        for start in ["crate::", "super::"] {
            for (at, _) in code.match_indices(start) {
                if code[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':' || c == '$')
                {
                    // `$crate::` in a macro names what the macro's callers use, not its file.
                    continue;
                }
                let rest = &code[at..];
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(rest.len());
                paths.push(rest[..end].to_owned());
            }
        }
        paths
    }

    /// `pub use m::{A, B}` of the crate root: each name and the module it comes from.
    fn root_reexports(code: &str) -> BTreeMap<String, Vec<String>> {
        let mut names = BTreeMap::new();
        for statement in code.split(';') {
            let Some(tree) = statement.trim_start().strip_prefix("pub use ") else {
                continue;
            };
            let mut paths = Vec::new();
            expand_use("", tree, &mut paths);
            for path in paths {
                let mut segments: Vec<String> = path.split("::").map(str::to_owned).collect();
                let name = segments.pop().unwrap_or_default();
                names.insert(name, segments);
            }
        }
        names
    }

    /// The edges between a crate's modules: which module's code names which other module.
    fn module_edges(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
        let modules = module_files(src);
        let root_code = code_of(&std::fs::read_to_string(src.join("lib.rs")).unwrap_or_default());
        let reexports = root_reexports(&root_code);
        let longest_module = |path: &[String]| -> Option<Vec<String>> {
            (1..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| modules.contains_key(p))
        };
        let mut edges = BTreeMap::new();
        for (module, file) in &modules {
            if module.is_empty() {
                continue; // the root declares and re-exports: it stands above every module
            }
            let code = code_of(&std::fs::read_to_string(file).unwrap());
            let mut targets = BTreeSet::new();
            for path in named_paths(&code) {
                let mut segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
                let absolute: Vec<String> = match segments.first() {
                    Some(&"crate") => segments.drain(1..).map(str::to_owned).collect(),
                    Some(&"super") => {
                        let mut base = module.clone();
                        // A file `a/b.rs` is module `a::b`; its `super` is `a`.
                        while segments.first() == Some(&"super") {
                            base.pop();
                            segments.remove(0);
                        }
                        base.extend(segments.iter().map(|s| (*s).to_owned()));
                        base
                    }
                    Some(first)
                        if modules.contains_key(
                            &[module.clone(), vec![(*first).to_owned()]].concat(),
                        ) =>
                    {
                        [
                            module.clone(),
                            segments.iter().map(|s| (*s).to_owned()).collect(),
                        ]
                        .concat()
                    }
                    _ => continue,
                };
                let target = longest_module(&absolute).or_else(|| {
                    let name = absolute.first()?;
                    longest_module(reexports.get(name)?)
                });
                if let Some(target) = target {
                    if &target != module && !module.starts_with(&target) {
                        targets.insert(target);
                    }
                }
            }
            edges.insert(module.clone(), targets);
        }
        edges
    }

    /// A circle of modules, if there is one: each imports the next, the last the first.
    fn find_circle(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<String>> {
        fn visit(
            node: &Vec<String>,
            edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
            stack: &mut Vec<Vec<String>>,
            done: &mut BTreeSet<Vec<String>>,
        ) -> Option<Vec<String>> {
            if let Some(at) = stack.iter().position(|n| n == node) {
                return Some(stack[at..].iter().map(|m| m.join("::")).collect());
            }
            if !done.insert(node.clone()) {
                return None;
            }
            stack.push(node.clone());
            for next in edges.get(node).into_iter().flatten() {
                if let Some(circle) = visit(next, edges, stack, done) {
                    return Some(circle);
                }
            }
            stack.pop();
            None
        }
        let mut done = BTreeSet::new();
        edges
            .keys()
            .find_map(|n| visit(n, edges, &mut Vec::new(), &mut done))
    }

    #[test]
    fn no_crate_has_an_import_circle() {
        for krate in ["core", "io", "transforms", "py", "cli"] {
            let edges = module_edges(&root().join("crates").join(krate).join("src"));
            assert!(edges.len() > 3, "crates/{krate}: too few modules found");
            assert!(
                edges.values().any(|t| !t.is_empty()),
                "crates/{krate}: no imports found"
            );
            if let Some(circle) = find_circle(&edges) {
                panic!(
                    "crates/{krate} has an import circle: {}",
                    circle.join(" -> ")
                );
            }
        }
    }

    #[test]
    fn the_circle_check_sees_circles() {
        let edges = |pairs: &[(&str, &str)]| {
            let mut e: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
            for (a, b) in pairs {
                e.entry(vec![(*a).to_owned()])
                    .or_default()
                    .insert(vec![(*b).to_owned()]);
                e.entry(vec![(*b).to_owned()]).or_default();
            }
            e
        };
        assert_eq!(find_circle(&edges(&[("a", "b"), ("b", "c")])), None);
        let circle = find_circle(&edges(&[("a", "b"), ("b", "c"), ("c", "a")])).unwrap();
        assert_eq!(circle.len(), 3);
        let mut paths = Vec::new();
        expand_use("", "crate::{a::{B, c::D}, e as f}", &mut paths);
        assert_eq!(paths, ["crate::a::B", "crate::a::c::D", "crate::e"]);
    }
}
