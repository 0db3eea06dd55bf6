-- The relay's cost per delivery, from a profile of bench item 6 (20,000
-- events to one partner): Postgres was ~90 % of the CPU the relay used, in
-- the fan-out's inserts and the claims. Two changes here, each measured.
--
-- 1. No foreign key checks on deliveries. The fan-out
--    (server/src/relay/claim.rs fan_out) writes one delivery per event and
--    subscribed partner, and each insert fired two foreign key checks, a
--    query and a row lock apiece: 12.5 ms of a 22 ms insert of 500 rows.
--    What the keys guarded is guarded without a check per row:
--    * outbox: fan-out inserts deliveries only for events it holds locked
--      `for update` in the same transaction, and the only delete of outbox
--      rows (the reaper, housekeeping.rs) takes events fanned out longer
--      ago than the retention that no delivery references.
--    * partners: fan-out reads the partners `for key share`, once per
--      batch; the only delete of a partner (db/partners.rs delete_in_tx)
--      locks it `for update` and refuses while deliveries wait, so either it
--      finishes first and the fan-out sees no such partner, or it waits for
--      the fan-out and then sees its deliveries.
alter table deliveries drop constraint deliveries_tenant_id_outbox_id_fkey;
alter table deliveries drop constraint deliveries_tenant_id_partner_id_fkey;

-- 2. One index per partner instead of two, in the claim's order. The
--    claim takes a partner's due deliveries oldest first
--    (`state = 'pending' … order by next_attempt_at, id`); with statistics
--    taken before a burst (a fresh table, or autovacuum not round yet) the
--    planner read it through deliveries_by_partner (tenant_id, partner_id,
--    state) and sorted every pending row of the partner on each claim:
--    20-40 ms per 64 rows with 15,000 waiting, O(backlog). This index
--    serves that range already in order, so no plan needs a sort, and it
--    still serves what deliveries_by_partner served (a partner's counts by
--    state on the admin pages and partner delete), which makes
--    deliveries_due_by_partner (the same range, pending rows only) one
--    index entry per write too many.
create index deliveries_by_partner_due
    on deliveries (tenant_id, partner_id, state, next_attempt_at, id);
drop index deliveries_by_partner;
drop index deliveries_due_by_partner;
