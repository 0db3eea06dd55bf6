//! Holdfast's desktop shell: a thin Tauri 2 layer over `holdfast_client`'s
//! engine. It opens the engine's SQLite store in the platform data dir,
//! keeps the device token in the OS keychain, runs the sync loop, forwards
//! each UI command to one engine call ([`commands`]) and each engine event to
//! the two Tauri events the UI listens to ([`events`]). No business logic
//! lives here: the CLI and this app must behave the same.

pub mod commands;
pub mod error;
pub mod events;
pub mod startup;

use std::path::PathBuf;
use std::sync::Arc;

use holdfast_client::token::{FileTokens, KeyringTokens, TokenStore};
use holdfast_client::{Engine, Error, SyncConfig};
use tauri::{Manager, Runtime};
use tokio::sync::Notify;

/// Overrides the data dir (tests and `make run` use a throwaway one).
pub const DATA_DIR_ENV: &str = "HOLDFAST_DESKTOP_DATA_DIR";
/// Keeps the token in this plain file instead of the keychain: the client's
/// documented, opt-in fallback for machines without a Secret Service
/// (Xvfb test runs, containers).
pub const TOKEN_FILE_ENV: &str = "HOLDFAST_TOKEN_FILE";
/// The store's file name inside the data dir.
pub const STORE_FILE: &str = "holdfast.sqlite3";

/// Woken on sign-in: the sync loop ends when the engine has no (valid)
/// token and waits here to start again, instead of polling.
#[derive(Debug, Default)]
pub struct SignedIn(pub Notify);

/// Where the token lives: the keychain, unless the env var opts into a file.
pub fn token_store() -> Arc<dyn TokenStore> {
    match std::env::var_os(TOKEN_FILE_ENV) {
        Some(path) if !path.is_empty() => Arc::new(FileTokens::new(PathBuf::from(path))),
        _ => Arc::new(KeyringTokens),
    }
}

/// The data dir (the store's directory): the env override, else the
/// platform's app data dir.
pub(crate) fn data_dir<R: Runtime>(
    app: &tauri::AppHandle<R>,
) -> Result<PathBuf, Box<dyn std::error::Error>> {
    if let Some(dir) = std::env::var_os(DATA_DIR_ENV).filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    Ok(app.path().app_data_dir()?)
}

/// Opens the engine in `dir` (created if missing).
pub fn open_engine(dir: &std::path::Path) -> Result<Engine, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    Ok(Engine::open(
        &dir.join(STORE_FILE),
        token_store(),
        SyncConfig::default(),
    )?)
}

/// Runs the engine's sync loop for the life of the app. `Engine::run` returns
/// when there is no usable token (signed out, revoked); then wait for the
/// next sign-in rather than spin.
async fn supervise_sync(engine: Engine, signed_in: Arc<SignedIn>) {
    loop {
        match engine.run(std::future::pending::<()>()).await {
            Ok(()) => return,
            Err(Error::NotSignedIn | Error::Unauthorized) => {}
            Err(e) => tracing::warn!(error = %e, "sync loop stopped; waiting for a sign-in"),
        }
        signed_in.0.notified().await;
    }
}

/// Wires the engine into an app (shared by `run` and the tests): managed
/// state for the commands, event forwarding, and the sync loop.
pub fn setup<R: Runtime>(app: &tauri::App<R>, engine: Engine) {
    let signed_in = Arc::new(SignedIn::default());
    app.manage(engine.clone());
    app.manage(Arc::clone(&signed_in));
    events::forward(app.handle().clone(), engine.clone());
    tauri::async_runtime::spawn(supervise_sync(engine, signed_in));
}

/// Starts the desktop app.
pub fn run() {
    startup::launched();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    // The bench's baseline (item 9g/9h): this same build showing an empty
    // page, with no engine and no UI, to tell the app's cost from WebKit's.
    let bare = std::env::var_os(startup::BARE_PAGE_ENV).is_some();
    let mut context = tauri::generate_context!();
    if bare {
        for window in &mut context.config_mut().app.windows {
            window.create = false;
        }
    }
    let result = tauri::Builder::default()
        // A second launch focuses the running window: two processes on one
        // store would fight over its sync lock.
        .plugin(tauri_plugin_single_instance::init(|app, _argv, _cwd| {
            if let Some(w) = app.get_webview_window("main") {
                let _ = w.unminimize();
                let _ = w.set_focus();
            }
        }))
        .plugin(tauri_plugin_window_state::Builder::default().build())
        .setup(move |app| {
            if bare {
                return startup::open_bare_page(app);
            }
            let dir = data_dir(app.handle())?;
            tracing::info!(data_dir = %dir.display(), "opening the store");
            let engine = open_engine(&dir)?;
            setup(app, engine);
            Ok(())
        })
        .invoke_handler(commands::handler())
        .run(context);
    if let Err(e) = result {
        eprintln!("holdfast-desktop: {e}");
        std::process::exit(1);
    }
}
