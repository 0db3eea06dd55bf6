// v1.1 on the desk, over the mock backend: line prices and the order total
// (expected while the add is pending, the server's once it lands, a
// difference shown in words), SKU search by code, discontinued SKUs and
// inactive customers, and being signed out by an administrator.
import { screen, waitFor, within } from '@testing-library/svelte';
import { describe, expect, test } from 'vitest';
import OrderEditor from '../src/components/OrderEditor.svelte';
import { MockBackend } from '../src/lib/mock';
import { customer, mockBackend, renderApp, renderScreen, sku, waitFocus } from './helpers';

const cell = (row: Element, id: string) => row.querySelector(`[data-testid=${id}]`)?.textContent?.replace(/\s+/g, ' ').trim();
const lineRow = () => document.querySelector('table.lines tbody tr[data-line-id]') as HTMLElement;
const total = () => document.querySelector('[data-testid=total-amount]')?.textContent?.trim();

/** Tokyo Distributor on its own price list: Kestrel Overshirt Washed Indigo M at $42.00 (wholesale $48.00). */
function withPriceList() {
  const m = mockBackend();
  const tokyo = customer(m, 'Tokyo Distributor');
  const kestrel = sku(m, 'Kestrel Overshirt', 'Washed Indigo', 'M');
  const list = 'list-tokyo';
  m.server.priceLists.set(list, new Map([[kestrel.id, 4_200]]));
  tokyo.price_list_id = list;
  return { m, tokyo, kestrel, list };
}

describe('line prices and the total', () => {
  test('a pending line shows the expected price; the server’s price replaces it and a difference is said, not hidden', async () => {
    const { m, tokyo, kestrel, list } = withPriceList();
    expect(kestrel.wholesale_price).toBe(4_800);
    const orderId = await m.createOrder({ customer_id: tokyo.id, customer_po: null, ship_window_start: null, ship_window_end: null, notes: null });
    await m.addLine(orderId, kestrel.id, 3);
    const { live } = renderScreen(OrderEditor, { orderId, onback: () => {}, onconflict: () => {} }, m);

    // Pending: the customer's list price, marked expected, and the total over the lines.
    await waitFor(() => expect(cell(lineRow(), 'unit-price')).toBe('$42.00expected'));
    expect(cell(lineRow(), 'line-amount')).toBe('$126.00');
    expect(total()).toBe('$126.00');
    expect(screen.getByText('Expected total')).toBeTruthy();
    expect(screen.queryByTestId('price-note')).toBeNull();

    // The list changes on the server before the add reaches it: the server prices it at $48.00.
    m.server.priceLists.set(list, new Map([[kestrel.id, 4_800]]));
    await m.syncNow();
    live.tick += 1;
    await waitFor(() => expect(cell(lineRow(), 'unit-price')).toBe('$48.00'));
    expect(cell(lineRow(), 'line-amount')).toBe('$144.00');
    expect(total()).toBe('$144.00');
    expect(screen.getByText('Total')).toBeTruthy();
    const note = screen.getByTestId('price-note');
    expect(note.textContent).toMatch(/priced \$48\.00 by the server; you saw \$42\.00/);
    expect(note.textContent).not.toMatch(/[0-9a-f]{8}-[0-9a-f]{4}/); // no ids on screen
  });

  test('a price the server agrees with needs no note; the size run shows what this customer pays', async () => {
    const { m, tokyo, kestrel } = withPriceList();
    const orderId = await m.createOrder({ customer_id: tokyo.id, customer_po: null, ship_window_start: null, ship_window_end: null, notes: null });
    await m.addLine(orderId, kestrel.id, 2);
    await m.syncNow();
    const { user } = renderScreen(OrderEditor, { orderId, onback: () => {}, onconflict: () => {} }, m);
    await waitFor(() => expect(cell(lineRow(), 'unit-price')).toBe('$42.00'));
    expect(screen.queryByTestId('price-note')).toBeNull();
    expect(total()).toBe('$84.00');

    await user.click(screen.getByRole('combobox', { name: /Find SKU/ }));
    await user.keyboard('kestrel indigo');
    const groups = await screen.findByRole('listbox', { name: 'Styles and colours' });
    await waitFor(() => expect(within(groups).getByRole('option').textContent).toContain('$42.00–$48.00'));
    await user.keyboard('{Enter}');
    await screen.findByLabelText(/Quantity, size XS/);
    expect(screen.getByTestId('grid-price').textContent).toContain('for Tokyo Distributor');
  });
});

describe('SKU codes and discontinued SKUs', () => {
  test('search finds a SKU by its code; a discontinued size cannot be added and says so; its existing line keeps working', async () => {
    const m = mockBackend();
    const austin = customer(m, 'Austin Boutique');
    const m_ = sku(m, 'Kestrel Overshirt', 'Washed Indigo', 'M');
    const orderId = await m.createOrder({ customer_id: austin.id, customer_po: null, ship_window_start: null, ship_window_end: null, notes: null });
    await m.addLine(orderId, m_.id, 2);
    await m.syncNow();
    m_.active = false;
    const { user } = renderScreen(OrderEditor, { orderId, onback: () => {}, onconflict: () => {} }, m);

    // The existing line is marked, and still takes a new quantity.
    await waitFor(() => expect(lineRow().textContent).toContain('discontinued'));
    const qty = screen.getByLabelText(/Quantity ordered/) as HTMLInputElement;
    expect(qty.disabled).toBe(false);

    // By code (as typed off a fax).
    await user.click(screen.getByRole('combobox', { name: /Find SKU/ }));
    await user.keyboard('ko-wi-m');
    const groups = await screen.findByRole('listbox', { name: 'Styles and colours' });
    await waitFor(() => expect(within(groups).getByRole('option').textContent).toContain('Kestrel Overshirt'));
    expect(within(groups).getByRole('option').textContent).toContain('discontinued');
    await user.keyboard('{Enter}');
    await screen.findByTestId('grid-discontinued-M');
    expect(screen.queryByLabelText(/Quantity, size M /)).toBeNull();
    expect(screen.getByRole('note').textContent).toMatch(/Discontinued, cannot be added: size M/);

    // A style and colour with every size discontinued says so before anything is queued.
    for (const s of m.server.skus.values()) if (s.style === 'Plover Rain Shell') s.active = false;
    await user.keyboard('{Escape}');
    const search = screen.getByRole('combobox', { name: /Find SKU/ });
    await user.clear(search);
    await user.type(search, 'plover');
    await waitFor(() => expect(within(screen.getByRole('listbox', { name: 'Styles and colours' })).getByRole('option').textContent).toContain('discontinued'));
    await user.keyboard('{Enter}');
    await waitFor(() => expect(screen.getByRole('alert').textContent).toMatch(/Plover Rain Shell Signal Orange is discontinued: it cannot be added/));
    await user.keyboard('{Enter}');
    expect(m.calls.filter((c) => c.name === 'addLine')).toHaveLength(1); // the first, before it was discontinued
  });
});

describe('inactive customers', () => {
  test('a new order offers only active customers; an inactive customer’s order opens and says so in words', async () => {
    const m = mockBackend();
    const austin = customer(m, 'Austin Boutique');
    const orderId = await m.createOrder({ customer_id: austin.id, customer_po: 'AB-1', ship_window_start: null, ship_window_end: null, notes: null });
    await m.syncNow();
    austin.active = false;

    const { user } = renderApp(m);
    const list = await screen.findByRole('listbox', { name: /Orders/ });
    await waitFocus(list);
    await user.keyboard('n');
    const box = await screen.findByRole('combobox', { name: /Customer/ });
    await waitFocus(box);
    await user.keyboard('aus');
    expect(screen.queryByRole('option', { name: 'Austin Boutique' })).toBeNull();
    expect(screen.getByText(/No active customer matches “aus”: an inactive customer takes no new orders/)).toBeTruthy();
    await user.clear(box);
    await user.keyboard('tok');
    expect(screen.getByRole('option', { name: 'Tokyo Distributor' })).toBeTruthy();

    // The existing order still opens and works.
    await user.keyboard('{Escape}{Alt>}d{/Alt}');
    const row = await screen.findByText('AB-1');
    await user.click(row);
    await user.keyboard('{Enter}');
    const note = await screen.findByTestId('customer-inactive');
    expect(note.textContent).toMatch(/Austin Boutique is inactive: it takes no new orders\. This order keeps working\./);
    const notes = screen.getByLabelText('Notes');
    await user.click(notes);
    await user.keyboard('still fine');
    await user.tab();
    await waitFor(() => expect(m.calls.some((c) => c.name === 'editOrder')).toBe(true));
  });
});

describe('signed out by an administrator', () => {
  test('the next sync shows the sign-in screen in words, keeps the pending acts, and a new sign-in sends them', async () => {
    const m = new MockBackend({ seed: 'catalog', signedIn: true });
    const { user } = renderApp(m);
    await screen.findByRole('listbox', { name: /Orders/ });
    const tokyo = customer(m, 'Tokyo Distributor');
    const orderId = await m.createOrder({ customer_id: tokyo.id, customer_po: 'TD-9', ship_window_start: null, ship_window_end: null, notes: null });
    await m.addLine(orderId, sku(m, 'Wren Tee', 'Black', 'M').id, 5);

    m.revokeSession();
    await user.click(screen.getByRole('button', { name: /Sync now/ }));

    const banner = await screen.findByTestId('signed-out');
    expect(banner.textContent).toContain('Signed out by an administrator.');
    expect(banner.textContent).toMatch(/Sign in again to send the 2 changes waiting on this desk; nothing is lost\./);
    expect(banner.textContent).not.toMatch(/401|unauthorized|token/i);
    expect((screen.getByLabelText('Email') as HTMLInputElement).value).toBe('dana@acme.test');
    expect((screen.getByLabelText('Tenant') as HTMLInputElement).value).toBe('acme');
    await waitFocus(screen.getByLabelText('Password'));
    expect(await m.listPending()).toHaveLength(2);
    expect(m.server.orders.has(orderId)).toBe(false);

    await user.keyboard('holdfast-demo{Enter}');
    await screen.findByRole('listbox', { name: /Orders/ });
    await waitFor(() => expect(m.server.orders.get(orderId)?.lines).toHaveLength(1));
    expect(await m.listPending()).toHaveLength(0);
    expect(screen.queryByTestId('signed-out')).toBeNull();
  });
});
