// Any quantity: allocate or release N units of a line from the keyboard, with
// the bounds said in words before anything is queued; notices that follow an
// act to the server ("Allocating 4 of …" until the server has it, then
// "Allocated 4 of …"; saved on this computer while offline); and notices that
// give way to what came after them.
import { screen, waitFor, within } from '@testing-library/svelte';
import { describe, expect, test } from 'vitest';
import OrderEditor from '../src/components/OrderEditor.svelte';
import { conflictFixture, fieldDiff, insufficientAts } from '../src/lib/fixtures';
import type { MockBackend } from '../src/lib/mock';
import { customer, focused, mockBackend, renderScreen, sku, waitFocus } from './helpers';

const NAME = 'Wren Tee · Black · M (WT-B-M)';
const row = () => document.querySelector('table.lines tr[data-sku$="· M"]') as HTMLElement;
const units = () => within(row()).getByTestId('units') as HTMLInputElement;
const calls = (m: MockBackend, name: string) => m.calls.filter((c) => c.name === name).map((c) => c.args[2]);
const errorText = () => screen.queryByTestId('editor-error')?.textContent ?? null;
const noticeText = () => screen.queryByTestId('editor-notice')?.textContent ?? null;
const badge = () => document.querySelector('.editor-head [data-badge]')?.getAttribute('data-badge') ?? null;
const OFFLINE = 'saved on this computer; it will be sent when the server can be reached.';

async function openLine(ordered = 10, allocated = 0) {
  const m = mockBackend();
  const o = m.remoteCreateOrder(
    { customer_id: customer(m, 'Tokyo Distributor').id, customer_po: 'T-1', ship_window_start: null, ship_window_end: null, notes: null },
    [[sku(m, 'Wren Tee', 'Black', 'M').id, ordered, allocated]],
  );
  const r = renderScreen(OrderEditor, { orderId: o.id, onback: () => {}, onconflict: () => {} }, m);
  await screen.findByLabelText(/Quantity ordered, Wren Tee · Black · M/);
  await waitFocus(screen.getByRole('combobox', { name: /Find SKU/ }));
  return { m, o, ...r };
}

describe('allocate or release any quantity', () => {
  test('from the keyboard: Alt+L, Tab to the units, type 4, Enter allocates 4; Shift+Enter releases', async () => {
    const { m, user } = await openLine(10, 0);
    await user.keyboard('{Alt>}l{/Alt}');
    await user.tab();
    expect(focused()).toBe(units());
    expect(units().placeholder).toBe('10');
    expect(within(row()).getByRole('button', { name: `Allocate 10 of Wren Tee · Black · M` })).toBeTruthy();

    await user.keyboard('4');
    expect(within(row()).getByRole('button', { name: /^Allocate 4 of/ })).toBeTruthy();
    await user.keyboard('{Enter}');
    await waitFor(() => expect(calls(m, 'allocate')).toEqual([4]));
    await waitFor(() => expect(within(row()).getByTestId('allocated').textContent).toBe('4'));
    expect(noticeText()).toBe(`Allocating 4 of ${NAME}…`);
    expect(units().value).toBe('');
    expect(units().placeholder).toBe('6');
    // The focus stays in the field for the next figure.
    expect(focused()).toBe(units());

    await user.keyboard('3{Shift>}{Enter}{/Shift}');
    await waitFor(() => expect(calls(m, 'release')).toEqual([3]));
    await waitFor(() => expect(within(row()).getByTestId('allocated').textContent).toBe('1'));
    expect(noticeText()).toBe(`Releasing 3 of ${NAME}…`);
  });

  test('an empty field allocates the open quantity, and releases everything allocated', async () => {
    const { m, user } = await openLine(10, 4);
    units().focus();
    await user.keyboard('{Enter}');
    await waitFor(() => expect(calls(m, 'allocate')).toEqual([6]));
    await waitFor(() => expect(within(row()).getByTestId('allocated').textContent).toBe('10'));
    await user.keyboard('{Shift>}{Enter}{/Shift}');
    await waitFor(() => expect(calls(m, 'release')).toEqual([10]));
  });

  test('the buttons take the units typed', async () => {
    const { m, user } = await openLine(10, 6);
    units().focus();
    await user.keyboard('2');
    await user.click(within(row()).getByRole('button', { name: /^Release 2 of/ }));
    await waitFor(() => expect(calls(m, 'release')).toEqual([2]));
    units().focus();
    await user.keyboard('5');
    await user.click(within(row()).getByRole('button', { name: /^Allocate 5 of/ }));
    await waitFor(() => expect(calls(m, 'allocate')).toEqual([5]));
  });

  test('bounds are said in words and nothing is queued', async () => {
    const { m, user } = await openLine(10, 4);
    units().focus();
    await user.keyboard('7{Enter}');
    expect(errorText()).toBe(`Only 6 of ${NAME} are open to allocate (10 ordered, 4 allocated): allocate 6 or fewer.`);
    await user.clear(units());
    await user.keyboard('0{Enter}');
    expect(errorText()).toBe('Units to allocate must be a whole number from 1 to 6.');
    await user.clear(units());
    await user.keyboard('2.5{Enter}');
    expect(errorText()).toBe('Units to allocate must be a whole number from 1 to 6.');
    await user.clear(units());
    await user.keyboard('5{Shift>}{Enter}{/Shift}');
    expect(errorText()).toBe(`Only 4 of ${NAME} are allocated: release 4 or fewer.`);
    await user.clear(units());
    await user.keyboard('x{Shift>}{Enter}{/Shift}');
    expect(errorText()).toBe('Units to release must be a whole number from 1 to 4.');
    expect(calls(m, 'allocate')).toEqual([]);
    expect(calls(m, 'release')).toEqual([]);
    // What was typed stays, to be corrected.
    expect(units().value).toBe('x');
  });

  test('a line with nothing allocated says so when asked to release', async () => {
    const { m, user } = await openLine(10, 0);
    units().focus();
    await user.keyboard('2{Shift>}{Enter}{/Shift}');
    expect(errorText()).toBe(`Nothing of ${NAME} is allocated, so there is nothing to release.`);
    expect(calls(m, 'release')).toEqual([]);
  });
});

describe('notices give way', () => {
  test('to another act, to an error, and to a refusal', async () => {
    const { m, o, user, live } = await openLine(10, 0);
    units().focus();
    await user.keyboard('6{Enter}');
    await waitFor(() => expect(noticeText()).toBe(`Allocating 6 of ${NAME}…`));

    // Another act: the PO edit says nothing of its own, and the old notice goes.
    const po = screen.getByLabelText('Customer PO');
    po.focus();
    await user.clear(po);
    await user.keyboard('T-2{Enter}');
    await waitFor(() => expect(m.calls.filter((c) => c.name === 'editOrder')).toHaveLength(1));
    await waitFor(() => expect(noticeText()).toBeNull());

    // An error replaces a notice.
    units().focus();
    await user.keyboard('1{Enter}');
    await waitFor(() => expect(noticeText()).toBe(`Allocating 1 of ${NAME}…`));
    await user.keyboard('9{Enter}');
    expect(errorText()).toMatch(/^Only 3 of/);
    expect(noticeText()).toBeNull();

    // And a notice replaces the error.
    await user.clear(units());
    await user.keyboard('{Enter}');
    await waitFor(() => expect(noticeText()).toBe(`Allocating 3 of ${NAME}…`));
    expect(errorText()).toBeNull();

    // A refusal arriving supersedes the notice that the act is on its way.
    m.putRejection(o.id, { kind: 'allocate', line_id: o.lines[0].id, qty: 3 }, insufficientAts({ skuId: o.lines[0].sku_id, requested: 3, atsNow: 0 }));
    live.tick += 1;
    await screen.findByRole('heading', { name: 'Not enough stock to allocate' });
    await waitFor(() => expect(noticeText()).toBeNull());
  });
});

describe('a notice follows its act to the server', () => {
  test('allocate, then release: "…ing" while pending, "…ed" once a sync has taken it, beside the Synced badge', async () => {
    const { m, user, live } = await openLine(10, 0);
    await live.start();
    units().focus();
    await user.keyboard('4{Enter}');
    await waitFor(() => expect(calls(m, 'allocate')).toEqual([4]));
    await waitFor(() => expect(badge()).toBe('pending'));
    expect(noticeText()).toBe(`Allocating 4 of ${NAME}…`);

    await m.syncNow();
    await waitFor(() => expect(badge()).toBe('synced'));
    await waitFor(() => expect(noticeText()).toBe(`Allocated 4 of ${NAME}.`));

    await user.keyboard('3{Shift>}{Enter}{/Shift}');
    await waitFor(() => expect(calls(m, 'release')).toEqual([3]));
    await waitFor(() => expect(badge()).toBe('pending'));
    expect(noticeText()).toBe(`Releasing 3 of ${NAME}…`);
    await m.syncNow();
    await waitFor(() => expect(noticeText()).toBe(`Released 3 of ${NAME}.`));
    expect(badge()).toBe('synced');
    live.stop();
  });

  test('allocate all, confirm and cancel say the same way how far they got', async () => {
    const m = mockBackend();
    const o = m.remoteCreateOrder(
      { customer_id: customer(m, 'Tokyo Distributor').id, customer_po: 'T-9', ship_window_start: null, ship_window_end: null, notes: null },
      [
        [sku(m, 'Wren Tee', 'Black', 'M').id, 5, 0],
        [sku(m, 'Wren Tee', 'Black', 'L').id, 3, 0],
      ],
    );
    const { user, live } = renderScreen(OrderEditor, { orderId: o.id, onback: () => {}, onconflict: () => {} }, m);
    await live.start();
    await screen.findByLabelText(/Quantity ordered, Wren Tee · Black · L/);

    await user.click(screen.getByRole('button', { name: /^Allocate all/ }));
    await waitFor(() => expect(calls(m, 'allocate')).toEqual([5, 3]));
    await waitFor(() => expect(badge()).toBe('pending'));
    expect(noticeText()).toBe('Allocating 2 lines…');
    await m.syncNow();
    await waitFor(() => expect(noticeText()).toBe('Allocated 2 lines.'));

    await user.click(screen.getByRole('button', { name: /^Confirm/ }));
    await waitFor(() => expect(screen.getByTestId('order-status').textContent).toBe('Confirming (pending)'));
    expect(noticeText()).toBe('Confirming the order…');
    await m.syncNow();
    await waitFor(() => expect(noticeText()).toBe('Order confirmed.'));
    expect(screen.getByTestId('order-status').textContent).toBe('Confirmed');

    await user.click(screen.getByRole('button', { name: /^Cancel order/ }));
    await user.click(await screen.findByRole('button', { name: 'Cancel the order' }));
    await waitFor(() => expect(screen.getByTestId('order-status').textContent).toBe('Cancelling (pending)'));
    expect(noticeText()).toBe('Cancelling the order…');
    await m.syncNow();
    await waitFor(() => expect(noticeText()).toBe('Order cancelled.'));
    expect(badge()).toBe('synced');
    live.stop();
  });

  test('offline it is saved on this computer, not "allocating"; when the server is back, it is done', async () => {
    const { m, user, live } = await openLine(10, 0);
    m.setNetwork(false);
    await live.start();
    units().focus();
    await user.keyboard('4{Enter}');
    await waitFor(() => expect(calls(m, 'allocate')).toEqual([4]));
    await waitFor(() => expect(noticeText()).toBe(`Allocation of 4 of ${NAME} ${OFFLINE}`));
    // Sync now while the network is down changes nothing.
    await m.syncNow();
    await waitFor(() => expect(live.status?.online).toBe(false));
    expect(noticeText()).toBe(`Allocation of 4 of ${NAME} ${OFFLINE}`);

    m.setNetwork(true);
    await waitFor(() => expect(noticeText()).toBe(`Allocated 4 of ${NAME}.`));
    expect(badge()).toBe('synced');
    live.stop();
  });

  test('the network dropping after the act turns "allocating" into "saved on this computer"', async () => {
    const { m, user, live } = await openLine(10, 0);
    await live.start();
    units().focus();
    await user.keyboard('2{Enter}');
    await waitFor(() => expect(calls(m, 'allocate')).toEqual([2]));
    await waitFor(() => expect(badge()).toBe('pending'));
    expect(noticeText()).toBe(`Allocating 2 of ${NAME}…`);
    m.setNetwork(false);
    await waitFor(() => expect(noticeText()).toBe(`Allocation of 2 of ${NAME} ${OFFLINE}`));
    m.setNetwork(true);
    await waitFor(() => expect(noticeText()).toBe(`Allocated 2 of ${NAME}.`));
    live.stop();
  });

  test('a reload already under way when the act was queued cannot call it done', async () => {
    const m = mockBackend();
    const o = m.remoteCreateOrder(
      { customer_id: customer(m, 'Tokyo Distributor').id, customer_po: 'T-1', ship_window_start: null, ship_window_end: null, notes: null },
      [[sku(m, 'Wren Tee', 'Black', 'M').id, 10, 0]],
    );
    // The next getOrder reads the desk at once but answers late, as an IPC call behind a busy engine might.
    let slow = false;
    const backend = new Proxy(m, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver);
        if (prop !== 'getOrder') return typeof v === 'function' ? v.bind(target) : v;
        return async (id: string) => {
          const r = await m.getOrder(id);
          if (slow) {
            slow = false;
            await new Promise((done) => setTimeout(done, 150));
          }
          return r;
        };
      },
    }) as MockBackend;
    const { user, live } = renderScreen(OrderEditor, { orderId: o.id, onback: () => {}, onconflict: () => {} }, backend);
    await screen.findByLabelText(/Quantity ordered, Wren Tee · Black · M/);
    const seen: (string | null)[] = [];
    const watch = new MutationObserver(() => seen.push(noticeText()));
    watch.observe(document.body, { subtree: true, childList: true, characterData: true });

    slow = true;
    live.tick += 1;
    await waitFor(() => expect(slow).toBe(false));
    units().focus();
    await user.keyboard('4{Enter}');
    await waitFor(() => expect(calls(m, 'allocate')).toEqual([4]));
    await new Promise((done) => setTimeout(done, 250));
    watch.disconnect();
    expect(seen).toContain(`Allocating 4 of ${NAME}…`);
    expect(seen).not.toContain(`Allocated 4 of ${NAME}.`);
    expect(noticeText()).toBe(`Allocating 4 of ${NAME}…`);
  });

  test('held by a conflict it says so; dropped by the choice, it is never called done', async () => {
    const { m, o, user, live } = await openLine(10, 0);
    await live.start();
    units().focus();
    await user.keyboard('4{Enter}');
    await waitFor(() => expect(calls(m, 'allocate')).toEqual([4]));
    await waitFor(() => expect(badge()).toBe('pending'));

    const mine = (await m.getOrder(o.id))!.order;
    m.remoteEditOrder(o.id, { notes: 'hold' }, undefined, false);
    const theirs = m.server.orders.get(o.id)!;
    m.putConflict(
      conflictFixture({
        base: o,
        mine,
        theirs,
        held: 1,
        fields: [fieldDiff('notes', { base: null, mine: null, theirs: 'hold' }, { mine_changed: false, theirs_changed: true, collides: false })],
      }),
    );
    await waitFor(() => expect(badge()).toBe('conflict'));
    await waitFor(() => expect(noticeText()).toBe(`Allocation of 4 of ${NAME} is held until you choose.`));

    await m.resolveConflict(o.id, 'discard_mine');
    await waitFor(() => expect(badge()).toBe('synced'));
    await waitFor(() => expect(noticeText()).toBeNull());
    live.stop();
  });
});

describe('payment words', async () => {
  const { paymentWords, money: m } = await import('../src/lib/format');
  const when = () => 'June 3, 2026';
  const inv = (amount_paid: number, status: 'awaiting_payment' | 'paid') => ({ amount: 16800, amount_paid, status, paid_at: status === 'paid' ? '2026-06-03T10:00:00Z' : null });
  test('each state of an invoice says what was paid and what is owed', () => {
    expect(paymentWords(inv(0, 'awaiting_payment'), when)).toBe('awaiting payment');
    expect(paymentWords(inv(10000, 'awaiting_payment'), when)).toBe(`${m(10000)} paid, ${m(6800)} still owed`);
    expect(paymentWords(inv(16800, 'paid'), when)).toBe('paid on June 3, 2026');
    expect(paymentWords(inv(17300, 'paid'), when)).toBe(`paid on June 3, 2026, over-paid by ${m(500)}`);
  });
});
