//! `holdfast-server tenant create`: a new tenant and its first operator, made
//! on the server host (API.md v1.1: tenants are not created over HTTP).
//!
//! The operator gets a generated password, printed once; the database keeps
//! only its argon2 hash. The tenant and its operator commit together, so a
//! tenant never exists without someone who can sign in to it. This is system
//! work with no caller's tenant yet, so it runs as the connecting role, like
//! the demo seed.

use holdfast_protocol::model::Role;
use sqlx::PgPool;
use uuid::Uuid;

use super::users::{self, normalize_display_name, normalize_email};
use crate::config::TenantCreateConfig;
use crate::host::HostDb;

/// What the command was asked to create, checked.
#[derive(Debug, Clone)]
pub struct NewTenant {
    pub slug: String,
    pub name: String,
    pub operator_email: String,
    pub operator_name: String,
}

/// What was created, with the operator's one-time password.
pub struct CreatedTenant {
    pub tenant_id: Uuid,
    pub slug: String,
    pub name: String,
    pub operator_id: Uuid,
    pub operator_email: String,
    pub operator_name: String,
    pub password: String,
}

impl std::fmt::Debug for CreatedTenant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedTenant")
            .field("tenant_id", &self.tenant_id)
            .field("slug", &self.slug)
            .field("operator_email", &self.operator_email)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl CreatedTenant {
    /// What the command prints: the sign-in details, the password last and
    /// on a line of its own so a script can take it (`password: …`).
    pub fn render(&self) -> String {
        format!(
            "Created tenant {slug:?} ({name}), id {id}.\n\
             Its first operator can sign in (desk or /admin) with:\n\
             tenant: {slug}\n\
             email: {email}\n\
             password: {password}\n\
             The password is shown only this once and is not stored; hand it over \
             securely. The operator should change it after signing in \
             (POST /v1/sessions/current/password), and can add the tenant's other \
             users (POST /v1/admin/users).\n",
            slug = self.slug,
            name = self.name,
            id = self.tenant_id,
            email = self.operator_email,
            password = self.password,
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    #[error(
        "a tenant with slug {0:?} already exists; nothing was created. \
         Choose another --slug (a slug is what users type to sign in, so it cannot be shared)"
    )]
    SlugTaken(String),
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl From<sqlx::Error> for TenantError {
    fn from(e: sqlx::Error) -> Self {
        TenantError::Internal(e.into())
    }
}

/// A slug as the database's check has it: `^[a-z0-9][a-z0-9-]{0,62}$`
/// (clap's value parser for `--slug`, so a bad one is refused before any
/// database is opened).
pub fn parse_slug(raw: &str) -> Result<String, String> {
    let ok = raw.len() <= 63
        && raw
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && raw
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(raw.to_owned())
    } else {
        Err(format!(
            "{raw:?} is not a valid slug: use 1–63 characters of a-z, 0-9 and '-', \
             starting with a letter or digit (e.g. \"acme-apparel\")"
        ))
    }
}

impl NewTenant {
    /// Checks the command's values; the message names the flag to fix.
    pub fn check(
        slug: &str,
        name: &str,
        operator_email: &str,
        operator_name: Option<&str>,
    ) -> anyhow::Result<NewTenant> {
        let slug = parse_slug(slug).map_err(|m| anyhow::anyhow!("--slug: {m}"))?;
        let name = normalize_display_name(name).map_err(|m| anyhow::anyhow!("--name {m}"))?;
        let operator_email =
            normalize_email(operator_email).map_err(|m| anyhow::anyhow!("--operator-email {m}"))?;
        let operator_name = normalize_display_name(operator_name.unwrap_or("Operator"))
            .map_err(|m| anyhow::anyhow!("--operator-name {m}"))?;
        Ok(NewTenant {
            slug,
            name,
            operator_email,
            operator_name,
        })
    }
}

/// Creates the tenant and its operator in one transaction. A slug that
/// exists is [`TenantError::SlugTaken`] and changes nothing.
pub async fn create(db: &PgPool, new: &NewTenant) -> Result<CreatedTenant, TenantError> {
    let secret = users::generated_secret().await?;
    let mut tx = db.begin().await?;
    let tenant_id = Uuid::now_v7();
    let inserted: Option<Uuid> = sqlx::query_scalar(
        "insert into tenants (id, slug, name) values ($1, $2, $3)
         on conflict (slug) do nothing returning id",
    )
    .bind(tenant_id)
    .bind(&new.slug)
    .bind(&new.name)
    .fetch_optional(&mut *tx)
    .await?;
    if inserted.is_none() {
        return Err(TenantError::SlugTaken(new.slug.clone()));
    }
    let operator_id = Uuid::now_v7();
    let operator = super::users::NewUser {
        email: new.operator_email.clone(),
        display_name: new.operator_name.clone(),
        role: Role::Operator,
    };
    super::users::insert_in_tx(&mut tx, tenant_id, operator_id, &operator, &secret.hash)
        .await
        .map_err(|e| anyhow::anyhow!("creating the operator: {e}"))?;
    tx.commit().await?;
    tracing::info!(tenant = %new.slug, %tenant_id, operator = %operator_id, "tenant created");
    Ok(CreatedTenant {
        tenant_id,
        slug: new.slug.clone(),
        name: new.name.clone(),
        operator_id,
        operator_email: new.operator_email.clone(),
        operator_name: new.operator_name.clone(),
        password: secret.password,
    })
}

/// `tenant create` from the command line: opens the database the way
/// `serve` does (DATABASE_URL, or the embedded cluster under the data dir,
/// see [`crate::host`]), applies migrations, creates.
pub async fn run(config: TenantCreateConfig) -> anyhow::Result<CreatedTenant> {
    let new = NewTenant::check(
        &config.slug,
        &config.name,
        &config.operator_email,
        config.operator_name.as_deref(),
    )?;
    let host = HostDb::open(config.database_url.as_deref(), &config.data_dir()).await?;
    let created = create(&host.pool, &new).await;
    host.close().await;
    Ok(created?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_follow_the_database_check() {
        for ok in ["a", "acme", "acme-apparel", "0day", &"a".repeat(63)] {
            assert!(parse_slug(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-acme",
            "Acme",
            "acme_apparel",
            "acme apparel",
            &"a".repeat(64),
            "é",
        ] {
            let e = parse_slug(bad).expect_err(bad);
            assert!(e.contains("not a valid slug"), "{e}");
        }
    }

    #[test]
    fn the_values_are_checked_and_normalized() {
        let t = NewTenant::check("initech", " Initech ", "Bill@Initech.TEST", None).expect("ok");
        assert_eq!(t.name, "Initech");
        assert_eq!(t.operator_email, "bill@initech.test");
        assert_eq!(t.operator_name, "Operator");
        let e = NewTenant::check("initech", "Initech", "bill", None).expect_err("bad email");
        assert!(e.to_string().starts_with("--operator-email"), "{e}");
    }
}
