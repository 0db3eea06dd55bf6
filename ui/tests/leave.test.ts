// Closing the order editor loses nothing typed: it commits what is in the
// fields (the focused one too) and waits for those acts before the next
// screen opens; what cannot be saved stops it with a message, and leaving
// again discards it knowingly.
import { screen, waitFor } from '@testing-library/svelte';
import { describe, expect, test, vi } from 'vitest';
import OrderEditor from '../src/components/OrderEditor.svelte';
import type { MockBackend } from '../src/lib/mock';
import { customer, mockBackend, renderApp, renderScreen, sku, waitFocus, withLatency } from './helpers';

const calls = (m: MockBackend, name: string) => m.calls.filter((c) => c.name === name);
const errorText = () => screen.queryByTestId('editor-error')?.textContent ?? null;

function existingOrder(m: MockBackend) {
  return m.remoteCreateOrder(
    { customer_id: customer(m, 'Tokyo Distributor').id, customer_po: 'T-1', ship_window_start: '2026-03-01', ship_window_end: null, notes: null },
    [[sku(m, 'Wren Tee', 'Black', 'M').id, 10, 0]],
  );
}

/** The app over a backend with latency, the order open in the editor. */
async function appOnOrder() {
  const m = mockBackend();
  const o = existingOrder(m);
  const slow = withLatency(m);
  const r = renderApp(slow.backend);
  await waitFocus(await screen.findByRole('listbox', { name: /Orders/ }));
  await screen.findByText('T-1');
  await r.user.keyboard('{Enter}');
  await screen.findByLabelText(/Quantity ordered, Wren Tee · Black · M/);
  await waitFocus(screen.getByRole('combobox', { name: /Find SKU/ }));
  return { m, o, slow, ...r };
}

describe('closing the editor', () => {
  test('Alt+D with an edit still in the focused field: it is queued, and the desk opens only once it is', async () => {
    const { m, o, slow, user } = await appOnOrder();
    const po = screen.getByLabelText('Customer PO');
    po.focus();
    await user.clear(po);
    await user.keyboard('T-77');
    slow.log.length = 0;
    await user.keyboard('{Alt>}d{/Alt}');
    await screen.findByRole('listbox', { name: /Orders/ });
    await slow.idle();
    expect(calls(m, 'editOrder').map((c) => c.args)).toEqual([[o.id, { customer_po: 'T-77' }]]);
    // The edit answered before the desk asked for its rows.
    const done = slow.log.indexOf('<editOrder');
    const desk = slow.log.indexOf('>listOrderPage');
    expect(done).toBeGreaterThanOrEqual(0);
    expect(desk).toBeGreaterThan(done);
    await waitFor(() => expect(screen.getByText('T-77')).toBeTruthy());
  });

  test('the nav bar and Alt+P wait the same way, for a line quantity typed and not left', async () => {
    const { m, o, slow, user } = await appOnOrder();
    const qty = screen.getByLabelText(/Quantity ordered, Wren Tee · Black · M/);
    qty.focus();
    await user.clear(qty);
    await user.keyboard('14');
    slow.log.length = 0;
    await user.keyboard('{Alt>}p{/Alt}');
    await screen.findByRole('heading', { name: 'Changes not yet on the server' });
    await slow.idle();
    expect(calls(m, 'changeLine').map((c) => c.args)).toEqual([[o.id, o.lines[0].id, 14]]);
    expect(slow.log.indexOf('>listPending')).toBeGreaterThan(slow.log.indexOf('<changeLine'));
  });

  test('a date that is not one stops the close with a message; leaving again discards it', async () => {
    const { m, user } = await appOnOrder();
    const end = screen.getByLabelText('Ship by');
    end.focus();
    await user.keyboard('13/45');
    await user.keyboard('{Alt>}d{/Alt}');
    await waitFor(() => expect(errorText()).toMatch(/^Not saved yet: Ship by “13\/45” is not a date/));
    expect(errorText()).toMatch(/Fix it to keep it, or leave again to discard it\.$/);
    expect(screen.queryByRole('listbox', { name: /Orders/ })).toBeNull();
    expect(calls(m, 'editOrder')).toHaveLength(0);
    // Leaving again, unchanged: the desk, without the date.
    await user.keyboard('{Alt>}d{/Alt}');
    await screen.findByRole('listbox', { name: /Orders/ });
    expect(calls(m, 'editOrder')).toHaveLength(0);
  });

  test('a ship window that ends before it starts stops the close; fixed, it is saved on the way out', async () => {
    const { m, o, user } = await appOnOrder();
    const end = screen.getByLabelText('Ship by');
    end.focus();
    await user.keyboard('2026-02-01');
    await user.keyboard('{Escape}');
    await waitFor(() => expect(errorText()).toMatch(/The ship window ends before it starts\./));
    expect(screen.queryByRole('listbox', { name: /Orders/ })).toBeNull();
    end.focus();
    await user.clear(end);
    await user.keyboard('2026-04-01');
    // The form changed since the warning: this is not "leave again", it is saved.
    await user.click(screen.getByRole('button', { name: /^Desk/ }));
    await screen.findByRole('listbox', { name: /Orders/ });
    expect(calls(m, 'editOrder').map((c) => c.args)).toEqual([[o.id, { ship_window_end: '2026-04-01' }]]);
  });

  test('a new order with no customer but a PO typed is not dropped silently', async () => {
    const m = mockBackend();
    const { user } = renderApp(m);
    await waitFocus(await screen.findByRole('listbox', { name: /Orders/ }));
    await user.keyboard('n');
    await waitFocus(await screen.findByRole('combobox', { name: /Customer/ }));
    screen.getByLabelText('Customer PO').focus();
    await user.keyboard('PO-5');
    await user.keyboard('{Alt>}d{/Alt}');
    await waitFor(() => expect(errorText()).toMatch(/^Not saved yet: This new order has no customer yet\./));
    expect(screen.queryByRole('listbox', { name: /Orders/ })).toBeNull();
    await user.keyboard('{Alt>}d{/Alt}');
    await screen.findByRole('listbox', { name: /Orders/ });
    expect(calls(m, 'createOrder')).toHaveLength(0);
  });

  test('a new order with nothing typed closes at once', async () => {
    const m = mockBackend();
    const { user } = renderApp(m);
    await waitFocus(await screen.findByRole('listbox', { name: /Orders/ }));
    await user.keyboard('n');
    await waitFocus(await screen.findByRole('combobox', { name: /Customer/ }));
    await user.keyboard('{Escape}');
    await screen.findByRole('listbox', { name: /Orders/ });
    expect(calls(m, 'createOrder')).toHaveLength(0);
  });

  test('a new order with a customer and an unreadable date: the message, then fixed, it is created with it', async () => {
    const m = mockBackend();
    const { user } = renderApp(m);
    await waitFocus(await screen.findByRole('listbox', { name: /Orders/ }));
    await user.keyboard('n');
    await waitFocus(await screen.findByRole('combobox', { name: /Customer/ }));
    await user.keyboard('aus');
    await user.tab();
    await user.tab();
    await user.keyboard('soon');
    await user.keyboard('{Alt>}d{/Alt}');
    await waitFor(() => expect(errorText()).toMatch(/Ship from “soon” is not a date/));
    expect(calls(m, 'createOrder')).toHaveLength(0);
    const start = screen.getByLabelText('Ship from');
    await user.clear(start);
    await user.keyboard('3/2/26');
    await user.keyboard('{Alt>}d{/Alt}');
    await screen.findByRole('listbox', { name: /Orders/ });
    expect(calls(m, 'createOrder').map((c) => c.args[0])).toMatchObject([{ customer_id: customer(m, 'Austin Boutique').id, ship_window_start: '2026-03-02' }]);
  });

  test('a size run with quantities not added stops the close; Enter adds them, or leaving again drops them', async () => {
    const { m, user } = await appOnOrder();
    await user.keyboard('heron navy');
    await screen.findByRole('listbox', { name: 'Styles and colours' });
    await user.keyboard('{Enter}');
    await waitFocus(await screen.findByLabelText(/Quantity, size 28/));
    await user.keyboard('3');
    await user.keyboard('{Alt>}d{/Alt}');
    await waitFor(() => expect(errorText()).toMatch(/The size run of Heron Chino Navy has quantities not added yet \(Enter adds them\)\./));
    expect(screen.queryByRole('listbox', { name: /Orders/ })).toBeNull();
    await user.keyboard('{Alt>}d{/Alt}');
    await screen.findByRole('listbox', { name: /Orders/ });
    expect(calls(m, 'addLine')).toHaveLength(0);
  });

  test('Back in the editor alone: onback is called once the edit has answered', async () => {
    const m = mockBackend();
    const o = existingOrder(m);
    const slow = withLatency(m);
    const onback = vi.fn(() => slow.log.slice());
    const { user } = renderScreen(OrderEditor, { orderId: o.id, onback, onconflict: () => {} }, slow.backend);
    const notes = await screen.findByLabelText('Notes');
    await waitFocus(screen.getByRole('combobox', { name: /Find SKU/ }));
    notes.focus();
    await user.keyboard('Leave at the dock');
    await user.keyboard('{Escape}');
    await waitFor(() => expect(onback).toHaveBeenCalledTimes(1));
    expect(onback.mock.results[0].value).toContain('<editOrder');
    expect(calls(m, 'editOrder').map((c) => c.args)).toEqual([[o.id, { notes: 'Leave at the dock' }]]);
  });
});
