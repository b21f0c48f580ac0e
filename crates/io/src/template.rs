//! Location templates: `{name}` columns, `{index}`, `{{`/`}}`, rendered item by item.
//!
//! A template is parsed once; each location is built when its item is fetched, so no string is
//! kept per item. Values are checked once, when the template is built:
//!
//! - in a URL ([`Target::Url`]) a str is percent-encoded as a URL component (everything but
//!   ASCII letters, digits and `-._~`), and `.` and `..` are refused;
//! - in a path ([`Target::Path`]) a str is written as it is but cannot hold `/`, `\` or NUL, nor
//!   be `.` or `..`;
//! - in an object key ([`Target::Key`]) a str is written as it is but cannot hold `/` or an
//!   ASCII control character, nor be empty, `.` or `..`.
//!
//! Ints are written in decimal everywhere. A path component built from placeholders and
//! literal text cannot become `.` or `..` either (`.{a}.` with an empty value).

use std::fmt::Write as _;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use crate::error::Error;

/// The characters a str value is percent-encoded from in a URL: all but the RFC 3986
/// unreserved characters.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The values of one column, one per item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Column {
    /// Integers, written in decimal.
    Ints(Vec<i64>),
    /// Unsigned integers (for values above `i64::MAX`, e.g. numpy `uint64`), written in decimal.
    UInts(Vec<u64>),
    /// Strings, encoded or checked according to the [`Target`].
    Strs(Vec<String>),
    /// The integers `start..end` (end excluded; none when `end <= start`), written in decimal.
    /// Kept as its two ends: the values are made as items are rendered, so a range of any
    /// length costs nothing.
    Range {
        /// The first value.
        start: i64,
        /// The value after the last.
        end: i64,
    },
}

impl Column {
    /// The number of values.
    pub fn len(&self) -> usize {
        match self {
            Column::Ints(values) => values.len(),
            Column::UInts(values) => values.len(),
            Column::Strs(values) => values.len(),
            Column::Range { start, end } => range_len(*start, *end),
        }
    }

    /// Whether the column has no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The number of values of `start..end`, saturated at `usize::MAX` (only a narrower `usize`
/// than 64 bits saturates).
pub fn range_len(start: i64, end: i64) -> usize {
    let len = (i128::from(end) - i128::from(start)).max(0);
    usize::try_from(len).unwrap_or(usize::MAX)
}

/// What a template makes, which decides how str values are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A URL: strs are percent-encoded.
    Url,
    /// A file path: strs are written as they are and cannot leave their directory.
    Path,
    /// An object key: strs are written as they are and cannot leave their "directory".
    Key,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Column(usize),
    Index,
}

/// A parsed template with its columns.
#[derive(Debug, Clone)]
pub struct Template {
    parts: Vec<Part>,
    columns: Vec<(String, Column)>,
    len: usize,
    target: Target,
    literal_len: usize,
}

impl Template {
    /// Parses `template` and checks `columns` against it.
    ///
    /// `length` is the number of items; it is required when there are no columns and must
    /// match the columns' length otherwise. Errors ([`Error::InvalidArgument`]): unbalanced
    /// braces, an empty `{}`, a placeholder without a column, a column the template does not
    /// use, a column named `index`, two columns of one name, columns of different lengths, no
    /// columns and no length, a str value the target refuses.
    pub fn new(
        template: &str,
        columns: Vec<(String, Column)>,
        length: Option<usize>,
        target: Target,
    ) -> Result<Template, Error> {
        for (i, (name, _)) in columns.iter().enumerate() {
            if name == "index" {
                return Err(Error::invalid(
                    "a column cannot be named 'index': {index} is the item index",
                ));
            }
            if columns[..i].iter().any(|(other, _)| other == name) {
                return Err(Error::invalid(format!("column '{name}' is given twice")));
            }
        }
        let parts = parse(template, &columns)?;
        if let Some((name, _)) = columns
            .iter()
            .enumerate()
            .find(|(i, _)| !parts.contains(&Part::Column(*i)))
            .map(|(_, column)| column)
        {
            return Err(Error::invalid(format!(
                "column '{name}' is not used by the template {template:?}"
            )));
        }
        let len = match (columns.first(), length) {
            (None, None) => {
                return Err(Error::invalid(
                    "length is required when there are no columns",
                ));
            }
            (None, Some(length)) => length,
            (Some((_, first)), length) => {
                let len = first.len();
                if let Some((name, column)) = columns.iter().find(|(_, c)| c.len() != len) {
                    return Err(Error::invalid(format!(
                        "columns have different lengths: '{}' has {len} values, '{name}' has {}",
                        columns[0].0,
                        column.len()
                    )));
                }
                if let Some(length) = length.filter(|&length| length != len) {
                    return Err(Error::invalid(format!(
                        "length is {length} but the columns have {len} values"
                    )));
                }
                len
            }
        };
        for (name, column) in &columns {
            if let Column::Strs(values) = column {
                for (item, value) in values.iter().enumerate() {
                    check_value(value, target).map_err(|why| {
                        Error::invalid(format!("column '{name}', item {item}: {value:?} {why}"))
                    })?;
                }
            }
        }
        check_components(&parts, &columns, len, target)?;
        let literal_len = parts
            .iter()
            .map(|part| match part {
                Part::Literal(text) => text.len(),
                _ => 0,
            })
            .sum();
        Ok(Template {
            parts,
            columns,
            len,
            target,
            literal_len,
        })
    }

    /// The number of items.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no items.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What the template makes.
    pub fn target(&self) -> Target {
        self.target
    }

    /// Writes the location of item `index` to `out` (which is not cleared first).
    pub fn render_into(&self, index: u64, out: &mut String) -> Result<(), Error> {
        let item = usize::try_from(index)
            .ok()
            .filter(|&i| i < self.len)
            .ok_or(Error::IndexOutOfRange {
                index,
                len: self.len as u64,
            })?;
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Index => write!(out, "{index}").expect("writing to a String"),
                Part::Column(c) => match &self.columns[*c].1 {
                    Column::Ints(values) => {
                        write!(out, "{}", values[item]).expect("writing to a String");
                    }
                    Column::UInts(values) => {
                        write!(out, "{}", values[item]).expect("writing to a String");
                    }
                    Column::Strs(values) => match self.target {
                        Target::Url => out.extend(utf8_percent_encode(&values[item], COMPONENT)),
                        Target::Path | Target::Key => out.push_str(&values[item]),
                    },
                    Column::Range { start, .. } => {
                        // `item` is below the range's length, so the value is in the range.
                        let value = i128::from(*start) + item as i128;
                        write!(out, "{value}").expect("writing to a String");
                    }
                },
            }
        }
        Ok(())
    }

    /// The location of item `index`.
    pub fn render(&self, index: u64) -> Result<String, Error> {
        let mut out = String::with_capacity(self.literal_len + 32);
        self.render_into(index, &mut out)?;
        Ok(out)
    }
}

/// Splits `template` into literals and placeholders.
fn parse(template: &str, columns: &[(String, Column)]) -> Result<Vec<Part>, Error> {
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut chars = template.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '{' if chars.next_if(|&(_, c)| c == '{').is_some() => literal.push('{'),
            '}' if chars.next_if(|&(_, c)| c == '}').is_some() => literal.push('}'),
            '}' => {
                return Err(Error::invalid(format!(
                    "unbalanced '}}' at position {at} of the template {template:?} (write '}}}}' for a literal brace)"
                )));
            }
            '{' => {
                let start = at + 1;
                let end = loop {
                    match chars.next() {
                        Some((end, '}')) => break end,
                        Some((_, '{')) | None => {
                            return Err(Error::invalid(format!(
                                "unbalanced '{{' at position {at} of the template {template:?} (write '{{{{' for a literal brace)"
                            )));
                        }
                        Some(_) => {}
                    }
                };
                let name = &template[start..end];
                let part = if name == "index" {
                    Part::Index
                } else if let Some(c) = columns.iter().position(|(n, _)| n == name) {
                    Part::Column(c)
                } else if name.is_empty() {
                    return Err(Error::invalid(format!(
                        "empty placeholder {{}} in the template {template:?}"
                    )));
                } else {
                    return Err(Error::invalid(format!(
                        "placeholder {{{name}}} of the template {template:?} has no column"
                    )));
                };
                if !literal.is_empty() {
                    parts.push(Part::Literal(std::mem::take(&mut literal)));
                }
                parts.push(part);
            }
            c => literal.push(c),
        }
    }
    if !literal.is_empty() {
        parts.push(Part::Literal(literal));
    }
    Ok(parts)
}

/// One piece of a path component: literal text (no separator) or a placeholder.
#[derive(Debug, Clone, Copy)]
enum Piece<'a> {
    Text(&'a str),
    Column(usize),
    Index,
}

/// Checks that no component the placeholders build is `.` or `..` for any item (`.{a}.` with an
/// empty value is `..`, though no value is): the value checks see one value at a time.
///
/// Components are split at `/` (and `\` in a path, `?` and `#` in a URL). Only a component of
/// dots and str columns can become one: `{index}` and ints always write a digit.
fn check_components(
    parts: &[Part],
    columns: &[(String, Column)],
    len: usize,
    target: Target,
) -> Result<(), Error> {
    let separators: &[char] = match target {
        Target::Path => &['/', '\\'],
        Target::Key => &['/'],
        Target::Url => &['/', '?', '#'],
    };
    let mut components: Vec<Vec<Piece<'_>>> = vec![Vec::new()];
    for part in parts {
        match part {
            Part::Literal(text) => {
                let mut pieces = text.split(separators);
                if let Some(first) = pieces.next() {
                    components
                        .last_mut()
                        .expect("never empty")
                        .push(Piece::Text(first));
                }
                for piece in pieces {
                    components.push(vec![Piece::Text(piece)]);
                }
            }
            Part::Column(c) => components
                .last_mut()
                .expect("never empty")
                .push(Piece::Column(*c)),
            Part::Index => components
                .last_mut()
                .expect("never empty")
                .push(Piece::Index),
        }
    }
    for component in &components {
        let mut dots = 0;
        let mut has_str = false;
        let may_be_dots = component.iter().all(|piece| match *piece {
            Piece::Text(text) => {
                dots += text.len();
                text.bytes().all(|b| b == b'.')
            }
            Piece::Column(c) => match &columns[c].1 {
                Column::Strs(_) => {
                    has_str = true;
                    true
                }
                Column::Ints(_) | Column::UInts(_) | Column::Range { .. } => false,
            },
            Piece::Index => false,
        });
        if !has_str || !may_be_dots || dots > 2 {
            continue;
        }
        for item in 0..len {
            let mut rendered = String::new();
            for piece in component {
                match *piece {
                    Piece::Text(text) => rendered.push_str(text),
                    Piece::Column(c) => match &columns[c].1 {
                        Column::Strs(values) if rendered.len() <= 2 => {
                            rendered.push_str(&values[item]);
                        }
                        _ => {}
                    },
                    Piece::Index => {}
                }
            }
            if rendered == "." || rendered == ".." {
                let shown: String = component
                    .iter()
                    .map(|piece| match *piece {
                        Piece::Text(text) => text.replace('{', "{{").replace('}', "}}"),
                        Piece::Column(c) => format!("{{{}}}", columns[c].0),
                        Piece::Index => "{index}".to_owned(),
                    })
                    .collect();
                return Err(Error::invalid(format!(
                    "item {item}: the path component {shown:?} of the template becomes \
                     {rendered:?}, which is not allowed (it would leave the template's directory)"
                )));
            }
        }
    }
    Ok(())
}

/// Why `value` cannot be written for `target`, if it cannot.
fn check_value(value: &str, target: Target) -> Result<(), &'static str> {
    if value == "." || value == ".." {
        return Err("is not allowed (it would leave the template's directory)");
    }
    match target {
        Target::Url => Ok(()),
        Target::Path if value.contains(['/', '\\', '\0']) => {
            Err("cannot be written in a path: it holds '/', '\\' or NUL")
        }
        Target::Path => Ok(()),
        Target::Key if value.is_empty() => Err("cannot be written in a key: it is empty"),
        Target::Key if value.contains('/') || value.chars().any(|c| c.is_ascii_control()) => {
            Err("cannot be written in a key: it holds '/' or a control character")
        }
        Target::Key => Ok(()),
    }
}

/// The `from_template` of every dataset made of `Locations`: the template is parsed for
/// `$target`, then `$build` makes the dataset of `$locations` and `$options`, as of a list. The
/// `$arg`s come before the template.
macro_rules! from_template {
    (
        $(#[$doc:meta])*
        [$($arg:ident: $ty:ty),*] $options:ident: $options_ty:ty, $target:expr,
        |$locations:ident| $build:expr
    ) => {
        $(#[$doc])*
        pub fn from_template(
            $($arg: $ty,)*
            template: &str,
            columns: Vec<(String, $crate::template::Column)>,
            length: Option<usize>,
            $options: $options_ty,
        ) -> Result<Self, $crate::Error> {
            let template = $crate::template::Template::new(template, columns, length, $target)?;
            let $locations = $crate::dataset::Locations::Template(template);
            $build
        }
    };
}
pub(crate) use from_template;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn strs(values: &[&str]) -> Column {
        Column::Strs(values.iter().map(|s| (*s).to_owned()).collect())
    }

    fn cols(columns: Vec<(&str, Column)>) -> Vec<(String, Column)> {
        columns
            .into_iter()
            .map(|(n, c)| (n.to_owned(), c))
            .collect()
    }

    /// Renders every item of a template, or returns the construction error's message.
    fn check(
        template: &str,
        columns: Vec<(&str, Column)>,
        length: Option<usize>,
        target: Target,
        expected: Result<&[&str], &str>,
    ) {
        let built = Template::new(template, cols(columns), length, target);
        match (built, expected) {
            (Ok(t), Ok(expected)) => {
                let rendered: Vec<String> =
                    (0..t.len() as u64).map(|i| t.render(i).unwrap()).collect();
                assert_eq!(rendered, expected, "template {template:?}");
            }
            (Err(e), Err(expected)) => {
                assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
                assert_eq!(e.to_string(), expected, "template {template:?}");
            }
            (got, expected) => panic!("template {template:?}: got {got:?}, expected {expected:?}"),
        }
    }

    #[test]
    fn urls() {
        check(
            "https://tiles.example/images/{image}/tile?x={x}&y={y}",
            vec![
                ("image", strs(&["image 1.tif", "a/b?c#d%"])),
                ("x", Column::Ints(vec![0, 224])),
                ("y", Column::Ints(vec![-3, 448])),
            ],
            None,
            Target::Url,
            Ok(&[
                "https://tiles.example/images/image%201.tif/tile?x=0&y=-3",
                "https://tiles.example/images/a%2Fb%3Fc%23d%25/tile?x=224&y=448",
            ]),
        );
        check(
            "http://h/{s}",
            vec![("s", strs(&["é~_-.x", ""]))],
            None,
            Target::Url,
            Ok(&["http://h/%C3%A9~_-.x", "http://h/"]),
        );
        check(
            "http://h/{s}",
            vec![("s", strs(&["ok", ".."]))],
            None,
            Target::Url,
            Err(
                "column 's', item 1: \"..\" is not allowed (it would leave the template's directory)",
            ),
        );
    }

    #[test]
    fn index_braces_and_length() {
        check(
            "{{{index}}}/{{x}}",
            vec![],
            Some(3),
            Target::Path,
            Ok(&["{0}/{x}", "{1}/{x}", "{2}/{x}"]),
        );
        check("a", vec![], Some(0), Target::Key, Ok(&[]));
        check(
            "{index}",
            vec![],
            None,
            Target::Key,
            Err("length is required when there are no columns"),
        );
        check(
            "{a}/{index}",
            vec![("a", Column::Ints(vec![7, 8]))],
            Some(2),
            Target::Path,
            Ok(&["7/0", "8/1"]),
        );
        check(
            "{a}",
            vec![("a", Column::Ints(vec![7, 8]))],
            Some(3),
            Target::Path,
            Err("length is 3 but the columns have 2 values"),
        );
    }

    #[test]
    fn template_errors() {
        let one = || vec![("a", Column::Ints(vec![1]))];
        check(
            "x/{b}",
            one(),
            None,
            Target::Path,
            Err("placeholder {b} of the template \"x/{b}\" has no column"),
        );
        check(
            "x/{index}",
            one(),
            None,
            Target::Path,
            Err("column 'a' is not used by the template \"x/{index}\""),
        );
        check(
            "x/{a",
            one(),
            None,
            Target::Path,
            Err(
                "unbalanced '{' at position 2 of the template \"x/{a\" (write '{{' for a literal brace)",
            ),
        );
        check(
            "x/{a{a}}",
            one(),
            None,
            Target::Path,
            Err(
                "unbalanced '{' at position 2 of the template \"x/{a{a}}\" (write '{{' for a literal brace)",
            ),
        );
        check(
            "x/{a}}",
            one(),
            None,
            Target::Path,
            Err(
                "unbalanced '}' at position 5 of the template \"x/{a}}\" (write '}}' for a literal brace)",
            ),
        );
        check(
            "{}{a}",
            one(),
            None,
            Target::Path,
            Err("empty placeholder {} in the template \"{}{a}\""),
        );
        check(
            "{a}{b}",
            vec![("a", Column::Ints(vec![1, 2])), ("b", strs(&["x"]))],
            None,
            Target::Path,
            Err("columns have different lengths: 'a' has 2 values, 'b' has 1"),
        );
        check(
            "{a}",
            vec![("a", Column::Ints(vec![1])), ("a", Column::Ints(vec![2]))],
            None,
            Target::Path,
            Err("column 'a' is given twice"),
        );
        check(
            "{index}",
            vec![("index", Column::Ints(vec![1]))],
            None,
            Target::Path,
            Err("a column cannot be named 'index': {index} is the item index"),
        );
    }

    #[test]
    fn path_and_key_values() {
        let path =
            |v: &str| Template::new("/d/{s}", cols(vec![("s", strs(&[v]))]), None, Target::Path);
        let key =
            |v: &str| Template::new("d/{s}", cols(vec![("s", strs(&[v]))]), None, Target::Key);
        assert_eq!(path("a b%.svs").unwrap().render(0).unwrap(), "/d/a b%.svs");
        assert_eq!(path("").unwrap().render(0).unwrap(), "/d/");
        assert_eq!(key("a b%.svs").unwrap().render(0).unwrap(), "d/a b%.svs");
        for bad in ["a/b", "a\\b", "a\0b", ".", ".."] {
            assert!(path(bad).is_err(), "path value {bad:?}");
        }
        for bad in ["a/b", "", ".", "..", "a\nb"] {
            assert!(key(bad).is_err(), "key value {bad:?}");
        }
        assert!(key("a\\b").is_ok());
        assert_eq!(
            path("x/../..").unwrap_err().to_string(),
            "column 's', item 0: \"x/../..\" cannot be written in a path: it holds '/', '\\' or NUL"
        );
        assert_eq!(
            key("").unwrap_err().to_string(),
            "column 's', item 0: \"\" cannot be written in a key: it is empty"
        );
    }

    #[test]
    fn assembled_components_cannot_be_dots() {
        let s = |values: &[&str]| vec![("s", strs(values))];
        check(
            "http://h/a/.{s}./x",
            s(&["b", ""]),
            None,
            Target::Url,
            Err(
                "item 1: the path component \".{s}.\" of the template becomes \"..\", which is not allowed (it would leave the template's directory)",
            ),
        );
        check(
            "/d\\{s}.\\x",
            s(&[""]),
            None,
            Target::Path,
            Err(
                "item 0: the path component \"{s}.\" of the template becomes \".\", which is not allowed (it would leave the template's directory)",
            ),
        );
        // Digits, other text or a third dot keep a component harmless.
        check(
            "/d/.{s}.{index}/.{s}.x/..{s}./{{.{s}}}",
            s(&[""]),
            None,
            Target::Path,
            Ok(&["/d/..0/..x/.../{.}"]),
        );
        check(
            "/d/.{s}{n}/x",
            vec![("s", strs(&[""])), ("n", Column::Ints(vec![1]))],
            None,
            Target::Path,
            Ok(&["/d/.1/x"]),
        );
    }

    #[test]
    fn out_of_range() {
        let t = Template::new("{index}", vec![], Some(2), Target::Key).unwrap();
        assert!(matches!(
            t.render(2),
            Err(Error::IndexOutOfRange { index: 2, len: 2 })
        ));
        assert!(matches!(
            t.render(u64::MAX),
            Err(Error::IndexOutOfRange {
                index: u64::MAX,
                len: 2
            })
        ));
    }

    #[test]
    fn ranges_are_made_item_by_item() {
        check(
            "k/{n}",
            vec![("n", Column::Range { start: -2, end: 1 })],
            None,
            Target::Key,
            Ok(&["k/-2", "k/-1", "k/0"]),
        );
        assert_eq!(Column::Range { start: 3, end: 3 }.len(), 0);
        assert_eq!(Column::Range { start: 3, end: -3 }.len(), 0);
        let whole = Column::Range {
            start: i64::MIN,
            end: i64::MAX,
        };
        assert_eq!(whole.len() as u64, u64::MAX);
        let t = Template::new("{n}", cols(vec![("n", whole)]), None, Target::Path).unwrap();
        assert_eq!(t.render(0).unwrap(), i64::MIN.to_string());
        assert_eq!(t.render(u64::MAX - 1).unwrap(), (i64::MAX - 1).to_string());
        // Lengths are compared without making the values.
        let err = Template::new(
            "{x}/{y}",
            cols(vec![
                (
                    "x",
                    Column::Range {
                        start: 0,
                        end: i64::MAX,
                    },
                ),
                ("y", Column::Ints(vec![1, 2])),
            ]),
            None,
            Target::Url,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "columns have different lengths: 'x' has 9223372036854775807 values, 'y' has 2"
        );
    }

    #[test]
    fn unsigned_ints_are_decimal() {
        check(
            "k/{n}",
            vec![("n", Column::UInts(vec![u64::MAX, 1 << 63, 0]))],
            None,
            Target::Key,
            Ok(&["k/18446744073709551615", "k/9223372036854775808", "k/0"]),
        );
    }

    proptest! {
        #[test]
        fn values_never_add_a_slash_to_paths_or_keys(value in any::<String>(), key in any::<bool>()) {
            let target = if key { Target::Key } else { Target::Path };
            if let Ok(t) = Template::new("{v}", cols(vec![("v", Column::Strs(vec![value.clone()]))]), None, target) {
                let rendered = t.render(0).unwrap();
                prop_assert_eq!(&rendered, &value);
                prop_assert!(!rendered.contains('/'));
                prop_assert!(rendered != "." && rendered != "..");
            }
        }

        #[test]
        fn url_values_are_one_component(value in any::<String>()) {
            prop_assume!(value != "." && value != "..");
            let t = Template::new("{v}", cols(vec![("v", Column::Strs(vec![value.clone()]))]), None, Target::Url).unwrap();
            let rendered = t.render(0).unwrap();
            prop_assert!(rendered.chars().all(|c| c.is_ascii_alphanumeric() || "-._~%".contains(c)), "{}", rendered);
            let decoded = percent_encoding::percent_decode_str(&rendered).decode_utf8().unwrap();
            prop_assert_eq!(decoded, value);
        }

        #[test]
        fn ints_are_decimal(values in proptest::collection::vec(any::<i64>(), 1..20)) {
            let t = Template::new("k/{n}.png", cols(vec![("n", Column::Ints(values.clone()))]), None, Target::Key).unwrap();
            for (i, v) in values.iter().enumerate() {
                prop_assert_eq!(t.render(i as u64).unwrap(), format!("k/{v}.png"));
            }
        }
    }
}
