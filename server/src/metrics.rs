//! Prometheus metrics. The recorder is process-global (the `metrics` macros
//! need one), installed once however many servers a test process starts.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

pub struct Metrics {
    handle: Option<PrometheusHandle>,
}

const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

impl Metrics {
    pub fn global() -> Arc<Metrics> {
        static GLOBAL: OnceLock<Arc<Metrics>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| {
                let recorder = PrometheusBuilder::new()
                    .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                    .and_then(|b| b.install_recorder());
                match recorder {
                    Ok(handle) => Arc::new(Metrics { handle: Some(handle) }),
                    Err(e) => {
                        tracing::error!(error = %e, "metrics recorder unavailable; /metrics will be empty");
                        Arc::new(Metrics { handle: None })
                    }
                }
            })
            .clone()
    }

    pub fn render(&self) -> String {
        self.handle.as_ref().map(|h| h.render()).unwrap_or_default()
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
