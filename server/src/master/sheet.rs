//! Reading an operator's CSV file: the header checked against the columns a
//! file kind takes, then every data row with its line number, every problem
//! named `line N: column` so a refused file can be fixed in one pass.

use holdfast_protocol::problem::FieldError;

/// API.md: up to 100,000 rows per file.
pub const MAX_ROWS: usize = 100_000;

/// A file's columns: which are required, which may be left out, and how the
/// header reads in an error message (`code,style,…[,active]`).
pub struct Layout {
    pub required: &'static [&'static str],
    pub optional: &'static [&'static str],
    pub expected: &'static str,
}

/// A file whose header matched its [`Layout`].
#[derive(Debug)]
pub struct Sheet {
    header: Vec<String>,
    /// Data rows that are not blank, with the line each came from, in file
    /// order; a row that is not valid CSV is its error (`line N: row`), so a
    /// caller names it in order among the bad cells of the other rows.
    pub rows: Vec<(u64, Result<csv::StringRecord, FieldError>)>,
}

impl Sheet {
    /// The index of a column (required ones are always there).
    pub fn column(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }
}

/// Reads the header and every row; blank rows are skipped. A bad header is
/// the whole answer (nothing below it can be read); bad rows are kept as
/// their errors in [`Sheet::rows`].
pub fn read(bytes: &[u8], layout: &Layout) -> Result<Sheet, Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .flexible(false)
        .from_reader(bytes);
    let header: Vec<String> = match reader.headers() {
        Ok(h) => h.iter().map(|c| c.to_ascii_lowercase()).collect(),
        Err(e) => return Err(vec![error(1, "header", csv_message(&e))]),
    };
    for name in layout.required {
        if !header.iter().any(|h| h == name) {
            errors.push(error(
                1,
                "header",
                format!(
                    "the `{name}` column is missing (expected {})",
                    layout.expected
                ),
            ));
        }
    }
    for name in &header {
        let known =
            layout.required.contains(&name.as_str()) || layout.optional.contains(&name.as_str());
        if !known {
            errors.push(error(1, "header", format!("unknown column `{name}`")));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }

    let mut rows = Vec::new();
    for record in reader.records() {
        let (line, row) = match record {
            Ok(r) if r.iter().all(str::is_empty) => continue,
            Ok(r) => (r.position().map_or(0, |p| p.line()), Ok(r)),
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line());
                (line, Err(error(line, "row", csv_message(&e))))
            }
        };
        if rows.len() >= MAX_ROWS {
            let too_many = format!("a file holds at most {MAX_ROWS} rows; split it");
            rows.push((line, Err(error(line, "row", too_many))));
            break;
        }
        rows.push((line, row));
    }
    Ok(Sheet { header, rows })
}

/// `line N: field` and what is wrong with it.
pub fn error(line: u64, field: &str, message: impl Into<String>) -> FieldError {
    FieldError {
        field: format!("line {line}: {field}"),
        message: message.into(),
    }
}

fn csv_message(e: &csv::Error) -> String {
    match e.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!("has {len} fields, the header has {expected_len}"),
        csv::ErrorKind::Utf8 { .. } => "is not UTF-8 text".into(),
        _ => "is not valid CSV".into(),
    }
}

/// A money cell: a whole number of minor units, at least 0.
pub fn money(value: &str) -> Result<i64, String> {
    match value.parse::<i64>() {
        Ok(v) if v >= 0 => Ok(v),
        _ => Err(format!("{value:?} is not a whole number of cents ≥ 0")),
    }
}

/// A text cell of 1–`max` characters with no NUL.
pub fn text(value: &str, max: usize) -> Result<String, String> {
    if value.is_empty() {
        Err("is empty".into())
    } else if value.chars().count() > max || value.contains('\0') {
        Err(format!("must be 1–{max} characters of text"))
    } else {
        Ok(value.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYOUT: Layout = Layout {
        required: &["name", "price"],
        optional: &["note"],
        expected: "name,price[,note]",
    };

    #[test]
    fn blank_rows_are_skipped_and_lines_are_the_files() {
        let sheet = read(b"name,price\nA,1\n\n,\nB,2\n", &LAYOUT).expect("valid");
        let lines: Vec<u64> = sheet.rows.iter().map(|(l, _)| *l).collect();
        assert!(sheet.rows.iter().all(|(_, r)| r.is_ok()));
        assert_eq!(lines, [2, 5]);
        assert_eq!(sheet.column("price"), Some(1));
        assert_eq!(sheet.column("note"), None);
    }

    #[test]
    fn a_short_row_and_a_bad_header_are_named() {
        let sheet = read(b"name,price\nA\nB,2\n", &LAYOUT).expect("header fine");
        let short = sheet.rows[0].1.as_ref().expect_err("short row");
        assert_eq!(short.field, "line 2: row");
        assert!(sheet.rows[1].1.is_ok());
        let errors = read(b"name,cost\n", &LAYOUT).expect_err("bad header");
        assert!(errors.iter().all(|e| e.field == "line 1: header"));
        assert_eq!(errors.len(), 2, "{errors:?}");
    }
}
