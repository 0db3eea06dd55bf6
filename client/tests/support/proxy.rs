//! A fault-injecting TCP proxy between a desk and the server.
//!
//! Requests always pass through whole, so the server runs them; the faults
//! are on the way back, per response (the proxy reads HTTP/1.1 response
//! framing just enough to find each response's end):
//! - drop: the server answered, the desk never hears it (the connection is
//!   reset instead) — the case idempotency keys exist for;
//! - cut: the head and half the body arrive, then a reset;
//! - refuse: the connection is reset as soon as it is accepted.
//!
//! Choices come from a seeded RNG, so a failure can be replayed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Share of responses swallowed after the server produced them.
    pub drop_response: f64,
    /// Share of responses cut mid-body.
    pub cut_body: f64,
    /// Share of connections reset on accept.
    pub refuse: f64,
}

#[derive(Debug, Default)]
pub struct Stats {
    pub forwarded: AtomicU64,
    pub dropped: AtomicU64,
    pub cut: AtomicU64,
    pub refused: AtomicU64,
}

struct Shared {
    upstream: std::net::SocketAddr,
    faults: Mutex<Faults>,
    rng: Mutex<StdRng>,
    stats: Stats,
}

impl Shared {
    fn roll(&self) -> f64 {
        self.rng
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .random::<f64>()
    }

    fn faults(&self) -> Faults {
        *self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub struct Proxy {
    pub addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: std::net::SocketAddr, seed: u64) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("addr");
        let shared = Arc::new(Shared {
            upstream,
            faults: Mutex::new(Faults::default()),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            stats: Stats::default(),
        });
        let s = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let s = s.clone();
                tokio::spawn(async move {
                    // Errors only end this one connection.
                    let _ = connection(s, client).await;
                });
            }
        });
        Proxy { addr, shared, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set_faults(&self, faults: Faults) {
        *self.shared.faults.lock().unwrap_or_else(|p| p.into_inner()) = faults;
    }

    pub fn stats(&self) -> &Stats {
        &self.shared.stats
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Closes with a TCP reset (linger 0), as a crashed peer or a middlebox does.
fn reset(stream: TcpStream) {
    let _ = socket2::SockRef::from(&stream).set_linger(Some(std::time::Duration::ZERO));
    drop(stream);
}

/// How much of the buffered server bytes is one whole response.
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

async fn connection(s: Arc<Shared>, mut client: TcpStream) -> std::io::Result<()> {
    if s.roll() < s.faults().refuse {
        s.stats.refused.fetch_add(1, Ordering::Relaxed);
        reset(client);
        return Ok(());
    }
    let mut server = TcpStream::connect(s.upstream).await?;
    let mut from_server: Vec<u8> = Vec::new();
    let mut passthrough = false;
    let mut cbuf = vec![0u8; 64 * 1024];
    let mut sbuf = vec![0u8; 64 * 1024];
    loop {
        tokio::select! {
            n = client.read(&mut cbuf) => {
                let n = n?;
                if n == 0 {
                    return Ok(());
                }
                // Requests pass through untouched: the server runs them.
                server.write_all(&cbuf[..n]).await?;
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
                            s.stats.forwarded.fetch_add(1, Ordering::Relaxed);
                            client.write_all(&response).await?;
                        }
                    }
                }
            }
        }
    }
}
