//! Generates the Tauri context and one `allow-<command>` permission per app
//! command, so the capability file can grant exactly those (an app command
//! not listed in the manifest would be open to every window).

fn main() {
    tauri_build::try_build(
        tauri_build::Attributes::new()
            .app_manifest(tauri_build::AppManifest::new().commands(holdfast_desktop_commands())),
    )
    .unwrap_or_else(|e| panic!("tauri-build: {e:#}"));
}

/// Must match `commands::handler()` and ui/src/lib/backend.ts.
fn holdfast_desktop_commands() -> &'static [&'static str] {
    &[
        "sign_in",
        "sign_out",
        "get_profile",
        "get_status",
        "sync_now",
        "list_orders",
        "list_order_page",
        "get_order",
        "create_order",
        "edit_order",
        "add_line",
        "change_line",
        "remove_line",
        "allocate",
        "release",
        "confirm_order",
        "cancel_order",
        "reorder_order",
        "get_invoice",
        "get_order_history",
        "search_skus",
        "get_skus",
        "list_customers",
        "list_conflicts",
        "get_conflict",
        "resolve_conflict",
        "list_rejections",
        "resolve_rejection",
        "list_pending",
        "list_held",
        "export_held",
        "mark_startup",
    ]
}
