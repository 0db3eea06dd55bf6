//! Prometheus metrics. The recorder is process-global (the `metrics` macros
//! need one), installed once however many servers a test process starts.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics::Unit;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub(crate) mod db;
mod process;

pub struct Metrics {
    handle: Option<PrometheusHandle>,
}

const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Relay lag runs from under a second (a notification wakes the relay) to
/// the minutes of a backlog; the alert on it needs buckets past 10 s to tell
/// "slow" from "stuck".
const RELAY_LAG_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

impl Metrics {
    pub fn global() -> Arc<Metrics> {
        static GLOBAL: OnceLock<Arc<Metrics>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| {
                // A full-name matcher wins over a suffix one (the exporter
                // tries them in that order).
                let recorder = PrometheusBuilder::new()
                    .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                    .and_then(|b| {
                        b.set_buckets_for_metric(
                            Matcher::Full("holdfast_relay_lag_seconds".into()),
                            RELAY_LAG_BUCKETS,
                        )
                    })
                    .and_then(|b| b.install_recorder());
                match recorder {
                    Ok(handle) => {
                        describe_and_register();
                        Arc::new(Metrics { handle: Some(handle) })
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "metrics recorder unavailable; /metrics will be empty");
                        Arc::new(Metrics { handle: None })
                    }
                }
            })
            .clone()
    }

    pub fn render(&self) -> String {
        let mut text = self.handle.as_ref().map(|h| h.render()).unwrap_or_default();
        process::render_into(&mut text);
        text
    }
}

pub(crate) fn record_request(method: &str, route: &str, status: u16, elapsed: Duration) {
    let labels = [
        ("method", method.to_owned()),
        ("route", route.to_owned()),
        ("status", status.to_string()),
    ];
    metrics::counter!("holdfast_http_requests_total", &labels).increment(1);
    metrics::histogram!("holdfast_http_request_duration_seconds", &labels)
        .record(elapsed.as_secs_f64());
}

/// Every family the server records, with its HELP text. Registered when the
/// recorder is installed, so a scrape of a fresh server already lists each
/// family (at zero) instead of families appearing one by one as things
/// first happen, which made alerts on them undefined until then.
/// Families whose labels are open-ended (route, status) can only show
/// series once a request has been served; they are described here so their
/// HELP is there from the first series on.
fn describe_and_register() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};

    describe_counter!(
        "holdfast_http_requests_total",
        "HTTP requests answered, by method, route template and status."
    );
    describe_histogram!(
        "holdfast_http_request_duration_seconds",
        Unit::Seconds,
        "Time from a request's arrival to its answer, by method, route template and status."
    );
    describe_counter!(
        "holdfast_idempotent_replays_total",
        "Mutations answered from a stored outcome (a retry of a completed key)."
    );
    describe_counter!(
        "holdfast_request_in_flight_total",
        "Mutations answered 409 request_in_flight: their key was still running elsewhere past the wait."
    );
    describe_counter!(
        "holdfast_version_conflicts_total",
        "Mutations answered 409 version_conflict (a stale base version)."
    );
    describe_counter!(
        "holdfast_ats_rejections_total",
        "Allocations answered 422 insufficient_ats."
    );
    describe_counter!(
        "holdfast_known_order_allocations_total",
        "REST allocations and releases tried as one call on an order whose latest document this \
         server holds, by outcome: moved (answered in one round trip) or declined (the order or \
         its stock had moved on; answered the ordinary way)."
    );
    describe_counter!(
        "holdfast_push_chunks_redone_total",
        "Batch push chunks run again item by item after one item failed inside the shared transaction."
    );
    describe_counter!(
        "holdfast_delivery_attempts_total",
        "Webhook delivery attempts to partners, by outcome (delivered, failed, gone)."
    );
    describe_histogram!(
        "holdfast_delivery_latency_seconds",
        Unit::Seconds,
        "Time from an event's commit to the partner's 2xx for it."
    );
    describe_histogram!(
        "holdfast_relay_lag_seconds",
        Unit::Seconds,
        "Time from an event's commit to the relay's first attempt to deliver it to a partner \
         (how far behind the relay runs, whatever the partner then answers)."
    );
    describe_counter!(
        "holdfast_dead_letters_total",
        "Deliveries dead-lettered after their last attempt."
    );
    describe_gauge!(
        "holdfast_outbox_backlog",
        "Events and deliveries not yet delivered (as of the last housekeeping pass)."
    );
    describe_gauge!(
        "holdfast_outbox_oldest_pending_age_seconds",
        Unit::Seconds,
        "How long the oldest delivery not yet delivered (or event not yet fanned out) has waited; \
         0 when none waits (as of the last housekeeping pass)."
    );
    describe_gauge!(
        "holdfast_dead_letters",
        "Deliveries dead-lettered now, waiting for an operator's requeue."
    );
    describe_gauge!(
        "holdfast_sync_streams",
        "Desks connected to the live update stream (SSE) on this instance."
    );
    describe_counter!(
        "holdfast_sync_stream_lagged_total",
        "Stream subscribers that fell behind and were told to pull from their cursor."
    );
    describe_counter!(
        "holdfast_replica_reads_total",
        "Desks' reads that could use the read replica, by where they ran: replica, \
         primary_replica_behind (it had not caught up within the wait) or \
         primary_replica_unavailable (unreachable, not a standby, or skipped for a second after a miss)."
    );
    describe_gauge!(
        "holdfast_db_up",
        "1 when the last probe of Postgres (every few seconds) got an answer, else 0."
    );
    describe_gauge!(
        "holdfast_db_pool_connections",
        "Connections to the primary held by this instance's pool, by state: idle or in_use."
    );
    describe_gauge!(
        "holdfast_db_pool_max_connections",
        "The most connections this instance's pool to the primary may open (--db-pool-size)."
    );
    describe_counter!(
        "holdfast_db_pool_acquire_timeouts_total",
        "Requests answered 503 because no pooled database connection came free within \
         --db-acquire-timeout-ms."
    );
    describe_gauge!(
        "holdfast_build_info",
        "Always 1; the labels say which build is running."
    );

    for name in [
        "holdfast_idempotent_replays_total",
        "holdfast_request_in_flight_total",
        "holdfast_version_conflicts_total",
        "holdfast_ats_rejections_total",
        "holdfast_push_chunks_redone_total",
        "holdfast_dead_letters_total",
        "holdfast_sync_stream_lagged_total",
        "holdfast_db_pool_acquire_timeouts_total",
    ] {
        metrics::counter!(name).absolute(0);
    }
    // The outcomes are a closed set: each is a series from the start.
    for served_by in [
        "replica",
        "primary_replica_behind",
        "primary_replica_unavailable",
    ] {
        metrics::counter!("holdfast_replica_reads_total", "served_by" => served_by).absolute(0);
    }
    for outcome in ["moved", "declined"] {
        metrics::counter!("holdfast_known_order_allocations_total", "outcome" => outcome)
            .absolute(0);
    }
    for outcome in ["delivered", "failed", "gone"] {
        metrics::counter!("holdfast_delivery_attempts_total", "outcome" => outcome).absolute(0);
    }
    for name in [
        "holdfast_outbox_backlog",
        "holdfast_outbox_oldest_pending_age_seconds",
        "holdfast_dead_letters",
        "holdfast_db_pool_max_connections",
        // Down until the first probe says otherwise (one runs at start).
        "holdfast_db_up",
    ] {
        metrics::gauge!(name).set(0.0);
    }
    for state in ["idle", "in_use"] {
        metrics::gauge!("holdfast_db_pool_connections", "state" => state).set(0.0);
    }
    // Increment, not set: a second server in the same process (tests) must
    // not reset the first one's count of connected desks.
    metrics::gauge!("holdfast_sync_streams").increment(0.0);
    // Registered without a sample: its buckets read zero until the first delivery.
    let _ = metrics::histogram!("holdfast_delivery_latency_seconds");
    let _ = metrics::histogram!("holdfast_relay_lag_seconds");
    metrics::gauge!("holdfast_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
}
