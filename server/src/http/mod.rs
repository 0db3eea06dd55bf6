//! The HTTP surface: routes, and the extractors and middleware that turn every
//! bad request into an API.md problem before a handler runs.

/// A master-data write (API.md v1.1) under the idempotency rules, in one
/// transaction: claim the key or answer from it, run `$work` with the claimed
/// transaction bound to `$tx`, store the answer and commit
/// (`crate::master::begin` / `finish`). Evaluates to `ApiResult<Response>`.
///
/// ```ignore
/// let (keyed, body) = sent.into_keyed();
/// keyed_write!(state, caller, keyed, |tx| master::customers::create(&mut tx, &caller, body))
/// ```
macro_rules! keyed_write {
    ($state:expr, $caller:expr, $keyed:expr, |$tx:ident| $work:expr) => {
        keyed_write!($state, $caller, $keyed, |$tx| $work, redact = |_| {})
    };
    ($state:expr, $caller:expr, $keyed:expr, |$tx:ident| $work:expr, redact = $redact:expr) => {{
        let keyed = $keyed;
        match crate::master::begin(&$state.db, &$caller, &keyed).await? {
            crate::master::Begun::Settled(outcome) => Ok(crate::http::mutations::respond(&outcome)),
            crate::master::Begun::Claimed(mut $tx) => {
                let result = $work.await;
                let outcome =
                    crate::master::finish_redacting($tx, &$caller, &keyed, result, $redact).await?;
                Ok(crate::http::mutations::respond(&outcome))
            }
        }
    }};
}

pub(crate) mod admin;
pub(crate) mod admin_catalog;
pub(crate) mod admin_customers;
pub(crate) mod admin_inbound;
pub(crate) mod admin_page;
pub(crate) mod admin_users;
mod cursor;
pub(crate) mod customers;
mod error;
mod extract;
pub(crate) mod invoices;
pub(crate) mod mutations;
pub(crate) mod ops;
pub(crate) mod orders;
pub mod serve;
pub(crate) mod sessions;
pub(crate) mod skus;
pub(crate) mod sync;
pub(crate) mod webhooks;

use std::time::Instant;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{delete, get, patch, post, put};
use axum::Router;
use holdfast_protocol::problem::ProblemCode;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use crate::error::Error;
use crate::AppState;

pub use error::ApiResult;
pub use extract::{parse_json, ApiJson, ApiPath, ApiQuery, ClientAddr};

/// API.md: request bodies over 1 MiB answer 413.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// A CSV import may be larger: API.md allows 100,000 rows per file, which is
/// 5–10 MB of catalog. Only the import routes take this much.
pub const IMPORT_MAX_BYTES: usize = 32 * 1024 * 1024;

pub fn router(state: AppState) -> Router {
    let v1 = Router::new()
        .route("/sessions", post(sessions::login))
        .route("/sessions/current", delete(sessions::logout))
        .route("/skus", get(skus::list))
        .route("/skus/{id}", get(skus::get_one))
        .route("/customers", get(customers::list))
        .route("/invoices/{id}", get(invoices::get_one))
        .route("/admin/inbound-secrets", post(admin::create_inbound_secret))
        .route(
            "/admin/partners",
            get(admin::list_partners).post(admin::create_partner),
        )
        .route(
            "/admin/partners/{id}",
            patch(admin::patch_partner).delete(admin::delete_partner),
        )
        .route(
            "/admin/partners/{id}/rotate-secret",
            post(admin::rotate_secret),
        )
        .route(
            "/admin/partners/{id}/test-event",
            post(admin::send_test_event),
        )
        .route("/admin/deliveries", get(admin::list_deliveries))
        .route("/admin/deliveries/{id}/requeue", post(admin::requeue))
        .route("/admin/stats", get(admin::stats))
        .route(
            "/admin/inbound-events",
            get(admin_inbound::list_inbound_events),
        )
        .route(
            "/admin/payment-mismatches",
            get(admin_inbound::list_payment_mismatches),
        )
        // v1.1 master data: users and passwords (admin_users.rs).
        .route(
            "/admin/users",
            get(admin_users::list).post(admin_users::create),
        )
        .route("/admin/users/{id}", patch(admin_users::patch))
        .route(
            "/admin/users/{id}/reset-password",
            post(admin_users::reset_password),
        )
        .route(
            "/sessions/current/password",
            post(admin_users::change_password),
        )
        // v1.1 master data: catalog (admin_catalog.rs).
        .route(
            "/admin/skus/import",
            post(admin_catalog::import_skus).layer(DefaultBodyLimit::max(IMPORT_MAX_BYTES)),
        )
        .route("/admin/skus/{id}", patch(admin_catalog::patch_sku))
        // v1.1 master data: customers and price lists (admin_customers.rs).
        .route("/admin/customers", post(admin_customers::create_customer))
        .route(
            "/admin/customers/import",
            post(admin_customers::import_customers).layer(DefaultBodyLimit::max(IMPORT_MAX_BYTES)),
        )
        .route(
            "/admin/customers/{id}",
            patch(admin_customers::patch_customer),
        )
        .route(
            "/admin/price-lists",
            post(admin_customers::create_price_list),
        )
        .route(
            "/admin/price-lists/{id}/prices",
            put(admin_customers::put_prices).layer(DefaultBodyLimit::max(IMPORT_MAX_BYTES)),
        )
        .route("/price-lists/{id}", get(admin_customers::get_price_list))
        .route("/webhooks/{tenant}/{provider}", post(webhooks::receive))
        // Sync feed (pull, stream).
        .route("/sync/pull", get(sync::pull))
        .route("/sync/stream", get(sync::stream))
        // Mutations.
        .route("/orders", get(orders::list).post(mutations::create_order))
        // A read, any role. A static segment: axum's router (matchit)
        // prefers it to `/orders/{id}` whatever the order of registration,
        // so this is never taken for an order's id (which would be a 404).
        .route("/orders/dead-lettered", get(orders::dead_lettered))
        .route(
            "/orders/{id}",
            get(orders::get_one).patch(mutations::patch_order),
        )
        // API.md v1.1: the order's history (a read, any role).
        .route("/orders/{id}/history", get(orders::history))
        .route("/orders/{id}/lines", post(mutations::add_line))
        .route(
            "/orders/{id}/lines/{line_id}",
            patch(mutations::change_line),
        )
        .route(
            "/orders/{id}/lines/{line_id}/remove",
            post(mutations::remove_line),
        )
        .route(
            "/orders/{id}/lines/{line_id}/allocate",
            post(mutations::allocate),
        )
        .route(
            "/orders/{id}/lines/{line_id}/release",
            post(mutations::release),
        )
        .route("/orders/{id}/confirm", post(mutations::confirm))
        .route("/orders/{id}/cancel", post(mutations::cancel))
        .route("/sync/push", post(mutations::push));

    Router::new()
        .nest("/v1", v1)
        // The operator's HTML page (cookie session, CSRF-checked forms).
        .route("/admin", get(admin_page::page))
        .route(
            "/admin/login",
            get(admin_page::login_form).post(admin_page::login),
        )
        .route("/admin/logout", post(admin_page::logout))
        .route(
            "/admin/deliveries/{id}/requeue",
            post(admin_page::requeue),
        )
        .route(
            "/admin/partners",
            get(admin_page::partners_page).post(admin_page::create_partner),
        )
        .route(
            "/admin/partners/{id}",
            get(admin_page::partner_page).post(admin_page::update_partner),
        )
        .route(
            "/admin/partners/{id}/enabled",
            post(admin_page::set_partner_enabled),
        )
        .route(
            "/admin/partners/{id}/rotate-secret",
            post(admin_page::rotate_partner_secret),
        )
        .route(
            "/admin/partners/{id}/test-event",
            post(admin_page::send_partner_test_event),
        )
        .route(
            "/admin/partners/{id}/delete",
            post(admin_page::delete_partner),
        )
        .route("/admin/inbound", get(admin_page::inbound_page))
        .route(
            "/admin/users",
            get(admin_page::users_page).post(admin_page::create_user),
        )
        .route(
            "/admin/users/{id}",
            get(admin_page::user_page).post(admin_page::update_user),
        )
        .route("/admin/users/{id}/active", post(admin_page::set_user_active))
        .route(
            "/admin/users/{id}/reset-password",
            post(admin_page::reset_user_password),
        )
        .route("/admin/catalog", get(admin_page::catalog_page))
        .route(
            "/admin/catalog/import",
            post(admin_page::import_skus).layer(DefaultBodyLimit::max(IMPORT_MAX_BYTES)),
        )
        .route(
            "/admin/catalog/{id}",
            get(admin_page::sku_page).post(admin_page::update_sku),
        )
        .route(
            "/admin/customers",
            get(admin_page::customers_page).post(admin_page::create_customer),
        )
        .route(
            "/admin/customers/import",
            post(admin_page::import_customers).layer(DefaultBodyLimit::max(IMPORT_MAX_BYTES)),
        )
        .route(
            "/admin/customers/{id}",
            get(admin_page::customer_page).post(admin_page::update_customer),
        )
        .route(
            "/admin/price-lists",
            get(admin_page::price_lists_page).post(admin_page::create_price_list),
        )
        .route("/admin/price-lists/{id}", get(admin_page::price_list_page))
        .route(
            "/admin/price-lists/{id}/prices",
            post(admin_page::replace_list_prices).layer(DefaultBodyLimit::max(IMPORT_MAX_BYTES)),
        )
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/openapi.json", get(ops::openapi))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(record_metrics))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request| {
            let request_id = req
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-");
            // The path only: query strings and headers may carry secrets.
            tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), request_id)
        }))
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .with_state(state)
}

async fn not_found() -> Error {
    Error::problem(ProblemCode::NotFound, "no such route")
}

async fn method_not_allowed() -> Error {
    Error::problem(
        ProblemCode::MethodNotAllowed,
        "this route does not take that method",
    )
}

/// Request counts and latencies by route template (never the raw path: ids
/// would explode the label set) and status.
async fn record_metrics(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let method = req.method().to_string();
    let started = Instant::now();
    let response = next.run(req).await;
    crate::metrics::record_request(
        &method,
        &route,
        response.status().as_u16(),
        started.elapsed(),
    );
    response
}
