/**
 * This desk's side of {@link MockBackend}: each order as the desk shows it
 * beside what the server last had, its pending marks, the conflicts and
 * refusals the engine put in place, and the acts that change them. An act
 * changes the order at once and waits as a pending mark; {@link Desk.sendQueued}
 * is the sync that hands waiting orders to the server.
 */
import type {
  BackendError,
  ConflictView,
  HeldItem,
  Line,
  NewOrder,
  Order,
  OrderHeaderSet,
  PendingEntry,
  PendingMark,
  RejectionChoice,
  RejectionView,
  Resolution,
  Uuid,
} from '../backend';
import { clone, uuid, type RejectionFixture } from '../fixtures';
import { stamp, type Author, type PretendServer } from './server';

/** One order on this desk: what the screens show, and what the server last had. */
export interface Entry {
  order: Order;
  /** Null: not on the server yet. */
  server: Order | null;
  pending: PendingMark[];
  fields: string[];
  /** The price this desk showed for each line added here (kept after the line lands). */
  expected?: Record<Uuid, number>;
  /** The server says a partner delivery of this order is dead-lettered. */
  deadLettered?: boolean;
}

/** The act a refused pending mark stands for, so a choice can re-issue it. */
export interface RefusedAct {
  kind: 'allocate' | 'release' | 'change_line';
  line_id: Uuid;
  qty: number;
}

interface Refusal {
  view: RejectionView;
  act: RefusedAct;
}

/** What the desk needs from the backend that holds it. */
export interface DeskHooks {
  now: () => number;
  /** Who is signed in, for the stamp an act leaves on its order. */
  me: () => Author;
  /** Records a call in the backend's `calls`. */
  log: (name: string, args: unknown[]) => void;
  /** The desk's orders changed: tell the screens, and sync soon if the backend does that by itself. */
  changed: () => void;
}

export const short = (id: string) => id.slice(0, 8);

export function err(kind: BackendError['kind'], message: string, code?: BackendError['code']): BackendError {
  return code ? { kind, message, code } : { kind, message };
}

export class Desk {
  readonly entries = new Map<Uuid, Entry>();
  readonly conflicts = new Map<Uuid, ConflictView>();
  refusals: Refusal[] = [];
  /** What the engine keeps without being able to read it (put by tests and the mock panel). */
  held: HeldItem[] = [];
  private seq = 0;

  constructor(
    private readonly server: PretendServer,
    private readonly hooks: DeskHooks,
  ) {}

  // ------------------------------------------------------------ the store

  entry(orderId: Uuid): Entry {
    const e = this.entries.get(orderId);
    if (!e) throw err('not_found', 'no such order on this desk');
    return e;
  }

  /** As the engine: part of the order is kept for a newer app (a document of it, or one of its acts). */
  needsNewerApp(orderId: Uuid): boolean {
    return this.held.some((h) => h.order_id === orderId);
  }

  /** Every pending mark, oldest first. */
  marks(): PendingEntry[] {
    const out: PendingEntry[] = [];
    for (const [id, e] of this.entries) for (const m of e.pending) out.push([id, m]);
    return out.sort((a, b) => a[1].seq - b[1].seq);
  }

  /** An order another desk created: this desk has it as the server does. */
  mirror(o: Order): void {
    this.entries.set(o.id, { order: clone(o), server: clone(o), pending: [], fields: [] });
  }

  /** Another desk changed an order: this desk sees it unless it has acts of its own there. */
  seeServer(o: Order): void {
    const e = this.entries.get(o.id);
    if (e && e.pending.length === 0) {
      e.order = clone(o);
      e.server = clone(o);
    }
  }

  /** One sync: every order whose acts are all queued goes to the server as this desk shows it. */
  sendQueued(): void {
    for (const [id, e] of this.entries) {
      if (e.pending.length === 0 || e.pending.some((m) => m.status !== 'queued')) continue;
      const stored = this.server.receive(id, e.order, e.server);
      Object.assign(e, { order: stored, server: clone(stored), pending: [], fields: [] });
    }
  }

  /** Signing in with `discardPending`: every order goes back to what the server last had. */
  discardAll(): void {
    for (const [id, e] of this.entries) {
      if (e.server) Object.assign(e, { order: clone(e.server), pending: [], fields: [] });
      else this.entries.delete(id);
    }
    this.conflicts.clear();
    this.refusals = [];
  }

  private mark(kind: string, description: string): PendingMark {
    this.seq += 1;
    return {
      seq: this.seq,
      idempotency_key: uuid(),
      kind,
      description,
      status: 'queued',
      attempts: 0,
      last_error: null,
      created_at: this.hooks.now(),
    };
  }

  // Descriptions are the engine's (protocol `Mutation::describe`), word for
  // word: the UI reads them back (src/lib/describe.ts), so the mock must
  // hand it the same lines the desktop app does.
  private describeRefused(a: RefusedAct): string {
    if (a.kind === 'change_line') return `set line ${short(a.line_id)} quantity to ${a.qty}`;
    return `${a.kind} ${a.qty} on line ${short(a.line_id)}`;
  }

  // ------------------------------------------------------------ acts

  /** Records the call, applies the act to the order at once, and queues its mark. */
  private act(orderId: Uuid, call: [string, unknown[]] | null, kind: string, description: string, fields: string[], change: (o: Order) => void): string {
    if (call) this.hooks.log(...call);
    const e = this.entry(orderId);
    change(e.order);
    stamp(e.order, this.hooks.me(), this.hooks.now());
    const m = this.mark(kind, description);
    e.pending.push(m);
    for (const f of fields) if (!e.fields.includes(f)) e.fields.push(f);
    this.hooks.changed();
    return m.idempotency_key;
  }

  private line(orderId: Uuid, lineId: Uuid): Line {
    const l = this.entry(orderId).order.lines.find((x) => x.id === lineId);
    if (!l) throw err('not_found', `no line ${short(lineId)} on this order`);
    return l;
  }

  createOrder(header: NewOrder): Uuid {
    this.hooks.log('createOrder', [header]);
    return this.newOrder(header);
  }

  /** Creates an order without recording a call (the demo seed uses it too). */
  newOrder(header: NewOrder): Uuid {
    if (!header.customer_id) throw err('invalid', 'choose a customer first');
    const id = uuid();
    const me = this.hooks.me();
    const nowIso = new Date(this.hooks.now()).toISOString();
    const order: Order = {
      id,
      ...clone(header),
      status: 'draft',
      version: 0,
      invoice_id: null,
      lines: [],
      total: 0,
      updated_at: nowIso,
      updated_by: me.id,
      updated_by_name: me.name,
      created_at: nowIso,
    };
    this.entries.set(id, { order, server: null, pending: [], fields: [] });
    this.act(id, null, 'create_order', `new order for customer ${short(header.customer_id)}${header.customer_po ? `, PO ${header.customer_po}` : ''}`, [], () => {});
    return id;
  }

  editOrder(orderId: Uuid, set: OrderHeaderSet): string {
    const order = ['customer_id', 'customer_po', 'ship_window_start', 'ship_window_end', 'notes'] as const;
    const text = order
      .filter((k) => k in set)
      .map((k) => `${k} = ${set[k] ?? '(none)'}`)
      .join(', ');
    return this.act(orderId, ['editOrder', [orderId, set]], 'edit_order', `edit ${text}`, Object.keys(set), (o) => Object.assign(o, clone(set)));
  }

  addLine(orderId: Uuid, skuId: Uuid, qtyOrdered: number): Uuid {
    const s = this.server.skus.get(skuId);
    if (s && !s.active) {
      this.hooks.log('addLine', [orderId, skuId, qtyOrdered]);
      throw err('invalid', `${s.style} · ${s.color} · ${s.size} is discontinued: it cannot be added to an order`);
    }
    const lineId = uuid();
    const e = this.entry(orderId);
    const price = this.server.priceFor(e.order.customer_id, skuId);
    if (price !== null) e.expected = { ...e.expected, [lineId]: price };
    this.act(orderId, ['addLine', [orderId, skuId, qtyOrdered]], 'add_line', `add line ${short(lineId)} of SKU ${short(skuId)} × ${qtyOrdered}`, [`line:${lineId}`], (o) =>
      o.lines.push({ id: lineId, sku_id: skuId, qty_ordered: qtyOrdered, qty_allocated: 0, unit_price: price ?? 0 }),
    );
    return lineId;
  }

  changeLine(orderId: Uuid, lineId: Uuid, qtyOrdered: number): string {
    return this.changeLineAct(orderId, lineId, qtyOrdered, true);
  }

  private changeLineAct(orderId: Uuid, lineId: Uuid, qtyOrdered: number, logged: boolean): string {
    this.line(orderId, lineId);
    return this.act(orderId, logged ? ['changeLine', [orderId, lineId, qtyOrdered]] : null, 'change_line', `set line ${short(lineId)} quantity to ${qtyOrdered}`, [`line:${lineId}`], () => {
      this.line(orderId, lineId).qty_ordered = qtyOrdered;
    });
  }

  removeLine(orderId: Uuid, lineId: Uuid): string {
    return this.removeLineAct(orderId, lineId, true);
  }

  private removeLineAct(orderId: Uuid, lineId: Uuid, logged: boolean): string {
    this.line(orderId, lineId);
    return this.act(orderId, logged ? ['removeLine', [orderId, lineId]] : null, 'remove_line', `remove line ${short(lineId)}`, [`line:${lineId}`], (o) => {
      o.lines = o.lines.filter((l) => l.id !== lineId);
    });
  }

  allocate(orderId: Uuid, lineId: Uuid, qty: number): string {
    return this.allocation(orderId, lineId, qty, ['allocate', [orderId, lineId, qty]]);
  }

  release(orderId: Uuid, lineId: Uuid, qty: number): string {
    return this.allocation(orderId, lineId, -qty, ['release', [orderId, lineId, qty]]);
  }

  /** Allocates (`qty` > 0) or releases (`qty` < 0) on a line. */
  private allocation(orderId: Uuid, lineId: Uuid, qty: number, call: [string, unknown[]] | null): string {
    this.line(orderId, lineId);
    const kind = qty >= 0 ? 'allocate' : 'release';
    return this.act(orderId, call, kind, `${kind} ${Math.abs(qty)} on line ${short(lineId)}`, [`line:${lineId}`], () => {
      this.line(orderId, lineId).qty_allocated += qty;
    });
  }

  confirmOrder(orderId: Uuid): string {
    return this.act(orderId, ['confirmOrder', [orderId]], 'confirm', 'confirm', ['status'], (o) => {
      o.status = 'confirmed';
    });
  }

  cancelOrder(orderId: Uuid): string {
    return this.act(orderId, ['cancelOrder', [orderId]], 'cancel', 'cancel', ['status'], (o) => {
      o.status = 'cancelled';
      for (const l of o.lines) l.qty_allocated = 0;
    });
  }

  // ------------------------------------------------------------ conflicts and rejections (fixtures)

  /** The engine found a conflict on this order: its acts wait for a resolution. */
  putConflict(view: ConflictView): void {
    const e = this.entry(view.order_id);
    const first = e.pending.find((m) => m.status === 'queued');
    if (first) first.status = 'conflict';
    this.conflicts.set(view.order_id, clone(view));
  }

  /** The server refused an act on this order (it waits as a refused pending mark, not applied). */
  putRejection(orderId: Uuid, act: RefusedAct, problem: RejectionFixture): RejectionView {
    const e = this.entry(orderId);
    const mark = this.mark(act.kind, this.describeRefused(act));
    mark.status = 'rejected';
    mark.attempts = 1;
    mark.last_error = problem.code;
    e.pending.push(mark);
    const view: RejectionView = {
      id: mark.seq,
      order_id: orderId,
      idempotency_key: mark.idempotency_key,
      act: mark.description,
      kind: act.kind,
      created_at: this.hooks.now(),
      ...clone(problem),
    };
    this.refusals.push({ view, act: { ...act } });
    return clone(view);
  }

  /**
   * Records the resolution and releases the held acts (`discard_mine` drops
   * them). It refuses, as the engine does, a resolution that leaves a
   * colliding field unchosen; which fields collide is the fixture's word.
   */
  resolveConflict(orderId: Uuid, resolution: Resolution): void {
    this.hooks.log('resolveConflict', [orderId, resolution]);
    const view = this.conflicts.get(orderId);
    if (!view) throw err('not_found', 'no open conflict on this order');
    if (resolution !== 'discard_mine') {
      const chosen = typeof resolution === 'object' ? resolution.choose : {};
      const missing = view.fields.filter((f) => f.collides && !chosen[f.field]).map((f) => f.field);
      if (missing.length) throw err('resolve', `these fields changed on both sides; choose mine or theirs for each: ${missing.join(', ')}`);
    }
    const e = this.entry(orderId);
    if (resolution === 'discard_mine') {
      const theirs = this.server.orders.get(orderId);
      Object.assign(e, { order: clone(theirs ?? e.order), server: clone(theirs ?? null), pending: [], fields: [] });
    } else {
      for (const m of e.pending) m.status = 'queued';
    }
    this.conflicts.delete(orderId);
    this.hooks.changed();
  }

  /** Records the choice, drops the refused act and queues what the choice asks for. */
  resolveRejection(id: number, choice: RejectionChoice): void {
    this.hooks.log('resolveRejection', [id, choice]);
    const r = this.refusals.find((x) => x.view.id === id);
    if (!r) throw err('not_found', `no open rejection ${id}`);
    if (!r.view.choices.some((c) => c.choice === choice.choice)) {
      throw err('invalid', `\`${choice.choice}\` is not a choice for this rejection`);
    }
    const e = this.entry(r.view.order_id);
    e.pending = e.pending.filter((m) => m.seq !== id);
    this.refusals = this.refusals.filter((x) => x !== r);
    const { kind, line_id, qty } = r.act;
    const orderId = r.view.order_id;
    switch (choice.choice) {
      case 'reduce_to_ats':
        this.allocation(orderId, line_id, choice.qty, null);
        break;
      case 'try_again':
        if (kind === 'change_line') this.changeLineAct(orderId, line_id, qty, false);
        else this.allocation(orderId, line_id, kind === 'allocate' ? qty : -qty, null);
        break;
      case 'remove_line':
        this.removeLineAct(orderId, line_id, false);
        break;
      case 'dismiss':
        this.hooks.changed();
        break;
    }
  }
}
