-- Which history of this database a pull cursor belongs to.
--
-- `holdfast-server restore` brings back a database as it was when its backup
-- was taken: everything after is gone, yet desks still hold cursors (and
-- mirrors) from the server they last talked to, further along. A cursor of
-- the old history must not be read against the restored one: its position
-- may lie past changes the restored server will make, which a desk would then
-- never pull. So every cursor names the history it was cut in, restore gives
-- the database a new one, and a cursor of another history is answered 410
-- `server_restored`: the desk pulls again from the start and re-sends the
-- acts the restored server lacks (client/src/sync.rs).
--
-- One row. `restored_at` is null until the first restore; a cursor cut by a
-- build before this table (naming no history) is accepted only while it is
-- null, i.e. on the database it was cut in.
create table feed_history (
    singleton   boolean primary key default true check (singleton),
    id          uuid not null default gen_random_uuid(),
    restored_at timestamptz
);
insert into feed_history default values;

-- Pulls and pushes check it inside the tenant's transaction (as
-- holdfast_tenant); only restore writes it, as the connecting role. Nothing
-- in it belongs to a tenant, hence no tenant_id and no policy.
grant select on feed_history to holdfast_tenant;
