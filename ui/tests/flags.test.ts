// Stuck work is named: an act waiting 15 minutes while online, and an order
// whose partner delivery is dead-lettered, are flagged on the desk row and
// in the status bar; an act that waited because the desk was offline is not.
import { screen, waitFor, within } from '@testing-library/svelte';
import { describe, expect, test } from 'vitest';
import { customer, fakeClock, mockBackend, renderApp } from './helpers';

const row = (po: string) =>
  screen.getAllByRole('option').find((o) => o.textContent?.includes(po)) as HTMLElement;

describe('stuck work', () => {
  test('an act pending 15 minutes while online is stuck; a dead-lettered order is flagged', async () => {
    const clock = fakeClock();
    const m = mockBackend({ now: clock });
    renderApp(m, clock);
    await screen.findByRole('listbox', { name: /Orders/ });
    m.setNetwork(true);
    const tokyo = customer(m, 'Tokyo Distributor').id;
    const id = await m.createOrder({ customer_id: tokyo, customer_po: 'ST-1', ship_window_start: null, ship_window_end: null, notes: null });
    await waitFor(() => expect(row('ST-1')).toBeTruthy());
    expect(within(row('ST-1')).queryByTestId('stuck-flag')).toBeNull();
    expect(screen.queryByTestId('stuck')).toBeNull();

    clock.advance(16 * 60 * 1000);
    m.poke();
    await waitFor(() => expect(within(row('ST-1')).getByTestId('stuck-flag').textContent).toBe('Stuck'));
    await waitFor(() => expect(screen.getByTestId('stuck').textContent).toMatch(/^\s*1 change has waited 15 minutes or more while online/));

    m.setDeadLettered(id, true);
    await waitFor(() => expect(within(row('ST-1')).getByTestId('partner-flag').textContent).toBe('Partner not updated'));
    await waitFor(() => expect(screen.getByTestId('partner-trouble').textContent).toMatch(/1 order not delivered to a partner/));
    m.setDeadLettered(id, false);
    await waitFor(() => expect(screen.queryByTestId('partner-trouble')).toBeNull());
  });

  test('offline, old acts are not stuck', async () => {
    const clock = fakeClock();
    const m = mockBackend({ now: clock });
    renderApp(m, clock);
    await screen.findByRole('listbox', { name: /Orders/ });
    m.setNetwork(false);
    const tokyo = customer(m, 'Tokyo Distributor').id;
    await m.createOrder({ customer_id: tokyo, customer_po: 'ST-2', ship_window_start: null, ship_window_end: null, notes: null });
    clock.advance(60 * 60 * 1000);
    m.poke();
    await waitFor(() => expect(row('ST-2')).toBeTruthy());
    await waitFor(() => expect(screen.getByTestId('pending-count').textContent).toMatch(/Pending: 1/));
    expect(within(row('ST-2')).queryByTestId('stuck-flag')).toBeNull();
    expect(screen.queryByTestId('stuck')).toBeNull();
  });
});
