//! Holdfast's chaos suite: the whole system attacked the way the real world
//! attacks it, then every promise checked as an invariant.
//!
//! One run ([`scenario::run`]) starts the real `holdfast-server` process over
//! a fresh database, N simulated desks (the client engine) behind
//! fault-injecting proxies, partners that fail, stall and recover, and a
//! warehouse that redelivers its events. While the desks work, seeded moments
//! kill the server with SIGKILL (and restart it), abort relays, crash desks
//! mid-sync and black-hole their networks. At the end [`invariants`] audits
//! the database, the desks and the partners, and [`report::Report`] says what
//! happened.
//!
//! A seed fixes every random choice (the acts, the faults, when each kill
//! comes, counted in acts); thread scheduling is the machine's, so a failing
//! seed reproduces the same storm, not the same nanoseconds.
//!
//! Errors here are `anyhow`: this crate is a test harness whose errors end a
//! run and are printed, never matched on.

pub mod desk;
pub mod invariants;
pub mod keys;
pub mod partner;
pub mod proxy;
pub mod report;
pub mod scenario;
pub mod server;
pub mod warehouse;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use tokio::sync::watch;

pub use report::Report;
pub use scenario::{run, Config, Keep};

/// Progress of the chaos phase, shared by the desks (which count acts) and
/// the fault schedules (which wait for act counts).
pub struct Progress {
    acts: AtomicU64,
    tick: watch::Sender<u64>,
    budget: Option<u64>,
    deadline: Option<Instant>,
    stopped: AtomicBool,
    /// Bumped to make every desk sync at once, as the server's stream pokes
    /// every open desk after a commit.
    rushes: AtomicU64,
}

impl Progress {
    pub fn new(budget: Option<u64>, deadline: Option<Instant>) -> Progress {
        Progress {
            acts: AtomicU64::new(0),
            tick: watch::Sender::new(0),
            budget,
            deadline,
            stopped: AtomicBool::new(false),
            rushes: AtomicU64::new(0),
        }
    }

    pub fn acts(&self) -> u64 {
        self.acts.load(Ordering::SeqCst)
    }

    pub fn add_act(&self) {
        let n = self.acts.fetch_add(1, Ordering::SeqCst) + 1;
        self.tick.send_replace(n);
    }

    /// The chaos phase is over: budget spent, time up, or stopped.
    pub fn done(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
            || self.budget.is_some_and(|b| self.acts() >= b)
            || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Every desk syncs at its next step.
    pub fn rush(&self) {
        self.rushes.fetch_add(1, Ordering::SeqCst);
    }

    pub fn rushes(&self) -> u64 {
        self.rushes.load(Ordering::SeqCst)
    }

    /// Ends the phase early (an invariant already failed).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.tick.send_modify(|_| {});
    }

    /// Waits until `n` acts were made; false if the phase ended first.
    pub async fn wait_acts(&self, n: u64) -> bool {
        let mut rx = self.tick.subscribe();
        let until = async {
            // Err only if the sender is gone, and `self` owns it.
            let _ = rx.wait_for(|v| *v >= n || self.done()).await;
        };
        match self.deadline {
            Some(d) => {
                tokio::select! {
                    _ = until => {}
                    _ = tokio::time::sleep_until(d.into()) => {}
                }
            }
            None => until.await,
        }
        self.acts() >= n && !self.stopped.load(Ordering::SeqCst)
    }
}
