//! `--apply`: sets each counted SKU's on_hand to its count through the
//! inventory ledger. One transaction per SKU holds the position row only for
//! a few statements (allocators on a hot SKU wait that long, no longer) and
//! writes the position, its ledger row, the change-feed row, the partner
//! event and the staged row's outcome together, so the outcome is the
//! checkpoint: a killed apply resumes at the first undecided SKU and a SKU is
//! never booked twice.

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::import::Run;
use super::progress::Progress;
use super::{Hold, TestHold};
use crate::db::outbox::announce_ats_in_tx;

/// SKUs fetched per round of the apply loop.
const BATCH: i64 = 200;

/// What this invocation's apply pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    pub booked: u64,
    pub unchanged: u64,
    pub refused: u64,
}

/// Decides every SKU still undecided or refused (a refusal is retried: the
/// allocations in its way may have been released since).
pub(super) async fn apply(
    db: &PgPool,
    run: &Run,
    progress: &mut Progress,
    hold: Option<TestHold>,
) -> anyhow::Result<Applied> {
    let mut applied = Applied::default();
    let mut after = Uuid::nil();
    let mut decided: u64 = 0;
    loop {
        // Keyset order, so a SKU refused in this pass is not picked up again.
        let batch: Vec<Uuid> = sqlx::query_scalar(
            "select sku_id from reconcile_counts
              where tenant_id = $1 and run_id = $2 and sku_id > $3
                and (outcome is null or outcome = 'refused')
              order by sku_id limit $4",
        )
        .bind(run.tenant_id)
        .bind(run.id)
        .bind(after)
        .bind(BATCH)
        .fetch_all(db)
        .await?;
        let Some(last) = batch.last() else { break };
        after = *last;

        // Most counts usually agree with us; settle those in one statement
        // instead of a transaction each. Nothing is written to the position,
        // so no lock is needed: they agreed when we looked.
        let unchanged: Vec<Uuid> = sqlx::query_scalar(
            "update reconcile_counts c
                set outcome = 'unchanged', on_hand_before = p.on_hand, on_hand_after = p.on_hand,
                    detail = null, decided_at = now()
               from sku_positions p
              where c.tenant_id = $1 and c.run_id = $2 and c.sku_id = any($3)
                and (c.outcome is null or c.outcome = 'refused')
                and p.tenant_id = c.tenant_id and p.sku_id = c.sku_id and p.on_hand = c.counted
              returning c.sku_id",
        )
        .bind(run.tenant_id)
        .bind(run.id)
        .bind(&batch)
        .fetch_all(db)
        .await?;
        applied.unchanged += unchanged.len() as u64;
        decided += unchanged.len() as u64;
        progress.set(decided);

        for sku_id in batch.iter().filter(|id| !unchanged.contains(id)) {
            match apply_one(db, run, *sku_id, hold, applied.booked).await? {
                Some(Outcome::Booked) => applied.booked += 1,
                Some(Outcome::Unchanged) => applied.unchanged += 1,
                Some(Outcome::Refused) => applied.refused += 1,
                // Another process decided it meanwhile.
                None => {}
            }
            decided += 1;
            progress.set(decided);
        }
    }
    sqlx::query(
        "update reconcile_runs set applied_at = now()
          where tenant_id = $1 and id = $2 and applied_at is null
            and not exists (select 1 from reconcile_counts
                             where tenant_id = $1 and run_id = $2
                               and (outcome is null or outcome = 'refused'))",
    )
    .bind(run.tenant_id)
    .bind(run.id)
    .execute(db)
    .await?;
    Ok(applied)
}

/// SKUs still to decide (for the progress bar's total).
pub(super) async fn remaining(db: &PgPool, run: &Run) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "select count(*) from reconcile_counts
          where tenant_id = $1 and run_id = $2 and (outcome is null or outcome = 'refused')",
    )
    .bind(run.tenant_id)
    .bind(run.id)
    .fetch_one(db)
    .await
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Booked,
    Unchanged,
    Refused,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Booked => "booked",
            Outcome::Unchanged => "unchanged",
            Outcome::Refused => "refused",
        }
    }
}

/// One SKU, one transaction. None when it was already decided.
async fn apply_one(
    db: &PgPool,
    run: &Run,
    sku_id: Uuid,
    hold: Option<TestHold>,
    booked_so_far: u64,
) -> anyhow::Result<Option<Outcome>> {
    let t = run.tenant_id;
    let mut tx = crate::db::begin_for_tenant(db, t).await?;
    // Staged row first, then the position: always this order, and the only
    // other writers of positions lock one position at a time, so no cycle.
    let staged: Option<(i64, Option<String>)> = sqlx::query_as(
        "select counted, outcome from reconcile_counts
          where tenant_id = $1 and run_id = $2 and sku_id = $3 for update",
    )
    .bind(t)
    .bind(run.id)
    .bind(sku_id)
    .fetch_optional(&mut *tx)
    .await?;
    let counted = match staged {
        Some((counted, None)) => counted,
        Some((counted, Some(o))) if o == "refused" => counted,
        _ => return Ok(None),
    };
    let position: Option<(i64, i64, i64)> = sqlx::query_as(
        "select on_hand, on_order, allocated from sku_positions
          where tenant_id = $1 and sku_id = $2 for update",
    )
    .bind(t)
    .bind(sku_id)
    .fetch_optional(&mut *tx)
    .await?;
    let (outcome, before, after, detail) = match position {
        None => (
            Outcome::Refused,
            None,
            None,
            Some("the SKU has no stock position row".to_owned()),
        ),
        Some((on_hand, _, _)) if on_hand == counted => {
            (Outcome::Unchanged, Some(on_hand), Some(on_hand), None)
        }
        // The schema's CHECK allocated <= on_hand + on_order would refuse the
        // update; say so in the operator's terms instead of failing the run.
        Some((on_hand, on_order, allocated)) if allocated > counted + on_order => (
            Outcome::Refused,
            Some(on_hand),
            Some(on_hand),
            Some(format!(
                "{allocated} allocated, but the count {counted} plus {on_order} on order \
                 covers only {}; release {} first, then run --apply again",
                counted + on_order,
                allocated - counted - on_order
            )),
        ),
        Some((on_hand, _, _)) => {
            book_in_tx(&mut tx, run, sku_id, on_hand, counted).await?;
            if let Some(h) = hold {
                h.maybe_hold(Hold::Apply, booked_so_far).await;
            }
            (Outcome::Booked, Some(on_hand), Some(counted), None)
        }
    };
    sqlx::query(
        "update reconcile_counts
            set outcome = $4, on_hand_before = $5, on_hand_after = $6, detail = $7, decided_at = now()
          where tenant_id = $1 and run_id = $2 and sku_id = $3
            -- A refusal that stands as it was is left as it was: a re-run
            -- that changes nothing writes nothing.
            and (outcome is distinct from $4 or on_hand_before is distinct from $5
                 or detail is distinct from $7)",
    )
    .bind(t)
    .bind(run.id)
    .bind(sku_id)
    .bind(outcome.as_str())
    .bind(before)
    .bind(after)
    .bind(detail)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(outcome))
}

/// Sets on_hand from `before` to `counted` with everything that must commit
/// with it: the ledger row (so ledger sums still equal positions), the
/// change-feed row (desks pull the new ATS) and the partner event.
async fn book_in_tx(
    conn: &mut PgConnection,
    run: &Run,
    sku_id: Uuid,
    before: i64,
    counted: i64,
) -> anyhow::Result<()> {
    let t = run.tenant_id;
    let (version, seq, ats_after): (i64, i64, i64) = sqlx::query_as(
        "update sku_positions
            set on_hand = $3, version = version + 1, event_seq = event_seq + 1, updated_at = now()
          where tenant_id = $1 and sku_id = $2
          returning version, event_seq, on_hand + on_order - allocated",
    )
    .bind(t)
    .bind(sku_id)
    .bind(counted)
    .fetch_one(&mut *conn)
    .await?;
    sqlx::query(
        "insert into inventory_ledger (tenant_id, sku_id, on_hand_delta, reason, source)
         values ($1, $2, $3, 'reconcile', $4)",
    )
    .bind(t)
    .bind(sku_id)
    .bind(counted - before)
    .bind(format!("reconcile:{}", run.id))
    .execute(&mut *conn)
    .await?;
    announce_ats_in_tx(conn, t, sku_id, ats_after, version, seq).await?;
    Ok(())
}
