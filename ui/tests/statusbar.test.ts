// The sync status bar: online/offline, pending count, oldest pending age, last synced, Sync now.
import { screen, waitFor } from '@testing-library/svelte';
import { describe, expect, test } from 'vitest';
import { customer, fakeClock, mockBackend, renderApp } from './helpers';

const text = (id: string) => screen.getByTestId(id).textContent!.replace(/\s+/g, ' ').trim();

describe('status bar', () => {
  test('offline, pending count and oldest age; Sync now drains it when the server is back', async () => {
    const clock = fakeClock();
    const m = mockBackend({ now: clock });
    const { user } = renderApp(m, clock);
    await screen.findByRole('listbox', { name: /Orders/ });
    expect(text('online')).toBe('Connecting…');
    expect(text('last-synced')).toBe('Last synced: never');

    m.setNetwork(false);
    await waitFor(() => expect(text('online')).toBe('Offline'));
    expect(text('offline-note')).toBe('Server unreachable — your changes are saved on this computer');
    // The transport's words only behind Details, closed until asked for.
    const details = screen.getByTestId('sync-error') as HTMLDetailsElement;
    expect(details.open).toBe(false);
    expect(details.querySelector('code')!.textContent).toMatch(/cannot be reached/);
    await user.click(screen.getByText('Details'));
    expect(details.open).toBe(true);

    const tokyo = customer(m, 'Tokyo Distributor').id;
    await m.createOrder({ customer_id: tokyo, customer_po: null, ship_window_start: null, ship_window_end: null, notes: null });
    await m.createOrder({ customer_id: tokyo, customer_po: 'B', ship_window_start: null, ship_window_end: null, notes: null });
    await waitFor(() => expect(text('pending-count')).toBe('Pending: 2'));
    clock.advance(40_000);
    await waitFor(() => expect(text('oldest-pending')).toBe('Oldest pending: 40 s'), { timeout: 2000 });

    // Sync now while offline: tried, still offline, nothing lost.
    await user.click(screen.getByRole('button', { name: /Sync now/ }));
    expect(m.calls.filter((c) => c.name === 'syncNow')).toHaveLength(1);
    expect(text('pending-count')).toBe('Pending: 2');

    m.setNetwork(true);
    await waitFor(() => expect(text('online')).toBe('Online'));
    await waitFor(() => expect(text('pending-count')).toBe('Pending: 0'));
    expect(text('oldest-pending')).toBe('Oldest pending: —');
    expect(text('last-synced')).toBe('Last synced: just now');
    clock.advance(12_000);
    await waitFor(() => expect(text('last-synced')).toBe('Last synced: 12 s ago'), { timeout: 2000 });
    expect(screen.queryByTestId('sync-error')).toBeNull();
    expect(screen.queryByTestId('offline-note')).toBeNull();
  });

  test('Alt+S syncs now from anywhere', async () => {
    const m = mockBackend();
    const { user } = renderApp(m);
    await screen.findByRole('listbox', { name: /Orders/ });
    await user.keyboard('{Alt>}s{/Alt}');
    await waitFor(() => expect(m.calls.filter((c) => c.name === 'syncNow')).toHaveLength(1));
    await waitFor(() => expect(text('online')).toBe('Online'));
  });

  test('conflicts and rejections are counted', async () => {
    const { MockBackend } = await import('../src/lib/mock');
    renderApp(new MockBackend({ seed: 'demo' }));
    await screen.findByRole('listbox', { name: /Orders/ });
    await waitFor(() => expect(text('attention')).toBe('1 conflict 1 rejected'));
    expect(text('pending-count')).toBe('Pending: 5');
  });
});
