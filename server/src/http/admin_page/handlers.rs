//! The page's routes: the dashboard, sign-in (form and post), sign-out and
//! the requeue button. Each checks the session and its CSRF token before it
//! looks at anything else.

use std::collections::HashMap;

use axum::extract::rejection::{FormRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Form;
use holdfast_protocol::model::Role;
use serde::Deserialize;
use uuid::Uuid;

use super::html::{
    bad_form, dashboard_page, forged, login_page, message_page, not_an_operator, redirect,
    Dashboard, ROWS,
};
use super::session::{
    constant_time_eq, cookie, revoke, session, session_cookie, session_cookie_named, set_cookie,
    signed_out, Session, DEVICE_NAME, LOGIN_COOKIE, SESSION_HOURS,
};
use super::{PageError, PageResult};
use crate::auth::Caller;
use crate::db::deliveries::{self, DeliveryState};
use crate::db::inbound_events::{self, InboundOutcome};
use crate::db::{begin_for_tenant, partners, relay_health, sessions};
use crate::AppState;

/// The `?requeued=` / `?not_requeued=` the requeue button redirects with.
#[derive(Deserialize)]
pub(crate) struct Notice {
    pub(super) requeued: Option<i64>,
    pub(super) not_requeued: Option<i64>,
}

/// `GET /admin`
pub(crate) async fn page(
    State(state): State<AppState>,
    headers: HeaderMap,
    notice: Result<Query<Notice>, QueryRejection>,
) -> PageResult {
    let Some(session) = session(&state, &headers).await? else {
        return Ok(redirect("/admin/login"));
    };
    if session.caller.role != Role::Operator {
        return Ok(not_an_operator(&session.caller));
    }
    let notice = notice.ok().map(|Query(n)| n);
    render_dashboard(&state, &session, notice).await
}

/// `GET /admin/login`
pub(crate) async fn login_form(State(state): State<AppState>, headers: HeaderMap) -> PageResult {
    if session(&state, &headers).await?.is_some() {
        return Ok(redirect("/admin"));
    }
    Ok(login_page(StatusCode::OK, None, "", "", &headers))
}

#[derive(Deserialize)]
pub(crate) struct LoginForm {
    #[serde(default)]
    tenant: String,
    #[serde(default)]
    email: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    csrf: String,
}

/// `POST /admin/login`
pub(crate) async fn login(
    State(state): State<AppState>,
    crate::http::ClientAddr(addr): crate::http::ClientAddr,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> PageResult {
    let Ok(Form(form)) = form else {
        return Ok(bad_form());
    };
    let expected = cookie(&headers, LOGIN_COOKIE);
    if !expected.is_some_and(|c| !c.is_empty() && constant_time_eq(c, &form.csrf)) {
        return Ok(login_page(
            StatusCode::FORBIDDEN,
            Some("That sign-in form had expired or did not come from this page. Please sign in again."),
            &form.tenant,
            &form.email,
            &headers,
        ));
    }
    let outcome = match crate::http::sessions::sign_in(
        &state,
        &addr,
        form.tenant.trim(),
        &form.email,
        &form.password,
        DEVICE_NAME,
    )
    .await
    {
        Err(crate::error::Error::Problem(p))
            if p.code == holdfast_protocol::problem::ProblemCode::RateLimited =>
        {
            return Ok(login_page(
                StatusCode::TOO_MANY_REQUESTS,
                Some("Too many failed sign-ins. Wait a few minutes and try again."),
                &form.tenant,
                &form.email,
                &headers,
            ));
        }
        other => other?,
    };
    let Some((token, user, tenant)) = outcome else {
        return Ok(login_page(
            StatusCode::UNAUTHORIZED,
            Some("Wrong tenant, email or password."),
            &form.tenant,
            &form.email,
            &headers,
        ));
    };
    if user.role != Role::Operator {
        // The credentials were right, but the page is not theirs: the token
        // just minted must not outlive this answer.
        if let Some(caller) = sessions::caller_for_token(&state.db, &token).await? {
            revoke(&state, &caller).await?;
        }
        tracing::info!(tenant = %tenant.slug, user = %user.id, "admin page refused a non-operator");
        return Ok(message_page(
            StatusCode::FORBIDDEN,
            "Operators only",
            &format!(
                "{} is signed up as {}, and this page is for operators. \
                 Ask an operator of {} for help.",
                user.email,
                user.role.as_str().replace('_', " "),
                tenant.name
            ),
        ));
    }
    tracing::info!(tenant = %tenant.slug, user = %user.id, "operator signed in to the admin page");
    let mut response = redirect("/admin");
    set_cookie(
        &mut response,
        &session_cookie(&token, SESSION_HOURS * 3600, &headers),
    );
    set_cookie(
        &mut response,
        &session_cookie_named(LOGIN_COOKIE, "", 0, &headers),
    );
    Ok(response)
}

#[derive(Deserialize)]
pub(crate) struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /admin/logout`
pub(crate) async fn logout(
    State(state): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> PageResult {
    let Ok(Form(form)) = form else {
        return Ok(bad_form());
    };
    let Some(session) = session(&state, &headers).await? else {
        return Ok(signed_out());
    };
    if !constant_time_eq(&session.csrf, &form.csrf) {
        return Ok(forged());
    }
    revoke(&state, &session.caller).await?;
    Ok(signed_out())
}

/// `POST /admin/deliveries/{id}/requeue`
pub(crate) async fn requeue(
    State(state): State<AppState>,
    headers: HeaderMap,
    id: Result<Path<i64>, PathRejection>,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> PageResult {
    let Some(session) = session(&state, &headers).await? else {
        return Ok(redirect("/admin/login"));
    };
    if session.caller.role != Role::Operator {
        return Ok(not_an_operator(&session.caller));
    }
    // The token is checked before anything else is looked at.
    let Ok(Form(form)) = form else {
        return Ok(forged());
    };
    if !constant_time_eq(&session.csrf, &form.csrf) {
        return Ok(forged());
    }
    let Ok(Path(id)) = id else {
        return Ok(message_page(
            StatusCode::NOT_FOUND,
            "No such delivery",
            "That is not a delivery id.",
        ));
    };
    let mut tx = begin_for_tenant(&state.db, session.caller.tenant_id).await?;
    let done = deliveries::requeue(&mut tx, session.caller.tenant_id, id).await?;
    tx.commit().await?;
    if done {
        tracing::info!(delivery = id, "delivery requeued from the admin page");
        Ok(redirect(&format!("/admin?requeued={id}")))
    } else {
        Ok(redirect(&format!("/admin?not_requeued={id}")))
    }
}

/// The signed-in operator's tenant, as the pages name it.
pub(super) struct Tenant {
    pub(super) name: String,
    /// What people type as "Tenant" when they sign in.
    pub(super) slug: String,
}

pub(super) async fn tenant_of(state: &AppState, caller: &Caller) -> Result<Tenant, PageError> {
    let mut tx = begin_for_tenant(&state.db, caller.tenant_id).await?;
    let (name, slug): (String, String) =
        sqlx::query_as("select name, slug from tenants where id = $1")
            .bind(caller.tenant_id)
            .fetch_one(&mut *tx)
            .await?;
    tx.commit().await?;
    Ok(Tenant { name, slug })
}

/// Loads what the dashboard shows in one tenant-bound transaction, then
/// renders it.
async fn render_dashboard(
    state: &AppState,
    session: &Session,
    notice: Option<Notice>,
) -> PageResult {
    let tenant_id = session.caller.tenant_id;
    let mut tx = begin_for_tenant(&state.db, tenant_id).await?;
    let tenant_name: String = sqlx::query_scalar("select name from tenants where id = $1")
        .bind(tenant_id)
        .fetch_one(&mut *tx)
        .await?;
    let stats = deliveries::stats(&mut tx, tenant_id).await?;
    let partners: HashMap<Uuid, partners::Partner> = partners::list(&mut tx, tenant_id)
        .await?
        .into_iter()
        .map(|p| (p.id, p))
        .collect();
    let dead = deliveries::list(&mut tx, tenant_id, Some(DeliveryState::Dead), ROWS).await?;
    let pending = deliveries::list(&mut tx, tenant_id, Some(DeliveryState::Pending), ROWS).await?;
    let refused = inbound_events::list(
        &mut tx,
        tenant_id,
        None,
        Some(InboundOutcome::Refused),
        None,
        ROWS,
    )
    .await?;
    let mismatched = inbound_events::payment_mismatches(&mut tx, tenant_id, ROWS).await?;
    let relay_health = relay_health::last_hour(&mut tx, tenant_id).await?;
    tx.commit().await?;
    Ok(dashboard_page(&Dashboard {
        session,
        tenant_name,
        notice,
        stats,
        partners,
        dead,
        pending,
        refused,
        mismatched,
        relay_health,
    }))
}
