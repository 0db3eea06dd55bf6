/**
 * The pretend server behind {@link MockBackend}: the orders, SKUs and
 * customers as the server holds them, the accounts a desk signs in with, and
 * what other desks do there. It knows nothing of this desk; the backend tells
 * this desk what changed.
 */
import type { Customer, Invoice, NewOrder, Order, Sku, Uuid } from '../backend';
import { DEMO_PASSWORD, clone, demoCustomers, demoSkus, uuid } from '../fixtures';

export interface User {
  id: Uuid;
  email: string;
  name: string;
  password: string;
}

/** Who last wrote an order. */
export type Author = { id: Uuid; name: string };

/** A write bumps the version and names its author, on the server and on a desk alike. */
/** Σ qty_ordered × unit_price, as the server computes it. */
export function orderTotal(o: Order): number {
  return o.lines.reduce((sum, l) => sum + l.qty_ordered * l.unit_price, 0);
}

export function stamp(o: Order, by: Author, nowMs: number): void {
  o.version += 1;
  o.total = orderTotal(o);
  o.updated_at = new Date(nowMs).toISOString();
  o.updated_by = by.id;
  o.updated_by_name = by.name;
}

export class PretendServer {
  readonly orders = new Map<Uuid, Order>();
  readonly skus = new Map<Uuid, Sku>();
  customers: Customer[] = [];
  /** Invoices by id: confirming an order invoices its total, as the server does. */
  readonly invoices = new Map<Uuid, Invoice>();
  /** Price lists: list id → SKU id → price (cents). */
  readonly priceLists = new Map<Uuid, Map<Uuid, number>>();

  readonly users: User[] = [
    { id: uuid(), email: 'dana@acme.test', name: 'Dana', password: DEMO_PASSWORD },
    { id: uuid(), email: 'priya@acme.test', name: 'Priya', password: DEMO_PASSWORD },
  ];

  constructor(private readonly now: () => number) {}

  /** The demo customers and SKUs. */
  seedCatalog(): void {
    this.customers = demoCustomers();
    for (const s of demoSkus()) this.skus.set(s.id, s);
  }

  /** What a line added now costs this customer: their price list's entry, else wholesale (the server's rule). */
  priceFor(customerId: Uuid, skuId: Uuid): number | null {
    const s = this.skus.get(skuId);
    if (!s) return null;
    const list = this.customers.find((c) => c.id === customerId)?.price_list_id;
    return (list ? this.priceLists.get(list)?.get(skuId) : undefined) ?? s.wholesale_price;
  }

  /** Another desk creates an order: lines as [sku, ordered, allocated]. Returns the stored order itself. */
  createOrder(header: NewOrder, lines: [Uuid, number, number][], by: User): Order {
    const nowIso = new Date(this.now()).toISOString();
    const o: Order = {
      id: uuid(),
      ...header,
      status: 'draft',
      version: 1,
      invoice_id: null,
      lines: [],
      total: 0,
      updated_at: nowIso,
      updated_by: by.id,
      updated_by_name: by.name,
      created_at: nowIso,
    };
    for (const [skuId, ordered, allocated] of lines) {
      o.lines.push({ id: uuid(), sku_id: skuId, qty_ordered: ordered, qty_allocated: allocated, unit_price: this.priceFor(header.customer_id, skuId) ?? 0 });
      o.total = orderTotal(o);
      o.version += 1;
      if (allocated > 0) {
        this.takeStock(skuId, allocated);
        o.version += 1;
      }
    }
    this.orders.set(o.id, o);
    return o;
  }

  /** Another desk changes an order. Returns the stored order itself. */
  changeOrder(orderId: Uuid, by: User, change: (o: Order) => void): Order {
    const o = this.orders.get(orderId);
    if (!o) throw new Error(`no order ${orderId} on the mock server`);
    change(o);
    stamp(o, by, this.now());
    return o;
  }

  /** A desk's sync hands over its order as the desk shows it; the stock its allocations take, or give back, moves. */
  receive(orderId: Uuid, order: Order, previous: Order | null): Order {
    for (const l of order.lines) this.takeStock(l.sku_id, l.qty_allocated);
    for (const l of previous?.lines ?? []) this.takeStock(l.sku_id, -l.qty_allocated);
    const stored = clone(order);
    // A line the server had not seen is priced now, by the server's prices; a known line keeps its price.
    for (const l of stored.lines) {
      const known = previous?.lines.find((x) => x.id === l.id);
      l.unit_price = known ? known.unit_price : (this.priceFor(stored.customer_id, l.sku_id) ?? 0);
    }
    stored.total = orderTotal(stored);
    if (stored.status === 'confirmed' && !stored.invoice_id) this.invoice(stored);
    this.orders.set(orderId, stored);
    return clone(stored);
  }

  /** Invoices a confirmed order's total. */
  invoice(o: Order): Invoice {
    const inv: Invoice = { id: uuid(), order_id: o.id, amount: o.total, status: 'awaiting_payment', paid_at: null, amount_paid: 0 };
    this.invoices.set(inv.id, inv);
    o.invoice_id = inv.id;
    return inv;
  }

  /** The payment provider reports a payment (by default, the whole amount): paid once covered. */
  pay(invoiceId: Uuid, amount?: number): void {
    const inv = this.invoices.get(invoiceId);
    if (!inv) return;
    inv.amount_paid += amount ?? inv.amount - inv.amount_paid;
    if (inv.status === 'awaiting_payment' && inv.amount_paid >= inv.amount) {
      Object.assign(inv, { status: 'paid', paid_at: new Date(this.now()).toISOString() });
    }
  }

  takeStock(skuId: Uuid, qty: number): void {
    const s = this.skus.get(skuId);
    if (!s) return;
    s.allocated += qty;
    s.ats = s.on_hand + s.on_order - s.allocated;
  }
}
