//! What the commands print: pretty JSON under `--json`, else text for a
//! person at a terminal (tables, the conflict and rejection walkthroughs,
//! the one-line sync outcome).

use std::io::Write;

use chrono::{DateTime, Utc};
use holdfast_client::conflict::ConflictView;
use holdfast_client::engine::{HeldItem, RejectionChoice, RejectionView, Status};
use holdfast_client::store::pending;
use holdfast_client::view::{OrderView, SkuView};
use holdfast_client::{Engine, Error, SyncReport};
use holdfast_protocol::model::Customer;
use serde::Serialize;
use serde_json::{json, Value};
use uuid::Uuid;

pub(crate) struct Out {
    pub(crate) json: bool,
}

impl Out {
    /// Prints `value` as pretty JSON (`--json`, streamed: a long list is
    /// never built twice in memory) or as `text`.
    pub(crate) fn print<T: Serialize + ?Sized>(&self, value: &T, text: impl FnOnce() -> String) {
        let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
        // A closed pipe (`| head`) is not our failure.
        let _ = if self.json {
            serde_json::to_writer_pretty(&mut stdout, value)
                .map_err(std::io::Error::from)
                .and_then(|()| writeln!(stdout))
        } else {
            writeln!(stdout, "{}", text())
        };
        let _ = stdout.flush();
    }
}

pub(crate) fn short(id: &Uuid) -> String {
    id.to_string()[..8].to_owned()
}

fn money(cents: i64) -> String {
    format!("{}.{:02}", cents / 100, (cents % 100).abs())
}

fn time(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::<Utc>::from_timestamp_millis(ms)
}

fn brief(v: &Value) -> String {
    let s = match v {
        Value::Null => "—".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(39).collect::<String>())
    } else {
        s
    }
}

pub(crate) fn sync_json(r: &Result<SyncReport, Error>) -> Value {
    match r {
        Ok(report) => json!({"ok": true, "report": report}),
        Err(e) => json!({"ok": false, "offline": e.is_offline(), "error": e.to_string()}),
    }
}

pub(crate) fn sync_text(r: &Result<SyncReport, Error>) -> String {
    match r {
        Ok(r) => {
            let mut parts = vec![format!("{} sent", r.applied)];
            if r.conflicts > 0 {
                parts.push(format!(
                    "{} conflict(s) — see `holdfast conflicts`",
                    r.conflicts
                ));
            }
            if r.rejections > 0 {
                parts.push(format!(
                    "{} rejected — see `holdfast rejections`",
                    r.rejections
                ));
            }
            if r.retrying > 0 {
                parts.push(format!("{} to retry", r.retrying));
            }
            parts.push(format!("{} received", r.pulled));
            format!("Synced: {}.", parts.join(", "))
        }
        Err(e) if e.is_offline() => format!("Offline: kept locally, will be sent later ({e})."),
        Err(Error::Busy) => "Queued; another holdfast process is syncing and will send it.".into(),
        Err(e) => format!("Not synced: {e}"),
    }
}

pub(crate) fn status_text(s: &Status) -> String {
    let mut out = String::new();
    match &s.signed_in {
        Some(p) => out.push_str(&format!(
            "Signed in: {} <{}> at {} ({})\n",
            p.user_name, p.user_email, p.tenant_name, p.server_url
        )),
        None => out.push_str("Signed in: no (holdfast login)\n"),
    }
    out.push_str(&format!(
        "Connection: {}\n",
        match s.online {
            Some(true) => "online",
            Some(false) => "OFFLINE",
            None => "unknown (not synced yet)",
        }
    ));
    out.push_str(&format!("Pending: {}", s.pending));
    if let Some(age) = s.oldest_pending_age_secs {
        out.push_str(&format!(" (oldest {age} s old)"));
    }
    out.push('\n');
    out.push_str(&format!(
        "Last synced: {}\n",
        s.last_synced_at
            .map(|t| t.to_rfc3339())
            .unwrap_or_else(|| "never".into())
    ));
    out.push_str(&format!(
        "Conflicts: {}   Rejections: {}\n",
        s.conflicts, s.rejections
    ));
    if s.dead_lettered_orders > 0 {
        out.push_str(&format!(
            "Partner events dead-lettered: {} order(s) (an operator must requeue them)\n",
            s.dead_lettered_orders
        ));
    }
    if s.held > 0 {
        out.push_str(&format!(
            "Held for a newer holdfast: {} — see `holdfast held`\n",
            s.held
        ));
    }
    if let Some(e) = &s.last_error {
        out.push_str(&format!("Last error: {e}\n"));
    }
    if let Some(t) = s.next_attempt_at {
        out.push_str(&format!("Next automatic attempt: {}\n", t.to_rfc3339()));
    }
    out.push_str(&format!("Token: {}\nStore: {}", s.token_store, s.store));
    out
}

fn customer_name(engine: &Engine, id: Uuid) -> String {
    engine
        .customers()
        .ok()
        .and_then(|cs| cs.into_iter().find(|c| c.id == id))
        .map(|c| c.name)
        .unwrap_or_else(|| short(&id))
}

pub(crate) fn orders_text(engine: &Engine, views: &[OrderView]) -> String {
    if views.is_empty() {
        return "No orders.".to_owned();
    }
    let mut s = format!(
        "{:<36}  {:<9} {:<3} {:<24} {:<12} {:>5}  {}\n",
        "order", "status", "v", "customer", "PO", "lines", "sync"
    );
    for v in views {
        let o = &v.order;
        s.push_str(&format!(
            "{:<36}  {:<9} {:<3} {:<24} {:<12} {:>5}  {}\n",
            o.id,
            o.status.as_str(),
            o.version,
            customer_name(engine, o.customer_id)
                .chars()
                .take(24)
                .collect::<String>(),
            o.customer_po.as_deref().unwrap_or("—"),
            o.lines.len(),
            match v.pending.len() {
                0 => "synced".to_owned(),
                n => format!(
                    "{} ({n} pending)",
                    serde_json::to_value(v.badge)
                        .ok()
                        .and_then(|b| b.as_str().map(str::to_owned))
                        .unwrap_or_default()
                ),
            }
        ));
    }
    s.trim_end().to_owned()
}

pub(crate) fn order_text(engine: &Engine, v: &OrderView) -> String {
    let o = &v.order;
    let mut s = format!(
        "Order {}  [{}]  version {}{}\n",
        o.id,
        o.status.as_str(),
        o.version,
        match v.server_version {
            Some(sv) if sv != o.version => format!(" (server: {sv})"),
            None => " (not on the server yet)".to_owned(),
            _ => String::new(),
        }
    );
    s.push_str(&format!(
        "  customer {}  PO {}  ship {} – {}\n",
        customer_name(engine, o.customer_id),
        o.customer_po.as_deref().unwrap_or("—"),
        o.ship_window_start
            .map(|d| d.to_string())
            .unwrap_or_else(|| "?".into()),
        o.ship_window_end
            .map(|d| d.to_string())
            .unwrap_or_else(|| "?".into())
    ));
    if let Some(n) = &o.notes {
        s.push_str(&format!("  notes: {n}\n"));
    }
    for l in &o.lines {
        let sku = engine.sku(l.sku_id).ok().flatten();
        let pending = v.pending_fields.contains(&format!("line:{}", l.id));
        s.push_str(&format!(
            "  line {}  {:<40} ordered {:>4}  allocated {:>4}  ATS {:>5}{}\n",
            short(&l.id),
            sku.as_ref()
                .map(|k| format!("{} / {} / {}", k.sku.style, k.sku.color, k.sku.size))
                .unwrap_or_else(|| short(&l.sku_id)),
            l.qty_ordered,
            l.qty_allocated,
            sku.map(|k| k.ats_local.to_string())
                .unwrap_or_else(|| "?".into()),
            if pending { "  (pending)" } else { "" }
        ));
    }
    for p in &v.pending {
        s.push_str(&format!(
            "  pending #{}: {} [{}]{}\n",
            p.seq,
            p.description,
            serde_json::to_value(p.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            p.last_error
                .as_ref()
                .map(|e| format!(" — {e}"))
                .unwrap_or_default()
        ));
    }
    s.trim_end().to_owned()
}

pub(crate) fn pending_text(rows: &[pending::Row]) -> String {
    if rows.is_empty() {
        return "Nothing pending: the server has everything.".to_owned();
    }
    let mut s = format!(
        "{} act(s) not yet on the server, in the order they were made:\n",
        rows.len()
    );
    for r in rows {
        s.push_str(&format!(
            "#{:<5} {}  order {}  {}\n       {} {}  base v{}  key {}  [{}, {} attempt(s)]{}\n",
            r.seq,
            time(r.created_at)
                .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                .unwrap_or_default(),
            r.order_id,
            r.act.describe(),
            r.request.method,
            r.request.path,
            r.base_version,
            r.key,
            serde_json::to_value(r.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            r.attempts,
            r.last_error
                .as_ref()
                .map(|e| format!("\n       last error: {e}"))
                .unwrap_or_default()
        ));
    }
    s.trim_end().to_owned()
}

pub(crate) fn skus_text(skus: &[SkuView]) -> String {
    let mut s = format!(
        "{:<8}  {:<22} {:<14} {:<4} {:>9} {:>5} {:>5}\n",
        "id", "style", "colour", "size", "price", "ATS", "mine"
    );
    for v in skus {
        s.push_str(&format!(
            "{:<8}  {:<22} {:<14} {:<4} {:>9} {:>5} {:>5}\n",
            short(&v.sku.id),
            v.sku.style,
            v.sku.color,
            v.sku.size,
            money(v.sku.wholesale_price),
            v.sku.ats,
            v.ats_local
        ));
    }
    s.push_str("(ATS: the server's; mine: after my pending acts)");
    s
}

pub(crate) fn customers_text(cs: &[Customer]) -> String {
    cs.iter()
        .map(|c| {
            format!(
                "{}  {}  credit limit {}",
                short(&c.id),
                c.name,
                c.credit_limit.map(money).unwrap_or_else(|| "none".into())
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The queue as `holdfast pending --json` prints it: the act, its request
/// and its delivery state.
pub(crate) fn pending_json(rows: &[pending::Row]) -> Value {
    let value: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "seq": r.seq, "order_id": r.order_id, "idempotency_key": r.key,
                "act": r.act.describe(), "status": r.status, "base_version": r.base_version,
                "method": r.request.method, "path": r.request.path, "body": r.request.body,
                "created_at": time(r.created_at), "attempts": r.attempts,
                "last_error": r.last_error,
            })
        })
        .collect();
    Value::Array(value)
}

pub(crate) fn conflicts_text(cs: &[ConflictView]) -> String {
    if cs.is_empty() {
        return "No conflicts.".to_owned();
    }
    let mut s = String::new();
    for c in cs {
        let ago = (Utc::now() - c.changed_at).num_seconds().max(0);
        s.push_str(&format!(
            "Order {}: {} changed it {ago} s ago (you started from version {}, it is now {}); {} of your acts wait.\n",
            c.order_id, c.changed_by, c.your_base_version, c.current_version, c.held
        ));
        s.push_str(&format!(
            "  {:<44} {:<20} {:<20} {:<20}\n",
            "field", "base", "yours", "theirs"
        ));
        for f in &c.fields {
            let mark = if f.collides {
                "  ← choose"
            } else if f.mine_changed {
                "  (yours)"
            } else {
                "  (theirs)"
            };
            s.push_str(&format!(
                "  {:<44} {:<20} {:<20} {:<20}{mark}\n",
                f.field,
                brief(&f.base),
                brief(&f.mine),
                brief(&f.theirs)
            ));
        }
        if c.can_rebase {
            s.push_str(&format!(
                "  No field collides: `holdfast resolve conflict {} --rebase` keeps both.\n",
                c.order_id
            ));
        } else {
            s.push_str(&format!(
                "  Choose per field: `holdfast resolve conflict {} --mine FIELD --theirs FIELD`, or --discard-mine.\n",
                c.order_id
            ));
        }
    }
    s
}

pub(crate) fn held_text(held: &[HeldItem]) -> String {
    if held.is_empty() {
        return "Nothing held: this version reads everything it has.".to_owned();
    }
    held.iter()
        .map(|h| format!("{} (since {}): {}", h.what, h.since.to_rfc3339(), h.why))
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) fn rejections_text(rs: &[RejectionView]) -> String {
    if rs.is_empty() {
        return "No rejections.".to_owned();
    }
    rs.iter()
        .map(|r| {
            let facts: Vec<String> =
                r.facts.iter().map(|(k, v)| format!("{k}={}", brief(v))).collect();
            let choices: Vec<String> = r
                .choices
                .iter()
                .map(|c| match c {
                    RejectionChoice::ReduceToAts { qty } => format!("reduce (to {qty})"),
                    other => other.name().to_owned(),
                })
                .collect();
            format!(
                "#{} order {}: {} — refused: {} ({})\n  facts: {}\n  choices: {}   (holdfast resolve rejection {} CHOICE)",
                r.id,
                short(&r.order_id),
                r.act,
                r.detail.as_deref().unwrap_or(""),
                r.code,
                facts.join(", "),
                choices.join(" | "),
                r.id
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What an order act prints: the new line's id (for `add-line`), the order
/// as it now looks here, and whether the act reached the server.
pub(crate) fn act_text(
    engine: &Engine,
    result: &Value,
    view: Option<&OrderView>,
    synced: Option<&Result<SyncReport, Error>>,
) -> String {
    let mut s = String::new();
    if let (Some(line), None) = (
        result.get("line_id").and_then(Value::as_str),
        result.get("idempotency_key"),
    ) {
        s.push_str(&format!("New line {line}\n"));
    }
    if let Some(v) = view {
        s.push_str(&order_text(engine, v));
    }
    s.push('\n');
    s.push_str(&match synced {
        Some(r) => sync_text(r),
        None => "Queued locally (not sent: --no-sync or not logged in).".to_owned(),
    });
    s
}
