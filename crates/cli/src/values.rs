//! Parsing the values of options: `NAME=VALUES` columns, `NAME:VALUE` headers, `KEY=VALUE`
//! object-store options, seconds; and the placeholders a template uses.

use std::time::Duration;

use dlrs_io::Column;

/// `NAME=VALUES`: `a,b,c`, `START..END` (ints, end excluded) or `@FILE` (one value a line).
/// Values that are all plain decimal ints (no sign but `-`, no leading zero) become ints. A
/// range stays a range ([`Column::Range`]): its values are made item by item, so its length
/// costs nothing and is compared with the other columns' before anything is made.
pub fn parse_column(arg: &str) -> Result<(String, Column), String> {
    let (name, spec) = arg
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=VALUES, got {arg:?}"))?;
    if name.is_empty() {
        return Err(format!("the column name is empty in {arg:?}"));
    }
    let values: Vec<String> = if let Some(path) = spec.strip_prefix('@') {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("column '{name}': cannot read {path:?}: {e}"))?;
        let mut lines: Vec<String> = text
            .split('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l).to_owned())
            .collect();
        if lines.last().is_some_and(String::is_empty) {
            lines.pop();
        }
        lines
    } else if let Some((start, end)) = spec.split_once("..") {
        let parse = |s: &str| {
            s.trim()
                .parse::<i64>()
                .map_err(|_| format!("column '{name}': {s:?} in the range {spec:?} is not an int"))
        };
        let (start, end) = (parse(start)?, parse(end)?);
        if end < start {
            return Err(format!(
                "column '{name}': the range {spec:?} ends before it starts"
            ));
        }
        return Ok((name.to_owned(), Column::Range { start, end }));
    } else if spec.is_empty() {
        Vec::new()
    } else {
        spec.split(',').map(str::to_owned).collect()
    };
    if values.is_empty() {
        return Err(format!("column '{name}' has no values"));
    }
    let ints: Option<Vec<i64>> = values.iter().map(|v| plain_int(v)).collect();
    let column = match ints {
        Some(ints) => Column::Ints(ints),
        None => Column::Strs(values),
    };
    Ok((name.to_owned(), column))
}

/// `v` as an int when writing the int back gives `v` again (so "007" and "+1" stay strs).
fn plain_int(v: &str) -> Option<i64> {
    v.parse::<i64>().ok().filter(|i| i.to_string() == v)
}

/// `NAME:VALUE`, spaces around the value trimmed (curl's `-H` form).
pub fn parse_header(arg: &str) -> Result<(String, String), String> {
    let (name, value) = arg
        .split_once(':')
        .ok_or_else(|| format!("expected NAME:VALUE, got {arg:?}"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("the header name is empty in {arg:?}"));
    }
    Ok((name.to_owned(), value.trim().to_owned()))
}

/// `KEY=VALUE`.
pub fn parse_option(arg: &str) -> Result<(String, String), String> {
    match arg.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_owned(), value.to_owned()))
        }
        _ => Err(format!("expected KEY=VALUE, got {arg:?}")),
    }
}

/// A finite number of seconds ≥ 0.
pub fn parse_seconds(arg: &str) -> Result<Duration, String> {
    let value: f64 = arg
        .parse()
        .map_err(|_| format!("{arg:?} is not a number of seconds"))?;
    dlrs_io::seconds("the timeout", value).map_err(|e| e.to_string())
}

/// A finite number of milliseconds ≥ 0, at most an hour.
pub fn parse_millis(arg: &str) -> Result<f64, String> {
    match arg.parse::<f64>() {
        Ok(ms) if (0.0..=3_600_000.0).contains(&ms) => Ok(ms),
        _ => Err(format!(
            "{arg:?} is not a number of milliseconds between 0 and 3600000"
        )),
    }
}

/// The byte offsets of the `{` that open placeholders in `template`, in order (`{{` and `}}`
/// skipped).
fn openings(template: &str) -> impl Iterator<Item = usize> + '_ {
    let bytes = template.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            let at = i;
            match bytes[i] {
                b'{' | b'}' if bytes.get(i + 1) == Some(&bytes[i]) => i += 2,
                b'{' => {
                    i += 1;
                    return Some(at);
                }
                _ => i += 1,
            }
        }
        None
    })
}

/// The names of the `{name}` placeholders of `template` (`{{` and `}}` skipped), in order;
/// unbalanced braces are left for [`dlrs_io::Template`] to report.
pub fn placeholders(template: &str) -> Vec<&str> {
    openings(template)
        .filter_map(|i| {
            let rest = &template[i + 1..];
            let end = rest.find(['{', '}'])?;
            (rest.as_bytes()[end] == b'}').then(|| &rest[..end])
        })
        .collect()
}

/// The byte offset of the first placeholder of `template` (a `{` that is not `{{`).
pub fn first_placeholder(template: &str) -> Option<usize> {
    openings(template).next()
}

/// `{{` and `}}` made single braces (for the literal part of a template).
pub fn unescape_braces(literal: &str) -> String {
    literal.replace("{{", "{").replace("}}", "}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn strs(v: &[&str]) -> Column {
        Column::Strs(v.iter().map(|s| (*s).to_owned()).collect())
    }

    #[test]
    fn columns() {
        let check = |arg: &str, name: &str, column: Column| {
            assert_eq!(
                parse_column(arg).unwrap(),
                (name.to_owned(), column),
                "{arg}"
            );
        };
        check("x=1,2,-3", "x", Column::Ints(vec![1, 2, -3]));
        check("x=0..4", "x", Column::Range { start: 0, end: 4 });
        check("x=-2..-1", "x", Column::Range { start: -2, end: -1 });
        check("x=3..3", "x", Column::Range { start: 3, end: 3 });
        let all = Column::Range {
            start: 0,
            end: i64::MAX,
        };
        assert_eq!(all.len() as u64, i64::MAX as u64);
        check("x=0..9223372036854775807", "x", all);
        check("s=a.tif,b c", "s", strs(&["a.tif", "b c"]));
        check("s=007,8", "s", strs(&["007", "8"]));
        check("s=+1", "s", strs(&["+1"]));
        check("s=a=b", "s", strs(&["a=b"]));
        check("s=,", "s", strs(&["", ""]));
    }

    #[test]
    fn column_files() {
        let dir = std::env::temp_dir().join(format!("dlrs-cli-values-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("v.txt");
        std::fs::write(&file, "10\r\n20\n30\n").unwrap();
        assert_eq!(
            parse_column(&format!("x=@{}", file.display())).unwrap().1,
            Column::Ints(vec![10, 20, 30])
        );
        std::fs::write(&file, "a\n\nb").unwrap();
        assert_eq!(
            parse_column(&format!("x=@{}", file.display())).unwrap().1,
            strs(&["a", "", "b"])
        );
        std::fs::write(&file, "").unwrap();
        let err = parse_column(&format!("x=@{}", file.display())).unwrap_err();
        assert_eq!(err, "column 'x' has no values");
        let err = parse_column(&format!("x=@{}", dir.join("missing").display())).unwrap_err();
        assert!(err.starts_with("column 'x': cannot read"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn column_errors() {
        for (arg, message) in [
            ("x", "expected NAME=VALUES, got \"x\""),
            ("=1", "the column name is empty in \"=1\""),
            ("x=", "column 'x' has no values"),
            (
                "x=3..1",
                "column 'x': the range \"3..1\" ends before it starts",
            ),
            (
                "x=a..3",
                "column 'x': \"a\" in the range \"a..3\" is not an int",
            ),
        ] {
            assert_eq!(parse_column(arg).unwrap_err(), message, "{arg}");
        }
    }

    #[test]
    fn headers_options_seconds() {
        assert_eq!(
            parse_header("Authorization: Bearer a:b").unwrap(),
            ("Authorization".into(), "Bearer a:b".into())
        );
        assert!(parse_header("novalue").is_err());
        assert!(parse_header(" : x").is_err());
        assert_eq!(
            parse_option("aws_region=eu-west-3").unwrap(),
            ("aws_region".into(), "eu-west-3".into())
        );
        assert!(parse_option("=x").is_err());
        assert!(parse_option("x").is_err());
        assert_eq!(parse_seconds("1.5").unwrap(), Duration::from_millis(1500));
        assert!(
            parse_seconds("-1")
                .unwrap_err()
                .contains("finite number of seconds")
        );
        assert!(parse_seconds("inf").is_err());
        assert!(parse_seconds("x").is_err());
        assert_eq!(parse_millis("2.5").unwrap(), 2.5);
        assert!(parse_millis("NaN").is_err());
    }

    #[test]
    fn placeholder_scan() {
        assert_eq!(placeholders("a{x}/{index}_{y}"), ["x", "index", "y"]);
        assert_eq!(placeholders("{{x}}{y}"), ["y"]);
        assert_eq!(placeholders("{x"), Vec::<&str>::new());
        assert_eq!(first_placeholder("s3://b/{{p}}/{k}"), Some(13));
        assert_eq!(first_placeholder("s3://b/k"), None);
        assert_eq!(unescape_braces("a{{b}}"), "a{b}");
    }

    proptest! {
        #[test]
        fn int_lists_round_trip(v in proptest::collection::vec(any::<i64>(), 1..20)) {
            let arg = format!("n={}", v.iter().map(i64::to_string).collect::<Vec<_>>().join(","));
            prop_assert_eq!(parse_column(&arg).unwrap().1, Column::Ints(v));
        }

        #[test]
        fn placeholders_are_found(names in proptest::collection::vec("[a-z]{1,6}", 0..5), lit in "[a-z/._]{0,5}") {
            let t: String = names.iter().map(|n| format!("{lit}{{{n}}}{{{{{lit}}}}}")).collect();
            let found: Vec<&str> = placeholders(&t);
            prop_assert_eq!(found, names.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }
}
