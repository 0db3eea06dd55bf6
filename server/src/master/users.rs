//! The tenant's users (API.md v1.1 "Users"): operators list them, create them
//! with a generated password shown once, rename, promote, demote, deactivate
//! and reset them; anyone changes their own password.
//!
//! Two rules live here. Deactivating a user or resetting their password
//! revokes every token they hold in the same transaction, so nobody keeps a
//! session the operator meant to end. And the tenant always keeps an active
//! operator: the last one cannot be deactivated or demoted (422
//! `invalid_state`), decided with the tenant's operator rows locked so two
//! operators demoting each other at once cannot both succeed.
//!
//! Passwords are hashed (argon2, on a blocking thread) before the write's
//! transaction opens wherever the hash does not depend on the database, so a
//! claimed key is never held across the hashing.

use holdfast_protocol::admin::{
    ChangePassword, CreateUser, NewPassword, PatchUser, User, UserList,
};
use holdfast_protocol::model::Role;
use holdfast_protocol::problem::ProblemCode;
use rand::distr::{Alphanumeric, SampleString};
use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::auth::{self, Caller};
use crate::engine::Done;
use crate::error::Error;

/// Length of a generated password: 20 characters of `[A-Za-z0-9]` carry
/// about 119 bits, beyond guessing even against a leaked hash. Letters and
/// digits only, so it survives being pasted into a shell or an email.
pub const GENERATED_PASSWORD_LEN: usize = 20;

/// The shortest password a user may choose (API.md: at least 12 characters).
pub const MIN_PASSWORD_CHARS: usize = 12;
/// Argon2 takes any length; this bounds the work a request can ask for.
pub const MAX_PASSWORD_CHARS: usize = 1000;

const COLUMNS: &str = "id, email, display_name, role, active";

#[derive(sqlx::FromRow)]
struct UserRow {
    id: Uuid,
    email: String,
    display_name: String,
    role: String,
    active: bool,
}

impl UserRow {
    fn into_user(self) -> Result<User, Error> {
        let role = Role::parse(&self.role).ok_or_else(|| {
            Error::Internal(anyhow::anyhow!(
                "user {} has unknown role {:?}",
                self.id,
                self.role
            ))
        })?;
        Ok(User {
            id: self.id,
            email: self.email,
            display_name: self.display_name,
            role,
            active: self.active,
        })
    }
}

/// A fresh password from the OS-seeded thread RNG.
pub fn generate_password() -> String {
    Alphanumeric.sample_string(&mut rand::rng(), GENERATED_PASSWORD_LEN)
}

/// A password and its argon2 hash, made off the async threads.
pub struct Secret {
    pub password: String,
    pub hash: String,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Hashes `password` on a blocking thread: argon2 is deliberately CPU-heavy.
pub async fn hash(password: String) -> anyhow::Result<Secret> {
    tokio::task::spawn_blocking(move || {
        let hash = auth::hash_password(&password)?;
        Ok(Secret { password, hash })
    })
    .await?
}

/// A generated password, hashed.
pub async fn generated_secret() -> anyhow::Result<Secret> {
    hash(generate_password()).await
}

/// An email as stored: trimmed and lower-cased, checked for a plausible
/// `local@domain` shape (the address is a sign-in name here, never mailed).
pub fn normalize_email(raw: &str) -> Result<String, String> {
    let email = raw.trim().to_lowercase();
    let chars = email.chars().count();
    if !(3..=320).contains(&chars) {
        return Err("must be 3–320 characters".to_owned());
    }
    if email.chars().any(char::is_whitespace) {
        return Err("must not contain spaces".to_owned());
    }
    match email.split_once('@') {
        Some((local, domain))
            if !local.is_empty() && !domain.is_empty() && !domain.contains('@') =>
        {
            Ok(email)
        }
        _ => Err("must look like name@example.com".to_owned()),
    }
}

/// A display name as stored: trimmed, 1–200 characters.
pub fn normalize_display_name(raw: &str) -> Result<String, String> {
    let name = raw.trim();
    if name.is_empty() || name.chars().count() > 200 {
        return Err("must be 1–200 characters, not all blank".to_owned());
    }
    Ok(name.to_owned())
}

/// A create request that passed every check that needs no database.
#[derive(Debug)]
pub struct NewUser {
    pub email: String,
    pub display_name: String,
    pub role: Role,
}

impl NewUser {
    pub fn check(body: CreateUser) -> Result<NewUser, Error> {
        Ok(NewUser {
            email: normalize_email(&body.email).map_err(|m| Error::validation("email", m))?,
            display_name: normalize_display_name(&body.display_name)
                .map_err(|m| Error::validation("display_name", m))?,
            role: body.role,
        })
    }
}

/// A patch that passed every check that needs no database.
#[derive(Debug)]
pub struct UserChange {
    pub display_name: Option<String>,
    pub role: Option<Role>,
    pub active: Option<bool>,
}

impl UserChange {
    pub fn check(body: PatchUser) -> Result<UserChange, Error> {
        if body.display_name.is_none() && body.role.is_none() && body.active.is_none() {
            return Err(Error::validation(
                "body",
                "name at least one of display_name, role, active",
            ));
        }
        let display_name = body
            .display_name
            .as_deref()
            .map(normalize_display_name)
            .transpose()
            .map_err(|m| Error::validation("display_name", m))?;
        Ok(UserChange {
            display_name,
            role: body.role,
            active: body.active,
        })
    }
}

/// Checks a password a user chose (the length API.md asks for).
pub fn check_new_password(body: &ChangePassword) -> Result<(), Error> {
    let chars = body.new.chars().count();
    if !(MIN_PASSWORD_CHARS..=MAX_PASSWORD_CHARS).contains(&chars) {
        return Err(Error::validation(
            "new",
            format!("must be {MIN_PASSWORD_CHARS}–{MAX_PASSWORD_CHARS} characters"),
        ));
    }
    if body.current.chars().count() > MAX_PASSWORD_CHARS {
        return Err(wrong_current());
    }
    Ok(())
}

const WRONG_CURRENT: &str = "is not your current password";

fn wrong_current() -> Error {
    Error::validation("current", WRONG_CURRENT)
}

/// Whether a password change was refused for a wrong `current` (what the
/// route throttles).
pub fn is_wrong_current(e: &Error) -> bool {
    let Error::Problem(p) = e else {
        return false;
    };
    p.code == ProblemCode::ValidationFailed
        && p.detail.as_deref() == Some(&format!("current: {WRONG_CURRENT}"))
}

/// Every user of the caller's tenant, by email.
pub async fn list(db: &PgPool, caller: &Caller) -> Result<UserList, Error> {
    let mut tx = crate::db::begin_for_tenant(db, caller.tenant_id).await?;
    let rows: Vec<UserRow> = sqlx::query_as(&format!(
        "select {COLUMNS} from users where tenant_id = $1 order by email"
    ))
    .bind(caller.tenant_id)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    let users = rows
        .into_iter()
        .map(UserRow::into_user)
        .collect::<Result<_, _>>()?;
    Ok(UserList { users })
}

/// Creates a user with the (already hashed) generated password → 201
/// `CreatedUser`. An email the tenant already has is 400
/// `validation_failed` on `email` (not stored: the key stays free).
pub async fn create_in_tx(
    conn: &mut PgConnection,
    caller: &Caller,
    new: &NewUser,
    secret: &Secret,
) -> Result<Done, Error> {
    let user = insert_in_tx(conn, caller.tenant_id, Uuid::now_v7(), new, &secret.hash).await?;
    tracing::info!(user = %user.id, role = user.role.as_str(), "user created");
    Done::created(holdfast_protocol::admin::CreatedUser {
        user,
        password: Some(secret.password.clone()),
    })
}

/// The one place a user row is written (the admin route, `tenant create`
/// and the demo seed): `id` and an argon2 `password_hash` given.
pub async fn insert_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    id: Uuid,
    new: &NewUser,
    password_hash: &str,
) -> Result<User, Error> {
    // The insert is the decision: a duplicate writes nothing, and a
    // concurrent create of the same email waits on the unique index and then
    // sees the winner's row.
    let row: Option<UserRow> = sqlx::query_as(&format!(
        "insert into users (tenant_id, id, email, display_name, role, password_hash)
         values ($1, $2, $3, $4, $5, $6)
         on conflict (tenant_id, email) do nothing
         returning {COLUMNS}"
    ))
    .bind(tenant_id)
    .bind(id)
    .bind(&new.email)
    .bind(&new.display_name)
    .bind(new.role.as_str())
    .bind(password_hash)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else {
        return Err(Error::validation(
            "email",
            format!("{} already has an account in this tenant", new.email),
        ));
    };
    row.into_user()
}

/// Renames, promotes, demotes, deactivates or reactivates a user → 200
/// `User`. Deactivating revokes every token of the user; the tenant's last
/// active operator cannot stop being one (422 `invalid_state`, stored).
pub async fn patch_in_tx(
    conn: &mut PgConnection,
    caller: &Caller,
    user_id: Uuid,
    change: &UserChange,
) -> Result<Done, Error> {
    // Lock order, everywhere: the tenant's active operators (by id), then the
    // target. A concurrent demotion waits here and then counts what the first
    // one left, so "the last operator" is decided on committed state.
    let operators: Vec<Uuid> = if change.role.is_some() || change.active.is_some() {
        sqlx::query_scalar(
            "select id from users
              where tenant_id = $1 and role = 'operator' and active
              order by id for update",
        )
        .bind(caller.tenant_id)
        .fetch_all(&mut *conn)
        .await?
    } else {
        Vec::new()
    };
    let current: Option<UserRow> = sqlx::query_as(&format!(
        "select {COLUMNS} from users where tenant_id = $1 and id = $2 for update"
    ))
    .bind(caller.tenant_id)
    .bind(user_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(current) = current else {
        return Err(Error::not_found("user"));
    };
    let current = current.into_user()?;

    let was_operator = current.active && current.role == Role::Operator;
    let active = change.active.unwrap_or(current.active);
    let role = change.role.unwrap_or(current.role);
    let stays_operator = active && role == Role::Operator;
    if was_operator && !stays_operator && !operators.iter().any(|id| *id != user_id) {
        return Err(Error::problem(
            ProblemCode::InvalidState,
            format!(
                "{} is the tenant's last active operator and cannot be {}; \
                 make another user an operator first",
                current.email,
                if active { "demoted" } else { "deactivated" }
            ),
        ));
    }

    // Every rejection is decided; the writes follow.
    let row: UserRow = sqlx::query_as(&format!(
        "update users
            set display_name = coalesce($3, display_name), role = $4, active = $5,
                updated_at = now()
          where tenant_id = $1 and id = $2
          returning {COLUMNS}"
    ))
    .bind(caller.tenant_id)
    .bind(user_id)
    .bind(change.display_name.as_deref())
    .bind(role.as_str())
    .bind(active)
    .fetch_one(&mut *conn)
    .await?;
    if !active {
        let revoked = revoke_tokens_in_tx(conn, caller.tenant_id, user_id, None).await?;
        if current.active {
            tracing::info!(user = %user_id, revoked, "user deactivated; tokens revoked");
        }
    }
    Done::ok(row.into_user()?)
}

/// Gives a user a new generated password (already hashed) → 200
/// `NewPassword`, and revokes every token they hold.
pub async fn reset_password_in_tx(
    conn: &mut PgConnection,
    caller: &Caller,
    user_id: Uuid,
    secret: &Secret,
) -> Result<Done, Error> {
    let updated = sqlx::query(
        "update users set password_hash = $3, updated_at = now()
          where tenant_id = $1 and id = $2",
    )
    .bind(caller.tenant_id)
    .bind(user_id)
    .bind(&secret.hash)
    .execute(&mut *conn)
    .await?;
    if updated.rows_affected() == 0 {
        // Nothing was written: the update found no row.
        return Err(Error::not_found("user"));
    }
    let revoked = revoke_tokens_in_tx(conn, caller.tenant_id, user_id, None).await?;
    tracing::info!(user = %user_id, revoked, "password reset; tokens revoked");
    Done::ok(NewPassword {
        password: Some(secret.password.clone()),
    })
}

/// The caller changes their own password → 204. `current` must be right
/// (else 400 `validation_failed` on `current`, not stored); every other
/// token of theirs is revoked, the one they called with is kept.
pub async fn change_password_in_tx(
    conn: &mut PgConnection,
    caller: &Caller,
    body: &ChangePassword,
) -> Result<Done, Error> {
    let stored: Option<String> = sqlx::query_scalar(
        "select password_hash from users where tenant_id = $1 and id = $2 for update",
    )
    .bind(caller.tenant_id)
    .bind(caller.user_id)
    .fetch_optional(&mut *conn)
    .await?;
    // The token resolved a moment ago, so the row exists; a concurrent
    // deletion would be a bug elsewhere.
    let Some(stored) = stored else {
        return Err(Error::unauthorized());
    };
    let (current, new) = (body.current.clone(), body.new.clone());
    let (right, same, new_hash) = tokio::task::spawn_blocking(move || {
        let right = auth::verify_password(&current, &stored);
        let same = right && current == new;
        let new_hash = if right && !same {
            Some(auth::hash_password(&new)).transpose()
        } else {
            Ok(None)
        };
        (right, same, new_hash)
    })
    .await
    .map_err(anyhow::Error::from)?;
    if !right {
        return Err(wrong_current());
    }
    if same {
        return Err(Error::validation(
            "new",
            "must differ from your current password",
        ));
    }
    let Some(new_hash) = new_hash? else {
        return Err(Error::Internal(anyhow::anyhow!(
            "no hash for a new password"
        )));
    };

    sqlx::query(
        "update users set password_hash = $3, updated_at = now()
          where tenant_id = $1 and id = $2",
    )
    .bind(caller.tenant_id)
    .bind(caller.user_id)
    .bind(&new_hash)
    .execute(&mut *conn)
    .await?;
    let revoked = revoke_tokens_in_tx(
        conn,
        caller.tenant_id,
        caller.user_id,
        Some(caller.token_id),
    )
    .await?;
    tracing::info!(user = %caller.user_id, revoked, "password changed; other tokens revoked");
    Ok(Done {
        status: 204,
        body: Value::Null,
        replayed: false,
        stored: None,
    })
}

/// Whether `password` is the user's password now: a replayed password
/// change is only the same act if it set the password it names (its stored
/// fingerprint leaves the passwords out, see `http::admin_users`).
pub async fn password_is(db: &PgPool, caller: &Caller, password: &str) -> Result<bool, Error> {
    let mut tx = crate::db::begin_for_tenant(db, caller.tenant_id).await?;
    let stored: Option<String> =
        sqlx::query_scalar("select password_hash from users where tenant_id = $1 and id = $2")
            .bind(caller.tenant_id)
            .bind(caller.user_id)
            .fetch_optional(&mut *tx)
            .await?;
    tx.commit().await?;
    let Some(stored) = stored else {
        return Ok(false);
    };
    let password = password.to_owned();
    Ok(
        tokio::task::spawn_blocking(move || auth::verify_password(&password, &stored))
            .await
            .map_err(anyhow::Error::from)?,
    )
}

/// Revokes the user's live tokens (all, or all but `keep`); how many.
async fn revoke_tokens_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    user_id: Uuid,
    keep: Option<Uuid>,
) -> Result<u64, Error> {
    let done = sqlx::query(
        "update device_tokens set revoked_at = now()
          where tenant_id = $1 and user_id = $2 and revoked_at is null
            and ($3::uuid is null or id <> $3)",
    )
    .bind(tenant_id)
    .bind(user_id)
    .bind(keep)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_passwords_are_long_alphanumeric_and_differ() {
        let a = generate_password();
        let b = generate_password();
        assert_eq!(a.len(), GENERATED_PASSWORD_LEN);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn emails_are_lower_cased_and_checked() {
        assert_eq!(
            normalize_email("  Ana@Acme.TEST ").as_deref(),
            Ok("ana@acme.test")
        );
        for bad in [
            "",
            "a",
            "ana",
            "@acme.test",
            "ana@",
            "a b@acme.test",
            "a@b@c",
        ] {
            assert!(normalize_email(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_patch_names_something() {
        assert!(UserChange::check(PatchUser::default()).is_err());
        let blank = PatchUser {
            display_name: Some("  ".into()),
            ..PatchUser::default()
        };
        assert!(UserChange::check(blank).is_err());
    }
}
