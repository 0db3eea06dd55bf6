-- The relay claims each partner's due deliveries separately (up to that
-- partner's share), oldest first: this index serves that per-partner range
-- directly, so a claim locks only the rows it leases. The global
-- deliveries_due index stays for the reaper and the admin page.
create index deliveries_due_by_partner
    on deliveries (tenant_id, partner_id, next_attempt_at, id)
    where state = 'pending';
