// The mock stands in for the engine in every UI test, so its rules are
// checked against the engine's (client/src/engine.rs, conflict.rs).
import { describe, expect, test } from 'vitest';
import { customer, mockBackend, sku } from './helpers';

describe('mock backend', () => {
  test('acts queue with chained base versions and go out in order on sync', async () => {
    const m = mockBackend();
    const id = await m.createOrder({ customer_id: customer(m, 'Austin Boutique').id, customer_po: 'A1', ship_window_start: null, ship_window_end: null, notes: null });
    const kestrelM = sku(m, 'Kestrel Overshirt', 'Washed Indigo', 'M');
    const line = await m.addLine(id, kestrelM.id, 4);
    await m.allocate(id, line, 4);
    expect(m.rows.map((r) => r.base_version)).toEqual([0, 1, 2]);
    const before = await m.getOrder(id);
    expect(before).toMatchObject({ badge: 'pending', server_version: null });
    expect((await m.getSkus([kestrelM.id]))[0]).toMatchObject({ ats: 6, ats_local: 2, pending_allocation: 4 });
    expect((await m.getStatus()).pending).toBe(3);

    await m.syncNow();
    const after = await m.getOrder(id);
    expect(after).toMatchObject({ badge: 'synced', server_version: 3 });
    expect(after!.order.lines[0]).toMatchObject({ qty_ordered: 4, qty_allocated: 4 });
    expect((await m.getSkus([kestrelM.id]))[0]).toMatchObject({ ats: 2, ats_local: 2 });
    expect(await m.getStatus()).toMatchObject({ pending: 0, online: true });
  });

  test('offline: nothing leaves, the queue stays; back online it drains', async () => {
    const m = mockBackend();
    m.setNetwork(false);
    const id = await m.createOrder({ customer_id: customer(m, 'Tokyo Distributor').id, customer_po: null, ship_window_start: null, ship_window_end: null, notes: null });
    await m.syncNow();
    expect(await m.getStatus()).toMatchObject({ online: false, pending: 1 });
    expect(m.server.orders.has(id)).toBe(false);
    m.setNetwork(true);
    expect(await m.getStatus()).toMatchObject({ online: true, pending: 0 });
    expect(m.server.orders.has(id)).toBe(true);
  });

  test('a version conflict holds only that order; rebase re-issues on the current version', async () => {
    const m = mockBackend();
    const o = m.remoteCreateOrder({ customer_id: customer(m, 'Austin Boutique').id, customer_po: 'P', ship_window_start: null, ship_window_end: null, notes: null });
    const other = await m.createOrder({ customer_id: customer(m, 'Tokyo Distributor').id, customer_po: null, ship_window_start: null, ship_window_end: null, notes: null });
    await m.editOrder(o.id, { notes: 'rush' });
    m.remoteEditOrder(o.id, { customer_po: 'P-2' });
    await m.syncNow();
    expect((await m.getOrder(o.id))!.badge).toBe('conflict');
    expect((await m.getOrder(other))!.badge).toBe('synced');
    const c = (await m.getConflict(o.id))!;
    expect(c).toMatchObject({ changed_by: 'Priya', your_base_version: 1, current_version: 2, can_rebase: true });
    await m.resolveConflict(o.id, 'rebase');
    await m.syncNow();
    expect(m.server.orders.get(o.id)).toMatchObject({ notes: 'rush', customer_po: 'P-2', version: 3 });
  });

  test('a quantity both changed cannot be rebased; a choice is needed', async () => {
    const m = mockBackend();
    const o = m.remoteCreateOrder(
      { customer_id: customer(m, 'Austin Boutique').id, customer_po: null, ship_window_start: null, ship_window_end: null, notes: null },
      [[sku(m, 'Wren Tee', 'White', 'S').id, 5, 0]],
    );
    await m.changeLine(o.id, o.lines[0].id, 8);
    m.remoteChangeLine(o.id, o.lines[0].id, 8);
    await m.syncNow();
    const c = (await m.getConflict(o.id))!;
    expect(c.can_rebase).toBe(false);
    expect(c.fields).toEqual([expect.objectContaining({ field: `line:${o.lines[0].id}`, collides: true, quantity: true })]);
    await expect(m.resolveConflict(o.id, 'rebase')).rejects.toMatchObject({ kind: 'resolve' });
    await m.resolveConflict(o.id, { choose: { [`line:${o.lines[0].id}`]: 'theirs' } });
    expect(m.rows).toEqual([]);
  });

  test('insufficient ATS is a rejection with the ATS now and the choices', async () => {
    const m = mockBackend();
    const id = await m.createOrder({ customer_id: customer(m, 'Austin Boutique').id, customer_po: null, ship_window_start: null, ship_window_end: null, notes: null });
    const line = await m.addLine(id, sku(m, 'Kestrel Overshirt', 'Washed Indigo', 'M').id, 9);
    await m.allocate(id, line, 9);
    await m.syncNow();
    const [r] = await m.listRejections();
    expect(r).toMatchObject({ code: 'insufficient_ats', facts: { ats_available: 6, requested: 9, ats_now: 6 } });
    expect(r.choices).toEqual([{ choice: 'reduce_to_ats', qty: 6 }, { choice: 'remove_line' }, { choice: 'try_again' }, { choice: 'dismiss' }]);
    await m.resolveRejection(r.id, { choice: 'reduce_to_ats', qty: 6 });
    await m.syncNow();
    expect(m.server.orders.get(id)!.lines[0].qty_allocated).toBe(6);
    expect(await m.listRejections()).toEqual([]);
  });
});
