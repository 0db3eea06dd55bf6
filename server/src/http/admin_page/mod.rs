//! `GET /admin`: the operator's page, server-rendered HTML over the same data
//! as the JSON admin routes (backlog, oldest pending age, dead letters,
//! per-partner health) with requeue buttons. No JavaScript at all.
//!
//! Sign-in is a form (tenant, email, password) that mints an ordinary device
//! token through `db::sessions::login` and keeps it in a cookie scoped to
//! `/admin` (`HttpOnly; SameSite=Strict`, `Secure` when the request came
//! through an https proxy that says so with `X-Forwarded-Proto`; serving the
//! page over plain http beyond localhost is the operator's risk to avoid).
//!
//! CSRF: every POST carries a token in a hidden field. Signed in, it is
//! derived from the session token (SHA-256 with a domain label), so it needs
//! no server-side state or key shared between servers, and only someone who
//! can read the page (or the cookie) can know it. The sign-in form, before a
//! session exists, uses a random double-submit cookie instead, so another
//! site cannot sign a browser into an account of its choosing.
//! SameSite=Strict stops the cookies riding on cross-site requests anyway.
//!
//! Beyond the deliveries dashboard the page manages the tenant's
//! [`partners`] (and each [`partner`]'s page, with a test event), shows the [`inbound`]
//! webhooks and their secrets' status, and manages the master data:
//! [`users`], [`catalog`], [`customers`] and [`price_lists`], each a list
//! with forms. Every write there is a POST form carrying the CSRF
//! token and a one-time idempotency key, run through the same engine as the
//! JSON API ([`write`]), answered with a redirect and a notice, or with the
//! form again and the refusal in words, the operator's input kept.
//!
//! The parts: [`handlers`] answers the dashboard's routes, [`session`] keeps
//! the cookie session and its CSRF tokens, [`html`] renders the shell,
//! [`relay_health`] the dashboard's per-partner charts ([`charts`]: inline
//! SVG drawn here, no script).

use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

mod catalog;
mod charts;
mod customers;
mod form;
mod handlers;
mod html;
mod inbound;
mod partner;
mod partners;
mod price_lists;
mod relay_health;
mod session;
mod users;
mod write;

pub(crate) use catalog::{
    edit as sku_page, import as import_skus, list as catalog_page, update as update_sku,
};
pub(crate) use customers::{
    create as create_customer, edit as customer_page, import as import_customers,
    list as customers_page, update as update_customer,
};
pub(crate) use handlers::{login, login_form, logout, page, requeue};
pub(crate) use inbound::page as inbound_page;
pub(crate) use partner::{
    delete as delete_partner, edit as partner_page, rotate_secret as rotate_partner_secret,
    send_test_event as send_partner_test_event, set_enabled as set_partner_enabled,
    update as update_partner,
};
pub(crate) use partners::{create as create_partner, list as partners_page};
pub(crate) use price_lists::{
    create as create_price_list, list as price_lists_page, replace_prices as replace_list_prices,
    show as price_list_page,
};
pub(crate) use users::{
    create as create_user, edit as user_page, list as users_page,
    reset_password as reset_user_password, set_active as set_user_active, update as update_user,
};

/// A failure while rendering, logged once here: the database being
/// unavailable is a 503 page with `Retry-After` (as the API answers it),
/// anything else a bare 500 page.
pub(crate) struct PageError(anyhow::Error);

impl<E: Into<anyhow::Error>> From<E> for PageError {
    fn from(e: E) -> Self {
        PageError(e.into())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        if let Some(cause) = crate::error::unavailable_cause(&self.0) {
            crate::metrics::db::note_unavailable(cause);
            tracing::warn!(error = %cause, "admin page: the database is unavailable");
            let mut page = html::message_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "The database is unavailable",
                "Holdfast cannot reach its database right now; try again in a moment.",
            );
            page.headers_mut().insert(
                RETRY_AFTER,
                HeaderValue::from(crate::error::UNAVAILABLE_RETRY_AFTER_SECS),
            );
            return page;
        }
        tracing::error!(error = format!("{:#}", self.0), "admin page failed");
        html::message_page(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Something went wrong",
            "The page could not be built; the error has been logged. Try again in a moment.",
        )
    }
}

type PageResult = Result<Response, PageError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_a_503_page_and_a_bug_a_500() {
        let outage = PageError::from(sqlx::Error::PoolTimedOut).into_response();
        assert_eq!(outage.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            outage.headers().get(RETRY_AFTER),
            Some(&HeaderValue::from(
                crate::error::UNAVAILABLE_RETRY_AFTER_SECS
            ))
        );
        let bug = PageError::from(anyhow::anyhow!("a bug")).into_response();
        assert_eq!(bug.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(bug.headers().get(RETRY_AFTER).is_none());
    }
}
