//! The operator's console (/admin) in a real browser: headless Chromium
//! (Debian's `chromium`) over WebDriver (`chromium-driver`), against a real
//! `holdfast-server` on its embedded Postgres, with partners that are
//! receivers in this process. Everything the operator does here is done on
//! the page, by the keyboard and the buttons an operator would use; the
//! JSON API only plays the account manager whose order makes the events.
//! One screenshot per screen in target/e2e-artifacts/admin-*.png.
//!
//! `#[ignore]`d: it needs the built server and Chromium; scripts/e2e.sh runs
//! it with `--ignored`.

use std::path::PathBuf;
use std::time::Duration;

use holdfast_e2e::{free_port, start_chromedriver, wait_for, Api, Driver, Receiver, Server};
use serde_json::json;

/// A fresh dir under /tmp that the server's Postgres user can enter.
fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("holdfast-e2e-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    dir
}

/// A UUID for the order the account manager creates (v4-shaped, from the
/// clock and the process id: unique enough for one run).
fn order_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let hex = format!("{:020x}{:012x}", nanos, std::process::id());
    format!(
        "{}-{}-4{}-8{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    )
}

/// The whole page's visible text.
fn page_text(d: &Driver) -> String {
    d.text("body").unwrap_or_default()
}

/// Waits until the page (reloaded each time) shows `needle`.
fn wait_page(d: &Driver, url: &str, needle: &str) -> String {
    wait_for(needle, Duration::from_secs(60), || {
        d.goto(url).ok()?;
        let text = page_text(d);
        text.contains(needle).then_some(text)
    })
    .unwrap_or_else(|e| panic!("{e}; the page shows:\n{}", page_text(d)))
}

#[test]
#[ignore = "needs Chromium and chromedriver; scripts/e2e.sh runs it"]
fn operator_console() {
    let data = temp_dir("admin");
    // One attempt before a dead letter, so the run sees one in seconds.
    let server = Server::start_with(
        free_port().expect("port"),
        &data.join("pg"),
        &["--relay-max-attempts", "1"],
    )
    .expect("server");
    let base = server.url();
    let failing = Receiver::answering(500, "warehouse system down for maintenance")
        .expect("failing receiver");

    let (_chromedriver, driver_url) = start_chromedriver().expect("chromedriver");
    let d = Driver::chromium(&driver_url).expect("a Chromium session");

    // Sign in, as an operator does: the form, by the keyboard.
    d.goto(&format!("{base}/admin")).expect("open /admin");
    d.fill("#tenant", "acme").expect("tenant");
    d.fill("#email", "ops@acme.test").expect("email");
    d.fill("#password", "holdfast-demo").expect("password");
    d.save_screenshot("admin-01-sign-in").expect("screenshot");
    d.click("form[action='/admin/login'] button[type=submit]")
        .expect("sign in");
    d.wait_text("body", "the dashboard after sign-in", |t| {
        t.contains("Sign out")
    })
    .expect("signed in");
    d.save_screenshot("admin-02-dashboard").expect("screenshot");

    // A partner that fails, and an account manager's order: its events go
    // to the partner once each and are dead-lettered (one attempt).
    let ops = Api::sign_in(&base, "acme", "ops@acme.test", "holdfast-demo").expect("operator");
    ops.write(
        "POST",
        "/v1/admin/partners",
        json!({"name": "Harbour Warehouse", "url": failing.url, "event_types": ["order.*"]}),
    )
    .expect("the failing partner");
    let dana = Api::sign_in(&base, "acme", "dana@acme.test", "holdfast-demo").expect("dana");
    let customers = dana.get("/v1/customers").expect("customers");
    let customer = customers["customers"][0]["id"]
        .as_str()
        .expect("a customer")
        .to_owned();
    dana.write(
        "POST",
        "/v1/orders",
        json!({"id": order_id(), "customer_id": customer}),
    )
    .expect("an order");
    wait_for(
        "the failing partner to be tried",
        Duration::from_secs(30),
        || (!failing.webhook_ids().is_empty()).then_some(()),
    )
    .expect("tried");

    // The dead letter on the dashboard, requeued from its button.
    wait_page(&d, &format!("{base}/admin"), "Requeue");
    d.save_screenshot("admin-07-dead-letter")
        .expect("screenshot");
    let tries = failing.webhook_ids().len();
    d.click("form[action$='/requeue'] button[type=submit]")
        .expect("requeue");
    wait_for(
        "the requeued delivery to be tried again",
        Duration::from_secs(30),
        || (failing.webhook_ids().len() > tries).then_some(()),
    )
    .expect("tried again");
    d.save_screenshot("admin-08-requeued").expect("screenshot");
    d.quit();
}
