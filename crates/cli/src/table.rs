//! The plain-text tables of the reports (`dlrs bench`, `dlrs parity`).

/// `header` and a row of `cells` per item as lines of columns as wide as their widest cell, two
/// spaces apart: the columns numbered in `left` aligned left, the others right; no line ends in
/// a space.
pub(crate) fn render<T, const N: usize>(
    header: [&str; N],
    items: &[T],
    left: &[usize],
    cells: impl Fn(&T) -> [String; N],
) -> String {
    let rows: Vec<[String; N]> = items.iter().map(cells).collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: [&str; N]| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            if left.contains(&i) {
                s.push_str(&format!("{cell:<w$}"));
            } else {
                s.push_str(&format!("{cell:>w$}"));
            }
        }
        s.truncate(s.trim_end().len());
        s.push('\n');
        s
    };
    let mut out = line(header);
    for row in &rows {
        out.push_str(&line(row.each_ref().map(String::as_str)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let rows = [
            ["a".to_owned(), "1".to_owned(), "x".to_owned()],
            ["bcd".to_owned(), "100".to_owned(), String::new()],
        ];
        assert_eq!(
            render(["name", "n", "note"], &rows, &[0, 2], Clone::clone),
            "name    n  note\na       1  x\nbcd   100\n"
        );
    }
}
