//! An allocation on an order whose latest document the server holds is one
//! call (`engine::known`): it answers, stores and announces exactly what the
//! ordinary path does, and whatever it cannot vouch for — the order moved on
//! elsewhere, the stock short, a key still running, a token revoked — is
//! decided by the ordinary path, with nothing of the call left behind.

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgPool};
use uuid::Uuid;

use super::{allocate_path, order_with_line, position};
use crate::monitoring::sample;
use crate::support::audit::{assert_ledgers_match_positions, assert_one_history_entry_per_version};
use crate::support::{
    acme, assert_problem, end_other_sessions, kestrel_m, key, Raw, TestServer, MIGRATIONS,
};

const MOVED: &str = "holdfast_known_order_allocations_total{outcome=\"moved\"}";
const DECLINED: &str = "holdfast_known_order_allocations_total{outcome=\"declined\"}";

/// `POST …/allocate` of `qty` on the order's line, with `key`.
async fn allocate(s: &TestServer, token: &str, at: (Uuid, Uuid), key: &str, qty: i64) -> Raw {
    s.post(
        token,
        &allocate_path(at.0, at.1),
        key,
        json!({ "qty": qty }),
    )
    .await
}

/// `POST …/release` of `qty` on the order's line, with `key`.
async fn release(s: &TestServer, token: &str, at: (Uuid, Uuid), key: &str, qty: i64) -> Raw {
    let path = format!("/v1/orders/{}/lines/{}/release", at.0, at.1);
    s.post(token, &path, key, json!({ "qty": qty })).await
}

async fn history(s: &TestServer, token: &str, order: Uuid) -> Vec<Value> {
    let (status, body) = s.get(&format!("/v1/orders/{order}/history"), token).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["entries"].as_array().expect("entries").clone()
}

/// The order's outbox events: (type, sequence, the payload's data).
async fn order_events(db: &PgPool, order: Uuid) -> Vec<(String, i64, Value)> {
    sqlx::query_as(
        "select event_type, sequence, payload->'data' from outbox
          where aggregate_kind = 'order' and aggregate_id = $1 order by sequence",
    )
    .bind(order)
    .fetch_all(db)
    .await
    .expect("events")
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_known_order_allocates_in_one_call_exactly_as_the_ordinary_path(db: PgPool) {
    // Two servers on one database: `a` learns the order from its own
    // answers; `b` holds nothing, so everything it does is the ordinary path.
    let a = TestServer::start(db.clone()).await;
    let b = TestServer::start(db.clone()).await;
    let dana = a.login("acme", "dana@acme.test").await;
    let (order, line, _) = order_with_line(&a, &dana, "Austin Boutique", kestrel_m(), 5).await;
    let ats_before = {
        let (on_hand, on_order, allocated) = position(&db, kestrel_m()).await;
        on_hand + on_order - allocated
    };

    // `a` answered the line's add, so it knows the order: one call.
    let fast_key = key();
    let fast = allocate(&a, &dana, (order, line), &fast_key, 2).await;
    assert_eq!(fast.status, StatusCode::OK, "{}", fast.json());
    assert_eq!(sample(&a, MOVED).await, 1.0);
    let answer = fast.json();
    assert_eq!(answer["ats_after"], ats_before - 2);
    let (_, read) = a.get(&format!("/v1/orders/{order}"), &dana).await;
    assert_eq!(
        answer["order"], read,
        "the answer is the order as a read returns it"
    );
    assert_eq!(read["lines"][0]["qty_allocated"], 2);
    let written: DateTime<Utc> = sqlx::query_scalar("select updated_at from orders where id = $1")
        .bind(order)
        .fetch_one(&db)
        .await
        .expect("updated_at");
    assert_eq!(
        answer["order"]["updated_at"],
        json!(written),
        "the stamp Postgres spliced in"
    );
    let again = allocate(&a, &dana, (order, line), &fast_key, 2).await;
    assert!(again.replayed());
    assert_eq!(
        again.bytes, fast.bytes,
        "a replay sends the stored bytes, which are the answer's"
    );

    // The same move the ordinary way, from `b`, writes the same kinds of rows.
    let slow = allocate(&b, &dana, (order, line), &key(), 1).await;
    assert_eq!(slow.status, StatusCode::OK, "{}", slow.json());
    assert_eq!(sample(&a, MOVED).await, 1.0, "b did not know the order");
    let entries = history(&a, &dana, order).await;
    let (fast_entry, slow_entry) = (&entries[entries.len() - 2], &entries[entries.len() - 1]);
    assert_eq!(fast_entry["idempotency_key"], fast_key.as_str());
    for member in ["event_type", "by_name"] {
        assert_eq!(fast_entry[member], slow_entry[member], "{member}");
    }
    let facts = |e: &Value| {
        let mut keys: Vec<String> = e["facts"]
            .as_object()
            .expect("facts")
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(facts(fast_entry), facts(slow_entry));
    assert_eq!(fast_entry["facts"]["qty"], 2);
    let events = order_events(&db, order).await;
    let sequences: Vec<i64> = events.iter().map(|e| e.1).collect();
    assert_eq!(
        sequences,
        (1..=events.len() as i64).collect::<Vec<_>>(),
        "gap-free"
    );
    let (fast_event, slow_event) = (&events[events.len() - 2], &events[events.len() - 1]);
    assert_eq!(fast_event.0, "order.line_allocated");
    assert_eq!(fast_event.0, slow_event.0);
    assert_eq!(fast_event.2["qty"], 2);
    assert_eq!(fast_event.2["ats_after"], ats_before - 2);
    assert_eq!(
        fast_event.2["version"].as_i64().map(|v| v + 1),
        slow_event.2["version"].as_i64()
    );

    // `b` moved the order on: `a`'s document is stale, its call declines,
    // and the ordinary path answers from the order as it is.
    let after_b = allocate(&a, &dana, (order, line), &key(), 1).await;
    assert_eq!(after_b.status, StatusCode::OK, "{}", after_b.json());
    assert_eq!(sample(&a, DECLINED).await, 1.0);
    assert_eq!(after_b.json()["order"]["lines"][0]["qty_allocated"], 4);
    assert_eq!(
        after_b.json()["order"]["version"],
        slow.json()["order"]["version"].as_i64().expect("version") + 1
    );
    // …and it learned the order again from that answer.
    let last = allocate(&a, &dana, (order, line), &key(), 1).await;
    assert_eq!(last.status, StatusCode::OK, "{}", last.json());
    assert_eq!(sample(&a, MOVED).await, 2.0);
    assert_eq!(last.json()["order"]["lines"][0]["qty_allocated"], 5);
    // A release on it is one call too.
    let release = release(&a, &dana, (order, line), &key(), 3).await;
    assert_eq!(release.status, StatusCode::OK, "{}", release.json());
    assert_eq!(sample(&a, MOVED).await, 3.0);
    assert_eq!(release.json()["order"]["lines"][0]["qty_allocated"], 2);
    assert_eq!(release.json()["ats_after"], ats_before - 2);

    assert_ledgers_match_positions(&db).await;
    assert_one_history_entry_per_version(&db).await;
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_known_order_short_of_stock_is_refused_the_ordinary_way(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let before = position(&db, kestrel_m()).await;
    let ats = before.0 + before.1 - before.2;
    let (order, line, _) =
        order_with_line(&s, &dana, "Austin Boutique", kestrel_m(), ats + 5).await;
    let k = key();
    let refused = allocate(&s, &dana, (order, line), &k, ats + 1).await;
    assert_problem(refused.status, &refused.json(), 422, "insufficient_ats");
    assert_eq!(refused.json()["ats_available"], ats);
    assert_eq!(
        sample(&s, DECLINED).await,
        1.0,
        "the call was tried and declined"
    );
    assert_eq!(position(&db, kestrel_m()).await, before, "nothing moved");
    // The refusal is stored like any other: the retry replays it.
    let again = allocate(&s, &dana, (order, line), &k, ats + 1).await;
    assert!(again.replayed());
    assert_eq!(again.bytes, refused.bytes);
    let ledger: i64 =
        sqlx::query_scalar("select count(*) from allocation_ledger where idempotency_key = $1")
            .bind(&k)
            .fetch_one(&db)
            .await
            .expect("ledger");
    assert_eq!(ledger, 0);
    assert_ledgers_match_positions(&db).await;
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_kept_connection_that_broke_meanwhile_costs_the_allocation_nothing(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    // A pool large enough that `db::warm` keeps a connection out of it.
    let db = holdfast_server::pool_options(8, std::time::Duration::from_secs(5))
        .connect_with(connect.clone())
        .await
        .expect("pool");
    let s = TestServer::start(db.clone()).await;
    let mut admin = sqlx::PgConnection::connect_with(&connect)
        .await
        .expect("admin");
    let dana = s.login("acme", "dana@acme.test").await;
    let (order, line, _) = order_with_line(&s, &dana, "Austin Boutique", kestrel_m(), 6).await;
    let first = allocate(&s, &dana, (order, line), &key(), 1).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.json());
    assert_eq!(sample(&s, MOVED).await, 1.0);

    // The connection that call ran on is kept for the next; end it there.
    assert!(end_other_sessions(&mut admin).await > 0);
    let k = key();
    let second = allocate(&s, &dana, (order, line), &k, 2).await;
    assert_eq!(
        second.status,
        StatusCode::OK,
        "the broken connection is not the caller's problem: {}",
        second.json()
    );
    assert_eq!(
        sample(&s, MOVED).await,
        1.0,
        "the move was made the ordinary way"
    );
    assert_eq!(second.json()["order"]["lines"][0]["qty_allocated"], 3);
    let again = allocate(&s, &dana, (order, line), &k, 2).await;
    assert!(again.replayed(), "made once");

    let third = allocate(&s, &dana, (order, line), &key(), 1).await;
    assert_eq!(third.status, StatusCode::OK, "{}", third.json());
    assert_eq!(sample(&s, MOVED).await, 2.0, "one call again");
    assert_eq!(third.json()["order"]["lines"][0]["qty_allocated"], 4);
    assert_ledgers_match_positions(&db).await;
    admin.close().await.expect("close");
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_revoked_token_is_refused_on_a_known_order_and_writes_nothing(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let (order, line, _) = order_with_line(&s, &dana, "Austin Boutique", kestrel_m(), 3).await;
    let first = allocate(&s, &dana, (order, line), &key(), 1).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(sample(&s, MOVED).await, 1.0);
    // Revoked behind the server's back: only the call's own proof can tell.
    sqlx::query("update device_tokens set revoked_at = now() where tenant_id = $1")
        .bind(acme())
        .execute(&db)
        .await
        .expect("revoke");
    let before = position(&db, kestrel_m()).await;
    let k = key();
    let refused = allocate(&s, &dana, (order, line), &k, 1).await;
    assert_problem(refused.status, &refused.json(), 401, "unauthorized");
    assert_eq!(position(&db, kestrel_m()).await, before);
    let keys: i64 = sqlx::query_scalar("select count(*) from idempotency_keys where key = $1")
        .bind(&k)
        .fetch_one(&db)
        .await
        .expect("keys");
    assert_eq!(keys, 0, "no claim is left behind");
    assert_eq!(sample(&s, MOVED).await, 1.0);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_key_still_running_is_answered_in_flight_on_a_known_order(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let (order, line, _) = order_with_line(&s, &dana, "Austin Boutique", kestrel_m(), 3).await;
    // Another request holding this key, not finished.
    let k = key();
    let mut holder = db.begin().await.expect("begin");
    sqlx::query(
        "insert into idempotency_keys (tenant_id, key, fingerprint, status_code, response_body)
         values ($1, $2, 'another request', 0, ''::bytea)",
    )
    .bind(acme())
    .bind(&k)
    .execute(&mut *holder)
    .await
    .expect("hold the key");
    let before = position(&db, kestrel_m()).await;
    let waiting = allocate(&s, &dana, (order, line), &k, 1).await;
    assert_problem(waiting.status, &waiting.json(), 409, "request_in_flight");
    assert!(waiting.headers.contains_key("retry-after"));
    holder.rollback().await.expect("rollback");
    assert_eq!(position(&db, kestrel_m()).await, before);
    assert_eq!(sample(&s, MOVED).await, 0.0);
    // Once the holder is gone the key is free, and the order still known.
    let done = allocate(&s, &dana, (order, line), &k, 1).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.json());
    assert_eq!(sample(&s, MOVED).await, 1.0);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn json_timestamp_writes_a_time_as_the_server_json_does(db: PgPool) {
    for micros in [0, 500_000, 123_000, 1, 100, 123_456, 999_999] {
        let at = DateTime::<Utc>::from_timestamp(1_796_400_000, micros * 1000).expect("time");
        let sql: String = sqlx::query_scalar("select json_timestamp($1)")
            .bind(at)
            .fetch_one(&db)
            .await
            .expect("json_timestamp");
        assert_eq!(json!(sql), json!(at), "{micros} µs");
    }
    // Whatever the session's time zone.
    let mut conn = db.acquire().await.expect("conn");
    sqlx::query("set timezone = 'Asia/Kolkata'")
        .execute(&mut *conn)
        .await
        .expect("tz");
    let at = DateTime::<Utc>::from_timestamp(1_796_400_000, 250_000_000).expect("time");
    let sql: String = sqlx::query_scalar("select json_timestamp($1)")
        .bind(at)
        .fetch_one(&mut *conn)
        .await
        .expect("json_timestamp");
    assert_eq!(json!(sql), json!(at));
}

/// How many times `conn`'s current transaction has scanned the key table
/// sequentially (counts not yet reported, so exact for this transaction).
async fn key_table_scans(conn: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar(
        "select coalesce(sum(seq_scan), 0)::int8 from pg_stat_xact_user_tables
          where relname = 'idempotency_keys'",
    )
    .fetch_one(conn)
    .await
    .expect("scans")
}

/// One allocation of 1 through `allocation_move` on `conn`, as the engine
/// makes it (the key claimed first, in the same transaction); returns how
/// many times that transaction scanned the key table.
async fn move_one(conn: &mut sqlx::PgConnection, order: Uuid, line: Uuid, user: Uuid) -> i64 {
    let mut tx = sqlx::Connection::begin(conn).await.expect("begin");
    let k = key();
    sqlx::query(
        "insert into idempotency_keys (tenant_id, key, fingerprint, status_code, response_body)
         values ($1, $2, 'f', 0, '')",
    )
    .bind(acme())
    .bind(&k)
    .execute(&mut *tx)
    .await
    .expect("claim");
    let version: i64 = sqlx::query_scalar("select version from orders where id = $1")
        .bind(order)
        .fetch_one(&mut *tx)
        .await
        .expect("version");
    let moved: Option<i64> = sqlx::query_scalar(
        "select version from allocation_move($1, $2, 1, $3, $4, $5, $6, $7, 'now',
                 'allocate', 'order.line_allocated', 1, 'head', 'mid', 'tail')",
    )
    .bind(acme())
    .bind(kestrel_m())
    .bind(order)
    .bind(line)
    .bind(&k)
    .bind(user)
    .bind(version)
    .fetch_optional(&mut *tx)
    .await
    .expect("move");
    assert_eq!(moved, Some(version + 1), "the move was made");
    let scans = key_table_scans(&mut tx).await;
    tx.commit().await.expect("commit");
    scans
}

/// `allocation_move` stores its answer by the key's primary key however
/// small the key table was when the connection planned it. Plpgsql keeps a
/// generic plan per connection, made on about the sixth call: made on a
/// young database, the answer's write was a sequential scan, and every
/// later call on that connection read the whole key table until an ANALYZE
/// made it plan again.
#[sqlx::test(migrator = "MIGRATIONS")]
async fn the_answer_is_stored_by_key_however_small_the_key_table_was_when_planned(db: PgPool) {
    let s = TestServer::start(db.clone()).await;
    let dana = s.login("acme", "dana@acme.test").await;
    let (order, line, _) = order_with_line(&s, &dana, "Austin Boutique", kestrel_m(), 40).await;
    let user: Uuid = sqlx::query_scalar("select id from users where email = 'dana@acme.test'")
        .fetch_one(&db)
        .await
        .expect("dana");
    // Stock for every move below (the demo's is a few units).
    sqlx::query("update sku_positions set on_hand = on_hand + 100 where sku_id = $1")
        .bind(kestrel_m())
        .execute(&db)
        .await
        .expect("stock");
    // Statistics of a young database (autovacuum's first ANALYZE, or the
    // bench's after it seeds): the key table is all but empty.
    sqlx::query("analyze idempotency_keys")
        .execute(&db)
        .await
        .expect("analyze");
    let mut mover = db.acquire().await.expect("conn");
    // The connection plans while the key table is a page or two.
    for _ in 0..8 {
        move_one(&mut mover, order, line, user).await;
    }
    // The table grows, and nothing analyses it.
    sqlx::query(
        "insert into idempotency_keys (tenant_id, key, fingerprint, status_code, response_body)
         select $1, 'filler-' || i, 'f', 200, '' from generate_series(1, 20000) i",
    )
    .bind(acme())
    .execute(&db)
    .await
    .expect("filler");

    assert_eq!(
        move_one(&mut mover, order, line, user).await,
        0,
        "the key table was scanned"
    );
}
