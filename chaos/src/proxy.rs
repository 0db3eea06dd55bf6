//! A fault-injecting TCP proxy on loopback, between one party (a desk, the
//! warehouse) and the server.
//!
//! Requests always pass through whole, so the server runs them; the faults
//! are what comes back, rolled per response from a seeded RNG (the proxy
//! reads HTTP/1.1 response framing just enough to find each response's end):
//! - delay: the response is held for a moment (a slow link);
//! - drop: the server answered, the caller never hears it (the connection is
//!   reset instead) — the case idempotency keys exist for;
//! - cut: the head and half the body arrive, then a reset;
//! - refuse: the connection is reset as soon as it is accepted.
//!
//! And, switched on and off by the scenario, a black hole: while it lasts
//! nothing is forwarded either way and nothing is answered, so callers hang
//! until their own timeouts; when it ends every connection it swallowed is
//! reset. A request already forwarded when the hole opens still runs on the
//! server, and its answer is lost.
//!
//! The upstream can move (the server is restarted on a new port); while it
//! is down a new connection is reset, like a refused one.
//!
//! Generalized from `client/tests/support/proxy.rs` (which the client's own
//! tests keep using), adding delay, black holes, a movable upstream, and a
//! "a request just went upstream" signal the scenario times its kills on.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::futures::Notified;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// Shares of responses (and connections, for `refuse`) that meet each fault.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    pub delay: f64,
    pub drop_response: f64,
    pub cut_body: f64,
    pub refuse: f64,
    /// Upper bound of an injected delay.
    pub max_delay: Duration,
}

impl Faults {
    /// No faults at all.
    pub fn none() -> Faults {
        Faults::default()
    }
}

/// What the proxy did, for the report.
#[derive(Debug, Default)]
pub struct Stats {
    pub forwarded: AtomicU64,
    pub delayed: AtomicU64,
    pub dropped: AtomicU64,
    pub cut: AtomicU64,
    pub refused: AtomicU64,
    pub swallowed: AtomicU64,
}

/// A plain copy of [`Stats`].
#[derive(Debug, Default, Clone, Copy)]
pub struct StatsSnapshot {
    pub forwarded: u64,
    pub delayed: u64,
    pub dropped: u64,
    pub cut: u64,
    pub refused: u64,
    pub swallowed: u64,
}

impl std::ops::AddAssign for StatsSnapshot {
    fn add_assign(&mut self, o: StatsSnapshot) {
        self.forwarded += o.forwarded;
        self.delayed += o.delayed;
        self.dropped += o.dropped;
        self.cut += o.cut;
        self.refused += o.refused;
        self.swallowed += o.swallowed;
    }
}

struct Shared {
    upstream: Mutex<Option<SocketAddr>>,
    faults: Mutex<Faults>,
    rng: Mutex<StdRng>,
    stats: Stats,
    /// True while the black hole is open.
    hole: watch::Sender<bool>,
    /// Poked every time request bytes go upstream.
    forwarded: Notify,
}

impl Shared {
    fn roll(&self) -> f64 {
        self.rng
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .random::<f64>()
    }

    fn delay(&self, max: Duration) -> Duration {
        let ms = max.as_millis().max(1) as u64;
        let pick = self
            .rng
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .random_range(0..ms);
        Duration::from_millis(pick)
    }

    fn faults(&self) -> Faults {
        *self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn upstream(&self) -> Option<SocketAddr> {
        *self.upstream.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A running proxy; dropping it stops accepting.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port. `seed` fixes every fault roll.
    pub async fn start(upstream: Option<SocketAddr>, seed: u64) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream: Mutex::new(upstream),
            faults: Mutex::new(Faults::none()),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            stats: Stats::default(),
            hole: watch::Sender::new(false),
            forwarded: Notify::new(),
        });
        let s = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let s = s.clone();
                tokio::spawn(async move {
                    // An error ends this one connection, which is all a
                    // broken connection should do.
                    let _ = connection(s, client).await;
                });
            }
        });
        Ok(Proxy { addr, shared, task })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set_upstream(&self, upstream: Option<SocketAddr>) {
        *self
            .shared
            .upstream
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = upstream;
    }

    pub fn set_faults(&self, faults: Faults) {
        *self.shared.faults.lock().unwrap_or_else(|p| p.into_inner()) = faults;
    }

    /// Opens (true) or closes (false) the black hole.
    pub fn black_hole(&self, open: bool) {
        self.shared.hole.send_replace(open);
    }

    /// Resolves the next time request bytes go upstream. Create it before
    /// starting what should send them (it hears every notification from the
    /// moment it exists, polled or not).
    pub fn forwarded(&self) -> Notified<'_> {
        self.shared.forwarded.notified()
    }

    pub fn stats(&self) -> StatsSnapshot {
        let s = &self.shared.stats;
        StatsSnapshot {
            forwarded: s.forwarded.load(Ordering::Relaxed),
            delayed: s.delayed.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
            cut: s.cut.load(Ordering::Relaxed),
            refused: s.refused.load(Ordering::Relaxed),
            swallowed: s.swallowed.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Closes with a TCP reset (linger 0), as a crashed peer or a middlebox does.
fn reset(stream: TcpStream) {
    // If the option cannot be set the close is a FIN instead; still a close.
    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
    drop(stream);
}

/// How much of the buffered server bytes is one whole response.
#[derive(Debug, PartialEq, Eq)]
enum Frame {
    Incomplete,
    /// (length of the head, length of the whole response)
    Complete(usize, usize),
    /// Not length-delimited (chunked, or until close): pass it all through.
    Passthrough,
}

fn frame(buf: &[u8]) -> Frame {
    let Some(head) = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4) else {
        return Frame::Incomplete;
    };
    let text = String::from_utf8_lossy(&buf[..head]).to_ascii_lowercase();
    let status: u16 = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if (100..200).contains(&status) || status == 204 || status == 304 {
        return Frame::Complete(head, head);
    }
    if text.contains("transfer-encoding:") {
        return Frame::Passthrough;
    }
    let length = text.lines().find_map(|l| {
        l.strip_prefix("content-length:")
            .and_then(|v| v.trim().parse::<usize>().ok())
    });
    match length {
        Some(n) if buf.len() >= head + n => Frame::Complete(head, head + n),
        Some(_) => Frame::Incomplete,
        None => Frame::Passthrough,
    }
}

/// Holds `client` until the black hole closes, then resets it.
async fn swallow(s: &Shared, client: TcpStream) {
    s.stats.swallowed.fetch_add(1, Ordering::Relaxed);
    let mut hole = s.hole.subscribe();
    // Err: the proxy is gone; reset at once.
    let _ = hole.wait_for(|open| !*open).await;
    reset(client);
}

async fn connection(s: Arc<Shared>, mut client: TcpStream) -> std::io::Result<()> {
    if *s.hole.borrow() {
        swallow(&s, client).await;
        return Ok(());
    }
    if s.roll() < s.faults().refuse {
        s.stats.refused.fetch_add(1, Ordering::Relaxed);
        reset(client);
        return Ok(());
    }
    let Some(upstream) = s.upstream() else {
        reset(client);
        return Ok(());
    };
    let mut server = match TcpStream::connect(upstream).await {
        Ok(server) => server,
        Err(_) => {
            // The server is down: the caller sees what it would see.
            reset(client);
            return Ok(());
        }
    };
    let mut hole = s.hole.subscribe();
    let mut from_server: Vec<u8> = Vec::new();
    let mut passthrough = false;
    let mut cbuf = vec![0u8; 64 * 1024];
    let mut sbuf = vec![0u8; 64 * 1024];
    loop {
        tokio::select! {
            changed = hole.changed() => {
                if changed.is_ok() && *hole.borrow_and_update() {
                    drop(server);
                    swallow(&s, client).await;
                    return Ok(());
                }
            }
            n = client.read(&mut cbuf) => {
                let n = n?;
                if n == 0 {
                    return Ok(());
                }
                // Requests pass through untouched: the server runs them.
                server.write_all(&cbuf[..n]).await?;
                s.forwarded.notify_waiters();
            }
            n = server.read(&mut sbuf) => {
                let n = n?;
                if n == 0 {
                    return Ok(());
                }
                if passthrough {
                    client.write_all(&sbuf[..n]).await?;
                    continue;
                }
                from_server.extend_from_slice(&sbuf[..n]);
                loop {
                    match frame(&from_server) {
                        Frame::Incomplete => break,
                        Frame::Passthrough => {
                            passthrough = true;
                            client.write_all(&from_server).await?;
                            from_server.clear();
                            break;
                        }
                        Frame::Complete(head, len) => {
                            let response: Vec<u8> = from_server.drain(..len).collect();
                            let faults = s.faults();
                            let roll = s.roll();
                            if roll < faults.drop_response {
                                s.stats.dropped.fetch_add(1, Ordering::Relaxed);
                                reset(client);
                                return Ok(());
                            }
                            if roll < faults.drop_response + faults.cut_body {
                                s.stats.cut.fetch_add(1, Ordering::Relaxed);
                                let half = head + (len - head) / 2;
                                client.write_all(&response[..half]).await?;
                                client.flush().await?;
                                reset(client);
                                return Ok(());
                            }
                            if roll < faults.drop_response + faults.cut_body + faults.delay {
                                s.stats.delayed.fetch_add(1, Ordering::Relaxed);
                                // An injected slow link: the fault itself,
                                // not a wait for anything.
                                tokio::time::sleep(s.delay(faults.max_delay)).await;
                            }
                            s.stats.forwarded.fetch_add(1, Ordering::Relaxed);
                            client.write_all(&response).await?;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_length_delimited_and_passes_the_rest_through() {
        assert_eq!(frame(b"HTTP/1.1 200 OK\r\n"), Frame::Incomplete);
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
        assert_eq!(frame(ok), Frame::Complete(38, 40));
        assert_eq!(frame(&ok[..39]), Frame::Incomplete);
        assert_eq!(
            frame(b"HTTP/1.1 204 No Content\r\n\r\n"),
            Frame::Complete(27, 27)
        );
        assert_eq!(
            frame(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"),
            Frame::Passthrough
        );
    }
}
