// The conflict view over the mock: one-click rebase for disjoint fields; a
// choice per colliding field, quantities never chosen for the user. The
// conflicts are the engine's verdicts as fixtures (which fields collide is
// client/src/conflict.rs's rule, tested in Rust).
import { screen, waitFor, within } from '@testing-library/svelte';
import { describe, expect, test, vi } from 'vitest';
import type { FieldDiff, Order } from '../src/lib/backend';
import ConflictView from '../src/components/ConflictView.svelte';
import { conflictFixture, fieldDiff } from '../src/lib/fixtures';
import type { MockBackend } from '../src/lib/mock';
import { customer, mockBackend, renderScreen, sku, waitFocus } from './helpers';

function setup() {
  const m = mockBackend();
  const o = m.remoteCreateOrder(
    { customer_id: customer(m, 'Austin Boutique').id, customer_po: 'AB-1', ship_window_start: null, ship_window_end: null, notes: null },
    [[sku(m, 'Wren Tee', 'White', 'S').id, 5, 0]],
  );
  return { m, o, line: `line:${o.lines[0].id}` };
}

/** The engine's report of the conflict on `o`: this desk's acts against the server's document now. */
async function putConflict(m: MockBackend, base: Order, fields: FieldDiff[]) {
  const mine = (await m.getOrder(base.id))!;
  m.putConflict(conflictFixture({ base, mine: mine.order, theirs: m.server.orders.get(base.id)!, held: mine.pending.length, fields }));
}

const lineValue = (o: Order, qty: number) => ({ sku_id: o.lines[0].sku_id, qty_ordered: qty, qty_allocated: 0 });
const mineOnly = { mine_changed: true, theirs_changed: false, collides: false };
const theirsOnly = { mine_changed: false, theirs_changed: true, collides: false };
const both = { mine_changed: true, theirs_changed: true, collides: true };

const row = (field: string) => document.querySelector(`tr[data-field="${field}"]`) as HTMLElement;

describe('conflict view', () => {
  test('disjoint fields: says who changed it when, and Rebase & save is one keystroke', async () => {
    const { m, o } = setup();
    await m.editOrder(o.id, { notes: 'rush' });
    m.remoteEditOrder(o.id, { customer_po: 'AB-2' });
    await putConflict(m, o, [
      fieldDiff('customer_po', { base: 'AB-1', mine: 'AB-1', theirs: 'AB-2' }, theirsOnly),
      fieldDiff('notes', { base: null, mine: 'rush', theirs: null }, mineOnly),
    ]);
    const onclose = vi.fn();
    const { user } = renderScreen(ConflictView, { orderId: o.id, onclose }, m);

    expect((await screen.findByTestId('conflict-title')).textContent).toMatch(/^Priya changed this order (just now|\d+ s ago)$/);
    expect(row('notes').dataset.outcome).toBe('mine');
    expect(row('customer_po').dataset.outcome).toBe('theirs');
    const rebase = screen.getByRole('button', { name: /Rebase & save/ }) as HTMLButtonElement;
    expect(rebase.disabled).toBe(false);
    await waitFocus(rebase);
    expect(screen.queryByRole('radio')).toBeNull();

    await user.keyboard('{Alt>}b{/Alt}');
    await waitFor(() => expect(onclose).toHaveBeenCalledWith(true));
    expect(m.calls.find((c) => c.name === 'resolveConflict')?.args).toEqual([o.id, 'rebase']);
  });

  test('same fields: no rebase; the quantity needs a choice even though both typed 8', async () => {
    const { m, o, line } = setup();
    await m.editOrder(o.id, { notes: 'rush' });
    await m.changeLine(o.id, o.lines[0].id, 8);
    m.remoteEditOrder(o.id, { notes: 'hold for payment' });
    m.remoteChangeLine(o.id, o.lines[0].id, 8);
    await putConflict(m, o, [
      fieldDiff('notes', { base: null, mine: 'rush', theirs: 'hold for payment' }, both),
      fieldDiff(line, { base: lineValue(o, 5), mine: lineValue(o, 8), theirs: lineValue(o, 8) }, both),
    ]);
    const onclose = vi.fn();
    const { user } = renderScreen(ConflictView, { orderId: o.id, onclose }, m);

    await screen.findByTestId('conflict-title');
    expect(screen.getByTestId('conflict-summary').textContent).toMatch(/2 fields changed on both sides/);
    expect(row('notes').dataset.outcome).toBe('choose');
    expect(row(line).dataset.outcome).toBe('choose');
    expect(within(row(line)).getByText(/Quantity: your choice/)).toBeTruthy();
    expect((screen.getByRole('button', { name: /Rebase & save/ }) as HTMLButtonElement).disabled).toBe(true);
    const save = screen.getByRole('button', { name: /Save my choices/ }) as HTMLButtonElement;
    expect(save.disabled).toBe(true);

    // Nothing is pre-chosen, not even the quantity both sides agree on.
    expect(screen.getAllByRole('radio').every((r) => !(r as HTMLInputElement).checked)).toBe(true);

    // Focus starts on the first choice; t = theirs, m = mine.
    const notesTheirs = within(row('notes')).getAllByRole('radio')[0];
    await waitFocus(notesTheirs);
    await user.keyboard('t');
    await waitFor(() => expect((within(row('notes')).getByRole('radio', { name: /Theirs/ }) as HTMLInputElement).checked).toBe(true));
    // Ctrl+Enter with a field still open refuses; so does Alt+B (no rebase over a collision).
    await user.keyboard('{Control>}{Enter}{/Control}');
    await user.keyboard('{Alt>}b{/Alt}');
    expect(m.calls.filter((c) => c.name === 'resolveConflict')).toEqual([]);

    within(row(line)).getByRole('radio', { name: /Yours/ }).focus();
    await user.keyboard('m');
    await waitFor(() => expect(save.disabled).toBe(false));
    await user.keyboard('{Control>}{Enter}{/Control}');
    await waitFor(() => expect(onclose).toHaveBeenCalledWith(true));
    expect(m.calls.find((c) => c.name === 'resolveConflict')?.args).toEqual([o.id, { choose: { notes: 'theirs', [line]: 'mine' } }]);
  });

  test('discarding asks first', async () => {
    const { m, o } = setup();
    await m.editOrder(o.id, { notes: 'rush' });
    m.remoteEditOrder(o.id, { notes: 'hold' });
    await putConflict(m, o, [fieldDiff('notes', { base: null, mine: 'rush', theirs: 'hold' }, both)]);
    const onclose = vi.fn();
    const { user } = renderScreen(ConflictView, { orderId: o.id, onclose }, m);
    await user.click(await screen.findByRole('button', { name: 'Discard my changes' }));
    const dialog = await screen.findByRole('alertdialog');
    await user.click(within(dialog).getByRole('button', { name: 'Discard my changes' }));
    await waitFor(() => expect(onclose).toHaveBeenCalledWith(true));
    expect(m.calls.find((c) => c.name === 'resolveConflict')?.args).toEqual([o.id, 'discard_mine']);
  });

  test('a confirm over changed quantities: both totals shown, Enter alone decides nothing', async () => {
    const { m, o, line } = setup();
    await m.confirmOrder(o.id);
    m.remoteChangeLine(o.id, o.lines[0].id, 7);
    const theirs = m.server.orders.get(o.id)!;
    await putConflict(m, o, [
      fieldDiff('status', { base: 'draft', mine: 'confirmed', theirs: 'draft' }, { mine_changed: true, theirs_changed: false, collides: true }),
      fieldDiff(line, { base: lineValue(o, 5), mine: lineValue(o, 5), theirs: lineValue(o, 7) }, theirsOnly),
    ]);
    const onclose = vi.fn();
    const { user } = renderScreen(ConflictView, { orderId: o.id, onclose }, m);

    const totals = await screen.findByTestId('conflict-totals');
    const money = (c: number) => `$${(c / 100).toFixed(2)}`;
    expect(totals.textContent).toContain(`You chose to confirm this order when its total was ${money(o.total)}`);
    expect(totals.textContent).toContain(`it now totals ${money(theirs.total)}`);
    expect(theirs.total).not.toBe(o.total);
    expect(within(row('status')).getByText(/Money: your choice/)).toBeTruthy();
    expect((screen.getByRole('button', { name: /Rebase & save/ }) as HTMLButtonElement).disabled).toBe(true);

    // Focus is on a choice, nothing is chosen: Enter (and Alt+B) send nothing.
    await waitFocus(within(row('status')).getAllByRole('radio')[0]);
    await user.keyboard('{Enter}');
    await user.keyboard('{Alt>}b{/Alt}');
    await user.keyboard('{Control>}{Enter}{/Control}');
    expect(m.calls.filter((c) => c.name === 'resolveConflict')).toEqual([]);

    await user.keyboard('m');
    await user.keyboard('{Control>}{Enter}{/Control}');
    await waitFor(() => expect(onclose).toHaveBeenCalledWith(true));
    expect(m.calls.find((c) => c.name === 'resolveConflict')?.args).toEqual([o.id, { choose: { status: 'mine' } }]);
  });
});
