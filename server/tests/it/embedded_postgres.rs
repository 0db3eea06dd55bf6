//! `holdfast-server serve` on its embedded Postgres, as an operator runs it:
//! first start creates the cluster, a clean stop stops it, a SIGKILL leaves an
//! orphan that the next start reuses, and nothing is left running at the end.

use std::path::Path;
use std::time::Instant;

use nix::sys::signal::Signal;

use crate::support::process::{postmaster_pid, reachable_tempdir, ServerProcess};

/// Starts the real binary with no DATABASE_URL on `tmp/data`.
fn start(tmp: &Path) -> ServerProcess {
    let started = Instant::now();
    let server = ServerProcess::start(None, tmp, &[]);
    eprintln!("listening after {:?}", started.elapsed());
    server
}

fn get(url: &str) -> u16 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        reqwest::get(url)
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    })
}

fn signal_and_wait(server: &mut ServerProcess, signal: Signal) {
    server.signal(signal);
    let status = server.child.wait().expect("wait");
    if signal != Signal::SIGKILL {
        assert!(status.success(), "clean shutdown exits 0, got {status}");
    }
}

#[test]
fn serve_creates_stops_and_reuses_its_cluster() {
    let tmp = reachable_tempdir();
    let cluster = tmp.path().join("data").join("postgres");

    // First start: a new cluster, demo data, readiness.
    let mut server = start(tmp.path());
    assert!(cluster.join("PG_VERSION").is_file());
    assert_eq!(get(&format!("{}/readyz", server.base)), 200);
    let first_pid = postmaster_pid(&cluster).expect("postmaster running");
    signal_and_wait(&mut server, Signal::SIGTERM);
    assert_eq!(postmaster_pid(&cluster), None, "SIGTERM stops the cluster");

    // Second start reuses the cluster (and --demo changes nothing).
    let mut server = start(tmp.path());
    assert_eq!(get(&format!("{}/readyz", server.base)), 200);
    let second_pid = postmaster_pid(&cluster).expect("postmaster running");
    assert_ne!(first_pid, second_pid);

    // SIGKILL: the cluster is orphaned, still running.
    signal_and_wait(&mut server, Signal::SIGKILL);
    assert_eq!(
        postmaster_pid(&cluster),
        Some(second_pid),
        "orphan survives the kill"
    );

    // The next start adopts the orphan instead of failing on postmaster.pid.
    let mut server = start(tmp.path());
    assert_eq!(get(&format!("{}/readyz", server.base)), 200);
    assert_eq!(postmaster_pid(&cluster), Some(second_pid), "orphan reused");
    signal_and_wait(&mut server, Signal::SIGINT);
    assert_eq!(postmaster_pid(&cluster), None, "nothing left running");
}
