// Rejections, the printable pending list, the help overlay and sign-in.
import { screen, waitFor, within } from '@testing-library/svelte';
import { describe, expect, test } from 'vitest';
import { insufficientAts } from '../src/lib/fixtures';
import { SHORTCUTS } from '../src/lib/keys';
import { MockBackend } from '../src/lib/mock';
import { customer, mockBackend, renderApp, sku, waitFocus } from './helpers';

describe('rejected allocation', () => {
  test('shows the ATS now and reduces to it from the order', async () => {
    const m = mockBackend();
    const kestrel = sku(m, 'Kestrel Overshirt', 'Washed Indigo', 'M');
    const o = m.remoteCreateOrder(
      { customer_id: customer(m, 'Austin Boutique').id, customer_po: 'AB', ship_window_start: null, ship_window_end: null, notes: null },
      [[kestrel.id, 9, 0]],
    );
    // The server refused allocating all 9: the engine's report, as a fixture.
    m.putRejection(o.id, { kind: 'allocate', line_id: o.lines[0].id, qty: 9 }, insufficientAts({ skuId: kestrel.id, requested: 9, atsNow: 6 }));
    const { user } = renderApp(m);
    await waitFocus(await screen.findByRole('listbox', { name: /Orders/ }));
    await user.keyboard('{Enter}');
    const card = (await screen.findByRole('heading', { name: 'Not enough stock to allocate' })).closest('article')!;
    expect(within(card as HTMLElement).getByTestId('rejection-ats').textContent).toMatch(/Asked for 9; available to sell now: 6\./);
    const reduce = within(card as HTMLElement).getByRole('button', { name: 'Reduce to ATS (6)' });
    within(card as HTMLElement).getByRole('button', { name: 'Remove line' });
    within(card as HTMLElement).getByRole('button', { name: 'Try again' });
    await user.click(reduce);
    expect(m.calls.find((c) => c.name === 'resolveRejection')?.args).toEqual([1, { choice: 'reduce_to_ats', qty: 6 }]);
    await m.syncNow();
    await waitFor(() => expect(screen.queryByRole('heading', { name: 'Not enough stock to allocate' })).toBeNull());
    await waitFor(() => expect(screen.getByTestId('allocated').textContent).toBe('6'));
    expect(screen.getByTestId('ats').textContent!.trim()).toBe('0');
  });

  test('Alt+R lists every refused change', async () => {
    const { user } = renderApp(new MockBackend({ seed: 'demo' }));
    await screen.findByRole('listbox', { name: /Orders/ });
    await user.keyboard('{Alt>}r{/Alt}');
    await screen.findByRole('heading', { name: 'Refused changes' });
    await waitFor(() => expect(document.querySelectorAll('article.rejection')).toHaveLength(1));
    expect(screen.getByText('Austin Boutique')).toBeTruthy();
  });
});

describe('printable pending list', () => {
  test('lists every pending change by order, and Ctrl+P prints', async () => {
    const m = new MockBackend({ seed: 'demo' });
    const { user } = renderApp(m);
    await screen.findByRole('listbox', { name: /Orders/ });
    await user.keyboard('{Alt>}p{/Alt}');
    await screen.findByRole('heading', { name: 'Changes not yet on the server' });
    const pending = await m.listPending();
    await waitFor(() => expect(document.querySelectorAll('tr[data-seq]')).toHaveLength(pending.length));
    expect(pending.length).toBe(5);
    expect(screen.getByText('Harbour & Pine')).toBeTruthy();
    expect(screen.getByText('New order, PO HP-77')).toBeTruthy();
    await user.keyboard('{Control>}p{/Control}');
    expect(window.print).toHaveBeenCalled();
  });
});

describe('help overlay', () => {
  test('? shows every shortcut; Escape closes and gives focus back', async () => {
    const { user } = renderApp(mockBackend());
    const list = await screen.findByRole('listbox', { name: /Orders/ });
    await waitFocus(list);
    await user.keyboard('?');
    const dialog = await screen.findByRole('dialog', { name: 'Keyboard shortcuts' });
    expect(dialog.querySelectorAll('tr[data-shortcut]')).toHaveLength(SHORTCUTS.length);
    for (const s of SHORTCUTS) expect(dialog.querySelector(`tr[data-shortcut="${s.id}"]`)?.textContent).toContain(s.does);
    // While help is open, desk keys do nothing.
    await user.keyboard('n');
    expect(screen.queryByRole('combobox', { name: /Customer/ })).toBeNull();
    await user.keyboard('{Escape}');
    await waitFor(() => expect(screen.queryByRole('dialog')).toBeNull());
    await waitFocus(list);
  });

  test('? typed into a text field is just a question mark', async () => {
    const { user } = renderApp(mockBackend());
    await waitFocus(await screen.findByRole('listbox', { name: /Orders/ }));
    await user.keyboard('/');
    await user.keyboard('?');
    expect(screen.queryByRole('dialog')).toBeNull();
    expect((screen.getByLabelText(/Search/) as HTMLInputElement).value).toBe('?');
  });
});

describe('sign-in', () => {
  test('every field is labelled; a wrong password says so; the right one opens the desk', async () => {
    const m = new MockBackend({ seed: 'catalog' });
    const { user } = renderApp(m);
    const email = await screen.findByLabelText('Email');
    await waitFocus(email);
    expect(screen.getByLabelText('Server URL')).toBeTruthy();
    expect(screen.getByLabelText('Tenant')).toBeTruthy();
    await user.keyboard('dana@acme.test');
    await user.tab();
    await user.keyboard('wrong{Enter}');
    expect((await screen.findByRole('alert')).textContent).toMatch(/wrong tenant, email or password/);
    await user.clear(screen.getByLabelText('Password'));
    await user.type(screen.getByLabelText('Password'), 'holdfast-demo{Enter}');
    await screen.findByRole('listbox', { name: /Orders/ });
    expect(m.calls.filter((c) => c.name === 'signIn')).toHaveLength(2);
    expect(JSON.stringify(m.calls)).not.toContain('holdfast-demo');
  });
});
