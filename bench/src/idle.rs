//! Holding the CPUs out of their halt state while a variant runs.
//!
//! On a virtual machine an idle vCPU halts, and waking it costs an exit to
//! the host. A one-client run is a chain of wake-ups (pgbench's seven round
//! trips a transaction), so its speed depends on whether something else
//! keeps the CPUs busy: measured on the 2-core machine of 2026-12-07,
//! pgbench ran at ~850/s with the server's relay idle and ~1,400/s while the
//! relay passed on every commit. A PM QoS request of 0 µs
//! (`/dev/cpu_dma_latency`, held open) makes an idle CPU poll instead, so a
//! baseline no longer needs our relay to be fast. Whichever way is faster
//! for a side is the one its one-client goal counts (items 1 and 2).

use std::fs::File;
use std::io::Write;

/// While alive, every CPU polls when idle. Dropping it (closing the file)
/// lifts the request.
pub struct Polling {
    _request: File,
}

impl Polling {
    /// `None` when the request cannot be made (not root, or no such device):
    /// the variants that need it are then left out of the run.
    pub fn hold() -> Option<Polling> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/cpu_dma_latency")
            .ok()?;
        f.write_all(&0i32.to_ne_bytes()).ok()?;
        Some(Polling { _request: f })
    }
}
