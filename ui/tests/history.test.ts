// The order's history panel: each version in words, the partner deliveries
// with their webhook-id, the act's key only behind Details, and an honest
// word when the server cannot be reached.
import { screen, waitFor, within } from '@testing-library/svelte';
import { describe, expect, test } from 'vitest';
import OrderHistory from '../src/components/OrderHistory.svelte';
import { customer, mockBackend, renderScreen, sku } from './helpers';

const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i;

describe('order history', () => {
  test('versions in words, deliveries with their webhook-id, keys behind Details', async () => {
    const m = mockBackend();
    const wren = sku(m, 'Wren Tee', 'White', 'S');
    const o = m.remoteCreateOrder(
      { customer_id: customer(m, 'Austin Boutique').id, customer_po: 'AB-9', ship_window_start: null, ship_window_end: null, notes: null },
      [[wren.id, 3, 0]],
    );
    const partner = { partner_id: crypto.randomUUID(), partner_name: 'Acme ERP' };
    const key = crypto.randomUUID();
    m.histories.set(o.id, {
      entries: [
        { version: 1, at: '2026-12-01T09:00:00Z', by: null, by_name: 'Dana', event_type: 'order.created', facts: { customer_id: o.customer_id }, idempotency_key: crypto.randomUUID(), deliveries: [] },
        {
          version: 2,
          at: '2026-12-01T09:01:00Z',
          by: null,
          by_name: 'Dana',
          event_type: 'order.updated',
          facts: { change: 'line_added', line_id: o.lines[0].id, sku_id: wren.id, qty_ordered: 3, unit_price: 1400 },
          idempotency_key: crypto.randomUUID(),
          deliveries: [{ ...partner, webhook_id: 'evt_41', state: 'dead_lettered', attempts: 12, last_status: 500, delivered_at: null }],
        },
        {
          version: 3,
          at: '2026-12-01T09:02:00Z',
          by: null,
          by_name: 'Priya',
          event_type: 'order.line_allocated',
          facts: { line_id: o.lines[0].id, sku_id: wren.id, qty: 2, ats_after: 4 },
          idempotency_key: key,
          deliveries: [{ ...partner, webhook_id: 'evt_42', state: 'delivered', attempts: 1, last_status: 200, delivered_at: '2026-12-01T09:02:01Z' }],
        },
      ],
    });
    renderScreen(OrderHistory, { orderId: o.id, view: await m.getOrder(o.id) }, m);

    const entries = await screen.findAllByTestId('history-entry');
    expect(entries.map((e) => e.querySelector('strong')!.textContent)).toEqual([
      'Created the order',
      'Added Wren Tee · White · S (WT-W-S) × 3 at $14.00',
      'Allocated 2 of Wren Tee · White · S (WT-W-S)',
    ]);
    expect(entries[2].textContent).toContain('Priya');
    const delivered = within(entries[2]).getByTestId('delivery');
    expect(delivered.dataset.state).toBe('delivered');
    expect(delivered.textContent).toMatch(/Acme ERP: delivered/);
    expect(delivered.textContent).toContain('evt_42');
    expect(within(entries[1]).getByTestId('delivery').textContent).toMatch(/failed — an operator must requeue it after 12 attempts \(last answer 500\)/);

    // The key of the act is there for a support trace, behind a closed Details.
    const details = entries[2].querySelector('details')!;
    expect(details.open).toBe(false);
    expect(details.textContent).toContain(key);
    // Nothing else on the panel is an internal id.
    for (const e of entries) {
      const visible = [...e.childNodes].filter((n) => n.nodeName !== 'DETAILS').map((n) => n.textContent).join(' ');
      expect(visible).not.toMatch(UUID);
    }
  });

  test('offline: the history lives on the server, said in words', async () => {
    const m = mockBackend();
    const o = m.remoteCreateOrder(
      { customer_id: customer(m, 'Austin Boutique').id, customer_po: 'AB-10', ship_window_start: null, ship_window_end: null, notes: null },
      [],
    );
    m.setNetwork(false);
    renderScreen(OrderHistory, { orderId: o.id, view: null }, m);
    await waitFor(() => expect(screen.getByTestId('history').textContent).toMatch(/kept on the server, which cannot be reached now/));
    expect(screen.getByTestId('history').textContent).not.toMatch(/mock network/);
  });
});
