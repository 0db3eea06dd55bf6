// The order confirmation: letterhead, customer, PO, lines with unit prices
// and the total; marked PENDING while anything on it is not yet on the
// server; the invoice and its payment once there is one.
import { screen, waitFor, within } from '@testing-library/svelte';
import { describe, expect, test, vi } from 'vitest';
import OrderDocument from '../src/components/OrderDocument.svelte';
import { customer, mockBackend, renderScreen, sku } from './helpers';

const money = (c: number) => `$${(c / 100).toLocaleString('en-US', { minimumFractionDigits: 2 })}`;

describe('order confirmation', () => {
  test('pending, then accepted and invoiced, then paid', async () => {
    const m = mockBackend();
    const profile = (await m.getProfile())!;
    m.setNetwork(false);
    const tokyo = customer(m, 'Tokyo Distributor');
    const id = await m.createOrder({ customer_id: tokyo.id, customer_po: 'TK-42', ship_window_start: '2027-01-10', ship_window_end: '2027-01-20', notes: null });
    const wren = sku(m, 'Wren Tee', 'White', 'S');
    await m.addLine(id, wren.id, 3);
    await m.confirmOrder(id);
    const onclose = vi.fn();
    const { user, live } = renderScreen(OrderDocument, { orderId: id, profile, onclose }, m);
    await live.start();

    const doc = await screen.findByTestId('confirmation');
    expect(within(doc).getByText(profile.tenant_name)).toBeTruthy();
    expect(within(doc).getByText('Order confirmation')).toBeTruthy();
    expect(doc.textContent).toContain('Tokyo Distributor');
    expect(doc.textContent).toContain('TK-42');
    expect(doc.textContent).toContain('Wren Tee · White · S');
    const price = m.server.priceFor(tokyo.id, wren.id)!;
    expect(screen.getByTestId('document-total').textContent).toBe(money(3 * price));
    expect(screen.getByTestId('pending-mark').textContent).toBe('PENDING — not yet accepted by the server');
    expect(screen.getByTestId('document-status').textContent).toBe('Confirmed (pending)');
    expect(screen.queryByTestId('document-invoice')).toBeNull();
    // The print button has the focus; Escape goes back.
    await waitFor(() => expect(document.activeElement?.textContent).toMatch(/Print or save as PDF/));

    m.setNetwork(true);
    await waitFor(() => expect(screen.queryByTestId('pending-mark')).toBeNull(), { timeout: 3000 });
    expect(screen.getByTestId('document-status').textContent).toBe('Confirmed');
    await waitFor(() => expect(screen.getByTestId('document-invoice').textContent).toMatch(`Invoiced ${money(3 * price)}: awaiting payment.`));

    // A partial payment leaves it owing, in words; the rest pays it.
    const invoiceId = m.server.orders.get(id)!.invoice_id!;
    m.server.pay(invoiceId, 100);
    await m.syncNow();
    await waitFor(() =>
      expect(screen.getByTestId('document-invoice').textContent).toBe(
        `Invoiced ${money(3 * price)}: ${money(100)} paid, ${money(3 * price - 100)} still owed.`,
      ),
    );
    m.server.pay(invoiceId);
    await m.syncNow();
    await waitFor(() => expect(screen.getByTestId('document-invoice').textContent).toMatch(/paid on/));

    await user.keyboard('{Escape}');
    expect(onclose).toHaveBeenCalled();
    live.stop();
  });
});
