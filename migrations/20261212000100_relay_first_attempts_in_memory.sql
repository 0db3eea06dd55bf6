-- A first attempt no longer waits for its delivery row (issue 16, item 6).
--
-- Until now each event and subscribed partner cost four writes before and
-- after the one HTTP call: the fan-out's insert of a pending delivery, the
-- claim's lease on it (a second statement, ~40 µs a row), and the mark
-- that it was delivered (~20-40 µs a row), each a non-HOT update of a row
-- with five index entries. Bench item 6 showed the relay's pass waiting on
-- those statements while its sending slots stood empty.
--
-- Now the fan-out hands the first attempts of enabled partners straight to
-- the relay that fanned them out, and records them here, one row per
-- (tenant, partner) of a fan-out batch, under a lease. The delivery row is
-- written once, when the attempt's outcome is known: delivered, or pending
-- with its first failure counted (the ordinary claim path retries it from
-- there), or dead when one attempt is all that is allowed. Events of a
-- partner that is paused, or past the relay's share for it, become pending
-- rows at fan-out as before.
--
-- What keeps it at-least-once:
-- * A relay renews the leases of its live rows here while it runs; the row
--   is deleted in the same statement that writes its last delivery row.
-- * A relay that dies (or stalls past the lease) leaves its rows to expire.
--   Any relay's next pass deletes an expired row and, in the same
--   statement, inserts a pending delivery for each of its events that has
--   none (`on conflict do nothing` on (tenant, outbox, partner)), so the
--   ordinary path sends what may not have arrived.
-- * A late outcome of the relay that lost its lease is written only while
--   its row is still here; otherwise the pending row stands and the event
--   is sent again (the partner dedupes on webhook-id).
--
-- Readers that listed deliveries by their rows see these too, through the
-- view `relay_sending_events` below (an event here that has no delivery row
-- yet): the order history shows it as pending for its partner, partner
-- delete refuses while a partner has one, and the backlog gauge, the
-- operator's stats and the relay health count it as pending.
create table relay_sending (
    tenant_id         uuid not null,
    partner_id        uuid not null,
    -- The fan-out's lease: only the relay holding it writes the outcomes.
    lease_id          uuid not null,
    -- The events being attempted for this partner, ascending.
    outbox_ids        bigint[] not null check (cardinality(outbox_ids) > 0),
    lease_expires_at  timestamptz not null,
    created_at        timestamptz not null default now(),
    primary key (tenant_id, partner_id, lease_id)
);

-- The request paths only read it (order history, partner delete).
grant select on relay_sending to holdfast_tenant;
alter table relay_sending enable row level security;
create policy tenant_isolation on relay_sending
    using (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

-- The events a relay is attempting from memory whose delivery row is not
-- written yet, one row per event and partner: pending deliveries in all but
-- storage. `created_at` is the fan-out's, as a pending row's is. Invoker's
-- rights, so the tenant's policy on relay_sending applies to the request
-- paths that read it.
create view relay_sending_events with (security_invoker = true) as
select s.tenant_id, s.partner_id, e.outbox_id, s.lease_id, s.created_at, s.lease_expires_at
  from relay_sending s
 cross join lateral unnest(s.outbox_ids) as e(outbox_id)
 where not exists (select 1 from deliveries d
                    where d.tenant_id = s.tenant_id and d.outbox_id = e.outbox_id
                      and d.partner_id = s.partner_id);

grant select on relay_sending_events to holdfast_tenant;
