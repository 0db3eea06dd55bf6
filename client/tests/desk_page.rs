//! The desk's paged list (`Engine::order_page`): the same rows, in the same
//! order, with the same filters and search, as every summary sorted and
//! filtered the way the desk did it over the whole list, for orders that are
//! only mirrored, orders with pending acts on top of the mirror, and orders
//! only this desk knows.

mod support;

use holdfast_client::view::{Badge, DeskQuery, OrderSummary};
use holdfast_client::{Engine, NewOrder};
use holdfast_protocol::model::{OrderHeaderSet, OrderStatus};
use sqlx::PgPool;
use support::*;
use uuid::Uuid;

/// What the desk showed before the engine paged it: every summary, filtered,
/// searched and sorted (newest change first, ties by id).
fn reference(desk: &Engine, q: &DeskQuery) -> Vec<OrderSummary> {
    let names: std::collections::HashMap<Uuid, String> = desk
        .customers()
        .expect("customers")
        .into_iter()
        .map(|c| (c.id, c.name))
        .collect();
    let words = q.words();
    let mut rows: Vec<OrderSummary> = desk
        .order_summaries()
        .expect("summaries")
        .into_iter()
        .filter(|s| q.keeps(s.badge, s.order.status))
        .filter(|s| {
            let o = &s.order;
            let hay = format!(
                "{} {} {} {}",
                names
                    .get(&o.customer_id)
                    .map(String::as_str)
                    .unwrap_or("Unknown customer"),
                o.customer_po.as_deref().unwrap_or(""),
                o.notes.as_deref().unwrap_or(""),
                o.id
            )
            .to_lowercase();
            words.iter().all(|w| hay.contains(w.as_str()))
        })
        .collect();
    rows.sort_by(|a, b| {
        b.order
            .updated_at
            .cmp(&a.order.updated_at)
            .then(a.order.id.cmp(&b.order.id))
    });
    rows
}

fn ids(rows: &[OrderSummary]) -> Vec<Uuid> {
    rows.iter().map(|s| s.order.id).collect()
}

/// A row as JSON, without the times a view stamps on the user's acts when
/// it is built (an order with acts shows "now" as its last change).
fn content(s: &OrderSummary) -> serde_json::Value {
    let mut v = serde_json::to_value(s).expect("json");
    if s.pending_count > 0 {
        let o = v["order"].as_object_mut().expect("order");
        o.remove("updated_at");
        o.remove("created_at");
    }
    v
}

fn check(desk: &Engine, q: DeskQuery) {
    let want = reference(desk, &q);
    let whole = desk
        .order_page(&DeskQuery {
            offset: 0,
            limit: DeskQuery::MAX_LIMIT,
            ..q.clone()
        })
        .expect("the whole list");
    assert_eq!(whole.total, want.len(), "total for {q:?}");
    // The same rows. Orders with acts (stamped "now") come first in both,
    // the rest in the same order.
    let mut got_ids = ids(&whole.rows);
    let mut want_ids = ids(&want);
    let acted = |rows: &[OrderSummary]| rows.iter().take_while(|s| s.pending_count > 0).count();
    assert_eq!(
        acted(&whole.rows),
        acted(&want),
        "orders with acts first, {q:?}"
    );
    assert_eq!(
        got_ids[acted(&want)..],
        want_ids[acted(&want)..],
        "mirrored rows in order, {q:?}"
    );
    got_ids.sort();
    want_ids.sort();
    assert_eq!(got_ids, want_ids, "rows for {q:?}");
    for got in &whole.rows {
        let w = want
            .iter()
            .find(|w| w.order.id == got.order.id)
            .expect("in both");
        assert_eq!(
            content(got),
            content(w),
            "the row is the summary the whole list had"
        );
    }
    // The window is that list's slice, and the selection's place in it.
    let page = desk.order_page(&q).expect("page");
    assert_eq!(page.total, whole.total);
    assert_eq!(page.offset, q.offset);
    let end = whole.total.min(q.offset + q.limit);
    let window = whole.rows.get(q.offset.min(end)..end).unwrap_or(&[]);
    assert_eq!(ids(&page.rows), ids(window), "window for {q:?}");
    let at = q
        .selected
        .and_then(|id| whole.rows.iter().position(|s| s.order.id == id));
    assert_eq!(page.selected_index, at, "selected for {q:?}");
    assert_eq!(whole.selected_index, at);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_page_is_the_window_of_the_whole_filtered_sorted_list(db: PgPool) {
    let server = Server::start(db).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let desk = open(dir.path(), "dana", fast_config());
    login(&desk, &server.url(), "dana@acme.test").await;
    let new = |customer: Uuid, po: &str, notes: Option<&str>| {
        desk.create_order(NewOrder {
            customer_id: customer,
            customer_po: Some(po.into()),
            notes: notes.map(str::to_owned),
            ..Default::default()
        })
        .expect("create")
    };
    let mut made = Vec::new();
    for i in 0..12 {
        let customer = if i % 3 == 0 { austin() } else { tokyo() };
        let notes = (i % 4 == 0).then_some("Fax the ÉTÉ run");
        made.push(new(customer, &format!("PO-{i}"), notes));
    }
    sync_until(&desk, |d| d.status().expect("status").pending == 0).await;
    // Some mirrored orders gain pending acts (one confirmed), and two only
    // this desk knows.
    desk.edit_order(
        made[2],
        OrderHeaderSet {
            notes: Some(Some("rush".into())),
            ..Default::default()
        },
    )
    .expect("edit");
    desk.confirm(made[5]).expect("confirm");
    new(austin(), "LOCAL-1", None);
    new(tokyo(), "LOCAL-2", Some("été"));

    let all = reference(&desk, &DeskQuery::default());
    assert!(all.len() >= 14, "the demo's orders and ours: {}", all.len());
    let pending = all.iter().filter(|s| s.badge == Badge::Pending).count();
    assert!(
        pending >= 4,
        "mirrored and local orders with acts: {pending}"
    );
    let selected = Some(all[all.len() / 2].order.id);
    for offset in [0, 1, 5, all.len() - 1, all.len(), all.len() + 3] {
        for limit in [0, 1, 4, 60] {
            check(
                &desk,
                DeskQuery {
                    offset,
                    limit,
                    selected,
                    ..Default::default()
                },
            );
        }
    }
    let filters = [
        (Some(Badge::Pending), None, ""),
        (Some(Badge::Synced), None, ""),
        (Some(Badge::Conflict), None, ""),
        (None, Some(OrderStatus::Confirmed), ""),
        (None, Some(OrderStatus::Draft), "po-1"),
        (None, None, "tokyo"),
        (None, None, "  AUSTIN   po  "),
        (None, None, "été"),
        (None, None, "rush"),
        (Some(Badge::Pending), None, "local"),
        (None, None, "no such words"),
    ];
    for (badge, status, q) in filters {
        for offset in [0, 2] {
            check(
                &desk,
                DeskQuery {
                    badge,
                    status,
                    q: q.into(),
                    offset,
                    limit: 5,
                    selected,
                },
            );
        }
    }
    // The search matches the order id too, and a limit past the most is cut.
    let id = made[7];
    let page = desk
        .order_page(&DeskQuery {
            q: id.to_string()[24..].to_uppercase(),
            limit: usize::MAX,
            ..Default::default()
        })
        .expect("page");
    assert_eq!(ids(&page.rows), vec![id]);
}
