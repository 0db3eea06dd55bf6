//! The real `holdfast` binary: driving the desk from the command line, and
//! `kill -9` at random points of a sync, over and over.

mod support;

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;

use holdfast_client::token::FileTokens;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use sqlx::PgPool;
use support::*;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

struct Cli {
    store: PathBuf,
    tokens: PathBuf,
}

impl Cli {
    fn new(dir: &Path) -> Cli {
        Cli {
            store: dir.join("desk.db"),
            tokens: dir.join("tokens.json"),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_holdfast"));
        cmd.arg("--store")
            .arg(&self.store)
            .arg("--token-file")
            .arg(&self.tokens)
            .args(args)
            .env_remove("HOLDFAST_STORE")
            .env_remove("HOLDFAST_TOKEN_FILE")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    /// Runs to the end; returns (exit status, stdout).
    async fn run(&self, args: &[&str]) -> (ExitStatus, String) {
        let out = tokio::time::timeout(DEADLINE, self.command(args).output())
            .await
            .expect("holdfast finished")
            .expect("spawn holdfast");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "holdfast {args:?}: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status, stdout)
    }

    async fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let (_, stdout) = self.run(&all).await;
        serde_json::from_str(&stdout).expect("JSON output")
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn the_cli_drives_the_desk(db: PgPool) {
    let server = Server::start(db).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cli = Cli::new(dir.path());

    let mut login = cli.command(&[
        "--json",
        "login",
        "--server",
        &server.url(),
        "--tenant",
        "acme",
        "--email",
        "dana@acme.test",
    ]);
    login.env("HOLDFAST_PASSWORD", holdfast_server::demo::DEMO_PASSWORD);
    let out = login.output().await.expect("login");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("opt-in fallback"),
        "says what it is: {stderr}"
    );
    let logged: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(logged["profile"]["user_name"], "Dana Whitfield");
    assert!(logged["token_store"]
        .as_str()
        .expect("token store")
        .contains("PLAIN FILE"));

    let created = cli
        .json(&[
            "order",
            "new",
            "--customer",
            "Austin Boutique",
            "--po",
            "FAX-1",
        ])
        .await;
    let order = created["order_id"].as_str().expect("id").to_owned();
    assert_eq!(created["sync"]["ok"], true);
    let added = cli
        .json(&[
            "order",
            "add-line",
            &order[..8],
            "--style",
            "Kestrel Overshirt",
            "--color",
            "Washed Indigo",
            "--size",
            "M",
            "--qty",
            "3",
        ])
        .await;
    let line = added["line_id"].as_str().expect("line").to_owned();
    let allocated = cli
        .json(&["order", "allocate", &order, &line[..8], "2"])
        .await;
    assert_eq!(allocated["order"]["order"]["lines"][0]["qty_allocated"], 2);
    assert_eq!(allocated["order"]["badge"], "synced");

    // Offline-style: queue without sending, see it on the paper list.
    cli.json(&[
        "--no-sync",
        "order",
        "edit",
        &order,
        "--notes",
        "ring first",
    ])
    .await;
    let status = cli.json(&["status"]).await;
    assert_eq!(status["pending"], 1);
    let (_, printout) = cli.run(&["pending"]).await;
    assert!(printout.contains("notes = ring first"), "{printout}");
    assert!(
        printout.contains(&format!("PATCH /v1/orders/{order}")),
        "{printout}"
    );
    let synced = cli.json(&["sync"]).await;
    assert_eq!(synced["report"]["applied"], 1);
    let shown = cli.json(&["order", "show", &order]).await;
    assert_eq!(shown["order"]["notes"], "ring first");
    assert_eq!(shown["order"]["version"], 4);
    let orders = cli.json(&["orders"]).await;
    assert_eq!(orders.as_array().expect("list").len(), 1);
    let skus = cli.json(&["skus", "kestrel indigo m"]).await;
    assert_eq!(skus[0]["ats"], 4);

    for args in [
        vec!["--help"],
        vec!["order", "--help"],
        vec!["order", "add-line", "--help"],
        vec!["sync", "--help"],
        vec!["resolve", "conflict", "--help"],
        vec!["resolve", "rejection", "--help"],
        vec!["conflicts", "--help"],
        vec!["pending", "--help"],
    ] {
        let (_, text) = cli.run(&args).await;
        assert!(text.contains("Usage"), "{args:?}");
    }

    let out = cli.json(&["logout"]).await;
    assert_eq!(out["revoked_on_server"], true);
    let status = cli.json(&["status"]).await;
    assert_eq!(status["signed_in"], Value::Null);
}

/// Must show: `kill -9` the CLI at random points of a sync, again and again
/// (while more acts are queued between kills); after restart nothing is lost
/// and nothing is doubled.
#[sqlx::test(migrations = "../migrations")]
async fn kill_9_mid_sync_loses_and_doubles_nothing(db: PgPool) {
    let server = Server::start(db).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cli = Cli::new(dir.path());
    let tokens = Arc::new(FileTokens::new(&cli.tokens));
    let desk = holdfast_client::Engine::open(&cli.store, tokens, fast_config()).expect("open");
    login(&desk, &server.url(), "dana@acme.test").await;
    let skus = roomy_skus(&desk, 30, 8);
    let mut rng = StdRng::seed_from_u64(0x9);
    let mut ledger = random_acts(&desk, &mut rng, 5, 100, &skus);

    let mut kills = 0;
    let mut finished = false;
    for cycle in 0..80 {
        if cycle == 4 {
            // The user keeps working between crashes.
            let more = random_acts(&desk, &mut rng, 2, 20, &skus);
            ledger.order_ids.extend(more.order_ids);
            ledger.acts.extend(more.acts);
        }
        let mut child = cli
            .command(&["--batch-size", "3", "sync"])
            .env("HOLDFAST_LOG", "holdfast_client=info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn holdfast sync");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        // Kill after a random number of pushes and pulls (0: at start-up).
        let wait_for = rng.random_range(0..5);
        let mut seen = 0;
        let mut ended = false;
        while seen < wait_for {
            match tokio::time::timeout(DEADLINE, lines.next_line())
                .await
                .expect("progress before the deadline")
                .expect("read stderr")
            {
                Some(line) if line.contains("pushed a batch") || line.contains("pulled a page") => {
                    seen += 1
                }
                Some(_) => {}
                None => {
                    ended = true;
                    break;
                }
            }
        }
        if !ended {
            // SIGKILL: no destructor, no flush, no goodbye.
            child.start_kill().expect("kill -9");
            kills += 1;
        }
        let status = tokio::time::timeout(DEADLINE, child.wait())
            .await
            .expect("the child ends")
            .expect("wait");
        if ended && status.success() && desk.status().expect("status").pending == 0 {
            finished = true;
            break;
        }
    }
    eprintln!("killed the CLI {kills} times; it finished by itself: {finished}");
    assert!(kills >= 10, "killed {kills} times");
    if !finished {
        cli.run(&["--batch-size", "3", "sync"]).await;
    }
    assert_eq!(desk.status().expect("status").pending, 0, "nothing lost");
    desk.sync_once().await.expect("final pull");
    let token = server.token("priya@acme.test").await;
    ledger.check_exactly_once(&server, &token).await;
    ledger
        .check_local_equals_server(&desk, &server, &token)
        .await;
}

/// The CLI without `--token-file`: the device token goes to the OS keychain
/// (the Secret Service), a later command signs its requests with it, and
/// `logout` takes it out again. `make test` runs this under
/// scripts/with-keyring.sh, which sets HOLDFAST_TEST_SECRET_SERVICE; a plain
/// `cargo test` skips it.
#[sqlx::test(migrations = "../migrations")]
async fn cli_keeps_its_token_in_the_keychain(db: PgPool) {
    use holdfast_client::token::{KeyringTokens, TokenStore};
    if std::env::var_os("HOLDFAST_TEST_SECRET_SERVICE").is_none() {
        eprintln!(
            "cli_keeps_its_token_in_the_keychain skipped: needs a Secret Service; \
             scripts/with-keyring.sh cargo test -p holdfast-client keychain"
        );
        return;
    }
    let server = Server::start(db).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("desk.db");
    let holdfast = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_holdfast"));
        cmd.arg("--store")
            .arg(&store)
            .args(args)
            .env_remove("HOLDFAST_STORE")
            .env_remove("HOLDFAST_TOKEN_FILE")
            .env("HOLDFAST_PASSWORD", holdfast_server::demo::DEMO_PASSWORD)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    };
    let run = |args: &'static [&'static str]| {
        let mut cmd = holdfast(args);
        async move {
            let out = tokio::time::timeout(DEADLINE, cmd.output())
                .await
                .expect("holdfast finished")
                .expect("spawn holdfast");
            assert!(
                out.status.success(),
                "holdfast {args:?}: {}\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let stdout: Value = serde_json::from_slice(&out.stdout).expect("JSON output");
            (stdout, String::from_utf8_lossy(&out.stderr).into_owned())
        }
    };

    let url = server.url();
    let out = tokio::time::timeout(
        DEADLINE,
        holdfast(&[
            "--json",
            "login",
            "--server",
            &url,
            "--tenant",
            "acme",
            "--email",
            "dana@acme.test",
        ])
        .output(),
    )
    .await
    .expect("login finished")
    .expect("spawn login");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "login: {stderr}");
    assert!(!stderr.contains("opt-in fallback"), "no file: {stderr}");
    let logged: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(logged["token_store"], "OS keychain");

    // The token is in the keyring under the store's id, and it is the live
    // device token: the server takes it.
    let store_id: String = rusqlite::Connection::open(&store)
        .expect("open the store")
        .query_row("select store_id from sync_state where id = 1", [], |r| {
            r.get(0)
        })
        .expect("store id");
    let token = KeyringTokens
        .load(&store_id)
        .expect("read the keyring")
        .expect("the token is in the keyring");
    let orders_url = format!("{url}/v1/orders?limit=1");
    let status = reqwest::Client::new()
        .get(&orders_url)
        .bearer_auth(&token)
        .send()
        .await
        .expect("get orders")
        .status();
    assert_eq!(status, 200, "the keychain's token works");

    // A later process signs its requests with it.
    let (created, _) = run(&[
        "--json",
        "order",
        "new",
        "--customer",
        "Austin Boutique",
        "--po",
        "KEYCHAIN-1",
    ])
    .await;
    assert_eq!(created["sync"]["ok"], true, "{created}");
    let order: uuid::Uuid = created["order_id"]
        .as_str()
        .expect("id")
        .parse()
        .expect("uuid");
    let reader = server.token("priya@acme.test").await;
    assert_eq!(
        server.order(&reader, order).await.customer_po.as_deref(),
        Some("KEYCHAIN-1")
    );
    let (status, _) = run(&["--json", "status"]).await;
    assert_eq!(status["token_store"], "OS keychain");
    assert_eq!(status["pending"], 0);

    // Logout revokes it and takes it out of the keyring.
    let (out, _) = run(&["--json", "logout"]).await;
    assert_eq!(out["revoked_on_server"], true);
    assert_eq!(
        KeyringTokens.load(&store_id).expect("read the keyring"),
        None
    );
    let status = reqwest::Client::new()
        .get(&orders_url)
        .bearer_auth(&token)
        .send()
        .await
        .expect("get orders")
        .status();
    assert_eq!(status, 401, "revoked");
    // No token file anywhere: only the store's own files.
    for entry in std::fs::read_dir(dir.path()).expect("read dir") {
        let name = entry.expect("entry").file_name();
        let name = name.to_string_lossy();
        assert!(name.starts_with("desk.db"), "unexpected file {name}");
    }
    eprintln!("keychain-ran: holdfast CLI login/order/logout with the token in the Secret Service");
}
