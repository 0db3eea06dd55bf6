// No internal ids on screen: pending and refused acts named by SKU, orders by
// customer and PO; the act's key kept for support behind a closed "Details".
import { screen, waitFor, within } from '@testing-library/svelte';
import { describe, expect, test } from 'vitest';
import { describeAct, parseAct, rememberLines } from '../src/lib/describe';
import { MockBackend } from '../src/lib/mock';
import { customer, mockBackend, renderApp, sku, waitFocus } from './helpers';

describe('describeAct: the engine’s descriptions in words', () => {
  // The exact lines protocol/src/mutation.rs `Mutation::describe` writes.
  const line = { id: '01a23366-1111-4222-8333-444455556666', sku_id: 'sku-m' };
  const skus = [{ id: 'sku-m', style: 'Kestrel Overshirt', color: 'Washed Indigo', size: 'M', code: 'KO-WI-M' }];
  const customers = [{ id: '7c0ffee0-0000-4000-8000-000000000001', name: 'Austin Boutique' }];
  const world = { lines: [line], skus, customers };

  const cases: [string, string, string][] = [
    ['create_order', 'new order for customer 7c0ffee0, PO HP-77', 'New order, PO HP-77'],
    ['create_order', 'new order for customer 7c0ffee0', 'New order'],
    ['add_line', 'add line 01a23366 of SKU 5ab0c1d2 × 4', 'Add 4 × Kestrel Overshirt · Washed Indigo · M (KO-WI-M)'],
    ['change_line', 'set line 01a23366 quantity to 12', 'Quantity of Kestrel Overshirt · Washed Indigo · M (KO-WI-M) set to 12'],
    ['remove_line', 'remove line 01a23366', 'Remove Kestrel Overshirt · Washed Indigo · M (KO-WI-M)'],
    ['allocate', 'allocate 6 on line 01a23366', 'Allocate 6 of Kestrel Overshirt · Washed Indigo · M (KO-WI-M)'],
    ['release', 'release 2 on line 01a23366', 'Release 2 of Kestrel Overshirt · Washed Indigo · M (KO-WI-M)'],
    ['edit_order', 'edit customer_po = PO-9, notes = Rush, call Jo', 'PO set to PO-9; Notes set to “Rush, call Jo”'],
    ['edit_order', 'edit ship_window_start = 2026-03-02, ship_window_end = (none)', 'Ship from set to 2026-03-02; Ship by cleared'],
    ['edit_order', 'edit customer_id = 7c0ffee0-0000-4000-8000-000000000001', 'Customer changed to Austin Boutique'],
    ['confirm', 'confirm', 'Confirm the order'],
    ['cancel', 'cancel', 'Cancel the order'],
  ];
  for (const [kind, description, words] of cases) {
    test(`${kind}: “${description}”`, () => {
      expect(describeAct(kind, description, world)).toBe(words);
    });
  }

  test('a line this desk does not know is left unnamed, never shown by id', () => {
    expect(describeAct('remove_line', 'remove line 9f9f9f9f', {})).toBe('Remove a line');
    expect(describeAct('allocate', 'allocate 3 on line 9f9f9f9f', {})).toBe('Allocate 3');
    expect(describeAct('change_line', 'set line 9f9f9f9f quantity to 5', {})).toBe('Quantity set to 5');
    expect(describeAct('add_line', 'add line 9f9f9f9f of SKU 8e8e8e8e × 2', {})).toBe('Add a line of 2');
    expect(describeAct('edit_order', 'edit customer_id = 8e8e8e8e-0000-4000-8000-000000000001', {})).toBe('Customer changed');
    expect(describeAct('something_new', 'frob line 9f9f9f9f', {})).toBe('A change to the order');
  });

  test('a line seen before it was removed is still named', () => {
    rememberLines([{ id: 'abcdef12-1111-4222-8333-444455556666', sku_id: 'sku-m' }]);
    expect(describeAct('remove_line', 'remove line abcdef12', { skus })).toBe('Remove Kestrel Overshirt · Washed Indigo · M (KO-WI-M)');
  });

  test('parseAct reads the parts back', () => {
    expect(parseAct('allocate', 'allocate 6 on line 01a23366')).toEqual({ kind: 'allocate', line: '01a23366', qty: 6 });
    expect(parseAct('edit_order', 'edit notes = a = b, c')).toEqual({ kind: 'edit_order', set: [['notes', 'a = b, c']] });
  });
});

/** Visible text of an element: what a closed <details> hides left out. */
function visibleText(el: Element): string {
  const c = el.cloneNode(true) as Element;
  for (const d of c.querySelectorAll('details:not([open])')) d.querySelector('dl')?.remove();
  return c.textContent ?? '';
}

describe('printable pending list', () => {
  test('every act in words, orders by customer and PO; no id on screen, the key behind a closed Details', async () => {
    const m = mockBackend();
    const tee = (size: string) => sku(m, 'Wren Tee', 'Black', size).id;
    const id = await m.createOrder({ customer_id: customer(m, 'Tokyo Distributor').id, customer_po: 'PO-1', ship_window_start: null, ship_window_end: null, notes: null });
    const mLine = await m.addLine(id, tee('M'), 5);
    const lLine = await m.addLine(id, tee('L'), 3);
    await m.changeLine(id, mLine, 8);
    await m.allocate(id, mLine, 4);
    await m.release(id, mLine, 1);
    await m.editOrder(id, { customer_po: 'PO-2', notes: 'Rush, call Jo' });
    await m.editOrder(id, { ship_window_start: '2026-03-02', ship_window_end: null });
    await m.editOrder(id, { customer_id: customer(m, 'Austin Boutique').id });
    // Seen on this desk before it is removed (the editor showed it).
    rememberLines((await m.getOrder(id))!.order.lines);
    await m.removeLine(id, lLine);
    const other = await m.createOrder({ customer_id: customer(m, 'Little Fern Kids').id, customer_po: null, ship_window_start: null, ship_window_end: null, notes: null });
    await m.confirmOrder(other);

    const { user } = renderApp(m);
    await waitFocus(await screen.findByRole('listbox', { name: /Orders/ }));
    await user.keyboard('{Alt>}p{/Alt}');
    await screen.findByRole('heading', { name: 'Changes not yet on the server' });
    await waitFor(() => expect(document.querySelectorAll('tr[data-seq]')).toHaveLength(12));
    const changes = screen.getAllByTestId('pending-change').map((e) => e.textContent);
    expect(changes).toEqual([
      'New order, PO PO-1',
      'Add 5 × Wren Tee · Black · M (WT-B-M)',
      'Add 3 × Wren Tee · Black · L (WT-B-L)',
      'Quantity of Wren Tee · Black · M (WT-B-M) set to 8',
      'Allocate 4 of Wren Tee · Black · M (WT-B-M)',
      'Release 1 of Wren Tee · Black · M (WT-B-M)',
      'PO set to PO-2; Notes set to “Rush, call Jo”',
      'Ship from set to 2026-03-02; Ship by cleared',
      'Customer changed to Austin Boutique',
      'Remove Wren Tee · Black · L (WT-B-L)',
      'New order',
      'Confirm the order',
    ]);

    // Orders by customer and PO; one with no PO says when it was started.
    const table = document.querySelector('.pending-list table')!;
    const headers = [...table.querySelectorAll('thead th')].map((th) => th.textContent!.trim());
    expect(headers).toEqual(['Customer', 'PO', 'Change', 'State', 'Queued', 'Tries']);
    const first = table.querySelector('tbody tr')!;
    expect(within(first as HTMLElement).getByText('Austin Boutique')).toBeTruthy();
    expect(within(first as HTMLElement).getByText('PO-2')).toBeTruthy();
    expect(screen.getByText('Little Fern Kids')).toBeTruthy();
    expect(screen.getByText('No PO')).toBeTruthy();
    expect(screen.getAllByText('Waiting to send')).toHaveLength(12);

    // No id of an order, a line or an act is visible.
    const shown = visibleText(document.querySelector('.pending-list')!);
    const [pending, orders] = [await m.listPending(), await m.listOrders()];
    const ids = [
      ...orders.flatMap((v) => [v.order.id, v.order.customer_id, ...v.order.lines.map((l) => l.id), ...v.order.lines.map((l) => l.sku_id)]),
      lLine,
      ...pending.map(([, p]) => p.idempotency_key),
    ];
    for (const x of ids) expect(shown).not.toContain(x.slice(0, 8));
    expect(shown).not.toMatch(/\bline [0-9a-f]{8}\b|\bOrder [0-9a-f]{8}\b|\bKey\b/);

    // The key is there for a support call, behind a collapsed Details.
    const details = [...document.querySelectorAll<HTMLDetailsElement>('tr[data-seq] details')];
    expect(details).toHaveLength(12);
    expect(details.every((d) => !d.open)).toBe(true);
    const row = document.querySelector(`tr[data-seq="${pending[4][1].seq}"]`) as HTMLElement;
    await user.click(within(row).getByText('Details'));
    expect(row.querySelector('details')!.open).toBe(true);
    expect(within(row).getByTestId('pending-key').textContent).toBe(pending[4][1].idempotency_key);
  });

  test('a refused act reads in words on its card and in the list', async () => {
    const m = new MockBackend({ seed: 'demo' });
    const { user } = renderApp(m);
    await screen.findByRole('listbox', { name: /Orders/ });
    await user.keyboard('{Alt>}r{/Alt}');
    const card = (await screen.findByRole('heading', { name: 'Not enough stock to allocate' })).closest('article')!;
    await waitFor(() => expect(card.querySelector('strong')?.textContent).toBe('Allocate 9 of Kestrel Overshirt · Washed Indigo · M (KO-WI-M)'));
    expect(card.textContent).not.toMatch(/line [0-9a-f]{8}/);

    await user.keyboard('{Alt>}p{/Alt}');
    await screen.findByRole('heading', { name: 'Changes not yet on the server' });
    await waitFor(() =>
      expect(screen.getAllByTestId('pending-change').map((e) => e.textContent)).toContain('Allocate 9 of Kestrel Overshirt · Washed Indigo · M (KO-WI-M)'),
    );
    expect(screen.getByText('Refused by the server')).toBeTruthy();
    expect(screen.getByText('Held: the order changed on another desk', { exact: false })).toBeTruthy();
    expect(visibleText(document.querySelector('.pending-list')!)).not.toMatch(/insufficient_ats|[0-9a-f]{8}-[0-9a-f]{4}/);
  });

  test('a line removed in the editor is named in the list', async () => {
    const m = mockBackend();
    const o = m.remoteCreateOrder(
      { customer_id: customer(m, 'Tokyo Distributor').id, customer_po: 'T-1', ship_window_start: null, ship_window_end: null, notes: null },
      [
        [sku(m, 'Heron Chino', 'Navy', '32').id, 4, 0],
        [sku(m, 'Heron Chino', 'Navy', '34').id, 2, 0],
      ],
    );
    const { user } = renderApp(m);
    await waitFocus(await screen.findByRole('listbox', { name: /Orders/ }));
    await user.keyboard('{Enter}');
    (await screen.findByLabelText(/Quantity ordered, Heron Chino · Navy · 34/)).focus();
    await user.keyboard('{Alt>}{Delete}{/Alt}');
    await waitFor(() => expect(m.calls.filter((c) => c.name === 'removeLine')).toHaveLength(1));
    await user.keyboard('{Alt>}p{/Alt}');
    await screen.findByRole('heading', { name: 'Changes not yet on the server' });
    await waitFor(() => expect(screen.getAllByTestId('pending-change').map((e) => e.textContent)).toEqual(['Remove Heron Chino · Navy · 34 (HC-N-34)']));
    expect(o.lines).toHaveLength(2);
  });

});
