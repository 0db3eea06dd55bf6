// A screen reloads on every tick and after its own acts, and the backend may
// answer two reloads out of order. Each test holds one reload back while it
// reads an older state, lets a newer reload show the newer state, then lets
// the older one answer: the screen must still show the newer state (a badge
// that says "Pending · 1" after the act went through does not tell the truth).
import { screen, waitFor } from '@testing-library/svelte';
import { describe, expect, test } from 'vitest';
import ConflictView from '../src/components/ConflictView.svelte';
import Kept from '../src/components/Kept.svelte';
import OrderDesk from '../src/components/OrderDesk.svelte';
import OrderDocument from '../src/components/OrderDocument.svelte';
import OrderEditor from '../src/components/OrderEditor.svelte';
import OrderHistory from '../src/components/OrderHistory.svelte';
import PendingList from '../src/components/PendingList.svelte';
import Rejections from '../src/components/Rejections.svelte';
import type { HistoryEntry } from '../src/lib/backend';
import { conflictFixture, fieldDiff, heldFixture, insufficientAts } from '../src/lib/fixtures';
import { customer, drained, holdable, mockBackend, renderScreen, sku } from './helpers';

/** An order of Tokyo Distributor with one line of 10 Wren Tee, White S, on the server. */
function setup() {
  const m = mockBackend();
  const o = m.remoteCreateOrder(
    { customer_id: customer(m, 'Tokyo Distributor').id, customer_po: 'TK-1', ship_window_start: null, ship_window_end: null, notes: null },
    [[sku(m, 'Wren Tee', 'White', 'S').id, 10, 0]],
  );
  return { m, o, ...holdable(m) };
}

const text = (el: Element | null) => (el?.textContent ?? '').replace(/\s+/g, ' ').trim();

describe('a reload that answers after a newer one does not show', () => {
  test('order editor: the badge and lines stay as the newer reload found them', async () => {
    const { m, o, backend, hold } = setup();
    await m.allocate(o.id, o.lines[0].id, 4);
    const { live } = renderScreen(OrderEditor, { orderId: o.id, onback: () => {}, onconflict: () => {} }, backend);
    await live.start();
    const badge = () => text(document.querySelector('.editor-head [data-badge]'));
    await waitFor(() => expect(badge()).toBe('Pending · 1'));

    const older = hold('getOrder');
    m.poke();
    await older.arrived;
    await m.syncNow();
    await waitFor(() => expect(badge()).toBe('Synced'));

    older.release();
    await drained();
    expect(badge()).toBe('Synced');
    expect(text(screen.getByTestId('allocated'))).toBe('4');
    live.stop();
  });

  test('pending list: an act that went through stays off it', async () => {
    const { m, o, backend, hold } = setup();
    await m.allocate(o.id, o.lines[0].id, 4);
    const { live } = renderScreen(PendingList, { profile: await m.getProfile() }, backend);
    await live.start();
    await waitFor(() => expect(screen.getAllByTestId('pending-change')).toHaveLength(1));

    const older = hold('listPending');
    m.poke();
    await older.arrived;
    await m.syncNow();
    await waitFor(() => expect(screen.queryAllByTestId('pending-change')).toHaveLength(0));

    older.release();
    await drained();
    expect(screen.queryAllByTestId('pending-change')).toHaveLength(0);
    live.stop();
  });

  test('order desk: the row keeps its newer badge', async () => {
    const { m, o, backend, hold } = setup();
    await m.allocate(o.id, o.lines[0].id, 4);
    const { live } = renderScreen(OrderDesk, { onopen: () => {}, onnew: () => {} }, backend);
    await live.start();
    const badge = () => document.querySelector(`#order-${o.id} [data-badge]`)?.getAttribute('data-badge');
    await waitFor(() => expect(badge()).toBe('pending'));

    const older = hold('listOrderPage');
    m.poke();
    await older.arrived;
    await m.syncNow();
    await waitFor(() => expect(badge()).toBe('synced'));

    older.release();
    await drained();
    expect(badge()).toBe('synced');
    live.stop();
  });

  test('order confirmation: not marked pending again once accepted', async () => {
    const { m, o, backend, hold } = setup();
    await m.confirmOrder(o.id);
    const { live } = renderScreen(OrderDocument, { orderId: o.id, profile: (await m.getProfile())!, onclose: () => {} }, backend);
    await live.start();
    await screen.findByTestId('pending-mark');

    const older = hold('getOrder');
    m.poke();
    await older.arrived;
    await m.syncNow();
    await waitFor(() => expect(screen.queryByTestId('pending-mark')).toBeNull());

    older.release();
    await drained();
    expect(screen.queryByTestId('pending-mark')).toBeNull();
    expect(text(screen.getByTestId('document-status'))).toBe('Confirmed');
    live.stop();
  });

  test('refused changes: one dealt with stays gone', async () => {
    const { m, o, backend, hold } = setup();
    const wren = sku(m, 'Wren Tee', 'White', 'S');
    const r = m.putRejection(o.id, { kind: 'allocate', line_id: o.lines[0].id, qty: 9 }, insufficientAts({ skuId: wren.id, requested: 9, atsNow: 6 }));
    const { live } = renderScreen(Rejections, { onopenorder: () => {} }, backend);
    await live.start();
    const cards = () => document.querySelectorAll('article.rejection');
    await waitFor(() => expect(cards()).toHaveLength(1));

    const older = hold('listRejections');
    m.poke();
    await older.arrived;
    await m.resolveRejection(r.id, { choice: 'dismiss' });
    m.poke();
    await waitFor(() => expect(cards()).toHaveLength(0));

    older.release();
    await drained();
    expect(cards()).toHaveLength(0);
    live.stop();
  });

  test('kept for a newer Holdfast: nothing kept once it is read again', async () => {
    const { m, o, backend, hold } = setup();
    m.putHeld(heldFixture({ kind: 'document', what: 'Order for Tokyo Distributor, PO TK-1', orderId: o.id, since: '2026-12-01T09:30:00Z' }));
    const { live } = renderScreen(Kept, { onopenorder: () => {} }, backend);
    await live.start();
    await waitFor(() => expect(screen.getAllByTestId('kept-item')).toHaveLength(1));

    const older = hold('listHeld');
    m.poke();
    await older.arrived;
    m.clearHeld();
    await waitFor(() => expect(screen.queryAllByTestId('kept-item')).toHaveLength(0));

    older.release();
    await drained();
    expect(screen.queryAllByTestId('kept-item')).toHaveLength(0);
    live.stop();
  });

  test('conflict view: a conflict resolved meanwhile does not come back', async () => {
    const { m, o, backend, hold } = setup();
    await m.editOrder(o.id, { notes: 'rush' });
    m.remoteEditOrder(o.id, { customer_po: 'TK-2' });
    const mine = (await m.getOrder(o.id))!;
    m.putConflict(
      conflictFixture({
        base: o,
        mine: mine.order,
        theirs: m.server.orders.get(o.id)!,
        held: mine.pending.length,
        fields: [
          fieldDiff('customer_po', { base: 'TK-1', mine: 'TK-1', theirs: 'TK-2' }, { mine_changed: false, theirs_changed: true, collides: false }),
          fieldDiff('notes', { base: null, mine: 'rush', theirs: null }, { mine_changed: true, theirs_changed: false, collides: false }),
        ],
      }),
    );
    const { live } = renderScreen(ConflictView, { orderId: o.id, onclose: () => {} }, backend);
    await live.start();
    await screen.findByTestId('conflict-title');

    const older = hold('getConflict');
    m.poke();
    await older.arrived;
    await m.resolveConflict(o.id, 'rebase');
    m.poke();
    await screen.findByRole('heading', { name: 'No open conflict on this order' });

    older.release();
    await drained();
    expect(screen.queryByTestId('conflict-title')).toBeNull();
    live.stop();
  });

  test('order history: a version seen stays listed', async () => {
    const { m, o, backend, hold } = setup();
    const entry = (version: number): HistoryEntry => ({
      version,
      at: '2026-12-01T09:00:00Z',
      by: null,
      by_name: 'Dana',
      event_type: version === 1 ? 'order.created' : 'order.cancelled',
      facts: {},
      idempotency_key: null,
      deliveries: [],
    });
    m.histories.set(o.id, { entries: [entry(1)] });
    const { live } = renderScreen(OrderHistory, { orderId: o.id, view: await m.getOrder(o.id) }, backend);
    await live.start();
    await waitFor(() => expect(screen.getAllByTestId('history-entry')).toHaveLength(1));

    const older = hold('getOrderHistory');
    m.poke();
    await older.arrived;
    m.histories.set(o.id, { entries: [entry(1), entry(2)] });
    m.poke();
    await waitFor(() => expect(screen.getAllByTestId('history-entry')).toHaveLength(2));

    older.release();
    await drained();
    expect(screen.getAllByTestId('history-entry')).toHaveLength(2);
    live.stop();
  });
});
