-- The changes trigger fires once per statement instead of once per row: a
-- catalog import writes 100,000 change rows in one statement, and a row
-- trigger ran 100,000 plpgsql calls while that import held its SKUs' hot
-- position rows (item 11 of docs/BENCHMARKS.md). The pokes are the same:
-- one NOTIFY per distinct (tenant, xid) the statement wrote, and NOTIFY
-- folds identical payloads within a transaction as before.
create or replace function changes_notify_statement() returns trigger
    language plpgsql as $$
begin
    perform pg_notify('holdfast_changes', w.tenant_id::text || ':' || w.xid::text)
       from (select distinct tenant_id, xid from inserted) w;
    return null;
end
$$;

drop trigger changes_notify on changes;
create trigger changes_notify after insert on changes
    referencing new table as inserted
    for each statement execute function changes_notify_statement();
drop function changes_notify();
