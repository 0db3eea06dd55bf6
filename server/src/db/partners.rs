//! Partners who receive our webhooks: endpoints, subscriptions, secrets.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

/// A partner as operators see it; the secret is never part of it.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Partner {
    pub id: Uuid,
    pub name: String,
    pub url: String,
    /// Subscribed types; `*` matches any run of characters (`order.*`).
    pub event_types: Vec<String>,
    pub enabled: bool,
    /// Set when the relay paused the partner (its endpoint answered 410 Gone).
    pub paused_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const COLUMNS: &str = "id, name, url, event_types, enabled, paused_reason, created_at, updated_at";

pub async fn create(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    name: &str,
    url: &str,
    event_types: &[String],
    secret: &str,
) -> Result<Partner, sqlx::Error> {
    sqlx::query_as(&format!(
        "insert into partners (tenant_id, id, name, url, event_types, secret)
         values ($1, $2, $3, $4, $5, $6) returning {COLUMNS}"
    ))
    .bind(tenant_id)
    .bind(Uuid::now_v7())
    .bind(name)
    .bind(url)
    .bind(event_types)
    .bind(secret)
    .fetch_one(conn)
    .await
}

pub async fn list(conn: &mut PgConnection, tenant_id: Uuid) -> Result<Vec<Partner>, sqlx::Error> {
    sqlx::query_as(&format!(
        "select {COLUMNS} from partners where tenant_id = $1 order by name, id"
    ))
    .bind(tenant_id)
    .fetch_all(conn)
    .await
}

/// Changes what is given; enabling a paused partner clears why it was paused.
pub async fn update(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
    enabled: Option<bool>,
    url: Option<&str>,
    event_types: Option<&[String]>,
) -> Result<Option<Partner>, sqlx::Error> {
    sqlx::query_as(&format!(
        "update partners set
            enabled = coalesce($3, enabled),
            paused_reason = case when $3 then null else paused_reason end,
            url = coalesce($4, url),
            event_types = coalesce($5, event_types),
            updated_at = now()
          where tenant_id = $1 and id = $2
          returning {COLUMNS}"
    ))
    .bind(tenant_id)
    .bind(id)
    .bind(enabled)
    .bind(url)
    .bind(event_types)
    .fetch_optional(conn)
    .await
}

/// Installs a new secret; the old one keeps signing (alongside) for `grace`.
pub async fn rotate_secret(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
    new_secret: &str,
    grace: chrono::Duration,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "update partners set previous_secret = secret, secret = $3,
                previous_secret_expires_at = now() + make_interval(secs => $4), updated_at = now()
          where tenant_id = $1 and id = $2",
    )
    .bind(tenant_id)
    .bind(id)
    .bind(new_secret)
    .bind(grace.num_seconds() as f64)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The relay's 410 Gone: stop sending until an operator re-enables.
pub async fn pause(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
    reason: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update partners set enabled = false, paused_reason = $3, updated_at = now()
          where tenant_id = $1 and id = $2",
    )
    .bind(tenant_id)
    .bind(id)
    .bind(reason)
    .execute(conn)
    .await?;
    Ok(())
}
