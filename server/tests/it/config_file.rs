//! The config file as an operator meets it: `holdfast-server check-config`
//! (which parses exactly as `serve` does) run as a child process, with a file,
//! environment variables and flags layered over one another.

use std::path::Path;
use std::process::{Command, Output};

/// The binary with a clean environment for settings: nothing inherited
/// (make test exports DATABASE_URL) can leak into a layer.
fn holdfast(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_holdfast-server"));
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("HOLDFAST_") || name == "DATABASE_URL" || name == "STATE_DIRECTORY" {
            cmd.env_remove(&*name);
        }
    }
    cmd.args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run holdfast-server")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The line `check-config` prints for `key`: its value and its source.
fn setting(out: &Output, key: &str) -> (String, String) {
    let stdout = text(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| {
            panic!(
                "no `{key}` line in:\n{stdout}\nstderr:\n{}",
                text(&out.stderr)
            )
        });
    let (assignment, source) = line.split_once("  # ").expect("a source comment");
    let value = assignment
        .trim_end()
        .trim_start_matches(&format!("{key} = "))
        .to_owned();
    (value, source.trim().to_owned())
}

fn write(path: &Path, contents: &str) {
    std::fs::write(path, contents).expect("write config file");
}

#[test]
fn precedence_is_flag_then_env_then_file_then_default() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("server.toml");
    write(&file, "# pool\ndb_pool_size = 10\nrelay_workers = 0\n");
    let config = file.to_str().expect("utf-8 path");

    // Default: no file.
    let out = holdfast(&["check-config"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        setting(&out, "db_pool_size"),
        ("32".into(), "default".into())
    );

    // File over default (and the line is named).
    let out = holdfast(&["check-config", "--config", config], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        setting(&out, "db_pool_size"),
        ("10".into(), "file, line 2".into())
    );
    assert_eq!(
        setting(&out, "relay_workers"),
        ("0".into(), "file, line 3".into())
    );

    // Env over file.
    let env = [("HOLDFAST_DB_POOL_SIZE", "11")];
    let out = holdfast(&["check-config", "--config", config], &env);
    assert_eq!(
        setting(&out, "db_pool_size"),
        ("11".into(), "env HOLDFAST_DB_POOL_SIZE".into())
    );
    assert_eq!(
        setting(&out, "relay_workers"),
        ("0".into(), "file, line 3".into())
    );

    // Flag over env over file.
    let out = holdfast(
        &["check-config", "--config", config, "--db-pool-size", "12"],
        &env,
    );
    assert_eq!(setting(&out, "db_pool_size"), ("12".into(), "flag".into()));

    // The file can also be named by HOLDFAST_CONFIG.
    let out = holdfast(&["check-config"], &[("HOLDFAST_CONFIG", config)]);
    assert_eq!(
        setting(&out, "db_pool_size"),
        ("10".into(), "file, line 2".into())
    );
}

#[test]
fn a_typoed_key_is_refused_by_name_by_check_config_and_serve() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("server.toml");
    write(&file, "listen = \"127.0.0.1:0\"\ndb_pool_sise = 10\n");
    let config = file.to_str().expect("utf-8 path");
    for command in ["check-config", "serve"] {
        let out = holdfast(&[command, "--config", config], &[]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{command}: {}",
            text(&out.stderr)
        );
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "{config}:2: `db_pool_sise`: unknown key (did you mean `db_pool_size`?)"
            )),
            "{command}: {stderr}"
        );
        assert!(
            out.stdout.is_empty(),
            "{command} printed: {}",
            text(&out.stdout)
        );
    }
}

#[test]
fn a_bad_value_is_refused_by_name() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("server.toml");
    write(
        &file,
        "db_acquire_timeout_ms = 0\nlisten = \"localhost\"\ndemo = \"yes\"\n",
    );
    let config = file.to_str().expect("utf-8 path");
    let out = holdfast(&["check-config", "--config", config], &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    for (line, key) in [(1, "db_acquire_timeout_ms"), (2, "listen"), (3, "demo")] {
        assert!(
            stderr.contains(&format!("{config}:{line}: `{key}`: ")),
            "{key} not named: {stderr}"
        );
    }
    assert!(stderr.contains("expects true or false"), "{stderr}");

    // Not TOML at all: the line is named too.
    write(&file, "db_pool_size = 10\nthis is not toml\n");
    let out = holdfast(&["check-config", "--config", config], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(&format!("{config}:2: ")),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn passwords_never_appear_in_check_config_output() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("server.toml");
    let password = "pa55-Wörd-in-file";
    write(
        &file,
        &format!("database_url = \"postgres://holdfast:{password}@db.example:5432/holdfast\"\n"),
    );
    let config = file.to_str().expect("utf-8 path");

    let out = holdfast(&["check-config", "--config", config], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (value, source) = setting(&out, "database_url");
    assert_eq!(source, "file, line 1");
    assert!(value.contains("db.example:5432/holdfast"), "{value}");

    // From the environment, with a second password in the query string.
    let env_url = "postgres://holdfast:env-s3cret@db.example/holdfast?password=query-s3cret";
    let env_out = holdfast(
        &["check-config", "--config", config],
        &[("DATABASE_URL", env_url)],
    );
    assert!(env_out.status.success(), "{}", text(&env_out.stderr));
    assert_eq!(setting(&env_out, "database_url").1, "env DATABASE_URL");

    for out in [&out, &env_out] {
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        for secret in [password, "pa55", "env-s3cret", "query-s3cret"] {
            assert!(!all.contains(secret), "`{secret}` leaked:\n{all}");
        }
    }
}

#[test]
fn a_bad_database_url_is_named_with_its_source_and_no_password() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("server.toml");
    write(
        &file,
        "demo = true\ndatabase_url = \"mysql://root:hunter2@db/x\"\n",
    );
    let config = file.to_str().expect("utf-8 path");
    let out = holdfast(&["check-config", "--config", config], &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("{config}:2: `database_url`: not a Postgres URL")),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");

    // From the environment: named by its variable.
    let out = holdfast(
        &["check-config"],
        &[("DATABASE_URL", "mysql://root:hunter2@db/x")],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("`database_url`: not a Postgres URL"),
        "{stderr}"
    );
    assert!(stderr.contains("(from env DATABASE_URL)"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

#[test]
fn file_values_reach_serve_as_its_settings() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("server.toml");
    write(
        &file,
        "demo = true\nrelay_workers = 0\nlisten = \"127.0.0.1:9\"\nrelay_allow_private_targets = true\n",
    );
    let config = file.to_str().expect("utf-8 path");
    let out = holdfast(
        &[
            "check-config",
            "--config",
            config,
            "--listen",
            "127.0.0.1:10",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        setting(&out, "demo"),
        ("true".into(), "file, line 1".into())
    );
    assert_eq!(
        setting(&out, "relay_workers"),
        ("0".into(), "file, line 2".into())
    );
    assert_eq!(
        setting(&out, "listen"),
        ("\"127.0.0.1:10\"".into(), "flag".into())
    );
    assert_eq!(
        setting(&out, "relay_allow_private_targets"),
        ("true".into(), "file, line 4".into())
    );
    // A switch the file turned on, the environment turns off.
    let out = holdfast(
        &["check-config", "--config", config],
        &[("HOLDFAST_DEMO", "false")],
    );
    assert_eq!(
        setting(&out, "demo"),
        ("false".into(), "env HOLDFAST_DEMO".into())
    );
}
