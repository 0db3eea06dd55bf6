//! Items 9c–9e: memory, each measured in a process of its own (this binary
//! re-run as a child, or the `holdfast` CLI) that reads `/proc`.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use holdfast_client::token::MemoryTokens;
use holdfast_client::{Engine, SyncConfig};

use super::CHILD_ENV;
use crate::progress;
use crate::report::{Goal, Row};

/// 9c–9e: the engine idle and on the desk's store, then the CLI if it was
/// built next to `exe`.
pub(super) fn measure(
    exe: &Path,
    store_path: &Path,
    dir: &Path,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    let bare_proc = child_memory(exe, "bare")?;
    let empty = dir.join("empty.db");
    let idle = child_memory(exe, &format!("engine:{}", empty.display()))?;
    let full = child_memory(exe, &format!("engine:{}", store_path.display()))?;
    let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
    rows.push(Row {
        item: "9c".into(),
        what: "RSS: engine opened on an empty store (a process of its own) vs the same process \
               without it"
            .into(),
        holdfast: mib(idle.rss),
        baseline: mib(bare_proc.rss),
        ratio: Some(bare_proc.rss as f64 / idle.rss as f64),
        ..Row::default()
    });
    rows.push(Row {
        item: "9d".into(),
        what: format!(
            "RSS (peak): engine on the desk's store ({} orders, {} SKUs mirrored), all orders \
             listed, vs the engine idle",
            crate::report::thousands(full.orders),
            crate::report::thousands(full.skus)
        ),
        holdfast: format!("{} ({} peak)", mib(full.rss), mib(full.hwm)),
        baseline: mib(idle.rss),
        ratio: Some(idle.rss as f64 / full.hwm as f64),
        goal: Goal::new(
            "≤ 150 MB (app; engine only)",
            full.hwm * 1024 <= 150 * 1000 * 1000,
        ),
        ..Row::default()
    });
    match exe
        .parent()
        .map(|d| d.join("holdfast"))
        .filter(|p| p.exists())
    {
        Some(cli) => {
            let listed = cli_memory(&cli, store_path, dir, "orders")?;
            let idle = cli_memory(&cli, &empty, dir, "status")?;
            rows.push(Row {
                item: "9e".into(),
                what: format!(
                    "peak RSS of the `holdfast` CLI: `orders` on the desk's store vs `status` on \
                     an empty one (sampled every 2 ms; {})",
                    cli.display()
                ),
                holdfast: mib(listed),
                baseline: mib(idle),
                ratio: Some(idle as f64 / listed as f64),
                goal: Goal::new("≤ 150 MB", listed * 1024 <= 150 * 1000 * 1000),
                ..Row::default()
            });
        }
        None => progress::step(format_args!(
            "item 9e skipped: no `holdfast` binary next to {} (cargo build --release -p \
             holdfast-client --bin holdfast)",
            exe.display()
        )),
    }
    Ok(())
}

#[derive(Debug, Default)]
struct Memory {
    rss: u64,
    hwm: u64,
    orders: u64,
    skus: u64,
}

/// Runs this binary as a memory child and parses its one line.
fn child_memory(exe: &Path, spec: &str) -> anyhow::Result<Memory> {
    let out = std::process::Command::new(exe)
        .env(CHILD_ENV, spec)
        .output()
        .context("running the memory child")?;
    anyhow::ensure!(
        out.status.success(),
        "memory child {spec}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut m = Memory::default();
    for field in text.split_whitespace() {
        if let Some((k, v)) = field.split_once('=') {
            let v: u64 = v.parse().unwrap_or(0);
            match k {
                "rss_kib" => m.rss = v,
                "hwm_kib" => m.hwm = v,
                "orders" => m.orders = v,
                "skus" => m.skus = v,
                _ => {}
            }
        }
    }
    anyhow::ensure!(m.rss > 0, "memory child {spec} said: {text}");
    Ok(m)
}

/// The child's side (`main` calls it when [`CHILD_ENV`] is set): `bare`
/// does nothing; `engine:<store>` opens the engine there and lists what a
/// desk's first screen lists (status, every order, the first SKUs), then
/// reports its memory while still holding them.
pub fn child(spec: OsString) -> anyhow::Result<()> {
    let spec = spec.to_string_lossy().into_owned();
    let (mut orders, mut skus) = (0usize, 0usize);
    let mut held = Vec::new();
    if let Some(path) = spec.strip_prefix("engine:") {
        let engine = Engine::open(
            Path::new(path),
            Arc::new(MemoryTokens::default()),
            SyncConfig::default(),
        )?;
        let _status = engine.status()?;
        let list = engine.orders()?;
        orders = list.len();
        skus =
            rusqlite::Connection::open(path)?
                .query_row("select count(*) from skus", [], |r| r.get::<_, i64>(0))?
                as usize;
        let first = engine.skus("", 100)?;
        held.push(Box::new((engine, list, first)) as Box<dyn std::any::Any>);
    }
    let (rss, hwm) = proc_memory("self")?;
    println!("rss_kib={rss} hwm_kib={hwm} orders={orders} skus={skus}");
    drop(held);
    Ok(())
}

/// `VmRSS` and `VmHWM` (KiB) of a process.
fn proc_memory(pid: &str) -> anyhow::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok((field("VmRSS:"), field("VmHWM:")))
}

/// Runs `holdfast --store <store> <command>` and samples its peak RSS (KiB).
fn cli_memory(cli: &Path, store: &Path, dir: &Path, command: &str) -> anyhow::Result<u64> {
    let mut child = std::process::Command::new(cli)
        .arg("--store")
        .arg(store)
        .args(["--no-sync", "--json", command])
        .env("HOLDFAST_TOKEN_FILE", dir.join("cli-token"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("running {}", cli.display()))?;
    let pid = child.id().to_string();
    let mut peak = 0;
    loop {
        if let Ok((_, hwm)) = proc_memory(&pid) {
            peak = peak.max(hwm);
        }
        if let Some(status) = child.try_wait()? {
            anyhow::ensure!(status.success(), "holdfast {command} exited {status}");
            return Ok(peak);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
