-- The relay wakes on commit: one NOTIFY per transaction that wrote outbox
-- rows (a statement trigger, and NOTIFY folds identical payloads within a
-- transaction). Delivered only at commit, so a rolled-back change never wakes
-- anyone. Relays poll as well, so a missed notification only costs latency.
create function outbox_notify() returns trigger
    language plpgsql as $$
begin
    perform pg_notify('holdfast_outbox', '');
    return null;
end
$$;

create trigger outbox_notify after insert on outbox
    for each statement execute function outbox_notify();
