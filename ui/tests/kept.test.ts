// What this desk keeps for a newer Holdfast (the engine's `held()`): listed
// in words, never by id; one button saves a copy for an administrator and
// says where; the status bar links to it only while something is kept; an
// order with a kept part says so in the editor and on its desk row.
import { screen, waitFor, within } from '@testing-library/svelte';
import { describe, expect, test, vi } from 'vitest';
import OrderEditor from '../src/components/OrderEditor.svelte';
import { HELD_WHY, heldFixture, uuid } from '../src/lib/fixtures';
import { customer, mockBackend, renderApp, renderScreen, sku } from './helpers';

const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i;
const SINCE = '2026-12-01T09:30:00Z';
const NOTICE =
  'Part of this order needs a newer version of Holdfast. You see the last version this app can show; changes you make wait until Holdfast is updated.';
const squash = (t: string | null | undefined) => (t ?? '').replace(/\s+/g, ' ').trim();

function setup() {
  const m = mockBackend();
  const o = m.remoteCreateOrder(
    { customer_id: customer(m, 'Austin Boutique').id, customer_po: '4471', ship_window_start: null, ship_window_end: null, notes: null },
    [[sku(m, 'Wren Tee', 'White', 'S').id, 2, 0]],
  );
  return { m, o };
}

/** The engine's three kinds of answer: an order this desk shows, an order it never could, and a change of no order it can name. */
function keepThree(m: ReturnType<typeof mockBackend>, orderId: string) {
  m.putHeld(heldFixture({ kind: 'document', what: 'Order for Austin Boutique, PO 4471', orderId, since: SINCE }));
  m.putHeld(
    heldFixture({ kind: 'document', what: 'An order', why: HELD_WHY.unknownDocument, orderId: uuid(), since: SINCE }),
  );
  m.putHeld(heldFixture({ kind: 'act', what: 'A change to an order', why: HELD_WHY.damagedAct, orderId: null, since: SINCE }));
}

describe('kept for a newer Holdfast', () => {
  test('the status bar links to it only while something is kept', async () => {
    const { m, o } = setup();
    const { user } = renderApp(m);
    await screen.findByRole('listbox', { name: /Orders/ });
    await waitFor(() => expect(screen.getByTestId('online')).toBeTruthy());
    expect(screen.queryByTestId('kept')).toBeNull();
    expect(screen.queryByRole('button', { name: /^Kept/ })).toBeNull();

    m.putHeld(heldFixture({ kind: 'document', what: 'Order for Austin Boutique, PO 4471', orderId: o.id, since: SINCE }));
    m.putHeld(heldFixture({ kind: 'act', what: 'A change to order for Austin Boutique, PO 4471', orderId: o.id, since: SINCE }));
    await waitFor(() => expect(squash(screen.getByTestId('kept').textContent)).toBe('2 kept for a newer Holdfast'));
    expect(screen.getByRole('button', { name: 'Kept (2)' })).toBeTruthy();

    await user.click(within(screen.getByTestId('kept')).getByRole('button'));
    await screen.findByRole('heading', { name: 'Kept for a newer Holdfast' });

    m.clearHeld();
    await waitFor(() => expect(screen.queryByTestId('kept')).toBeNull());
    await screen.findByText(/Nothing kept/);
  });

  test('lists what and why in words, never an id; Open order only for an order this desk has', async () => {
    const { m, o } = setup();
    keepThree(m, o.id);
    const { user } = renderApp(m);
    await screen.findByRole('listbox', { name: /Orders/ });
    await user.click(await screen.findByRole('button', { name: 'Kept (3)' }));
    const section = (await screen.findByRole('heading', { name: 'Kept for a newer Holdfast' })).closest('section')!;
    await waitFor(() => expect(within(section).getAllByTestId('kept-item')).toHaveLength(3));
    const items = within(section).getAllByTestId('kept-item');

    expect(within(items[0]).getByRole('heading').textContent).toBe('Order for Austin Boutique, PO 4471');
    expect(squash(items[0].textContent)).toContain(HELD_WHY.newerDocument);
    expect(squash(items[0].textContent)).toMatch(/From the server, kept since \d{4}-\d\d-\d\d \d\d:\d\d/);
    expect(squash(items[1].textContent)).toContain(HELD_WHY.unknownDocument);
    expect(within(items[2]).getByRole('heading').textContent).toBe('A change to an order');
    expect(squash(items[2].textContent)).toMatch(/Your change, kept since/);

    // No id anywhere: not in the words, not in an attribute.
    expect(section.textContent).not.toMatch(UUID);
    expect(section.innerHTML).not.toMatch(UUID);

    // The order never shown on this desk has nothing to open.
    expect(within(items[0]).getByRole('button', { name: 'Open order' })).toBeTruthy();
    expect(within(items[1]).queryByRole('button', { name: 'Open order' })).toBeNull();
    expect(within(items[2]).queryByRole('button', { name: 'Open order' })).toBeNull();

    await user.click(within(items[0]).getByRole('button', { name: 'Open order' }));
    await screen.findByRole('heading', { name: 'Austin Boutique' });
    await waitFor(() => expect(squash(screen.getByTestId('needs-newer-app').textContent)).toBe(NOTICE));
  });

  test('Save a copy for your administrator says where it was saved', async () => {
    const { m, o } = setup();
    keepThree(m, o.id);
    const path = '/home/ana/Downloads/holdfast-kept-2026-12-01-103000.json';
    const exportHeld = vi.spyOn(m, 'exportHeld').mockResolvedValueOnce({ path, count: 3 });
    const { user } = renderApp(m);
    await screen.findByRole('listbox', { name: /Orders/ });
    await user.click(await screen.findByRole('button', { name: 'Kept (3)' }));
    await waitFor(() => expect(screen.getAllByTestId('kept-item')).toHaveLength(3));

    await user.click(screen.getByRole('button', { name: 'Save a copy for your administrator' }));
    await waitFor(() =>
      expect(squash(screen.getByTestId('kept-saved').textContent)).toBe(`Saved 3 items to ${path}. Send this file to your administrator.`),
    );
    expect(exportHeld).toHaveBeenCalledTimes(1);

    // A failure is said, and no stale "Saved" line stays beside it.
    exportHeld.mockRejectedValueOnce({ kind: 'invalid', message: 'cannot save /home/ana/Downloads/x.json: disk full' });
    await user.click(screen.getByRole('button', { name: 'Save a copy for your administrator' }));
    await waitFor(() => expect(screen.getByRole('alert').textContent).toMatch(/disk full/));
    expect(screen.queryByTestId('kept-saved')).toBeNull();
  });

  test("the mock's own export names a file in Downloads and counts what is kept", async () => {
    const { m, o } = setup();
    keepThree(m, o.id);
    const r = await m.exportHeld();
    expect(r.count).toBe(3);
    expect(r.path).toMatch(/\/Downloads\/holdfast-kept-\d{4}-\d\d-\d\d-\d{6}\.json$/);
  });

  test('the order editor says so only while part of the order needs a newer app', async () => {
    const { m, o } = setup();
    const { live } = renderScreen(OrderEditor, { orderId: o.id, onback: () => {}, onconflict: () => {} }, m);
    await live.start();
    await screen.findByTestId('order-status');
    expect(screen.queryByTestId('needs-newer-app')).toBeNull();

    m.putHeld(heldFixture({ kind: 'act', what: 'A change to order for Austin Boutique, PO 4471', orderId: o.id, since: SINCE }));
    await waitFor(() => expect(squash(screen.getByTestId('needs-newer-app').textContent)).toBe(NOTICE));

    m.clearHeld();
    await waitFor(() => expect(screen.queryByTestId('needs-newer-app')).toBeNull());
    live.stop();
  });

  test('the desk row is marked only for the order that needs a newer app', async () => {
    const { m, o } = setup();
    const other = m.remoteCreateOrder(
      { customer_id: customer(m, 'Tokyo Distributor').id, customer_po: 'TD-1', ship_window_start: null, ship_window_end: null, notes: null },
      [],
    );
    renderApp(m);
    await screen.findByRole('listbox', { name: /Orders/ });
    const row = (id: string) => document.getElementById(`order-${id}`) as HTMLElement;
    await waitFor(() => expect(row(other.id)).toBeTruthy());
    expect(screen.queryByTestId('newer-flag')).toBeNull();

    m.putHeld(heldFixture({ kind: 'document', what: 'Order for Austin Boutique, PO 4471', orderId: o.id, since: SINCE }));
    await waitFor(() => expect(within(row(o.id)).getByTestId('newer-flag').textContent).toBe('Needs newer app'));
    expect(within(row(other.id)).queryByTestId('newer-flag')).toBeNull();
  });
});
