// The order editor, driven by the keyboard only, over the mock backend: what
// an account manager does with a fax in one hand and the phone in the other.
import { screen, waitFor, within } from '@testing-library/svelte';
import { describe, expect, test } from 'vitest';
import { customer, focused, mockBackend, renderApp, sku, waitFocus } from './helpers';

const value = (label: string | RegExp) => (screen.getByLabelText(label) as HTMLInputElement).value;

async function openNewOrder() {
  const m = mockBackend();
  const r = renderApp(m);
  const list = await screen.findByRole('listbox', { name: /Orders/ });
  await waitFocus(list);
  await r.user.keyboard('n');
  const customerBox = await screen.findByRole('combobox', { name: /Customer/ });
  await waitFocus(customerBox);
  return { m, ...r, customerBox };
}

describe('order editor keyboard flow', () => {
  test('type customer, Tab through the header, size run, Enter adds lines, Alt+A allocates', async () => {
    const { m, user, customerBox } = await openNewOrder();

    // Customer type-ahead: "aus" + Tab takes Austin Boutique and moves on.
    await user.keyboard('aus');
    expect(screen.getByRole('option', { name: 'Austin Boutique' })).toBeTruthy();
    await user.tab();
    expect((customerBox as HTMLInputElement).value).toBe('Austin Boutique');
    expect(focused()).toBe(screen.getByLabelText('Customer PO'));

    await user.keyboard('PO-7781');
    await user.tab();
    expect(focused()).toBe(screen.getByLabelText('Ship from'));
    await user.keyboard('2026-03-02');
    await user.tab();
    expect(focused()).toBe(screen.getByLabelText('Ship by'));
    await user.keyboard('3/20/26');
    await user.tab();
    expect(value('Ship by')).toBe('2026-03-20'); // normalised when the field is left
    expect(focused()).toBe(screen.getByLabelText('Notes'));
    await user.keyboard('Rush, call Jo');
    await user.tab();

    // SKU search by style and colour, Enter opens the size run.
    const skuBox = screen.getByRole('combobox', { name: /Find SKU/ });
    expect(focused()).toBe(skuBox);
    await user.keyboard('kestrel indigo');
    const groups = await screen.findByRole('listbox', { name: 'Styles and colours' });
    await waitFor(() => expect(within(groups).getAllByRole('option')).toHaveLength(1));
    await user.keyboard('{Enter}');
    const xs = await screen.findByLabelText(/Quantity, size XS/);
    await waitFocus(xs);

    // Tab moves across sizes; Enter adds a line for every size with a quantity.
    await user.keyboard('2');
    await user.tab();
    expect(focused()?.dataset.size).toBe('S');
    await user.keyboard('3');
    await user.tab();
    expect(focused()?.dataset.size).toBe('M');
    await user.keyboard('4');
    await user.keyboard('{Enter}');

    await waitFor(() => expect(document.querySelectorAll('table.lines tbody tr')).toHaveLength(3));
    await waitFocus(screen.getByRole('combobox', { name: /Find SKU/ }));

    // The order reached the engine with its header, created once, then the lines.
    const [v] = await m.listOrders();
    expect(v.order).toMatchObject({
      customer_id: customer(m, 'Austin Boutique').id,
      customer_po: 'PO-7781',
      ship_window_start: '2026-03-02',
      ship_window_end: '2026-03-20',
      notes: 'Rush, call Jo',
    });
    const bySku = (size: string) => sku(m, 'Kestrel Overshirt', 'Washed Indigo', size).id;
    expect(v.order.lines.map((l) => [l.sku_id, l.qty_ordered])).toEqual([
      [bySku('XS'), 2],
      [bySku('S'), 3],
      [bySku('M'), 4],
    ]);
    expect(m.calls.filter((c) => c.name === 'createOrder')).toHaveLength(1);
    expect(screen.getByTestId('total-units').textContent).toBe('9');

    // Live ATS per line: M has 6; after allocating 4 this desk can still promise 2.
    const row = (size: string) => document.querySelector(`tr[data-sku$="· ${size}"]`) as HTMLElement;
    expect(within(row('M')).getByTestId('ats').textContent!.trim()).toBe('6');
    await user.keyboard('{Alt>}a{/Alt}');
    await waitFor(() => expect(m.calls.filter((c) => c.name === 'allocate')).toHaveLength(3));
    await waitFor(() => expect(within(row('M')).getByTestId('ats').textContent!.trim()).toBe('2'));
    expect(within(row('M')).getByTestId('allocated').textContent).toBe('4');

    // Synced: the server's ATS dropped too, and the badge says so.
    await m.syncNow();
    await waitFor(() => expect(document.querySelector('.editor-head [data-badge]')?.getAttribute('data-badge')).toBe('synced'));
    expect(sku(m, 'Kestrel Overshirt', 'Washed Indigo', 'M').ats).toBe(2);
  });

  test('a size typed in the search starts the grid on that size; Escape closes the grid', async () => {
    const { user } = await openNewOrder();
    await user.keyboard('tokyo');
    await user.tab();
    screen.getByRole('combobox', { name: /Find SKU/ }).focus();
    await user.keyboard('heron navy 32');
    await screen.findByRole('listbox', { name: 'Styles and colours' });
    await user.keyboard('{Enter}');
    const c32 = await screen.findByLabelText(/Quantity, size 32/);
    await waitFocus(c32);
    // Every size of the style + colour is in the grid, in size order.
    expect([...document.querySelectorAll<HTMLInputElement>('input[data-size]')].map((i) => i.dataset.size)).toEqual([
      '28',
      '30',
      '32',
      '34',
      '36',
    ]);
    await user.keyboard('{Escape}');
    await waitFor(() => expect(document.querySelector('input[data-size]')).toBeNull());
    expect(focused()).toBe(screen.getByRole('combobox', { name: /Find SKU/ }));
    // Escape in the grid closed the grid only, not the editor.
    expect(screen.getByRole('heading', { level: 1 }).textContent).toContain('Tokyo Distributor');
  });

  test('the size run shows live ATS: another desk allocates while you type', async () => {
    const { m, user } = await openNewOrder();
    await user.keyboard('aus');
    await user.tab();
    screen.getByRole('combobox', { name: /Find SKU/ }).focus();
    await user.keyboard('kestrel indigo');
    await screen.findByRole('listbox', { name: 'Styles and colours' });
    await user.keyboard('{Enter}');
    await waitFocus(await screen.findByLabelText(/Quantity, size XS/));
    await user.keyboard('1');
    await user.tab();
    await user.tab();
    const mCell = focused()!;
    expect(mCell.dataset.size).toBe('M');
    await user.keyboard('5');
    expect(screen.getByTestId('grid-ats-M').textContent).toBe('6');
    m.remoteAllocate(sku(m, 'Kestrel Overshirt', 'Washed Indigo', 'M').id, 4);
    await waitFor(() => expect(screen.getByTestId('grid-ats-M').textContent).toBe('2'), { timeout: 1000 });
    // What was typed stays, and so does the cursor.
    expect(focused()).toBe(mCell);
    expect((screen.getByLabelText(/Quantity, size XS/) as HTMLInputElement).value).toBe('1');
    expect((mCell as HTMLInputElement).value).toBe('5');
  });

  test('a bad quantity in the grid is refused and nothing is added', async () => {
    const { m, user } = await openNewOrder();
    await user.keyboard('aus');
    await user.tab();
    screen.getByRole('combobox', { name: /Find SKU/ }).focus();
    await user.keyboard('wren white');
    await screen.findByRole('listbox', { name: 'Styles and colours' });
    await user.keyboard('{Enter}');
    await waitFocus(await screen.findByLabelText(/Quantity, size XS/));
    await user.keyboard('2x{Enter}');
    expect((await screen.findByRole('alert')).textContent).toMatch(/not a whole number/);
    expect(m.calls.filter((c) => c.name === 'addLine' || c.name === 'createOrder')).toEqual([]);
  });

  test('no customer: adding lines asks for one and creates nothing', async () => {
    const { m, user } = await openNewOrder();
    screen.getByRole('combobox', { name: /Find SKU/ }).focus();
    await user.keyboard('wren white');
    await screen.findByRole('listbox', { name: 'Styles and colours' });
    await user.keyboard('{Enter}');
    await waitFocus(await screen.findByLabelText(/Quantity, size XS/));
    await user.keyboard('5{Enter}');
    expect((await screen.findByTestId('editor-error')).textContent).toMatch(/Choose a customer/);
    expect(focused()).toBe(screen.getByRole('combobox', { name: /Customer/ }));
    expect(m.calls.filter((c) => c.name === 'createOrder')).toEqual([]);
  });

  test('editing a line quantity with Enter, and removing a line with Alt+Delete', async () => {
    const m = mockBackend();
    const o = m.remoteCreateOrder(
      { customer_id: customer(m, 'Tokyo Distributor').id, customer_po: 'T-1', ship_window_start: null, ship_window_end: null, notes: null },
      [
        [sku(m, 'Wren Tee', 'Black', 'M').id, 10, 0],
        [sku(m, 'Wren Tee', 'Black', 'L').id, 5, 0],
      ],
    );
    const { user } = renderApp(m);
    await waitFocus(await screen.findByRole('listbox', { name: /Orders/ }));
    await user.keyboard('{Enter}');
    await screen.findByRole('combobox', { name: /Find SKU/ });
    await user.keyboard('{Alt>}l{/Alt}');
    const qty = screen.getByLabelText(/Quantity ordered, Wren Tee · Black · M/) as HTMLInputElement;
    await waitFocus(qty);
    await user.clear(qty);
    await user.keyboard('12{Enter}');
    await waitFor(() => expect(m.calls.find((c) => c.name === 'changeLine')?.args).toEqual([o.id, o.lines[0].id, 12]));
    screen.getByLabelText(/Quantity ordered, Wren Tee · Black · L/).focus();
    await user.keyboard('{Alt>}{Delete}{/Alt}');
    await waitFor(() => expect(m.calls.find((c) => c.name === 'removeLine')?.args).toEqual([o.id, o.lines[1].id]));
    await waitFor(() => expect(document.querySelectorAll('table.lines tbody tr')).toHaveLength(1));
  });

  test('leaving with Alt+D keeps what was typed', async () => {
    const { m, user } = await openNewOrder();
    await user.keyboard('little');
    await user.tab();
    await user.keyboard('LF-9');
    await user.keyboard('{Alt>}d{/Alt}');
    await screen.findByRole('listbox', { name: /Orders/ });
    await waitFor(async () => expect((await m.listOrders()).map((v) => v.order.customer_po)).toEqual(['LF-9']));
    expect((await m.listOrders())[0].order.customer_id).toBe(customer(m, 'Little Fern Kids').id);
  });

  test('Escape from a new order with a customer keeps it; Alt+X asks before cancelling', async () => {
    const { m, user } = await openNewOrder();
    await user.keyboard('tok');
    await user.tab();
    await user.keyboard('{Escape}');
    await screen.findByRole('listbox', { name: /Orders/ });
    const [v] = await m.listOrders();
    expect(v.order.customer_id).toBe(customer(m, 'Tokyo Distributor').id);

    await user.keyboard('{Enter}');
    await screen.findByRole('combobox', { name: /Find SKU/ });
    await user.keyboard('{Alt>}x{/Alt}');
    const dialog = await screen.findByRole('alertdialog');
    await waitFocus(within(dialog).getByRole('button', { name: 'Keep the order' }));
    await user.keyboard('{Escape}');
    await waitFor(() => expect(screen.queryByRole('alertdialog')).toBeNull());
    expect(m.calls.filter((c) => c.name === 'cancelOrder')).toEqual([]);
    await user.keyboard('{Alt>}x{/Alt}');
    await user.click(await screen.findByRole('button', { name: 'Cancel the order' }));
    await waitFor(() => expect(m.calls.filter((c) => c.name === 'cancelOrder')).toHaveLength(1));
  });
});
