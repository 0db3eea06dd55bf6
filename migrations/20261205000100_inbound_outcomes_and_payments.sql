-- Issue 15, items 2 and 3: inbound events our rules refuse are recorded,
-- and payments are recorded one by one instead of flipping the invoice.

-- An event refused for good (bad shape, unknown SKU or invoice, an
-- adjustment that would strand allocations) used to roll back with its
-- inbox row, so the provider saw a 4xx, nothing was kept, and a redelivery
-- ran the rules again. Now the row commits with outcome 'refused' and the
-- problem it was answered with: operators can list what was refused and
-- why, and a redelivery gets the same answer without running again.
-- Existing rows were all processed (a refusal left no row).
alter table inbox
    add column outcome text not null default 'processed'
        check (outcome in ('processed', 'refused')),
    -- The RFC 9457 problem the provider was answered with.
    add column refusal jsonb,
    -- The envelope's `type` when it had one: the operator's list shows it.
    add column event_type text,
    add constraint inbox_refusal_has_reason
        check ((outcome = 'refused') = (refusal is not null));

-- The inbox stays append-only for request paths except for this one
-- decision: the row is inserted first (the dedupe lock), the effect runs in
-- a savepoint, and a refusal rolls the effect back and marks the row.
grant update (outcome, refusal) on inbox to holdfast_tenant;

-- Listing a tenant's events newest first, optionally by provider/outcome.
create index inbox_by_time on inbox (tenant_id, received_at desc, provider, event_id);

-- Every payment the provider reported, by its event id: an invoice is paid
-- when these cover its amount, not at the first payment whatever its size.
create table payments (
    tenant_id   uuid not null references tenants (id),
    event_id    text not null,
    invoice_id  uuid not null,
    amount      bigint not null check (amount >= 1),
    received_at timestamptz not null default now(),
    primary key (tenant_id, event_id),
    foreign key (tenant_id, invoice_id) references invoices (tenant_id, id)
);
create index payments_by_invoice on payments (tenant_id, invoice_id);

-- The running sum of `payments` for the invoice, kept on the row so the
-- paid decision is one conditional UPDATE (like every decision here).
-- Invoices marked paid before this migration were paid by one payment the
-- old code did not record: count them as covered.
alter table invoices add column amount_paid bigint not null default 0 check (amount_paid >= 0);
update invoices set amount_paid = amount where status = 'paid';
alter table invoices add constraint invoices_paid_when_covered
    check (status <> 'paid' or amount_paid >= amount);

grant select, insert on payments to holdfast_tenant;
alter table payments enable row level security;
create policy tenant_isolation on payments
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);
