-- API.md v1.1: a tenant's own master data. SKU codes and discontinuing,
-- customers with contact details and a price list, price lists, the price on
-- every line, users that can be deactivated, and the checkpoint of a catalog
-- import run from the server host.
--
-- The same rules as the domain migration: tenant_id leads every key, and an
-- invariant the code relies on is also a CHECK.

-- SKUs: the tenant's own SKU/UPC string (unique when present) and whether it
-- may still be sold. Catalog edits never touch sku_positions' quantities; they
-- bump the position's version and event sequence only, because the SKU's feed
-- version and its partner-event sequence live there (one counter per SKU).
alter table skus
    add column code text check (code is null or length(code) between 1 and 100),
    add column active boolean not null default true,
    add column updated_at timestamptz not null default now();
create unique index skus_code on skus (tenant_id, code) where code is not null;
create index skus_code_search on skus (tenant_id, lower(code)) where code is not null;

create table price_lists (
    tenant_id   uuid not null references tenants (id),
    id          uuid not null,
    name        text not null check (length(name) between 1 and 200),
    version     bigint not null default 1 check (version >= 1),
    event_seq   bigint not null default 0 check (event_seq >= 0),
    created_at  timestamptz not null default now(),
    updated_at  timestamptz not null default now(),
    primary key (tenant_id, id),
    unique (tenant_id, name)
);

-- A list's entries are replaced as a whole (PUT .../prices).
create table price_list_entries (
    tenant_id      uuid not null,
    price_list_id  uuid not null,
    sku_id         uuid not null,
    price          bigint not null check (price >= 0),
    primary key (tenant_id, price_list_id, sku_id),
    foreign key (tenant_id, price_list_id) references price_lists (tenant_id, id) on delete cascade,
    foreign key (tenant_id, sku_id) references skus (tenant_id, id)
);

-- Customers: contact details, a price list, and whether they take new orders.
-- Names are unique per tenant: the customer CSV import upserts by name.
alter table customers
    add column price_list_id uuid,
    add column email text,
    add column phone text,
    add column active boolean not null default true,
    add column event_seq bigint not null default 0 check (event_seq >= 0),
    add constraint customers_name_unique unique (tenant_id, name),
    add constraint customers_price_list_fk foreign key (tenant_id, price_list_id)
        references price_lists (tenant_id, id);

-- The price this customer pays, decided when the line was added and never
-- changed afterwards. Lines entered before this migration get the SKU's
-- current wholesale price, which is what their invoice would have used.
alter table order_lines add column unit_price bigint;
update order_lines l set unit_price = s.wholesale_price
  from skus s where s.tenant_id = l.tenant_id and s.id = l.sku_id;
alter table order_lines
    alter column unit_price set not null,
    add constraint order_lines_unit_price_check check (unit_price >= 0);

-- Deactivated users cannot sign in; their tokens are revoked with them.
alter table users
    add column active boolean not null default true,
    add column updated_at timestamptz not null default now();

-- The feed and the outbox learn the new kinds.
alter table changes drop constraint changes_kind_check,
    add constraint changes_kind_check
        check (kind in ('order', 'sku', 'customer', 'invoice', 'price_list'));
alter table outbox drop constraint outbox_aggregate_kind_check,
    add constraint outbox_aggregate_kind_check
        check (aggregate_kind in ('order', 'sku', 'invoice', 'customer', 'price_list'));

-- `holdfast-server catalog import`: validated whole before anything is
-- applied, then applied page by page, each page committing with its
-- checkpoint (applied_records) so a killed import resumes. A run is the
-- tenant plus the file's SHA-256, like reconcile's.
create table catalog_imports (
    tenant_id        uuid not null references tenants (id),
    id               uuid not null,
    file_sha256      bytea not null check (length(file_sha256) = 32),
    file_name        text not null,
    records          bigint not null check (records >= 0),
    applied_records  bigint not null default 0,
    created          bigint not null default 0,
    updated          bigint not null default 0,
    unchanged        bigint not null default 0,
    created_at       timestamptz not null default now(),
    finished_at      timestamptz,
    primary key (tenant_id, id),
    unique (tenant_id, file_sha256),
    check (applied_records between 0 and records)
);

grant insert, update on skus, users, customers to holdfast_tenant;
grant insert on sku_positions, device_tokens to holdfast_tenant;
grant select, insert, update on price_lists, catalog_imports to holdfast_tenant;
grant select, insert, update, delete on price_list_entries to holdfast_tenant;

alter table price_lists enable row level security;
create policy tenant_isolation on price_lists
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
alter table price_list_entries enable row level security;
create policy tenant_isolation on price_list_entries
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
alter table catalog_imports enable row level security;
create policy tenant_isolation on catalog_imports
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
