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
-- else, however long the retention.
--
-- The cost: one more index entry when the relay marks a delivery delivered
-- (that update already rewrites `deliveries_by_partner`'s entry, the state
-- being in its key, so it is not a HOT update either way), and its removal
-- when the reaper deletes the row.
create index deliveries_delivered_recently
    on deliveries (tenant_id, delivered_at)
    where state = 'delivered';
