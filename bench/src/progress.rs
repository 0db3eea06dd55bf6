//! Progress on stderr (stdout carries only the table), so a long run shows
//! it is alive and what it is doing.

use std::time::{Duration, Instant};

static STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// Starts the clock progress lines are stamped with.
pub fn start() {
    STARTED.get_or_init(Instant::now);
}

fn stamp() -> String {
    let elapsed = STARTED.get_or_init(Instant::now).elapsed().as_secs();
    format!("[{:>2}:{:02}]", elapsed / 60, elapsed % 60)
}

/// One line: what the bench is doing now.
pub fn step(what: impl std::fmt::Display) {
    eprintln!("{} {what}", stamp());
}

/// A counter that reports every few seconds during a long loop.
pub struct Ticker {
    what: &'static str,
    total: usize,
    last: Instant,
}

const EVERY: Duration = Duration::from_secs(5);

impl Ticker {
    pub fn new(what: &'static str, total: usize) -> Self {
        Ticker {
            what,
            total,
            last: Instant::now(),
        }
    }

    pub fn tick(&mut self, done: usize) {
        if self.last.elapsed() >= EVERY {
            self.last = Instant::now();
            step(format_args!("  {}: {done}/{}", self.what, self.total));
        }
    }
}
