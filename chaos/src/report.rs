//! What one run did and found, printed for people (and CI logs).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::proxy::StatsSnapshot;

#[derive(Debug, Default, Clone)]
pub struct Report {
    pub seed: u64,
    pub desks: usize,
    pub orders: usize,
    pub duration: Duration,
    /// Of which the storm, and the finish (settling, resolving, converging,
    /// waiting for deliveries, auditing).
    pub storm: Duration,
    pub finish: Duration,
    /// Keys minted by desks (acts, plus re-issues after resolutions).
    pub attempted: usize,
    pub acknowledged: usize,
    pub rejected: usize,
    pub rejected_by_code: BTreeMap<String, usize>,
    pub conflicted: usize,
    /// Replaced while held behind a conflict or rejection, never applied.
    pub superseded: usize,
    /// Acts a desk's engine refused locally (nothing queued).
    pub local_refusals: u64,
    /// Answers replayed from idempotency keys to desks (a lost answer, a
    /// crash), plus inbound events answered "duplicate".
    pub duplicates_prevented: u64,
    pub desk_syncs: u64,
    pub desk_sync_failures: u64,
    pub inbound_events: usize,
    pub inbound_attempts: u64,
    /// Distinct events partners accepted.
    pub deliveries: usize,
    /// Attempts beyond the first per event and partner: retries after a
    /// failure or a stall, and redeliveries of events already accepted.
    pub redeliveries: u64,
    pub dead_lettered: i64,
    pub requeued: usize,
    pub server_kills: u32,
    pub relay_aborts: u32,
    pub desk_crashes: u64,
    pub black_holes: u32,
    pub partner_outages: u32,
    /// Moments every desk synced at once (as after a stream poke).
    pub rushes: u64,
    pub offline_spells: u64,
    pub proxy: StatsSnapshot,
    pub checks_passed: u64,
    pub violations: Vec<String>,
    /// Odd things that are not a broken promise but worth a look.
    pub anomalies: Vec<String>,
    pub server_log: String,
    /// The command line that runs this seed again.
    pub reproduce: String,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    pub fn kills(&self) -> u64 {
        u64::from(self.server_kills) + u64::from(self.relay_aborts) + self.desk_crashes
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.ok() { "PASSED" } else { "FAILED" };
        writeln!(
            f,
            "== holdfast chaos, seed {} ({} desks, {} orders): {verdict} in {:.1}s (storm {:.1}s, finish {:.1}s)",
            self.seed,
            self.desks,
            self.orders,
            self.duration.as_secs_f64(),
            self.storm.as_secs_f64(),
            self.finish.as_secs_f64()
        )?;
        writeln!(
            f,
            "mutations     attempted {}  acknowledged {}  rejected {}  conflicted {}  superseded {}  (refused locally {})",
            self.attempted, self.acknowledged, self.rejected, self.conflicted, self.superseded, self.local_refusals
        )?;
        if !self.rejected_by_code.is_empty() {
            let codes: Vec<String> = self
                .rejected_by_code
                .iter()
                .map(|(c, n)| format!("{c} {n}"))
                .collect();
            writeln!(f, "rejections    {}", codes.join(", "))?;
        }
        writeln!(
            f,
            "duplicates    prevented {} (replayed answers and inbound duplicates)",
            self.duplicates_prevented
        )?;
        writeln!(
            f,
            "sync          passes {}  failed {}  all-desk rushes {}  offline spells {}",
            self.desk_syncs, self.desk_sync_failures, self.rushes, self.offline_spells
        )?;
        writeln!(
            f,
            "inbound       events {}  attempts {}",
            self.inbound_events, self.inbound_attempts
        )?;
        writeln!(
            f,
            "webhooks      deliveries {}  redeliveries {}  dead-lettered {}  requeued {}",
            self.deliveries, self.redeliveries, self.dead_lettered, self.requeued
        )?;
        writeln!(
            f,
            "kills         survived {}: server SIGKILL {}, relay aborts {}, desk crashes {}",
            self.kills(),
            self.server_kills,
            self.relay_aborts,
            self.desk_crashes
        )?;
        let p = &self.proxy;
        writeln!(
            f,
            "network       black holes {} (connections swallowed {}), responses dropped {}, cut {}, delayed {}, connections refused {}; partner outages {}",
            self.black_holes, p.swallowed, p.dropped, p.cut, p.delayed, p.refused, self.partner_outages
        )?;
        writeln!(
            f,
            "invariants    checks passed {}, violated {}",
            self.checks_passed,
            self.violations.len()
        )?;
        for v in &self.violations {
            writeln!(f, "  VIOLATED  {v}")?;
        }
        for a in &self.anomalies {
            writeln!(f, "  note      {a}")?;
        }
        if !self.ok() {
            writeln!(
                f,
                "reproduce: {}   (server log: {})",
                self.reproduce, self.server_log
            )?;
        }
        Ok(())
    }
}
