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

use std::time::Duration;

use holdfast_e2e::{
    free_port, start_chromedriver, temp_dir, wait_for, Api, Driver, Receiver, Server,
};
use serde_json::json;

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

/// What the partner's endpoint answers, shown back on the page.
const ERP_ANSWER: &str = "received, thank you (Acme ERP)";

/// The value of an input (the secret's box).
fn field_value(d: &Driver, css: &str) -> String {
    d.script(
        "const e = document.querySelector(arguments[0]); return e ? e.value : null;",
        json!([css]),
    )
    .ok()
    .and_then(|v| v.as_str().map(str::to_owned))
    .unwrap_or_default()
}

/// The `href` of the link under `css` whose text is `name`.
fn link_named(d: &Driver, css: &str, name: &str) -> String {
    d.script(
        "const a = [...document.querySelectorAll(arguments[0])]
             .find(a => a.textContent.trim() === arguments[1]);
         return a ? a.getAttribute('href') : null;",
        json!([css, name]),
    )
    .ok()
    .and_then(|v| v.as_str().map(str::to_owned))
    .unwrap_or_else(|| panic!("no link {name:?}; the page shows:\n{}", page_text(d)))
}

/// The page's HTML, hidden fields and all.
fn page_source(d: &Driver) -> String {
    d.script("return document.documentElement.outerHTML;", json!([]))
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
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
    let erp = Receiver::answering(200, ERP_ANSWER).expect("receiver");
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

    // A partner, added on the Partners page: its secret is shown once.
    d.goto(&format!("{base}/admin/partners")).expect("partners");
    d.fill("#name", "Acme ERP").expect("name");
    d.fill("#url", &erp.url).expect("url");
    d.fill("#event_types", "order.*").expect("types");
    d.save_screenshot("admin-03-add-partner")
        .expect("screenshot");
    d.click("#create-partner-submit").expect("add partner");
    d.find("#new-secret").expect("the secret, shown once");
    let secret = field_value(&d, "#new-secret");
    assert!(secret.starts_with("whsec_"), "{secret}");
    d.save_screenshot("admin-04-partner-added")
        .expect("screenshot");
    d.goto(&format!("{base}/admin/partners")).expect("partners");
    assert!(
        !page_source(&d).contains(&secret),
        "the secret is shown once, never again"
    );

    // "Send test event": the partner's answer on the page, and the partner
    // got exactly that one event.
    d.click("button[id^='test-']").expect("send test event");
    let status = d
        .wait_text("#test-status", "the partner's answer", |t| {
            t.contains("200")
        })
        .expect("answered");
    assert_eq!(status, "HTTP 200");
    let body = d.text("#test-body").unwrap_or_default();
    assert!(body.contains(ERP_ANSWER), "the body shown: {body:?}");
    let sent_as = d.text("#test-webhook-id").unwrap_or_default();
    assert_eq!(erp.webhook_ids(), vec![sent_as.clone()], "one test event");
    assert!(sent_as.starts_with("evt_test_"), "{sent_as}");
    d.save_screenshot("admin-05-test-event")
        .expect("screenshot");

    // Rotate the secret on the partner's page: a new one, shown once, and
    // the overlap in which both are signed.
    d.goto(&format!("{base}/admin/partners")).expect("partners");
    d.click("#partners a").expect("the partner's page");
    d.find("#rotate-secret").expect("the partner's page");
    let partner_page = d.current_url().expect("url");
    d.click("#rotate-secret").expect("rotate");
    d.find("#new-secret").expect("the new secret");
    let rotated = field_value(&d, "#new-secret");
    assert!(rotated.starts_with("whsec_") && rotated != secret);
    d.wait_text("#overlap", "the overlap", |t| t.contains("until"))
        .expect("overlap shown");
    d.save_screenshot("admin-06-secret-rotated")
        .expect("screenshot");

    // Pause it.
    d.goto(&partner_page).expect("the partner's page");
    d.click("button[id^='pause-']").expect("pause");
    d.wait_text("#sending", "paused", |t| t.contains("Paused"))
        .expect("shown paused");
    d.save_screenshot("admin-07-paused").expect("screenshot");

    // A second partner whose endpoint fails, added the same way, and an
    // account manager's order: its events are dead-lettered there after one
    // attempt, and wait for the paused Acme ERP.
    d.goto(&format!("{base}/admin/partners")).expect("partners");
    d.fill("#name", "Harbour Warehouse").expect("name");
    d.fill("#url", &failing.url).expect("url");
    d.fill("#event_types", "order.*").expect("types");
    d.click("#create-partner-submit").expect("add partner");
    d.find("#new-secret").expect("its secret");
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
    wait_page(&d, &format!("{base}/admin"), "Requeue");
    d.save_screenshot("admin-08-dead-letter")
        .expect("screenshot");

    // The warehouse fixes its endpoint (here: moves to the working one);
    // the operator saves the new URL and requeues the dead letter, which is
    // then delivered.
    d.goto(&format!("{base}/admin/partners")).expect("partners");
    let harbour = link_named(&d, "#partners a", "Harbour Warehouse");
    d.goto(&format!("{base}{harbour}")).expect("Harbour's page");
    d.fill("#url", &erp.url).expect("url");
    d.click("#save-partner").expect("save");
    // The click only starts the form's POST: wait for its answer before
    // leaving, or it lands after (and instead of) the next page.
    d.wait_text("body", "the saved notice", |t| {
        t.contains("Saved the changes to Harbour Warehouse")
    })
    .expect("saved");
    d.goto(&format!("{base}/admin")).expect("dashboard");
    // The dead letter's button (the paused partner's waiting delivery has
    // one too, "Retry now").
    let requeue = d
        .script(
            "const b = [...document.querySelectorAll('form[action$=\"/requeue\"] button')]
                 .find(b => b.textContent.trim() === 'Requeue');
             return b ? b.form.getAttribute('action') : null;",
            json!([]),
        )
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .expect("a Requeue button");
    d.click(&format!("form[action='{requeue}'] button"))
        .expect("requeue");
    let delivered = wait_for(
        "the requeued event to be delivered",
        Duration::from_secs(30),
        || {
            erp.webhook_ids()
                .into_iter()
                .find(|id| !id.starts_with("evt_test_"))
        },
    )
    .expect("delivered");
    assert_eq!(
        failing.webhook_ids(),
        vec![delivered.clone()],
        "the event the failing endpoint refused is the one requeued"
    );
    wait_page(&d, &format!("{base}/admin"), "Dead letters (0)");
    d.save_screenshot("admin-09-requeued-and-delivered")
        .expect("screenshot");
    d.quit();
}
