//! Items 9f–9h: the desktop app's cold start and memory, launched under X
//! (see `crate::desktop`), empty and on the desk's store.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use holdfast_client::{Engine, SyncConfig};

use super::{median, median_duration, range, PASSWORD_USER};
use crate::items::Ctx;
use crate::report::{ms, Goal, Row};
use crate::{desktop, progress};

/// 9f–9h if the desktop app was built next to `exe`; a failure to measure
/// is reported on the progress log, not returned.
pub(super) async fn measure(
    ctx: &Ctx,
    exe: &Path,
    store_path: &Path,
    dir: &Path,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    match desktop::find_app(exe) {
        // Not fatal: a stale build without the startup marks, or no X,
        // leaves these rows out with the reason on the progress log.
        Some(app) => {
            if let Err(e) = desktop_items(ctx, app, store_path, dir, rows).await {
                progress::step(format_args!("items 9f–9h not measured: {e:#}"));
            }
        }
        None => progress::step(format_args!(
            "items 9f–9h skipped: no `holdfast-desktop` next to {} (`make bench` builds it; \
             by hand: npm run build in ui/, then cargo build --release -p holdfast-desktop)",
            exe.display()
        )),
    }
    Ok(())
}

/// Items 9f–9h: the desktop app's cold start and memory (see `desktop`).
async fn desktop_items(
    ctx: &Ctx,
    app: PathBuf,
    store_path: &Path,
    dir: &Path,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    // The desk's data, signed in through a token file, for 9h.
    let desk_dir = dir.join("desktop-desk");
    let copy = desktop::copy_store(store_path, &desk_dir)?;
    let tokens = Arc::new(holdfast_client::token::FileTokens::new(
        desk_dir.join("token"),
    ));
    Engine::open(&copy, tokens, SyncConfig::default())?
        .login(
            &ctx.base,
            "acme",
            PASSWORD_USER,
            holdfast_server::demo::DEMO_PASSWORD,
            "holdfast-bench desktop",
            false,
        )
        .await?;
    let dir = dir.to_owned();
    let m = tokio::task::spawn_blocking(move || desktop_measure(&app, &dir, &desk_dir)).await??;
    let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
    let ready = median_duration(&m.ready);
    let page = median_duration(&m.page);
    rows.push(Row {
        item: "9f".into(),
        what: format!(
            "desktop app cold start to its first interactive screen (sign-in, empty store; \
             median of {} launches under X), vs the webview running the page's first script \
             in the same launches",
            m.ready.len()
        ),
        holdfast: ms(ready),
        baseline: ms(page),
        ratio: Some(page.as_secs_f64() / ready.as_secs_f64().max(1e-9)),
        goal: Goal::new("≤ 1 s", ready <= Duration::from_secs(1)),
        ..Row::default()
    });
    // Above the bare webview: what the app itself costs.
    let above = |kib: u64| kib.saturating_sub(m.bare_pss);
    rows.push(Row {
        item: "9g".into(),
        what: format!(
            "desktop app memory, idle on the sign-in screen (summed PSS of the UI, web and \
             network processes; {} above the baseline), vs the bare webview: the same build \
             showing an empty page, no UI or engine (median of {} launches; {} when the app's \
             page had just loaded)",
            mib(above(m.idle_pss)),
            desktop::LAUNCHES,
            mib(m.page_pss)
        ),
        holdfast: mib(m.idle_pss),
        baseline: mib(m.bare_pss),
        ratio: Some(m.bare_pss as f64 / m.idle_pss.max(1) as f64),
        ..Row::default()
    });
    rows.push(Row {
        item: "9h".into(),
        what: format!(
            "desktop app memory, idle and signed in on the desk's store, its list open on every \
             order (the window in view, the count of all; first screen after {}; {} above the \
             baseline, median of {} launches, {}–{} across them), vs the bare webview (9g's)",
            ms(m.desk_ready),
            mib(above(m.desk_pss)),
            desktop::LAUNCHES,
            mib(above(m.desk_pss_range.0)),
            mib(above(m.desk_pss_range.1)),
        ),
        holdfast: mib(m.desk_pss),
        baseline: mib(m.bare_pss),
        ratio: Some(m.bare_pss as f64 / m.desk_pss.max(1) as f64),
        goal: Goal::new("≤ 60 MiB above", above(m.desk_pss) <= 60 * 1024),
        ..Row::default()
    });
    Ok(())
}

/// What `desktop_measure` saw.
struct DesktopFigures {
    page: Vec<Duration>,
    ready: Vec<Duration>,
    page_pss: u64,
    bare_pss: u64,
    idle_pss: u64,
    /// Medians of the launches on the desk's store, and the range of their
    /// PSS.
    desk_ready: Duration,
    desk_pss: u64,
    desk_pss_range: (u64, u64),
}

/// An empty data dir for launch `i` of `LAUNCHES` (`what` names it on the
/// progress log).
fn launch_dir(dir: &Path, name: &str, what: &str, i: usize) -> PathBuf {
    progress::step(format_args!("{what} {}/{}", i + 1, desktop::LAUNCHES));
    let data = dir.join(format!("desktop-{name}-{i}"));
    let _ = std::fs::remove_dir_all(&data);
    data
}

/// The launches themselves (blocking: processes, sleeps, /proc).
fn desktop_measure(app: &Path, dir: &Path, desk_dir: &Path) -> anyhow::Result<DesktopFigures> {
    let display = desktop::Display::open()?;
    let (mut page, mut ready, mut page_pss, mut idle_pss) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..desktop::LAUNCHES {
        let data = launch_dir(dir, "empty", "item 9f: desktop cold start", i);
        let launch = desktop::Launch::start(app, &display, &data)?;
        page.push(launch.page);
        ready.push(launch.ready);
        page_pss.push(launch.pss_at_page as f64);
        idle_pss.push(launch.settled_pss() as f64);
    }
    let mut bare_pss = Vec::new();
    for i in 0..desktop::LAUNCHES {
        let what = "items 9g/9h: the bare webview (the same build on an empty page)";
        let data = launch_dir(dir, "bare", what, i);
        let launch = desktop::Launch::start_bare(app, &display, &data)?;
        bare_pss.push(launch.settled_pss() as f64);
    }
    // As many launches as the baseline's, each on its own copy of the
    // signed-in store, so every launch starts from the same state (the first
    // on a store would otherwise do the catching up the others skip): one
    // launch's figure moves by a few MiB from the next one's on the same build.
    let (mut desk_ready, mut desk_pss) = (Vec::new(), Vec::new());
    for i in 0..desktop::LAUNCHES {
        let data = launch_dir(
            dir,
            "desk",
            "item 9h: the desktop app on the desk's store",
            i,
        );
        desktop::copy_store(&desk_dir.join(desktop::STORE_FILE), &data)?;
        std::fs::copy(desk_dir.join("token"), data.join("token"))?;
        let desk = desktop::Launch::start(app, &display, &data)?;
        desk_ready.push(desk.ready);
        desk_pss.push(desk.settled_pss() as f64);
    }
    let (lo, hi) = range(&desk_pss).unwrap_or_else(|| {
        let only = median(desk_pss.clone());
        (only, only)
    });
    Ok(DesktopFigures {
        page,
        ready,
        page_pss: median(page_pss) as u64,
        bare_pss: median(bare_pss) as u64,
        idle_pss: median(idle_pss) as u64,
        desk_ready: median_duration(&desk_ready),
        desk_pss: median(desk_pss) as u64,
        desk_pss_range: (lo as u64, hi as u64),
    })
}
