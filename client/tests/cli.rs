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
