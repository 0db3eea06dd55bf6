//! Item 9f–9h: the desktop app itself (`holdfast-desktop`, release build,
//! if it was built next to this binary), launched under X (Xvfb when there
//! is no display) and timed by its own startup marks
//! (`HOLDFAST_DESKTOP_STARTUP_MARKS`, see src-tauri/src/startup.rs): `page`
//! when the webview runs the page's first script, `ready` when the first
//! interactive screen is painted. The clock is this process's: spawn → the
//! line arriving on the app's stdout.
//!
//! * **9f — cold start.** A fresh data dir (the sign-in screen), launched
//!   `LAUNCHES` times; spawn → `ready`. Baseline: spawn → `page` in the same
//!   launch, i.e. the floor WebKitGTK and the page load set before any of
//!   Holdfast's UI runs.
//! * **9g/9h — memory.** The app is several processes (the UI process,
//!   WebKit's web and network processes), sharing libraries, so the figure
//!   is the sum of their PSS (`/proc/<pid>/smaps_rollup`), read 2 s after
//!   `ready`. The baseline of both is the bare webview: the same build
//!   launched on an empty page (`HOLDFAST_DESKTOP_BARE_PAGE`: no UI, no
//!   store, no engine), read 2 s after that page loaded. 9g: on the sign-in
//!   screen; 9h: signed in on a copy of the desk's store (10,000+ orders,
//!   50,000 SKUs), the desk listing every order. What is above the baseline
//!   is the app's own cost.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::progress;

/// Launches measured for 9f (the median is reported).
pub const LAUNCHES: usize = 3;
/// How long the app gets to show its first screen.
const READY_WITHIN: Duration = Duration::from_secs(60);
/// Idle time before memory is read.
const SETTLE: Duration = Duration::from_secs(2);

/// The desktop binary next to `exe`, if it was built.
pub fn find_app(exe: &Path) -> Option<PathBuf> {
    exe.parent()
        .map(|d| d.join("holdfast-desktop"))
        .filter(|p| p.exists())
}

/// An X display for the app: `$DISPLAY`, or an Xvfb of our own (stopped on
/// drop).
pub struct Display {
    name: String,
    xvfb: Option<Child>,
}

impl Display {
    pub fn open() -> anyhow::Result<Display> {
        if let Some(name) = std::env::var_os("DISPLAY").filter(|d| !d.is_empty()) {
            return Ok(Display {
                name: name.to_string_lossy().into_owned(),
                xvfb: None,
            });
        }
        let n = (90..140)
            .find(|n| {
                !Path::new(&format!("/tmp/.X11-unix/X{n}")).exists()
                    && !Path::new(&format!("/tmp/.X{n}-lock")).exists()
            })
            .context("no free X display number for Xvfb")?;
        let name = format!(":{n}");
        let xvfb = Command::new("Xvfb")
            .args([&name, "-screen", "0", "1280x800x24", "-nolisten", "tcp"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting Xvfb (apt-get install xvfb)")?;
        let socket = format!("/tmp/.X11-unix/X{n}");
        let until = Instant::now() + Duration::from_secs(10);
        while !Path::new(&socket).exists() {
            anyhow::ensure!(Instant::now() < until, "Xvfb {name} did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Display {
            name,
            xvfb: Some(xvfb),
        })
    }
}

impl Drop for Display {
    fn drop(&mut self) {
        if let Some(x) = &mut self.xvfb {
            let _ = x.kill();
            let _ = x.wait();
        }
    }
}

/// One launch of the app, up to its first interactive screen.
pub struct Launch {
    pub page: Duration,
    pub ready: Duration,
    /// Summed PSS (KiB) of the process tree when `page` arrived.
    pub pss_at_page: u64,
    child: Child,
}

impl Launch {
    /// Starts the app on `data_dir` (token file inside it) and waits for
    /// `ready`.
    pub fn start(app: &Path, display: &Display, data_dir: &Path) -> anyhow::Result<Launch> {
        Launch::spawn(app, display, data_dir, false)
    }

    /// Starts the same app on an empty page (`HOLDFAST_DESKTOP_BARE_PAGE`:
    /// no UI, no store, no engine) and waits for that page to load: the bare
    /// webview, the floor any app on this WebKitGTK starts from.
    pub fn start_bare(app: &Path, display: &Display, data_dir: &Path) -> anyhow::Result<Launch> {
        Launch::spawn(app, display, data_dir, true)
    }

    fn spawn(app: &Path, display: &Display, data_dir: &Path, bare: bool) -> anyhow::Result<Launch> {
        let started = Instant::now();
        let mut command = Command::new(app);
        if bare {
            command.env("HOLDFAST_DESKTOP_BARE_PAGE", "1");
        }
        let mut child = command
            .env("DISPLAY", &display.name)
            .env("HOLDFAST_DESKTOP_STARTUP_MARKS", "1")
            .env("HOLDFAST_DESKTOP_DATA_DIR", data_dir)
            .env("HOLDFAST_TOKEN_FILE", data_dir.join("token"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("launching {}", app.display()))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send((line, Instant::now())).is_err() {
                    break;
                }
            }
        });
        let pid = child.id();
        let (mut page, mut pss_at_page) = (None, 0);
        let ready = loop {
            let left = READY_WITHIN.saturating_sub(started.elapsed());
            let Ok((line, at)) = rx.recv_timeout(left) else {
                stop(&mut child);
                anyhow::bail!(
                    "{} showed no first screen within {READY_WITHIN:?}",
                    app.display()
                );
            };
            match line.strip_prefix("holdfast-desktop: startup ") {
                Some(m) if m.starts_with("page ") => {
                    page = Some(at - started);
                    pss_at_page = tree_pss(pid);
                }
                Some(m) if !bare && m.starts_with("ready ") => break at - started,
                Some(m) if bare && m.starts_with("bare ") => {
                    page = Some(at - started);
                    break at - started;
                }
                _ => {}
            }
        };
        let page = page.context("the app said ready without the page mark")?;
        Ok(Launch {
            page,
            ready,
            pss_at_page,
            child,
        })
    }

    /// Waits for the app to settle, then sums its tree's PSS (KiB).
    pub fn settled_pss(&self) -> u64 {
        std::thread::sleep(SETTLE);
        tree_pss(self.child.id())
    }
}

impl Drop for Launch {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// Stops the app and every process it started (WebKit's helpers).
fn stop(child: &mut Child) {
    let mut pids = descendants(child.id());
    pids.push(child.id());
    for pid in &pids {
        let _ = quiet(Command::new("kill").arg(pid.to_string())).status();
    }
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    for pid in pids {
        let _ = quiet(Command::new("kill").args(["-9", &pid.to_string()])).status();
    }
}

/// A `kill` whose target may have exited already: its "No such process" is
/// not worth a line in the bench's progress.
fn quiet(kill: &mut Command) -> &mut Command {
    kill.stderr(Stdio::null())
}

/// Every process below `root` (children, their children, …).
fn descendants(root: u32) -> Vec<u32> {
    let mut parent_of = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            // `pid (comm) state ppid …`; comm may hold spaces, so split
            // after its closing parenthesis.
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(ppid) = ppid {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (pid, _) in parent_of.iter().filter(|(_, pp)| *pp == p) {
            out.push(*pid);
            frontier.push(*pid);
        }
    }
    out
}

/// Summed PSS (KiB) of `root` and its descendants.
fn tree_pss(root: u32) -> u64 {
    std::iter::once(root)
        .chain(descendants(root))
        .map(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("Pss:"))
                        .and_then(|v| v.split_whitespace().next())
                        .and_then(|v| v.parse::<u64>().ok())
                })
                .unwrap_or(0)
        })
        .sum()
}

/// The store's file name in the app's data dir (src-tauri's `STORE_FILE`).
pub const STORE_FILE: &str = "holdfast.sqlite3";

/// A data dir holding a consistent copy of the store at `store`.
pub fn copy_store(store: &Path, data_dir: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(data_dir)?;
    let target = data_dir.join(STORE_FILE);
    let _ = std::fs::remove_file(&target);
    progress::step(format_args!(
        "item 9h: copying the desk's store for the desktop app"
    ));
    rusqlite::Connection::open(store)?
        .execute("vacuum into ?1", [target.to_string_lossy()])
        .context("copying the store (VACUUM INTO)")?;
    Ok(target)
}
