//! Reading a catalog file into rows, each valid on its own: every bad cell
//! is named by line and column, and nothing is looked up.

use holdfast_protocol::problem::FieldError;

use super::{Row, MAX_TEXT};
use crate::master::sheet::{self, error, Layout};

const LAYOUT: Layout = Layout {
    required: &["code", "style", "color", "size", "wholesale_price", "msrp"],
    optional: &["active"],
    expected: "code,style,color,size,wholesale_price,msrp[,active]",
};

/// Reads a catalog file: header `code,style,color,size,wholesale_price,msrp`
/// with an optional `active` column, money in minor units. Every problem is
/// returned, each named `line N: column`.
pub fn parse(bytes: &[u8]) -> Result<Vec<Row>, Vec<FieldError>> {
    let file = sheet::read(bytes, &LAYOUT)?;
    let at = |name: &str| file.column(name).unwrap_or(0);
    let (code, style, color, size, wholesale, msrp) = (
        at("code"),
        at("style"),
        at("color"),
        at("size"),
        at("wholesale_price"),
        at("msrp"),
    );
    let active = file.column("active");

    let mut rows = Vec::new();
    let mut errors = Vec::new();
    for (line, record) in &file.rows {
        let line = *line;
        let record = match record {
            Ok(r) => r,
            Err(e) => {
                errors.push(e.clone());
                continue;
            }
        };
        let cell = |i: usize| record.get(i).unwrap_or("");
        let mut row_errors = Vec::new();
        let mut check = |field: &str, result: Result<String, String>| match result {
            Ok(v) => v,
            Err(message) => {
                row_errors.push(error(line, field, message));
                String::new()
            }
        };
        let row_code = match cell(code) {
            "" => None,
            c => Some(check("code", sheet::text(c, MAX_TEXT))),
        };
        let style = check("style", sheet::text(cell(style), MAX_TEXT));
        let color = check("color", sheet::text(cell(color), MAX_TEXT));
        let size = check("size", sheet::text(cell(size), MAX_TEXT));
        let mut money = |field: &str, value: &str| {
            sheet::money(value).unwrap_or_else(|message| {
                row_errors.push(error(line, field, message));
                0
            })
        };
        let wholesale_price = money("wholesale_price", cell(wholesale));
        let msrp = money("msrp", cell(msrp));
        let active = match active.map(cell) {
            None | Some("") => None,
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" | "yes" | "1" => Some(true),
                "false" | "no" | "0" => Some(false),
                _ => {
                    row_errors.push(error(line, "active", format!("{v:?} is not true or false")));
                    None
                }
            },
        };
        if row_errors.is_empty() {
            rows.push(Row {
                line,
                code: row_code,
                style,
                color,
                size,
                wholesale_price,
                msrp,
                active,
            });
        } else {
            errors.extend(row_errors);
        }
    }
    if errors.is_empty() {
        Ok(rows)
    } else {
        Err(errors)
    }
}
