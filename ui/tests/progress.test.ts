// Where a followed act stands, read from its order's pending acts: sending
// while its mark is there, done once it is gone, followed by its place in the
// queue when a decision gives it a new key, never "done" after it was held.
import { describe, expect, test } from 'vitest';
import type { OrderView } from '../src/lib/backend';
import { follow, progress, progressWords, track, type Following } from '../src/lib/progress';
import { customer, mockBackend, sku } from './helpers';

const words = progress('Allocation of 4 of X', 'Allocating 4 of X…', 'Allocated 4 of X.');

async function allocated() {
  const m = mockBackend();
  const o = m.remoteCreateOrder(
    { customer_id: customer(m, 'Tokyo Distributor').id, customer_po: null, ship_window_start: null, ship_window_end: null, notes: null },
    [[sku(m, 'Wren Tee', 'Black', 'M').id, 10, 0]],
  );
  const key = await m.allocate(o.id, o.lines[0].id, 4);
  const view = async () => (await m.getOrder(o.id))!;
  return { m, o, key, view };
}

describe('track', () => {
  test('sending while its mark is pending, done once a sync took it', async () => {
    const { m, key, view } = await allocated();
    let f: Following | null = track(follow(1, [key], words), await view());
    expect(f?.state).toBe('sending');
    expect(progressWords(f!, true)).toBe('Allocating 4 of X…');
    expect(progressWords(f!, null)).toBe('Allocating 4 of X…');
    expect(progressWords(f!, false)).toBe('Allocation of 4 of X saved on this computer; it will be sent when the server can be reached.');
    await m.syncNow();
    f = track(f!, await view());
    expect(f?.state).toBe('done');
    expect(progressWords(f!, false)).toBe('Allocated 4 of X.');
  });

  test('a new key for the same place in the queue is the same act, still on its way', async () => {
    const { key, view } = await allocated();
    const v = await view();
    const f = track(follow(1, [key], words), v)!;
    const rekeyed: OrderView = { ...v, pending: v.pending.map((p) => ({ ...p, idempotency_key: 'a-new-key' })) };
    expect(track(f, rekeyed)?.state).toBe('sending');
  });

  test('refused: the notice steps aside', async () => {
    const { key, view } = await allocated();
    const v = await view();
    const refused: OrderView = { ...v, badge: 'rejected', pending: v.pending.map((p) => ({ ...p, status: 'rejected' as const })) };
    expect(track(follow(1, [key], words), refused)).toBeNull();
  });

  test('held, then gone: never called done', async () => {
    const { key, view } = await allocated();
    const v = await view();
    const held = track(follow(1, [key], words), { ...v, badge: 'conflict' })!;
    expect(progressWords(held, true)).toBe('Allocation of 4 of X is held until you choose.');
    expect(track(held, { ...v, badge: 'synced', pending: [] })).toBeNull();
  });

  test('an order part of which needs a newer Holdfast: the act waits for the update', async () => {
    const { key, view } = await allocated();
    const f = track(follow(1, [key], words), { ...(await view()), needs_newer_app: true })!;
    expect(progressWords(f, true)).toBe('Allocation of 4 of X waits until Holdfast is updated.');
  });
});
