//! One `#[tauri::command]` per command in ui/src/lib/backend.ts, each
//! forwarding to one `Engine` call. Names and parameters are the contract:
//! Tauri maps the UI's camelCase argument keys onto these snake_case names,
//! so no `rename_all`. Commands are `async` so SQLite work runs on the async
//! runtime, not on the UI thread where sync commands would run.

use chrono::NaiveDate;
use holdfast_client::conflict::ConflictView;
use holdfast_client::engine::{HeldItem, RejectionView, Status};
use holdfast_client::store::sync_state::Profile;
use holdfast_client::view::{DeskQuery, OrderPage, OrderView, PendingMark, SkuView};
use holdfast_client::{Engine, NewOrder, RejectionChoice, Reorder, Resolution};
use holdfast_protocol::model::{Customer, Invoice, OrderHeaderSet, OrderHistory};
use serde::{Deserialize, Serialize};
use tauri::{Manager, Runtime, State};
use uuid::Uuid;

use crate::error::{CmdResult, CommandError};
use crate::SignedIn;

/// `engine::NewOrder` as the UI sends it (the engine's type is not
/// `Deserialize`: it is the engine's API, not a wire document).
#[derive(ts_rs::TS)]
#[ts(rename = "NewOrder")]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewOrderArgs {
    pub customer_id: Uuid,
    #[serde(default)]
    pub customer_po: Option<String>,
    #[serde(default)]
    pub ship_window_start: Option<NaiveDate>,
    #[serde(default)]
    pub ship_window_end: Option<NaiveDate>,
    #[serde(default)]
    pub notes: Option<String>,
}

/// The device name a sign-in registers when the UI sends none: the host
/// name, so a user can tell their devices apart in the admin page.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "desktop".to_owned())
}

#[allow(clippy::too_many_arguments)] // the UI's argument list, one to one
#[tauri::command]
pub async fn sign_in(
    engine: State<'_, Engine>,
    signed_in: State<'_, std::sync::Arc<SignedIn>>,
    server_url: String,
    tenant: String,
    email: String,
    password: String,
    device_name: Option<String>,
    discard_pending: bool,
) -> CmdResult<Profile> {
    let device = device_name.unwrap_or_else(host_name);
    let profile = engine
        .login(
            &server_url,
            &tenant,
            &email,
            &password,
            &device,
            discard_pending,
        )
        .await?;
    // The sync loop stops while signed out; let it start again.
    signed_in.0.notify_one();
    Ok(profile)
}

#[tauri::command]
pub async fn sign_out(engine: State<'_, Engine>) -> CmdResult<bool> {
    Ok(engine.logout().await?)
}

#[tauri::command]
pub async fn get_profile(engine: State<'_, Engine>) -> CmdResult<Option<Profile>> {
    Ok(engine.profile()?)
}

#[tauri::command]
pub async fn get_status(engine: State<'_, Engine>) -> CmdResult<Status> {
    Ok(engine.status()?)
}

#[tauri::command]
pub async fn sync_now(engine: State<'_, Engine>) -> CmdResult<()> {
    Ok(engine.connectivity_returned()?)
}

#[tauri::command]
pub async fn list_orders(engine: State<'_, Engine>) -> CmdResult<Vec<OrderView>> {
    Ok(engine.orders()?)
}

/// One window of the desk's list, filtered, searched and counted by the
/// engine (the UI never holds every order's row).
#[tauri::command]
pub async fn list_order_page(engine: State<'_, Engine>, query: DeskQuery) -> CmdResult<OrderPage> {
    Ok(engine.order_page(&query)?)
}

#[tauri::command]
pub async fn get_order(engine: State<'_, Engine>, order_id: Uuid) -> CmdResult<Option<OrderView>> {
    Ok(engine.order(order_id)?)
}

#[tauri::command]
pub async fn create_order(engine: State<'_, Engine>, header: NewOrderArgs) -> CmdResult<Uuid> {
    Ok(engine.create_order(NewOrder {
        customer_id: header.customer_id,
        customer_po: header.customer_po,
        ship_window_start: header.ship_window_start,
        ship_window_end: header.ship_window_end,
        notes: header.notes,
    })?)
}

#[tauri::command]
pub async fn edit_order(
    engine: State<'_, Engine>,
    order_id: Uuid,
    set: OrderHeaderSet,
) -> CmdResult<String> {
    Ok(engine.edit_order(order_id, set)?)
}

#[tauri::command]
pub async fn add_line(
    engine: State<'_, Engine>,
    order_id: Uuid,
    sku_id: Uuid,
    qty_ordered: i64,
) -> CmdResult<Uuid> {
    Ok(engine.add_line(order_id, sku_id, qty_ordered)?)
}

#[tauri::command]
pub async fn change_line(
    engine: State<'_, Engine>,
    order_id: Uuid,
    line_id: Uuid,
    qty_ordered: i64,
) -> CmdResult<String> {
    Ok(engine.change_line(order_id, line_id, qty_ordered)?)
}

#[tauri::command]
pub async fn remove_line(
    engine: State<'_, Engine>,
    order_id: Uuid,
    line_id: Uuid,
) -> CmdResult<String> {
    Ok(engine.remove_line(order_id, line_id)?)
}

#[tauri::command]
pub async fn allocate(
    engine: State<'_, Engine>,
    order_id: Uuid,
    line_id: Uuid,
    qty: i64,
) -> CmdResult<String> {
    Ok(engine.allocate(order_id, line_id, qty)?)
}

#[tauri::command]
pub async fn release(
    engine: State<'_, Engine>,
    order_id: Uuid,
    line_id: Uuid,
    qty: i64,
) -> CmdResult<String> {
    Ok(engine.release(order_id, line_id, qty)?)
}

#[tauri::command]
pub async fn confirm_order(engine: State<'_, Engine>, order_id: Uuid) -> CmdResult<String> {
    Ok(engine.confirm(order_id)?)
}

#[tauri::command]
pub async fn cancel_order(engine: State<'_, Engine>, order_id: Uuid) -> CmdResult<String> {
    Ok(engine.cancel(order_id)?)
}

/// The invoice a confirmed order produced, as this desk last pulled it.
#[tauri::command]
pub async fn get_invoice(
    engine: State<'_, Engine>,
    invoice_id: Uuid,
) -> CmdResult<Option<Invoice>> {
    Ok(engine.invoice(invoice_id)?)
}

/// The order's history from the server (online only).
#[tauri::command]
pub async fn get_order_history(
    engine: State<'_, Engine>,
    order_id: Uuid,
) -> CmdResult<OrderHistory> {
    Ok(engine.order_history(order_id).await?)
}

/// Copies the order into a new draft (see `Engine::reorder`).
#[tauri::command]
pub async fn reorder_order(engine: State<'_, Engine>, order_id: Uuid) -> CmdResult<Reorder> {
    Ok(engine.reorder(order_id)?)
}

#[tauri::command]
pub async fn search_skus(
    engine: State<'_, Engine>,
    q: String,
    limit: i64,
    customer_id: Option<Uuid>,
) -> CmdResult<Vec<SkuView>> {
    Ok(engine.skus_for(&q, limit, customer_id)?)
}

#[tauri::command]
pub async fn get_skus(engine: State<'_, Engine>, sku_ids: Vec<Uuid>) -> CmdResult<Vec<SkuView>> {
    let mut out = Vec::with_capacity(sku_ids.len());
    for id in sku_ids {
        // Unknown ids are left out, as backend.ts documents.
        if let Some(sku) = engine.sku(id)? {
            out.push(sku);
        }
    }
    Ok(out)
}

#[tauri::command]
pub async fn list_customers(engine: State<'_, Engine>) -> CmdResult<Vec<Customer>> {
    Ok(engine.customers()?)
}

#[tauri::command]
pub async fn list_conflicts(engine: State<'_, Engine>) -> CmdResult<Vec<ConflictView>> {
    Ok(engine.conflicts()?)
}

#[tauri::command]
pub async fn get_conflict(
    engine: State<'_, Engine>,
    order_id: Uuid,
) -> CmdResult<Option<ConflictView>> {
    Ok(engine.conflict(order_id)?)
}

#[tauri::command]
pub async fn resolve_conflict(
    engine: State<'_, Engine>,
    order_id: Uuid,
    resolution: Resolution,
) -> CmdResult<()> {
    Ok(engine.resolve_conflict(order_id, &resolution)?)
}

#[tauri::command]
pub async fn list_rejections(engine: State<'_, Engine>) -> CmdResult<Vec<RejectionView>> {
    Ok(engine.rejections()?)
}

#[tauri::command]
pub async fn resolve_rejection(
    engine: State<'_, Engine>,
    id: i64,
    choice: RejectionChoice,
) -> CmdResult<()> {
    Ok(engine.resolve_rejection(id, &choice)?)
}

#[tauri::command]
pub async fn list_pending(engine: State<'_, Engine>) -> CmdResult<Vec<(Uuid, PendingMark)>> {
    Ok(engine.pending()?)
}

/// What this build keeps without being able to read it, in words.
#[tauri::command]
pub async fn list_held(engine: State<'_, Engine>) -> CmdResult<Vec<HeldItem>> {
    Ok(engine.held()?)
}

/// Where [`export_held`] saved the file, and how many items it holds.
#[derive(ts_rs::TS, Debug, Serialize)]
pub struct HeldExport {
    pub path: String,
    pub count: usize,
}

/// The export's file name: `holdfast-kept-2026-12-01-140502.json`, local
/// time to the second, so an earlier save is not overwritten (two in one
/// second hold the same items: the later replaces the earlier whole).
pub fn held_export_name(at: chrono::DateTime<chrono::Local>) -> String {
    format!("holdfast-kept-{}.json", at.format("%Y-%m-%d-%H%M%S"))
}

/// Saves everything held, raw, for an administrator. The UI names no path:
/// the file goes to the user's Downloads folder, or beside the store when
/// there is none. On Linux the platform's answer comes from the XDG
/// user-dirs file, which many desktops never write, so `~/Downloads` is
/// tried too before the store's folder.
#[tauri::command]
pub async fn export_held<R: Runtime>(
    app: tauri::AppHandle<R>,
    engine: State<'_, Engine>,
) -> CmdResult<HeldExport> {
    let downloads = app
        .path()
        .download_dir()
        .ok()
        .filter(|d| d.is_dir())
        .or_else(|| {
            let d = app.path().home_dir().ok()?.join("Downloads");
            d.is_dir().then_some(d)
        });
    let dir = match downloads {
        Some(d) => d,
        None => crate::data_dir(&app)
            .map_err(|e| CommandError::internal(format!("no folder to save to: {e}")))?,
    };
    let path = dir.join(held_export_name(chrono::Local::now()));
    let count = engine.export_held(&path)?;
    Ok(HeldExport {
        path: path.display().to_string(),
        count,
    })
}

/// Startup marks from the UI: `page` when the page's first script runs,
/// `ready` when the first interactive screen is on show. Each is logged once
/// with the time since launch; with `HOLDFAST_DESKTOP_STARTUP_MARKS` set it
/// is also printed to stdout as `holdfast-desktop: startup <stage> <ms> ms`
/// (the benchmark reads that line).
#[tauri::command]
pub async fn mark_startup(stage: String) -> CmdResult<()> {
    crate::startup::mark(&stage);
    Ok(())
}

/// Every command above; keep in step with build.rs and the capability.
pub fn handler<R: tauri::Runtime>() -> impl Fn(tauri::ipc::Invoke<R>) -> bool + Send + Sync + 'static
{
    tauri::generate_handler![
        sign_in,
        sign_out,
        get_profile,
        get_status,
        sync_now,
        list_orders,
        list_order_page,
        get_order,
        create_order,
        edit_order,
        add_line,
        change_line,
        remove_line,
        allocate,
        release,
        confirm_order,
        cancel_order,
        reorder_order,
        get_invoice,
        get_order_history,
        search_skus,
        get_skus,
        list_customers,
        list_conflicts,
        get_conflict,
        resolve_conflict,
        list_rejections,
        resolve_rejection,
        list_pending,
        list_held,
        export_held,
        mark_startup,
    ]
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    #[test]
    fn the_export_is_named_by_the_local_time_to_the_second() {
        let at = chrono::Local
            .with_ymd_and_hms(2026, 12, 1, 14, 5, 2)
            .single()
            .expect("a plain local time");
        assert_eq!(
            super::held_export_name(at),
            "holdfast-kept-2026-12-01-140502.json"
        );
    }
}
