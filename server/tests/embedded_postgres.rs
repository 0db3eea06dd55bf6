//! `holdfast-server serve` on its embedded Postgres, as an operator runs it:
//! first start creates the cluster, a clean stop stops it, a SIGKILL leaves an
//! orphan that the next start reuses, and nothing is left running at the end.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

struct Server {
    child: Child,
    base: String,
}

/// Starts the real binary with no DATABASE_URL and waits for its `listening on` line.
fn start(data_dir: &Path) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_holdfast-server"))
        .args(["serve", "--listen", "127.0.0.1:0", "--demo", "--data-dir"])
        .arg(data_dir)
        .env_remove("DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn holdfast-server");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(addr) = line.strip_prefix("listening on ") {
                let _ = tx.send(addr.to_owned());
            }
        }
    });
    let started = Instant::now();
    let base = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("server printed `listening on`");
    eprintln!("listening after {:?}", started.elapsed());
    Server { child, base }
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

fn signal_and_wait(server: &mut Server, signal: Signal) {
    kill(Pid::from_raw(server.child.id() as i32), signal).expect("signal");
    let status = server.child.wait().expect("wait");
    if signal != Signal::SIGKILL {
        assert!(status.success(), "clean shutdown exits 0, got {status}");
    }
}

/// The postmaster's pid if one runs for this cluster.
fn postmaster_pid(cluster: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(cluster.join("postmaster.pid")).ok()?;
    let pid: i32 = text.lines().next()?.trim().parse().ok()?;
    kill(Pid::from_raw(pid), None).ok().map(|_| pid)
}

#[test]
fn serve_creates_stops_and_reuses_its_cluster() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // The `postgres` user (when we are root) must be able to reach it.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let data_dir = tmp.path().join("data");
    let cluster = data_dir.join("postgres");

    // First start: a new cluster, demo data, readiness.
    let mut server = start(&data_dir);
    assert!(cluster.join("PG_VERSION").is_file());
    assert_eq!(get(&format!("{}/readyz", server.base)), 200);
    let first_pid = postmaster_pid(&cluster).expect("postmaster running");
    signal_and_wait(&mut server, Signal::SIGTERM);
    assert_eq!(postmaster_pid(&cluster), None, "SIGTERM stops the cluster");

    // Second start reuses the cluster (and --demo changes nothing).
    let mut server = start(&data_dir);
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
    let mut server = start(&data_dir);
    assert_eq!(get(&format!("{}/readyz", server.base)), 200);
    assert_eq!(postmaster_pid(&cluster), Some(second_pid), "orphan reused");
    signal_and_wait(&mut server, Signal::SIGINT);
    assert_eq!(postmaster_pid(&cluster), None, "nothing left running");
}
