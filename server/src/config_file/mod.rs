//! The config file of `serve` (and `check-config`, which prints what `serve`
//! would run with): a TOML file whose top-level keys are the `serve` flags in
//! snake case, layered under flags and environment variables.
//!
//! Precedence is flag > environment > file > default. The clap definitions in
//! `config.rs` stay the one source of truth for names, env variables, defaults
//! and validation: the file's values are checked with each argument's own
//! value parser and then installed as that argument's *default*, and clap
//! parses the command line again. Clap already ranks a flag above its env
//! variable above its default, so the file slots in exactly between env and
//! default, with nothing listed twice.
//!
//! Crate choice: `toml` alone, not figment or `config`. A layering crate would
//! need a serde mirror of `ServeConfig` and its own copy of every env name and
//! default (two sources of truth that drift), and neither reports the line of
//! a bad key. `toml`'s `DeTable` keeps every key's span, so an unknown key or
//! bad value is refused with the file, line and key named.

mod example;
mod show;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, CommandFactory, FromArgMatches};

use crate::config::{Cli, Command, ServeConfig};

pub use example::{example, example_path};
use show::{display_value, redact_secrets_in, toml_string};
pub use show::{redact_url, Effective, Setting, Source};

/// Read by `serve` when it exists and no `--config` names another file.
pub const DEFAULT_PATH: &str = "/etc/holdfast/server.toml";

/// The subcommands that take `ServeConfig` and so read the file.
const LAYERED: [&str; 2] = ["serve", "check-config"];

/// Arguments that are not settings: the file's own path, and clap's own.
const NOT_SETTINGS: [&str; 3] = ["config", "help", "version"];

/// Why the command line or the config file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Clap's own outcome (a bad flag, or `--help`): `exit()` prints it.
    #[error(transparent)]
    Cli(#[from] clap::Error),
    #[error("cannot read the config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}", render_problems(.path, .problems))]
    Invalid {
        /// The file, when the problems are in it.
        path: Option<PathBuf>,
        problems: Vec<Problem>,
    },
}

/// One bad setting: its key, where it is, and what to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub key: String,
    /// 1-based line in the config file, when the problem is in it.
    pub line: Option<usize>,
    pub message: String,
}

fn render_problems(path: &Option<PathBuf>, problems: &[Problem]) -> String {
    let mut out = match path {
        Some(path) => format!("the configuration in {} is not valid:", path.display()),
        None => "the configuration is not valid:".to_owned(),
    };
    for p in problems {
        match (path, p.line) {
            (Some(path), Some(line)) => {
                let _ = write!(
                    out,
                    "\n  {}:{line}: `{}`: {}",
                    path.display(),
                    p.key,
                    p.message
                );
            }
            _ => {
                let _ = write!(out, "\n  `{}`: {}", p.key, p.message);
            }
        }
    }
    out
}

/// Parses the command line. For `serve` and `check-config` it reads the
/// config file and layers it under flags and env; the [`Effective`]
/// configuration comes back with them. Every bad key or value is reported
/// at once.
pub fn parse_cli<I, T>(args: I) -> Result<(Cli, Option<Effective>), ConfigError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let first = Cli::command().try_get_matches_from(&args)?;
    let name = match first.subcommand() {
        Some((name, _)) if LAYERED.contains(&name) => name.to_owned(),
        _ => return Ok((Cli::from_arg_matches(&first)?, None)),
    };
    let named = first
        .subcommand_matches(&name)
        .and_then(|m| m.get_one::<PathBuf>("config"))
        .cloned();
    let (path, text) = match &named {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => (Some(path.clone()), Some(text)),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.clone(),
                    source,
                })
            }
        },
        None => match std::fs::read_to_string(DEFAULT_PATH) {
            Ok(text) => (Some(PathBuf::from(DEFAULT_PATH)), Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (None, None),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: PathBuf::from(DEFAULT_PATH),
                    source,
                })
            }
        },
    };

    let mut serve_cmd = Cli::command();
    serve_cmd.build();
    let settings: Vec<Arg> = serve_cmd
        .find_subcommand(&name)
        .map(|sub| {
            sub.get_arguments()
                .filter(|a| is_setting(a))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let from_file = match &text {
        Some(text) => check_file(text, &settings).map_err(|problems| ConfigError::Invalid {
            path: path.clone(),
            problems,
        })?,
        None => BTreeMap::new(),
    };

    let cmd = Cli::command().mut_subcommand(&name, |mut sub| {
        for (key, value) in &from_file {
            sub = sub.mut_arg(key, |arg| arg.default_value(value.raw.clone()));
        }
        sub
    });
    let matches = cmd.try_get_matches_from(&args)?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    let sub = matches
        .subcommand_matches(&name)
        .ok_or_else(|| clap::Error::new(clap::error::ErrorKind::MissingSubcommand))?;

    let mut effective = Effective {
        file: path.clone(),
        settings: Vec::new(),
    };
    for arg in &settings {
        let id = arg.get_id().as_str();
        let raw: Option<Vec<String>> = sub
            .get_raw(id)
            .map(|values| values.map(|v| v.to_string_lossy().into_owned()).collect());
        let source = match sub.value_source(id) {
            Some(ValueSource::CommandLine) => Source::Flag,
            Some(ValueSource::EnvVariable) => Source::Env(
                arg.get_env()
                    .map(|e| e.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ),
            Some(ValueSource::DefaultValue) => match from_file.get(id) {
                Some(v) => Source::File(v.line),
                None => Source::Default,
            },
            _ => Source::Unset,
        };
        let value = raw.map(|values| display_value(arg, &values.join(" ")));
        effective.settings.push(Setting {
            key: id.to_owned(),
            value,
            source,
        });
    }

    let config = match &mut cli.command {
        Command::Serve(config) | Command::CheckConfig(config) => config,
        _ => return Ok((cli, Some(effective))),
    };
    config.config = path.clone();
    let problems = check_semantics(config, &effective);
    if !problems.is_empty() {
        let in_file = problems.iter().all(|p| {
            effective
                .get(&p.key)
                .is_some_and(|s| matches!(s.source, Source::File(_)))
        });
        return Err(ConfigError::Invalid {
            path: if in_file { path } else { None },
            problems,
        });
    }
    if let Some(data_dir) = effective.settings.iter_mut().find(|s| s.key == "data_dir") {
        if data_dir.value.is_none() {
            // The effective value is computed; show it.
            data_dir.value = Some(toml_string(&config.data_dir().display().to_string()));
            data_dir.source = Source::Default;
        }
    }
    Ok((cli, Some(effective)))
}

fn is_setting(arg: &Arg) -> bool {
    !NOT_SETTINGS.contains(&arg.get_id().as_str()) && !arg.is_hide_set() && arg.get_long().is_some()
}

/// Takes no value: the setting is a TOML boolean.
fn is_switch(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse)
}

/// A value from the file, as the flag would be given, and its line.
#[derive(Debug, Clone)]
struct FileValue {
    raw: String,
    line: usize,
}

/// Every key must name a setting, and every value must pass that setting's
/// own parser (the one its flag uses).
fn check_file(text: &str, settings: &[Arg]) -> Result<BTreeMap<String, FileValue>, Vec<Problem>> {
    let doc = toml::de::DeTable::parse(text).map_err(|e| {
        vec![Problem {
            key: "(syntax)".to_owned(),
            line: e.span().map(|span| line_of(text, span.start)),
            message: format!("not valid TOML: {}", e.message()),
        }]
    })?;
    let mut problems = Vec::new();
    let mut values = BTreeMap::new();
    for (key, value) in doc.get_ref() {
        let line = line_of(text, key.span().start);
        let key = key.get_ref().as_ref();
        let Some(arg) = settings.iter().find(|a| a.get_id().as_str() == key) else {
            problems.push(Problem {
                key: key.to_owned(),
                line: Some(line),
                message: unknown_key(key, settings),
            });
            continue;
        };
        match raw_value(arg, value.get_ref()).and_then(|raw| check_value(arg, &raw).map(|()| raw)) {
            Ok(raw) => {
                values.insert(key.to_owned(), FileValue { raw, line });
            }
            Err(message) => problems.push(Problem {
                key: key.to_owned(),
                line: Some(line),
                message,
            }),
        }
    }
    if problems.is_empty() {
        Ok(values)
    } else {
        Err(problems)
    }
}

fn unknown_key(key: &str, settings: &[Arg]) -> String {
    let nearest = settings
        .iter()
        .map(|a| a.get_id().as_str())
        .map(|id| (edit_distance(key, id), id))
        .min();
    let hint = match nearest {
        Some((d, id)) if d <= 3 || id.contains(key) || key.contains(id) => {
            format!(" (did you mean `{id}`?)")
        }
        _ => String::new(),
    };
    format!(
        "unknown key{hint}; the settings are the `serve` flags in snake case, as top-level keys \
         (no [sections]): see `holdfast-server serve --help`"
    )
}

/// The value as its flag would be given on the command line.
fn raw_value(arg: &Arg, value: &toml::de::DeValue<'_>) -> Result<String, String> {
    use toml::de::DeValue;
    if is_switch(arg) {
        return match value {
            DeValue::Boolean(b) => Ok(b.to_string()),
            other => Err(format!("expects true or false, not {}", kind(other))),
        };
    }
    match value {
        DeValue::String(s) => Ok(s.to_string()),
        DeValue::Integer(i) => i64::from_str_radix(&i.as_str().replace('_', ""), i.radix())
            .map(|n| n.to_string())
            .map_err(|e| format!("{i} is not a usable integer: {e}")),
        other => Err(format!("expects a string or a number, not {}", kind(other))),
    }
}

fn kind(value: &toml::de::DeValue<'_>) -> &'static str {
    use toml::de::DeValue;
    match value {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// Runs the argument's own parser on the value: a throwaway command holding
/// only this argument, without its env variable or default.
fn check_value(arg: &Arg, raw: &str) -> Result<(), String> {
    if is_switch(arg) {
        return Ok(());
    }
    let Some(long) = arg.get_long() else {
        return Ok(());
    };
    let probe = clap::Command::new("holdfast-server")
        .no_binary_name(true)
        .arg(
            arg.clone()
                .env(None::<&'static str>)
                .default_value(None::<&'static str>)
                .required(false),
        );
    match probe.try_get_matches_from([format!("--{long}={raw}")]) {
        Ok(_) => Ok(()),
        Err(e) => {
            let why = std::error::Error::source(&e)
                .map(|s| s.to_string())
                .unwrap_or_else(|| {
                    let text = e.render().to_string();
                    let first = text.lines().next().unwrap_or_default();
                    first.trim_start_matches("error: ").to_owned()
                });
            Err(format!("invalid value {}: {why}", toml_string(raw)))
        }
    }
}

/// Checks no parser can make: values that must also make sense as a whole.
fn check_semantics(config: &ServeConfig, effective: &Effective) -> Vec<Problem> {
    let mut problems = Vec::new();
    let line_of = |key: &str| match effective.get(key).map(|s| &s.source) {
        Some(Source::File(line)) => Some(*line),
        _ => None,
    };
    // Outside the file, say where the value came from instead of a line.
    let origin = |key: &str| match effective.get(key).map(|s| &s.source) {
        Some(Source::File(_)) | None => String::new(),
        Some(source) => format!(" (from {source})"),
    };
    let urls = [
        ("database_url", &config.database_url),
        ("read_database_url", &config.read_database_url),
    ];
    for (key, url) in urls {
        let Some(url) = url else { continue };
        let scheme_ok = url.starts_with("postgres://") || url.starts_with("postgresql://");
        let parsed = url.parse::<sqlx::postgres::PgConnectOptions>();
        if !scheme_ok || parsed.is_err() {
            let why = match parsed {
                Err(e) => redact_secrets_in(&e.to_string(), url),
                Ok(_) => "the scheme must be postgres:// or postgresql://".to_owned(),
            };
            problems.push(Problem {
                key: key.to_owned(),
                line: line_of(key),
                message: format!(
                    "not a Postgres URL (postgres://USER:PASSWORD@HOST:PORT/DATABASE){}: {why}",
                    origin(key)
                ),
            });
        }
    }
    problems
}

fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(0, |head| head.matches('\n').count())
        + 1
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1)
                .min(row[j] + 1)
                .min(prev + usize::from(ca != *cb));
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    //! Only what the environment cannot change: tests that depend on the
    //! layering run the binary with a clean environment
    //! (server/tests/it/config_file.rs).
    use super::*;

    fn parse(args: &[&str]) -> Result<(Cli, Option<Effective>), ConfigError> {
        let mut all = vec!["holdfast-server"];
        all.extend_from_slice(args);
        parse_cli(all)
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(f.path(), text).expect("write");
        f
    }

    fn path_of(f: &tempfile::NamedTempFile) -> &str {
        f.path().to_str().expect("utf-8 temp path")
    }

    #[test]
    fn unknown_keys_and_bad_values_are_all_named_with_their_lines() {
        let f = file(
            "db_pool_sise = 7\n\
             db_acquire_timeout_ms = 0\n\
             listen = \"nowhere\"\n\
             demo = \"yes\"\n\
             [relay]\n\
             relay_workers = 2\n",
        );
        let err = parse(&["check-config", "--config", path_of(&f)]).expect_err("refused");
        let ConfigError::Invalid { problems, .. } = &err else {
            panic!("{err}")
        };
        let named: Vec<(&str, Option<usize>)> =
            problems.iter().map(|p| (p.key.as_str(), p.line)).collect();
        assert!(named.contains(&("db_pool_sise", Some(1))), "{err}");
        assert!(named.contains(&("db_acquire_timeout_ms", Some(2))), "{err}");
        assert!(named.contains(&("listen", Some(3))), "{err}");
        assert!(named.contains(&("demo", Some(4))), "{err}");
        assert!(named.contains(&("relay", Some(5))), "{err}");
        let text = err.to_string();
        assert!(text.contains("did you mean `db_pool_size`?"), "{text}");
        assert!(
            text.contains(&format!("{}:2: `db_acquire_timeout_ms`", path_of(&f))),
            "{text}"
        );
    }

    #[test]
    fn a_named_file_must_exist() {
        let err = parse(&["serve", "--config", "/nonexistent/holdfast.toml"]).expect_err("refused");
        assert!(matches!(err, ConfigError::Read { .. }), "{err}");
        assert!(
            err.to_string().contains("/nonexistent/holdfast.toml"),
            "{err}"
        );
    }

    #[test]
    fn other_commands_ignore_the_file() {
        let (cli, effective) = parse(&["postgres", "stop", "--data-dir", "/tmp/x"]).expect("parse");
        assert!(effective.is_none());
        assert!(matches!(cli.command, Command::Postgres(_)));
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("db_pool_sise", "db_pool_size"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("listen", "listen"), 0);
    }
}
