//! Idempotency keys: claim, replay, store — inside the mutation's transaction.

use holdfast_protocol::key::IdempotencyKey;
use sqlx::PgConnection;
use uuid::Uuid;

use super::Outcome;

pub enum Claim {
    /// The key is ours; run the mutation.
    Claimed,
    /// Already answered for this same request: send the stored answer.
    Replay(Outcome),
    /// Already answered for a different request.
    Reused,
    /// Another transaction holds the key and did not finish within the wait.
    InFlight,
}

/// Postgres' lock_not_available: our lock_timeout expired.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// Inserts the key row. If another transaction inserted the same key and has
/// not committed, the insert waits on the unique index: when that one commits
/// we see its answer (a replay); when it rolls back, the key is ours. The wait
/// is bounded by `lock_timeout` so a stuck first request answers
/// `request_in_flight` instead of piling up connections. On `InFlight` the
/// transaction is aborted and must be rolled back by the caller.
///
/// One round trip on the common path: the bound is set by the statement's
/// own (one-time) WHERE clause, which Postgres evaluates before the SELECT
/// yields the row the INSERT then inserts, so before any wait on the index;
/// and it is replaced by `ROW_LOCK_TIMEOUT` in its RETURNING clause,
/// evaluated once the row is in: the rest of the transaction may wait
/// behind a hot SKU row, as is normal, but not for ever. When the key exists
/// (no row returned) the read of the stored answer does the same.
pub async fn claim_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    key: &IdempotencyKey,
    fingerprint: &str,
    lock_timeout: &str,
) -> Result<Claim, sqlx::Error> {
    let inserted = sqlx::query_scalar::<_, String>(
        "insert into idempotency_keys (tenant_id, key, fingerprint, status_code, response_body)
         select $1, $2, $3, 0, ''::bytea where set_config('lock_timeout', $4, true) is not null
         on conflict (tenant_id, key) do nothing
         returning set_config('lock_timeout', $5, true)",
    )
    .bind(tenant_id)
    .bind(key.as_str())
    .bind(fingerprint)
    .bind(lock_timeout)
    .bind(super::ROW_LOCK_TIMEOUT)
    .fetch_optional(&mut *conn)
    .await;
    let inserted = match inserted {
        Ok(row) => row.is_some(),
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(LOCK_NOT_AVAILABLE) => {
            return Ok(Claim::InFlight);
        }
        Err(e) => return Err(e),
    };
    if inserted {
        return Ok(Claim::Claimed);
    }
    let (stored_fingerprint, status, body, _): (String, i16, Vec<u8>, String) = sqlx::query_as(
        "select fingerprint, status_code, response_body, set_config('lock_timeout', $3, true)
           from idempotency_keys where tenant_id = $1 and key = $2",
    )
    .bind(tenant_id)
    .bind(key.as_str())
    .bind(super::ROW_LOCK_TIMEOUT)
    .fetch_one(&mut *conn)
    .await?;
    Ok(resolve(fingerprint, &stored_fingerprint, status, body))
}

/// What [`claim_many_in_tx`] found for one key.
pub enum ManyClaim {
    /// Ours, inserted by this statement: run the mutation.
    Claimed,
    /// Answered already: the stored fingerprint, status and body, for
    /// `resolve` to judge against each request sent with this key.
    Answered {
        fingerprint: String,
        status: i16,
        body: Vec<u8>,
    },
    /// Neither inserted nor readable in this statement's snapshot: a
    /// transaction holding it committed while the insert waited on it. The
    /// caller reads it again (see [`claim_in_tx`]).
    Unknown,
}

/// [`claim_in_tx`] for many keys in one statement (a batch push's chunk):
/// `keys` must be distinct; the answer is in their order. Each key is inserted, or found answered; the
/// wait on a key held by a running request is bounded by `lock_timeout` as
/// in [`claim_in_tx`] (its error, `Ok(None)` here, aborts the transaction),
/// and the bound is lifted to `ROW_LOCK_TIMEOUT` once every key is in: the
/// aggregate over the inserted rows yields its one row (and runs its
/// `set_config`) only after the insert has finished. The stored answers are
/// read in the statement's snapshot, taken before any wait, so a key whose
/// holder committed during the wait is found in neither: `Unknown`.
pub async fn claim_many_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    keys: &[String],
    fingerprints: &[String],
    lock_timeout: &str,
) -> Result<Option<Vec<ManyClaim>>, sqlx::Error> {
    debug_assert_eq!(keys.len(), fingerprints.len());
    type Row = (String, bool, Option<String>, Option<i16>, Option<Vec<u8>>);
    let rows: Result<Vec<Row>, sqlx::Error> = sqlx::query_as(
        "with ins as (
             insert into idempotency_keys (tenant_id, key, fingerprint, status_code, response_body)
             select $1, v.key, v.fingerprint, 0, ''::bytea
               from unnest($2::text[], $3::text[]) as v(key, fingerprint)
              where set_config('lock_timeout', $4, true) is not null
             on conflict (tenant_id, key) do nothing
             returning key
         ), done as materialized (
             select coalesce(array_agg(key), '{}') as keys,
                    set_config('lock_timeout', $5, true) as reset
               from ins
         )
         select v.key, v.key = any(d.keys), k.fingerprint, k.status_code, k.response_body
           from done d
          cross join unnest($2::text[]) as v(key)
           left join idempotency_keys k on k.tenant_id = $1 and k.key = v.key",
    )
    .bind(tenant_id)
    .bind(keys)
    .bind(fingerprints)
    .bind(lock_timeout)
    .bind(super::ROW_LOCK_TIMEOUT)
    .fetch_all(&mut *conn)
    .await;
    let rows = match rows {
        Ok(rows) => rows,
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(LOCK_NOT_AVAILABLE) => {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let mut found: std::collections::HashMap<String, Row> =
        rows.into_iter().map(|row| (row.0.clone(), row)).collect();
    let claims = keys
        .iter()
        .map(|key| match found.remove(key) {
            Some((_, true, _, _, _)) => ManyClaim::Claimed,
            Some((_, false, Some(fingerprint), Some(status), Some(body))) => ManyClaim::Answered {
                fingerprint,
                status,
                body,
            },
            _ => ManyClaim::Unknown,
        })
        .collect();
    Ok(Some(claims))
}

/// Whose request a [`claim_bound_in_tx`] claims for, and whether the
/// caller still has to be proved (an identity from the token cache).
pub struct ClaimFor<'a> {
    pub caller: &'a crate::auth::Caller,
    /// Prove, in the claim itself, that the token is still live and still
    /// names this tenant, user, role and name (`db::sessions::TokenCache`).
    pub verify: bool,
}

/// What [`claim_bound_in_tx`] found: the claim, or a caller that is not
/// (or no longer) who the cached identity said.
pub enum BoundClaim {
    Claim(Claim),
    CallerChanged,
}

/// [`claim_in_tx`] as the first statement of an unbound transaction: it
/// also binds the transaction to the caller's tenant (`db::tenancy`: the
/// request role and `app.tenant_id`, until the transaction ends) and, when
/// asked, proves the caller in the same statement — two round trips fewer
/// than `BEGIN`, the binding, a token lookup and the claim.
///
/// The binding's `set_config` calls sit in the same one-time WHERE clause as
/// the lock bound, so they run before the INSERT yields its row; this one
/// statement was planned and permission-checked as the connecting role (its
/// own `tenant_id = $1` is its wall), every later one runs bound. The proof
/// (`exists`, one index probe on each of `device_tokens` and `users`) is in
/// the same WHERE clause: an unproved caller inserts nothing, and the read
/// that follows a missing row proves it again before answering anything.
pub async fn claim_bound_in_tx(
    conn: &mut PgConnection,
    who: ClaimFor<'_>,
    key: &IdempotencyKey,
    fingerprint: &str,
    lock_timeout: &str,
) -> Result<BoundClaim, sqlx::Error> {
    let c = who.caller;
    let inserted = sqlx::query_scalar::<_, String>(
        "insert into idempotency_keys (tenant_id, key, fingerprint, status_code, response_body)
         select $1, $2, $3, 0, ''::bytea
          where set_config('lock_timeout', $4, true) is not null
            and set_config('role', $6, true) is not null
            and set_config('app.tenant_id', $1::text, true) is not null
            and (not $7 or exists (
                 select 1 from device_tokens d
                   join users u on u.tenant_id = d.tenant_id and u.id = d.user_id
                  where d.tenant_id = $1 and d.id = $8 and d.user_id = $9 and d.revoked_at is null
                    and u.active and u.role = $10 and u.display_name = $11))
         on conflict (tenant_id, key) do nothing
         returning set_config('lock_timeout', $5, true)",
    )
    .bind(c.tenant_id)
    .bind(key.as_str())
    .bind(fingerprint)
    .bind(lock_timeout)
    .bind(super::ROW_LOCK_TIMEOUT)
    .bind(crate::db::tenancy::TENANT_ROLE)
    .bind(who.verify)
    .bind(c.token_id)
    .bind(c.user_id)
    .bind(c.role.as_str())
    .bind(&c.display_name)
    .fetch_optional(&mut *conn)
    .await;
    let inserted = match inserted {
        Ok(row) => row.is_some(),
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(LOCK_NOT_AVAILABLE) => {
            return Ok(BoundClaim::Claim(Claim::InFlight));
        }
        Err(e) => return Err(e),
    };
    if inserted {
        return Ok(BoundClaim::Claim(Claim::Claimed));
    }
    // No row: the key is answered, or the caller was not proved. The read
    // keeps its own tenant filter (if the proof failed, the binding may not
    // have been made), and the caller is proved first: an unproved one
    // learns nothing about the key (the transaction is then rolled back).
    type Row = (bool, Option<String>, Option<i16>, Option<Vec<u8>>, String);
    let (proved, stored_fingerprint, status, body, _): Row = sqlx::query_as(
        "select (not $4 or exists (
                 select 1 from device_tokens d
                   join users u on u.tenant_id = d.tenant_id and u.id = d.user_id
                  where d.tenant_id = $1 and d.id = $5 and d.user_id = $6 and d.revoked_at is null
                    and u.active and u.role = $7 and u.display_name = $8)),
                k.fingerprint, k.status_code, k.response_body, set_config('lock_timeout', $3, true)
           from (select 1) one
           left join idempotency_keys k on k.tenant_id = $1 and k.key = $2",
    )
    .bind(c.tenant_id)
    .bind(key.as_str())
    .bind(super::ROW_LOCK_TIMEOUT)
    .bind(who.verify)
    .bind(c.token_id)
    .bind(c.user_id)
    .bind(c.role.as_str())
    .bind(&c.display_name)
    .fetch_one(&mut *conn)
    .await?;
    match (proved, stored_fingerprint, status, body) {
        (true, Some(stored), Some(status), Some(body)) => Ok(BoundClaim::Claim(resolve(
            fingerprint,
            &stored,
            status,
            body,
        ))),
        // Not proved; or proved only now, after the insert found no proof
        // (the user's role or name changed back in between): either way the
        // identity is not what the insert judged, so the caller looks it up.
        _ => Ok(BoundClaim::CallerChanged),
    }
}

/// What a committed key row means for a request with `fingerprint`.
pub(crate) fn resolve(
    fingerprint: &str,
    stored_fingerprint: &str,
    status: i16,
    body: Vec<u8>,
) -> Claim {
    if stored_fingerprint != fingerprint {
        return Claim::Reused;
    }
    Claim::Replay(Outcome {
        status: status as u16,
        body,
        replayed: true,
    })
}

/// Stores the answer on the claimed key row (same transaction as the work).
pub async fn store_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    key: &IdempotencyKey,
    outcome: &Outcome,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update idempotency_keys set status_code = $3, response_body = $4
          where tenant_id = $1 and key = $2",
    )
    .bind(tenant_id)
    .bind(key.as_str())
    .bind(outcome.status as i16)
    .bind(&outcome.body)
    .execute(conn)
    .await?;
    Ok(())
}

/// [`store_in_tx`] for many claimed keys in one statement (a batch push's
/// chunk, just before it commits: no other transaction can see a claimed row
/// before then, so storing late changes nothing anyone can observe).
/// Returns how many rows it updated.
pub async fn store_many_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    keys: &[String],
    statuses: &[i16],
    bodies: &[Vec<u8>],
) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query(
        "update idempotency_keys k set status_code = v.status_code, response_body = v.response_body
           from unnest($2::text[], $3::int2[], $4::bytea[]) as v(key, status_code, response_body)
          where k.tenant_id = $1 and k.key = v.key",
    )
    .bind(tenant_id)
    .bind(keys)
    .bind(statuses)
    .bind(bodies)
    .execute(conn)
    .await?
    .rows_affected())
}

/// Deletes keys older than the retention, a small batch per statement so no
/// delete holds many row locks or bloats one transaction. Returns how many.
pub async fn reap_expired(
    db: &sqlx::PgPool,
    retention_hours: u32,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    let mut total = 0;
    loop {
        let deleted = sqlx::query(
            "delete from idempotency_keys where ctid = any(array(
                select ctid from idempotency_keys
                 where created_at < now() - make_interval(hours => $1)
                 limit $2))",
        )
        .bind(retention_hours as i32)
        .bind(batch)
        .execute(db)
        .await?
        .rows_affected();
        total += deleted;
        if deleted < batch as u64 {
            return Ok(total);
        }
    }
}
