-- Three costs a profile of one client's REST allocations found inside
-- Postgres (perf and auto_explain, bench item 1, hot SKU, one call per
-- allocation):
--
-- 1. allocation_move stored the answer with `update idempotency_keys …
--    where tenant_id = … and key = …`, and plpgsql keeps a generic plan of
--    that statement for the life of the connection, made on about its sixth
--    call. On a young database the key table is a few pages then, so the
--    plan was a sequential scan, and every later call read the whole table
--    until an ANALYZE of it (autovacuum's, a minute or more later) made the
--    connection plan again: in the bench, 2,000 allocations on a fresh
--    database each read ~300 key rows, and more as it grew, ~20 % of the
--    backend's CPU.
--    The function now plans with sequential scans off, so each of its
--    statements takes the key (and the user's name) by primary key whatever
--    the table's size was when it was planned; nothing else it reads or
--    writes is found by a scan.
alter function allocation_move(uuid, uuid, bigint, uuid, uuid, text, uuid, bigint, text, text,
                               text, bigint, bytea, bytea, bytea)
    set enable_seqscan = off;
--
-- 2. json_timestamp ran as a SQL function that could not be inlined (its
--    body had a FROM clause), so every call parsed, analysed and planned its
--    body again: fmgr_sql was ~8 % of the server backends' CPU. The same
--    expression with no FROM clause is inlined into the statement that calls
--    it and planned once with it. Same text out (the test in
--    server/tests/it/mutations/known_orders.rs checks it against serde's).
create or replace function json_timestamp(t timestamptz) returns text
language sql stable
as $$
    select to_char(t at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
        || case when extract(microseconds from t at time zone 'UTC')::bigint % 1000000 = 0 then ''
                when extract(microseconds from t at time zone 'UTC')::bigint % 1000 = 0
                    then '.' || lpad((extract(microseconds from t at time zone 'UTC')::bigint
                                      % 1000000 / 1000)::text, 3, '0')
                else '.' || lpad((extract(microseconds from t at time zone 'UTC')::bigint
                                  % 1000000)::text, 6, '0') end
        || 'Z'
$$;

-- 3. A stored answer is the whole order document, past the size Postgres
--    compresses, and pglz_compress was ~2 % of that CPU. lz4 compresses
--    (and a replay decompresses) several times faster for about the same
--    size. Rows written before keep pglz; both read the same. A Postgres
--    built without lz4 keeps pglz.
do $$
begin
    alter table idempotency_keys alter column response_body set compression lz4;
exception when feature_not_supported then
    raise notice 'this Postgres has no lz4: stored answers stay compressed with pglz';
end
$$;
