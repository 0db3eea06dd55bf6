//! Conflicts and rejections against the real server: two desks editing one
//! order offline, a pull that must not rewrite a pending base, an allocation
//! refused for stock, and a malformed act surfaced with its field.

mod support;

use std::collections::BTreeMap;

use chrono::NaiveDate;
use holdfast_client::view::Badge;
use holdfast_client::{Choice, Engine, Error, RejectionChoice, Resolution};
use holdfast_protocol::model::OrderHeaderSet;
use holdfast_protocol::problem::ProblemCode;
use sqlx::PgPool;
use support::*;
use uuid::Uuid;

fn notes(text: &str) -> OrderHeaderSet {
    OrderHeaderSet {
        notes: Some(Some(text.to_owned())),
        ..Default::default()
    }
}

fn po(text: &str) -> OrderHeaderSet {
    OrderHeaderSet {
        customer_po: Some(Some(text.to_owned())),
        ..Default::default()
    }
}

fn new_order(desk: &Engine) -> Uuid {
    desk.create_order(holdfast_client::NewOrder {
        customer_id: tokyo(),
        ..Default::default()
    })
    .expect("create")
}

/// Dana and Priya signed in on desks of their own, one order of Dana's
/// synced and in both mirrors at version 1.
struct Shared {
    server: Server,
    _dir: tempfile::TempDir,
    dana: Engine,
    priya: Engine,
    token: String,
    pokes: Pokes,
    order: Uuid,
}

async fn one_order_on_two_desks(db: PgPool) -> Shared {
    let server = Server::start(db).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dana = open(dir.path(), "dana", fast_config());
    let priya = open(dir.path(), "priya", fast_config());
    login(&dana, &server.url(), "dana@acme.test").await;
    login(&priya, &server.url(), "priya@acme.test").await;
    let token = server.token("dana@acme.test").await;
    let mut pokes = server.pokes(&token).await;
    let order = new_order(&dana);
    dana.sync_once().await.expect("sync");
    pull_until(&priya, &mut pokes, |p| mirrored_version(p, order) == 1).await;
    Shared {
        server,
        _dir: dir,
        dana,
        priya,
        token,
        pokes,
        order,
    }
}

/// Must show: two desks edit the same order offline; the second to sync gets
/// a conflict that holds only that order while its other orders keep
/// syncing; a disjoint-field rebase and a same-field choice (mine, then
/// theirs) each end in the expected server document; quantities are never
/// auto-merged.
#[sqlx::test(migrations = "../migrations")]
async fn conflict_blocks_one_order_and_resolves_by_rebase_or_choice(db: PgPool) {
    let server = Server::start(db).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dana = open(dir.path(), "dana", fast_config());
    let priya = open(dir.path(), "priya", fast_config());
    login(&dana, &server.url(), "dana@acme.test").await;
    login(&priya, &server.url(), "priya@acme.test").await;
    let token = server.token("dana@acme.test").await;
    let mut pokes = server.pokes(&token).await;

    let x = new_order(&dana);
    let line = dana.add_line(x, kestrel_m(), 5).expect("line");
    let y = new_order(&dana);
    dana.sync_once().await.expect("sync");
    pull_until(&priya, &mut pokes, |p| mirrored_version(p, x) == 2).await;
    assert_eq!(priya.order(x).expect("view").expect("x").order.version, 2);

    // Both offline: Dana edits notes and the ship window of X, and Y;
    // Priya changes X's PO.
    dana.edit_order(x, notes("dana: call first")).expect("edit");
    let start = NaiveDate::from_ymd_opt(2026, 6, 1);
    dana.edit_order(
        x,
        OrderHeaderSet {
            ship_window_start: Some(start),
            ..Default::default()
        },
    )
    .expect("edit");
    dana.edit_order(y, notes("y by dana")).expect("edit y");
    priya.edit_order(x, po("PRIYA-7")).expect("priya edit");
    assert_eq!(priya.sync_once().await.expect("priya syncs").applied, 1);

    let report = dana.sync_once().await.expect("dana syncs");
    assert_eq!(report.conflicts, 1);
    assert_eq!(report.applied, 1, "Y went through");
    let xv = dana.order(x).expect("view").expect("x");
    assert_eq!(xv.badge, Badge::Conflict);
    assert_eq!(
        xv.pending.len(),
        2,
        "the conflicting act and the one it holds"
    );
    assert_eq!(
        server.order(&token, y).await.notes.as_deref(),
        Some("y by dana")
    );
    let on_server = server.order(&token, x).await;
    assert_eq!(on_server.notes, None, "never overwritten");
    assert_eq!(on_server.customer_po.as_deref(), Some("PRIYA-7"));

    let c = dana.conflict(x).expect("conflict").expect("open");
    assert_eq!(c.changed_by, "Priya Raman");
    assert_eq!((c.your_base_version, c.current_version), (2, 3));
    assert_eq!(c.held, 2);
    assert!(c.can_rebase);
    let field = |name: &str| c.fields.iter().find(|f| f.field == name).expect(name);
    assert!(field("notes").mine_changed && !field("notes").theirs_changed);
    assert!(field("ship_window_start").mine_changed);
    assert!(field("customer_po").theirs_changed && !field("customer_po").mine_changed);
    assert_eq!(field("customer_po").theirs, "PRIYA-7");

    // Other orders keep syncing while X waits.
    dana.edit_order(y, po("Y-2")).expect("edit y again");
    assert_eq!(dana.sync_once().await.expect("sync").applied, 1);
    assert_eq!(
        server.order(&token, y).await.customer_po.as_deref(),
        Some("Y-2")
    );
    assert!(dana.conflict(x).expect("conflict").is_some());
    assert_eq!(server.order(&token, x).await.version, 3);

    // Disjoint fields: rebase keeps both sides.
    let conflicted_key = dana.pending_rows().expect("rows")[0].key.clone();
    dana.resolve_conflict(x, &Resolution::Rebase)
        .expect("rebase");
    let rows = dana.pending_rows().expect("rows");
    assert_eq!(
        rows.iter().map(|r| r.base_version).collect::<Vec<_>>(),
        [3, 4],
        "re-chained from the current version"
    );
    assert_ne!(rows[0].key, conflicted_key, "a new act gets a new key");
    assert_eq!(dana.sync_once().await.expect("sync").applied, 2);
    let doc = server.order(&token, x).await;
    assert_eq!(doc.notes.as_deref(), Some("dana: call first"));
    assert_eq!(doc.customer_po.as_deref(), Some("PRIYA-7"));
    assert_eq!(doc.ship_window_start, start);
    assert_eq!(doc.version, 5);
    assert_eq!(dana.order(x).expect("view").expect("x").order, doc);

    // Same field: no rebase; choose mine.
    pull_until(&priya, &mut pokes, |p| mirrored_version(p, x) == 5).await;
    dana.edit_order(x, notes("A")).expect("edit");
    priya.edit_order(x, notes("B")).expect("edit");
    priya.sync_once().await.expect("priya syncs");
    assert_eq!(dana.sync_once().await.expect("sync").conflicts, 1);
    match dana.resolve_conflict(x, &Resolution::Rebase) {
        Err(Error::Resolve(e)) => assert!(e.to_string().contains("notes"), "{e}"),
        other => panic!("rebase must refuse a collision, got {other:?}"),
    }
    let mine = Resolution::Choose(BTreeMap::from([("notes".to_owned(), Choice::Mine)]));
    dana.resolve_conflict(x, &mine).expect("choose mine");
    dana.sync_once().await.expect("sync");
    let doc = server.order(&token, x).await;
    assert_eq!((doc.notes.as_deref(), doc.version), (Some("A"), 7));

    // Same field: choose theirs; mine is dropped, nothing is sent.
    pull_until(&priya, &mut pokes, |p| mirrored_version(p, x) == 7).await;
    dana.edit_order(x, notes("C")).expect("edit");
    priya.edit_order(x, notes("D")).expect("edit");
    priya.sync_once().await.expect("priya syncs");
    assert_eq!(dana.sync_once().await.expect("sync").conflicts, 1);
    let theirs = Resolution::Choose(BTreeMap::from([("notes".to_owned(), Choice::Theirs)]));
    dana.resolve_conflict(x, &theirs).expect("choose theirs");
    assert_eq!(dana.status().expect("status").pending, 0);
    dana.sync_once().await.expect("sync");
    let doc = server.order(&token, x).await;
    assert_eq!((doc.notes.as_deref(), doc.version), (Some("D"), 8));
    assert_eq!(dana.order(x).expect("view").expect("x").order, doc);

    // Quantities: both set the line to 7; still a person's choice.
    assert_eq!(mirrored_version(&priya, x), 8, "her own answer");
    dana.change_line(x, line, 7).expect("qty");
    priya.change_line(x, line, 7).expect("qty");
    priya.sync_once().await.expect("priya syncs");
    assert_eq!(dana.sync_once().await.expect("sync").conflicts, 1);
    let c = dana.conflict(x).expect("conflict").expect("open");
    let name = format!("line:{line}");
    let f = c
        .fields
        .iter()
        .find(|f| f.field == name)
        .expect("line field");
    assert!(f.collides && f.quantity, "{f:?}");
    assert!(!c.can_rebase);
    let keep = Resolution::Choose(BTreeMap::from([(name, Choice::Mine)]));
    dana.resolve_conflict(x, &keep).expect("choose");
    dana.sync_once().await.expect("sync");
    let doc = server.order(&token, x).await;
    assert_eq!((doc.lines[0].qty_ordered, doc.version), (7, 10));
    assert_eq!(dana.status().expect("status").conflicts, 0);
}

/// Choosing per field may not pair one side's ship-window start with the
/// other's end when that reverses the window: refused at once, the conflict
/// stays open and nothing is queued; a consistent choice then lands.
#[sqlx::test(migrations = "../migrations")]
async fn a_choice_that_reverses_the_ship_window_is_refused_while_choosing(db: PgPool) {
    let Shared {
        server,
        _dir,
        dana,
        priya,
        token,
        pokes: _,
        order: x,
    } = one_order_on_two_desks(db).await;

    let day = |d| NaiveDate::from_ymd_opt(2026, 6, d);
    let window = |start, end| OrderHeaderSet {
        ship_window_start: Some(day(start)),
        ship_window_end: Some(day(end)),
        ..Default::default()
    };
    dana.edit_order(x, window(1, 5)).expect("dana's window");
    priya.edit_order(x, window(10, 20)).expect("priya's window");
    priya.sync_once().await.expect("priya syncs");
    assert_eq!(dana.sync_once().await.expect("sync").conflicts, 1);

    let mixed = Resolution::Choose(BTreeMap::from([
        ("ship_window_start".to_owned(), Choice::Theirs),
        ("ship_window_end".to_owned(), Choice::Mine),
    ]));
    match dana.resolve_conflict(x, &mixed) {
        Err(Error::Resolve(e)) => assert!(e.to_string().contains("ship window"), "{e}"),
        other => panic!("a reversed window must be refused, got {other:?}"),
    }
    assert!(dana.conflict(x).expect("conflict").is_some(), "still open");
    assert_eq!(dana.status().expect("status").conflicts, 1);

    let mine = Resolution::Choose(BTreeMap::from([
        ("ship_window_start".to_owned(), Choice::Mine),
        ("ship_window_end".to_owned(), Choice::Mine),
    ]));
    dana.resolve_conflict(x, &mine)
        .expect("a consistent choice");
    assert_eq!(dana.sync_once().await.expect("sync").applied, 1);
    let doc = server.order(&token, x).await;
    assert_eq!(
        (doc.ship_window_start, doc.ship_window_end),
        (day(1), day(5))
    );
    assert_eq!(dana.status().expect("status").rejections, 0);
}

/// Must show: a pull never rewrites a pending act's base; the colleague's
/// edit becomes a conflict, not an overwrite.
#[sqlx::test(migrations = "../migrations")]
async fn a_pull_never_rewrites_a_pending_base(db: PgPool) {
    let Shared {
        server,
        _dir,
        dana,
        priya,
        token,
        mut pokes,
        order: x,
    } = one_order_on_two_desks(db).await;

    dana.edit_order(x, notes("rush")).expect("dana edits at v1");
    priya
        .edit_order(x, notes("hold"))
        .expect("priya edits at v1");
    priya.sync_once().await.expect("priya lands v2");

    // Pull only (never push) until Priya's v2 is here.
    pull_until(&dana, &mut pokes, |d| mirrored_version(d, x) == 2).await;
    let rows = dana.pending_rows().expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].base_version, 1, "the base the user saw");
    assert_eq!(rows[0].request.body["base_version"], 1, "the request too");
    // A new act chains on the pending one, not on the pulled version.
    dana.edit_order(x, po("P-1")).expect("another edit");
    assert_eq!(dana.pending_rows().expect("rows")[1].base_version, 2);

    let report = dana.push().await.expect("push");
    assert_eq!(report.conflicts, 1);
    let doc = server.order(&token, x).await;
    assert_eq!(doc.notes.as_deref(), Some("hold"), "not overwritten");
    assert_eq!(doc.version, 2);
    let c = dana.conflict(x).expect("conflict").expect("open");
    assert_eq!(c.changed_by, "Priya Raman");
    let f = c.fields.iter().find(|f| f.field == "notes").expect("notes");
    assert!(f.collides);
    assert_eq!(
        (f.base.clone(), f.mine.clone(), f.theirs.clone()),
        (
            serde_json::Value::Null,
            serde_json::json!("rush"),
            serde_json::json!("hold")
        )
    );
}

/// Must show: an allocation refused for stock surfaces with the ATS now and
/// the choices; "reduce to ATS" lands. The act behind it on the same order
/// waits for the choice, then lands too.
#[sqlx::test(migrations = "../migrations")]
async fn ats_rejection_shows_current_ats_and_reduce_lands(db: PgPool) {
    let server = Server::start(db).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dana = open(dir.path(), "dana", fast_config());
    let priya = open(dir.path(), "priya", fast_config());
    login(&dana, &server.url(), "dana@acme.test").await;
    login(&priya, &server.url(), "priya@acme.test").await;
    let token = server.token("dana@acme.test").await;

    // Priya takes 2 of the 6 Kestrel M while Dana is offline.
    let p = new_order(&priya);
    let pl = priya.add_line(p, kestrel_m(), 2).expect("line");
    priya.allocate(p, pl, 2).expect("allocate");
    priya.sync_once().await.expect("priya syncs");

    let x = new_order(&dana);
    let line = dana.add_line(x, kestrel_m(), 10).expect("line");
    dana.allocate(x, line, 10).expect("queue allocation");
    dana.edit_order(x, notes("allocate what we can"))
        .expect("edit");
    let report = dana.sync_once().await.expect("sync");
    assert_eq!((report.applied, report.rejections), (2, 1));
    assert_eq!(
        dana.order(x).expect("view").expect("x").badge,
        Badge::Rejected
    );

    let rejections = dana.rejections().expect("rejections");
    assert_eq!(rejections.len(), 1);
    let r = &rejections[0];
    assert_eq!(r.code, ProblemCode::InsufficientAts);
    assert_eq!(r.facts["ats_available"], 4);
    assert_eq!(r.facts["ats_now"], 4);
    assert_eq!(r.facts["requested"], 10);
    assert!(r.choices.contains(&RejectionChoice::ReduceToAts { qty: 4 }));
    assert!(r.choices.contains(&RejectionChoice::RemoveLine));
    assert!(r.choices.contains(&RejectionChoice::TryAgain));
    assert_eq!(server.order(&token, x).await.notes, None, "held behind it");

    dana.resolve_rejection(r.id, &RejectionChoice::ReduceToAts { qty: 4 })
        .expect("reduce");
    let report = dana.sync_once().await.expect("sync");
    assert_eq!(report.applied, 2);
    let doc = server.order(&token, x).await;
    assert_eq!(doc.lines[0].qty_allocated, 4);
    assert_eq!(doc.notes.as_deref(), Some("allocate what we can"));
    assert_eq!(server.sku(&token, kestrel_m()).await.ats, 0);
    assert!(dana.rejections().expect("rejections").is_empty());
    assert_eq!(dana.order(x).expect("view").expect("x").order, doc);
}

/// A request the server calls malformed is a bug: it is surfaced with the
/// field, never dropped silently; dismissing it re-chains the acts behind it.
#[sqlx::test(migrations = "../migrations")]
async fn a_malformed_act_is_surfaced_with_its_field(db: PgPool) {
    let server = Server::start(db).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dana = open(dir.path(), "dana", fast_config());
    login(&dana, &server.url(), "dana@acme.test").await;
    let token = server.token("dana@acme.test").await;
    let x = new_order(&dana);
    dana.sync_once().await.expect("sync");

    dana.edit_order(x, po(&"P".repeat(150))).expect("queued");
    dana.edit_order(x, notes("after the bad one"))
        .expect("queued");
    assert_eq!(dana.sync_once().await.expect("sync").rejections, 1);
    let r = &dana.rejections().expect("rejections")[0];
    assert_eq!(r.http_status, 400);
    assert_eq!(r.code, ProblemCode::ValidationFailed);
    assert_eq!(r.facts["errors"][0]["field"], "set.customer_po");
    assert_eq!(dana.status().expect("status").pending, 2, "nothing dropped");

    dana.resolve_rejection(r.id, &RejectionChoice::Dismiss)
        .expect("dismiss");
    let rows = dana.pending_rows().expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].base_version, 1, "lost the dismissed act's +1");
    dana.sync_once().await.expect("sync");
    let doc = server.order(&token, x).await;
    assert_eq!(
        (doc.notes.as_deref(), doc.version),
        (Some("after the bad one"), 2)
    );
}
