/**
 * A stand-in {@link Backend} for the Vitest suite and for `npm run dev` in a
 * plain browser: canned, typed data (./fixtures.ts over the types generated
 * from Rust) and a record of every call, with just enough state for a screen
 * to see its own acts. An act changes the order at once and waits as a
 * pending mark; a sync hands every waiting order to the pretend server as it
 * is. Conflicts and refused acts are not worked out here: a test (or the demo
 * seed) puts the engine's answer in place with {@link MockBackend.putConflict}
 * and {@link MockBackend.putRejection}. What collides, what the server
 * refuses and how a resolution re-issues acts are the engine's rules
 * (client/src/engine.rs, conflict.rs), tested in Rust, not copied here.
 *
 * The world the real engine sees has knobs: the network (`setNetwork`) and
 * other desks (`remote*`).
 */
import type {
  Backend,
  BackendError,
  Badge,
  ConflictView,
  Customer,
  EventName,
  EventPayloads,
  Line,
  NewOrder,
  Order,
  OrderHeaderSet,
  OrderSummary,
  OrderView,
  PendingEntry,
  PendingMark,
  Profile,
  RejectionChoice,
  RejectionView,
  Resolution,
  SignInArgs,
  Sku,
  SkuView,
  SyncStatus,
  Unsubscribe,
  Uuid,
} from './backend';
import {
  DEMO_PASSWORD,
  LONG_CUSTOMER,
  clone,
  conflictFixture,
  demoCustomers,
  demoSkus,
  fieldDiff,
  insufficientAts,
  uuid,
  type RejectionFixture,
} from './fixtures';

export { DEMO_PASSWORD, LONG_CUSTOMER };

export interface MockOptions {
  /** The clock (ms). Tests pass a fake one. */
  now?: () => number;
  /** Sync this long after each act, like the engine's loop; null: only on `syncNow`. */
  autoSyncMs?: number | null;
  /** `demo`: customers, SKUs and an order in every state; `catalog`: customers and SKUs only. */
  seed?: 'demo' | 'catalog' | 'empty';
  /** Start signed in as Dana. */
  signedIn?: boolean;
}

interface User {
  id: Uuid;
  email: string;
  name: string;
  password: string;
}

/** One order on this desk: what the screens show, and what the server last had. */
interface Entry {
  order: Order;
  /** Null: not on the server yet. */
  server: Order | null;
  pending: PendingMark[];
  fields: string[];
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

const short = (id: string) => id.slice(0, 8);

function err(kind: BackendError['kind'], message: string, code?: BackendError['code']): BackendError {
  return code ? { kind, message, code } : { kind, message };
}

export class MockBackend implements Backend {
  readonly kind = 'mock' as const;

  /** The pretend server. */
  readonly server = { orders: new Map<Uuid, Order>(), skus: new Map<Uuid, Sku>(), customers: [] as Customer[] };
  /** Every call, for tests that check what the UI asked for. */
  readonly calls: { name: string; args: unknown[] }[] = [];

  readonly users: User[] = [
    { id: uuid(), email: 'dana@acme.test', name: 'Dana', password: DEMO_PASSWORD },
    { id: uuid(), email: 'priya@acme.test', name: 'Priya', password: DEMO_PASSWORD },
  ];

  private readonly entries = new Map<Uuid, Entry>();
  private readonly conflicts = new Map<Uuid, ConflictView>();
  private refusals: Refusal[] = [];
  private network = true;
  private state: { online: boolean | null; lastSyncedAt: number | null; lastError: string | null } = {
    online: null,
    lastSyncedAt: null,
    lastError: null,
  };
  private profile: Profile | null = null;
  private seq = 0;
  private readonly listeners = new Map<EventName, Set<(p: unknown) => void>>();
  private readonly now: () => number;
  private readonly autoSyncMs: number | null;
  private syncTimer: ReturnType<typeof setTimeout> | null = null;
  /** While the constructor seeds, nothing syncs by itself. */
  private seeding = true;

  constructor(opts: MockOptions = {}) {
    this.now = opts.now ?? (() => Date.now());
    this.autoSyncMs = opts.autoSyncMs === undefined ? null : opts.autoSyncMs;
    const seed = opts.seed ?? 'demo';
    if (seed !== 'empty') {
      this.server.customers = demoCustomers();
      for (const s of demoSkus()) this.server.skus.set(s.id, s);
    }
    if (opts.signedIn || seed === 'demo') this.profile = this.profileFor(this.users[0]);
    if (seed === 'demo') this.seedOrders();
    this.seeding = false;
  }

  /** An order in every state the desk shows: synced, in conflict, refused, pending. */
  private seedOrders(): void {
    const c = (name: string) => this.server.customers.find((x) => x.name === name)!.id;
    const sku = (style: string, color: string, size: string) =>
      [...this.server.skus.values()].find((s) => s.style === style && s.color === color && s.size === size)!.id;
    const priya = this.users[1];
    const header = (customer: string, po: string, start: string | null, end: string | null, notes: string | null) => ({
      customer_id: c(customer),
      customer_po: po,
      ship_window_start: start,
      ship_window_end: end,
      notes,
    });
    // Synced, with an allocation.
    this.remoteCreateOrder(header('Tokyo Distributor', 'TD-4410', '2026-02-02', '2026-02-20', null), [
      [sku('Wren Tee', 'Black', 'M'), 12, 12],
      [sku('Wren Tee', 'Black', 'L'), 8, 8],
    ], priya);
    // In conflict: Dana edited the notes and a quantity; Priya changed both, and the PO, first.
    const base = this.remoteCreateOrder(header(LONG_CUSTOMER, 'BW-2207', '2026-03-01', '2026-03-15', 'Call before delivery'), [
      [sku('Heron Chino', 'Stone', '32'), 10, 0],
    ], priya);
    const line = base.lines[0].id;
    void this.editOrder(base.id, { notes: 'Deliver to the loading dock, rear entrance' });
    void this.changeLine(base.id, line, 14);
    this.remoteEditOrder(base.id, { notes: 'Front desk only', customer_po: 'BW-2207-R' }, priya, false);
    this.remoteChangeLine(base.id, line, 12, priya, false);
    const mine = this.entries.get(base.id)!.order;
    const theirs = this.server.orders.get(base.id)!;
    const lineValue = (o: Order) => ({ sku_id: o.lines[0].sku_id, qty_ordered: o.lines[0].qty_ordered, qty_allocated: o.lines[0].qty_allocated });
    this.putConflict(
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
    const refused = this.remoteCreateOrder(header('Austin Boutique', 'AB-118', null, null, null), [[kestrel, 9, 0]], priya);
    this.putRejection(refused.id, { kind: 'allocate', line_id: refused.lines[0].id, qty: 9 }, insufficientAts({ skuId: kestrel, requested: 9, atsNow: 6 }));
    this.state = { online: true, lastSyncedAt: this.now(), lastError: null };
    // Pending, not sent yet.
    const pending = this.newOrder(header('Harbour & Pine', 'HP-77', null, null, null));
    void this.addLine(pending, sku('Plover Rain Shell', 'Signal Orange', 'M'), 4);
    this.calls.length = 0;
  }

  // ------------------------------------------------------------ fixtures: what only the engine decides

  /** The engine found a conflict on this order: its acts wait for a resolution. */
  putConflict(view: ConflictView): void {
    const e = this.entry(view.order_id);
    const first = e.pending.find((m) => m.status === 'queued');
    if (first) first.status = 'conflict';
    this.conflicts.set(view.order_id, clone(view));
    this.poke();
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
      created_at: this.now(),
      ...clone(problem),
    };
    this.refusals.push({ view, act: { ...act } });
    this.poke();
    return clone(view);
  }

  // ------------------------------------------------------------ knobs for tests and the dev panel

  /** Cuts or restores the pretend network. Restoring syncs at once, like the engine's stream reconnecting. */
  setNetwork(up: boolean): void {
    this.network = up;
    if (up) {
      this.syncInternal();
    } else {
      this.state.online = false;
      this.state.lastError = 'the server cannot be reached (mock network is down)';
      this.emitStatus();
    }
  }

  get networkUp(): boolean {
    return this.network;
  }

  private stamp(o: Order, by: { id: Uuid; name: string }): void {
    o.version += 1;
    o.updated_at = new Date(this.now()).toISOString();
    o.updated_by = by.id;
    o.updated_by_name = by.name;
  }

  /** Another desk creates an order on the server: lines as [sku, ordered, allocated]. */
  remoteCreateOrder(header: NewOrder, lines: [Uuid, number, number][] = [], by?: User): Order {
    const u = by ?? this.users[1];
    const nowIso = new Date(this.now()).toISOString();
    const o: Order = {
      id: uuid(),
      ...header,
      status: 'draft',
      version: 1,
      invoice_id: null,
      lines: [],
      updated_at: nowIso,
      updated_by: u.id,
      updated_by_name: u.name,
      created_at: nowIso,
    };
    for (const [skuId, ordered, allocated] of lines) {
      o.lines.push({ id: uuid(), sku_id: skuId, qty_ordered: ordered, qty_allocated: allocated });
      o.version += 1;
      if (allocated > 0) {
        this.takeStock(skuId, allocated);
        o.version += 1;
      }
    }
    this.server.orders.set(o.id, o);
    this.entries.set(o.id, { order: clone(o), server: clone(o), pending: [], fields: [] });
    this.poke();
    return clone(o);
  }

  /** Another desk edits an order's header on the server (this desk sees it unless it has acts of its own there). */
  remoteEditOrder(orderId: Uuid, set: OrderHeaderSet, by?: User, poke = true): void {
    this.remote(orderId, by, (o) => Object.assign(o, set), poke);
  }

  /** Another desk changes a line's quantity on the server. */
  remoteChangeLine(orderId: Uuid, lineId: Uuid, qty: number, by?: User, poke = true): void {
    this.remote(
      orderId,
      by,
      (o) => {
        const l = o.lines.find((x) => x.id === lineId);
        if (l) l.qty_ordered = qty;
      },
      poke,
    );
  }

  private remote(orderId: Uuid, by: User | undefined, change: (o: Order) => void, poke: boolean): void {
    const o = this.server.orders.get(orderId);
    if (!o) throw new Error(`no order ${orderId} on the mock server`);
    change(o);
    this.stamp(o, by ?? this.users[1]);
    const e = this.entries.get(orderId);
    if (e && e.pending.length === 0) {
      e.order = clone(o);
      e.server = clone(o);
    }
    if (poke) this.poke();
  }

  /** Another desk allocates stock (ATS drops everywhere). */
  remoteAllocate(skuId: Uuid, qty: number): void {
    this.takeStock(skuId, qty);
    this.poke();
  }

  private takeStock(skuId: Uuid, qty: number): void {
    const s = this.server.skus.get(skuId);
    if (!s) return;
    s.allocated += qty;
    s.ats = s.on_hand + s.on_order - s.allocated;
  }

  /** The server's stream pokes this desk. */
  private poke(): void {
    if (!this.network || this.seeding) return;
    this.emit('changed', null);
    this.emitStatus();
  }

  // ------------------------------------------------------------ events

  async on<E extends EventName>(event: E, handler: (payload: EventPayloads[E]) => void): Promise<Unsubscribe> {
    let set = this.listeners.get(event);
    if (!set) {
      set = new Set();
      this.listeners.set(event, set);
    }
    const h = handler as (p: unknown) => void;
    set.add(h);
    return () => set!.delete(h);
  }

  private emit<E extends EventName>(event: E, payload: EventPayloads[E]): void {
    const set = this.listeners.get(event);
    if (!set) return;
    // Like Tauri: delivered after the current call returns.
    queueMicrotask(() => {
      for (const h of [...set]) h(payload);
    });
  }

  private emitStatus(): void {
    if (this.listeners.get('syncStatus')?.size) this.emit('syncStatus', this.statusNow());
  }

  private changed(): void {
    this.emit('changed', null);
    this.emitStatus();
    if (this.autoSyncMs !== null && this.network && !this.seeding) {
      if (this.syncTimer) clearTimeout(this.syncTimer);
      this.syncTimer = setTimeout(() => {
        this.syncTimer = null;
        this.syncInternal();
      }, this.autoSyncMs);
    }
  }

  private log(name: string, args: unknown[]): void {
    this.calls.push({ name, args: clone(args) });
  }

  // ------------------------------------------------------------ identity and status

  private profileFor(u: User): Profile {
    return {
      server_url: 'http://127.0.0.1:8080',
      tenant_slug: 'acme',
      tenant_name: 'Acme Apparel',
      user_id: u.id,
      user_email: u.email,
      user_name: u.name,
      device_name: 'mock desk',
    };
  }

  private me(): { id: Uuid; name: string } {
    return this.profile ? { id: this.profile.user_id, name: this.profile.user_name } : { id: '00000000-0000-0000-0000-000000000000', name: 'you' };
  }

  async signIn(a: SignInArgs): Promise<Profile> {
    this.log('signIn', [{ ...a, password: '<redacted>' }]);
    if (!this.network) throw err('offline', 'the server cannot be reached; check the URL and the network');
    const u = this.users.find((x) => x.email.toLowerCase() === a.email.trim().toLowerCase());
    if (a.tenant.trim() !== 'acme' || !u || u.password !== a.password) {
      throw err('unauthorized', 'wrong tenant, email or password', 'unauthorized');
    }
    if (a.discardPending) this.discardAll();
    this.profile = { ...this.profileFor(u), server_url: a.serverUrl.trim().replace(/\/+$/, ''), device_name: a.deviceName ?? 'mock desk' };
    this.syncInternal();
    return clone(this.profile);
  }

  private discardAll(): void {
    for (const [id, e] of this.entries) {
      if (e.server) Object.assign(e, { order: clone(e.server), pending: [], fields: [] });
      else this.entries.delete(id);
    }
    this.conflicts.clear();
    this.refusals = [];
  }

  async signOut(): Promise<boolean> {
    this.log('signOut', []);
    this.profile = null;
    this.emitStatus();
    return this.network;
  }

  async getProfile(): Promise<Profile | null> {
    return clone(this.profile);
  }

  private marks(): PendingEntry[] {
    const out: PendingEntry[] = [];
    for (const [id, e] of this.entries) for (const m of e.pending) out.push([id, m]);
    return out.sort((a, b) => a[1].seq - b[1].seq);
  }

  private statusNow(): SyncStatus {
    const marks = this.marks();
    const oldest = marks.length ? Math.min(...marks.map(([, m]) => m.created_at)) : null;
    const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
    return {
      store: 'memory (mock)',
      signed_in: clone(this.profile),
      token_store: 'memory (mock)',
      online: this.state.online,
      pending: marks.length,
      oldest_pending_at: iso(oldest),
      oldest_pending_age_secs: oldest === null ? null : Math.max(0, Math.floor((this.now() - oldest) / 1000)),
      last_synced_at: iso(this.state.lastSyncedAt),
      conflicts: this.conflicts.size,
      rejections: this.refusals.length,
      next_attempt_at: null,
      last_error: this.state.lastError,
    };
  }

  async getStatus(): Promise<SyncStatus> {
    return this.statusNow();
  }

  async syncNow(): Promise<void> {
    this.log('syncNow', []);
    if (!this.profile) throw err('not_signed_in', 'not signed in');
    this.syncInternal();
  }

  /** One pass: every order whose acts are all queued goes to the server as this desk shows it. */
  private syncInternal(): void {
    if (!this.profile) return;
    if (!this.network) {
      this.state.online = false;
      this.state.lastError = 'the server cannot be reached (mock network is down)';
      for (const [, m] of this.marks()) if (m.status === 'queued') m.attempts += 1;
      this.emitStatus();
      return;
    }
    for (const [id, e] of this.entries) {
      if (e.pending.length === 0 || e.pending.some((m) => m.status !== 'queued')) continue;
      // The stock the order's allocations take, or give back, moves on the server.
      for (const l of e.order.lines) this.takeStock(l.sku_id, l.qty_allocated);
      for (const l of e.server?.lines ?? []) this.takeStock(l.sku_id, -l.qty_allocated);
      this.server.orders.set(id, clone(e.order));
      Object.assign(e, { server: clone(e.order), pending: [], fields: [] });
    }
    this.state = { online: true, lastSyncedAt: this.now(), lastError: null };
    this.emit('changed', null);
    this.emitStatus();
  }

  // ------------------------------------------------------------ views

  private orderView(id: Uuid, e: Entry): OrderView {
    const badge: Badge = e.pending.some((m) => m.status === 'conflict')
      ? 'conflict'
      : e.pending.some((m) => m.status === 'rejected')
        ? 'rejected'
        : e.pending.length === 0
          ? 'synced'
          : 'pending';
    return {
      order: clone(e.order),
      server_version: e.server?.version ?? null,
      badge,
      pending: clone(e.pending),
      pending_fields: [...e.fields],
    };
  }

  async listOrders(): Promise<OrderView[]> {
    return [...this.entries].map(([id, e]) => this.orderView(id, e));
  }

  async listOrderSummaries(): Promise<OrderSummary[]> {
    return (await this.listOrders()).map(({ order: { lines, ...order }, badge, pending }) => ({
      order,
      badge,
      pending_count: pending.length,
      line_count: lines.length,
      units: lines.reduce((n, l) => n + l.qty_ordered, 0),
    }));
  }

  async getOrder(orderId: Uuid): Promise<OrderView | null> {
    const e = this.entries.get(orderId);
    return e ? this.orderView(orderId, e) : null;
  }

  /** Net units this desk's unsent acts allocate, per SKU. */
  private pendingAllocation(): Map<Uuid, number> {
    const net = new Map<Uuid, number>();
    const add = (l: Line, sign: number) => net.set(l.sku_id, (net.get(l.sku_id) ?? 0) + sign * l.qty_allocated);
    for (const e of this.entries.values()) {
      if (e.pending.length === 0) continue;
      for (const l of e.order.lines) add(l, 1);
      for (const l of e.server?.lines ?? []) add(l, -1);
    }
    return net;
  }

  private skuView(s: Sku, net: Map<Uuid, number>): SkuView {
    const n = net.get(s.id) ?? 0;
    return { ...clone(s), ats_local: s.ats - n, pending_allocation: n };
  }

  async searchSkus(q: string, limit: number): Promise<SkuView[]> {
    const words = q.toLowerCase().split(/\s+/).filter(Boolean);
    const net = this.pendingAllocation();
    return [...this.server.skus.values()]
      .filter((s) => {
        const hay = `${s.style} ${s.color} ${s.size}`.toLowerCase();
        return words.every((w) => hay.includes(w));
      })
      .sort((a, b) => a.style.localeCompare(b.style) || a.color.localeCompare(b.color) || a.size.localeCompare(b.size))
      .slice(0, Math.max(0, limit))
      .map((s) => this.skuView(s, net));
  }

  async getSkus(skuIds: Uuid[]): Promise<SkuView[]> {
    const net = this.pendingAllocation();
    return skuIds
      .map((id) => this.server.skus.get(id))
      .filter((s): s is Sku => !!s)
      .map((s) => this.skuView(s, net));
  }

  async listCustomers(): Promise<Customer[]> {
    return clone([...this.server.customers].sort((a, b) => a.name.localeCompare(b.name)));
  }

  async markStartup(): Promise<void> {}

  async listPending(): Promise<PendingEntry[]> {
    return clone(this.marks());
  }

  // ------------------------------------------------------------ acts

  private entry(orderId: Uuid): Entry {
    const e = this.entries.get(orderId);
    if (!e) throw err('not_found', 'no such order on this desk');
    return e;
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
      created_at: this.now(),
    };
  }

  private skuName(id: Uuid): string {
    const s = this.server.skus.get(id);
    return s ? `${s.style} ${s.color} ${s.size}` : `SKU ${short(id)}`;
  }

  private describeRefused(a: RefusedAct): string {
    if (a.kind === 'change_line') return `set line ${short(a.line_id)} quantity to ${a.qty}`;
    return `${a.kind} ${a.qty} on line ${short(a.line_id)}`;
  }

  /** Records the call, applies the act to the order at once, and queues its mark. */
  private act(orderId: Uuid, call: [string, unknown[]] | null, kind: string, description: string, fields: string[], change: (o: Order) => void): string {
    if (call) this.log(...call);
    const e = this.entry(orderId);
    change(e.order);
    this.stamp(e.order, this.me());
    const m = this.mark(kind, description);
    e.pending.push(m);
    for (const f of fields) if (!e.fields.includes(f)) e.fields.push(f);
    this.changed();
    return m.idempotency_key;
  }

  private line(orderId: Uuid, lineId: Uuid): Line {
    const l = this.entry(orderId).order.lines.find((x) => x.id === lineId);
    if (!l) throw err('not_found', `no line ${short(lineId)} on this order`);
    return l;
  }

  async createOrder(header: NewOrder): Promise<Uuid> {
    this.log('createOrder', [header]);
    return this.newOrder(header);
  }

  private newOrder(header: NewOrder): Uuid {
    if (!header.customer_id) throw err('invalid', 'choose a customer first');
    const id = uuid();
    const me = this.me();
    const nowIso = new Date(this.now()).toISOString();
    const order: Order = {
      id,
      ...clone(header),
      status: 'draft',
      version: 0,
      invoice_id: null,
      lines: [],
      updated_at: nowIso,
      updated_by: me.id,
      updated_by_name: me.name,
      created_at: nowIso,
    };
    this.entries.set(id, { order, server: null, pending: [], fields: [] });
    this.act(id, null, 'create_order', `new order${header.customer_po ? `, PO ${header.customer_po}` : ''}`, [], () => {});
    return id;
  }

  async editOrder(orderId: Uuid, set: OrderHeaderSet): Promise<string> {
    const text = Object.entries(set)
      .map(([k, v]) => `${k} = ${v ?? '(none)'}`)
      .join(', ');
    return this.act(orderId, ['editOrder', [orderId, set]], 'edit_order', `edit ${text}`, Object.keys(set), (o) => Object.assign(o, clone(set)));
  }

  async addLine(orderId: Uuid, skuId: Uuid, qtyOrdered: number): Promise<Uuid> {
    const lineId = uuid();
    this.act(orderId, ['addLine', [orderId, skuId, qtyOrdered]], 'add_line', `add ${this.skuName(skuId)} × ${qtyOrdered}`, [`line:${lineId}`], (o) =>
      o.lines.push({ id: lineId, sku_id: skuId, qty_ordered: qtyOrdered, qty_allocated: 0 }),
    );
    return lineId;
  }

  async changeLine(orderId: Uuid, lineId: Uuid, qtyOrdered: number): Promise<string> {
    return this.changeLineAct(orderId, lineId, qtyOrdered, true);
  }

  private changeLineAct(orderId: Uuid, lineId: Uuid, qtyOrdered: number, logged: boolean): string {
    this.line(orderId, lineId);
    return this.act(orderId, logged ? ['changeLine', [orderId, lineId, qtyOrdered]] : null, 'change_line', `set line ${short(lineId)} quantity to ${qtyOrdered}`, [`line:${lineId}`], () => {
      this.line(orderId, lineId).qty_ordered = qtyOrdered;
    });
  }

  async removeLine(orderId: Uuid, lineId: Uuid): Promise<string> {
    return this.removeLineAct(orderId, lineId, true);
  }

  private removeLineAct(orderId: Uuid, lineId: Uuid, logged: boolean): string {
    this.line(orderId, lineId);
    return this.act(orderId, logged ? ['removeLine', [orderId, lineId]] : null, 'remove_line', `remove line ${short(lineId)}`, [`line:${lineId}`], (o) => {
      o.lines = o.lines.filter((l) => l.id !== lineId);
    });
  }

  async allocate(orderId: Uuid, lineId: Uuid, qty: number): Promise<string> {
    return this.allocation(orderId, lineId, qty, ['allocate', [orderId, lineId, qty]]);
  }

  async release(orderId: Uuid, lineId: Uuid, qty: number): Promise<string> {
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

  async confirmOrder(orderId: Uuid): Promise<string> {
    return this.act(orderId, ['confirmOrder', [orderId]], 'confirm', 'confirm', ['status'], (o) => {
      o.status = 'confirmed';
    });
  }

  async cancelOrder(orderId: Uuid): Promise<string> {
    return this.act(orderId, ['cancelOrder', [orderId]], 'cancel', 'cancel', ['status'], (o) => {
      o.status = 'cancelled';
      for (const l of o.lines) l.qty_allocated = 0;
    });
  }

  // ------------------------------------------------------------ conflicts and rejections (fixtures)

  async listConflicts(): Promise<ConflictView[]> {
    return clone([...this.conflicts.values()]);
  }

  async getConflict(orderId: Uuid): Promise<ConflictView | null> {
    return clone(this.conflicts.get(orderId) ?? null);
  }

  /**
   * Records the resolution and releases the held acts (`discard_mine` drops
   * them). It refuses, as the engine does, a resolution that leaves a
   * colliding field unchosen; which fields collide is the fixture's word.
   */
  async resolveConflict(orderId: Uuid, resolution: Resolution): Promise<void> {
    this.log('resolveConflict', [orderId, resolution]);
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
    this.changed();
  }

  async listRejections(): Promise<RejectionView[]> {
    return clone(this.refusals.map((r) => r.view));
  }

  /** Records the choice, drops the refused act and queues what the choice asks for. */
  async resolveRejection(id: number, choice: RejectionChoice): Promise<void> {
    this.log('resolveRejection', [id, choice]);
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
        this.changed();
        break;
    }
  }
}
