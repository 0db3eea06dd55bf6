-- Holdfast's whole domain in one migration: tenants and who may act for them,
-- what they sell, what they sold, and the bookkeeping that makes every change
-- exactly-once (idempotency keys, ledgers, inbox) and announced (change feed,
-- outbox, deliveries).
--
-- Rules that hold for every table:
-- * tenant_id leads every primary key, unique constraint and foreign key, so
--   the schema distributes by tenant (Citus) without change, and so a query
--   that forgets the tenant cannot use an index by accident.
-- * Invariants the code relies on are also CHECKs here: a bug may fail a
--   request, never store an impossible state (an oversell, a negative stock).
-- * Money is bigint minor units; quantities are bigint ≥ 0.
-- This file is append-only once applied: later changes go in new migrations.

create table tenants (
    id          uuid primary key,
    slug        text not null unique check (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    name        text not null,
    created_at  timestamptz not null default now()
);

create table users (
    tenant_id      uuid not null references tenants (id),
    id             uuid not null,
    -- Stored lower-cased; the login lookup lower-cases its input.
    email          text not null check (email = lower(email)),
    display_name   text not null,
    role           text not null check (role in ('account_manager', 'operator')),
    -- argon2id PHC string; never a plaintext password.
    password_hash  text not null,
    created_at     timestamptz not null default now(),
    primary key (tenant_id, id),
    unique (tenant_id, email)
);

-- One row per signed-in device. Only the SHA-256 of the token is stored, so a
-- leaked table does not let anyone sign in. A bearer token arrives without a
-- tenant, so the hash is unique on its own: it is the one global lookup key.
create table device_tokens (
    tenant_id     uuid not null,
    id            uuid not null,
    user_id       uuid not null,
    token_sha256  bytea not null unique check (length(token_sha256) = 32),
    device_name   text not null,
    created_at    timestamptz not null default now(),
    last_used_at  timestamptz,
    revoked_at    timestamptz,
    primary key (tenant_id, id),
    foreign key (tenant_id, user_id) references users (tenant_id, id)
);

create table customers (
    tenant_id     uuid not null references tenants (id),
    id            uuid not null,
    name          text not null,
    credit_limit  bigint check (credit_limit >= 0),
    version       bigint not null default 1 check (version >= 1),
    updated_at    timestamptz not null default now(),
    primary key (tenant_id, id)
);

create table skus (
    tenant_id        uuid not null references tenants (id),
    id               uuid not null,
    style            text not null,
    color            text not null,
    size             text not null,
    wholesale_price  bigint not null check (wholesale_price >= 0),
    msrp             bigint not null check (msrp >= 0),
    created_at       timestamptz not null default now(),
    primary key (tenant_id, id),
    unique (tenant_id, style, color, size)
);
create index skus_search on skus (tenant_id, lower(style), lower(color), lower(size));

-- The hot row. Kept apart from the catalogue so the row an allocation locks is
-- small, and so catalogue edits never contend with allocations.
-- ATS = on_hand + on_order − allocated, and an oversell cannot be stored.
create table sku_positions (
    tenant_id   uuid not null,
    sku_id      uuid not null,
    on_hand     bigint not null default 0 check (on_hand >= 0),
    on_order    bigint not null default 0 check (on_order >= 0),
    allocated   bigint not null default 0 check (allocated >= 0),
    -- Bumped with every change; the pull feed reports it.
    version     bigint not null default 1 check (version >= 1),
    -- Last sequence number used for this SKU's outbox events (gap-free).
    event_seq   bigint not null default 0 check (event_seq >= 0),
    updated_at  timestamptz not null default now(),
    primary key (tenant_id, sku_id),
    foreign key (tenant_id, sku_id) references skus (tenant_id, id),
    constraint sku_positions_no_oversell check (allocated <= on_hand + on_order)
);

create table orders (
    tenant_id          uuid not null references tenants (id),
    -- Minted by the client, so a retried create can never make a second order.
    id                 uuid not null,
    customer_id        uuid not null,
    customer_po        text,
    ship_window_start  date,
    ship_window_end    date,
    notes              text,
    status             text not null default 'draft'
                       check (status in ('draft', 'confirmed', 'cancelled')),
    -- Every successful change adds exactly 1 (compare-and-swap on this).
    version            bigint not null default 1 check (version >= 1),
    invoice_id         uuid,
    event_seq          bigint not null default 0 check (event_seq >= 0),
    created_at         timestamptz not null default now(),
    created_by         uuid not null,
    updated_at         timestamptz not null default now(),
    updated_by         uuid not null,
    primary key (tenant_id, id),
    foreign key (tenant_id, customer_id) references customers (tenant_id, id),
    foreign key (tenant_id, created_by) references users (tenant_id, id),
    foreign key (tenant_id, updated_by) references users (tenant_id, id),
    check (ship_window_end is null or ship_window_start is null
           or ship_window_end >= ship_window_start)
);
create index orders_by_status on orders (tenant_id, status, created_at, id);
create index orders_by_created on orders (tenant_id, created_at, id);

create table order_lines (
    tenant_id      uuid not null,
    id             uuid not null,
    order_id       uuid not null,
    sku_id         uuid not null,
    qty_ordered    bigint not null check (qty_ordered >= 1),
    qty_allocated  bigint not null default 0 check (qty_allocated >= 0),
    -- Lines are shown in the order they were added.
    ordinal        bigint generated always as identity,
    primary key (tenant_id, id),
    foreign key (tenant_id, order_id) references orders (tenant_id, id),
    foreign key (tenant_id, sku_id) references skus (tenant_id, id),
    constraint order_lines_no_over_allocation check (qty_allocated <= qty_ordered)
);
create index order_lines_by_order on order_lines (tenant_id, order_id, ordinal);

create table invoices (
    tenant_id    uuid not null,
    id           uuid not null,
    order_id     uuid not null,
    customer_id  uuid not null,
    amount       bigint not null check (amount >= 0),
    status       text not null default 'awaiting_payment'
                 check (status in ('awaiting_payment', 'paid')),
    paid_at      timestamptz,
    version      bigint not null default 1 check (version >= 1),
    event_seq    bigint not null default 0 check (event_seq >= 0),
    created_at   timestamptz not null default now(),
    primary key (tenant_id, id),
    -- One pro-forma invoice per order.
    unique (tenant_id, order_id),
    foreign key (tenant_id, order_id) references orders (tenant_id, id),
    foreign key (tenant_id, customer_id) references customers (tenant_id, id),
    check ((status = 'paid') = (paid_at is not null))
);
-- The credit check sums these.
create index invoices_open_by_customer on invoices (tenant_id, customer_id)
    where status = 'awaiting_payment';

alter table orders add foreign key (tenant_id, invoice_id) references invoices (tenant_id, id);

-- Append-only: every change of sku_positions.allocated has a row here in the
-- same transaction, so sum(delta) per SKU = allocated, always (audited by the
-- tests). The idempotency key stays here forever under a unique constraint, so
-- a retry that arrives after its key expired still cannot allocate twice.
create table allocation_ledger (
    tenant_id        uuid not null,
    id               bigint generated always as identity,
    sku_id           uuid not null,
    order_id         uuid not null,
    line_id          uuid not null,
    delta            bigint not null check (delta <> 0),
    reason           text not null
                     check (reason in ('allocate', 'release', 'remove_line', 'cancel')),
    idempotency_key  text not null,
    created_at       timestamptz not null default now(),
    created_by       uuid not null,
    primary key (tenant_id, id),
    -- Cancel releases several lines under one key: one row per line.
    unique (tenant_id, idempotency_key, line_id),
    foreign key (tenant_id, sku_id) references skus (tenant_id, id)
);
create index allocation_ledger_by_sku on allocation_ledger (tenant_id, sku_id);

-- Append-only: every change of on_hand / on_order, with where it came from.
create table inventory_ledger (
    tenant_id       uuid not null,
    id              bigint generated always as identity,
    sku_id          uuid not null,
    on_hand_delta   bigint not null default 0,
    on_order_delta  bigint not null default 0,
    reason          text not null,
    -- The inbox event id, reconcile run, or seed that caused it.
    source          text not null,
    created_at      timestamptz not null default now(),
    primary key (tenant_id, id),
    foreign key (tenant_id, sku_id) references skus (tenant_id, id),
    check (on_hand_delta <> 0 or on_order_delta <> 0)
);
create index inventory_ledger_by_sku on inventory_ledger (tenant_id, sku_id);

-- One row per intention. The key is claimed, the work done and the answer
-- stored in ONE transaction: a crash rolls all three back together, so there
-- is never a stale "in progress" row to steal or wait out.
create table idempotency_keys (
    tenant_id      uuid not null references tenants (id),
    key            text not null check (length(key) between 1 and 255),
    -- SHA-256 hex of METHOD, PATH and canonical JSON of the body.
    fingerprint    text not null,
    status_code    smallint not null,
    response_body  bytea not null,
    created_at     timestamptz not null default now(),
    primary key (tenant_id, key)
);
-- The reaper deletes by age in small batches.
create index idempotency_keys_by_age on idempotency_keys (created_at);

-- The pull feed: one row per committed change of a document a desk can see.
-- xid records the writing transaction so a reader can fence on the oldest
-- transaction still in flight (ids are not commit order).
create table changes (
    tenant_id   uuid not null references tenants (id),
    id          bigint generated always as identity,
    kind        text not null check (kind in ('order', 'sku', 'customer', 'invoice')),
    doc_id      uuid not null,
    version     bigint not null,
    xid         xid8 not null default pg_current_xact_id(),
    created_at  timestamptz not null default now(),
    primary key (tenant_id, id)
);

-- Inbound webhooks: the unique key is the dedupe; the raw body is kept for
-- audit and replay.
create table inbox (
    tenant_id    uuid not null references tenants (id),
    provider     text not null check (provider in ('warehouse', 'payments')),
    event_id     text not null,
    body         bytea not null,
    received_at  timestamptz not null default now(),
    primary key (tenant_id, provider, event_id)
);

create table inbound_secrets (
    tenant_id    uuid not null references tenants (id),
    provider     text not null check (provider in ('warehouse', 'payments')),
    -- HMAC keys must be usable, so they are stored as issued (whsec_…).
    secret       text not null,
    created_at   timestamptz not null default now(),
    primary key (tenant_id, provider)
);

-- Transactional outbox: written in the same transaction as the change it
-- announces, so a rolled-back change is never announced and a committed one
-- always is. The relay fans each event out to deliveries.
create table outbox (
    tenant_id       uuid not null references tenants (id),
    id              bigint generated always as identity,
    event_type      text not null,
    aggregate_kind  text not null check (aggregate_kind in ('order', 'sku', 'invoice')),
    aggregate_id    uuid not null,
    -- Per aggregate, gap-free from 1 (partners order by it).
    sequence        bigint not null check (sequence >= 1),
    payload         jsonb not null,
    created_at      timestamptz not null default now(),
    fanned_out_at   timestamptz,
    primary key (tenant_id, id),
    unique (tenant_id, aggregate_kind, aggregate_id, sequence)
);
-- The relay claims `where fanned_out_at is null order by id`: the partial
-- index must match that query exactly to stay fast as the table grows.
create index outbox_pending on outbox (id) where fanned_out_at is null;

create table partners (
    tenant_id                 uuid not null references tenants (id),
    id                        uuid not null,
    name                      text not null,
    url                       text not null,
    event_types               text[] not null,
    enabled                   boolean not null default true,
    -- Why the relay paused it (410 Gone), shown to operators.
    paused_reason             text,
    secret                    text not null,
    -- During rotation both secrets sign until previous_secret_expires_at.
    previous_secret           text,
    previous_secret_expires_at timestamptz,
    created_at                timestamptz not null default now(),
    updated_at                timestamptz not null default now(),
    primary key (tenant_id, id)
);

create table deliveries (
    tenant_id         uuid not null,
    id                bigint generated always as identity,
    outbox_id         bigint not null,
    partner_id        uuid not null,
    state             text not null default 'pending'
                      check (state in ('pending', 'delivered', 'dead')),
    attempts          integer not null default 0 check (attempts >= 0),
    next_attempt_at   timestamptz not null default now(),
    last_status       integer,
    last_error        text,
    delivered_at      timestamptz,
    dead_lettered_at  timestamptz,
    -- Lease with a fencing token: the claimer's id must match on every state
    -- change, so a worker whose lease expired cannot overwrite a newer claim.
    lease_id          uuid,
    lease_expires_at  timestamptz,
    created_at        timestamptz not null default now(),
    primary key (tenant_id, id),
    unique (tenant_id, outbox_id, partner_id),
    foreign key (tenant_id, outbox_id) references outbox (tenant_id, id),
    foreign key (tenant_id, partner_id) references partners (tenant_id, id)
);
create index deliveries_due on deliveries (next_attempt_at, id) where state = 'pending';
create index deliveries_by_partner on deliveries (tenant_id, partner_id, state);
