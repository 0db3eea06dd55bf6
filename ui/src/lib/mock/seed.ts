/**
 * The demo world {@link MockBackend} starts with under `seed: 'demo'`: an
 * order in every state the desk shows (synced, in conflict, refused,
 * pending), made by Priya's desk and Dana's acts as they would be.
 */
import type { Order } from '../backend';
import { LONG_CUSTOMER, conflictFixture, fieldDiff, insufficientAts } from '../fixtures';
import type { MockBackend } from './backend';
import type { Desk } from './desk';

/** Seeds the orders; returns the time the desk last synced, taken after the refused order as the seed always did. */
export function seedDemo(m: MockBackend, desk: Desk, now: () => number): number {
  const c = (name: string) => m.server.customers.find((x) => x.name === name)!.id;
  const sku = (style: string, color: string, size: string) =>
    [...m.server.skus.values()].find((s) => s.style === style && s.color === color && s.size === size)!.id;
  const priya = m.users[1];
  const header = (customer: string, po: string, start: string | null, end: string | null, notes: string | null) => ({
    customer_id: c(customer),
    customer_po: po,
    ship_window_start: start,
    ship_window_end: end,
    notes,
  });
  // Synced, with an allocation.
  m.remoteCreateOrder(header('Tokyo Distributor', 'TD-4410', '2026-02-02', '2026-02-20', null), [
    [sku('Wren Tee', 'Black', 'M'), 12, 12],
    [sku('Wren Tee', 'Black', 'L'), 8, 8],
  ], priya);
  // In conflict: Dana edited the notes and a quantity; Priya changed both, and the PO, first.
  const base = m.remoteCreateOrder(header(LONG_CUSTOMER, 'BW-2207', '2026-03-01', '2026-03-15', 'Call before delivery'), [
    [sku('Heron Chino', 'Stone', '32'), 10, 0],
  ], priya);
  const line = base.lines[0].id;
  desk.editOrder(base.id, { notes: 'Deliver to the loading dock, rear entrance' });
  desk.changeLine(base.id, line, 14);
  m.remoteEditOrder(base.id, { notes: 'Front desk only', customer_po: 'BW-2207-R' }, priya, false);
  m.remoteChangeLine(base.id, line, 12, priya, false);
  const mine = desk.entries.get(base.id)!.order;
  const theirs = m.server.orders.get(base.id)!;
  const lineValue = (o: Order) => ({ sku_id: o.lines[0].sku_id, qty_ordered: o.lines[0].qty_ordered, qty_allocated: o.lines[0].qty_allocated });
  m.putConflict(
    conflictFixture({
      base,
      mine,
      theirs,
      held: 2,
      fields: [
        fieldDiff('customer_po', { base: base.customer_po, mine: mine.customer_po, theirs: theirs.customer_po }, { mine_changed: false, theirs_changed: true, collides: false }),
        fieldDiff('notes', { base: base.notes, mine: mine.notes, theirs: theirs.notes }, { mine_changed: true, theirs_changed: true, collides: true }),
        fieldDiff(`line:${line}`, { base: lineValue(base), mine: lineValue(mine), theirs: lineValue(theirs) }, { mine_changed: true, theirs_changed: true, collides: true }),
      ],
    }),
  );
  // Refused: an allocation of more than the ATS of Kestrel Washed Indigo M.
  const kestrel = sku('Kestrel Overshirt', 'Washed Indigo', 'M');
  const refused = m.remoteCreateOrder(header('Austin Boutique', 'AB-118', null, null, null), [[kestrel, 9, 0]], priya);
  m.putRejection(refused.id, { kind: 'allocate', line_id: refused.lines[0].id, qty: 9 }, insufficientAts({ skuId: kestrel, requested: 9, atsNow: 6 }));
  const syncedAt = now();
  // Pending, not sent yet.
  const pending = desk.newOrder(header('Harbour & Pine', 'HP-77', null, null, null));
  desk.addLine(pending, sku('Plover Rain Shell', 'Signal Orange', 'M'), 4);
  m.calls.length = 0;
  return syncedAt;
}
