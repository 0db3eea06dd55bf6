-- Row-level security: a second wall between tenants, behind the tenant filter
-- every query already carries. A request's transaction switches to the role
-- `holdfast_tenant` and names its tenant in `app.tenant_id` (both local to
-- the transaction; server/src/db/tenancy.rs is the one place that does it).
-- Under that role a query that forgot `where tenant_id = $1` still sees,
-- changes and inserts only the caller's tenant's rows.
--
-- Why a role switch and not just policies: superusers, table owners and
-- BYPASSRLS roles are not subject to row-level security, and the server
-- usually connects as the owner (often a superuser). `holdfast_tenant` owns
-- nothing and bypasses nothing, so the policies bind it whoever connected.
-- System work that spans tenants (sign-in and token lookup, the relay, the
-- reaper, feed compaction, the demo seed, migrations) runs as the connecting
-- role and is not affected.
--
-- The policy reads the tenant with current_setting(..., missing_ok => true):
-- NULL when never set, and '' once a transaction-local setting has been
-- reset on that connection, hence the nullif. No tenant named means no rows,
-- never an error and never every row. current_setting is STABLE, so the
-- planner uses the policy's `tenant_id = …` as an index condition: tenant_id
-- leads every key.
--
-- Not under RLS: `_sqlx_migrations` (no tenant; holdfast_tenant has no
-- privilege on it at all). `tenants` is: a tenant sees its own row only.
-- `feed_compaction` gets a policy but no privileges: only the compactor, a
-- system job, touches it.

-- Roles belong to the cluster, not the database: several databases (tests
-- run one each, concurrently) may migrate at once, and all but one of them
-- find the role there or lose the race on pg_authid's unique index (or
-- pg_auth_members', for the grant). Looking first means a role and grant a
-- DBA made in advance are enough for a migrating role without CREATEROLE.
-- The connecting role must be a member to SET ROLE to it (a superuser is
-- one already).
do $$
begin
    if not exists (select from pg_roles where rolname = 'holdfast_tenant') then
        begin
            create role holdfast_tenant nologin;
        exception
            when duplicate_object or unique_violation then null;
        end;
    end if;
    if not pg_has_role(current_user, 'holdfast_tenant', 'member') then
        begin
            execute format('grant holdfast_tenant to %I', current_user);
        exception
            when duplicate_object or unique_violation then null;
        end;
    end if;
end
$$;

-- The privileges are the request paths' whole write surface; ledgers, the
-- change feed, the inbox and the outbox are append-only to them. Identity
-- columns need no sequence privilege (Postgres calls their sequences without
-- checking it).
grant select on tenants, users, skus to holdfast_tenant;
grant select, update on device_tokens, customers, sku_positions, deliveries, reconcile_runs
    to holdfast_tenant;
grant select, insert, update on orders, invoices, idempotency_keys, inbound_secrets, partners,
    reconcile_counts to holdfast_tenant;
grant select, insert, update, delete on order_lines to holdfast_tenant;
grant select, insert on allocation_ledger, inventory_ledger, changes, inbox, outbox,
    reconcile_pages, reconcile_rejects to holdfast_tenant;

alter table tenants enable row level security;
create policy tenant_isolation on tenants
    using (id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table users enable row level security;
create policy tenant_isolation on users
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table device_tokens enable row level security;
create policy tenant_isolation on device_tokens
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table customers enable row level security;
create policy tenant_isolation on customers
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table skus enable row level security;
create policy tenant_isolation on skus
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table sku_positions enable row level security;
create policy tenant_isolation on sku_positions
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table orders enable row level security;
create policy tenant_isolation on orders
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table order_lines enable row level security;
create policy tenant_isolation on order_lines
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table invoices enable row level security;
create policy tenant_isolation on invoices
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table allocation_ledger enable row level security;
create policy tenant_isolation on allocation_ledger
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table inventory_ledger enable row level security;
create policy tenant_isolation on inventory_ledger
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table idempotency_keys enable row level security;
create policy tenant_isolation on idempotency_keys
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table changes enable row level security;
create policy tenant_isolation on changes
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table inbox enable row level security;
create policy tenant_isolation on inbox
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table inbound_secrets enable row level security;
create policy tenant_isolation on inbound_secrets
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table outbox enable row level security;
create policy tenant_isolation on outbox
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table partners enable row level security;
create policy tenant_isolation on partners
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table deliveries enable row level security;
create policy tenant_isolation on deliveries
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table feed_compaction enable row level security;
create policy tenant_isolation on feed_compaction
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table reconcile_runs enable row level security;
create policy tenant_isolation on reconcile_runs
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table reconcile_pages enable row level security;
create policy tenant_isolation on reconcile_pages
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table reconcile_counts enable row level security;
create policy tenant_isolation on reconcile_counts
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

alter table reconcile_rejects enable row level security;
create policy tenant_isolation on reconcile_rejects
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
