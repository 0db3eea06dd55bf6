-- API.md v1.1 "The order's history": who changed an order, when, under
-- which idempotency key, and which partner events the change produced.
--
-- Why a table of its own: the other records of a change do not last.
-- `changes` is compacted (a document keeps only its newest change row,
-- feed/compact.rs), idempotency keys are reaped after their retention, and
-- the reaper deletes delivered deliveries and then their outbox rows
-- (housekeeping.rs). The allocation ledger lasts but sees only allocations.
-- This table is the durable, append-only record: one row per order version,
-- never updated or deleted by the request paths (holdfast_tenant may only
-- select and insert).
--
-- Written by the mutation engine in the transaction that makes the version,
-- so a rolled-back or rejected change leaves no row and a committed one
-- always has its row. On the allocation path (engine/allocation.rs) and in
-- every header/line edit and confirm (engine/orders.rs bump_announce_in_tx)
-- it is one more sub-statement of the data-modifying statement that already
-- bumps the version and writes the outbox, and elsewhere it rides on the
-- statement that writes the change's last outbox event: no extra round trip
-- anywhere. Only the engine bumps an order's version today: inbound webhooks
-- touch SKU positions and invoices, reconcile and the catalog touch SKUs.
--
-- Choices:
-- * The primary key (tenant_id, order_id, version) is both the read's index
--   (one order's history in version order) and an invariant: a version has
--   exactly one entry, so a bug writing a second one fails its transaction.
-- * No foreign keys. Each one is an RI trigger (a query and a row lock) on
--   the hot allocation statement: to `users` it would key-share-lock the
--   user's row on every act, turning one user's concurrent acts into
--   multixacts; to `orders` the row exists by construction (the same
--   statement or transaction just bumped it under its row lock) and orders
--   are never deleted; to `tenants` likewise. allocation_ledger made the
--   same choice for created_by.
-- * created_by is null, and so is idempotency_key, for a change the system
--   makes without a user's request (none does today; kept open so one can
--   without a migration). The name shown is joined at read time, as
--   orders.updated_by_name is, so a renamed user reads under their new name.
-- * created_at defaults to now(), the transaction's start: the same instant
--   the order row's updated_at records for this version.
-- * facts are the facts of the order's partner event for this version (what
--   partners were told), so the entry and the event cannot disagree.
-- * outbox_ids are every outbox event the change produced (the order's and
--   any SKU's ATS event), in the order they were written: an array on the
--   row rather than a child table keeps the write one insert. The read joins
--   them to `deliveries` and `outbox` by their unique keys while those rows
--   exist; after the reaper has deleted them the ids remain (the partner's
--   webhook-id is `evt_<id>`), but which partner got them does not.
--
-- Orders changed before this migration have entries only for the versions
-- made after it: their earlier changes' who and key were never recorded.

create table order_history (
    tenant_id        uuid not null,
    order_id         uuid not null,
    version          bigint not null check (version >= 1),
    created_at       timestamptz not null default now(),
    created_by       uuid,
    event_type       text not null check (event_type like 'order.%'),
    facts            jsonb not null check (jsonb_typeof(facts) = 'object'),
    idempotency_key  text check (length(idempotency_key) between 1 and 255),
    outbox_ids       bigint[] not null default '{}',
    primary key (tenant_id, order_id, version)
);

-- Append-only for the request paths, like the ledgers and the outbox.
grant select, insert on order_history to holdfast_tenant;

alter table order_history enable row level security;
create policy tenant_isolation on order_history
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
