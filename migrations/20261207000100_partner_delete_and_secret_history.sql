-- Issue 18: operators manage partners from the admin page (and
-- `DELETE /v1/admin/partners/{id}`), and the Inbound page says when each
-- provider's inbound secret was set and replaced.

-- Deleting a partner. Refused while any of its deliveries is pending (or
-- leased, which is pending too): those are promises to the partner still
-- being kept. Otherwise its delivered and dead-lettered delivery rows go
-- with it, in the same transaction: they exist only to be delivered,
-- requeued or reaped, `deliveries.partner_id` references the partner (so
-- the partner row cannot go first), and a dead letter for a partner that no
-- longer exists could never be requeued. What lasts is the order's history
-- (`order_history`), which keeps the event ids (`evt_<id>`) but, like after
-- the reaper has deleted a delivery, no longer which partner got them. The
-- outbox rows stay for the reaper: other partners may share them.
grant delete on partners, deliveries to holdfast_tenant;

-- When a provider's secret was first issued. `created_at` is reset by
-- every re-issue (`POST /v1/admin/inbound-secrets` upserts), so it says
-- when the current secret was issued; this column is never updated, so the
-- two differ exactly when the secret has been replaced. Rows from before
-- this migration get null: when they were first issued was not recorded,
-- and the page says so rather than guess.
alter table inbound_secrets add column first_issued_at timestamptz;
alter table inbound_secrets alter column first_issued_at set default now();
