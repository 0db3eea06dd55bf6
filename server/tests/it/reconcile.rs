//! `holdfast-server reconcile` against real Postgres: discrepancies and bad
//! rows, --apply through the inventory ledger, idempotent re-runs, and the
//! real binary SIGKILLed inside an import page and inside an apply booking.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use holdfast_server::demo;
use holdfast_server::reconcile::{self, Options, Report};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::support::audit::assert_ledgers_match_positions;
use crate::support::process::{database_url, db_name, kill_at_hold, run_binary};
use crate::support::{kestrel_m, TestServer, MIGRATIONS};

struct Sku {
    id: Uuid,
    style: String,
    color: String,
    size: String,
    on_hand: i64,
}

async fn acme_skus(db: &PgPool) -> Vec<Sku> {
    let rows: Vec<(Uuid, String, String, String, i64)> = sqlx::query_as(
        "select s.id, s.style, s.color, s.size, p.on_hand
           from skus s join sku_positions p on p.tenant_id = s.tenant_id and p.sku_id = s.id
          where s.tenant_id = $1 order by s.style, s.color, s.size",
    )
    .bind(demo::tenant_id("acme"))
    .fetch_all(db)
    .await
    .expect("skus");
    rows.into_iter()
        .map(|(id, style, color, size, on_hand)| Sku {
            id,
            style,
            color,
            size,
            on_hand,
        })
        .collect()
}

/// The count the test's "3PL" reports for the i-th SKU: mostly what we
/// have, some more, some fewer, the Kestrel M lower than what is allocated
/// in the tests that allocate it.
fn counted(i: usize, sku: &Sku) -> i64 {
    if sku.id == kestrel_m() {
        1
    } else if i % 10 == 3 {
        sku.on_hand + 2
    } else if i % 10 == 7 {
        sku.on_hand - 1
    } else {
        sku.on_hand
    }
}

/// A snapshot of every acme SKU by style/colour/size, with bad rows mixed in
/// at known lines. Returns the text and the (line, reason prefix) of each
/// bad row.
fn snapshot(skus: &[Sku]) -> (String, Vec<(i64, &'static str)>) {
    let mut text = String::from("style,color,size,qty\n");
    let mut line = 1;
    let mut bad = Vec::new();
    let mut push = |text: &mut String, row: String| {
        text.push_str(&row);
        text.push('\n');
        line += 1;
        line
    };
    for (i, sku) in skus.iter().enumerate() {
        // Quoted, as spreadsheets write them.
        let row = format!(
            "\"{}\",{},{},{}",
            sku.style,
            sku.color,
            sku.size,
            counted(i, sku)
        );
        push(&mut text, row);
        match i {
            5 => bad.push((push(&mut text, "Nope Parka,Nada,M,3".into()), "unknown SKU")),
            50 => bad.push((
                push(&mut text, format!("{},{},{},x", sku.style, sku.color, "XS")),
                "qty \"x\" is not a whole number",
            )),
            // The first SKU again, pages after its first count.
            150 => bad.push((
                push(
                    &mut text,
                    format!("{},{},{},99", skus[0].style, skus[0].color, skus[0].size),
                ),
                "SKU ",
            )),
            200 => bad.push((push(&mut text, "too,few,3".into()), "expected 4 fields")),
            250 => bad.push((
                push(
                    &mut text,
                    format!("{},{},{},-5", sku.style, sku.color, "XS"),
                ),
                "qty -5 is negative",
            )),
            _ => {}
        }
    }
    (text, bad)
}

/// SKU ids whose count differs from on_hand now (the Kestrel M included).
fn expected_discrepancies(skus: &[Sku]) -> Vec<Uuid> {
    let mut ids: Vec<Uuid> = skus
        .iter()
        .enumerate()
        .filter(|(i, s)| counted(*i, s) != s.on_hand)
        .map(|(_, s)| s.id)
        .collect();
    ids.sort();
    ids
}

fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write snapshot");
    path
}

fn options(path: &Path, apply: bool) -> Options {
    Options {
        tenant: "acme".into(),
        snapshot: path.to_owned(),
        apply,
        page_size: 25,
        progress: false,
        test_hold: None,
    }
}

async fn reconcile(db: &PgPool, path: &Path, apply: bool) -> Report {
    reconcile::run_on(db, &options(path, apply))
        .await
        .expect("reconcile")
}

fn ids(report_rows: &[reconcile::Counted]) -> Vec<Uuid> {
    let mut ids: Vec<Uuid> = report_rows.iter().map(|c| c.sku_id).collect();
    ids.sort();
    ids
}

/// Positions, ledgers and events, as text, to compare before and after.
/// (Not the change feed: a test server's compactor prunes it on its own
/// schedule. Each feed row is checked where it matters.)
async fn domain_state(db: &PgPool) -> Vec<String> {
    rows_of(db, &[
        "select format('%s %s %s %s %s %s %s', sku_id, on_hand, on_order, allocated, version, event_seq, updated_at)
           from sku_positions order by sku_id",
        "select format('%s %s %s %s %s', id, sku_id, on_hand_delta, reason, source) from inventory_ledger order by id",
        "select format('%s %s %s', id, aggregate_id, sequence) from outbox order by id",
    ])
    .await
}

/// Everything reconcile could touch, as text, to compare before and after.
async fn state(db: &PgPool) -> Vec<String> {
    let mut out = domain_state(db).await;
    out.extend(rows_of(db, &[
        "select format('%s %s %s %s %s', id, records, file_name, imported_at, applied_at) from reconcile_runs order by id",
        "select format('%s %s %s %s', run_id, first_record, end_record, committed_at) from reconcile_pages order by run_id, first_record",
        "select format('%s %s %s %s %s %s %s %s', run_id, sku_id, line_no, counted, outcome, on_hand_before, on_hand_after, decided_at)
           from reconcile_counts order by run_id, sku_id",
        "select format('%s %s %s', run_id, line_no, reason) from reconcile_rejects order by run_id, line_no",
    ])
    .await);
    out
}

async fn rows_of(db: &PgPool, queries: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for sql in queries {
        let rows: Vec<String> = sqlx::query_scalar(sql).fetch_all(db).await.expect(sql);
        out.extend(rows);
    }
    out
}

async fn feed_rows(db: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from changes")
        .fetch_one(db)
        .await
        .expect("changes")
}

/// Allocates `qty` of the Kestrel M on a fresh order through the real API;
/// returns what is needed to release it again.
async fn allocate_kestrel(s: &TestServer, qty: i64) -> (String, Uuid, Uuid) {
    let token = s.login("acme", "dana@acme.test").await;
    let order = Uuid::now_v7();
    let line = Uuid::now_v7();
    let customer = demo::customer_id("acme", "Tokyo Distributor");
    let r = s
        .post(
            &token,
            "/v1/orders",
            &Uuid::now_v7().to_string(),
            json!({"id": order, "customer_id": customer}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.json());
    let r = s
        .post(
            &token,
            &format!("/v1/orders/{order}/lines"),
            &Uuid::now_v7().to_string(),
            json!({"id": line, "sku_id": kestrel_m(), "qty_ordered": qty, "base_version": 1}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.json());
    let r = s
        .post(
            &token,
            &format!("/v1/orders/{order}/lines/{line}/allocate"),
            &Uuid::now_v7().to_string(),
            json!({"qty": qty}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json());
    (token, order, line)
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn reports_discrepancies_and_bad_rows_and_changes_nothing_without_apply(db: PgPool) {
    demo::seed(&db).await.expect("seed");
    let skus = acme_skus(&db).await;
    let (text, bad) = snapshot(&skus);
    let dir = tempfile::tempdir().expect("tmp");
    let path = write_file(dir.path(), "snapshot.csv", &text);
    let before = domain_state(&db).await;
    let feed_before = feed_rows(&db).await;

    let report = reconcile(&db, &path, false).await;

    assert_eq!(report.records as usize, skus.len() + bad.len());
    assert_eq!(report.counted_skus as usize, skus.len());
    let got: Vec<i64> = report.rejects.iter().map(|r| r.line_no).collect();
    let want: Vec<i64> = bad.iter().map(|(line, _)| *line).collect();
    assert_eq!(got, want);
    for (reject, (_, reason)) in report.rejects.iter().zip(&bad) {
        assert!(
            reject.reason.starts_with(reason),
            "line {}: {:?} should start with {reason:?}",
            reject.line_no,
            reject.reason
        );
    }
    // The duplicate names where the SKU was first counted (line 2).
    assert!(
        report.rejects[2]
            .reason
            .contains("already counted on line 2"),
        "{:?}",
        report.rejects[2]
    );
    assert_eq!(ids(&report.discrepancies), expected_discrepancies(&skus));
    let kestrel = report
        .discrepancies
        .iter()
        .find(|c| c.sku_id == kestrel_m())
        .expect("kestrel listed");
    assert_eq!((kestrel.counted, kestrel.on_hand), (1, Some(6)));
    assert!(report.has_problems(), "rejected rows are problems");
    assert!(report.booked.is_empty() && report.applied.is_none());

    let text = report.render();
    assert!(
        text.contains("line 8: unknown SKU: style \"Nope Parka\""),
        "{text}"
    );
    assert!(text.contains("run again with --apply"), "{text}");

    // Positions, ledgers, feed and outbox untouched; only staging was written.
    assert_eq!(domain_state(&db).await, before);
    assert_eq!(feed_rows(&db).await, feed_before);
    let after = state(&db).await;

    // A second run of the same file is the same run and changes nothing.
    let again = reconcile(&db, &path, false).await;
    assert_eq!(again.run_id, report.run_id);
    assert_eq!(again.imported.pages, 0);
    assert_eq!(again.rejects, report.rejects);
    assert_eq!(again.discrepancies, report.discrepancies);
    assert_eq!(state(&db).await, after);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn apply_books_through_the_ledger_refuses_what_would_oversell_and_reruns_change_nothing(
    db: PgPool,
) {
    let s = TestServer::start(db.clone()).await;
    let (token, order, line) = allocate_kestrel(&s, 4).await;
    let skus = acme_skus(&db).await;
    let (text, _) = snapshot(&skus);
    let dir = tempfile::tempdir().expect("tmp");
    let path = write_file(dir.path(), "snapshot.csv", &text);
    let outbox_before: i64 = sqlx::query_scalar("select count(*) from outbox")
        .fetch_one(&db)
        .await
        .expect("outbox");

    let report = reconcile(&db, &path, true).await;

    let mut want_booked = expected_discrepancies(&skus);
    want_booked.retain(|id| *id != kestrel_m());
    assert_eq!(ids(&report.booked), want_booked);
    // 4 allocated, 0 on order: a count of 1 cannot be booked.
    assert_eq!(ids(&report.refused), vec![kestrel_m()]);
    let refused = &report.refused[0];
    assert!(
        refused
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("release 3 first"),
        "{refused:?}"
    );
    let applied = report.applied.expect("applied");
    assert_eq!(applied.booked as usize, want_booked.len());
    assert_eq!(applied.refused, 1);
    assert_eq!(
        applied.unchanged as usize,
        skus.len() - want_booked.len() - 1
    );
    assert!(!report.fully_applied);
    assert_eq!(ids(&report.discrepancies), vec![kestrel_m()]);
    assert!(report.render().contains("REFUSED (1)"));

    // Every booked SKU now holds its count, with one ledger row, one change
    // row and one sku.ats_changed event carrying the new version and ATS.
    for (i, sku) in skus.iter().enumerate() {
        let (on_hand, version, seq, ats): (i64, i64, i64, i64) = sqlx::query_as(
            "select on_hand, version, event_seq, on_hand + on_order - allocated
               from sku_positions where sku_id = $1",
        )
        .bind(sku.id)
        .fetch_one(&db)
        .await
        .expect("position");
        let ledger: Vec<(i64, String, String)> = sqlx::query_as(
            "select on_hand_delta, reason, source from inventory_ledger
              where sku_id = $1 and reason = 'reconcile'",
        )
        .bind(sku.id)
        .fetch_all(&db)
        .await
        .expect("ledger");
        if want_booked.contains(&sku.id) {
            assert_eq!(on_hand, counted(i, sku));
            assert_eq!(
                ledger,
                vec![(
                    counted(i, sku) - sku.on_hand,
                    "reconcile".to_owned(),
                    format!("reconcile:{}", report.run_id)
                )]
            );
            let event: serde_json::Value = sqlx::query_scalar(
                "select payload from outbox where aggregate_id = $1 and sequence = $2",
            )
            .bind(sku.id)
            .bind(seq)
            .fetch_one(&db)
            .await
            .expect("event");
            assert_eq!(event["type"], "sku.ats_changed");
            assert_eq!(event["data"]["ats"], ats);
            assert_eq!(event["data"]["version"], version);
            let change: i64 = sqlx::query_scalar(
                "select count(*) from changes where kind = 'sku' and doc_id = $1 and version = $2",
            )
            .bind(sku.id)
            .bind(version)
            .fetch_one(&db)
            .await
            .expect("change");
            assert_eq!(change, 1);
        } else {
            assert_eq!(on_hand, sku.on_hand);
            assert!(ledger.is_empty());
        }
    }
    let outbox_after: i64 = sqlx::query_scalar("select count(*) from outbox")
        .fetch_one(&db)
        .await
        .expect("outbox");
    assert_eq!((outbox_after - outbox_before) as usize, want_booked.len());
    assert_ledgers_match_positions(&db).await;

    // Again, with --apply: nothing changes (the refusal still stands).
    let before = state(&db).await;
    let again = reconcile(&db, &path, true).await;
    assert_eq!(again.applied.expect("applied").booked, 0);
    assert_eq!(ids(&again.refused), vec![kestrel_m()]);
    assert_eq!(state(&db).await, before);

    // Once the allocation is released, the refused SKU books on the next run.
    let r = s
        .post(
            &token,
            &format!("/v1/orders/{order}/lines/{line}/release"),
            &Uuid::now_v7().to_string(),
            json!({"qty": 4}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json());
    let last = reconcile(&db, &path, true).await;
    assert_eq!(last.applied.expect("applied").booked, 1);
    assert!(last.refused.is_empty() && last.discrepancies.is_empty());
    assert!(last.fully_applied);
    assert_ledgers_match_positions(&db).await;
    let before = state(&db).await;
    let done = reconcile(&db, &path, true).await;
    assert_eq!(done.applied.expect("applied"), Default::default());
    assert_eq!(state(&db).await, before);
}

/// The test database's name, for a child process's DATABASE_URL.
fn binary(db: &PgPool, path: &Path, extra: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_holdfast-server"));
    cmd.args(["reconcile", "--tenant", "acme", "--page-size", "10"])
        .args(extra)
        .arg(path)
        .env("DATABASE_URL", database_url(&db_name(db)))
        .env_remove("HOLDFAST_RECONCILE_TEST_HOLD")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// The staged outcome of a run, without the run id: what must not depend on
/// whether the import ran in one go.
async fn staged(db: &PgPool, run: Uuid) -> (Vec<(Uuid, i64, i64)>, Vec<(i64, String, String)>) {
    let counts = sqlx::query_as(
        "select sku_id, line_no, counted from reconcile_counts where run_id = $1 order by sku_id",
    )
    .bind(run)
    .fetch_all(db)
    .await
    .expect("counts");
    let rejects = sqlx::query_as(
        "select line_no, reason, raw from reconcile_rejects where run_id = $1 order by line_no",
    )
    .bind(run)
    .fetch_all(db)
    .await
    .expect("rejects");
    (counts, rejects)
}

/// The report minus its first line (run id, file name, hash) and the import
/// line (how it got there).
fn findings(stdout: &str) -> String {
    stdout
        .lines()
        .filter(|l| !l.starts_with("reconcile run ") && !l.starts_with("import: "))
        .collect::<Vec<_>>()
        .join("\n")
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn an_import_killed_halfway_and_rerun_equals_one_clean_run(db: PgPool) {
    demo::seed(&db).await.expect("seed");
    let skus = acme_skus(&db).await;
    let (text, bad) = snapshot(&skus);
    let records = (skus.len() + bad.len()) as i64;
    let dir = tempfile::tempdir().expect("tmp");
    let killed_file = write_file(dir.path(), "snapshot.csv", &text);
    // The same rows with a trailing blank line: other bytes, so another run,
    // with exactly the same data. It is the clean run to compare against.
    let clean_file = write_file(dir.path(), "clean.csv", &format!("{text}\n"));

    // Killed inside page 13 (10 rows a page): its writes are uncommitted.
    kill_at_hold(
        "HOLDFAST_RECONCILE_TEST_HOLD",
        binary(&db, &killed_file, &[]),
        "import:12",
    )
    .await;
    let (run, pages, imported): (Uuid, i64, Option<chrono::DateTime<chrono::Utc>>) =
        sqlx::query_as(
            "select r.id, (select count(*) from reconcile_pages p where p.run_id = r.id), r.imported_at
               from reconcile_runs r",
        )
        .fetch_one(&db)
        .await
        .expect("the killed run");
    assert_eq!(pages, 12, "exactly the pages before the kill committed");
    assert!(imported.is_none());
    let (counts, rejects) = staged(&db, run).await;
    assert_eq!(
        (counts.len() + rejects.len()) as i64,
        120,
        "the killed page left nothing behind"
    );
    assert!(counts.iter().all(|(_, line, _)| *line <= 121));

    // Re-run: resumes and finishes (exit 2: the file has bad rows).
    let (code, resumed_out) = run_binary(binary(&db, &killed_file, &[])).await;
    assert_eq!(code, 2, "{resumed_out}");
    assert!(
        resumed_out.contains(&format!("import: resumed after row 120 of {records}")),
        "{resumed_out}"
    );
    let resumed = staged(&db, run).await;
    let pages: i64 = sqlx::query_scalar("select count(*) from reconcile_pages where run_id = $1")
        .bind(run)
        .fetch_one(&db)
        .await
        .expect("pages");
    assert_eq!(pages, (records + 9) / 10);

    // One clean run of the same data.
    let (code, clean_out) = run_binary(binary(&db, &clean_file, &[])).await;
    assert_eq!(code, 2);
    let clean_run: Uuid = sqlx::query_scalar("select id from reconcile_runs where id <> $1")
        .bind(run)
        .fetch_one(&db)
        .await
        .expect("clean run");
    assert_eq!(resumed, staged(&db, clean_run).await);
    assert_eq!(findings(&resumed_out), findings(&clean_out));
    assert_eq!(resumed.1.len(), bad.len());
    assert_eq!(resumed.0.len(), skus.len());

    // And one more run of the killed file changes nothing at all.
    let before = state(&db).await;
    let (_, again_out) = run_binary(binary(&db, &killed_file, &[])).await;
    assert!(
        again_out.contains("import: already complete"),
        "{again_out}"
    );
    assert_eq!(findings(&again_out), findings(&clean_out));
    assert_eq!(state(&db).await, before);
}

#[sqlx::test(migrator = "MIGRATIONS")]
async fn an_apply_killed_midway_resumes_without_booking_twice(db: PgPool) {
    demo::seed(&db).await.expect("seed");
    let skus = acme_skus(&db).await;
    let (text, _) = snapshot(&skus);
    let dir = tempfile::tempdir().expect("tmp");
    let path = write_file(dir.path(), "snapshot.csv", &text);
    // No allocations here: every discrepancy can be booked.
    let want = expected_discrepancies(&skus);
    let feed_before = feed_rows(&db).await;

    // Killed inside the 4th booking: 3 committed, the 4th rolled back.
    kill_at_hold(
        "HOLDFAST_RECONCILE_TEST_HOLD",
        binary(&db, &path, &["--apply"]),
        "apply:3",
    )
    .await;
    let booked: Vec<Uuid> = sqlx::query_scalar(
        "select sku_id from reconcile_counts where outcome = 'booked' order by sku_id",
    )
    .fetch_all(&db)
    .await
    .expect("booked");
    assert_eq!(booked.len(), 3);
    let ledger: i64 =
        sqlx::query_scalar("select count(*) from inventory_ledger where reason = 'reconcile'")
            .fetch_one(&db)
            .await
            .expect("ledger");
    assert_eq!(
        ledger, 3,
        "the killed booking's ledger row rolled back with it"
    );
    assert_ledgers_match_positions(&db).await;

    let (code, out) = run_binary(binary(&db, &path, &["--apply"])).await;
    assert_eq!(code, 2, "bad rows remain reported: {out}");
    let booked: Vec<Uuid> = sqlx::query_scalar(
        "select sku_id from reconcile_counts where outcome = 'booked' order by sku_id",
    )
    .fetch_all(&db)
    .await
    .expect("booked");
    assert_eq!(booked, want);
    let per_sku: Vec<i64> = sqlx::query_scalar(
        "select count(*) from inventory_ledger where reason = 'reconcile' group by sku_id",
    )
    .fetch_all(&db)
    .await
    .expect("ledger");
    assert_eq!(per_sku.len(), want.len());
    assert!(per_sku.iter().all(|n| *n == 1), "no SKU booked twice");
    assert_ledgers_match_positions(&db).await;
    assert!(out.contains("this run is fully applied"), "{out}");

    assert_eq!(feed_rows(&db).await, want.len() as i64 + feed_before);
    let before = state(&db).await;
    let (_, again) = run_binary(binary(&db, &path, &["--apply"])).await;
    assert!(
        again.contains("apply: 0 booked, 0 already matching, 0 refused"),
        "{again}"
    );
    assert_eq!(state(&db).await, before);
    assert_eq!(feed_rows(&db).await, want.len() as i64 + feed_before);
}
