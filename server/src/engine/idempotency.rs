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
