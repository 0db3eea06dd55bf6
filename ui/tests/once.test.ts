// One intention, one act: every control that queues an act queues it exactly
// once, whatever the keys — Enter, leaving the field (blur), the change
// event, Enter and then Tab away, a double click, a held key. Each test
// counts the calls the mock backend received, over a backend that answers
// after a few milliseconds as the desktop app's does (withLatency).
import { fireEvent, screen, within } from '@testing-library/svelte';
import { beforeEach, describe, expect, test } from 'vitest';
import OrderEditor from '../src/components/OrderEditor.svelte';
import type { MockBackend } from '../src/lib/mock';
import { customer, mockBackend, renderScreen, sku, waitFocus, withLatency } from './helpers';

/** Calls of one backend method so far. */
const calls = (m: MockBackend, name: string) => m.calls.filter((c) => c.name === name);

/** Waits until every act and reload has finished, so a late second act would be counted too. */
let settle: () => Promise<void>;
beforeEach(() => {
  settle = () => Promise.reject(new Error('no editor rendered'));
});

/**
 * Enter as a browser delivers it in a text field whose value changed: the
 * keydown and then, in the same task, `change` (Chromium/WebView2 and
 * WebKitGTK both fire it on Enter; user-event fires it only on blur).
 */
async function enterLikeABrowser(_user: unknown, el: HTMLElement) {
  fireEvent.keyDown(el, { key: 'Enter', code: 'Enter' });
  fireEvent.change(el);
  fireEvent.keyUp(el, { key: 'Enter', code: 'Enter' });
}

/** Renders the editor over a backend with latency. */
function renderEditor(m: MockBackend, orderId: string | null) {
  const slow = withLatency(m);
  settle = slow.idle;
  return renderScreen(OrderEditor, { orderId, onback: () => {}, onconflict: () => {} }, slow.backend);
}

/** A held key: the first keydown, then the auto-repeat ones. */
function holdKey(el: Element, init: KeyboardEventInit, repeats = 2) {
  fireEvent.keyDown(el, { ...init, repeat: false });
  for (let i = 0; i < repeats; i++) fireEvent.keyDown(el, { ...init, repeat: true });
  fireEvent.keyUp(el, init);
}

async function openOrder(lines: [string, number, number][] = [['M', 10, 0]]) {
  const m = mockBackend();
  const o = m.remoteCreateOrder(
    { customer_id: customer(m, 'Tokyo Distributor').id, customer_po: 'T-1', ship_window_start: '2026-03-01', ship_window_end: '2026-03-20', notes: 'Call first' },
    lines.map(([size, ordered, allocated]) => [sku(m, 'Wren Tee', 'Black', size).id, ordered, allocated]),
  );
  const r = renderEditor(m, o.id);
  await screen.findByLabelText(/Quantity ordered, Wren Tee · Black · M/);
  await waitFocus(screen.getByRole('combobox', { name: /Find SKU/ }));
  return { m, o, ...r };
}

const qtyInput = (size = 'M') => screen.getByLabelText(new RegExp(`Quantity ordered, Wren Tee · Black · ${size}`)) as HTMLInputElement;
const pendingCount = async (m: MockBackend, id: string) => (await m.getOrder(id))!.pending.length;

async function typeQty(user: ReturnType<typeof renderScreen>['user'], text: string, size = 'M') {
  const qty = qtyInput(size);
  qty.focus();
  await user.clear(qty);
  await user.keyboard(text);
  return qty;
}

describe('line quantity input: one change, one act', () => {
  test('Enter (keydown, then the change event a browser fires) queues one change', async () => {
    const { m, o, user } = await openOrder();
    const qty = await typeQty(user, '12');
    await enterLikeABrowser(user, qty);
    await settle();
    expect(calls(m, 'changeLine').map((c) => c.args)).toEqual([[o.id, o.lines[0].id, 12]]);
    expect(await pendingCount(m, o.id)).toBe(1);
  });

  test('leaving the field (blur) queues one change', async () => {
    const { m, user } = await openOrder();
    await typeQty(user, '12');
    await user.tab();
    await settle();
    expect(calls(m, 'changeLine')).toHaveLength(1);
  });

  test('the change event alone queues one change', async () => {
    const { m, user } = await openOrder();
    const qty = await typeQty(user, '12');
    fireEvent.change(qty);
    await settle();
    expect(calls(m, 'changeLine')).toHaveLength(1);
  });

  test('Enter and then Tab away queues one change, and the server version moves by one', async () => {
    const { m, o, user } = await openOrder();
    const before = m.server.orders.get(o.id)!.version;
    const qty = await typeQty(user, '12');
    await enterLikeABrowser(user, qty);
    await user.tab();
    await settle();
    expect(calls(m, 'changeLine')).toHaveLength(1);
    expect(await pendingCount(m, o.id)).toBe(1);
    await m.syncNow();
    expect(m.server.orders.get(o.id)!.version).toBe(before + 1);
    expect(m.server.orders.get(o.id)!.lines[0].qty_ordered).toBe(12);
  });

  test('a held Enter (key repeat) queues one change', async () => {
    const { m, user } = await openOrder();
    const qty = await typeQty(user, '12');
    holdKey(qty, { key: 'Enter', code: 'Enter' }, 3);
    fireEvent.change(qty);
    await settle();
    expect(calls(m, 'changeLine')).toHaveLength(1);
  });

  test('Enter twice on the same value is one act; a new value is a new act', async () => {
    const { m, user } = await openOrder();
    const qty = await typeQty(user, '12');
    await enterLikeABrowser(user, qty);
    await settle();
    await user.keyboard('{Enter}');
    await settle();
    expect(calls(m, 'changeLine')).toHaveLength(1);
    await typeQty(user, '15');
    await enterLikeABrowser(user, qtyInput());
    await user.tab();
    await settle();
    expect(calls(m, 'changeLine').map((c) => c.args[2])).toEqual([12, 15]);
    // Back to a value queued before is a new intention too.
    await typeQty(user, '12');
    await user.tab();
    await settle();
    expect(calls(m, 'changeLine').map((c) => c.args[2])).toEqual([12, 15, 12]);
  });

  test('leaving a field whose value did not change queues nothing', async () => {
    const { m, user } = await openOrder();
    await typeQty(user, '10');
    await user.tab();
    fireEvent.change(qtyInput());
    await settle();
    expect(calls(m, 'changeLine')).toHaveLength(0);
  });
});

describe('header fields: one edit, one act', () => {
  const fields: [string, string, unknown][] = [
    ['Customer PO', 'T-2', 'T-2'],
    ['Ship from', '3/2/26', '2026-03-02'],
    ['Ship by', '2026-03-25', '2026-03-25'],
  ];
  const keyOf: Record<string, string> = { 'Customer PO': 'customer_po', 'Ship from': 'ship_window_start', 'Ship by': 'ship_window_end' };

  for (const [label, typed, stored] of fields) {
    for (const how of ['Enter', 'blur', 'change', 'Enter then blur', 'held Enter'] as const) {
      test(`${label}: ${how} queues one edit`, async () => {
        const { m, o, user } = await openOrder();
        const input = screen.getByLabelText(label) as HTMLInputElement;
        input.focus();
        await user.clear(input);
        await user.keyboard(typed);
        if (how === 'Enter') await enterLikeABrowser(user, input);
        else if (how === 'blur') await user.tab();
        else if (how === 'change') fireEvent.change(input);
        else if (how === 'Enter then blur') {
          await enterLikeABrowser(user, input);
          await user.tab();
        } else {
          holdKey(input, { key: 'Enter', code: 'Enter' });
          fireEvent.change(input);
        }
        await settle();
        expect(calls(m, 'editOrder').map((c) => c.args)).toEqual([[o.id, { [keyOf[label]]: stored }]]);
      });
    }
  }

  for (const how of ['blur', 'change', 'change then blur'] as const) {
    test(`Notes: ${how} queues one edit`, async () => {
      const { m, o, user } = await openOrder();
      const notes = screen.getByLabelText('Notes') as HTMLTextAreaElement;
      notes.focus();
      await user.keyboard(' - rush');
      if (how === 'change') fireEvent.change(notes);
      else if (how === 'blur') await user.tab();
      else {
        fireEvent.change(notes);
        await user.tab();
      }
      await settle();
      expect(calls(m, 'editOrder').map((c) => c.args)).toEqual([[o.id, { notes: 'Call first - rush' }]]);
    });
  }

  test('Ctrl+Enter (save) and then leaving the field queue one edit', async () => {
    const { m, user } = await openOrder();
    const po = screen.getByLabelText('Customer PO');
    po.focus();
    await user.clear(po);
    await user.keyboard('T-9{Control>}{Enter}{/Control}');
    await user.tab();
    await settle();
    expect(calls(m, 'editOrder')).toHaveLength(1);
  });

  for (const how of ['Enter', 'Tab', 'click', 'double click'] as const) {
    test(`customer: picked by ${how}, then leaving the box, queues one change`, async () => {
      const { m, o, user } = await openOrder();
      const box = screen.getByRole('combobox', { name: /Customer/ });
      box.focus();
      await user.clear(box);
      await user.keyboard('austin');
      const option = await screen.findByRole('option', { name: 'Austin Boutique' });
      if (how === 'Enter') await user.keyboard('{Enter}');
      else if (how === 'Tab') await user.tab();
      else if (how === 'click') await user.click(option);
      else {
        await fireEvent.mouseDown(option);
        await fireEvent.mouseDown(option);
      }
      if (how !== 'Tab') await user.tab();
      await settle();
      expect(calls(m, 'editOrder').map((c) => c.args)).toEqual([[o.id, { customer_id: customer(m, 'Austin Boutique').id }]]);
    });
  }
});

describe('size-run grid: one Enter, one line per size', () => {
  async function openGrid() {
    const r = await openOrder();
    await r.user.keyboard('heron navy');
    await screen.findByRole('listbox', { name: 'Styles and colours' });
    await r.user.keyboard('{Enter}');
    await waitFocus(await screen.findByLabelText(/Quantity, size 28/));
    await r.user.keyboard('2');
    await r.user.tab();
    await r.user.keyboard('3');
    return r;
  }

  test('typing, Tab and the change event add nothing; Enter adds each size once', async () => {
    const { m, user } = await openGrid();
    await user.tab();
    fireEvent.change(screen.getByLabelText(/Quantity, size 30/));
    await settle();
    expect(calls(m, 'addLine')).toHaveLength(0);
    await enterLikeABrowser(user, screen.getByLabelText(/Quantity, size 32/));
    await settle();
    expect(calls(m, 'addLine').map((c) => c.args[2])).toEqual([2, 3]);
  });

  test('Enter then blur, a held Enter, and two quick Enters add each size once', async () => {
    const { m } = await openGrid();
    const cell = screen.getByLabelText(/Quantity, size 30/);
    holdKey(cell, { key: 'Enter', code: 'Enter' }, 3);
    fireEvent.keyDown(cell, { key: 'Enter', code: 'Enter' });
    fireEvent.change(cell);
    fireEvent.blur(cell);
    await settle();
    expect(calls(m, 'addLine').map((c) => c.args[2])).toEqual([2, 3]);
  });

  test('a new order: two quick Enters create the order once and add each size once', async () => {
    const m = mockBackend();
    const { user } = renderEditor(m, null);
    await waitFocus(await screen.findByRole('combobox', { name: /Customer/ }));
    await user.keyboard('tok');
    await user.tab();
    screen.getByRole('combobox', { name: /Find SKU/ }).focus();
    await user.keyboard('heron navy');
    await screen.findByRole('listbox', { name: 'Styles and colours' });
    await user.keyboard('{Enter}');
    const cell = await screen.findByLabelText(/Quantity, size 28/);
    await waitFocus(cell);
    await user.keyboard('4');
    fireEvent.keyDown(cell, { key: 'Enter', code: 'Enter' });
    fireEvent.keyDown(cell, { key: 'Enter', code: 'Enter' });
    await settle();
    expect(calls(m, 'createOrder')).toHaveLength(1);
    expect(calls(m, 'addLine').map((c) => c.args[2])).toEqual([4]);
  });
});

describe('buttons and keys: one press, one act', () => {
  const row = (size = 'M') => document.querySelector(`table.lines tr[data-sku$="· ${size}"]`) as HTMLElement;

  test('Allocate: a double click queues one allocation; the next click is the next act', async () => {
    const { m, user } = await openOrder([['M', 10, 0]]);
    within(row()).getByTestId('units').focus();
    await user.keyboard('2');
    await user.dblClick(within(row()).getByRole('button', { name: /^Allocate 2 of/ }));
    await settle();
    expect(calls(m, 'allocate').map((c) => c.args[2])).toEqual([2]);
    await user.click(within(row()).getByRole('button', { name: /^Allocate 8 of/ }));
    await settle();
    expect(calls(m, 'allocate').map((c) => c.args[2])).toEqual([2, 8]);
  });

  test('Allocate: a held Alt+Shift+A in the quantity queues one allocation', async () => {
    const { m } = await openOrder([['M', 10, 0]]);
    holdKey(qtyInput(), { key: 'A', code: 'KeyA', altKey: true, shiftKey: true }, 3);
    await settle();
    expect(calls(m, 'allocate').map((c) => c.args[2])).toEqual([10]);
  });

  test('Allocate all: a double click queues one allocation per line', async () => {
    const { m, user } = await openOrder([
      ['M', 10, 0],
      ['L', 5, 0],
    ]);
    await user.dblClick(screen.getByRole('button', { name: /Allocate all/ }));
    await settle();
    expect(calls(m, 'allocate').map((c) => c.args[2])).toEqual([10, 5]);
  });

  test('Allocate all: a held Alt+A, and a second press while the first is on its way, queue one allocation per line', async () => {
    const { m } = await openOrder([
      ['M', 10, 0],
      ['L', 5, 0],
    ]);
    holdKey(document.body, { key: 'a', code: 'KeyA', altKey: true }, 3);
    fireEvent.keyDown(document.body, { key: 'a', code: 'KeyA', altKey: true });
    await settle();
    expect(calls(m, 'allocate').map((c) => c.args[2])).toEqual([10, 5]);
  });

  for (const how of ['Enter', 'Enter then blur', 'held Enter', 'blur', 'change'] as const) {
    test(`units field: ${how} queues ${how === 'blur' || how === 'change' ? 'nothing (Enter is the act)' : 'one allocation'}`, async () => {
      const { m, user } = await openOrder([['M', 10, 0]]);
      const units = within(row()).getByTestId('units');
      units.focus();
      await user.keyboard('3');
      if (how === 'Enter') await enterLikeABrowser(user, units);
      else if (how === 'Enter then blur') {
        await enterLikeABrowser(user, units);
        await user.tab();
      } else if (how === 'held Enter') holdKey(units, { key: 'Enter', code: 'Enter' }, 3);
      else if (how === 'blur') await user.tab();
      else fireEvent.change(units);
      await settle();
      expect(calls(m, 'allocate').map((c) => c.args[2])).toEqual(how === 'blur' || how === 'change' ? [] : [3]);
    });
  }

  test('units field: a held Shift+Enter queues one release', async () => {
    const { m, user } = await openOrder([['M', 10, 6]]);
    within(row()).getByTestId('units').focus();
    await user.keyboard('2');
    holdKey(within(row()).getByTestId('units'), { key: 'Enter', code: 'Enter', shiftKey: true }, 3);
    await settle();
    expect(calls(m, 'release').map((c) => c.args[2])).toEqual([2]);
  });

  test('Release: a double click queues one release', async () => {
    const { m, user } = await openOrder([['M', 10, 6]]);
    within(row()).getByTestId('units').focus();
    await user.keyboard('2');
    await user.dblClick(within(row()).getByRole('button', { name: /^Release 2 of/ }));
    await settle();
    expect(calls(m, 'release').map((c) => c.args[2])).toEqual([2]);
  });

  test('Remove: a double click and a held Alt+Delete queue one removal', async () => {
    const { m, user } = await openOrder([
      ['M', 10, 0],
      ['L', 5, 0],
    ]);
    await user.dblClick(within(row('M')).getByRole('button', { name: /^Remove the line/ }));
    await settle();
    holdKey(qtyInput('L'), { key: 'Delete', code: 'Delete', altKey: true }, 3);
    await settle();
    expect(calls(m, 'removeLine')).toHaveLength(2);
    expect(new Set(calls(m, 'removeLine').map((c) => c.args[1])).size).toBe(2);
    expect(screen.queryByTestId('editor-error')).toBeNull();
  });

  test('Confirm: a double click queues one confirmation', async () => {
    const { m, user } = await openOrder();
    await user.dblClick(screen.getByRole('button', { name: /^Confirm/ }));
    await settle();
    expect(calls(m, 'confirmOrder')).toHaveLength(1);
  });

  test('Confirm: a held Alt+O, and a second press while the first is on its way, queue one confirmation', async () => {
    const { m } = await openOrder();
    holdKey(document.body, { key: 'o', code: 'KeyO', altKey: true }, 3);
    fireEvent.keyDown(document.body, { key: 'o', code: 'KeyO', altKey: true });
    await settle();
    expect(calls(m, 'confirmOrder')).toHaveLength(1);
  });

  test('Confirm with a quantity typed and not yet left: the quantity first, once, then the confirmation', async () => {
    const { m, o, user } = await openOrder();
    await typeQty(user, '7');
    await user.keyboard('{Alt>}o{/Alt}');
    await settle();
    expect(m.calls.filter((c) => c.name === 'changeLine' || c.name === 'confirmOrder').map((c) => c.name)).toEqual(['changeLine', 'confirmOrder']);
    expect((await m.getOrder(o.id))!.order.lines[0].qty_ordered).toBe(7);
  });

  test('Cancel the order: a double click on the answer queues one cancellation', async () => {
    const { m, user } = await openOrder();
    await user.click(screen.getByRole('button', { name: /^Cancel order/ }));
    const dialog = await screen.findByRole('alertdialog');
    await user.dblClick(within(dialog).getByRole('button', { name: 'Cancel the order' }));
    await settle();
    expect(calls(m, 'cancelOrder')).toHaveLength(1);
  });
});
