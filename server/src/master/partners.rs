//! Partners (the webhook receivers) as operators manage them, from the JSON
//! routes (`http/admin.rs`) and the admin page (`http/admin_page/partners.rs`)
//! alike: what a name, URL and subscriptions must be, and register, change,
//! rotate the secret of, and delete a partner.
//!
//! The URL check resolves the host (`relay::egress`), so it runs before a
//! write's transaction opens: a slow resolver never holds a claimed key.

use holdfast_protocol::event;
use holdfast_protocol::problem::{FieldError, Problem, ProblemCode};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::db::partners::{self, Deleted, Partner};
use crate::error::Error;
use crate::relay::egress;

const MAX_NAME: usize = 200;

/// How long the old secret keeps signing after a rotation.
pub const ROTATION_GRACE_HOURS: i64 = 24;

/// A partner to register, checked.
#[derive(Debug, Clone)]
pub struct NewPartner {
    pub name: String,
    pub url: String,
    pub event_types: Vec<String>,
}

/// A change to a partner, checked (None: left as it is).
#[derive(Debug, Clone, Default)]
pub struct PartnerChange {
    pub enabled: Option<bool>,
    pub url: Option<String>,
    pub event_types: Option<Vec<String>>,
}

fn field(field: &str, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.to_owned(),
        message: message.into(),
    }
}

/// Every problem as one 400 `validation_failed`; the detail names the first.
fn invalid(errors: Vec<FieldError>) -> Result<(), Error> {
    let Some(first) = errors.first() else {
        return Ok(());
    };
    let detail = format!("{}: {}", first.field, first.message);
    Err(Error::Problem(Box::new(
        Problem::new(ProblemCode::ValidationFailed, detail).with("errors", errors),
    )))
}

fn check_name(name: &str) -> Option<FieldError> {
    let ok = !name.trim().is_empty() && name.chars().count() <= MAX_NAME && !name.contains('\0');
    (!ok).then(|| field("name", format!("must be 1–{MAX_NAME} characters")))
}

fn check_event_types(types: &[String]) -> Option<FieldError> {
    if types.is_empty() {
        return Some(field(
            "event_types",
            "subscribe to at least one type or pattern",
        ));
    }
    types
        .iter()
        .find_map(|t| event::check_pattern(t).err())
        .map(|e| field("event_types", e.to_string()))
}

/// The egress rule: http(s), and a public address unless the server
/// allows private targets. The refusal says why in words.
async fn check_url(url: &str, allow_private: bool) -> Option<FieldError> {
    egress::check_url(url, allow_private)
        .await
        .err()
        .map(|e| field("url", e.to_string()))
}

impl NewPartner {
    /// Checks every field (the name trimmed), answering all problems at once.
    pub async fn check(
        name: &str,
        url: &str,
        event_types: Vec<String>,
        allow_private: bool,
    ) -> Result<NewPartner, Error> {
        let mut errors: Vec<FieldError> = check_name(name).into_iter().collect();
        errors.extend(check_url(url, allow_private).await);
        errors.extend(check_event_types(&event_types));
        invalid(errors)?;
        Ok(NewPartner {
            name: name.trim().to_owned(),
            url: url.to_owned(),
            event_types,
        })
    }
}

impl PartnerChange {
    pub async fn check(
        enabled: Option<bool>,
        url: Option<String>,
        event_types: Option<Vec<String>>,
        allow_private: bool,
    ) -> Result<PartnerChange, Error> {
        let mut errors = Vec::new();
        if let Some(url) = &url {
            errors.extend(check_url(url, allow_private).await);
        }
        if let Some(types) = &event_types {
            errors.extend(check_event_types(types));
        }
        invalid(errors)?;
        Ok(PartnerChange {
            enabled,
            url,
            event_types,
        })
    }
}

pub async fn create_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    new: &NewPartner,
    secret: &str,
) -> Result<Partner, Error> {
    let partner = partners::create(
        conn,
        tenant_id,
        &new.name,
        &new.url,
        &new.event_types,
        secret,
    )
    .await?;
    tracing::info!(partner = %partner.id, "partner registered");
    Ok(partner)
}

pub async fn patch_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
    change: &PartnerChange,
) -> Result<Partner, Error> {
    let partner = partners::update(
        conn,
        tenant_id,
        id,
        change.enabled,
        change.url.as_deref(),
        change.event_types.as_deref(),
    )
    .await?
    .ok_or_else(|| Error::not_found("partner"))?;
    if let Some(enabled) = change.enabled {
        tracing::info!(partner = %id, enabled, "partner enabled or paused by an operator");
    }
    Ok(partner)
}

/// Installs `secret`; the previous one keeps signing alongside for
/// [`ROTATION_GRACE_HOURS`]. Returns the partner with the overlap's end.
pub async fn rotate_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
    secret: &str,
) -> Result<Partner, Error> {
    let partner = partners::rotate_secret(
        conn,
        tenant_id,
        id,
        secret,
        chrono::Duration::hours(ROTATION_GRACE_HOURS),
    )
    .await?
    .ok_or_else(|| Error::not_found("partner"))?;
    tracing::info!(partner = %id, "partner secret rotated; the old one signs too for {ROTATION_GRACE_HOURS} h");
    Ok(partner)
}

/// What a delete removed with the partner.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Removed {
    pub id: Uuid,
    pub name: String,
    /// Delivered and dead-lettered delivery rows deleted with it.
    pub delivered: i64,
    pub dead: i64,
}

/// Deletes a partner that has no pending deliveries (422 `invalid_state`
/// with `pending_deliveries` while it has some: they are still being kept).
pub async fn delete_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
) -> Result<Removed, Error> {
    match partners::delete_in_tx(conn, tenant_id, id).await? {
        Deleted::Gone {
            name,
            delivered,
            dead,
        } => {
            tracing::info!(partner = %id, delivered, dead, "partner deleted with its delivery records");
            Ok(Removed {
                id,
                name,
                delivered,
                dead,
            })
        }
        Deleted::Pending {
            name,
            enabled,
            pending,
        } => Err(Error::Problem(Box::new(
            Problem::new(
                ProblemCode::InvalidState,
                format!(
                    "{name} still has {pending} {} waiting to be sent, and a partner can only be \
                     deleted when none is waiting (each is delivered, or dead-lettered after its \
                     last attempt){}",
                    if pending == 1 {
                        "delivery"
                    } else {
                        "deliveries"
                    },
                    if enabled {
                        ""
                    } else {
                        "; it is paused, so they are not being sent: enable it and let them \
                         finish first"
                    }
                ),
            )
            .with("pending_deliveries", pending),
        ))),
        Deleted::NotFound => Err(Error::not_found("partner")),
    }
}
