-- `GET /v1/orders/dead-lettered` (db/deliveries.rs dead_lettered_orders):
-- every desk asks, about once a minute, which of its tenant's orders have a
-- partner delivery dead-lettered now.
--
-- Why a partial index: none of the existing ones finds a tenant's dead
-- deliveries without reading the tenant's others. `deliveries_by_partner`
-- (tenant_id, partner_id, state) has the partner between the tenant and the
-- state, so the scan walks every entry of the tenant (deduplicated into
-- posting lists, but still one item per delivered row); `deliveries_due`
-- and `deliveries_due_by_partner` hold pending rows only. Delivered rows
-- stay for the outbox retention (a week by default) while dead letters are
-- the few an operator has not requeued yet, so an index of those alone
-- stays tiny and the query reads only what it answers. Measured with 300,000
-- delivered and 60 dead deliveries in the tenant (3 partners): 56 buffers,
-- 0.65 ms with this index; 249 buffers, 2.1 ms through
-- deliveries_by_partner, growing with the delivered rows. `outbox_id` is in
-- the key so each entry leads straight to its event by the outbox's primary
-- key (tenant_id, id), where the order's id is.
create index deliveries_dead on deliveries (tenant_id, outbox_id) where state = 'dead';

-- The query reports since when an order has a dead letter: min of
-- dead_lettered_at over its dead deliveries. The relay sets the state and
-- the time in one statement (relay/claim.rs mark_failed) and a requeue
-- clears both (db/deliveries.rs requeue); this makes that a schema
-- invariant, as every invariant the code relies on is (see the domain
-- migration), so a dead delivery without its time fails the write that
-- would store it rather than the desks' reads.
alter table deliveries add constraint deliveries_dead_has_time
    check (state <> 'dead' or dead_lettered_at is not null);
