//! Item 7: a thousand desks on `GET /v1/sync/stream`; how long from a commit
//! until each of them hears `event: changed`. The baseline is the floor
//! underneath: a bare LISTEN connection hearing a bare NOTIFY.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt;
use reqwest::header::AUTHORIZATION;
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::load::Latencies;
use crate::progress;

/// Events one desk may record before its loop ends regardless.
const MAX_EVENTS_PER_DESK: usize = 100_000;

pub struct Outcome {
    pub latencies: Latencies,
    /// (desk, commit) pairs that heard nothing before the next commit.
    pub missed: usize,
}

/// Connects `desks` streams, then runs `commit` `commits` times, `interval`
/// apart; each call must commit one change of the desks' tenant and return.
pub async fn fan_out<F, Fut>(
    base: &str,
    bearer: &str,
    desks: usize,
    commits: usize,
    interval: Duration,
    mut commit: F,
) -> anyhow::Result<Outcome>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()?;
    let connected = Arc::new(AtomicUsize::new(0));
    let (stop, stopped) = watch::channel(false);
    let mut tasks = JoinSet::new();
    for _ in 0..desks {
        let (http, url, bearer, connected, mut stopped) = (
            http.clone(),
            format!("{base}/v1/sync/stream"),
            bearer.to_owned(),
            connected.clone(),
            stopped.clone(),
        );
        tasks.spawn(async move {
            let response = http
                .get(url)
                .header(AUTHORIZATION, bearer)
                .send()
                .await
                .context("GET /v1/sync/stream")?;
            anyhow::ensure!(
                response.status().is_success(),
                "stream answered {}",
                response.status()
            );
            // The server subscribes before it sends the headers.
            connected.fetch_add(1, Ordering::SeqCst);
            let mut body = response.bytes_stream();
            let mut heard = Vec::new();
            let mut pending = String::new();
            for _ in 0..MAX_EVENTS_PER_DESK {
                let chunk = tokio::select! {
                    _ = stopped.wait_for(|s| *s) => break,
                    chunk = body.next() => chunk,
                };
                let Some(chunk) = chunk else { break };
                let at = Instant::now();
                pending.push_str(&String::from_utf8_lossy(&chunk?));
                while let Some(end) = pending.find('\n') {
                    if pending[..end].trim_end() == "event: changed" {
                        heard.push(at);
                    }
                    pending.drain(..=end);
                }
            }
            Ok::<_, anyhow::Error>(heard)
        });
    }
    let until = Instant::now() + Duration::from_secs(60);
    let mut ticker = progress::Ticker::new("item 7 desks connected", desks);
    while connected.load(Ordering::SeqCst) < desks {
        anyhow::ensure!(
            Instant::now() < until,
            "only {} of {desks} desks connected within a minute",
            connected.load(Ordering::SeqCst)
        );
        if tasks.try_join_next().is_some() {
            anyhow::bail!("a desk's stream ended before the test began");
        }
        ticker.tick(connected.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Let the hello comments drain before the first commit.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut windows = Vec::with_capacity(commits);
    for _ in 0..commits {
        let began = Instant::now();
        commit().await?;
        windows.push((began, Instant::now()));
        tokio::time::sleep(interval).await;
    }
    let _ = stop.send(true);
    let mut heard_by_desk = Vec::with_capacity(desks);
    while let Some(done) = tasks.join_next().await {
        heard_by_desk.push(done.context("a desk task panicked")??);
    }

    let mut samples = Vec::new();
    let mut missed = 0;
    for heard in &heard_by_desk {
        for (i, (began, committed)) in windows.iter().enumerate() {
            let next = windows.get(i + 1).map(|w| w.0);
            let first = heard
                .iter()
                .find(|t| *t >= began && next.is_none_or(|n| **t < n));
            match first {
                Some(t) => samples.push(t.saturating_duration_since(*committed)),
                None => missed += 1,
            }
        }
    }
    Ok(Outcome {
        latencies: Latencies::new(samples),
        missed,
    })
}

/// The floor: one LISTEN connection, `n` NOTIFYs each in its own commit.
pub async fn bare_listen(db: &PgPool, n: usize, interval: Duration) -> anyhow::Result<Latencies> {
    let mut listener = PgListener::connect_with(db).await?;
    listener.listen("holdfast_bench_poke").await?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        sqlx::query("select pg_notify('holdfast_bench_poke', 'x')")
            .execute(db)
            .await?;
        let committed = Instant::now();
        tokio::time::timeout(Duration::from_secs(10), listener.recv())
            .await
            .context("no notification within 10 s")??;
        samples.push(committed.elapsed());
        tokio::time::sleep(interval).await;
    }
    Ok(Latencies::new(samples))
}

/// The baseline hub: the least a server can do to poke desks — one LISTEN on
/// the same channel the `changes` trigger notifies, one broadcast, an SSE
/// `changed` event per notification; no fence query, no gathering, no
/// tenants. Served on the server's runtime, so it gets the same threads.
pub async fn start_bare_hub(
    rt: &tokio::runtime::Handle,
    db: PgPool,
) -> anyhow::Result<(String, watch::Sender<bool>)> {
    let (stop, stopped) = watch::channel(false);
    let addr = rt.spawn(serve_bare_hub(db, stopped)).await??;
    Ok((format!("http://{addr}"), stop))
}

async fn serve_bare_hub(
    db: PgPool,
    stopped: watch::Receiver<bool>,
) -> anyhow::Result<std::net::SocketAddr> {
    use axum::response::sse::{Event, Sse};
    use tokio::sync::broadcast;

    let (tx, _) = broadcast::channel::<()>(16);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let mut pg = PgListener::connect_with(&db).await?;
    pg.listen(holdfast_server::feed::notify::CHANNEL).await?;
    let forward = tx.clone();
    let mut stopped_fwd = stopped.clone();
    tokio::spawn(async move {
        for _ in 0..u64::MAX {
            tokio::select! {
                _ = stopped_fwd.wait_for(|s| *s) => break,
                heard = pg.recv() => {
                    if heard.is_err() {
                        break;
                    }
                    let _ = forward.send(());
                }
            }
        }
    });
    let app = axum::Router::new().route(
        "/v1/sync/stream",
        axum::routing::get(move || {
            let rx = tx.subscribe();
            async move {
                let hello = futures_util::stream::once(async {
                    Ok::<_, std::convert::Infallible>(Event::default().comment("subscribed"))
                });
                let pokes = futures_util::stream::unfold(rx, |mut rx| async move {
                    for _ in 0..u64::MAX {
                        match rx.recv().await {
                            Ok(()) => {
                                let event = Event::default().event("changed").data("{}");
                                return Some((Ok(event), rx));
                            }
                            Err(broadcast::error::RecvError::Lagged(_)) => continue,
                            Err(broadcast::error::RecvError::Closed) => return None,
                        }
                    }
                    None
                });
                Sse::new(hello.chain(pokes))
            }
        }),
    );
    let mut stopped_srv = stopped;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped_srv.wait_for(|s| *s).await;
            })
            .await;
    });
    Ok(addr)
}
