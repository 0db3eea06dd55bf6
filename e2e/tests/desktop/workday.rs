//! The desk through a working day (issue 14): one quantity typed with Enter
//! is one act on the server; any number of units released from the
//! keyboard; an idle desk says Offline within seconds of losing the server
//! and Online once it is back; a confirm queued offline over a colleague's
//! quantity change is a human choice with both totals, which Enter alone
//! does not make; the order's confirmation (pending, then accepted), its
//! invoice, and its history down to the partner's `webhook-id`.

use std::path::Path;
use std::time::{Duration, Instant};

use holdfast_e2e::{free_port, keys, money, wait_for, Api, Cli, Driver, Receiver, Server};
use serde_json::json;

use super::{
    find_order, open_conflict, open_order, operator, server_order, size_run, wait_pending,
};

/// The fax order `walk` made.
const FAX_PO: &str = "PO-E2E-1";
/// The order this module makes and confirms.
const PO: &str = "PO-E2E-2";

/// The line of the open editor whose SKU label ends in `· {size}`: its id.
fn line_id(d: &Driver, size: &str) -> String {
    wait_for("the line's row", Duration::from_secs(20), || {
        d.script(
            "const r = document.querySelector(`table.lines tr[data-sku$=\"· ${arguments[0]}\"]`); return r ? r.dataset.lineId : null;",
            json!([size]),
        )
        .ok()?
        .as_str()
        .map(str::to_owned)
    })
    .expect("line row")
}

fn server_line(ops: &Api, po: &str, line: &str) -> serde_json::Value {
    server_order(ops, po)["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .find(|l| l["id"].as_str() == Some(line))
        .cloned()
        .expect("the line on the server")
}

fn version(ops: &Api, po: &str) -> i64 {
    server_order(ops, po)["version"].as_i64().expect("version")
}

/// On the fax order (open, synced): a new quantity typed and entered with
/// Enter, then Tab out of the field, moves the server's version by exactly
/// one; then 2 units of that line are released from its units field
/// (Shift+Enter): a partial allocation.
pub(crate) fn one_quantity_one_act_and_a_partial_release(d: &Driver, ops: &Api) {
    wait_pending(d, "nothing pending", |n| n == 0);
    let line = line_id(d, "M");
    let before = version(ops, FAX_PO);
    let held = server_line(ops, FAX_PO, &line)["qty_allocated"]
        .as_i64()
        .expect("allocated");
    let qty = format!("table.lines tr[data-line-id=\"{line}\"] input.qty");
    super::clear(d, &qty);
    d.focus(&qty).expect("quantity");
    // Enter, and leaving the field after it: one intention.
    d.keys(&format!("5{}{}", keys::ENTER, keys::TAB))
        .expect("type 5, Enter, Tab");
    wait_pending(d, "the quantity sent", |n| n == 0);
    wait_for(
        "the new quantity on the server",
        Duration::from_secs(30),
        || (server_line(ops, FAX_PO, &line)["qty_ordered"].as_i64() == Some(5)).then_some(()),
    )
    .expect("quantity 5");
    d.chord(keys::ALT, "s").expect("sync now");
    wait_pending(d, "still nothing pending", |n| n == 0);
    assert_eq!(
        version(ops, FAX_PO),
        before + 1,
        "one quantity typed with Enter (and Tab) is one act"
    );

    // Release 2 of the units the line holds, from the keyboard.
    let units = format!("table.lines tr[data-line-id=\"{line}\"] input.units");
    d.focus(&units).expect("units");
    d.keys("2").expect("2 units");
    d.chord(keys::SHIFT, keys::ENTER)
        .expect("Shift+Enter releases");
    wait_pending(d, "the release sent", |n| n == 0);
    wait_for(
        "a partial allocation on the server",
        Duration::from_secs(30),
        || {
            (server_line(ops, FAX_PO, &line)["qty_allocated"].as_i64() == Some(held - 2))
                .then_some(())
        },
    )
    .expect("released 2");
    d.wait_text(
        &format!("table.lines tr[data-line-id=\"{line}\"] [data-testid=allocated]"),
        "the desk shows what the line holds now",
        |t| t == (held - 2).to_string(),
    )
    .expect("allocated shown");
    assert_eq!(version(ops, FAX_PO), before + 2, "one release, one act");
    d.screenshot("04b-partial-allocation").expect("shot");
}

/// An idle desk (nothing pending) loses its server: Offline, in words,
/// within 5 seconds; the server back on its port: Online, with no click.
pub(crate) fn offline_within_seconds_and_back(d: &Driver, server: &mut Server) {
    wait_pending(d, "nothing pending", |n| n == 0);
    d.wait_text("[data-testid=online]", "online first", |t| {
        t.contains("Online")
    })
    .expect("online");
    server.stop().expect("stop the server");
    let stopped = Instant::now();
    wait_for("Offline on the status bar", Duration::from_secs(5), || {
        d.text("[data-testid=online]")
            .filter(|t| t.contains("Offline"))
    })
    .expect("Offline within 5 s of the server going away");
    eprintln!(
        "offline shown {} ms after the server stopped",
        stopped.elapsed().as_millis()
    );
    let note = d.text("[data-testid=offline-note]").unwrap_or_default();
    assert_eq!(
        note,
        "Server unreachable — your changes are saved on this computer"
    );
    // What is rendered (the transport's words wait behind a closed Details).
    let bar = d
        .script(
            "return document.querySelector('footer.statusbar').innerText;",
            json!([]),
        )
        .expect("status bar text")
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        !bar.contains("error sending request") && !bar.contains("tcp connect"),
        "no transport text on the status bar: {bar}"
    );
    d.screenshot("04c-offline-idle").expect("shot");

    *server = Server::start(server.port, &server.data_dir.clone()).expect("restart");
    d.wait_text("[data-testid=online]", "Online again by itself", |t| {
        t.contains("Online")
    })
    .expect("online again");
}

/// A new order, confirmed while the server is down, over a colleague's
/// quantity change: the conflict shows both totals and waits for a person;
/// chosen, the confirm lands; the confirmation, invoice and history follow.
pub(crate) fn confirm_over_a_colleagues_change(d: &Driver, server: &mut Server, tmp: &Path) {
    let ops = operator(server);
    let partner = Receiver::start().expect("a partner receiver");
    ops.write(
        "POST",
        "/v1/admin/partners",
        json!({"name": "Acme ERP", "url": partner.url, "event_types": ["order.*"]}),
    )
    .expect("register the partner");

    // ---- a new order by keyboard, synced.
    d.chord(keys::ALT, "n").expect("new order");
    d.find("#customer").expect("customer box");
    d.focus("#customer").expect("customer");
    d.keys("tokyo").expect("customer");
    d.find("[role=option]").expect("customer match");
    d.keys(&format!("{}{PO}{}", keys::TAB, keys::TAB))
        .expect("po");
    size_run(d, "kestrel indigo", &["1"]);
    let line = line_id(d, "XS");
    wait_pending(d, "the new order synced", |n| n == 0);
    let before = server_order(&ops, PO);
    let saw = before["total"].as_i64().expect("total");

    // ---- offline: Confirm is queued, and said so.
    server.stop().expect("stop the server");
    d.chord(keys::ALT, "o").expect("confirm");
    d.wait_text("[data-testid=order-status]", "confirming, pending", |t| {
        t == "Confirming (pending)"
    })
    .expect("a queued confirm is pending, not done");
    d.screenshot("16-confirming-pending").expect("shot");
    d.chord(keys::ALT, "k").expect("the confirmation");
    d.wait_text("[data-testid=pending-mark]", "the PENDING mark", |t| {
        t == "PENDING — not yet accepted by the server"
    })
    .expect("pending mark");
    let total = d.text("[data-testid=document-total]").unwrap_or_default();
    assert_eq!(total, money(saw), "the document's total");
    d.screenshot("17-confirmation-pending").expect("shot");
    d.keys(keys::ESCAPE).expect("back to the order");
    d.find("table.lines").expect("the editor again");

    // ---- a colleague (the CLI, on a side port) changes the quantity.
    let mut side =
        Server::start(free_port().expect("port"), &server.data_dir.clone()).expect("side server");
    let cli = Cli {
        dir: tmp.join("cli-workday"),
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
    .expect("cli login");
    cli.run(&["sync"]).expect("cli sync");
    let orders: serde_json::Value =
        serde_json::from_str(&cli.run(&["--json", "orders"]).expect("orders")).expect("json");
    let order = find_order(&orders, PO).expect("the order on the second desk");
    cli.run(&["order", "set-qty", &order, &line, "3"])
        .expect("cli quantity");
    cli.run(&["sync"]).expect("cli sync");
    let now = server_order(&operator(&side), PO);
    side.stop().expect("stop side");
    drop(side);
    assert_eq!(now["status"], "draft");
    let theirs = now["total"].as_i64().expect("total");
    assert_ne!(theirs, saw, "the colleague's change moved the total");

    // ---- back: the confirm comes back as a conflict with both totals.
    *server = Server::start(server.port, &server.data_dir.clone()).expect("restart");
    d.chord(keys::ALT, "s").expect("sync now");
    d.wait_text("[data-testid=attention]", "a conflict", |t| {
        t.contains("conflict")
    })
    .expect("conflict");
    open_conflict(d);
    let totals = d
        .wait_text("[data-testid=conflict-totals]", "both totals", |t| {
            t.contains(&money(saw)) && t.contains(&money(theirs))
        })
        .expect("the totals on both sides");
    eprintln!("conflict: {totals}");
    assert!(
        d.text("[data-testid=conflict-title]")
            .is_some_and(|t| t.starts_with("Priya")),
        "the conflict names the colleague"
    );
    // Focus sits on a choice, nothing chosen: Enter alone decides nothing.
    d.keys(keys::ENTER).expect("Enter");
    d.chord(keys::ALT, "s").expect("sync now");
    wait_pending(d, "the confirm still held", |n| n == 1);
    assert!(
        d.find("[data-testid=conflict-title]").is_ok(),
        "still choosing"
    );
    assert_eq!(
        server_order(&ops, PO)["status"],
        "draft",
        "Enter confirmed nothing"
    );
    d.screenshot("18-conflict-totals").expect("shot");

    // ---- the person chooses: confirm the order as it is now.
    d.keys("m").expect("mine: confirm");
    d.chord(keys::CONTROL, keys::ENTER)
        .expect("save the choice");
    wait_pending(d, "the confirm sent", |n| n == 0);
    wait_for("confirmed on the server", Duration::from_secs(30), || {
        (server_order(&ops, PO)["status"] == "confirmed").then_some(())
    })
    .expect("confirmed");
    open_order(d, PO);
    d.wait_text("[data-testid=order-status]", "confirmed", |t| {
        t == "Confirmed"
    })
    .expect("confirmed on the desk");
    d.wait_text("[data-testid=invoice]", "the invoice", |t| {
        t.contains(&money(theirs)) && t.contains("awaiting payment")
    })
    .expect("invoice of the total");
    d.screenshot("19-invoice").expect("shot");
    d.chord(keys::ALT, "k").expect("the confirmation");
    d.wait_text("[data-testid=document-status]", "accepted", |t| {
        t == "Confirmed"
    })
    .expect("accepted");
    assert!(
        d.text("[data-testid=pending-mark]").is_none(),
        "no PENDING mark"
    );
    d.wait_text(
        "[data-testid=document-invoice]",
        "the invoice on paper",
        |t| t.contains("awaiting payment"),
    )
    .expect("document invoice");
    d.screenshot("20-confirmation-accepted").expect("shot");
    d.keys(keys::ESCAPE).expect("back");

    // ---- the history: every version, the partner's deliveries by webhook-id.
    d.find("table.lines").expect("the editor again");
    d.chord(keys::ALT, "h").expect("history");
    let delivered = wait_for("a delivered partner event", Duration::from_secs(60), || {
        let shown = d.text("[data-testid=history]")?;
        partner
            .webhook_ids()
            .into_iter()
            .find(|id| shown.contains(id.as_str()) && shown.contains("delivered"))
    })
    .expect("the history shows what the partner got");
    let entries = d
        .script(
            "return document.querySelectorAll('[data-testid=history-entry]').length;",
            json!([]),
        )
        .expect("entries")
        .as_i64()
        .unwrap_or(0);
    assert_eq!(
        entries,
        server_order(&ops, PO)["version"].as_i64().expect("version"),
        "one history entry per version"
    );
    eprintln!("history: {entries} versions; the partner got {delivered}");
    d.screenshot("21-history").expect("shot");
}
