//! The monitoring we ship against the metrics we export: every metric the
//! Grafana dashboard (deploy/grafana/holdfast.json) and the alert rules
//! (deploy/prometheus/holdfast-alerts.yml) query must be a family a real
//! server's /metrics has, so renaming a metric without them fails here
//! instead of leaving an empty panel or an alert that can never fire.
//! (`promtool test rules` checks the rules' logic; this checks their names.)

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use crate::support::process::{database_url, db_name, reachable_tempdir, ServerProcess};
use crate::support::{acme, TestServer, MIGRATIONS};

/// The value of the one series `series` (name with its labels, as the
/// exposition writes it) in `/metrics` now; 0 when absent.
pub(crate) async fn sample(s: &TestServer, series: &str) -> f64 {
    let exposition = s
        .http
        .get(s.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("body");
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.trim().parse().expect("a number"))
}

fn shipped(path: &str) -> String {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// `# TYPE name kind` of every family in an exposition.
fn families(exposition: &str) -> HashMap<String, String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| (name.to_owned(), kind.trim().to_owned()))
        .collect()
}

/// The metric names a PromQL expression reads: ours (`holdfast_…`) and the
/// process's (`process_…`). Prometheus's own `up` is not ours to export.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = BTreeSet::new();
    for prefix in ["holdfast_", "process_"] {
        let mut from = 0;
        while let Some(at) = expr[from..].find(prefix).map(|i| i + from) {
            let starts_a_name = expr[..at].chars().next_back().is_none_or(|c| !ident(c));
            let len = expr[at..]
                .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(expr.len() - at);
            if starts_a_name {
                names.insert(expr[at..at + len].to_owned());
            }
            from = at + len;
        }
    }
    names
}

/// Whether `name` is something /metrics serves: a family, or a histogram's
/// (or summary's) `_bucket`/`_sum`/`_count` series.
fn exported(name: &str, families: &HashMap<String, String>) -> bool {
    if families.contains_key(name) {
        return true;
    }
    ["_bucket", "_sum", "_count"].iter().any(|suffix| {
        name.strip_suffix(suffix).is_some_and(|base| {
            families.get(base).is_some_and(|kind| {
                kind == "histogram" || (kind == "summary" && *suffix != "_bucket")
            })
        })
    })
}

/// (panel title, its queries) for every panel, rows' nested panels included.
fn panel_queries(panels: &Value, out: &mut Vec<(String, Vec<String>)>) {
    for panel in panels.as_array().expect("panels is an array") {
        let title = panel["title"].as_str().unwrap_or("(untitled)").to_owned();
        if panel["type"] == "row" {
            // A row only groups; its panels are what query.
            panel_queries(&panel["panels"], out);
            continue;
        }
        let exprs = panel["targets"]
            .as_array()
            .map(|targets| {
                targets
                    .iter()
                    .filter_map(|t| t["expr"].as_str())
                    .filter(|e| !e.trim().is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        out.push((title, exprs));
    }
}

/// (alert, expr) of every rule in a Prometheus rules file. A small reader
/// for the YAML we write: `expr:` inline, quoted or not, or as a block
/// scalar (`>-`, `|`) whose lines are indented under it.
fn rule_exprs(yaml: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = yaml.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut alert = String::new();
    let mut exprs = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        if t.starts_with('#') {
            continue;
        }
        if let Some(name) = t.strip_prefix("- alert:") {
            alert = name.trim().to_owned();
        }
        let Some(rest) = t.strip_prefix("expr:") else {
            continue;
        };
        let rest = rest.trim();
        let expr = if rest.starts_with('>') || rest.starts_with('|') {
            lines[i + 1..]
                .iter()
                .take_while(|l| l.trim().is_empty() || indent(l) > indent(line))
                .map(|l| l.trim())
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            rest.trim_matches(|c| c == '"' || c == '\'').to_owned()
        };
        exprs.push((alert.clone(), expr));
    }
    exprs
}

#[test]
fn the_readers_find_names_and_block_scalars() {
    assert_eq!(
        metric_names(
            "histogram_quantile(0.99, sum by (le) (rate(holdfast_relay_lag_seconds_bucket{job=~\"$job\"}[5m]))) \
             / process_open_fds + up{x=\"my_holdfast_thing\"}"
        ),
        BTreeSet::from([
            "holdfast_relay_lag_seconds_bucket".to_owned(),
            "process_open_fds".to_owned()
        ])
    );
    let rules = rule_exprs(
        "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up == 0\n        for: 1m\n\
         \x20     - alert: B\n        expr: >-\n          sum(x)\n            / sum(y) > 1\n        for: 2m\n",
    );
    assert_eq!(
        rules,
        vec![
            ("A".to_owned(), "up == 0".to_owned()),
            ("B".to_owned(), "sum(x) / sum(y) > 1".to_owned())
        ]
    );
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn the_dashboard_and_the_alerts_query_only_metrics_we_export(db: PgPool) {
    let s = TestServer::start(db).await;
    // Requests first: the families labelled by route and status have a
    // series only once something was answered (a 200 and a 401 here).
    for path in ["/healthz", "/v1/orders"] {
        s.http.get(s.url(path)).send().await.expect("request");
    }
    let exposition = s
        .http
        .get(s.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("body");
    let families = families(&exposition);

    let dashboard: Value =
        serde_json::from_str(&shipped("deploy/grafana/holdfast.json")).expect("dashboard JSON");
    let mut panels = Vec::new();
    panel_queries(&dashboard["panels"], &mut panels);
    assert!(
        panels.len() >= 10,
        "the dashboard has its panels: {panels:?}"
    );
    let mut missing = Vec::new();
    for (title, exprs) in &panels {
        assert!(!exprs.is_empty(), "panel {title:?} has no query");
        for expr in exprs {
            let names = metric_names(expr);
            assert!(
                !names.is_empty() || expr.starts_with("up"),
                "panel {title:?} queries none of our metrics: {expr}"
            );
            for name in names {
                if !exported(&name, &families) {
                    missing.push(format!("panel {title:?}: {name}"));
                }
            }
        }
    }

    let rules_file = shipped("deploy/prometheus/holdfast-alerts.yml");
    let rules = rule_exprs(&rules_file);
    assert_eq!(
        rules.len(),
        rules_file.matches("- alert:").count(),
        "every alert's expr was read: {rules:?}"
    );
    for (alert, expr) in &rules {
        assert!(!expr.is_empty(), "alert {alert} has an expr");
        for name in metric_names(expr) {
            if !exported(&name, &families) {
                missing.push(format!("alert {alert}: {name}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "queried but not exported by /metrics:\n  {}\n(families: {:?})",
        missing.join("\n  "),
        families.keys().collect::<BTreeSet<_>>()
    );
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_request_that_finds_no_free_connection_is_counted(
    _: PgPoolOptions,
    connect: PgConnectOptions,
) {
    let pool = holdfast_server::pool_options(3, Duration::from_millis(300))
        .connect_with(connect)
        .await
        .expect("pool");
    let s = TestServer::start(pool.clone()).await;
    let token = s.login("acme", "dana@acme.test").await;
    // The process shares one recorder with every other test: compare with
    // what it said before, which they can only have raised.
    let before = sample(&s, "holdfast_db_pool_acquire_timeouts_total").await;
    // Every connection the server is not holding itself (the change feed
    // keeps one), until the pool has none left to give.
    let mut held = Vec::new();
    while let Ok(conn) = pool.acquire().await {
        held.push(conn);
    }
    assert!(!held.is_empty(), "the test held at least one connection");
    let (status, body) = s.get("/v1/orders", &token).await;
    crate::support::assert_problem(status, &body, 503, "service_unavailable");
    drop(held);
    let after = sample(&s, "holdfast_db_pool_acquire_timeouts_total").await;
    assert!(
        after >= before + 1.0,
        "the 503 was counted: {before} then {after}"
    );
    let (status, _) = s.get("/v1/orders", &token).await;
    assert_eq!(status, StatusCode::OK, "and the pool serves again");
}

/// The value of `series` in the child server's `/metrics`, once `done`
/// holds for it (polled, with a deadline).
async fn wait_for_sample(server: &ServerProcess, series: &str, done: impl Fn(f64) -> bool) -> f64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let text = reqwest::get(server.url("/metrics"))
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("body");
        let value = text
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map(|v| v.trim().parse::<f64>().expect("a number"));
        if let Some(v) = value.filter(|v| done(*v)) {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{series} never got there; last {value:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn the_backlogs_age_is_published_and_back_to_zero_when_nothing_waits(db: PgPool) {
    // A server process of its own: the gauge is the housekeeping's, which
    // runs in `serve`, and its recorder is not shared with other tests.
    let tmp = reachable_tempdir();
    let server = ServerProcess::start(Some(&database_url(&db_name(&db))), tmp.path(), &[]);
    // A delivery waiting for ten minutes, to a partner an operator paused
    // (so the relay leaves it waiting).
    let partner = uuid::Uuid::now_v7();
    sqlx::query(
        "insert into partners (tenant_id, id, name, url, event_types, secret, enabled)
         values ($1, $2, 'Paused Portal', 'https://edi.example/hook', '{order.*}', 'whsec_dGVzdA==', false)",
    )
    .bind(acme())
    .bind(partner)
    .execute(&db)
    .await
    .expect("partner");
    let delivery: i64 = sqlx::query_scalar(
        "with event as (
            insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence,
                                payload, created_at, fanned_out_at)
            values ($1, 'order.created', 'order', $3, 1, '{}', now() - interval '10 minutes', now())
            returning id)
         insert into deliveries (tenant_id, outbox_id, partner_id, created_at)
         select $1, id, $2, now() - interval '10 minutes' from event
         returning id",
    )
    .bind(acme())
    .bind(partner)
    .bind(uuid::Uuid::now_v7())
    .fetch_one(&db)
    .await
    .expect("delivery");

    let age = wait_for_sample(&server, "holdfast_outbox_oldest_pending_age_seconds", |v| {
        v >= 600.0
    })
    .await;
    assert!(age < 3600.0, "ten minutes and a little: {age}");
    // The one delivery, once the relay has fanned out the demo's events.
    wait_for_sample(&server, "holdfast_outbox_backlog", |v| v == 1.0).await;

    sqlx::query("update deliveries set state = 'delivered', delivered_at = now() where id = $1")
        .bind(delivery)
        .execute(&db)
        .await
        .expect("delivered");
    wait_for_sample(&server, "holdfast_outbox_oldest_pending_age_seconds", |v| {
        v == 0.0
    })
    .await;
}
