//! The real desktop app, built, under Xvfb, driven over WebDriver against a
//! real `holdfast-server` on its embedded Postgres: an account manager —
//! a user the operator creates through the admin API, signing in with the
//! one-time password — walks through every screen (prices and the total
//! checked against the server's order), then is deactivated and sees why;
//! one screenshot per screen in target/e2e-artifacts/.
//!
//! `#[ignore]`d: it needs a display, tauri-driver and the built binaries;
//! scripts/e2e.sh runs it with `--ignored` inside `xvfb-run -a`.

use std::time::Duration;

use holdfast_e2e::{
    free_port, keys, money, start_tauri_driver, target_dir, temp_dir, wait_for, Api, Cli, Driver,
    Server,
};
use serde_json::json;

#[path = "desktop/crash.rs"]
mod crash;
#[path = "desktop/workday.rs"]
mod workday;
use crash::{crash_with_pending_work, require_keychain};

fn pending(d: &Driver) -> Option<i64> {
    d.text("[data-testid=pending-count]")?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()
}

fn wait_pending(d: &Driver, what: &str, f: impl Fn(i64) -> bool) -> i64 {
    wait_for(what, Duration::from_secs(60), || {
        pending(d).filter(|n| f(*n))
    })
    .unwrap_or_else(|e| panic!("{e} (status bar: {:?})", d.text("footer.statusbar")))
}

/// The live ATS cell of the line for `size` in the open editor.
fn line_ats(d: &Driver, size: &str) -> Option<i64> {
    d.text(&format!(
        "table.lines tr[data-sku$=\"· {size}\"] [data-testid=ats]"
    ))?
    .parse()
    .ok()
}

/// Opens the size run for `query` and types `qty` per size (in grid order),
/// then Enter adds the lines: the keyboard path of a fax order.
fn size_run(d: &Driver, query: &str, qtys: &[&str]) {
    search(d, query);
    d.keys(keys::ENTER).expect("open the grid");
    d.find("input[data-size]").expect("size grid");
    let mut seq = String::new();
    for (i, q) in qtys.iter().enumerate() {
        if i > 0 {
            seq.push_str(keys::TAB);
        }
        seq.push_str(q);
    }
    seq.push_str(keys::ENTER);
    d.keys(&seq).expect("type the size run");
}

#[test]
#[ignore = "needs a display, tauri-driver and the built app: scripts/e2e.sh"]
fn fax_order_offline_conflict_rejection() {
    let tmp = temp_dir("run");
    let pg_dir = tmp.join("pg");
    let port = free_port().expect("port");
    let mut server = Server::start(port, &pg_dir).expect("server");

    let app = target_dir().join("debug/holdfast-desktop");
    let app = app
        .canonicalize()
        .expect("the built app (cargo build -p holdfast-desktop)");
    let data = tmp.join("desktop");
    // No HOLDFAST_TOKEN_FILE: the app keeps its token in the keychain, the
    // Secret Service scripts/e2e.sh runs this under (scripts/with-keyring.sh).
    require_keychain();
    let (_driver_proc, driver_url) =
        start_tauri_driver(&[("HOLDFAST_DESKTOP_DATA_DIR", &data)]).expect("tauri-driver");
    // tauri-driver answers before its WebKitWebDriver listens: retry the
    // first request until a deadline.
    let d = wait_for("a WebDriver session", Duration::from_secs(60), || {
        Driver::new(&driver_url, &app)
            .map_err(|e| eprintln!("session: {e}"))
            .ok()
    })
    .expect("session");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        walk(&d, &mut server, &tmp);
    }));
    if result.is_err() {
        let _ = d.screenshot("zz-failure");
    }
    d.quit();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

/// The operator's API session on `server` (the demo operator).
fn operator(server: &Server) -> Api {
    Api::sign_in(&server.url(), "acme", "ops@acme.test", "holdfast-demo").expect("operator")
}

/// The server's copy of the order whose PO is `po`.
fn server_order(api: &Api, po: &str) -> serde_json::Value {
    let list = api.get("/v1/orders?limit=500").expect("orders");
    let id = find_order(&list, po).unwrap_or_else(|| panic!("order {po} on the server"));
    api.get(&format!("/v1/orders/{id}")).expect("order")
}

/// Every line's unit price and amount, and the order's total, on screen are
/// the server's (API.md v1.1: decided by the server when the line landed).
fn check_prices_against_server(d: &Driver, api: &Api, po: &str) {
    let doc = server_order(api, po);
    let total = money(doc["total"].as_i64().expect("total"));
    d.wait_text("[data-testid=total-amount]", "the server's total", |t| {
        t == total
    })
    .expect("total on screen");
    let lines = doc["lines"].as_array().expect("lines");
    assert!(!lines.is_empty());
    let mut sum = 0;
    for l in lines {
        let id = l["id"].as_str().expect("line id");
        let (price, qty) = (
            l["unit_price"].as_i64().expect("price"),
            l["qty_ordered"].as_i64().expect("qty"),
        );
        assert!(price > 0, "a priced line: {l}");
        sum += price * qty;
        let row = format!("table.lines tr[data-line-id=\"{id}\"]");
        d.wait_text(
            &format!("{row} [data-testid=unit-price]"),
            "the server's unit price",
            |t| t == money(price),
        )
        .expect("unit price");
        assert_eq!(
            d.text(&format!("{row} [data-testid=line-amount]"))
                .as_deref(),
            Some(money(price * qty).as_str()),
            "line amount = qty × unit price"
        );
    }
    assert_eq!(money(sum), total, "the total is Σ qty × unit price");
    eprintln!("order {po}: total {total} over {} lines", lines.len());
}

/// Fills and submits the sign-in form.
fn sign_in(d: &Driver, url: &str, email: &str, password: &str) {
    for (sel, v) in [
        ("#server-url", url),
        ("#tenant", "acme"),
        ("#email", email),
        ("#password", password),
    ] {
        // The form may come prefilled (last sign-in, defaults): start empty.
        clear(d, sel);
        d.focus(sel).expect(sel);
        d.keys(v).expect(sel);
    }
    d.keys(keys::ENTER).expect("submit");
}

fn walk(d: &Driver, server: &mut Server, tmp: &std::path::Path) {
    // ---- the operator creates an account manager; they sign in with the
    // one-time password the admin API showed once.
    let ops = operator(server);
    let email = "erin.new@acme.test";
    let (user_id, password) = ops
        .create_user(email, "Erin New", "account_manager")
        .expect("create a user through the admin API");
    d.find("#server-url").expect("sign-in screen");
    d.screenshot("01-sign-in").expect("shot");
    let url = server.url();
    for (sel, v) in [
        ("#server-url", url.as_str()),
        ("#tenant", "acme"),
        ("#email", email),
        ("#password", password.as_str()),
    ] {
        // The form may come prefilled (last sign-in, defaults): start empty.
        clear(d, sel);
        d.focus(sel).expect(sel);
        d.keys(v).expect(sel);
    }
    d.keys(keys::ENTER).expect("submit");
    d.find("[role=listbox][aria-label^='Orders']")
        .expect("the desk after sign-in");
    d.wait_text("[data-testid=online]", "online", |t| {
        t.to_lowercase().contains("online")
    })
    .expect("online");
    d.screenshot("02-desk").expect("shot");

    // ---- a fax order, by keyboard: customer, PO, notes, three sizes
    d.focus("[role=listbox][aria-label^='Orders']")
        .expect("desk");
    d.keys("n").expect("new order");
    d.find("#customer").expect("customer box");
    wait_for("customer box focused", Duration::from_secs(10), || {
        d.script(
            "return document.activeElement.getAttribute('role') === 'combobox';",
            json!([]),
        )
        .ok()?
        .as_bool()
        .filter(|b| *b)
    })
    .expect("focus");
    d.keys("aus").expect("customer");
    d.find("[role=option]").expect("customer match");
    d.keys(&format!("{}PO-E2E-1{}", keys::TAB, keys::TAB))
        .expect("po");
    d.keys(&format!("{}{}Fax from Austin", keys::TAB, keys::TAB))
        .expect("notes");
    d.keys(keys::TAB).expect("leave notes");
    size_run(d, "kestrel indigo", &["2", "3", "4"]);
    wait_for("three lines", Duration::from_secs(20), || {
        d.script(
            "return document.querySelectorAll('table.lines tbody tr').length;",
            json!([]),
        )
        .ok()?
        .as_i64()
        .filter(|n| *n == 3)
    })
    .expect("three lines");
    let ats_before =
        wait_for("ATS of M", Duration::from_secs(10), || line_ats(d, "M")).expect("ats");
    d.screenshot("03-fax-order").expect("shot");

    // ---- allocate all (Alt+A); ATS drops by what M holds
    d.chord(keys::ALT, "a").expect("allocate");
    let ats_after = wait_for("ATS of M to drop by 4", Duration::from_secs(20), || {
        line_ats(d, "M").filter(|a| *a == ats_before - 4)
    })
    .expect("ATS drops");
    wait_pending(d, "allocations synced", |n| n == 0);
    check_prices_against_server(d, &ops, "PO-E2E-1");
    d.screenshot("04-allocated").expect("shot");
    eprintln!("ATS of Kestrel Indigo M: {ats_before} → {ats_after}");
    workday::one_quantity_one_act_and_a_partial_release(d, &ops);
    workday::offline_within_seconds_and_back(d, server);
    // ---- the server goes down; the desk keeps taking entries
    server.stop().expect("stop server");
    d.focus("#notes").expect("notes");
    d.keys(" - call back").expect("notes");
    d.keys(keys::TAB).expect("leave notes");
    let queued = wait_pending(d, "a pending act while offline", |n| n > 0);
    d.wait_text("[data-testid=online]", "offline shown", |t| {
        t.to_lowercase().contains("offline")
    })
    .expect("offline");
    d.screenshot("05-offline-pending").expect("shot");
    eprintln!("pending while offline: {queued}");

    // ---- back on the same port and data dir: the queue drains
    *server = Server::start(server.port, &server.data_dir.clone()).expect("restart");
    d.chord(keys::ALT, "s").expect("sync now");
    wait_pending(d, "the queue to drain", |n| n == 0);
    d.screenshot("06-drained").expect("shot");

    // ---- conflict and rejection: offline again, a second desk (the CLI)
    // changes the same order and takes stock on a side port the app does
    // not know, then the app's server comes back.
    // The largest ATS among sizes not on the order yet.
    size_run_probe(d);
    let (size, ats) = ["L", "XL", "XXL"]
        .iter()
        .filter_map(|s| {
            let t = d.text(&format!("[data-testid=grid-ats-{s}]"))?;
            Some((*s, t.parse::<i64>().ok()?))
        })
        .max_by_key(|(_, a)| *a)
        .expect("grid ATS");
    assert!(
        ats >= 2,
        "need ATS ≥ 2 on Kestrel Indigo {size}, have {ats}"
    );
    d.keys(keys::ESCAPE).expect("close grid");
    server.stop().expect("stop server again");
    d.focus("#notes").expect("notes");
    d.keys(" - desk edit").expect("notes");
    d.keys(keys::TAB).expect("leave notes");
    // A size typed in the search starts the grid on that size.
    size_run(d, &format!("kestrel indigo {size}"), &[&ats.to_string()]);
    // Not on the server yet: the desk shows the price it expects, marked so.
    let new_price = format!("table.lines tr[data-sku$=\"· {size}\"] [data-testid=unit-price]");
    d.wait_text(&new_price, "an expected price on the pending line", |t| {
        t.starts_with('$') && t.contains("expected")
    })
    .expect("expected price");
    d.wait_text("table.lines tfoot", "an expected total", |t| {
        t.contains("Expected total")
    })
    .expect("expected total");
    d.screenshot("06b-expected-price").expect("shot");
    // The line's own Allocate button (the mouse path, next to Alt+A above).
    let allocate =
        format!("table.lines tr[data-sku$=\"· {size}\"] button[aria-label^='Allocate ']");
    wait_for("the new line's Allocate button", Duration::from_secs(20), || {
        d.script(
            "const b = document.querySelector(arguments[0]); if (!b || b.disabled) return false; b.click(); return true;",
            json!([allocate]),
        )
        .ok()?
        .as_bool()
        .filter(|b| *b)
    })
    .expect("allocate offline");
    wait_pending(d, "offline acts queued", |n| n >= 3);

    let side = Server::start(free_port().expect("port"), &server.data_dir.clone());
    let mut side = side.expect("side server");
    let cli = Cli {
        dir: tmp.join("cli"),
    };
    std::fs::create_dir_all(&cli.dir).expect("cli dir");
    cli.run(&[
        "login",
        "--server",
        &side.url(),
        "--tenant",
        "acme",
        "--email",
        "priya@acme.test",
    ])
    .or_else(|_| {
        cli.run(&[
            "login",
            "--server",
            &side.url(),
            "--tenant",
            "acme",
            "--email",
            "dana@acme.test",
        ])
    })
    .expect("cli login");
    cli.run(&["sync"]).expect("cli sync");
    let orders: serde_json::Value =
        serde_json::from_str(&cli.run(&["--json", "orders"]).expect("cli orders")).expect("json");
    let order_id = find_order(&orders, "PO-E2E-1").expect("the fax order on the second desk");
    cli.run(&[
        "order",
        "edit",
        &order_id,
        "--notes",
        "Changed by phone: ship partial",
    ])
    .expect("cli edit");
    let other = cli
        .run(&["order", "new", "--customer", "Lisbon"])
        .expect("cli order");
    let other = first_id(&other);
    let line = cli
        .run(&[
            "order",
            "add-line",
            &other,
            "--style",
            "Kestrel Overshirt",
            "--color",
            "Washed Indigo",
            "--size",
            size,
            "--qty",
            "1",
        ])
        .expect("cli line");
    let line = first_id(&line);
    cli.run(&["order", "allocate", &other, &line, "1"])
        .expect("cli allocate");
    cli.run(&["sync"]).expect("cli sync");
    side.stop().expect("stop side");
    drop(side);

    *server = Server::start(server.port, &server.data_dir.clone()).expect("restart 2");
    d.chord(keys::ALT, "s").expect("sync now");
    d.wait_text("[data-testid=attention]", "a conflict", |t| {
        t.contains("conflict")
    })
    .expect("conflict shown");
    open_conflict(d);
    d.find("[data-testid=conflict-title]")
        .expect("conflict view");
    d.screenshot("07-conflict").expect("shot");
    // Notes: both changed it, so a human picks; take theirs. Anything else
    // that asks: keep mine (my new line).
    d.script(
        "for (const g of document.querySelectorAll('.choice[role=radiogroup]')) { \
           const notes = g.querySelector('input[name=\"choice-notes\"]'); \
           const want = notes ? 'theirs' : 'mine'; \
           g.querySelector(`input[value=${want}]`).click(); }",
        json!([]),
    )
    .expect("choose");
    let save = d
        .script(
            "const b = document.querySelector('#save-choices'); return !!b && !b.disabled;",
            json!([]),
        )
        .ok()
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    d.click(if save { "#save-choices" } else { "#rebase" })
        .expect("resolve");
    d.wait_text("[data-testid=attention]", "a rejection", |t| {
        t.contains("rejected")
    })
    .expect("rejection shown");
    d.script(
        "[...document.querySelectorAll('nav[aria-label=Screens] button')].find(b => b.textContent.startsWith('Refused')).click();",
        json!([]),
    )
    .expect("open Refused");
    let facts = d
        .wait_text("[data-testid=rejection-ats]", "rejection facts", |t| {
            !t.is_empty()
        })
        .expect("facts");
    d.screenshot("08-rejected").expect("shot");
    eprintln!("rejection: {facts}");
    d.script(
        "[...document.querySelectorAll('[aria-label=\"What to do\"] button')].find(b => b.textContent.startsWith('Reduce')).click();",
        json!([]),
    )
    .expect("reduce");
    wait_for("no rejections left", Duration::from_secs(30), || {
        (d.text("[data-testid=attention]")
            .is_none_or(|t| !t.contains("rejected")))
        .then_some(())
    })
    .expect("rejection resolved");
    wait_pending(d, "everything synced", |n| n == 0);
    d.screenshot("09-reduced").expect("shot");
    // The fax order again, with the server's prices and total.
    open_order(d, "PO-E2E-1");
    check_prices_against_server(d, &ops, "PO-E2E-1");
    d.screenshot("10-prices").expect("shot");

    // ---- the operator deactivates the user: the desk's next request is
    // refused, and it says why on the sign-in screen, keeping what was typed.
    let ops = operator(server);
    ops.write(
        "PATCH",
        &format!("/v1/admin/users/{user_id}"),
        json!({"active": false}),
    )
    .expect("deactivate");
    d.focus("#notes").expect("notes");
    d.keys(" - after hours").expect("notes");
    d.keys(keys::TAB).expect("leave notes");
    d.wait_text(
        "[data-testid=signed-out]",
        "the sign-in screen says why",
        |t| t.contains("Signed out by an administrator"),
    )
    .expect("signed out in words");
    assert_eq!(
        d.script("return document.querySelector('#email').value;", json!([]))
            .expect("email")
            .as_str(),
        Some(email),
        "the last sign-in fills the form"
    );
    let banner = d.text("[data-testid=signed-out]").unwrap_or_default();
    assert!(banner.contains("waiting on this desk"), "{banner}");
    d.screenshot("11-signed-out").expect("shot");

    // ---- reactivated with a new password: signing in again sends the edit.
    ops.write(
        "PATCH",
        &format!("/v1/admin/users/{user_id}"),
        json!({"active": true}),
    )
    .expect("reactivate");
    let fresh = ops
        .write(
            "POST",
            &format!("/v1/admin/users/{user_id}/reset-password"),
            json!({}),
        )
        .expect("reset");
    let fresh = fresh["password"].as_str().expect("new password");
    sign_in(d, &url, email, fresh);
    d.find("[role=listbox][aria-label^='Orders']")
        .expect("the desk after signing in again");
    wait_pending(d, "the edit made before the sign-out is sent", |n| n == 0);
    wait_for("the note on the server", Duration::from_secs(30), || {
        server_order(&ops, "PO-E2E-1")["notes"]
            .as_str()
            .filter(|n| n.ends_with("after hours"))
            .map(drop)
    })
    .expect("the queued edit reached the server");
    // The desk's row tells the same truth as the status bar (it reloads on
    // the debounced `changed`, the status bar on `syncStatus`: ~100 ms apart).
    wait_row_badge(d, "PO-E2E-1", "Synced");
    d.screenshot("12-signed-in-again").expect("shot");

    workday::confirm_over_a_colleagues_change(d, server, tmp);
    crash_with_pending_work(d, server, tmp);
}

/// Opens the order with PO `po` from the desk, in the editor.
fn open_order(d: &Driver, po: &str) {
    d.chord(keys::ALT, "d").expect("desk");
    d.wait_text(
        "[role=listbox][aria-label^='Orders']",
        "the order on the desk",
        |t| t.contains(po),
    )
    .expect("desk lists the order");
    d.script(
        "[...document.querySelectorAll('[role=listbox][aria-label^=Orders] [role=option]')].find(o => o.textContent.includes(arguments[0])).dispatchEvent(new MouseEvent('dblclick', {bubbles: true}));",
        json!([po]),
    )
    .expect("open the order");
    d.find("#notes").expect("the editor");
}

/// Waits until the desk's row for the order with PO `po` shows `badge`.
fn wait_row_badge(d: &Driver, po: &str, badge: &str) {
    let row = || {
        d.script(
            "const o = [...document.querySelectorAll('[role=listbox][aria-label^=Orders] [role=option]')].find(o => o.textContent.includes(arguments[0])); return o ? o.textContent : null;",
            json!([po]),
        )
        .ok()?
        .as_str()
        .map(str::to_owned)
    };
    wait_for(
        &format!("the row of {po} to say {badge}"),
        Duration::from_secs(20),
        || row().filter(|t| t.contains(badge)),
    )
    .unwrap_or_else(|e| panic!("{e} (the row: {:?})", row()));
}

/// From the open editor, its banner's "Resolve conflict" into the conflict
/// view. The banner follows the status bar by a refresh: wait for it.
fn open_conflict(d: &Driver) {
    wait_for("the Resolve conflict button", Duration::from_secs(20), || {
        d.script(
            "const b = [...document.querySelectorAll('button')].find(b => b.textContent.trim().startsWith('Resolve conflict')); if (!b) return false; b.click(); return true;",
            json!([]),
        )
        .ok()?
        .as_bool()
        .filter(|b| *b)
    })
    .expect("open the conflict view");
}

/// Opens the size run on the open editor to read the grid's ATS.
fn size_run_probe(d: &Driver) {
    search(d, "kestrel indigo");
    d.keys(keys::ENTER).expect("grid");
    d.find("[data-testid=grid-ats-XL]").expect("grid ats");
}

/// The id of the order whose `customer_po` is `po`, anywhere in `v`.
fn find_order(v: &serde_json::Value, po: &str) -> Option<String> {
    match v {
        serde_json::Value::Object(m) => {
            if m.get("customer_po").and_then(|p| p.as_str()) == Some(po) {
                if let Some(id) = m.get("id").and_then(|i| i.as_str()) {
                    return Some(id.to_owned());
                }
            }
            m.values().find_map(|x| find_order(x, po))
        }
        serde_json::Value::Array(a) => a.iter().find_map(|x| find_order(x, po)),
        _ => None,
    }
}

/// Empties an input the way typing would (an `input` event follows).
fn clear(d: &Driver, sel: &str) {
    d.script(
        "const e = document.querySelector(arguments[0]); e.value = ''; e.dispatchEvent(new Event('input', {bubbles: true}));",
        json!([sel]),
    )
    .expect("clear");
}

/// Types `query` into Find SKU until a style + colour matches. A header
/// field committed just before (on blur) re-renders the editor, which may
/// eat what was typed meanwhile: type again then, within a deadline.
fn search(d: &Driver, query: &str) {
    wait_for(
        "a style and colour to match",
        Duration::from_secs(40),
        || {
            clear(d, "#sku-search");
            d.focus("#sku-search").ok()?;
            d.keys(query).ok()?;
            wait_for("options", Duration::from_secs(3), || {
                let typed = d
                    .script(
                        "return document.querySelector('#sku-search').value;",
                        json!([]),
                    )
                    .ok()?;
                (typed.as_str() == Some(query)).then_some(())?;
                d.text("[role=listbox][aria-label='Styles and colours'] [role=option]")
            })
            .ok()
        },
    )
    .expect("Find SKU");
}

/// The first UUID-looking word of the CLI's output (it adds prose).
fn first_id(out: &str) -> String {
    out.split_whitespace()
        .find(|l| l.len() == 36 && l.matches('-').count() == 4)
        .unwrap_or_else(|| panic!("no id in {out:?}"))
        .to_owned()
}
