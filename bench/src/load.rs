//! Closed-loop load: N clients, each issuing its next request as soon as the
//! last one answered, for a warm-up and then a measured window. The same
//! runner drives Holdfast over HTTP and the raw-SQL baselines, so both are
//! timed the same way.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::task::JoinSet;

/// One simulated client: `step` performs one complete request.
pub trait Client: Send + 'static {
    fn step(&mut self) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// How long to run before measuring, and how long to measure.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub warmup: Duration,
    pub measure: Duration,
}

/// Hard cap on requests per client per run, so even a step that returns at
/// once cannot spin forever (the window's deadline is the real bound).
const MAX_STEPS_PER_CLIENT: u64 = 10_000_000;

/// What one run measured: completions inside the window and their latencies.
#[derive(Debug, Clone)]
pub struct Measured {
    pub ops: u64,
    pub elapsed: Duration,
    pub latencies: Latencies,
}

impl Measured {
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
}

/// Runs every client concurrently. Requests that complete inside the
/// measured window count (steady state: as many straddle its start as its
/// end). The first error of any client fails the run: a benchmark that
/// measured errors measured the wrong thing.
pub async fn run<C: Client>(clients: Vec<C>, window: Window) -> anyhow::Result<Measured> {
    // A little slack so every task is spawned before the clock starts.
    let start = Instant::now() + Duration::from_millis(20);
    let measure_from = start + window.warmup;
    let end = measure_from + window.measure;
    let mut tasks = JoinSet::new();
    for mut client in clients {
        tasks.spawn(async move {
            tokio::time::sleep_until(start.into()).await;
            let mut latencies = Vec::new();
            for _ in 0..MAX_STEPS_PER_CLIENT {
                let sent = Instant::now();
                if sent >= end {
                    break;
                }
                client.step().await?;
                let done = Instant::now();
                if done >= measure_from && done <= end {
                    latencies.push(done - sent);
                }
            }
            Ok::<_, anyhow::Error>(latencies)
        });
    }
    let mut all = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let latencies = joined.context("a load client panicked")??;
        all.extend(latencies);
    }
    Ok(Measured {
        ops: all.len() as u64,
        elapsed: window.measure,
        latencies: Latencies::new(all),
    })
}

/// A latency sample, sorted once.
#[derive(Debug, Clone, Default)]
pub struct Latencies(Vec<Duration>);

impl Latencies {
    pub fn new(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        Latencies(samples)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The `q` quantile (0–1) by nearest rank; zero for an empty sample.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((q * self.0.len() as f64).ceil() as usize).clamp(1, self.0.len());
        self.0[rank - 1]
    }

    pub fn p50(&self) -> Duration {
        self.quantile(0.50)
    }

    pub fn p99(&self) -> Duration {
        self.quantile(0.99)
    }

    pub fn merge(samples: impl IntoIterator<Item = Latencies>) -> Latencies {
        Latencies::new(samples.into_iter().flat_map(|l| l.0).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let l = Latencies::new((1..=100).rev().map(Duration::from_millis).collect());
        assert_eq!(l.p50(), Duration::from_millis(50));
        assert_eq!(l.p99(), Duration::from_millis(99));
        assert_eq!(l.quantile(1.0), Duration::from_millis(100));
        assert_eq!(Latencies::default().p99(), Duration::ZERO);
    }
}
