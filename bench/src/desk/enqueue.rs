//! Item 9a: the latency of each act typed into the engine, against the same
//! rows inserted one per transaction into a bare SQLite file.

use std::path::Path;
use std::time::{Duration, Instant};

use holdfast_client::{Engine, NewOrder};
use holdfast_protocol::model::OrderHeaderSet;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use uuid::Uuid;

use super::{Sizes, ACTS_PER_ORDER};
use crate::items::Ctx;
use crate::load::Latencies;
use crate::progress;
use crate::report::{latency, ms, Goal, Row};
use crate::setup::LINES_PER_ORDER;

/// The `pending` table's schema (client/src/store/pending.rs), for the bare
/// SQLite baseline.
const PENDING_DDL: &str = "create table pending (
    seq             integer primary key autoincrement,
    idempotency_key text not null unique,
    order_id        text not null,
    schema_version  integer not null,
    act             text,
    method          text not null,
    path            text not null,
    body            text not null,
    base_version    integer not null,
    base_doc        text,
    created_at      integer not null,
    attempts        integer not null default 0,
    next_attempt_at integer not null,
    last_error      text,
    status          text not null default 'queued'
);
create index pending_order on pending (order_id, seq);";

const PENDING_COPY: &str = "idempotency_key, order_id, schema_version, act, method, path, body, \
                            base_version, base_doc, created_at, next_attempt_at";

/// 9a: item 4's mix typed into the desk's engine, each act timed, and the
/// rows it queued copied into the bare baseline one transaction each.
pub(super) fn measure(
    ctx: &Ctx,
    engine: &Engine,
    store_path: &Path,
    dir: &Path,
    sizes: &Sizes,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    let acts = sizes.acts();
    progress::step(format_args!(
        "item 9a: {acts} acts through the engine vs bare SQLite inserts"
    ));
    let reader = rusqlite::Connection::open(store_path)?;
    let bare_path = dir.join("bare.db");
    let mut bare = rusqlite::Connection::open(&bare_path)?;
    let mode: String = bare.query_row("pragma journal_mode = wal", [], |r| r.get(0))?;
    anyhow::ensure!(mode.eq_ignore_ascii_case("wal"), "bare SQLite: no WAL");
    bare.execute_batch("pragma synchronous = full;")?;
    bare.execute_batch(PENDING_DDL)?;
    let insert = format!("insert into pending ({PENDING_COPY}) values (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
    let skus = &ctx.fixture.spread_skus;
    let mut rng = StdRng::seed_from_u64(9);
    let mut last_seq: i64 =
        reader.query_row("select coalesce(max(seq), 0) from pending", [], |r| {
            r.get(0)
        })?;
    let (mut e_lat, mut b_lat) = (Vec::with_capacity(acts), Vec::with_capacity(acts));
    let mut bytes = 0usize;
    let mut tick = progress::Ticker::new("item 9a acts", acts);
    for o in 0..sizes.desk_orders {
        let timed = |lat: &mut Vec<Duration>, f: &mut dyn FnMut() -> anyhow::Result<()>| {
            let started = Instant::now();
            f()?;
            lat.push(started.elapsed());
            anyhow::Ok(())
        };
        let mut order = Uuid::nil();
        timed(&mut e_lat, &mut || {
            order = engine.create_order(NewOrder {
                customer_id: ctx.fixture.customer,
                customer_po: Some(format!("DESK-{o}")),
                ..NewOrder::default()
            })?;
            Ok(())
        })?;
        for _ in 0..LINES_PER_ORDER {
            let sku = skus[rng.random_range(0..skus.len())];
            let mut line = Uuid::nil();
            timed(&mut e_lat, &mut || {
                line = engine.add_line(order, sku, 10)?;
                Ok(())
            })?;
            timed(&mut e_lat, &mut || {
                engine.allocate(order, line, 2)?;
                Ok(())
            })?;
            timed(&mut e_lat, &mut || {
                engine.change_line(order, line, 12)?;
                Ok(())
            })?;
        }
        timed(&mut e_lat, &mut || {
            engine.edit_order(
                order,
                OrderHeaderSet {
                    notes: Some(Some("called back: ship by Friday".into())),
                    ..OrderHeaderSet::default()
                },
            )?;
            Ok(())
        })?;
        // The same rows, byte for byte, one transaction each.
        let copied: Vec<Vec<rusqlite::types::Value>> = {
            let mut stmt = reader.prepare(&format!(
                "select seq, {PENDING_COPY} from pending where seq > ?1 order by seq"
            ))?;
            let rows = stmt.query_map([last_seq], |r| {
                (0..12)
                    .map(|i| r.get::<_, rusqlite::types::Value>(i))
                    .collect::<Result<Vec<_>, _>>()
            })?;
            rows.collect::<Result<_, _>>()?
        };
        for row in copied {
            if let rusqlite::types::Value::Integer(seq) = row[0] {
                last_seq = seq;
            }
            bytes += row
                .iter()
                .map(|v| match v {
                    rusqlite::types::Value::Text(t) => t.len(),
                    _ => 8,
                })
                .sum::<usize>();
            let started = Instant::now();
            let tx = bare.transaction()?;
            tx.execute(&insert, rusqlite::params_from_iter(&row[1..]))?;
            tx.commit()?;
            b_lat.push(started.elapsed());
        }
        tick.tick((o + 1) * ACTS_PER_ORDER);
    }
    anyhow::ensure!(
        b_lat.len() == e_lat.len(),
        "copied {} rows for {} acts",
        b_lat.len(),
        e_lat.len()
    );
    let row_bytes = bytes / b_lat.len().max(1);
    let (e, b) = (Latencies::new(e_lat), Latencies::new(b_lat));
    rows.push(Row {
        item: "9a".into(),
        what: format!(
            "local enqueue through the engine (item 4's mix, {} acts, store mirroring 8a) vs bare \
             SQLite insert + commit of the same rows (~{row_bytes} B), WAL, synchronous=FULL",
            crate::report::thousands(acts as u64)
        ),
        holdfast: format!("{} p99", ms(e.p99())),
        baseline: format!("{} p99", ms(b.p99())),
        ratio: Some(b.p50().as_secs_f64() / e.p50().as_secs_f64()),
        holdfast_latency: latency(&e),
        baseline_latency: latency(&b),
        goal: Goal::new("p99 ≤ 2 ms", e.p99() <= Duration::from_millis(2)),
        ..Row::default()
    });
    drop(reader);
    Ok(())
}
