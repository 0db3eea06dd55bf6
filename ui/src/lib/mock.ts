/**
 * An in-memory {@link Backend}: a small copy of the client engine (pending
 * queue, optimistic view, conflicts, rejections) over a pretend server, for
 * the Vitest suite and for `npm run dev` in a plain browser.
 *
 * It follows the engine's rules where the UI can see them (client/src/
 * engine.rs, view.rs, conflict.rs): acts queue at once with chained base
 * versions; a sync pushes them in order, a version conflict or a business
 * rejection holds only that order's later acts; ATS is checked on the server
 * side; a pull never rewrites a pending act's base. It also has knobs the
 * real engine gets from the world: the network (`setNetwork`) and the other
 * desks (`remote*`), which is how tests produce conflicts and ATS changes.
 */
import type {
  Backend,
  BackendError,
  Badge,
  ConflictView,
  Customer,
  EventName,
  EventPayloads,
  FieldDiff,
  Line,
  NewOrder,
  Order,
  OrderHeaderSet,
  OrderSummary,
  OrderView,
  PendingEntry,
  PendingMark,
  PendingStatus,
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
import { classifyField, diffOrders, jsonEqual } from './conflict';

// ---------------------------------------------------------------- acts (client/src/act.rs)

type Act =
  | {
      op: 'create_order';
      order_id: Uuid;
      customer_id: Uuid;
      customer_po: string | null;
      ship_window_start: string | null;
      ship_window_end: string | null;
      notes: string | null;
    }
  | { op: 'patch_order'; order_id: Uuid; base_version: number; set: OrderHeaderSet }
  | { op: 'add_line'; order_id: Uuid; line_id: Uuid; sku_id: Uuid; qty_ordered: number; base_version: number }
  | { op: 'change_line'; order_id: Uuid; line_id: Uuid; qty_ordered: number; base_version: number }
  | { op: 'remove_line'; order_id: Uuid; line_id: Uuid; base_version: number }
  | { op: 'allocate'; order_id: Uuid; line_id: Uuid; qty: number }
  | { op: 'release'; order_id: Uuid; line_id: Uuid; qty: number }
  | { op: 'confirm'; order_id: Uuid; base_version: number }
  | { op: 'cancel'; order_id: Uuid; base_version: number };

const KIND: Record<Act['op'], string> = {
  create_order: 'create_order',
  patch_order: 'edit_order',
  add_line: 'add_line',
  change_line: 'change_line',
  remove_line: 'remove_line',
  allocate: 'allocate',
  release: 'release',
  confirm: 'confirm',
  cancel: 'cancel',
};

function hasBase(a: Act): a is Extract<Act, { base_version: number }> {
  return 'base_version' in a;
}

function withBase(a: Act, base: number): Act {
  return hasBase(a) ? { ...a, base_version: base } : { ...a };
}

function lineOf(a: Act): Uuid | null {
  return 'line_id' in a ? a.line_id : null;
}

/** The fields an act changes (conflict.rs `fields_of`). */
function fieldsOf(a: Act): string[] {
  switch (a.op) {
    case 'create_order':
      return [];
    case 'patch_order':
      return (['customer_id', 'customer_po', 'ship_window_start', 'ship_window_end', 'notes'] as const).filter(
        (k) => k in a.set,
      );
    case 'confirm':
    case 'cancel':
      return ['status'];
    default:
      return [`line:${a.line_id}`];
  }
}

const short = (id: string) => id.slice(0, 8);

function describe(a: Act, skus: Map<Uuid, Sku>): string {
  const sku = (id: Uuid) => {
    const s = skus.get(id);
    return s ? `${s.style} ${s.color} ${s.size}` : `SKU ${short(id)}`;
  };
  switch (a.op) {
    case 'create_order':
      return `new order${a.customer_po ? `, PO ${a.customer_po}` : ''}`;
    case 'patch_order':
      return `edit ${Object.entries(a.set)
        .map(([k, v]) => `${k} = ${v ?? '(none)'}`)
        .join(', ')}`;
    case 'add_line':
      return `add ${sku(a.sku_id)} × ${a.qty_ordered}`;
    case 'change_line':
      return `set line ${short(a.line_id)} quantity to ${a.qty_ordered}`;
    case 'remove_line':
      return `remove line ${short(a.line_id)}`;
    case 'allocate':
      return `allocate ${a.qty} on line ${short(a.line_id)}`;
    case 'release':
      return `release ${a.qty} on line ${short(a.line_id)}`;
    case 'confirm':
      return 'confirm';
    case 'cancel':
      return 'cancel';
  }
}

// ---------------------------------------------------------------- helpers

const clone = <T>(v: T): T => (v === undefined ? v : (JSON.parse(JSON.stringify(v)) as T));

let fallbackCounter = 0;
function uuid(): Uuid {
  const c = (globalThis as { crypto?: Crypto }).crypto;
  if (c && typeof c.randomUUID === 'function') return c.randomUUID();
  fallbackCounter += 1;
  const hex = (fallbackCounter + Date.now()).toString(16).padStart(12, '0').slice(-12);
  return `00000000-0000-4000-8000-${hex}`;
}

function err(kind: BackendError['kind'], message: string, code?: string): BackendError {
  return code ? { kind, message, code } : { kind, message };
}

interface Me {
  id: Uuid;
  name: string;
}

/** view.rs `apply`: one act on the document it is about. */
function apply(order: Order | null, act: Act, me: Me, nowIso: string): Order | null {
  if (act.op === 'create_order') {
    if (order) return order;
    return {
      id: act.order_id,
      customer_id: act.customer_id,
      customer_po: act.customer_po,
      ship_window_start: act.ship_window_start,
      ship_window_end: act.ship_window_end,
      notes: act.notes,
      status: 'draft',
      version: 1,
      invoice_id: null,
      lines: [],
      updated_at: nowIso,
      updated_by: me.id,
      updated_by_name: me.name,
      created_at: nowIso,
    };
  }
  if (!order) return null;
  const o = clone(order);
  const line = (id: Uuid) => o.lines.find((l) => l.id === id);
  switch (act.op) {
    case 'patch_order':
      Object.assign(o, act.set);
      break;
    case 'add_line':
      if (!line(act.line_id)) o.lines.push({ id: act.line_id, sku_id: act.sku_id, qty_ordered: act.qty_ordered, qty_allocated: 0 });
      break;
    case 'change_line': {
      const l = line(act.line_id);
      if (l) l.qty_ordered = act.qty_ordered;
      break;
    }
    case 'remove_line':
      o.lines = o.lines.filter((l) => l.id !== act.line_id);
      break;
    case 'allocate': {
      const l = line(act.line_id);
      if (l) l.qty_allocated += act.qty;
      break;
    }
    case 'release': {
      const l = line(act.line_id);
      if (l) l.qty_allocated -= act.qty;
      break;
    }
    case 'confirm':
      o.status = 'confirmed';
      break;
    case 'cancel':
      o.status = 'cancelled';
      for (const l of o.lines) l.qty_allocated = 0;
      break;
  }
  o.version += 1;
  o.updated_at = nowIso;
  o.updated_by = me.id;
  o.updated_by_name = me.name;
  return o;
}

// ---------------------------------------------------------------- state

interface Row {
  seq: number;
  key: string;
  order_id: Uuid;
  act: Act;
  base_version: number;
  base_doc: Order | null;
  status: PendingStatus;
  attempts: number;
  last_error: string | null;
  created_at: number;
}

interface ConflictRecord {
  pending_seq: number;
  your_base_version: number;
  base_doc: Order | null;
  theirs: Order;
}

interface Problem {
  status: number;
  code: string;
  detail: string;
  ext: Record<string, unknown>;
}

interface RejectionRecord {
  id: number;
  pending_seq: number;
  order_id: Uuid;
  key: string;
  problem: Problem;
  created_at: number;
}

type Outcome = { ok: true } | { ok: false; conflict: true } | { ok: false; conflict: false; problem: Problem };

export interface MockOptions {
  /** The clock (ms). Tests pass a fake one. */
  now?: () => number;
  /** Sync this long after each act, like the engine's loop; null: only on `syncNow`. */
  autoSyncMs?: number | null;
  /** `demo`: customers, SKUs and a few orders in every state; `catalog`: customers and SKUs only. */
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

export const DEMO_PASSWORD = 'holdfast-demo';
export const LONG_CUSTOMER = 'Brightwater & Sons Mercantile Company of Greater Northern Ontario';

export class MockBackend implements Backend {
  readonly kind = 'mock' as const;

  /** The pretend server. */
  readonly server = { orders: new Map<Uuid, Order>(), skus: new Map<Uuid, Sku>(), customers: [] as Customer[] };
  /** What this desk last pulled. */
  readonly mirror = { orders: new Map<Uuid, Order>(), skus: new Map<Uuid, Sku>() };
  rows: Row[] = [];
  readonly conflicts = new Map<Uuid, ConflictRecord>();
  rejections: RejectionRecord[] = [];
  /** Every call, for tests that check what the UI asked for. */
  readonly calls: { name: string; args: unknown[] }[] = [];

  readonly users: User[] = [
    { id: uuid(), email: 'dana@acme.test', name: 'Dana', password: DEMO_PASSWORD },
    { id: uuid(), email: 'priya@acme.test', name: 'Priya', password: DEMO_PASSWORD },
  ];

  private network = true;
  private state: { online: boolean | null; lastSyncedAt: number | null; lastError: string | null } = {
    online: null,
    lastSyncedAt: null,
    lastError: null,
  };
  private profile: Profile | null = null;
  private seq = 0;
  private rejectionSeq = 0;
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
    if (seed !== 'empty') this.seedCatalog();
    if (opts.signedIn || seed === 'demo') this.profile = this.profileFor(this.users[0]);
    if (seed === 'demo') this.seedOrders();
    this.seeding = false;
  }

  // ------------------------------------------------------------ seeding

  private seedCatalog(): void {
    const customers: [string, number | null][] = [
      ['Austin Boutique', 500_000],
      ['Tokyo Distributor', null],
      [LONG_CUSTOMER, 2_500_000],
      ['Harbour & Pine', 1_000_000],
      ['Little Fern Kids', 250_000],
      ['Northwind Outfitters', null],
    ];
    this.server.customers = customers.map(([name, credit_limit]) => ({ id: uuid(), name, credit_limit }));
    const styles: [string, string[], string[], number][] = [
      ['Kestrel Overshirt', ['Washed Indigo', 'Olive'], ['XS', 'S', 'M', 'L', 'XL', 'XXL'], 4_800],
      ['Heron Chino', ['Stone', 'Navy'], ['28', '30', '32', '34', '36'], 3_900],
      ['Wren Tee', ['White', 'Black', 'Heather Grey'], ['XS', 'S', 'M', 'L', 'XL'], 1_400],
      ['Plover Rain Shell', ['Signal Orange'], ['S', 'M', 'L', 'XL'], 9_600],
    ];
    let n = 0;
    for (const [style, colors, sizes, price] of styles) {
      for (const color of colors) {
        for (const size of sizes) {
          n += 1;
          // The API.md demo fact: Kestrel Overshirt / Washed Indigo / M has 6 on hand.
          const onHand = style === 'Kestrel Overshirt' && color === 'Washed Indigo' && size === 'M' ? 6 : 10 + ((n * 7) % 40);
          const sku: Sku = {
            id: uuid(),
            style,
            color,
            size,
            wholesale_price: price,
            msrp: price * 2 + 500,
            on_hand: onHand,
            on_order: 0,
            allocated: 0,
            ats: onHand,
          };
          this.server.skus.set(sku.id, sku);
        }
      }
    }
    this.pull();
  }

  /** A few orders in every state the desk shows, made through the same paths the UI uses. */
  private seedOrders(): void {
    const c = (name: string) => this.server.customers.find((x) => x.name === name)!.id;
    const sku = (style: string, color: string, size: string) =>
      [...this.server.skus.values()].find((s) => s.style === style && s.color === color && s.size === size)!.id;
    const priya = this.users[1];
    // Synced, with an allocation.
    const a = this.remoteCreateOrder(
      { customer_id: c('Tokyo Distributor'), customer_po: 'TD-4410', ship_window_start: '2026-02-02', ship_window_end: '2026-02-20', notes: null },
      [[sku('Wren Tee', 'Black', 'M'), 12, 12], [sku('Wren Tee', 'Black', 'L'), 8, 8]],
      priya,
    );
    // Will be in conflict: Dana edits notes and a quantity; Priya changes both first.
    const b = this.remoteCreateOrder(
      { customer_id: c(LONG_CUSTOMER), customer_po: 'BW-2207', ship_window_start: '2026-03-01', ship_window_end: '2026-03-15', notes: 'Call before delivery' },
      [[sku('Heron Chino', 'Stone', '32'), 10, 0]],
      priya,
    );
    // Will be rejected: more than the ATS of Kestrel Washed Indigo M.
    const d = this.remoteCreateOrder(
      { customer_id: c('Austin Boutique'), customer_po: 'AB-118', ship_window_start: null, ship_window_end: null, notes: null },
      [[sku('Kestrel Overshirt', 'Washed Indigo', 'M'), 9, 0]],
      priya,
    );
    this.pull();
    // Dana's desk, through the queue (synchronously: the constructor must
    // leave every state in place before anyone looks).
    const line = b.lines[0].id;
    this.queue(b.id, 'seed', [], (_, base) => ({ op: 'patch_order', order_id: b.id, base_version: base, set: { notes: 'Deliver to the loading dock, rear entrance' } }));
    this.queue(b.id, 'seed', [], (_, base) => ({ op: 'change_line', order_id: b.id, line_id: line, qty_ordered: 14, base_version: base }));
    this.queue(d.id, 'seed', [], () => ({ op: 'allocate', order_id: d.id, line_id: d.lines[0].id, qty: 9 }));
    this.remoteEditOrder(b.id, { notes: 'Front desk only', customer_po: 'BW-2207-R' }, priya, false);
    this.remoteChangeLine(b.id, line, 12, priya, false);
    this.syncInternal();
    // Pending, not yet sent: queued after the last sync.
    const h = uuid();
    this.queue(h, 'seed', [], () => ({
      op: 'create_order',
      order_id: h,
      customer_id: c('Harbour & Pine'),
      customer_po: 'HP-77',
      ship_window_start: null,
      ship_window_end: null,
      notes: null,
    }));
    this.queue(h, 'seed', [], (_, base) => ({
      op: 'add_line',
      order_id: h,
      line_id: uuid(),
      sku_id: sku('Plover Rain Shell', 'Signal Orange', 'M'),
      qty_ordered: 4,
      base_version: base,
    }));
    this.calls.length = 0;
    void a;
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

  private other(by?: User): User {
    return by ?? this.users[1];
  }

  private bump(o: Order, by: User): void {
    o.version += 1;
    o.updated_at = new Date(this.now()).toISOString();
    o.updated_by = by.id;
    o.updated_by_name = by.name;
  }

  /** Another desk creates an order on the server: lines as [sku, ordered, allocated]. */
  remoteCreateOrder(header: NewOrder, lines: [Uuid, number, number][] = [], by?: User): Order {
    const u = this.other(by);
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
        const s = this.server.skus.get(skuId)!;
        s.allocated += allocated;
        s.ats = s.on_hand + s.on_order - s.allocated;
        o.version += 1;
      }
    }
    this.server.orders.set(o.id, o);
    this.poke();
    return clone(o);
  }

  /** Another desk edits an order's header on the server. */
  remoteEditOrder(orderId: Uuid, set: OrderHeaderSet, by?: User, poke = true): void {
    const o = this.server.orders.get(orderId);
    if (!o) throw new Error(`no order ${orderId} on the mock server`);
    Object.assign(o, set);
    this.bump(o, this.other(by));
    if (poke) this.poke();
  }

  /** Another desk changes a line's quantity on the server. */
  remoteChangeLine(orderId: Uuid, lineId: Uuid, qty: number, by?: User, poke = true): void {
    const o = this.server.orders.get(orderId)!;
    const l = o.lines.find((x) => x.id === lineId)!;
    l.qty_ordered = qty;
    this.bump(o, this.other(by));
    if (poke) this.poke();
  }

  /** Another desk allocates stock (ATS drops everywhere). */
  remoteAllocate(skuId: Uuid, qty: number): void {
    const s = this.server.skus.get(skuId)!;
    s.allocated += qty;
    s.ats = s.on_hand + s.on_order - s.allocated;
    this.poke();
  }

  /** The server's stream pokes this desk: pull if the network is up. */
  private poke(): void {
    if (!this.network) return;
    this.pull();
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

  // ------------------------------------------------------------ identity

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

  private me(): Me {
    return this.profile ? { id: this.profile.user_id, name: this.profile.user_name } : { id: '00000000-0000-0000-0000-000000000000', name: 'you' };
  }

  async signIn(a: SignInArgs): Promise<Profile> {
    this.log('signIn', [{ ...a, password: '<redacted>' }]);
    if (!this.network) throw err('offline', 'the server cannot be reached; check the URL and the network');
    if (!/^https?:\/\/\S+$/.test(a.serverUrl.trim())) throw err('invalid', 'the server URL must start with http:// or https://');
    const u = this.users.find((x) => x.email.toLowerCase() === a.email.trim().toLowerCase());
    if (a.tenant.trim() !== 'acme' || !u || u.password !== a.password) {
      throw err('unauthorized', 'wrong tenant, email or password', 'unauthorized');
    }
    if (this.rows.length > 0 && this.profile && this.profile.user_id !== u.id && !a.discardPending) {
      throw err('invalid', `${this.rows.length} act(s) by ${this.profile.user_email} are not on the server yet; sync them first`);
    }
    if (a.discardPending) {
      this.rows = [];
      this.conflicts.clear();
      this.rejections = [];
    }
    this.profile = { ...this.profileFor(u), server_url: a.serverUrl.trim().replace(/\/+$/, ''), device_name: a.deviceName ?? 'mock desk' };
    this.syncInternal();
    return clone(this.profile);
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

  private statusNow(): SyncStatus {
    const oldest = this.rows.length ? Math.min(...this.rows.map((r) => r.created_at)) : null;
    const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
    return {
      store: 'memory (mock)',
      signed_in: clone(this.profile),
      token_store: 'memory (mock)',
      online: this.state.online,
      pending: this.rows.length,
      oldest_pending_at: iso(oldest),
      oldest_pending_age_secs: oldest === null ? null : Math.max(0, Math.floor((this.now() - oldest) / 1000)),
      last_synced_at: iso(this.state.lastSyncedAt),
      conflicts: this.conflicts.size,
      rejections: this.rejections.length,
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

  // ------------------------------------------------------------ views

  private rowsFor(orderId: Uuid): Row[] {
    return this.rows.filter((r) => r.order_id === orderId);
  }

  private view(orderId: Uuid): Order | null {
    const me = this.me();
    const nowIso = new Date(this.now()).toISOString();
    let doc: Order | null = clone(this.mirror.orders.get(orderId) ?? null);
    for (const r of this.rowsFor(orderId)) if (r.status !== 'rejected') doc = apply(doc, r.act, me, nowIso);
    return doc;
  }

  private mark(r: Row): PendingMark {
    return {
      seq: r.seq,
      idempotency_key: r.key,
      kind: KIND[r.act.op],
      description: describe(r.act, this.mirror.skus),
      status: r.status,
      attempts: r.attempts,
      last_error: r.last_error,
      created_at: r.created_at,
    };
  }

  private orderView(orderId: Uuid): OrderView | null {
    const order = this.view(orderId);
    if (!order) return null;
    const rows = this.rowsFor(orderId);
    const badge: Badge = rows.some((r) => r.status === 'conflict')
      ? 'conflict'
      : rows.some((r) => r.status === 'rejected')
        ? 'rejected'
        : rows.length === 0
          ? 'synced'
          : 'pending';
    const fields: string[] = [];
    for (const r of rows) if (r.status !== 'rejected') for (const f of fieldsOf(r.act)) if (!fields.includes(f)) fields.push(f);
    return {
      order,
      server_version: this.mirror.orders.get(orderId)?.version ?? null,
      badge,
      pending: rows.map((r) => this.mark(r)),
      pending_fields: fields,
    };
  }

  async listOrders(): Promise<OrderView[]> {
    const ids = [...this.mirror.orders.keys()];
    for (const r of this.rows) if (!ids.includes(r.order_id)) ids.push(r.order_id);
    return ids.map((id) => this.orderView(id)).filter((v): v is OrderView => v !== null);
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
    return this.orderView(orderId);
  }

  /** Net units this desk's pending acts allocate, per SKU. */
  private pendingAllocation(): Map<Uuid, number> {
    const net = new Map<Uuid, number>();
    const orderIds = new Set(this.rows.map((r) => r.order_id));
    for (const id of orderIds) {
      const v = this.view(id);
      for (const l of v?.lines ?? []) net.set(l.sku_id, (net.get(l.sku_id) ?? 0) + l.qty_allocated);
      for (const l of this.mirror.orders.get(id)?.lines ?? []) net.set(l.sku_id, (net.get(l.sku_id) ?? 0) - l.qty_allocated);
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
    return [...this.mirror.skus.values()]
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
      .map((id) => this.mirror.skus.get(id))
      .filter((s): s is Sku => !!s)
      .map((s) => this.skuView(s, net));
  }

  async listCustomers(): Promise<Customer[]> {
    return clone([...this.server.customers].sort((a, b) => a.name.localeCompare(b.name)));
  }

  async markStartup(): Promise<void> {}

  async listPending(): Promise<PendingEntry[]> {
    return this.rows.map((r) => [r.order_id, this.mark(r)] as PendingEntry);
  }

  // ------------------------------------------------------------ acts

  private queue(orderId: Uuid, name: string, args: unknown[], make: (doc: Order | null, base: number) => Act): string {
    this.log(name, args);
    const mirror = this.mirror.orders.get(orderId) ?? null;
    const rows = this.rowsFor(orderId);
    const doc = this.view(orderId);
    const last = rows[rows.length - 1];
    const base = last ? last.base_version + 1 : mirror ? mirror.version : 0;
    const act = make(doc, base);
    const key = uuid();
    this.seq += 1;
    this.rows.push({
      seq: this.seq,
      key,
      order_id: orderId,
      act,
      base_version: base,
      base_doc: clone(doc),
      status: 'queued',
      attempts: 0,
      last_error: null,
      created_at: this.now(),
    });
    this.changed();
    return key;
  }

  private static editable(doc: Order | null): Order {
    if (!doc) throw err('not_found', 'no such order on this desk');
    if (doc.status !== 'draft') throw err('invalid', `the order is ${doc.status}; only a draft can be edited`);
    return doc;
  }

  private static hasLine(doc: Order, lineId: Uuid): Line {
    const l = doc.lines.find((x) => x.id === lineId);
    if (!l) throw err('not_found', `no line ${short(lineId)} on this order`);
    return l;
  }

  private static positive(what: string, n: number): void {
    if (!Number.isInteger(n) || n < 1) throw err('invalid', `${what} must be at least 1`);
  }

  async createOrder(header: NewOrder): Promise<Uuid> {
    if (!header.customer_id) throw err('invalid', 'choose a customer first');
    if (header.ship_window_start && header.ship_window_end && header.ship_window_end < header.ship_window_start) {
      throw err('invalid', 'the ship window ends before it starts');
    }
    const id = uuid();
    this.queue(id, 'createOrder', [header], () => ({ op: 'create_order', order_id: id, ...header }));
    return id;
  }

  async editOrder(orderId: Uuid, set: OrderHeaderSet): Promise<string> {
    if (Object.keys(set).length === 0) throw err('invalid', 'nothing to change');
    return this.queue(orderId, 'editOrder', [orderId, set], (doc, base) => {
      MockBackend.editable(doc);
      return { op: 'patch_order', order_id: orderId, base_version: base, set: clone(set) };
    });
  }

  async addLine(orderId: Uuid, skuId: Uuid, qtyOrdered: number): Promise<Uuid> {
    MockBackend.positive('quantity', qtyOrdered);
    const lineId = uuid();
    this.queue(orderId, 'addLine', [orderId, skuId, qtyOrdered], (doc, base) => {
      MockBackend.editable(doc);
      return { op: 'add_line', order_id: orderId, line_id: lineId, sku_id: skuId, qty_ordered: qtyOrdered, base_version: base };
    });
    return lineId;
  }

  async changeLine(orderId: Uuid, lineId: Uuid, qtyOrdered: number): Promise<string> {
    MockBackend.positive('quantity', qtyOrdered);
    return this.queue(orderId, 'changeLine', [orderId, lineId, qtyOrdered], (doc, base) => {
      MockBackend.hasLine(MockBackend.editable(doc), lineId);
      return { op: 'change_line', order_id: orderId, line_id: lineId, qty_ordered: qtyOrdered, base_version: base };
    });
  }

  async removeLine(orderId: Uuid, lineId: Uuid): Promise<string> {
    return this.queue(orderId, 'removeLine', [orderId, lineId], (doc, base) => {
      MockBackend.hasLine(MockBackend.editable(doc), lineId);
      return { op: 'remove_line', order_id: orderId, line_id: lineId, base_version: base };
    });
  }

  async allocate(orderId: Uuid, lineId: Uuid, qty: number): Promise<string> {
    MockBackend.positive('quantity', qty);
    return this.queue(orderId, 'allocate', [orderId, lineId, qty], (doc) => {
      if (!doc) throw err('not_found', 'no such order on this desk');
      if (doc.status === 'cancelled') throw err('invalid', 'the order is cancelled');
      MockBackend.hasLine(doc, lineId);
      return { op: 'allocate', order_id: orderId, line_id: lineId, qty };
    });
  }

  async release(orderId: Uuid, lineId: Uuid, qty: number): Promise<string> {
    MockBackend.positive('quantity', qty);
    return this.queue(orderId, 'release', [orderId, lineId, qty], (doc) => {
      if (!doc) throw err('not_found', 'no such order on this desk');
      MockBackend.hasLine(doc, lineId);
      return { op: 'release', order_id: orderId, line_id: lineId, qty };
    });
  }

  async confirmOrder(orderId: Uuid): Promise<string> {
    return this.queue(orderId, 'confirmOrder', [orderId], (doc, base) => {
      MockBackend.editable(doc);
      return { op: 'confirm', order_id: orderId, base_version: base };
    });
  }

  async cancelOrder(orderId: Uuid): Promise<string> {
    return this.queue(orderId, 'cancelOrder', [orderId], (doc, base) => {
      if (!doc) throw err('not_found', 'no such order on this desk');
      if (doc.status === 'cancelled') throw err('invalid', 'the order is already cancelled');
      return { op: 'cancel', order_id: orderId, base_version: base };
    });
  }

  // ------------------------------------------------------------ sync

  private pull(): void {
    this.mirror.orders.clear();
    for (const [id, o] of this.server.orders) this.mirror.orders.set(id, clone(o));
    this.mirror.skus.clear();
    for (const [id, s] of this.server.skus) this.mirror.skus.set(id, clone(s));
    for (const [id, c] of this.conflicts) {
      const t = this.mirror.orders.get(id);
      if (t && t.version > c.theirs.version) c.theirs = clone(t);
    }
  }

  /** One pass: push every unblocked queued act in order, then pull. */
  private syncInternal(): void {
    if (!this.profile) return;
    if (!this.network) {
      this.state.online = false;
      this.state.lastError = 'the server cannot be reached (mock network is down)';
      for (const r of this.rows) if (r.status === 'queued') r.attempts += 1;
      this.emitStatus();
      return;
    }
    const blocked = new Set(this.rows.filter((r) => r.status !== 'queued').map((r) => r.order_id));
    const done: number[] = [];
    for (const r of this.rows) {
      if (r.status !== 'queued' || blocked.has(r.order_id)) continue;
      r.attempts += 1;
      const out = this.serve(r);
      if (out.ok) {
        done.push(r.seq);
      } else if (out.conflict) {
        r.status = 'conflict';
        r.last_error = 'version_conflict';
        blocked.add(r.order_id);
        this.conflicts.set(r.order_id, {
          pending_seq: r.seq,
          your_base_version: r.base_version,
          base_doc: clone(r.base_doc),
          theirs: clone(this.server.orders.get(r.order_id)!),
        });
      } else {
        r.status = 'rejected';
        r.last_error = out.problem.code;
        blocked.add(r.order_id);
        this.rejectionSeq += 1;
        this.rejections.push({
          id: this.rejectionSeq,
          pending_seq: r.seq,
          order_id: r.order_id,
          key: r.key,
          problem: out.problem,
          created_at: this.now(),
        });
      }
    }
    this.rows = this.rows.filter((r) => !done.includes(r.seq));
    this.pull();
    this.state = { online: true, lastSyncedAt: this.now(), lastError: null };
    this.emit('changed', null);
    this.emitStatus();
  }

  /** What the server does with one act (API.md). */
  private serve(r: Row): Outcome {
    const act = r.act;
    const me = this.users.find((u) => u.id === this.profile?.user_id) ?? this.users[0];
    const problem = (status: number, code: string, detail: string, ext: Record<string, unknown> = {}): Outcome => ({
      ok: false,
      conflict: false,
      problem: { status, code, detail, ext },
    });
    if (act.op === 'create_order') {
      if (this.server.orders.has(act.order_id)) return { ok: false, conflict: true };
      const created = apply(null, act, { id: me.id, name: me.name }, new Date(this.now()).toISOString())!;
      this.server.orders.set(created.id, created);
      return { ok: true };
    }
    const o = this.server.orders.get(act.order_id);
    if (!o) return problem(404, 'not_found', 'no such order');
    if (hasBase(act) && act.base_version !== o.version) return { ok: false, conflict: true };
    const editing = ['patch_order', 'add_line', 'change_line', 'remove_line', 'confirm'].includes(act.op);
    if (editing && o.status !== 'draft') return problem(422, 'invalid_state', `the order is ${o.status}`, { status: o.status });
    const sku = (id: Uuid) => this.server.skus.get(id)!;
    const settle = (s: Sku) => (s.ats = s.on_hand + s.on_order - s.allocated);
    const line = lineOf(act) ? o.lines.find((l) => l.id === lineOf(act)) : undefined;
    if (lineOf(act) && act.op !== 'add_line' && !line) return problem(404, 'not_found', 'no such line');
    switch (act.op) {
      case 'patch_order':
        Object.assign(o, act.set);
        break;
      case 'add_line':
        o.lines.push({ id: act.line_id, sku_id: act.sku_id, qty_ordered: act.qty_ordered, qty_allocated: 0 });
        break;
      case 'change_line':
        if (act.qty_ordered < line!.qty_allocated) {
          return problem(400, 'validation_failed', 'qty_ordered is below qty_allocated', {
            errors: [{ field: 'qty_ordered', message: 'below qty_allocated' }],
          });
        }
        line!.qty_ordered = act.qty_ordered;
        break;
      case 'remove_line': {
        const s = sku(line!.sku_id);
        s.allocated -= line!.qty_allocated;
        settle(s);
        o.lines = o.lines.filter((l) => l.id !== line!.id);
        break;
      }
      case 'allocate': {
        if (o.status === 'cancelled') return problem(422, 'invalid_state', 'the order is cancelled', { status: o.status });
        const l = line!;
        if (l.qty_allocated + act.qty > l.qty_ordered) {
          return problem(422, 'over_allocation', 'more than the line ordered', { qty_ordered: l.qty_ordered, qty_allocated: l.qty_allocated });
        }
        const s = sku(l.sku_id);
        if (s.ats < act.qty) {
          return problem(422, 'insufficient_ats', `only ${s.ats} available to sell`, { ats_available: s.ats, requested: act.qty });
        }
        s.allocated += act.qty;
        settle(s);
        l.qty_allocated += act.qty;
        break;
      }
      case 'release': {
        const l = line!;
        const s = sku(l.sku_id);
        const q = Math.min(act.qty, l.qty_allocated);
        s.allocated -= q;
        settle(s);
        l.qty_allocated -= q;
        break;
      }
      case 'confirm': {
        const customer = this.server.customers.find((c) => c.id === o.customer_id);
        const amount = o.lines.reduce((sum, l) => sum + l.qty_ordered * sku(l.sku_id).wholesale_price, 0);
        if (customer?.credit_limit !== null && customer?.credit_limit !== undefined && amount > customer.credit_limit) {
          return problem(422, 'credit_limit_exceeded', 'over the credit limit', {
            credit_limit: customer.credit_limit,
            open_amount: 0,
            order_amount: amount,
          });
        }
        o.status = 'confirmed';
        o.invoice_id = uuid();
        break;
      }
      case 'cancel':
        if (o.status === 'cancelled') return problem(422, 'invalid_state', 'already cancelled', { status: o.status });
        for (const l of o.lines) {
          const s = sku(l.sku_id);
          s.allocated -= l.qty_allocated;
          settle(s);
          l.qty_allocated = 0;
        }
        o.status = 'cancelled';
        break;
    }
    this.bump(o, me);
    return { ok: true };
  }

  // ------------------------------------------------------------ conflicts

  private conflictView(orderId: Uuid): ConflictView | null {
    const rec = this.conflicts.get(orderId);
    if (!rec) return null;
    const me = this.me();
    const nowIso = new Date(this.now()).toISOString();
    let theirs = rec.theirs;
    const m = this.mirror.orders.get(orderId);
    if (m && m.version > theirs.version) theirs = m;
    const base = rec.base_doc ?? theirs;
    let mine: Order | null = clone(base);
    const touched: string[] = [];
    const rows = this.rowsFor(orderId).filter((r) => r.status !== 'rejected');
    for (const r of rows) {
      mine = apply(mine, r.act, me, nowIso);
      for (const f of fieldsOf(r.act)) if (!touched.includes(f)) touched.push(f);
    }
    const mineDoc = mine ?? clone(base);
    const fields: FieldDiff[] = diffOrders(base, mineDoc, theirs, touched).map((input) => {
      const c = classifyField(input);
      const quantity = input.field.startsWith('line:');
      const both = c.mineChanged && c.theirsChanged;
      return {
        field: input.field,
        base: input.base,
        mine: input.mine,
        theirs: input.theirs,
        mine_changed: c.mineChanged,
        theirs_changed: c.theirsChanged,
        // The engine's rule: a quantity both touched, or a value both set differently.
        collides: both && (quantity || !jsonEqual(input.mine, input.theirs)),
        quantity,
      };
    });
    return {
      order_id: orderId,
      changed_by: theirs.updated_by_name,
      changed_at: theirs.updated_at,
      your_base_version: rec.your_base_version,
      current_version: theirs.version,
      fields,
      can_rebase: fields.every((f) => !f.collides),
      held: this.rowsFor(orderId).length,
      base: clone(base),
      mine: mineDoc,
      theirs: clone(theirs),
    };
  }

  async listConflicts(): Promise<ConflictView[]> {
    return [...this.conflicts.keys()].map((id) => this.conflictView(id)!).filter(Boolean);
  }

  async getConflict(orderId: Uuid): Promise<ConflictView | null> {
    return this.conflictView(orderId);
  }

  async resolveConflict(orderId: Uuid, resolution: Resolution): Promise<void> {
    this.log('resolveConflict', [orderId, resolution]);
    const view = this.conflictView(orderId);
    if (!view) throw err('not_found', 'no open conflict on this order');
    const choices: Record<string, string> = typeof resolution === 'object' ? resolution.choose : {};
    if (resolution !== 'discard_mine') {
      const missing = view.fields.filter((f) => f.collides && !choices[f.field]).map((f) => f.field);
      if (missing.length) throw err('resolve', `these fields changed on both sides; choose mine or theirs for each: ${missing.join(', ')}`);
      for (const name of Object.keys(choices)) {
        if (!view.fields.some((f) => f.field === name)) throw err('resolve', `no such field in this conflict: ${name}`);
      }
    }
    const keep = (field: string) => {
      if (choices[field]) return choices[field] === 'mine';
      const d = view.fields.find((f) => f.field === field);
      return !(d && d.mine_changed && d.theirs_changed && !d.collides);
    };
    const rows = this.rowsFor(orderId).filter((r) => r.status !== 'rejected');
    const planned: (Act | null)[] = rows.map((r) => {
      if (resolution === 'discard_mine') return null;
      const a = r.act;
      if (a.op === 'patch_order') {
        const set: OrderHeaderSet = {};
        for (const [k, v] of Object.entries(a.set)) if (keep(k)) (set as Record<string, unknown>)[k] = v;
        return Object.keys(set).length ? { ...a, set } : null;
      }
      return fieldsOf(a).every(keep) ? a : null;
    });
    // Re-chain on the server's current version; changed requests get new keys.
    let base = view.theirs.version;
    let doc: Order | null = clone(view.theirs);
    const me = this.me();
    const nowIso = new Date(this.now()).toISOString();
    rows.forEach((r, i) => {
      const a = planned[i];
      if (!a) {
        this.rows = this.rows.filter((x) => x.seq !== r.seq);
        return;
      }
      const act = withBase(a, base);
      const same = jsonEqual(act, r.act) && r.status === 'queued';
      Object.assign(r, { act, base_version: base, base_doc: clone(doc), status: 'queued', key: same ? r.key : uuid(), last_error: null });
      doc = apply(doc, act, me, nowIso);
      base += 1;
    });
    this.conflicts.delete(orderId);
    this.changed();
  }

  // ------------------------------------------------------------ rejections

  private rejectionView(rec: RejectionRecord): RejectionView | null {
    const row = this.rows.find((r) => r.seq === rec.pending_seq);
    if (!row) return null;
    const p = rec.problem;
    const facts: Record<string, unknown> = { ...p.ext };
    const choices: RejectionChoice[] = [];
    const act = row.act;
    if (act.op === 'allocate') {
      const skuId =
        row.base_doc?.lines.find((l) => l.id === act.line_id)?.sku_id ??
        this.mirror.orders.get(row.order_id)?.lines.find((l) => l.id === act.line_id)?.sku_id;
      if (p.code === 'insufficient_ats') {
        const atsNow = (skuId ? this.mirror.skus.get(skuId)?.ats : undefined) ?? (p.ext.ats_available as number) ?? 0;
        facts.ats_now = atsNow;
        if (skuId) facts.sku_id = skuId;
        const reduce = Math.min(atsNow, act.qty);
        if (reduce >= 1) choices.push({ choice: 'reduce_to_ats', qty: reduce });
      } else if (p.code === 'over_allocation') {
        const room = Math.min((p.ext.qty_ordered as number) - (p.ext.qty_allocated as number), act.qty);
        if (room >= 1) choices.push({ choice: 'reduce_to_ats', qty: room });
      }
    }
    if (['allocate', 'release', 'change_line'].includes(act.op) && p.code !== 'not_found') choices.push({ choice: 'remove_line' });
    choices.push({ choice: 'try_again' }, { choice: 'dismiss' });
    return {
      id: rec.id,
      order_id: rec.order_id,
      idempotency_key: rec.key,
      act: describe(act, this.mirror.skus),
      kind: KIND[act.op],
      http_status: p.status,
      code: p.code,
      detail: p.detail,
      facts,
      choices,
      created_at: rec.created_at,
    };
  }

  async listRejections(): Promise<RejectionView[]> {
    return this.rejections.map((r) => this.rejectionView(r)).filter((v): v is RejectionView => v !== null);
  }

  async resolveRejection(id: number, choice: RejectionChoice): Promise<void> {
    this.log('resolveRejection', [id, choice]);
    const rec = this.rejections.find((r) => r.id === id);
    if (!rec) throw err('not_found', `no open rejection ${id}`);
    const view = this.rejectionView(rec)!;
    if (!view.choices.some((c) => c.choice === choice.choice)) {
      throw err('invalid', `\`${choice.choice}\` is not a choice for this rejection`);
    }
    const row = this.rows.find((r) => r.seq === rec.pending_seq)!;
    const replace = (act: Act) => Object.assign(row, { act, key: uuid(), status: 'queued', last_error: null, created_at: this.now() });
    switch (choice.choice) {
      case 'reduce_to_ats':
        if (row.act.op !== 'allocate') throw err('invalid', 'only an allocation can be reduced');
        if (choice.qty < 1) throw err('invalid', 'nothing to allocate');
        replace({ ...row.act, qty: choice.qty });
        break;
      case 'remove_line':
        replace({ op: 'remove_line', order_id: row.order_id, line_id: lineOf(row.act)!, base_version: row.base_version });
        break;
      case 'try_again':
        replace(clone(row.act));
        break;
      case 'dismiss': {
        this.rows = this.rows.filter((r) => r.seq !== row.seq);
        let base = row.base_version;
        for (const r of this.rowsFor(row.order_id).filter((x) => x.seq > row.seq)) {
          r.act = withBase(r.act, base);
          r.base_version = base;
          base += 1;
        }
        break;
      }
    }
    this.rejections = this.rejections.filter((r) => r.id !== id);
    this.changed();
  }
}
