//! Partners who receive our webhooks: endpoints, subscriptions, secrets.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use uuid::Uuid;

/// A partner as operators see it; the secret is never part of it.
#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Partner {
    pub id: Uuid,
    pub name: String,
    pub url: String,
    /// Subscribed types; `*` matches any run of characters (`order.*`).
    pub event_types: Vec<String>,
    pub enabled: bool,
    /// Set when the relay paused the partner (its endpoint answered 410 Gone).
    pub paused_reason: Option<String>,
    /// After a rotation: until when the previous secret signs too (every
    /// event carries both signatures until then). Null before any rotation;
    /// in the past once the overlap is over.
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const COLUMNS: &str = "id, name, url, event_types, enabled, paused_reason, \
                       previous_secret_expires_at, created_at, updated_at";

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
/// Returns the partner as it is now (None: no such partner).
pub async fn rotate_secret(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
    new_secret: &str,
    grace: chrono::Duration,
) -> Result<Option<Partner>, sqlx::Error> {
    sqlx::query_as(&format!(
        "update partners set previous_secret = secret, secret = $3,
                previous_secret_expires_at = now() + make_interval(secs => $4), updated_at = now()
          where tenant_id = $1 and id = $2
          returning {COLUMNS}"
    ))
    .bind(tenant_id)
    .bind(id)
    .bind(new_secret)
    .bind(grace.num_seconds() as f64)
    .fetch_optional(conn)
    .await
}

/// What signing an event for one partner takes, read when it is sent.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Signing {
    pub name: String,
    pub url: String,
    pub secret: String,
    pub previous_secret: Option<String>,
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
}

pub async fn signing(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
) -> Result<Option<Signing>, sqlx::Error> {
    sqlx::query_as(
        "select name, url, secret, previous_secret, previous_secret_expires_at
           from partners where tenant_id = $1 and id = $2",
    )
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// What deleting a partner came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deleted {
    /// Gone, with this many delivered and dead-lettered delivery rows.
    Gone {
        name: String,
        delivered: i64,
        dead: i64,
    },
    /// Refused: this many deliveries are still pending (or leased).
    Pending {
        name: String,
        enabled: bool,
        pending: i64,
    },
    NotFound,
}

/// Deletes a partner with no pending deliveries, and its delivered and
/// dead-lettered delivery rows with it (see the migration
/// `20261207000100_partner_delete_and_secret_history.sql` for why).
///
/// The partner's row is locked first. A relay fanning an event out to it
/// at the same moment holds a key-share lock on it (the deliveries' foreign
/// key) until it commits, so either its new pending delivery is committed
/// before the count below (and the delete is refused), or its insert waits
/// for this transaction and then fails on the foreign key, and its next
/// pass no longer sees the partner.
pub async fn delete_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
) -> Result<Deleted, sqlx::Error> {
    let found: Option<(String, bool)> = sqlx::query_as(
        "select name, enabled from partners where tenant_id = $1 and id = $2 for update",
    )
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((name, enabled)) = found else {
        return Ok(Deleted::NotFound);
    };
    let (pending, delivered, dead): (i64, i64, i64) = sqlx::query_as(
        "select count(*) filter (where state = 'pending'),
                count(*) filter (where state = 'delivered'),
                count(*) filter (where state = 'dead')
           from deliveries where tenant_id = $1 and partner_id = $2",
    )
    .bind(tenant_id)
    .bind(id)
    .fetch_one(&mut *conn)
    .await?;
    // First attempts a relay is sending from memory (relay/claim.rs
    // fan_out_handing) count as pending: their rows are not written yet.
    let sending: i64 = sqlx::query_scalar(
        "select count(*) from relay_sending_events where tenant_id = $1 and partner_id = $2",
    )
    .bind(tenant_id)
    .bind(id)
    .fetch_one(&mut *conn)
    .await?;
    let pending = pending + sending;
    if pending > 0 {
        return Ok(Deleted::Pending {
            name,
            enabled,
            pending,
        });
    }
    sqlx::query("delete from deliveries where tenant_id = $1 and partner_id = $2")
        .bind(tenant_id)
        .bind(id)
        .execute(&mut *conn)
        .await?;
    sqlx::query("delete from partners where tenant_id = $1 and id = $2")
        .bind(tenant_id)
        .bind(id)
        .execute(&mut *conn)
        .await?;
    Ok(Deleted::Gone {
        name,
        delivered,
        dead,
    })
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
