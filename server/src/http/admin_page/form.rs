//! What the sections' forms are made of: the hidden fields every write
//! carries, labelled inputs and selects with their hints and problems, money
//! as people type and read it, and query values for links.

use std::fmt::{self, Write};

use super::html::Escaped;

/// The hidden fields every write form carries: this session's CSRF token
/// and a fresh idempotency key, so sending the same form twice (a double
/// click, a browser resubmit) applies it once.
pub(super) fn write_fields(b: &mut String, csrf: &str) -> fmt::Result {
    write!(
        b,
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <input type=\"hidden\" name=\"{}\" value=\"{}\">",
        Escaped(csrf),
        super::write::KEY_FIELD,
        super::write::fresh_key()
    )
}

/// One labelled input, with its hint and, after a refusal, its problem
/// (linked with `aria-describedby` and marked `aria-invalid`).
pub(super) struct Field<'a> {
    pub(super) id: &'a str,
    pub(super) name: &'a str,
    pub(super) label: &'a str,
    pub(super) value: &'a str,
    pub(super) kind: &'a str,
    pub(super) hint: Option<&'a str>,
    pub(super) error: Option<&'a str>,
    /// Extra attributes, written as given (constants only, never input).
    pub(super) attrs: &'static str,
}

impl<'a> Field<'a> {
    pub(super) fn text(id: &'a str, label: &'a str, value: &'a str) -> Self {
        Field {
            id,
            name: id,
            label,
            value,
            kind: "text",
            hint: None,
            error: None,
            attrs: "",
        }
    }

    pub(super) fn hint(self, hint: &'a str) -> Self {
        Field {
            hint: Some(hint),
            ..self
        }
    }

    pub(super) fn error(self, error: Option<&'a str>) -> Self {
        Field { error, ..self }
    }

    pub(super) fn kind(self, kind: &'a str) -> Self {
        Field { kind, ..self }
    }

    pub(super) fn attrs(self, attrs: &'static str) -> Self {
        Field { attrs, ..self }
    }
}

fn described_by(b: &mut String, f_id: &str, hint: bool, error: bool) -> fmt::Result {
    if !hint && !error {
        return Ok(());
    }
    b.push_str(" aria-describedby=\"");
    if error {
        write!(b, "{}-error", Escaped(f_id))?;
    }
    if hint {
        write!(b, "{}{}-hint", if error { " " } else { "" }, Escaped(f_id))?;
    }
    b.push('"');
    Ok(())
}

fn field_tail(b: &mut String, id: &str, hint: Option<&str>, error: Option<&str>) -> fmt::Result {
    if let Some(e) = error {
        write!(
            b,
            "<span class=\"field-error\" id=\"{}-error\">{}</span>",
            Escaped(id),
            Escaped(e)
        )?;
    }
    if let Some(h) = hint {
        write!(
            b,
            "<span class=\"hint\" id=\"{}-hint\">{}</span>",
            Escaped(id),
            Escaped(h)
        )?;
    }
    b.push_str("</div>");
    Ok(())
}

pub(super) fn input(b: &mut String, f: &Field<'_>) -> fmt::Result {
    write!(
        b,
        "<div class=\"field\"><label for=\"{id}\">{}</label>\
         <input type=\"{}\" id=\"{id}\" name=\"{}\" value=\"{}\"{}",
        Escaped(f.label),
        Escaped(f.kind),
        Escaped(f.name),
        Escaped(f.value),
        if f.error.is_some() {
            " aria-invalid=\"true\""
        } else {
            ""
        },
        id = Escaped(f.id),
    )?;
    described_by(b, f.id, f.hint.is_some(), f.error.is_some())?;
    if !f.attrs.is_empty() {
        write!(b, " {}", f.attrs)?;
    }
    b.push('>');
    field_tail(b, f.id, f.hint, f.error)
}

/// A labelled `<select>`: `options` are (value, text); `selected` is a value.
pub(super) fn select(
    b: &mut String,
    f: &Field<'_>,
    options: &[(&str, &str)],
    selected: &str,
) -> fmt::Result {
    write!(
        b,
        "<div class=\"field\"><label for=\"{id}\">{}</label><select id=\"{id}\" name=\"{}\"{}",
        Escaped(f.label),
        Escaped(f.name),
        if f.error.is_some() {
            " aria-invalid=\"true\""
        } else {
            ""
        },
        id = Escaped(f.id),
    )?;
    described_by(b, f.id, f.hint.is_some(), f.error.is_some())?;
    b.push('>');
    for (value, text) in options {
        write!(
            b,
            "<option value=\"{}\"{}>{}</option>",
            Escaped(value),
            if *value == selected { " selected" } else { "" },
            Escaped(text)
        )?;
    }
    b.push_str("</select>");
    field_tail(b, f.id, f.hint, f.error)
}

/// Minor units as people write money: `123456` → "1,234.56".
pub(super) fn money(minor: i64) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let abs = minor.unsigned_abs();
    let units = (abs / 100).to_string();
    let mut grouped = String::new();
    for (i, c) in units.chars().enumerate() {
        if i > 0 && (units.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(c);
    }
    format!("{sign}{grouped}.{:02}", abs % 100)
}

/// Money as an operator types it ("24", "24.5", "1,024.50") → minor units.
/// Negative amounts and more than two decimals are refused in words.
pub(super) fn parse_money(raw: &str) -> Result<i64, String> {
    let cleaned: String = raw
        .trim()
        .chars()
        .filter(|c| *c != ',' && !c.is_whitespace())
        .collect();
    let refuse = || format!("“{}” is not an amount like 24.00", raw.trim());
    if cleaned.is_empty() {
        return Err("enter an amount, like 24.00".to_owned());
    }
    if cleaned.starts_with('-') {
        return Err("must not be negative".to_owned());
    }
    let (units, cents) = cleaned.split_once('.').unwrap_or((&cleaned, ""));
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    if units.is_empty() && cents.is_empty() || !digits(units) || !digits(cents) || cents.len() > 2 {
        return Err(refuse());
    }
    let units: i64 = if units.is_empty() {
        0
    } else {
        units.parse().map_err(|_| refuse())?
    };
    let cents: i64 = format!("{cents:0<2}").parse().map_err(|_| refuse())?;
    units
        .checked_mul(100)
        .and_then(|u| u.checked_add(cents))
        .ok_or_else(|| "is too large".to_owned())
}

/// Text as a URL query value: everything but RFC 3986's unreserved
/// characters percent-encoded.
pub(super) fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_reads_and_parses_like_people_write_it() {
        assert_eq!(money(123456), "1,234.56");
        assert_eq!(money(5), "0.05");
        assert_eq!(money(100_000_000), "1,000,000.00");
        assert_eq!(parse_money("24"), Ok(2400));
        assert_eq!(parse_money(" 24.5 "), Ok(2450));
        assert_eq!(parse_money("1,024.50"), Ok(102450));
        assert_eq!(parse_money(".75"), Ok(75));
        assert!(parse_money("12.345").is_err());
        assert!(parse_money("-1").is_err());
        assert!(parse_money("abc").is_err());
        assert!(parse_money("").is_err());
        assert!(parse_money("99999999999999999999").is_err());
        assert_eq!(url_encode("a b&c=ü"), "a%20b%26c%3D%C3%BC");
    }
}
