// The mock is canned data and a record of calls, with no engine rules of its
// own (those are tested in Rust, client/tests). These check the little state
// it keeps, which the screen tests build on: acts show at once and wait for a
// sync, the network knob, and conflict and rejection fixtures holding an
// order's acts until the UI resolves them.
import { describe, expect, test } from 'vitest';
import { conflictFixture, fieldDiff, insufficientAts } from '../src/lib/fixtures';
import { customer, mockBackend, sku } from './helpers';

const header = (customer_id: string, customer_po: string | null = null) => ({
  customer_id,
  customer_po,
  ship_window_start: null,
  ship_window_end: null,
  notes: null,
});

describe('mock backend', () => {
  test('acts change the order at once and wait until a sync, which hands them to the server', async () => {
    const m = mockBackend();
    const id = await m.createOrder(header(customer(m, 'Austin Boutique').id, 'A1'));
    const kestrelM = sku(m, 'Kestrel Overshirt', 'Washed Indigo', 'M');
    const line = await m.addLine(id, kestrelM.id, 4);
    await m.allocate(id, line, 4);
    expect((await m.listPending()).map(([, p]) => p.kind)).toEqual(['create_order', 'add_line', 'allocate']);
    const before = await m.getOrder(id);
    expect(before).toMatchObject({ badge: 'pending', server_version: null, pending_fields: [`line:${line}`] });
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
    const id = await m.createOrder(header(customer(m, 'Tokyo Distributor').id));
    await m.syncNow();
    expect(await m.getStatus()).toMatchObject({ online: false, pending: 1 });
    expect(m.server.orders.has(id)).toBe(false);
    m.setNetwork(true);
    expect(await m.getStatus()).toMatchObject({ online: true, pending: 0 });
    expect(m.server.orders.has(id)).toBe(true);
  });

  test('a conflict holds only its order until resolved; then its acts go out', async () => {
    const m = mockBackend();
    const o = m.remoteCreateOrder(header(customer(m, 'Austin Boutique').id, 'P'));
    const other = await m.createOrder(header(customer(m, 'Tokyo Distributor').id));
    await m.editOrder(o.id, { notes: 'rush' });
    m.remoteEditOrder(o.id, { customer_po: 'P-2' });
    const mine = (await m.getOrder(o.id))!.order;
    const theirs = m.server.orders.get(o.id)!;
    m.putConflict(
      conflictFixture({
        base: o,
        mine,
        theirs,
        held: 1,
        fields: [
          fieldDiff('customer_po', { base: 'P', mine: 'P', theirs: 'P-2' }, { mine_changed: false, theirs_changed: true, collides: false }),
          fieldDiff('notes', { base: null, mine: 'rush', theirs: null }, { mine_changed: true, theirs_changed: false, collides: false }),
        ],
      }),
    );
    await m.syncNow();
    expect((await m.getOrder(o.id))!.badge).toBe('conflict');
    expect((await m.getOrder(other))!.badge).toBe('synced');
    expect(await m.getConflict(o.id)).toMatchObject({ changed_by: 'Priya', your_base_version: 1, current_version: 2, can_rebase: true, held: 1 });
    expect(await m.getStatus()).toMatchObject({ conflicts: 1, pending: 1 });

    await m.resolveConflict(o.id, 'rebase');
    expect(await m.listConflicts()).toEqual([]);
    expect((await m.getOrder(o.id))!.badge).toBe('pending');
    await m.syncNow();
    expect((await m.getOrder(o.id))!.badge).toBe('synced');
    expect(m.calls.filter((c) => c.name === 'resolveConflict').map((c) => c.args)).toEqual([[o.id, 'rebase']]);
  });

  test('a resolution must choose every field the conflict says collides; discarding drops my acts', async () => {
    const m = mockBackend();
    const o = m.remoteCreateOrder(header(customer(m, 'Austin Boutique').id), [[sku(m, 'Wren Tee', 'White', 'S').id, 5, 0]]);
    const line = `line:${o.lines[0].id}`;
    await m.changeLine(o.id, o.lines[0].id, 8);
    m.remoteChangeLine(o.id, o.lines[0].id, 8);
    const value = { sku_id: o.lines[0].sku_id, qty_ordered: 8, qty_allocated: 0 };
    m.putConflict(
      conflictFixture({
        base: o,
        mine: (await m.getOrder(o.id))!.order,
        theirs: m.server.orders.get(o.id)!,
        held: 1,
        fields: [fieldDiff(line, { base: { ...value, qty_ordered: 5 }, mine: value, theirs: value }, { mine_changed: true, theirs_changed: true, collides: true })],
      }),
    );
    expect((await m.getConflict(o.id))!.can_rebase).toBe(false);
    await expect(m.resolveConflict(o.id, 'rebase')).rejects.toMatchObject({ kind: 'resolve' });
    await expect(m.resolveConflict(o.id, { choose: {} })).rejects.toMatchObject({ kind: 'resolve' });
    await m.resolveConflict(o.id, 'discard_mine');
    expect(await m.listPending()).toEqual([]);
    expect((await m.getOrder(o.id))!.order.lines[0].qty_ordered).toBe(8);
    expect(await m.listConflicts()).toEqual([]);
  });

  test('a refused allocation does not count; reducing to the ATS queues the smaller one', async () => {
    const m = mockBackend();
    const kestrel = sku(m, 'Kestrel Overshirt', 'Washed Indigo', 'M');
    const o = m.remoteCreateOrder(header(customer(m, 'Austin Boutique').id), [[kestrel.id, 9, 0]]);
    m.putRejection(o.id, { kind: 'allocate', line_id: o.lines[0].id, qty: 9 }, insufficientAts({ skuId: kestrel.id, requested: 9, atsNow: 6 }));
    const [r] = await m.listRejections();
    expect(r).toMatchObject({ order_id: o.id, kind: 'allocate', code: 'insufficient_ats', facts: { ats_available: 6, requested: 9, ats_now: 6 } });
    expect((await m.getOrder(o.id))!).toMatchObject({ badge: 'rejected', order: { lines: [{ qty_allocated: 0 }] } });
    expect((await m.getSkus([kestrel.id]))[0]).toMatchObject({ ats_local: 6 });
    await expect(m.resolveRejection(r.id, { choice: 'reduce_to_ats', qty: 6 }).then(() => m.resolveRejection(r.id, { choice: 'dismiss' }))).rejects.toMatchObject({
      kind: 'not_found',
    });
    await m.syncNow();
    expect(m.server.orders.get(o.id)!.lines[0].qty_allocated).toBe(6);
    expect(sku(m, 'Kestrel Overshirt', 'Washed Indigo', 'M').ats).toBe(0);
    expect(await m.listRejections()).toEqual([]);
  });
});
