//! Engine events → the UI's two Tauri events (ui/src/lib/backend.ts):
//! `holdfast:changed` (payload null) on `EngineEvent::Changed`, and
//! `holdfast:sync-status` (the fresh `Engine::status()`) after every event.

use holdfast_client::{Engine, EngineEvent};
use tauri::{Emitter, Runtime};
use tokio::sync::broadcast::error::RecvError;

pub const CHANGED: &str = "holdfast:changed";
pub const SYNC_STATUS: &str = "holdfast:sync-status";

/// Spawns the forwarding task for the life of the app.
pub fn forward<R: Runtime>(app: tauri::AppHandle<R>, engine: Engine) {
    let mut rx = engine.subscribe();
    tauri::async_runtime::spawn(async move {
        loop {
            let changed = match rx.recv().await {
                Ok(event) => matches!(event, EngineEvent::Changed),
                // Missed some: tell the UI to refetch everything, to be safe.
                Err(RecvError::Lagged(_)) => true,
                Err(RecvError::Closed) => return,
            };
            if changed {
                if let Err(e) = app.emit(CHANGED, ()) {
                    tracing::warn!(error = %e, "could not emit {CHANGED}");
                }
            }
            match engine.status() {
                Ok(status) => {
                    if let Err(e) = app.emit(SYNC_STATUS, status) {
                        tracing::warn!(error = %e, "could not emit {SYNC_STATUS}");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "status after an engine event"),
            }
        }
    });
}
