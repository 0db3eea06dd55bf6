-- What an allocation or a release decides on, in one round trip
-- (engine/allocation.rs): lock the order row, then, in a statement of its
-- own (a volatile function's statements each take a new snapshot under READ
-- COMMITTED, so this one is taken after the lock was granted and sees every
-- change committed before it), read its header, its lines in document order,
-- the SKU this idempotency key already moved on this line (a late retry whose
-- key was reaped), the transaction's timestamp (the order's `updated_at` when
-- the move writes it) and the caller's display name. No row: no such order
-- in the tenant. Runs as its caller (row-level security applies as to the
-- statements it replaces).
create function order_for_move(p_tenant uuid, p_order uuid, p_key text, p_line uuid, p_user uuid)
returns table (version bigint, status text, customer_id uuid, customer_po text,
               ship_window_start date, ship_window_end date, notes text, invoice_id uuid,
               created_at timestamptz, late_sku uuid, tx_time timestamptz, user_name text,
               line_id uuid, sku_id uuid, qty_ordered bigint, qty_allocated bigint,
               unit_price bigint)
language plpgsql volatile
as $$
#variable_conflict use_column
begin
    perform 1 from orders o where o.tenant_id = p_tenant and o.id = p_order for update;
    if not found then
        return;
    end if;
    return query
        select o.version, o.status, o.customer_id, o.customer_po, o.ship_window_start,
               o.ship_window_end, o.notes, o.invoice_id, o.created_at,
               (select a.sku_id from allocation_ledger a
                 where a.tenant_id = p_tenant and a.idempotency_key = p_key
                   and a.line_id = p_line and a.order_id = p_order),
               now(),
               (select u.display_name from users u where u.tenant_id = p_tenant and u.id = p_user),
               l.id, l.sku_id, l.qty_ordered, l.qty_allocated, l.unit_price
          from orders o
          left join order_lines l on l.tenant_id = o.tenant_id and l.order_id = o.id
         where o.tenant_id = p_tenant and o.id = p_order
         order by l.ordinal;
end
$$;
