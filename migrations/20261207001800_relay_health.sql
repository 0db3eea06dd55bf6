-- The operator page's relay charts (server/src/db/relay_health.rs): per
-- partner, deliveries per minute and commit → 2xx latency over the last
-- hour, i.e. the tenant's rows delivered since an hour ago.
--
-- Why an index: none of the existing ones finds them without reading every
-- delivered row the outbox retention keeps (a week by default).
-- `deliveries_by_partner` (tenant_id, partner_id, state) narrows to the
-- tenant's delivered rows but not by time, so every page load would fetch
-- a week of heap rows to keep an hour of them; `deliveries_due` and
-- `deliveries_due_by_partner` hold pending rows only. This one holds
-- delivered rows only, by time, so the charts read the hour and nothing
-- else, however long the retention. Measured with 300,000 delivered rows over
-- a week for one tenant (3 partners), 1,800 of them in the last hour: the
-- per-minute counts took 2.3 ms through this index against 67 ms in a
-- sequential scan of the table, and the latency query (each row's event by
-- the outbox's primary key) 12 ms against 70 ms, both growing with the
-- retention without it and with the hour's deliveries with it.
--
-- The cost: one more index entry when the relay marks a delivery delivered
-- (that update already rewrites `deliveries_by_partner`'s entry, the state
-- being in its key, so it is not a HOT update either way), and its removal
-- when the reaper deletes the row.
create index deliveries_delivered_recently
    on deliveries (tenant_id, delivered_at)
    where state = 'delivered';
