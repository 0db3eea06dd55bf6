//! Conventions checked here, next to their own tools in `make test`:
//! `/metrics` on a server that has served nothing yet already lists every
//! family with HELP and TYPE (issue 15 item 16; promtool runs on the same
//! text in scripts/schemathesis.sh), and a test binary started without
//! `DATABASE_URL` says in one line how to run it (item 17).

use sqlx::PgPool;

use crate::support::process::{database_url, db_name, reachable_tempdir, ServerProcess};
use crate::support::MIGRATIONS;

/// Every family the server records (grep `counter!`/`gauge!`/`histogram!`
/// in server/src) except the two keyed by route and status, which can only
/// have series once a request was answered; plus the process families and
/// the build info.
const FAMILIES: &[(&str, &str)] = &[
    ("holdfast_idempotent_replays_total", "counter"),
    ("holdfast_request_in_flight_total", "counter"),
    ("holdfast_version_conflicts_total", "counter"),
    ("holdfast_ats_rejections_total", "counter"),
    ("holdfast_push_chunks_redone_total", "counter"),
    ("holdfast_known_order_allocations_total", "counter"),
    ("holdfast_delivery_attempts_total", "counter"),
    ("holdfast_delivery_latency_seconds", "histogram"),
    ("holdfast_dead_letters_total", "counter"),
    ("holdfast_outbox_backlog", "gauge"),
    ("holdfast_outbox_oldest_pending_age_seconds", "gauge"),
    ("holdfast_relay_lag_seconds", "histogram"),
    ("holdfast_db_up", "gauge"),
    ("holdfast_db_pool_connections", "gauge"),
    ("holdfast_db_pool_max_connections", "gauge"),
    ("holdfast_db_pool_acquire_timeouts_total", "counter"),
    ("holdfast_dead_letters", "gauge"),
    ("holdfast_sync_streams", "gauge"),
    ("holdfast_sync_stream_lagged_total", "counter"),
    ("holdfast_replica_reads_total", "counter"),
    ("holdfast_build_info", "gauge"),
    ("process_cpu_seconds_total", "counter"),
    ("process_resident_memory_bytes", "gauge"),
    ("process_open_fds", "gauge"),
    ("process_start_time_seconds", "gauge"),
];

#[sqlx::test(migrator = "MIGRATIONS")]
async fn a_fresh_server_lists_every_family_with_help_before_any_request(db: PgPool) {
    let tmp = reachable_tempdir();
    let server = ServerProcess::start(Some(&database_url(&db_name(&db))), tmp.path(), &[]);
    // The first request this process answers.
    let text = reqwest::get(server.url("/metrics"))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("body");
    for (name, kind) in FAMILIES {
        assert!(
            text.contains(&format!("\n# HELP {name} "))
                || text.starts_with(&format!("# HELP {name} ")),
            "no HELP for {name} in\n{text}"
        );
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "no TYPE {kind} for {name} in\n{text}"
        );
    }
    assert!(
        text.contains(&format!(
            "holdfast_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )),
        "build info\n{text}"
    );
    for served_by in [
        "replica",
        "primary_replica_behind",
        "primary_replica_unavailable",
    ] {
        assert!(
            text.contains(&format!(
                "holdfast_replica_reads_total{{served_by=\"{served_by}\"}} 0"
            )),
            "replica reads served by {served_by} at zero\n{text}"
        );
    }
    for outcome in ["delivered", "failed", "gone"] {
        assert!(
            text.contains(&format!(
                "holdfast_delivery_attempts_total{{outcome=\"{outcome}\"}} 0"
            )),
            "delivery outcome {outcome} at zero\n{text}"
        );
    }
    for state in ["idle", "in_use"] {
        assert!(
            text.contains(&format!(
                "holdfast_db_pool_connections{{state=\"{state}\"}} "
            )),
            "the pool's {state} connections\n{text}"
        );
    }
    // Every family that has a sample has its HELP, the open-ended ones included.
    let typed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    for name in typed {
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "{name} has a TYPE but no HELP"
        );
    }
}

/// Before: every `#[sqlx::test]` panicked inside sqlx with "DATABASE_URL
/// must be set", once per test. Now the binary (this very one, run again
/// without the variable) prints one line naming `make test` and exits 2
/// before the harness starts.
#[test]
fn without_database_url_the_tests_say_how_to_run_them() {
    let out = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .env_remove("DATABASE_URL")
        .arg("--list")
        .output()
        .expect("run the test binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("make test") && stderr.contains("holdfast-server postgres start"),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "the harness never ran: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}
