//! How long the app takes to come up: the launch instant, and the marks the
//! UI sends (`page`: the webview runs the page's first script; `ready`: the
//! first interactive screen is painted). Each stage is reported once.

use std::collections::HashSet;
use std::io::Write;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// Set: each mark is also printed to stdout for a harness to read.
pub const MARKS_ENV: &str = "HOLDFAST_DESKTOP_STARTUP_MARKS";
/// Set: the app opens its window on an empty page (a one-line document) instead
/// of the UI, opens no store and runs no engine, and marks `bare` when the
/// page has loaded. The bench's memory baseline: the same build's WebKit
/// processes with nothing of Holdfast's in them.
pub const BARE_PAGE_ENV: &str = "HOLDFAST_DESKTOP_BARE_PAGE";

static LAUNCHED: OnceLock<Instant> = OnceLock::new();
static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Called first thing in `run`.
pub fn launched() {
    LAUNCHED.get_or_init(Instant::now);
}

/// Records `stage` (once; the UI names only `page` and `ready`, anything
/// else is ignored).
pub fn mark(stage: &str) {
    if !matches!(stage, "page" | "ready") {
        return;
    }
    {
        let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
        if !seen
            .get_or_insert_with(HashSet::new)
            .insert(stage.to_owned())
        {
            return;
        }
    }
    print_mark(stage);
}

fn print_mark(stage: &str) {
    let ms = LAUNCHED.get().map_or(0, |t| t.elapsed().as_millis());
    tracing::info!(stage, ms, "startup");
    if std::env::var_os(MARKS_ENV).is_some() {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "holdfast-desktop: startup {stage} {ms} ms");
        let _ = out.flush();
    }
}

/// Opens the main window (as configured) on an empty page: see
/// [`BARE_PAGE_ENV`].
pub fn open_bare_page<R: tauri::Runtime>(
    app: &tauri::App<R>,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut config = app
        .config()
        .app
        .windows
        .first()
        .cloned()
        .ok_or("no window in the app's configuration")?;
    // An empty document served as the UI is (ui/public/bare.html): WebKitGTK
    // reports no finished load for `about:blank`, and data: URLs need a
    // tauri feature the app does not otherwise want.
    config.url = tauri::WebviewUrl::App("bare.html".into());
    tauri::WebviewWindowBuilder::from_config(app.handle(), &config)?
        .on_page_load(|_, load| {
            if load.event() == tauri::webview::PageLoadEvent::Finished {
                print_mark("bare");
            }
        })
        .build()?;
    Ok(())
}
