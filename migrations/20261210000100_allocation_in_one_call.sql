-- An allocation's writes as a function both of its paths call
-- (engine/allocation.rs and engine/known.rs), and the path that makes the
-- whole allocation one call on an order the server already knows.

-- A timestamp as the server's JSON writes one (chrono's RFC 3339 form for
-- a UTC time: no fraction when there is none, else 3 digits when they
-- suffice, else 6; then `Z`), so an answer built here reads the same as one
-- built in Rust. The fraction is taken from the UTC wall time, which never
-- has a seconds offset.
create function json_timestamp(t timestamptz) returns text
language sql stable
as $$
    select to_char(u, 'YYYY-MM-DD"T"HH24:MI:SS')
        || case when micros = 0 then ''
                when micros % 1000 = 0 then '.' || lpad((micros / 1000)::text, 3, '0')
                else '.' || lpad(micros::text, 6, '0') end
        || 'Z'
      from (select t at time zone 'UTC') as a(u),
           lateral (select extract(microseconds from u)::bigint % 1000000) as b(micros)
$$;

-- Allocate (p_delta > 0) or release (p_delta < 0) on one line, every write
-- in one statement. `pos` is the atomic conditional update of the SKU's
-- position (the ATS check in its WHERE clause); every other write — the
-- line, the order's version and event sequence (compare-and-swap on
-- p_version), the ledger row with the idempotency key under its unique
-- constraint, the order's and the SKU's feed rows, both outbox events, the
-- version's history entry, the answer on the key row — selects from `pos`
-- (or from `ord`, which does), so when the stock is not there nothing at all
-- is written and no row comes back. The event bodies are those
-- `db::outbox::enqueue_in_tx` builds (jsonb keeps no key order, so building
-- them here stores the same value).
--
-- The answer is the caller's serialized document cut around its two values
-- only the write knows: p_head, the order's `updated_at` (json_timestamp),
-- p_mid, ATS after, p_tail. Returns what the caller checks its document
-- against, and the stamp it spliced. Runs as its caller (row-level security
-- applies as to the statement it replaces).
create function allocation_move(
    p_tenant uuid, p_sku uuid, p_delta bigint, p_order uuid, p_line uuid, p_key text,
    p_user uuid, p_version bigint, p_timestamp text, p_reason text, p_event_type text,
    p_qty bigint, p_head bytea, p_mid bytea, p_tail bytea)
returns table (ats_after bigint, version bigint, updated_at timestamptz, stamp text,
               qty_allocated bigint, updated_by_name text)
language plpgsql volatile
as $$
#variable_conflict use_column
begin
    return query
    with pos as (
        update sku_positions
           set allocated = allocated + p_delta, version = version + 1,
               event_seq = event_seq + 1, updated_at = now()
         where tenant_id = p_tenant and sku_id = p_sku and on_hand + on_order - allocated >= p_delta
        returning on_hand + on_order - allocated as ats_after, version, event_seq
    ), line as (
        update order_lines set qty_allocated = qty_allocated + p_delta
         where tenant_id = p_tenant and id = p_line and order_id = p_order
           and exists (select 1 from pos)
        returning qty_allocated
    ), ord as (
        update orders set version = version + 1, event_seq = event_seq + 1, updated_at = now(),
                          updated_by = p_user
         where tenant_id = p_tenant and id = p_order and version = p_version
           and exists (select 1 from pos)
        returning version, event_seq, updated_at, json_timestamp(updated_at) as stamp
    ), ledger as (
        insert into allocation_ledger (tenant_id, sku_id, order_id, line_id, delta, reason,
                                       idempotency_key, created_by)
        select p_tenant, p_sku, p_order, p_line, p_delta, p_reason, p_key, p_user from pos
    ), feed as (
        insert into changes (tenant_id, kind, doc_id, version)
        select p_tenant, 'order', p_order, ord.version from ord
        union all
        select p_tenant, 'sku', p_sku, pos.version from pos
    ), events as (
        insert into outbox (tenant_id, event_type, aggregate_kind, aggregate_id, sequence, payload)
        select p_tenant, 'sku.ats_changed', 'sku', p_sku, pos.event_seq,
               jsonb_build_object('type', 'sku.ats_changed', 'timestamp', p_timestamp,
                   'data', jsonb_build_object('ats', pos.ats_after, 'tenant_id', p_tenant,
                                              'sku_id', p_sku, 'sequence', pos.event_seq,
                                              'version', pos.version))
          from pos
        union all
        select p_tenant, p_event_type, 'order', p_order, ord.event_seq,
               jsonb_build_object('type', p_event_type, 'timestamp', p_timestamp,
                   'data', jsonb_build_object('line_id', p_line, 'sku_id', p_sku, 'qty', p_qty,
                                              'ats_after', pos.ats_after, 'tenant_id', p_tenant,
                                              'order_id', p_order, 'sequence', ord.event_seq,
                                              'version', ord.version))
          from pos, ord
        returning id
    ), entry as (
        insert into order_history (tenant_id, order_id, version, created_by, event_type, facts,
                                   idempotency_key, outbox_ids)
        select p_tenant, p_order, ord.version, p_user, p_event_type,
               jsonb_build_object('line_id', p_line, 'sku_id', p_sku, 'qty', p_qty,
                                  'ats_after', pos.ats_after),
               p_key, array(select id from events order by id)
          from pos, ord
    ), answer as (
        update idempotency_keys k
           set status_code = 200,
               response_body = p_head || convert_to(ord.stamp, 'UTF8') || p_mid
                               || convert_to(pos.ats_after::text, 'UTF8') || p_tail
          from pos, ord
         where k.tenant_id = p_tenant and k.key = p_key
    )
    select pos.ats_after, ord.version, ord.updated_at, ord.stamp, line.qty_allocated,
           (select u.display_name from users u where u.tenant_id = p_tenant and u.id = p_user)
      from pos left join ord on true left join line on true;
end
$$;

-- A REST allocation or release on an order whose document at p_version the
-- server holds (engine/known.rs), as one call in autocommit, in place of
-- BEGIN, the claim, the order's lock and read, the move and COMMIT:
--
-- 1. bind the call to the caller's tenant (the request role and
--    `app.tenant_id`, until it commits: every statement below runs bound)
--    and claim the key, proving a caller taken from the token cache as
--    `engine::idempotency::claim_bound_in_tx` does. A key held by a running
--    request is waited for up to p_key_wait, then answered `in_flight`; a
--    key answered before, or a caller not proved, is `not_claimed`, and
--    nothing was written.
-- 2. lock the order if it is still at p_version, then allocation_move, and
--    check that it wrote what the caller's answer says.
--
-- Anything in 2 that is not as the caller expected (the order moved on, the
-- stock is short, the ledger already has this key) raises SQLSTATE HF001 or
-- the write's own error, which rolls the claim back with everything else:
-- the request then runs the ordinary way and is decided there.
create function allocate_on_known_order(
    p_tenant uuid, p_key text, p_fingerprint text, p_key_wait text, p_row_wait text,
    p_role text, p_verify boolean, p_token uuid, p_user uuid, p_user_role text, p_name text,
    p_sku uuid, p_delta bigint, p_order uuid, p_line uuid, p_version bigint,
    p_qty_allocated bigint, p_timestamp text, p_reason text, p_event_type text, p_qty bigint,
    p_head bytea, p_mid bytea, p_tail bytea)
returns table (outcome text, ats_after bigint, stamp text)
language plpgsql volatile
as $$
#variable_conflict use_column
declare
    claimed bigint;
    moved record;
begin
    perform set_config('lock_timeout', p_key_wait, true),
            set_config('role', p_role, true),
            set_config('app.tenant_id', p_tenant::text, true);
    begin
        insert into idempotency_keys (tenant_id, key, fingerprint, status_code, response_body)
        select p_tenant, p_key, p_fingerprint, 0, ''::bytea
         where not p_verify or exists (
               select 1 from device_tokens d
                 join users u on u.tenant_id = d.tenant_id and u.id = d.user_id
                where d.tenant_id = p_tenant and d.id = p_token and d.user_id = p_user
                  and d.revoked_at is null and u.active and u.role = p_user_role
                  and u.display_name = p_name)
        on conflict (tenant_id, key) do nothing;
        get diagnostics claimed = row_count;
    exception when lock_not_available then
        return query select 'in_flight', null::bigint, null::text;
        return;
    end;
    if claimed = 0 then
        return query select 'not_claimed', null::bigint, null::text;
        return;
    end if;
    perform set_config('lock_timeout', p_row_wait, true);
    perform 1 from orders o
      where o.tenant_id = p_tenant and o.id = p_order and o.version = p_version
        for update;
    if not found then
        raise exception 'order % is no longer at version %', p_order, p_version
            using errcode = 'HF001';
    end if;
    select * into moved
      from allocation_move(p_tenant, p_sku, p_delta, p_order, p_line, p_key, p_user, p_version,
                           p_timestamp, p_reason, p_event_type, p_qty, p_head, p_mid, p_tail) m;
    if not found then
        raise exception 'SKU % has not the stock for %', p_sku, p_delta using errcode = 'HF001';
    end if;
    if (moved.version, moved.qty_allocated, moved.updated_by_name)
       is distinct from (p_version + 1, p_qty_allocated, p_name) then
        raise exception 'order % wrote version % (% allocated, by %), not the answer''s',
            p_order, moved.version, moved.qty_allocated, moved.updated_by_name
            using errcode = 'HF001';
    end if;
    return query select 'moved', moved.ats_after, moved.stamp;
end
$$;
