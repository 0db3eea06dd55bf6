//! The desktop process killed with work pending (issue 14): offline, two acts
//! go into the app's local outbox; the real app process is SIGKILLed (no
//! destructor, no flush); a new process on the same data dir shows them
//! still pending, signs its requests with the token it finds in the keychain
//! (there is no token file), and once the server is back each act lands on
//! the server exactly once.

use std::path::Path;
use std::time::{Duration, Instant};

use holdfast_e2e::{
    app_pids, keyring_secrets, keys, kill_9, start_tauri_driver, target_dir, wait_for, Api, Driver,
    Server,
};
use serde_json::json;

use super::{clear, open_order, operator, pending, server_order, wait_pending};

/// The fax order `walk` made.
const PO: &str = "PO-E2E-1";
/// What the note gains while the server is down.
const NOTE: &str = " - before the crash";

/// The hook in `walk`: `d` is the signed-in app on `tmp/desktop`, the server
/// up. Kills `d`'s app; `d` is dead afterwards.
pub(crate) fn crash_with_pending_work(d: &Driver, server: &mut Server, tmp: &Path) {
    let app = target_dir()
        .join("debug/holdfast-desktop")
        .canonicalize()
        .expect("the built app");
    let data = tmp.join("desktop");
    let ops = operator(server);

    // ---- the fax order, everything synced: the server's copy before.
    open_order(d, PO);
    wait_pending(d, "nothing pending before the crash", |n| n == 0);
    let before = server_order(&ops, PO);
    let version = before["version"].as_i64().expect("version");
    let line = &before["lines"][0];
    let line_id = line["id"].as_str().expect("line id").to_owned();
    let qty = line["qty_ordered"].as_i64().expect("qty");
    let notes = format!("{}{NOTE}", before["notes"].as_str().unwrap_or_default());

    // ---- offline: a note and a quantity wait in the local outbox.
    server.stop().expect("stop the server");
    d.focus("#notes").expect("notes");
    d.keys(NOTE).expect("notes");
    d.keys(keys::TAB).expect("leave notes");
    wait_pending(d, "the note pending", |n| n == 1);
    let qty_box = format!("table.lines tr[data-line-id=\"{line_id}\"] input.qty");
    wait_for("the quantity box enabled", Duration::from_secs(20), || {
        d.script(
            "const e = document.querySelector(arguments[0]); return !!e && !e.disabled;",
            json!([qty_box]),
        )
        .ok()?
        .as_bool()
        .filter(|b| *b)
    })
    .expect("quantity box");
    // The note's commit re-renders the editor, which may put the old
    // quantity back into the box between clearing and typing ("2" then "3"
    // reads "23"): type until the box reads what was typed, then leave it
    // (only leaving commits the quantity).
    let typed = (qty + 1).to_string();
    wait_for(
        "the new quantity in the box",
        Duration::from_secs(20),
        || {
            clear(d, &qty_box);
            d.focus(&qty_box).ok()?;
            d.keys(&typed).ok()?;
            d.script(
                "return document.querySelector(arguments[0]).value;",
                json!([qty_box]),
            )
            .ok()?
            .as_str()
            .filter(|v| *v == typed)
            .map(drop)
        },
    )
    .expect("type the quantity");
    d.keys(keys::TAB).expect("leave the quantity");
    let queued = wait_pending(d, "the quantity change pending too", |n| n == 2);
    d.screenshot("13-pending-before-kill").expect("shot");

    // ---- SIGKILL the app: the one process of this run on this data dir.
    let pids = wait_for("this run's app process", Duration::from_secs(20), || {
        Some(app_pids(&app, &data)).filter(|p| p.len() == 1)
    })
    .unwrap_or_else(|e| panic!("{e}: found {:?}", app_pids(&app, &data)));
    kill_9(pids[0]).expect("kill -9 the app");
    eprintln!(
        "killed the desktop app (pid {}) with {queued} acts pending",
        pids[0]
    );

    // ---- a new process on the same data dir, over a new WebDriver session.
    let (driver_proc, driver_url) =
        start_tauri_driver(&[("HOLDFAST_DESKTOP_DATA_DIR", &data)]).expect("tauri-driver");
    let d2 = wait_for(
        "a second WebDriver session",
        Duration::from_secs(60),
        || {
            Driver::new(&driver_url, &app)
                .map_err(|e| eprintln!("session: {e}"))
                .ok()
        },
    )
    .expect("session");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        after_restart(&d2, server, &data, queued, version);
        let after = server_order(&operator(server), PO);
        assert_eq!(after["notes"].as_str(), Some(notes.as_str()), "the note");
        let line = after["lines"]
            .as_array()
            .expect("lines")
            .iter()
            .find(|l| l["id"].as_str() == Some(line_id.as_str()))
            .expect("the line");
        assert_eq!(line["qty_ordered"].as_i64(), Some(qty + 1), "the quantity");
        kept_for_a_newer_app(&d2, &data, &after);
    }));
    if result.is_err() {
        let _ = d2.screenshot("zz-failure-after-kill");
    }
    d2.quit();
    // The app goes with its session; make sure before the next launch (the
    // single-instance check would hand that one to this one).
    if wait_for("the app to exit", Duration::from_secs(20), || {
        app_pids(&app, &data).is_empty().then_some(())
    })
    .is_err()
    {
        for pid in app_pids(&app, &data) {
            let _ = kill_9(pid);
        }
    }
    drop(driver_proc);
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

/// On the new process: the queue survived, the token came from the keychain,
/// and with the server back the acts land once each.
fn after_restart(d: &Driver, server: &mut Server, data: &Path, queued: i64, version: i64) {
    d.find("[role=listbox][aria-label^='Orders']")
        .expect("the desk, signed in, after the restart");
    wait_pending(d, "the queue to survive the kill", |n| n == queued);
    d.wait_text("[data-testid=online]", "offline shown", |t| {
        t.to_lowercase().contains("offline")
    })
    .expect("offline");
    let status = app_status(d);
    assert_eq!(status["token_store"], "OS keychain", "{status}");
    assert!(status["signed_in"].is_object(), "signed in: {status}");
    d.screenshot("14-restarted-pending").expect("shot");

    // ---- the server back on its port and data: the queue drains.
    *server = Server::start(server.port, &server.data_dir.clone()).expect("restart the server");
    drain(d, "the queue to drain after the kill");
    d.screenshot("15-drained-after-kill").expect("shot");

    // Exactly once: every change adds exactly 1 to the order's version
    // (API.md), and nothing else touched it. A second pass changes nothing.
    let ops = operator(server);
    let landed = server_order(&ops, PO)["version"].as_i64().expect("version");
    assert_eq!(landed, version + queued, "each pending act applied once");
    let synced = app_status(d)["last_synced_at"].clone();
    d.click("footer.statusbar button.sync").expect("sync now");
    wait_for("a second sync pass", Duration::from_secs(30), || {
        let s = app_status(d);
        (s["last_synced_at"] != synced && s["pending"] == 0).then_some(())
    })
    .expect("a second pass");
    assert_eq!(
        server_order(&ops, PO)["version"].as_i64(),
        Some(version + queued),
        "a second sync applies nothing again"
    );
    eprintln!(
        "after the kill: {queued} pending acts survived and landed once (version {version} → {})",
        version + queued
    );

    // ---- the token: in the Secret Service, not in a file.
    for entry in std::fs::read_dir(data).expect("data dir") {
        let name = entry.expect("entry").file_name();
        let name = name.to_string_lossy().into_owned();
        assert!(
            name.starts_with("holdfast.sqlite3"),
            "only the store in the data dir, no token file: {name}"
        );
    }
    match keyring_secrets("service", "holdfast").expect("secret-tool") {
        Some(secrets) => {
            assert_eq!(secrets.len(), 1, "one holdfast token in the keyring");
            Api::with_token(&server.url(), &secrets[0])
                .get("/v1/orders?limit=1")
                .expect("the keyring's token is the desk's live token");
            eprintln!("keychain: the desk's token is in the Secret Service (secret-tool)");
        }
        None => eprintln!(
            "keychain: secret-tool is not installed; the app's status says OS keychain \
             and it synced after the restart without a token file"
        ),
    }
}

/// Issue 15 item 13 as the user sees it: an act this app cannot read (here
/// one a newer Holdfast queued in the same store: another process writing
/// while the app runs) is kept, not sent and not an error; the status bar
/// says so, the Kept screen says what and why in words, and the order says
/// part of it needs a newer app.
fn kept_for_a_newer_app(d: &Driver, data: &Path, order: &serde_json::Value) {
    let id = order["id"].as_str().expect("order id");
    let version = order["version"].as_i64().expect("version");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let store = rusqlite::Connection::open(data.join("holdfast.sqlite3")).expect("the app's store");
    store
        .busy_timeout(Duration::from_secs(10))
        .expect("busy timeout");
    store
        .execute(
            "insert into pending (idempotency_key, order_id, schema_version, act, method, path,
                                  body, base_version, created_at, next_attempt_at)
             values ('e2e-newer-app-act', ?1, 99, '{\"app\":\"99.0.0\",\"mutation\":{\"op\":\"set_rush\"}}',
                     'POST', ?2, '{}', ?3, ?4, ?4)",
            rusqlite::params![id, format!("/v1/orders/{id}/rush"), version, now],
        )
        .expect("a newer app's act");
    d.click("footer.statusbar button.sync").expect("sync now");
    wait_for(
        "the act kept for a newer app",
        Duration::from_secs(30),
        || (app_status(d)["held"] == 1).then_some(()),
    )
    .expect("held");
    d.wait_text("[data-testid=kept]", "the status bar says so", |t| {
        t.contains("1 kept for a newer Holdfast")
    })
    .expect("status bar");
    d.click("[data-testid=kept] button").expect("open Kept");
    d.wait_text("main", "the kept act in words", |t| {
        t.contains("A change to order for") && t.contains("newer version of Holdfast")
    })
    .expect("kept screen");
    d.screenshot("16-kept-for-a-newer-app").expect("shot");
    open_order(d, PO);
    d.wait_text("[data-testid=needs-newer-app]", "the order's notice", |t| {
        t.contains("needs a newer version of Holdfast")
    })
    .expect("order notice");
    d.screenshot("16b-order-needs-a-newer-app").expect("shot");
}

/// The app's own status (`get_status`, what the status bar shows), over IPC.
fn app_status(d: &Driver) -> serde_json::Value {
    d.script_async(
        "const done = arguments[arguments.length - 1]; \
         window.__TAURI_INTERNALS__.invoke('get_status').then(done, e => done({error: String(e)}));",
        json!([]),
    )
    .expect("the app's status")
}

/// Waits for an empty queue, pressing Sync now every few seconds (the sync
/// loop may be in a long backoff after the outage).
fn drain(d: &Driver, what: &str) {
    let mut last_click: Option<Instant> = None;
    wait_for(what, Duration::from_secs(90), || {
        if pending(d) == Some(0) {
            return Some(());
        }
        if last_click.is_none_or(|t| t.elapsed() > Duration::from_secs(3)) {
            let _ = d.script(
                "const b = document.querySelector('footer.statusbar button.sync'); if (b && !b.disabled) b.click();",
                json!([]),
            );
            last_click = Some(Instant::now());
        }
        None
    })
    .unwrap_or_else(|e| panic!("{e} (status bar: {:?})", d.text("footer.statusbar")));
}

/// The e2e needs the keychain: scripts/e2e.sh runs it under
/// scripts/with-keyring.sh (a private bus with an unlocked gnome-keyring).
pub(crate) fn require_keychain() {
    assert!(
        std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some()
            && std::env::var_os("HOLDFAST_TEST_SECRET_SERVICE").is_some(),
        "the desktop app keeps its token in the keychain: run this through scripts/e2e.sh \
         (which starts a Secret Service with scripts/with-keyring.sh)"
    );
}
