//! The 3PL snapshot file: a small RFC 4180 CSV reader and the row rules
//! (`sku_id,qty` or `style,color,size,qty`, a header row, counts ≥ 0). Pure:
//! bytes in, rows out, each bad row carrying its line number and why.
//!
//! Hand-rolled rather than a CSV crate: the format is two fixed layouts, and
//! we need exactly what a crate makes awkward: the raw bytes (to hash), the
//! line each record starts on, and a per-row error instead of a failed file.

use sha2::{Digest, Sha256};
use uuid::Uuid;

/// A row's raw text is kept (this long at most) for the operator to find it.
const RAW_MAX_CHARS: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `sku_id,qty`
    SkuId,
    /// `style,color,size,qty`
    StyleColorSize,
}

/// How a row names its SKU.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SkuKey {
    Id(Uuid),
    Name {
        style: String,
        color: String,
        size: String,
    },
}

impl std::fmt::Display for SkuKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SkuKey::Id(id) => write!(f, "SKU id {id}"),
            SkuKey::Name { style, color, size } => {
                write!(f, "style {style:?}, color {color:?}, size {size:?}")
            }
        }
    }
}

/// One data row (blank lines are not rows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// 1-based line of the file the row starts on.
    pub line: u64,
    /// The row as written, truncated, lossily decoded.
    pub raw: String,
    /// The SKU and the counted quantity, or why the row is unusable.
    pub parsed: Result<(SkuKey, i64), String>,
}

#[derive(Debug)]
pub struct Snapshot {
    /// SHA-256 of the file's exact bytes: a run's identity.
    pub sha256: [u8; 32],
    pub format: Format,
    pub rows: Vec<Row>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SnapshotError {
    #[error("the file is empty: expected a header row `sku_id,qty` or `style,color,size,qty`")]
    Empty,
    #[error(
        "line {line}: unrecognised header {found:?}; expected `sku_id,qty` or `style,color,size,qty`"
    )]
    BadHeader { line: u64, found: String },
}

/// Reads a whole snapshot. Only a missing or unrecognised header fails the
/// file; every other problem is a row error, so one typo never hides the rest.
pub fn parse(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
    let sha256: [u8; 32] = Sha256::digest(bytes).into();
    // Spreadsheet exports often start with a UTF-8 byte order mark.
    let body = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let mut records = Records::new(body).filter(|r| !r.is_blank());
    let header = records.next().ok_or(SnapshotError::Empty)?;
    let format = header_format(&header)?;
    let rows = records.map(|r| row(format, r)).collect();
    Ok(Snapshot {
        sha256,
        format,
        rows,
    })
}

fn header_format(header: &Record) -> Result<Format, SnapshotError> {
    let names: Option<Vec<String>> = header.fields.as_ref().ok().map(|fields| {
        fields
            .iter()
            .map(|f| String::from_utf8_lossy(f).trim().to_ascii_lowercase())
            .collect()
    });
    let names: Vec<&str> = names
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(String::as_str)
        .collect();
    match names.as_slice() {
        ["sku_id", "qty"] => Ok(Format::SkuId),
        ["style", "color" | "colour", "size", "qty"] => Ok(Format::StyleColorSize),
        _ => Err(SnapshotError::BadHeader {
            line: header.line,
            found: header.raw.clone(),
        }),
    }
}

fn row(format: Format, record: Record) -> Row {
    let parsed = record.fields.and_then(|fields| fields_of(format, &fields));
    Row {
        line: record.line,
        raw: record.raw,
        parsed,
    }
}

fn fields_of(format: Format, fields: &[Vec<u8>]) -> Result<(SkuKey, i64), String> {
    let mut text = Vec::with_capacity(fields.len());
    for (i, f) in fields.iter().enumerate() {
        let s =
            std::str::from_utf8(f).map_err(|_| format!("field {} is not valid UTF-8", i + 1))?;
        text.push(s.trim());
    }
    match (format, text.as_slice()) {
        (Format::SkuId, [id, qty]) => {
            let id = Uuid::parse_str(id).map_err(|_| format!("sku_id {id:?} is not a UUID"))?;
            Ok((SkuKey::Id(id), quantity(qty)?))
        }
        (Format::StyleColorSize, [style, color, size, qty]) => {
            if style.is_empty() || color.is_empty() || size.is_empty() {
                return Err("style, color and size must all be given".to_owned());
            }
            let key = SkuKey::Name {
                style: (*style).to_owned(),
                color: (*color).to_owned(),
                size: (*size).to_owned(),
            };
            Ok((key, quantity(qty)?))
        }
        (Format::SkuId, _) => Err(format!(
            "expected 2 fields (sku_id,qty), found {}",
            text.len()
        )),
        (Format::StyleColorSize, _) => Err(format!(
            "expected 4 fields (style,color,size,qty), found {}",
            text.len()
        )),
    }
}

fn quantity(s: &str) -> Result<i64, String> {
    match s.parse::<i64>() {
        Ok(n) if n >= 0 => Ok(n),
        Ok(n) => Err(format!("qty {n} is negative; a count is 0 or more")),
        Err(_) => Err(format!("qty {s:?} is not a whole number")),
    }
}

/// One CSV record: where it starts, its raw text, its fields or why they
/// could not be read.
struct Record {
    line: u64,
    raw: String,
    fields: Result<Vec<Vec<u8>>, String>,
}

impl Record {
    /// A line with nothing on it (often the file's last): no data, no error.
    fn is_blank(&self) -> bool {
        matches!(&self.fields, Ok(f) if f.len() == 1 && f[0].iter().all(u8::is_ascii_whitespace))
            && !self.raw.contains('"')
    }
}

struct Records<'a> {
    bytes: &'a [u8],
    pos: usize,
    line: u64,
}

impl<'a> Records<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Records {
            bytes,
            pos: 0,
            line: 1,
        }
    }
}

impl Iterator for Records<'_> {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        let b = self.bytes;
        if self.pos >= b.len() {
            return None;
        }
        let start = self.pos;
        let line = self.line;
        let mut fields = Vec::new();
        let mut field = Vec::new();
        let mut error: Option<String> = None;
        let mut in_quotes = false;
        // Just past a closing quote: only whitespace may follow before `,`.
        let mut after_quote = false;
        let end = loop {
            let Some(&c) = b.get(self.pos) else {
                if in_quotes {
                    error.get_or_insert_with(|| "a quoted field is never closed".to_owned());
                }
                break self.pos;
            };
            if in_quotes {
                if c == b'"' {
                    if b.get(self.pos + 1) == Some(&b'"') {
                        field.push(b'"');
                        self.pos += 2;
                    } else {
                        in_quotes = false;
                        after_quote = true;
                        self.pos += 1;
                    }
                    continue;
                }
                if c == b'\n' {
                    self.line += 1;
                }
                field.push(c);
                self.pos += 1;
                continue;
            }
            match c {
                b',' => {
                    fields.push(std::mem::take(&mut field));
                    after_quote = false;
                    self.pos += 1;
                }
                b'\n' => {
                    self.pos += 1;
                    self.line += 1;
                    break self.pos - 1;
                }
                b'\r' if b.get(self.pos + 1) == Some(&b'\n') => {
                    self.pos += 2;
                    self.line += 1;
                    break self.pos - 2;
                }
                b'"' if !after_quote && field.iter().all(u8::is_ascii_whitespace) => {
                    field.clear();
                    in_quotes = true;
                    self.pos += 1;
                }
                _ => {
                    if after_quote && !c.is_ascii_whitespace() {
                        error.get_or_insert_with(|| "text after a closing quote".to_owned());
                    } else if c == b'"' {
                        error.get_or_insert_with(|| {
                            "a quote inside an unquoted field (quote the whole field and double the quote)"
                                .to_owned()
                        });
                    }
                    if !after_quote {
                        field.push(c);
                    }
                    self.pos += 1;
                }
            }
        };
        fields.push(field);
        let raw: String = String::from_utf8_lossy(&b[start..end])
            .chars()
            .take(RAW_MAX_CHARS)
            .collect();
        Some(Record {
            line,
            raw,
            fields: match error {
                Some(e) => Err(e),
                None => Ok(fields),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Parsed = Result<(SkuKey, i64), String>;

    fn rows(text: &str) -> Vec<(u64, Parsed)> {
        parse(text.as_bytes())
            .expect("parse")
            .rows
            .into_iter()
            .map(|r| (r.line, r.parsed))
            .collect()
    }

    fn name(style: &str, color: &str, size: &str) -> SkuKey {
        SkuKey::Name {
            style: style.into(),
            color: color.into(),
            size: size.into(),
        }
    }

    #[test]
    fn reads_both_layouts_with_line_numbers() {
        let id = Uuid::now_v7();
        let got = rows(&format!("sku_id,qty\n{id},5\n\n{id}, 7 \n"));
        assert_eq!(
            got,
            vec![(2, Ok((SkuKey::Id(id), 5))), (4, Ok((SkuKey::Id(id), 7)))]
        );
        let got = rows("\u{feff}Style,Colour,Size,Qty\r\nKestrel,Ecru,M,0\r\n");
        assert_eq!(got, vec![(2, Ok((name("Kestrel", "Ecru", "M"), 0)))]);
    }

    #[test]
    fn quoted_fields_may_hold_commas_quotes_and_newlines() {
        let got = rows(
            "style,color,size,qty\n\"Brightwater, \"\"Best\"\"\",\"Ecru\nBlue\",M,3\nA,B,C,1\n",
        );
        assert_eq!(
            got,
            vec![
                (2, Ok((name("Brightwater, \"Best\"", "Ecru\nBlue", "M"), 3))),
                (4, Ok((name("A", "B", "C"), 1))),
            ]
        );
    }

    #[test]
    fn bad_rows_say_why_and_where() {
        let got = rows(
            "sku_id,qty\nnope,1\n0190a8e2-6f7e-7c2a-9d55-3f1b2c4d5e6f,-4\n0190a8e2-6f7e-7c2a-9d55-3f1b2c4d5e6f,x\n1,2,3\n\"open,1\n",
        );
        let errors: Vec<(u64, String)> = got
            .into_iter()
            .map(|(line, r)| (line, r.expect_err("bad row")))
            .collect();
        assert_eq!(errors[0], (2, "sku_id \"nope\" is not a UUID".to_owned()));
        assert_eq!(
            errors[1],
            (3, "qty -4 is negative; a count is 0 or more".to_owned())
        );
        assert_eq!(errors[2], (4, "qty \"x\" is not a whole number".to_owned()));
        assert_eq!(
            errors[3],
            (5, "expected 2 fields (sku_id,qty), found 3".to_owned())
        );
        assert_eq!(errors[4], (6, "a quoted field is never closed".to_owned()));
    }

    #[test]
    fn stray_quotes_and_bad_bytes_are_row_errors() {
        let mut bytes = b"style,color,size,qty\nA\"b,C,D,1\n\"A\"x,C,D,1\n".to_vec();
        bytes.extend_from_slice(b"\xff,C,D,1\n");
        let got: Vec<_> = parse(&bytes)
            .expect("parse")
            .rows
            .into_iter()
            .map(|r| r.parsed.expect_err("bad"))
            .collect();
        assert!(
            got[0].starts_with("a quote inside an unquoted field"),
            "{got:?}"
        );
        assert_eq!(got[1], "text after a closing quote");
        assert_eq!(got[2], "field 1 is not valid UTF-8");
    }

    #[test]
    fn the_header_must_be_one_of_the_two_layouts() {
        assert_eq!(parse(b"").err(), Some(SnapshotError::Empty));
        assert_eq!(parse(b"\n\n").err(), Some(SnapshotError::Empty));
        assert!(matches!(
            parse(b"sku,count\n"),
            Err(SnapshotError::BadHeader { line: 1, .. })
        ));
    }

    #[test]
    fn the_hash_is_of_the_exact_bytes() {
        let a = parse(b"sku_id,qty\n").expect("a");
        let b = parse(b"sku_id,qty\n\n").expect("b");
        assert_ne!(a.sha256, b.sha256);
        assert_eq!(a.rows, b.rows);
    }
}
