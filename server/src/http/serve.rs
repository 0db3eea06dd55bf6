//! The accept loop: axum's router over hyper, with the bounds `axum::serve`
//! does not set (issue 15 item 6). A client that opens a connection and
//! never finishes its request head is cut off after `header_read_timeout`
//! (hyper's own timer; it also bounds how long an idle keep-alive connection
//! may wait before its next request head); at most `max_connections` are
//! served at once — past that the loop stops accepting, so further clients
//! wait in the kernel's backlog instead of costing a task and buffers each,
//! and are served as connections free up. Graceful shutdown is axum's: stop
//! accepting, let in-flight requests finish, close idle connections.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tower::ServiceExt;

/// Connection bounds. `Default` is what `serve` uses unless told otherwise.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// A request head (or the next one, on a kept-alive connection) must
    /// arrive within this, or the connection is closed.
    pub header_read_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_read_timeout: Duration::from_secs(10),
            max_connections: 1024,
        }
    }
}

pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    // Dropped (closed) to tell every connection to finish gracefully; each
    // connection holds a receiver until it is done, so the loop can wait.
    let (signal_tx, signal_rx) = watch::channel(());
    let (close_tx, close_rx) = watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break, // the semaphore is never closed
            },
            () = &mut shutdown => break,
        };
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait, don't spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let mut signal = signal_rx.clone();
        let close_rx = close_rx.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                req.extensions_mut()
                    .insert(ConnectInfo::<SocketAddr>(remote));
                app.clone().oneshot(req.map(axum::body::Body::new))
            });
            // HTTP/1.1 only, as `axum::serve` served it here (axum's http2
            // feature is off).
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            let mut shutting_down = false;
            loop {
                tokio::select! {
                    result = conn.as_mut() => {
                        if let Err(e) = result {
                            tracing::debug!(%remote, error = %e, "connection ended with an error");
                        }
                        break;
                    }
                    // The sender is dropped, never sent on: `changed` errs once
                    // it is gone, and keeps erring, so act on it once.
                    _ = signal.changed(), if !shutting_down => {
                        shutting_down = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
            drop(close_rx);
            drop(permit);
        });
    }
    drop(listener);
    drop(signal_rx);
    drop(signal_tx);
    drop(close_rx);
    close_tx.closed().await;
}
