//! The promises, as checks over what the run left behind: the database
//! (read directly, as an auditor would), the desks' record of every key they
//! minted, the warehouse's answers, and what partners accepted.
//!
//! Each check counts as passed or adds a violation naming what it found.

use std::collections::{BTreeMap, HashMap, HashSet};

use holdfast_client::act::Act;
use holdfast_server::db::audit::ledger_mismatches;
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use crate::keys::{KeyInfo, KeyState};
use crate::partner::Partner;
use crate::warehouse::Sent;

/// Checks passed and violations found so far.
#[derive(Debug, Default, Clone)]
pub struct Audit {
    pub passed: u64,
    pub violations: Vec<String>,
}

impl Audit {
    /// Records one check: passed if `bad` is empty.
    pub fn check(&mut self, name: &str, bad: Vec<String>) {
        if bad.is_empty() {
            self.passed += 1;
            return;
        }
        let shown: Vec<&str> = bad.iter().take(6).map(String::as_str).collect();
        let more = if bad.len() > 6 {
            format!(" … and {} more", bad.len() - 6)
        } else {
            String::new()
        };
        self.violations
            .push(format!("{name}: {}{more}", shown.join("; ")));
    }

    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// The tenant every desk works in.
pub fn acme() -> Uuid {
    holdfast_server::demo::tenant_id("acme")
}

/// The event an act announces (API.md's event types).
pub fn event_of(act: &Act) -> &'static str {
    match act {
        Act::CreateOrder { .. } => "order.created",
        Act::PatchOrder { .. }
        | Act::AddLine { .. }
        | Act::ChangeLine { .. }
        | Act::RemoveLine { .. } => "order.updated",
        Act::Allocate { .. } => "order.line_allocated",
        Act::Release { .. } => "order.line_released",
        Act::Confirm { .. } => "order.confirmed",
        Act::Cancel { .. } => "order.cancelled",
    }
}

async fn rows(db: &PgPool, sql: &str) -> anyhow::Result<Vec<String>> {
    let found: Vec<(String,)> = sqlx::query_as(sql).bind(acme()).fetch_all(db).await?;
    Ok(found.into_iter().map(|(s,)| s).collect())
}

/// The invariants the database alone can answer; cheap enough to run while
/// the server is dead after every kill.
pub async fn database(db: &PgPool, audit: &mut Audit) -> anyhow::Result<()> {
    audit.check(
        "no SKU allocated beyond on_hand + on_order (position)",
        rows(
            db,
            "select format('sku %s: allocated %s of %s', sku_id, allocated, on_hand + on_order)
               from sku_positions
              where tenant_id = $1 and (allocated > on_hand + on_order or allocated < 0)",
        )
        .await?,
    );
    let books = ledger_mismatches(db, Some(acme())).await?;
    audit.check(
        "allocation ledger sums = positions",
        books
            .iter()
            .filter(|m| m.allocation_differs())
            .map(|m| {
                format!(
                    "sku {}: position says {} allocated, ledger {}",
                    m.sku_id, m.position.allocated, m.ledgers.allocated
                )
            })
            .collect(),
    );
    audit.check(
        "no SKU allocated beyond on_hand + on_order (ledger)",
        rows(
            db,
            "select format('sku %s: ledger holds %s of %s', p.sku_id, l.s, p.on_hand + p.on_order)
               from sku_positions p
               join (select sku_id, sum(delta) as s from allocation_ledger where tenant_id = $1 group by sku_id) l
                 on l.sku_id = p.sku_id
              where p.tenant_id = $1 and l.s > p.on_hand + p.on_order",
        )
        .await?,
    );
    audit.check(
        "order lines' allocations = positions",
        rows(
            db,
            "select format('sku %s: lines hold %s, position %s', p.sku_id, coalesce(l.s, 0), p.allocated)
               from sku_positions p
               left join (select sku_id, sum(qty_allocated) as s from order_lines where tenant_id = $1 group by sku_id) l
                 on l.sku_id = p.sku_id
              where p.tenant_id = $1 and p.allocated <> coalesce(l.s, 0)",
        )
        .await?,
    );
    audit.check(
        "each line's allocation = its ledger rows (removed lines: 0)",
        rows(
            db,
            "select format('line %s: holds %s, ledger %s', l.line_id, coalesce(ol.qty_allocated, 0), l.s)
               from (select line_id, sum(delta) as s from allocation_ledger where tenant_id = $1 group by line_id) l
               left join order_lines ol on ol.tenant_id = $1 and ol.id = l.line_id
              where coalesce(ol.qty_allocated, 0) <> l.s",
        )
        .await?,
    );
    audit.check(
        "inventory ledger sums = on_hand and on_order",
        books
            .iter()
            .filter(|m| m.inventory_differs())
            .map(|m| {
                format!(
                    "sku {}: on_hand {} / ledger {}, on_order {} / ledger {}",
                    m.sku_id,
                    m.position.on_hand,
                    m.ledgers.on_hand,
                    m.position.on_order,
                    m.ledgers.on_order
                )
            })
            .collect(),
    );
    // An order's events: sequences 1..=event_seq with no gap; one change
    // may announce more than one event (removing an allocated line is a
    // release and an update), all carrying the version that change made, so
    // versions never go down along the sequence and end at the order's.
    audit.check(
        "every order change announced, sequences gap-free",
        rows(
            db,
            "select format('order %s: event_seq %s, %s events, last sequence %s', o.id, o.event_seq, count(e.id), max(e.sequence))
               from orders o
               left join outbox e on e.tenant_id = o.tenant_id and e.aggregate_kind = 'order' and e.aggregate_id = o.id
              where o.tenant_id = $1
              group by o.id, o.event_seq
             having count(e.id) <> o.event_seq or coalesce(max(e.sequence), 0) <> o.event_seq",
        )
        .await?,
    );
    audit.check(
        "every order version announced, in order, ending at the order's version",
        rows(
            db,
            "with ev as (
                select aggregate_id, sequence, (payload -> 'data' ->> 'version')::bigint as v,
                       lag((payload -> 'data' ->> 'version')::bigint) over (partition by aggregate_id order by sequence) as prev
                  from outbox where tenant_id = $1 and aggregate_kind = 'order')
             select format('order %s: versions announced %s of %s', o.id,
                           (select array_agg(distinct v order by v) from ev where ev.aggregate_id = o.id), o.version)
               from orders o
              where o.tenant_id = $1
                and ((select count(distinct v) from ev where ev.aggregate_id = o.id) <> o.version
                     or (select max(v) from ev where ev.aggregate_id = o.id) is distinct from o.version
                     or exists (select 1 from ev where ev.aggregate_id = o.id and (v < prev or v is null)))",
        )
        .await?,
    );
    audit.check(
        "every SKU position change announced once, in sequence",
        rows(
            db,
            "select format('sku %s: event_seq %s, %s events, last sequence %s', p.sku_id, p.event_seq, count(e.id), max(e.sequence))
               from sku_positions p
               left join outbox e on e.tenant_id = p.tenant_id and e.aggregate_kind = 'sku' and e.aggregate_id = p.sku_id
              where p.tenant_id = $1
              group by p.sku_id, p.event_seq
             having count(e.id) <> p.event_seq or coalesce(max(e.sequence), 0) <> p.event_seq",
        )
        .await?,
    );
    Ok(())
}

/// What the server stored for one idempotency key.
struct Stored {
    status: i16,
    body: Value,
}

impl Stored {
    fn success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The order version a success produced.
    fn version(&self) -> Option<i64> {
        self.body
            .get("order")
            .unwrap_or(&self.body)
            .get("version")
            .and_then(Value::as_i64)
    }

    fn code(&self) -> &str {
        self.body.get("code").and_then(Value::as_str).unwrap_or("")
    }
}

/// Problem codes the server stores and replays (API.md, Idempotency).
const STORED_CODES: &[&str] = &[
    "version_conflict",
    "insufficient_ats",
    "over_allocation",
    "invalid_state",
    "credit_limit_exceeded",
];

/// Every key every desk minted, against the server's stored answers, the
/// orders' versions, the outbox and the allocation ledger:
/// - no pending mutation lost: each key ended acknowledged, conflicted,
///   rejected (with its reason) or superseded unsent;
/// - every acknowledged mutation applied exactly once: its stored answer is
///   a success, the versions those answers produced are exactly 1..=version
///   of their order (none twice, none missing), the event at that sequence is
///   the act's, and an allocation or release has exactly one ledger row;
/// - nothing else applied: no success and no ledger row for any other key,
///   and none for a key no desk minted.
pub async fn keys(
    db: &PgPool,
    all: &[(&String, &KeyInfo)],
    audit: &mut Audit,
) -> anyhow::Result<()> {
    let stored: HashMap<String, Stored> = {
        let found: Vec<(String, i16, Vec<u8>)> = sqlx::query_as(
            "select key, status_code, response_body from idempotency_keys where tenant_id = $1",
        )
        .bind(acme())
        .fetch_all(db)
        .await?;
        found
            .into_iter()
            .map(|(k, status, body)| {
                let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                (k, Stored { status, body })
            })
            .collect()
    };
    let ledger: HashMap<String, Vec<(Uuid, i64, String)>> = {
        let found: Vec<(String, Uuid, i64, String)> = sqlx::query_as(
            "select idempotency_key, line_id, delta, reason from allocation_ledger where tenant_id = $1",
        )
        .bind(acme())
        .fetch_all(db)
        .await?;
        let mut m: HashMap<String, Vec<(Uuid, i64, String)>> = HashMap::new();
        for (k, line, delta, reason) in found {
            m.entry(k).or_default().push((line, delta, reason));
        }
        m
    };
    let versions: HashMap<Uuid, i64> =
        sqlx::query_as::<_, (Uuid, i64)>("select id, version from orders where tenant_id = $1")
            .bind(acme())
            .fetch_all(db)
            .await?
            .into_iter()
            .collect();
    // Events by (order, the version they announce).
    let mut events: HashMap<(Uuid, i64), Vec<String>> = HashMap::new();
    for (o, v, t) in sqlx::query_as::<_, (Uuid, i64, String)>(
        "select aggregate_id, (payload -> 'data' ->> 'version')::bigint, event_type
           from outbox where tenant_id = $1 and aggregate_kind = 'order'",
    )
    .bind(acme())
    .fetch_all(db)
    .await?
    {
        events.entry((o, v)).or_default().push(t);
    }

    let mut unsettled = Vec::new();
    let mut answers = Vec::new();
    let mut unapplied = Vec::new();
    let mut ledger_bad = Vec::new();
    let mut by_order: BTreeMap<Uuid, Vec<(i64, &KeyInfo, &String)>> = BTreeMap::new();
    let known: HashSet<&str> = all.iter().map(|(k, _)| k.as_str()).collect();
    for (key, info) in all {
        let s = stored.get(key.as_str());
        let rows = ledger.get(key.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        let who = format!("desk {} key {key} ({})", info.desk, info.act.describe());
        match info.state {
            KeyState::Queued => unsettled.push(format!("{who}: never answered")),
            KeyState::Quarantined => unsettled.push(format!(
                "{who}: the desk could not read its own act (quarantined)"
            )),
            KeyState::Acked => match s {
                Some(s) if s.success() => match s.version() {
                    Some(v) => by_order
                        .entry(info.order_id)
                        .or_default()
                        .push((v, info, key)),
                    None => answers.push(format!("{who}: stored success names no version")),
                },
                Some(s) => answers.push(format!(
                    "{who}: the desk took it as applied, the server stored {} {}",
                    s.status,
                    s.code()
                )),
                None => answers.push(format!(
                    "{who}: the desk took it as applied, the server has no answer stored"
                )),
            },
            KeyState::Conflicted => match s {
                Some(s) if s.status == 409 && s.code() == "version_conflict" => {}
                Some(s) => answers.push(format!(
                    "{who}: held as a conflict, stored {} {}",
                    s.status,
                    s.code()
                )),
                None => answers.push(format!("{who}: held as a conflict, nothing stored")),
            },
            KeyState::Rejected => {
                let code = info.code.as_deref().unwrap_or("");
                if code == "idempotency_key_reused" {
                    answers.push(format!("{who}: one key sent with two different requests"));
                }
                match s {
                    Some(s) if !s.success() && s.code() == code => {}
                    None if !STORED_CODES.contains(&code) && !code.is_empty() => {}
                    Some(s) => answers.push(format!(
                        "{who}: rejected ({code}) on the desk, stored {} {}",
                        s.status,
                        s.code()
                    )),
                    None => answers.push(format!(
                        "{who}: rejected without a reason the server stored ({code:?})"
                    )),
                }
            }
            KeyState::Superseded => {
                if s.is_some_and(Stored::success) {
                    unapplied.push(format!("{who}: replaced unsent, yet the server applied it"));
                }
            }
        }
        // The ledger, key by key.
        if let Some(problem) = ledger_shape(&info.act, info.state == KeyState::Acked, rows) {
            ledger_bad.push(format!("{who}: {problem}"));
        }
    }
    for (key, s) in &stored {
        if s.success() && !known.contains(key.as_str()) {
            unapplied.push(format!("key {key}: applied, but no desk ever minted it"));
        }
    }
    for key in ledger.keys() {
        if !known.contains(key.as_str()) {
            ledger_bad.push(format!(
                "key {key}: ledger rows, but no desk ever minted it"
            ));
        }
    }
    audit.check("no pending mutation lost (every key answered)", unsettled);
    audit.check("each desk's outcome is the server's stored answer", answers);
    audit.check("nothing applied that no desk saw acknowledged", unapplied);
    audit.check(
        "one ledger row per applied allocation or release, none for others",
        ledger_bad,
    );

    let mut arithmetic = Vec::new();
    let mut announced = Vec::new();
    for (order, id) in versions.keys().map(|o| (by_order.get(o), o)) {
        let version = versions[id];
        let mut got: Vec<i64> = order
            .map(|v| v.iter().map(|(v, ..)| *v).collect())
            .unwrap_or_default();
        got.sort_unstable();
        let want: Vec<i64> = (1..=version).collect();
        if got != want {
            arithmetic.push(format!(
                "order {id}: version {version}, but acknowledged mutations produced versions {got:?}"
            ));
        }
        for (v, info, key) in order.into_iter().flatten() {
            let want = event_of(&info.act);
            match events.get(&(*id, *v)) {
                Some(types) if types.iter().any(|t| t == want) => {}
                other => announced.push(format!(
                    "order {id} v{v} (key {key}): events {other:?}, the act was {want}"
                )),
            }
        }
    }
    for order in by_order.keys() {
        if !versions.contains_key(order) {
            arithmetic.push(format!(
                "order {order}: acknowledged mutations, but no such order"
            ));
        }
    }
    audit.check(
        "version arithmetic: each order's acknowledged mutations produced exactly versions 1..=version",
        arithmetic,
    );
    audit.check(
        "each acknowledged mutation announced by its own event",
        announced,
    );
    Ok(())
}

/// What is wrong with the ledger rows carrying one key, if anything.
fn ledger_shape(act: &Act, applied: bool, rows: &[(Uuid, i64, String)]) -> Option<String> {
    let ok = match (act, applied) {
        (_, false) => rows.is_empty(),
        (Act::Allocate { line_id, qty, .. }, true) => {
            rows.len() == 1 && rows[0].0 == *line_id && rows[0].1 == *qty
        }
        (Act::Release { line_id, qty, .. }, true) => {
            rows.len() == 1 && rows[0].0 == *line_id && rows[0].1 == -*qty
        }
        // Releases what the line held, if anything.
        (Act::RemoveLine { line_id, .. }, true) => {
            rows.len() <= 1 && rows.iter().all(|r| r.0 == *line_id && r.1 < 0)
        }
        // Releases every line's allocation, once each.
        (Act::Cancel { .. }, true) => {
            let lines: HashSet<Uuid> = rows.iter().map(|r| r.0).collect();
            lines.len() == rows.len() && rows.iter().all(|r| r.1 < 0)
        }
        (_, true) => rows.is_empty(),
    };
    (!ok).then(|| {
        let what = if applied { "applied" } else { "not applied" };
        format!("{what} {}, ledger rows {rows:?}", act.kind())
    })
}

/// Each warehouse event the server said it applied is in the inventory
/// ledger exactly once; one it only ever refused, not at all.
pub async fn inbound(
    db: &PgPool,
    sent: &HashMap<String, Sent>,
    audit: &mut Audit,
) -> anyhow::Result<()> {
    let found: Vec<(String, i64, i64)> = sqlx::query_as(
        "select source, count(*), sum(on_hand_delta)::bigint from inventory_ledger
          where tenant_id = $1 and source like 'warehouse:%' group by source",
    )
    .bind(acme())
    .fetch_all(db)
    .await?;
    let booked: HashMap<String, (i64, i64)> = found
        .into_iter()
        .map(|(s, n, d)| (s.trim_start_matches("warehouse:").to_owned(), (n, d)))
        .collect();
    let mut bad = Vec::new();
    let mut unanswered = Vec::new();
    for (id, s) in sent {
        let (n, delta) = booked.get(id).copied().unwrap_or((0, 0));
        if !s.other.is_empty() {
            unanswered.push(format!("event {id}: {:?}", s.other));
        }
        if s.applied() && (n != 1 || delta != s.qty) {
            bad.push(format!(
                "event {id} (qty {}): applied, ledger has {n} row(s) of {delta}",
                s.qty
            ));
        }
        if !s.applied() && n != 0 {
            bad.push(format!(
                "event {id}: only ever refused, yet {n} ledger row(s)"
            ));
        }
    }
    for id in booked.keys() {
        if !sent.contains_key(id) {
            bad.push(format!("event {id}: booked but never sent"));
        }
    }
    audit.check(
        "every inbound event answered (processed, duplicate or refused)",
        unanswered,
    );
    audit.check("a redelivered inbound event applies exactly once", bad);
    Ok(())
}

/// A partner and what it subscribed to.
pub struct Subscriber<'a> {
    pub partner: &'a Partner,
    pub patterns: Vec<String>,
    /// Expected to have everything by the end.
    pub healthy: bool,
}

pub fn matches(pattern: &str, event_type: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => event_type.starts_with(prefix),
        None => pattern == event_type,
    }
}

/// The outbox: (id, type, kind, aggregate, sequence, payload text).
pub type OutboxRow = (i64, String, String, Uuid, i64, String);

/// Only events a partner could be sent: an event fanned out before the
/// tenant had any partner went to nobody (the demo seed's catalogue, whose
/// `sku.updated` events it marks fanned out at once), so no partner owes it.
pub async fn outbox(db: &PgPool) -> anyhow::Result<Vec<OutboxRow>> {
    Ok(sqlx::query_as(
        "select id, event_type, aggregate_kind, aggregate_id, sequence, payload::text
           from outbox o
          where tenant_id = $1
            and (fanned_out_at is null
                 or fanned_out_at >= (select min(created_at) from partners p
                                       where p.tenant_id = o.tenant_id))
          order by id",
    )
    .bind(acme())
    .fetch_all(db)
    .await?)
}

/// Webhook-ids a healthy subscriber has not accepted yet.
pub fn missing(sub: &Subscriber<'_>, outbox: &[OutboxRow]) -> Vec<String> {
    let accepted = sub.partner.accepted();
    outbox
        .iter()
        .filter(|e| sub.patterns.iter().any(|p| matches(p, &e.1)))
        .map(|e| format!("evt_{}", e.0))
        .filter(|id| !accepted.contains_key(id))
        .collect()
}

/// Deliveries, partner by partner:
/// - every committed change reached each healthy partner (by webhook-id),
///   with the very body committed, and per aggregate the sequences it holds
///   run with no gap from the first one it was owed (1, unless the
///   aggregate's first events went out before any partner existed);
/// - nobody received an event that was never committed (a rolled-back
///   change announced) or one whose body changed between redeliveries.
pub fn deliveries(subs: &[Subscriber<'_>], outbox: &[OutboxRow], audit: &mut Audit) {
    let by_id: HashMap<String, &OutboxRow> =
        outbox.iter().map(|e| (format!("evt_{}", e.0), e)).collect();
    for sub in subs {
        let name = sub.partner.name();
        let accepted = sub.partner.accepted();
        let mut phantom = Vec::new();
        for (id, a) in &accepted {
            match by_id.get(id) {
                None => phantom.push(format!("{id}: never committed")),
                Some(e) if e.5 != a.body => {
                    phantom.push(format!("{id}: body differs from the committed event"))
                }
                Some(_) if a.body_changed => {
                    phantom.push(format!("{id}: redelivered with another body"))
                }
                Some(_) => {}
            }
        }
        audit.check(
            &format!("{name}: no uncommitted (rolled-back) change announced"),
            phantom,
        );
        if !sub.healthy {
            continue;
        }
        let gone = missing(sub, outbox);
        audit.check(
            &format!("{name}: every committed change it subscribed to delivered"),
            gone.into_iter()
                .map(|id| format!("{id} never accepted"))
                .collect(),
        );
        let mut seqs: BTreeMap<(String, Uuid), Vec<i64>> = BTreeMap::new();
        let mut first_owed: HashMap<(String, Uuid), i64> = HashMap::new();
        for e in outbox
            .iter()
            .filter(|e| sub.patterns.iter().any(|p| matches(p, &e.1)))
        {
            let first = first_owed.entry((e.2.clone(), e.3)).or_insert(e.4);
            *first = (*first).min(e.4);
            if accepted.contains_key(&format!("evt_{}", e.0)) {
                seqs.entry((e.2.clone(), e.3)).or_default().push(e.4);
            }
        }
        let mut gaps = Vec::new();
        for ((kind, id), mut s) in seqs {
            s.sort_unstable();
            let first = first_owed.get(&(kind.clone(), id)).copied().unwrap_or(1);
            if s.iter().enumerate().any(|(i, v)| *v != first + i as i64) {
                gaps.push(format!("{kind} {id}: sequences {s:?} (owed from {first})"));
            }
        }
        // Per-aggregate sequences are only gap-free for a subscription that
        // takes every event type of the aggregate.
        if sub.patterns.iter().any(|p| p == "*" || p == "order.*") {
            audit.check(&format!("{name}: per-aggregate sequences gap-free"), gaps);
        }
    }
}

/// No delivery waits past its schedule: nothing due for long without a
/// live lease, no lease far in the future, no first attempt held in memory
/// by a relay whose lease ran out and nobody took over, nothing left
/// unfanned.
pub async fn stuck(db: &PgPool, audit: &mut Audit) -> anyhow::Result<()> {
    audit.check(
        "no delivery stuck past its schedule",
        rows(
            db,
            "select format('delivery %s: due since %s, lease until %s', d.id, d.next_attempt_at, d.lease_expires_at)
               from deliveries d join partners p on p.tenant_id = d.tenant_id and p.id = d.partner_id
              where d.tenant_id = $1 and d.state = 'pending' and p.enabled
                and ((d.next_attempt_at < now() - interval '15 seconds'
                      and (d.lease_expires_at is null or d.lease_expires_at < now() - interval '15 seconds'))
                     or d.lease_expires_at > now() + interval '1 minute')",
        )
        .await?,
    );
    audit.check(
        "no first attempt left with a relay whose lease ran out",
        rows(
            db,
            "select format('event %s for partner %s: held in memory under a lease that ran out at %s',
                           outbox_id, partner_id, lease_expires_at)
               from relay_sending_events
              where tenant_id = $1 and lease_expires_at < now() - interval '15 seconds'",
        )
        .await?,
    );
    audit.check(
        "every event fanned out to its partners",
        rows(
            db,
            "select format('event %s (%s) not fanned out since %s', id, event_type, created_at)
               from outbox where tenant_id = $1 and fanned_out_at is null
                and created_at < now() - interval '15 seconds'",
        )
        .await?,
    );
    Ok(())
}
