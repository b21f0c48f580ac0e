//! Output file names: a `--name` path template over the columns and `{index}`, or by default
//! the index zero-padded to the width of the last index plus the location's extension.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use anyhow::Result;
use dlrs_io::{Column, Target, Template};

use crate::usage;
use crate::values::placeholders;

/// The suffix of a file being written.
pub const PART_SUFFIX: &str = ".part";

/// How item i's file is named.
#[derive(Debug)]
pub enum Names {
    /// `000042.png`: the index padded to `width` digits, the extension of the location.
    Padded { width: usize },
    /// A path template rendered for the item.
    Template(Template),
}

impl Names {
    /// The naming of `len` items: `template` over the columns it uses, or the default.
    pub fn new(template: Option<&str>, columns: &[(String, Column)], len: usize) -> Result<Names> {
        let Some(template) = template else {
            let width = len.saturating_sub(1).to_string().len();
            return Ok(Names::Padded { width });
        };
        let used = placeholders(template);
        let columns: Vec<(String, Column)> = columns
            .iter()
            .filter(|(name, _)| used.contains(&name.as_str()))
            .cloned()
            .collect();
        let length = columns.is_empty().then_some(len);
        let template = Template::new(template, columns, length, Target::Path)
            .map_err(|e| usage(format!("--name: {e}")))?;
        Ok(Names::Template(template))
    }

    /// The file name of item `index`, relative to the output directory; `location` is where the
    /// item comes from (its extension is kept by the default naming).
    pub fn name(&self, index: u64, location: Option<&str>) -> Result<String> {
        let name = match self {
            Names::Padded { width } => {
                let ext = location.and_then(extension);
                match ext {
                    Some(ext) => format!("{index:0width$}.{ext}"),
                    None => format!("{index:0width$}"),
                }
            }
            Names::Template(t) => t.render(index)?,
        };
        check_name(&name)?;
        Ok(name)
    }

    /// Whether two items may get one name (only a template can do that).
    pub fn may_collide(&self) -> bool {
        matches!(self, Names::Template(_))
    }
}

/// Refuses a name that would leave the output directory, be empty or look like a part file.
fn check_name(name: &str) -> Result<()> {
    let path = Path::new(name);
    let inside = path.components().all(|c| matches!(c, Component::Normal(_)));
    if name.is_empty() || !inside || name.ends_with('/') {
        return Err(usage(format!(
            "the file name {name:?} must be a relative path inside --out without '.' or '..'"
        )));
    }
    if name.ends_with(PART_SUFFIX) {
        return Err(usage(format!(
            "the file name {name:?} ends with {PART_SUFFIX}, the suffix of files being written"
        )));
    }
    Ok(())
}

/// The extension of the last path segment of `location` (query and fragment dropped), when it
/// is 1 to 8 ASCII letters or digits.
pub fn extension(location: &str) -> Option<&str> {
    let path = location.split(['?', '#']).next().unwrap_or(location);
    let last = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let (stem, ext) = last.rsplit_once('.')?;
    (!stem.is_empty()
        && (1..=8).contains(&ext.len())
        && ext.bytes().all(|b| b.is_ascii_alphanumeric()))
    .then_some(ext)
}

/// `path` with [`PART_SUFFIX`] appended.
pub fn part_path(path: &Path) -> PathBuf {
    let mut part = path.as_os_str().to_owned();
    part.push(PART_SUFFIX);
    PathBuf::from(part)
}

/// Checks that no two items get one name (for a `--name` template), `name_of` naming each.
pub fn check_unique(len: u64, name_of: impl Fn(u64) -> Result<String>) -> Result<()> {
    let mut seen = HashSet::new();
    for index in 0..len {
        let name = name_of(index)?;
        if let Some(first) = seen.replace(name) {
            return Err(usage(format!(
                "--name gives item {index} the name {first:?} of an earlier item: add {{index}} \
                 or another column"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_names_keep_the_extension() {
        let names = Names::new(None, &[], 1000).unwrap();
        assert_eq!(
            names.name(7, Some("http://h/t/7.png?x=1")).unwrap(),
            "007.png"
        );
        assert_eq!(names.name(999, Some("/d/a.b/file")).unwrap(), "999");
        assert_eq!(names.name(12, None).unwrap(), "012");
        let one = Names::new(None, &[], 1).unwrap();
        assert_eq!(one.name(0, Some("s3://b/x.tar.gz")).unwrap(), "0.gz");
        let empty = Names::new(None, &[], 0).unwrap();
        assert!(matches!(empty, Names::Padded { width: 1 }));
        assert!(!empty.may_collide());
    }

    #[test]
    fn extensions() {
        for (loc, ext) in [
            ("http://h/a.png", Some("png")),
            ("http://h/a.png?format=jpg", Some("png")),
            ("http://h/tile?x=1.png", None),
            ("http://h/.hidden", None),
            ("/d/x.verylongext", None),
            ("/d/x.p-g", None),
            ("/d.d/x", None),
            ("C:\\d\\x.tif", Some("tif")),
        ] {
            assert_eq!(extension(loc), ext, "{loc}");
        }
    }

    #[test]
    fn template_names_use_only_their_columns() {
        let cols = vec![
            (
                "slide".to_owned(),
                Column::Strs(vec!["a".into(), "b".into()]),
            ),
            ("x".to_owned(), Column::Ints(vec![0, 224])),
        ];
        let names = Names::new(Some("{slide}/{x}.png"), &cols, 2).unwrap();
        assert_eq!(names.name(1, None).unwrap(), "b/224.png");
        assert!(names.may_collide());
        let names = Names::new(Some("t{index}.bin"), &cols, 2).unwrap();
        assert_eq!(names.name(1, None).unwrap(), "t1.bin");
        let err = Names::new(Some("{nope}"), &cols, 2).unwrap_err();
        assert!(
            err.to_string().starts_with("--name: placeholder {nope}"),
            "{err}"
        );
    }

    #[test]
    fn bad_names_are_refused() {
        let cols = vec![("s".to_owned(), Column::Strs(vec!["a".into()]))];
        for t in ["../{s}", "/abs/{s}", "{s}.part", "./{s}", "{s}/"] {
            let names = Names::new(Some(t), &cols, 1).unwrap();
            let err = names.name(0, None).unwrap_err();
            assert!(err.is::<crate::UsageError>(), "{t}: {err}");
        }
    }

    #[test]
    fn collisions_are_found() {
        let cols = vec![(
            "s".to_owned(),
            Column::Strs(vec!["a".into(), "b".into(), "a".into()]),
        )];
        let names = Names::new(Some("{s}.png"), &cols, 3).unwrap();
        let err = check_unique(3, |i| names.name(i, None)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--name gives item 2 the name \"a.png\" of an earlier item: add {index} or another column"
        );
        let names = Names::new(Some("{s}{index}.png"), &cols, 3).unwrap();
        check_unique(3, |i| names.name(i, None)).unwrap();
    }

    #[test]
    fn part_paths() {
        assert_eq!(
            part_path(Path::new("o/1.png")),
            PathBuf::from("o/1.png.part")
        );
    }
}
