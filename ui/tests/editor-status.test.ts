// The editor tells the truth about an order's state: a queued confirm is
// "Confirming (pending)" until the server answers, the invoice and its
// payment show once there is one, a conflict names the colleague from the
// conflict itself, and a reorder opens a new draft in one act.
import { screen, waitFor } from '@testing-library/svelte';
import { describe, expect, test, vi } from 'vitest';
import OrderEditor from '../src/components/OrderEditor.svelte';
import { conflictFixture, fieldDiff } from '../src/lib/fixtures';
import { customer, mockBackend, renderScreen, sku } from './helpers';

function setup() {
  const m = mockBackend();
  const o = m.remoteCreateOrder(
    { customer_id: customer(m, 'Austin Boutique').id, customer_po: 'AB-7', ship_window_start: null, ship_window_end: null, notes: null },
    [[sku(m, 'Wren Tee', 'White', 'S').id, 2, 0]],
  );
  return { m, o };
}

describe('order editor status', () => {
  test('a queued confirm is pending until the server answers; then the invoice shows', async () => {
    const { m, o } = setup();
    m.setNetwork(false);
    const { live } = renderScreen(OrderEditor, { orderId: o.id, onback: () => {}, onconflict: () => {} }, m);
    await live.start();
    await waitFor(() => expect(screen.getByTestId('order-status').textContent).toBe('Draft'));
    await m.confirmOrder(o.id);
    await waitFor(() => expect(screen.getByTestId('order-status').textContent).toBe('Confirming (pending)'));
    expect(screen.queryByTestId('invoice')).toBeNull();

    m.setNetwork(true);
    await waitFor(() => expect(screen.getByTestId('order-status').textContent).toBe('Confirmed'));
    await waitFor(() => expect(screen.getByTestId('invoice').textContent).toMatch(/Invoice \$[\d.,]+: awaiting payment/));
    m.server.pay(m.server.orders.get(o.id)!.invoice_id!);
    await m.syncNow();
    await waitFor(() => expect(screen.getByTestId('invoice').textContent).toMatch(/paid/));
    live.stop();
  });

  test("the conflict banner names the colleague the conflict names, not this desk's user", async () => {
    const { m, o } = setup();
    await m.editOrder(o.id, { notes: 'rush' });
    m.remoteEditOrder(o.id, { notes: 'hold' });
    const mine = (await m.getOrder(o.id))!;
    const theirs = { ...m.server.orders.get(o.id)!, updated_by_name: 'Priya' };
    m.putConflict(
      conflictFixture({
        base: o,
        mine: { ...mine.order, updated_by_name: 'Dana' },
        theirs,
        held: 1,
        fields: [fieldDiff('notes', { base: null, mine: 'rush', theirs: 'hold' }, { mine_changed: true, theirs_changed: true, collides: true })],
      }),
    );
    renderScreen(OrderEditor, { orderId: o.id, onback: () => {}, onconflict: () => {} }, m);
    await waitFor(() => expect(screen.getByRole('alert').textContent).toMatch(/^Priya changed this order on another desk/));
  });

  test('reorder: one act opens the new draft', async () => {
    const { m, o } = setup();
    const onreorder = vi.fn();
    const { user } = renderScreen(OrderEditor, { orderId: o.id, onback: () => {}, onconflict: () => {}, onreorder }, m);
    await screen.findByTestId('order-status');
    await user.dblClick(screen.getByRole('button', { name: /^Reorder/ }));
    await waitFor(() => expect(onreorder).toHaveBeenCalledTimes(1));
    const [id, skipped] = onreorder.mock.calls[0];
    expect(skipped).toEqual([]);
    const copy = (await m.getOrder(id))!;
    expect(copy.order.customer_id).toBe(o.customer_id);
    expect(copy.order.lines.map((l) => [l.sku_id, l.qty_ordered])).toEqual(o.lines.map((l) => [l.sku_id, l.qty_ordered]));
    expect(m.calls.filter((c) => c.name === 'reorderOrder')).toHaveLength(1);
  });
});
