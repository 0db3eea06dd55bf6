-- What a line edit decides on, in one round trip (engine/lines.rs): lock
-- the order row, then, in a statement of its own (taken after the lock was
-- granted, as in order_for_move), read its header, its lines in document
-- order, the transaction's timestamp (the order's `updated_at` when the edit
-- writes it), the caller's display name, and, when a new line's SKU is
-- given, whether that SKU is active and the price this order's customer
-- pays for it (the customer's price list, else the SKU's wholesale price;
-- both null when the SKU is not in the tenant). No row: no such order in
-- the tenant. Runs as its caller (row-level security applies as to the
-- statements it replaces).
create function order_for_edit(p_tenant uuid, p_order uuid, p_user uuid, p_sku uuid)
returns table (version bigint, status text, customer_id uuid, customer_po text,
               ship_window_start date, ship_window_end date, notes text, invoice_id uuid,
               created_at timestamptz, tx_time timestamptz, user_name text,
               sku_active boolean, sku_price bigint,
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
        with sku as (
            select s.active, coalesce(e.price, s.wholesale_price) as price
              from orders o
              join skus s on s.tenant_id = o.tenant_id and s.id = p_sku
              left join customers c on c.tenant_id = o.tenant_id and c.id = o.customer_id
              left join price_list_entries e
                     on e.tenant_id = s.tenant_id and e.price_list_id = c.price_list_id
                    and e.sku_id = s.id
             where o.tenant_id = p_tenant and o.id = p_order
        )
        select o.version, o.status, o.customer_id, o.customer_po, o.ship_window_start,
               o.ship_window_end, o.notes, o.invoice_id, o.created_at,
               now(),
               (select u.display_name from users u where u.tenant_id = p_tenant and u.id = p_user),
               (select sku.active from sku), (select sku.price from sku),
               l.id, l.sku_id, l.qty_ordered, l.qty_allocated, l.unit_price
          from orders o
          left join order_lines l on l.tenant_id = o.tenant_id and l.order_id = o.id
         where o.tenant_id = p_tenant and o.id = p_order
         order by l.ordinal;
end
$$;
