//! The second wall between tenants: every transaction that acts for a caller
//! is bound to the caller's tenant, and Postgres row-level security keeps it
//! there even when a query forgets its `where tenant_id = $1`.
//!
//! # How
//!
//! Migration `20261201000400_rls.sql` creates the role `holdfast_tenant`
//! (NOLOGIN, owns nothing, no BYPASSRLS), grants it the DML the request paths
//! need and gives every table with a `tenant_id` a policy
//! `tenant_id = current_setting('app.tenant_id')::uuid`. [`begin_for_tenant`]
//! begins a transaction and, in one more round trip, runs
//! `set_config('role', 'holdfast_tenant', true)` (which is `SET LOCAL ROLE`)
//! and `set_config('app.tenant_id', $tenant, true)`. Both end with the
//! transaction, so a pooled connection never carries a tenant into the next
//! checkout, whatever path returns it.
//!
//! # Why a role switch
//!
//! Postgres does not apply row-level security to superusers, to a table's
//! owner (short of FORCE) or to BYPASSRLS roles, and the server connects as
//! the schema's owner — the embedded cluster and the tests as the `postgres`
//! superuser. Policies alone would bind nobody. Switching to a role that is
//! none of those works whoever connects, as long as the connecting role may
//! SET ROLE to it (the migration grants that to the role that ran it; a
//! migrating role without CREATEROLE needs a DBA to create the role and
//! grant it first). Its privileges are the request paths' whole write
//! surface: ledgers, change feed, inbox and outbox are insert-only to it.
//!
//! # Why one round trip after `BEGIN`, not zero
//!
//! The binding could ride in the `BEGIN` itself (sqlx's `begin_with` sends a
//! simple query, which may hold several statements). But if anything in it
//! failed (say the role is missing), sqlx would return the connection to the
//! pool inside an aborted transaction it does not know it opened, and every
//! later checkout of that connection would fail. A separate statement inside
//! an ordinary sqlx transaction rolls back cleanly on any error. Measured,
//! the round trip is lost in the commit's fsync (docs/BENCHMARKS.md, "Row-level
//! security cost").
//!
//! # Which paths are bound
//!
//! Bound, through this module: batch push (`engine/batch.rs`), the pull feed (`feed/pull.rs`),
//! the read routes (`http/{orders,skus,customers,invoices}.rs`), sign-out,
//! the operator routes and the admin page's tenant data (`http/admin.rs`,
//! `http/admin_page.rs`), an inbound webhook's apply (`inbox::handle`: the
//! URL names the tenant and the signature proved the sender knows its
//! secret, so the effect is the tenant's like any request's), and the
//! transactions in which the reconcile job stages a page or books a SKU
//! (`reconcile/`).
//!
//! Bound without this module, in their first statement: the REST mutation
//! routes (`http/mutations.rs`). Their transaction's first statement is the
//! idempotency key's claim, and the same two `set_config` calls ride in its
//! one-time WHERE clause (`engine::idempotency::claim_bound_in_tx`), which
//! saves the round trip this module spends; a failure there is an ordinary
//! statement error inside an ordinary sqlx transaction, so the reason above
//! for not binding in `BEGIN` does not apply. That one statement runs as the
//! connecting role (its own `tenant_id = $1` is its wall); every later one
//! runs bound.
//!
//! Running as the connecting role, because their work has no caller's tenant
//! or spans every tenant: finding the caller (sign-in, bearer-token lookup,
//! the admin page's session check) and the inbound-secret lookup that comes
//! before a webhook's signature is checked; the relay (claims due deliveries
//! of every tenant); the reaper and feed compaction; the LISTEN connection;
//! the demo seed; migrations. The reconcile job (an operator's command, not
//! a request) runs its other statements unbound too: registering the run,
//! settling counts that already agree, its report.
//!
//! # Tables
//!
//! Under a policy: every table with `tenant_id` (the test
//! `server/tests/it/tenancy_rls.rs` fails if one is added without) and
//! `tenants` itself (a tenant sees its own row). `feed_compaction` has a
//! policy but grants nothing to `holdfast_tenant`: only the compactor uses
//! it. Outside RLS: `_sqlx_migrations`, on which the role has no privilege.
//!
//! The tenant filters stay in every query: they are the first wall, and with
//! them the plans stay what they were (the policy's condition equals the
//! query's own, and the planner folds it into a one-time filter).

use sqlx::{Connection, PgConnection, PgPool, Postgres, Transaction};
use uuid::Uuid;

/// The role a bound transaction runs as (created by the migration).
pub const TENANT_ROLE: &str = "holdfast_tenant";

/// Begins a transaction that can only see and change `tenant_id`'s rows.
pub async fn begin_for_tenant(
    db: &PgPool,
    tenant_id: Uuid,
) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    let mut tx = db.begin().await?;
    bind_in_tx(&mut tx, tenant_id).await?;
    Ok(tx)
}

/// [`begin_for_tenant`] for a read-only REPEATABLE READ transaction: every
/// statement sees one snapshot (the pull feed needs that for its fence).
pub async fn begin_snapshot_for_tenant(
    db: &PgPool,
    tenant_id: Uuid,
) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    // One statement that cannot fail once the connection is up, so sqlx's
    // own error handling for BEGIN holds (see the module docs).
    let mut tx = db
        .begin_with("begin isolation level repeatable read, read only")
        .await?;
    bind_in_tx(&mut tx, tenant_id).await?;
    Ok(tx)
}

/// [`begin_for_tenant`] on a connection already in hand (a read's, from
/// `db::reads::Reads::connection`, which may be the replica's).
pub async fn begin_for_tenant_on(
    conn: &mut PgConnection,
    tenant_id: Uuid,
) -> Result<Transaction<'_, Postgres>, sqlx::Error> {
    let mut tx = conn.begin().await?;
    bind_in_tx(&mut tx, tenant_id).await?;
    Ok(tx)
}

/// [`begin_snapshot_for_tenant`] on a connection already in hand.
pub async fn begin_snapshot_for_tenant_on(
    conn: &mut PgConnection,
    tenant_id: Uuid,
) -> Result<Transaction<'_, Postgres>, sqlx::Error> {
    let mut tx = conn
        .begin_with("begin isolation level repeatable read, read only")
        .await?;
    bind_in_tx(&mut tx, tenant_id).await?;
    Ok(tx)
}

/// Switches the open transaction to [`TENANT_ROLE`] and `tenant_id`, until it
/// ends. The first statement of the transaction (a REPEATABLE READ snapshot
/// is taken here).
async fn bind_in_tx(conn: &mut PgConnection, tenant_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query("select set_config('role', $1, true), set_config('app.tenant_id', $2, true)")
        .bind(TENANT_ROLE)
        .bind(tenant_id.to_string())
        .execute(conn)
        .await?;
    Ok(())
}
