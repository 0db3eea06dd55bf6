// The Tauri implementation's contract with src-tauri: command names, argument
// keys and event names, checked against a fake `invoke`/`listen`.
import { describe, expect, test, vi } from 'vitest';
import { COMMANDS, EVENTS, createTauriBackend, type Backend } from '../src/lib/backend';
import { MockBackend } from '../src/lib/mock';

function fake() {
  const calls: [string, Record<string, unknown> | undefined][] = [];
  const listeners = new Map<string, (e: { payload: unknown }) => void>();
  const invoke = vi.fn(async (cmd: string, args?: Record<string, unknown>) => {
    calls.push([cmd, args]);
    return null as never;
  });
  const listen = vi.fn(async (event: string, handler: (e: { payload: unknown }) => void) => {
    listeners.set(event, handler);
    return () => listeners.delete(event);
  });
  const backend = createTauriBackend(invoke as never, listen as never);
  return { backend, calls, listeners };
}

describe('Tauri backend contract', () => {
  test('every command name and its argument keys', async () => {
    const { backend: b, calls } = fake();
    const o = 'order-1';
    const l = 'line-1';
    await b.signIn({ serverUrl: 'http://h', tenant: 'acme', email: 'e', password: 'p', deviceName: null, discardPending: false });
    await b.signOut();
    await b.getProfile();
    await b.getStatus();
    await b.syncNow();
    await b.listOrders();
    const query = { badge: 'pending' as const, status: null, q: 'po-7', offset: 120, limit: 60, selected: o };
    await b.listOrderPage(query);
    await b.getOrder(o);
    await b.createOrder({ customer_id: 'c', customer_po: null, ship_window_start: null, ship_window_end: null, notes: null });
    await b.editOrder(o, { notes: null });
    await b.addLine(o, 'sku', 3);
    await b.changeLine(o, l, 4);
    await b.removeLine(o, l);
    await b.allocate(o, l, 2);
    await b.release(o, l, 1);
    await b.confirmOrder(o);
    await b.cancelOrder(o);
    await b.reorderOrder(o);
    await b.getInvoice('inv-1');
    await b.getOrderHistory(o);
    await b.searchSkus('kestrel', 50);
    await b.searchSkus('ko-wi', 10, 'cust-1');
    await b.getSkus(['a', 'b']);
    await b.listCustomers();
    await b.listConflicts();
    await b.getConflict(o);
    await b.resolveConflict(o, { choose: { notes: 'mine' } });
    await b.listRejections();
    await b.resolveRejection(7, { choice: 'reduce_to_ats', qty: 6 });
    await b.listPending();
    await b.listHeld();
    await b.exportHeld();
    await b.markStartup('ready');
    expect(calls).toEqual([
      ['sign_in', { serverUrl: 'http://h', tenant: 'acme', email: 'e', password: 'p', deviceName: null, discardPending: false }],
      ['sign_out', undefined],
      ['get_profile', undefined],
      ['get_status', undefined],
      ['sync_now', undefined],
      ['list_orders', undefined],
      ['list_order_page', { query: { badge: 'pending', status: null, q: 'po-7', offset: 120, limit: 60, selected: o } }],
      ['get_order', { orderId: o }],
      ['create_order', { header: { customer_id: 'c', customer_po: null, ship_window_start: null, ship_window_end: null, notes: null } }],
      ['edit_order', { orderId: o, set: { notes: null } }],
      ['add_line', { orderId: o, skuId: 'sku', qtyOrdered: 3 }],
      ['change_line', { orderId: o, lineId: l, qtyOrdered: 4 }],
      ['remove_line', { orderId: o, lineId: l }],
      ['allocate', { orderId: o, lineId: l, qty: 2 }],
      ['release', { orderId: o, lineId: l, qty: 1 }],
      ['confirm_order', { orderId: o }],
      ['cancel_order', { orderId: o }],
      ['reorder_order', { orderId: o }],
      ['get_invoice', { invoiceId: 'inv-1' }],
      ['get_order_history', { orderId: o }],
      ['search_skus', { q: 'kestrel', limit: 50, customerId: null }],
      ['search_skus', { q: 'ko-wi', limit: 10, customerId: 'cust-1' }],
      ['get_skus', { skuIds: ['a', 'b'] }],
      ['list_customers', undefined],
      ['list_conflicts', undefined],
      ['get_conflict', { orderId: o }],
      ['resolve_conflict', { orderId: o, resolution: { choose: { notes: 'mine' } } }],
      ['list_rejections', undefined],
      ['resolve_rejection', { id: 7, choice: { choice: 'reduce_to_ats', qty: 6 } }],
      ['list_pending', undefined],
      ['list_held', undefined],
      ['export_held', undefined],
      ['mark_startup', { stage: 'ready' }],
    ]);
    // Every method of the interface is a command, and every command was called above.
    expect(new Set(calls.map(([c]) => c))).toEqual(new Set(Object.values(COMMANDS)));
  });

  test('events are `holdfast:changed` and `holdfast:sync-status`, payload passed through', async () => {
    const { backend, listeners } = fake();
    expect(EVENTS).toEqual({ changed: 'holdfast:changed', syncStatus: 'holdfast:sync-status' });
    const seen: unknown[] = [];
    const un = await backend.on('syncStatus', (s) => seen.push(s));
    await backend.on('changed', (p) => seen.push(['changed', p]));
    listeners.get('holdfast:sync-status')!({ payload: { pending: 3 } });
    listeners.get('holdfast:changed')!({ payload: null });
    expect(seen).toEqual([{ pending: 3 }, ['changed', null]]);
    un();
    expect(listeners.has('holdfast:sync-status')).toBe(false);
  });

  test('a rejected command becomes a BackendError', async () => {
    const invoke = vi.fn(async () => {
      throw { kind: 'offline', message: 'the server cannot be reached' };
    });
    const b = createTauriBackend(invoke as never, vi.fn() as never);
    await expect(b.syncNow()).rejects.toEqual({ kind: 'offline', message: 'the server cannot be reached' });
    const plain = createTauriBackend(
      vi.fn(async () => {
        throw 'boom';
      }) as never,
      vi.fn() as never,
    );
    await expect(plain.listOrders()).rejects.toEqual({ kind: 'internal', message: 'boom' });
  });

  test('the mock implements the same interface', () => {
    const mock: Backend = new MockBackend({ seed: 'empty' });
    for (const name of Object.keys(COMMANDS)) {
      expect(typeof (mock as unknown as Record<string, unknown>)[name], name).toBe('function');
    }
  });
});
