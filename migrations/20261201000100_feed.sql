-- The pull feed's read side (server/src/feed/): the indexes its two queries
-- need, the NOTIFY that wakes live desks, and the compactor's bookmark.

-- Pulls page through one tenant's changes in (xid, id) order below the fence
-- pg_snapshot_xmin(pg_current_snapshot()); see feed/pull.rs for why that
-- order and that fence never skip a change. id breaks ties inside one
-- transaction.
create index changes_feed on changes (tenant_id, xid, id);

-- The compactor deletes the rows a later change of the same document has
-- superseded (feed/compact.rs); this finds them without a scan.
create index changes_by_document on changes (tenant_id, kind, doc_id, xid, id);

-- Where each tenant's compaction has got to in (xid, id) order. One row per
-- tenant, locked FOR UPDATE SKIP LOCKED by the compactor, so several server
-- processes never compact the same tenant at once.
create table feed_compaction (
    tenant_id  uuid primary key references tenants (id),
    xid        xid8 not null default '0',
    id         bigint not null default 0
);

-- Every change row pokes the server's one LISTEN connection. NOTIFY is
-- delivered only at commit (never for a rolled-back change), and identical
-- payloads within one transaction are delivered once, so a transaction that
-- touches many documents of a tenant sends one poke. The payload carries the
-- writer's xid so the server can hold the poke until a pull can see the change
-- (the fence has passed it); without that a desk would pull too early, get
-- nothing, and not hear again until the tenant's next commit.
create function changes_notify() returns trigger
    language plpgsql as $$
begin
    perform pg_notify('holdfast_changes', new.tenant_id::text || ':' || new.xid::text);
    return null;
end
$$;

create trigger changes_notify after insert on changes
    for each row execute function changes_notify();
