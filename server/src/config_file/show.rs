//! What `check-config` prints: every setting, its value as TOML (secrets
//! redacted) and where it came from.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Arg;

use super::{is_switch, DEFAULT_PATH};

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Flag,
    /// The environment variable's name.
    Env(String),
    /// The line in the config file.
    File(usize),
    Default,
    /// No value and no default (an optional setting left out).
    Unset,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Flag => f.write_str("flag"),
            Source::Env(name) => write!(f, "env {name}"),
            Source::File(line) => write!(f, "file, line {line}"),
            Source::Default => f.write_str("default"),
            Source::Unset => f.write_str("default: not set"),
        }
    }
}

/// One setting of the effective configuration, its value already redacted
/// when it is a secret.
#[derive(Debug, Clone)]
pub struct Setting {
    pub key: String,
    /// As TOML (quoted string, number or boolean); `None` when unset.
    pub value: Option<String>,
    pub source: Source,
}

/// What `serve` runs with: every setting and its source, for `check-config`.
#[derive(Debug, Clone)]
pub struct Effective {
    /// The config file read, if any.
    pub file: Option<PathBuf>,
    pub settings: Vec<Setting>,
}

impl Effective {
    /// The report `check-config` prints: TOML a reader can paste back into
    /// the file, each line saying where its value came from.
    pub fn render(&self) -> String {
        let mut out = String::from("# holdfast-server serve: effective configuration\n");
        match &self.file {
            Some(path) => {
                let _ = writeln!(out, "# config file: {}", path.display());
            }
            None => {
                let _ = writeln!(out, "# config file: none ({DEFAULT_PATH} does not exist)");
            }
        }
        out.push_str("# precedence: flag > env > file > default; secrets redacted\n");
        let width = self
            .settings
            .iter()
            .map(|s| s.key.len() + 3 + s.value.as_deref().map_or(0, str::len))
            .max()
            .unwrap_or(0);
        for s in &self.settings {
            let line = match &s.value {
                Some(value) => format!("{} = {value}", s.key),
                None => format!("# {} (not set)", s.key),
            };
            let _ = writeln!(out, "{line:<width$}  # {}", s.source);
        }
        out
    }

    pub fn get(&self, key: &str) -> Option<&Setting> {
        self.settings.iter().find(|s| s.key == key)
    }
}

/// A parser's message never echoes the URL it refused, but make sure.
pub(super) fn redact_secrets_in(message: &str, url: &str) -> String {
    if message.contains(url) {
        message.replace(url, &redact_url(url))
    } else {
        message.to_owned()
    }
}

/// How `check-config` shows a value: TOML, with secrets redacted.
pub(super) fn display_value(arg: &Arg, raw: &str) -> String {
    let id = arg.get_id().as_str();
    if id.ends_with("_url") {
        return toml_string(&redact_url(raw));
    }
    let secret = ["password", "secret", "token", "key"]
        .iter()
        .any(|word| id.split('_').any(|part| part == *word));
    if secret || arg.is_hide_env_values_set() {
        return toml_string("<redacted>");
    }
    if is_switch(arg) || raw.parse::<i64>().is_ok() {
        return raw.to_owned();
    }
    toml_string(raw)
}

/// A database URL without its password (in the authority or the query).
pub fn redact_url(raw: &str) -> String {
    let Ok(mut url) = url::Url::parse(raw) else {
        return "<redacted: not a URL>".to_owned();
    };
    if url.password().is_some() && url.set_password(Some("REDACTED")).is_err() {
        return "<redacted>".to_owned();
    }
    if url.query().is_some() {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let secret = k.contains("password") || k.contains("secret");
                let v = if secret {
                    "REDACTED".to_owned()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.to_string()
}

pub(super) fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_url_passwords_are_redacted() {
        let shown = redact_url(
            "postgres://holdfast:s3cr%3At@db.example:5432/holdfast?sslmode=require&password=other",
        );
        assert!(!shown.contains("s3cr"), "{shown}");
        assert!(!shown.contains("other"), "{shown}");
        assert!(shown.contains("db.example:5432/holdfast"), "{shown}");
        assert!(shown.contains("sslmode=require"), "{shown}");
        assert_eq!(redact_url("not a url s3cret"), "<redacted: not a URL>");
    }
}
