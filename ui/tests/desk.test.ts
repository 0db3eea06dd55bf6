// The order desk: badges per order, filters, keyboard navigation, live refresh.
import { screen, waitFor, within } from '@testing-library/svelte';
import { describe, expect, test } from 'vitest';
import { LONG_CUSTOMER, MockBackend } from '../src/lib/mock';
import { customer, renderApp, waitFocus } from './helpers';

const rows = () => screen.getAllByRole('option').filter((o) => o.classList.contains('order-row'));
const badgeOf = (name: string) =>
  rows()
    .find((r) => r.textContent!.includes(name))
    ?.querySelector('[data-badge]')
    ?.getAttribute('data-badge');
const selected = () => rows().find((r) => r.getAttribute('aria-selected') === 'true');

async function demoDesk() {
  // The demo seed has an order in every state: synced, conflict, rejected, pending.
  const m = new MockBackend({ seed: 'demo' });
  const r = renderApp(m);
  const list = await screen.findByRole('listbox', { name: /Orders/ });
  await waitFor(() => expect(rows()).toHaveLength(4));
  await waitFocus(list);
  return { m, list, ...r };
}

describe('order desk', () => {
  test('each order carries its sync badge', async () => {
    await demoDesk();
    expect(badgeOf('Tokyo Distributor')).toBe('synced');
    expect(badgeOf(LONG_CUSTOMER)).toBe('conflict');
    expect(badgeOf('Austin Boutique')).toBe('rejected');
    expect(badgeOf('Harbour & Pine')).toBe('pending');
    // Pending shows how many acts wait.
    const harbour = rows().find((r) => r.textContent!.includes('Harbour & Pine'))!;
    expect(within(harbour).getByText(/Pending · 2/)).toBeTruthy();
  });

  test('a long customer name and the last change wrap rather than being cut off', async () => {
    await demoDesk();
    const cell = screen.getAllByTitle(LONG_CUSTOMER).find((e) => e.closest('.order-row'))!;
    expect(cell.classList.contains('ellipsis')).toBe(false);
    expect(cell.classList.contains('wrap')).toBe(true);
    expect(cell.textContent).toBe(LONG_CUSTOMER);
    const row = cell.closest('.order-row')!;
    const when = row.querySelector('.when')!;
    expect(when.classList.contains('ellipsis')).toBe(false);
    expect(when.textContent).toMatch(/\w+, (just now|\d+ s ago)/);
  });

  test('j/k and arrows move the selection; Home/End jump', async () => {
    const { user } = await demoDesk();
    await user.keyboard('{Home}');
    expect(selected()).toBe(rows()[0]);
    await user.keyboard('j');
    expect(selected()).toBe(rows()[1]);
    await user.keyboard('{ArrowDown}');
    expect(selected()).toBe(rows()[2]);
    await user.keyboard('k');
    expect(selected()).toBe(rows()[1]);
    await user.keyboard('{End}');
    expect(selected()).toBe(rows()[3]);
    await user.keyboard('j');
    expect(selected()).toBe(rows()[3]);
  });

  test('a long desk renders a window of rows; the keyboard and search reach every order', async () => {
    const m = new MockBackend({ seed: 'demo' });
    const [c] = await m.listCustomers();
    for (let i = 0; i < 246; i++) {
      await m.createOrder({ customer_id: c.id, customer_po: `PO-${i}`, ship_window_start: null, ship_window_end: null, notes: null });
    }
    const { user } = renderApp(m);
    const list = await screen.findByRole('listbox', { name: /Orders \(250\)/ });
    await waitFor(() => expect(rows()).toHaveLength(60));
    expect(rows()[0].getAttribute('aria-posinset')).toBe('1');
    expect(rows()[0].getAttribute('aria-setsize')).toBe('250');
    await waitFocus(list);
    await user.keyboard('{End}');
    await waitFor(() => expect(selected()?.getAttribute('aria-posinset')).toBe('250'));
    expect(rows()).toHaveLength(60);
    expect(selected()).toBe(rows()[59]);
    await user.keyboard('{Home}');
    await waitFor(() => expect(selected()?.getAttribute('aria-posinset')).toBe('1'));
    expect(selected()).toBe(rows()[0]);
    // An order far down the list is one search away.
    await user.keyboard('/');
    await user.keyboard('PO-7');
    await waitFor(() => expect(rows().length).toBeGreaterThan(0));
    expect(rows().every((r) => r.textContent!.includes('PO-7'))).toBe(true);
  });

  test('1–4 filter by badge; / searches; Escape clears the search', async () => {
    const { user, list } = await demoDesk();
    await user.keyboard('3');
    await waitFor(() => expect(rows()).toHaveLength(1));
    expect(badgeOf(LONG_CUSTOMER)).toBe('conflict');
    await user.keyboard('4');
    await waitFor(() => expect(rows().map((r) => r.querySelector('[data-badge]')!.getAttribute('data-badge'))).toEqual(['rejected']));
    await user.keyboard('2');
    await waitFor(() => expect(rows()).toHaveLength(1));
    expect(badgeOf('Harbour & Pine')).toBe('pending');
    await user.keyboard('1');
    await waitFor(() => expect(rows()).toHaveLength(4));

    await user.keyboard('/');
    expect(document.activeElement).toBe(screen.getByLabelText(/Search/));
    await user.keyboard('tokyo');
    await waitFor(() => expect(rows()).toHaveLength(1));
    await user.keyboard('{Escape}');
    await waitFor(() => expect(rows()).toHaveLength(4));
    expect(document.activeElement).toBe(list);
  });

  test('Enter opens the order; an order in conflict opens the conflict view', async () => {
    const { user } = await demoDesk();
    await user.keyboard('3');
    await waitFor(() => expect(rows()).toHaveLength(1));
    await user.keyboard('{Enter}');
    expect((await screen.findByTestId('conflict-title')).textContent).toMatch(/^Priya changed this order/);

    await user.keyboard('{Alt>}d{/Alt}');
    const list = await screen.findByRole('listbox', { name: /Orders/ });
    await waitFocus(list);
    await user.keyboard('2');
    await waitFor(() => expect(rows()).toHaveLength(1));
    await user.keyboard('{Enter}');
    expect((await screen.findByRole('heading', { level: 1 })).textContent).toContain('Harbour & Pine');
  });

  test('orders from other desks appear without a refresh, within a second', async () => {
    const { m } = await demoDesk();
    m.remoteCreateOrder({
      customer_id: customer(m, 'Little Fern Kids').id,
      customer_po: 'LF-1',
      ship_window_start: null,
      ship_window_end: null,
      notes: null,
    });
    await waitFor(() => expect(rows()).toHaveLength(5), { timeout: 1000 });
    expect(badgeOf('Little Fern Kids')).toBe('synced');
  });
});
