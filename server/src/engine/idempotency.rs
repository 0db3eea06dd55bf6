//! Idempotency keys: claim, replay, store — inside the mutation's transaction.

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
pub async fn claim_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    key: &str,
    fingerprint: &str,
    lock_timeout: &str,
) -> Result<Claim, sqlx::Error> {
    sqlx::query("select set_config('lock_timeout', $1, true)")
        .bind(lock_timeout)
        .execute(&mut *conn)
        .await?;
    let inserted = sqlx::query(
        "insert into idempotency_keys (tenant_id, key, fingerprint, status_code, response_body)
         values ($1, $2, $3, 0, ''::bytea)
         on conflict (tenant_id, key) do nothing",
    )
    .bind(tenant_id)
    .bind(key)
    .bind(fingerprint)
    .execute(&mut *conn)
    .await;
    let inserted = match inserted {
        Ok(done) => done.rows_affected() == 1,
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(LOCK_NOT_AVAILABLE) => {
            return Ok(Claim::InFlight);
        }
        Err(e) => return Err(e),
    };
    // The bound is for the key only: waiting behind a hot SKU row is normal.
    sqlx::query("select set_config('lock_timeout', '0', true)")
        .execute(&mut *conn)
        .await?;
    if inserted {
        return Ok(Claim::Claimed);
    }
    let (stored_fingerprint, status, body): (String, i16, Vec<u8>) = sqlx::query_as(
        "select fingerprint, status_code, response_body from idempotency_keys
          where tenant_id = $1 and key = $2",
    )
    .bind(tenant_id)
    .bind(key)
    .fetch_one(&mut *conn)
    .await?;
    if stored_fingerprint != fingerprint {
        return Ok(Claim::Reused);
    }
    Ok(Claim::Replay(Outcome {
        status: status as u16,
        body,
        replayed: true,
    }))
}

/// Stores the answer on the claimed key row (same transaction as the work).
pub async fn store_in_tx(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    key: &str,
    outcome: &Outcome,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update idempotency_keys set status_code = $3, response_body = $4
          where tenant_id = $1 and key = $2",
    )
    .bind(tenant_id)
    .bind(key)
    .bind(outcome.status as i16)
    .bind(&outcome.body)
    .execute(conn)
    .await?;
    Ok(())
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
