//! The example config file the package installs as
//! /etc/holdfast/server.toml, rendered from the clap definitions.

use std::fmt::Write as _;
use std::path::Path;

use clap::CommandFactory;

use super::{display_value, is_setting, toml_string};
use crate::config::Cli;

/// The example config file the package installs: every setting, commented
/// out with its default, under its `--help` text. Generated from the clap
/// definitions so it cannot drift from `--help` (a test compares it with
/// `server/debian/server.toml`).
pub fn example() -> String {
    let mut cmd = Cli::command();
    cmd.build();
    let mut out = String::from(
        "# /etc/holdfast/server.toml: the configuration of `holdfast-server serve`.\n\
         #\n\
         # Every setting is a top-level key named like its flag in snake case\n\
         # (--db-pool-size is db_pool_size). Precedence: flag > environment\n\
         # variable > this file > default. Each setting below is commented out\n\
         # with its default; uncomment to change it. Check the result (and see\n\
         # where each value comes from) with:\n\
         #     holdfast-server check-config\n\
         # An unknown key or a bad value stops the server, naming the key.\n\
         #\n\
         # Secrets (database_url with a password) are better kept out of this\n\
         # file: put DATABASE_URL=... in /etc/default/holdfast-server (mode 0600),\n\
         # which the systemd unit reads.\n",
    );
    let Some(serve) = cmd.find_subcommand("serve") else {
        return out;
    };
    for arg in serve.get_arguments().filter(|a| is_setting(a)) {
        out.push('\n');
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let mut help = help.trim_end().to_owned();
        if !help.ends_with('.') {
            help.push('.');
        }
        for line in wrap(&help, 76) {
            let _ = writeln!(out, "# {line}");
        }
        let long = arg.get_long().unwrap_or_default();
        match arg.get_env() {
            Some(env) => {
                let _ = writeln!(
                    out,
                    "# Flag --{long}, environment {}.",
                    env.to_string_lossy()
                );
            }
            None => {
                let _ = writeln!(out, "# Flag --{long}.");
            }
        }
        let id = arg.get_id().as_str();
        let default: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        if default.is_empty() {
            let placeholder = UNSET_EXAMPLES
                .iter()
                .find(|(key, _)| *key == id)
                .map(|(_, example)| (*example).to_owned())
                .or_else(|| {
                    arg.get_value_names()
                        .and_then(|names| names.first())
                        .map(|n| n.to_string())
                })
                .unwrap_or_else(|| id.to_uppercase());
            let _ = writeln!(
                out,
                "# Not set by default; for example:\n#{id} = {}",
                toml_string(&placeholder)
            );
        } else {
            let _ = writeln!(out, "#{id} = {}", display_value(arg, &default.join(" ")));
        }
    }
    out
}

fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for paragraph in text.split("\n\n") {
        if !lines.is_empty() {
            lines.push(String::new());
        }
        let mut line = String::new();
        for word in paragraph.split_whitespace() {
            if !line.is_empty() && line.len() + 1 + word.len() > width {
                lines.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        if !line.is_empty() {
            lines.push(line);
        }
    }
    lines
}

/// What the example shows for settings that have no default.
const UNSET_EXAMPLES: [(&str, &str); 3] = [
    ("data_dir", "/var/lib/holdfast"),
    (
        "database_url",
        "postgres://holdfast:PASSWORD@db.example.com:5432/holdfast",
    ),
    (
        "read_database_url",
        "postgres://holdfast:PASSWORD@replica.example.com:5432/holdfast",
    ),
];

/// Where the package keeps the example (the source of /etc/holdfast/server.toml).
pub fn example_path() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/debian/server.toml"))
}

#[cfg(test)]
mod tests {
    use super::super::check_file;
    use super::*;
    use clap::Arg;

    /// Nobody edits the packaged example by hand: it is this output.
    /// HOLDFAST_WRITE_EXAMPLE_CONFIG=1 rewrites it after a flag changed.
    #[test]
    fn the_packaged_example_matches_the_flags() {
        let expected = example();
        let path = example_path();
        if std::env::var_os("HOLDFAST_WRITE_EXAMPLE_CONFIG").is_some() {
            std::fs::write(path, &expected).expect("write the example");
        }
        let actual = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            actual == expected,
            "{} is out of step with the serve flags; rewrite it with\n  \
             HOLDFAST_WRITE_EXAMPLE_CONFIG=1 cargo test -p holdfast-server --lib config_file",
            path.display()
        );
        // The example, uncommented, is itself a valid file of defaults.
        let uncommented: String = expected
            .lines()
            .filter_map(|l| l.strip_prefix('#'))
            .filter(|l| l.contains(" = ") && !l.starts_with(' '))
            .filter(|l| !l.starts_with("database_url") && !l.starts_with("read_database_url"))
            .map(|l| format!("{l}\n"))
            .collect();
        let mut cmd = Cli::command();
        cmd.build();
        let settings: Vec<Arg> = cmd
            .find_subcommand("serve")
            .map(|s| {
                s.get_arguments()
                    .filter(|a| is_setting(a))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let values = check_file(&uncommented, &settings).expect("the defaults are valid");
        assert_eq!(
            values.len(),
            settings.len() - 2,
            "every setting but the two database URLs"
        );
    }
}
