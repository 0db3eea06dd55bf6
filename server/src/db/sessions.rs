//! Tenants, users and device tokens: sign-in, token lookup, revocation.

use std::collections::HashMap;

use holdfast_protocol::model::{Role, SessionTenant, SessionUser};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::auth;
use crate::auth::Caller;
use crate::db::reads::WalPosition;

/// Checks the credentials and, if right, stores a new device token's digest.
/// Unknown tenant, unknown or deactivated user and wrong password are one
/// outcome (`None`).
pub async fn login(
    db: &PgPool,
    tenant_slug: &str,
    email: &str,
    password: &str,
    device_name: &str,
) -> anyhow::Result<Option<(String, SessionUser, SessionTenant)>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        tenant_id: Uuid,
        tenant_slug: String,
        tenant_name: String,
        user_id: Uuid,
        email: String,
        display_name: String,
        role: String,
        password_hash: String,
    }
    let row: Option<Row> = sqlx::query_as(
        "select t.id as tenant_id, t.slug as tenant_slug, t.name as tenant_name,
                u.id as user_id, u.email, u.display_name, u.role, u.password_hash
           from tenants t join users u on u.tenant_id = t.id
          where t.slug = $1 and u.email = lower($2) and u.active",
    )
    .bind(tenant_slug)
    .bind(email.trim())
    .fetch_optional(db)
    .await?;

    // Verify on a blocking thread: argon2 is deliberately CPU-heavy.
    let phc = row.as_ref().map(|r| r.password_hash.clone());
    let password = password.to_owned();
    let verified = tokio::task::spawn_blocking(move || match phc {
        Some(phc) => auth::verify_password(&password, &phc),
        None => {
            let _ = auth::verify_password(&password, auth::dummy_hash());
            false
        }
    })
    .await?;
    let Some(row) = row.filter(|_| verified) else {
        return Ok(None);
    };
    let Some(role) = Role::parse(&row.role) else {
        anyhow::bail!("user {} has unknown role {:?}", row.user_id, row.role);
    };

    let token = auth::new_token();
    // Only while the password verified is still the user's and they are
    // still active: a reset or deactivation that committed during the
    // (slow) verification revoked every token, and must not miss this one.
    let issued = sqlx::query(
        "insert into device_tokens (tenant_id, id, user_id, token_sha256, device_name)
         select $1, $2, $3, $4, $5
          where exists (select 1 from users
                         where tenant_id = $1 and id = $3 and active and password_hash = $6)",
    )
    .bind(row.tenant_id)
    .bind(Uuid::now_v7())
    .bind(row.user_id)
    .bind(auth::token_digest(&token))
    .bind(device_name)
    .bind(&row.password_hash)
    .execute(db)
    .await?;
    if issued.rows_affected() == 0 {
        return Ok(None);
    }

    let user = SessionUser {
        id: row.user_id,
        email: row.email,
        display_name: row.display_name,
        role,
    };
    let tenant = SessionTenant {
        id: row.tenant_id,
        slug: row.tenant_slug,
        name: row.tenant_name,
    };
    Ok(Some((token, user, tenant)))
}

/// The caller behind a bearer token, if the token exists, is not revoked and
/// belongs to an active user (deactivating revokes the tokens too; this holds
/// even for a token issued in a race with the deactivation).
pub async fn caller_for_token(db: &PgPool, token: &str) -> Result<Option<Caller>, sqlx::Error> {
    // The WAL position rides along (no extra round trip): it is the floor a
    // replica must reach before it may serve this request's reads
    // (`db/reads.rs`). Only a primary has one; on a standby the function
    // raises, hence the case.
    type Row = (Uuid, Uuid, Uuid, String, String, Option<i64>, i64);
    let row: Option<Row> = sqlx::query_as(
        "select d.tenant_id, d.user_id, d.id, u.role, u.display_name,
                case when not pg_is_in_recovery()
                     then (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint end,
                current_setting('wal_block_size')::bigint
           from device_tokens d
           join users u on u.tenant_id = d.tenant_id and u.id = d.user_id
          where d.token_sha256 = $1 and d.revoked_at is null and u.active",
    )
    .bind(auth::token_digest(token))
    .fetch_optional(db)
    .await?;
    Ok(row.and_then(
        |(tenant_id, user_id, token_id, role, display_name, wal, block)| {
            Some(Caller {
                tenant_id,
                user_id,
                token_id,
                role: Role::parse(&role)?,
                display_name,
                primary_wal: wal.map(|insert| WalPosition::from_insert(insert, block)),
            })
        },
    ))
}

/// Revokes one token; every later request with it is a 401.
pub async fn revoke(conn: &mut PgConnection, caller: &Caller) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update device_tokens set revoked_at = now()
          where tenant_id = $1 and id = $2 and revoked_at is null",
    )
    .bind(caller.tenant_id)
    .bind(caller.token_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// Identities recently looked up by bearer token, for the mutation routes
/// only (`http::mutations`): an entry saves the request its token lookup (a
/// pool checkout and a round trip) and is never trusted on its own word —
/// the mutation's first statement proves it (`engine::idempotency::
/// claim_bound_in_tx`: the token is not revoked, the user is active and
/// still has this role and name), and anything answered before that
/// statement waits for a full lookup. So a revoked token is refused at once
/// on every instance, cached or not, and there is no invalidation to miss.
///
/// Process-wide: entries carry no database, and one from another database
/// (two servers in one test process) fails its proof like a revoked one.
pub struct TokenCache {
    entries: std::sync::Mutex<HashMap<Vec<u8>, (Caller, std::time::Instant)>>,
}

/// How long an entry is offered (it is proved on every use regardless; this
/// only bounds how long a stale one costs a failed proof and a lookup).
const CACHED_FOR: std::time::Duration = std::time::Duration::from_secs(60);
/// Entries kept at most; past it the cache starts over.
const MAX_CACHED: usize = 10_000;

impl TokenCache {
    /// The process's cache.
    pub fn global() -> &'static TokenCache {
        static CACHE: std::sync::OnceLock<TokenCache> = std::sync::OnceLock::new();
        CACHE.get_or_init(|| TokenCache {
            entries: std::sync::Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, (Caller, std::time::Instant)>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The identity last looked up for this token, unproved.
    pub fn get(&self, token: &str) -> Option<Caller> {
        let digest = auth::token_digest(token);
        let mut entries = self.lock();
        match entries.get(&digest) {
            Some((caller, at)) if at.elapsed() < CACHED_FOR => Some(caller.clone()),
            Some(_) => {
                entries.remove(&digest);
                None
            }
            None => None,
        }
    }

    /// Remembers a caller just looked up (without its WAL position: that is
    /// the request's own, and the mutation routes do not read a replica).
    pub fn put(&self, token: &str, caller: &Caller) {
        let mut entries = self.lock();
        if entries.len() >= MAX_CACHED {
            entries.clear();
        }
        let caller = Caller {
            primary_wal: None,
            ..caller.clone()
        };
        entries.insert(
            auth::token_digest(token),
            (caller, std::time::Instant::now()),
        );
    }

    pub fn forget(&self, token: &str) {
        self.lock().remove(&auth::token_digest(token));
    }
}
