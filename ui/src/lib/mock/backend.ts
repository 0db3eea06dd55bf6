/**
 * A stand-in {@link Backend} for the Vitest suite and for `npm run dev` in a
 * plain browser: canned, typed data (../fixtures.ts over the types generated
 * from Rust) and a record of every call, with just enough state for a screen
 * to see its own acts. An act changes the order at once and waits as a
 * pending mark; a sync hands every waiting order to the pretend server as it
 * is. Conflicts and refused acts are not worked out here: a test (or the demo
 * seed) puts the engine's answer in place with {@link MockBackend.putConflict},
 * {@link MockBackend.putRejection} and {@link MockBackend.putHeld}. What collides, what the server
 * refuses and how a resolution re-issues acts are the engine's rules
 * (client/src/engine.rs, conflict.rs), tested in Rust, not copied here.
 *
 * The world the real engine sees has knobs: the network (`setNetwork`) and
 * other desks (`remote*`). This class holds the identity, the connection and
 * the events; the desk's orders and acts live in {@link Desk} (./desk.ts) and
 * the server's state in {@link PretendServer} (./server.ts).
 */
import type {
  Backend,
  ConflictView,
  Customer,
  EventName,
  EventPayloads,
  HeldExport,
  HeldItem,
  Invoice,
  NewOrder,
  OrderHistory,
  Order,
  OrderHeaderSet,
  OrderSummary,
  OrderPage,
  DeskQuery,
  OrderView,
  PendingEntry,
  Profile,
  RejectionChoice,
  RejectionView,
  Reorder,
  Resolution,
  SignInArgs,
  SignedOut,
  SkuView,
  SyncStatus,
  Unsubscribe,
  Uuid,
} from '../backend';
import { clone, type RejectionFixture } from '../fixtures';
import { Desk, err, type RefusedAct } from './desk';
import { Events } from './events';
import { seedDemo } from './seed';
import { PretendServer, type Author, type User } from './server';
import { getSkus, orderSummary, orderView, searchSkus, stuckCutoff, syncStatus, type Connection } from './views';

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

export class MockBackend implements Backend {
  readonly kind = 'mock' as const;

  /** The pretend server. */
  readonly server = new PretendServer(() => this.now());
  /** Every call, for tests that check what the UI asked for. */
  readonly calls: { name: string; args: unknown[] }[] = [];

  readonly users: User[] = this.server.users;

  private readonly desk = new Desk(this.server, {
    now: () => this.now(),
    me: () => this.me(),
    log: (name, args) => this.log(name, args),
    changed: () => this.changed(),
  });
  private network = true;
  private state: Connection = {
    online: null,
    lastSyncedAt: null,
    lastError: null,
  };
  private profile: Profile | null = null;
  /** Who was signed in last, and why the server ended it (see {@link revokeSession}). */
  private signedOut: SignedOut | null = null;
  /** An administrator revoked the session: the next request answers 401. */
  private revoked = false;
  private readonly events = new Events();
  private readonly now: () => number;
  private readonly autoSyncMs: number | null;
  private syncTimer: ReturnType<typeof setTimeout> | null = null;
  /** While the constructor seeds, nothing syncs by itself. */
  private seeding = true;

  constructor(opts: MockOptions = {}) {
    this.now = opts.now ?? (() => Date.now());
    this.autoSyncMs = opts.autoSyncMs === undefined ? null : opts.autoSyncMs;
    const seed = opts.seed ?? 'demo';
    if (seed !== 'empty') this.server.seedCatalog();
    if (opts.signedIn || seed === 'demo') this.profile = this.profileFor(this.users[0]);
    if (seed === 'demo') {
      const syncedAt = seedDemo(this, this.desk, () => this.now());
      this.state = { online: true, lastSyncedAt: syncedAt, lastError: null };
    }
    this.seeding = false;
  }

  // ------------------------------------------------------------ fixtures: what only the engine decides

  /** The engine found a conflict on this order: its acts wait for a resolution. */
  putConflict(view: ConflictView): void {
    this.desk.putConflict(view);
    this.poke();
  }

  /** The server refused an act on this order (it waits as a refused pending mark, not applied). */
  putRejection(orderId: Uuid, act: RefusedAct, problem: RejectionFixture): RejectionView {
    const view = this.desk.putRejection(orderId, act, problem);
    this.poke();
    return view;
  }

  /** The engine kept something it cannot read (a newer app's document or change); an order it names needs a newer app. */
  putHeld(item: HeldItem): void {
    this.desk.held.push(clone(item));
    this.poke();
  }

  /** Holdfast was updated: everything kept is read again. */
  clearHeld(): void {
    this.desk.held = [];
    this.poke();
  }

  // ------------------------------------------------------------ knobs for tests and the dev panel

  /** The server reports (or stops reporting) a dead-lettered partner delivery of this order. */
  setDeadLettered(orderId: Uuid, dead: boolean): void {
    const e = this.desk.entries.get(orderId);
    if (e) e.deadLettered = dead;
    this.poke();
  }

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

  /** Another desk creates an order on the server: lines as [sku, ordered, allocated]. */
  remoteCreateOrder(header: NewOrder, lines: [Uuid, number, number][] = [], by?: User): Order {
    const o = this.server.createOrder(header, lines, by ?? this.users[1]);
    this.desk.mirror(o);
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
    this.desk.seeServer(this.server.changeOrder(orderId, by ?? this.users[1], change));
    if (poke) this.poke();
  }

  /** Another desk allocates stock (ATS drops everywhere). */
  remoteAllocate(skuId: Uuid, qty: number): void {
    this.server.takeStock(skuId, qty);
    this.poke();
  }

  /**
   * An administrator deactivates the signed-in user (or resets their
   * password): every token is revoked, and the desk's next request (a sync)
   * answers 401. The engine then signs the desk out with the reason and
   * keeps every pending act; so does this.
   */
  revokeSession(): void {
    this.revoked = true;
  }

  /** The server's stream pokes this desk (tests call it too, as a nudge to look again). */
  poke(): void {
    if (!this.network || this.seeding) return;
    this.events.emit('changed', null);
    this.emitStatus();
  }

  // ------------------------------------------------------------ events

  async on<E extends EventName>(event: E, handler: (payload: EventPayloads[E]) => void): Promise<Unsubscribe> {
    return this.events.on(event, handler);
  }

  private emitStatus(): void {
    if (this.events.heard('syncStatus')) this.events.emit('syncStatus', this.statusNow());
  }

  private changed(): void {
    this.events.emit('changed', null);
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

  private me(): Author {
    return this.profile ? { id: this.profile.user_id, name: this.profile.user_name } : { id: '00000000-0000-0000-0000-000000000000', name: 'you' };
  }

  async signIn(a: SignInArgs): Promise<Profile> {
    this.log('signIn', [{ ...a, password: '<redacted>' }]);
    if (!this.network) throw err('offline', 'the server cannot be reached; check the URL and the network');
    const u = this.users.find((x) => x.email.toLowerCase() === a.email.trim().toLowerCase());
    if (a.tenant.trim() !== 'acme' || !u || u.password !== a.password) {
      throw err('unauthorized', 'wrong tenant, email or password', 'unauthorized');
    }
    if (a.discardPending) this.desk.discardAll();
    this.revoked = false;
    this.signedOut = null;
    this.profile = { ...this.profileFor(u), server_url: a.serverUrl.trim().replace(/\/+$/, ''), device_name: a.deviceName ?? 'mock desk' };
    this.syncInternal();
    return clone(this.profile);
  }

  async signOut(): Promise<boolean> {
    this.log('signOut', []);
    if (this.profile) this.signedOut = { reason: null, server_url: this.profile.server_url, tenant_slug: this.profile.tenant_slug, user_email: this.profile.user_email };
    this.profile = null;
    this.emitStatus();
    return this.network;
  }

  async getProfile(): Promise<Profile | null> {
    return clone(this.profile);
  }

  private statusNow(): SyncStatus {
    return syncStatus(this.desk, this.profile, this.state, () => this.now(), this.signedOut);
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
      for (const [, m] of this.desk.marks()) if (m.status === 'queued') m.attempts += 1;
      this.emitStatus();
      return;
    }
    if (this.revoked) {
      // The engine's answer to a 401: signed out with the reason, the queue kept.
      const p = this.profile;
      this.signedOut = { reason: 'Signed out by an administrator.', server_url: p.server_url, tenant_slug: p.tenant_slug, user_email: p.user_email };
      this.profile = null;
      this.state = { ...this.state, online: null };
      this.emitStatus();
      return;
    }
    this.desk.sendQueued();
    this.state = { online: true, lastSyncedAt: this.now(), lastError: null };
    this.events.emit('changed', null);
    this.emitStatus();
  }

  // ------------------------------------------------------------ views

  async listOrders(): Promise<OrderView[]> {
    return [...this.desk.entries].map(([id, e]) => orderView(e, this.desk.needsNewerApp(id)));
  }

  /** Every order's row (the engine's `order_summaries`); `listOrderPage` windows it. */
  private async orderSummaries(): Promise<OrderSummary[]> {
    const cutoff = stuckCutoff(this.state, this.now());
    return (await this.listOrders()).map((v) => orderSummary(v, cutoff));
  }

  /** The engine's `order_page`, over every summary (the mock's desks are small). */
  async listOrderPage(query: DeskQuery): Promise<OrderPage> {
    const names = new Map([...this.server.customers].map((c) => [c.id, c.name]));
    const words = query.q.toLowerCase().split(/\s+/).filter((w) => w);
    const shown = (await this.orderSummaries())
      .filter((v) => (query.badge === null || v.badge === query.badge) && (query.status === null || v.order.status === query.status))
      .filter((v) => {
        const o = v.order;
        const hay = [names.get(o.customer_id) ?? 'Unknown customer', o.customer_po ?? '', o.notes ?? '', o.id].join(' ').toLowerCase();
        return words.every((w) => hay.includes(w));
      })
      .sort((a, b) => {
        const [x, y] = [Date.parse(a.order.updated_at), Date.parse(b.order.updated_at)];
        return y - x || (a.order.id < b.order.id ? -1 : a.order.id > b.order.id ? 1 : 0);
      });
    const at = shown.findIndex((v) => v.order.id === query.selected);
    return {
      total: shown.length,
      offset: query.offset,
      rows: shown.slice(query.offset, query.offset + Math.min(query.limit, 1000)),
      selected_index: at < 0 ? null : at,
    };
  }

  async getOrder(orderId: Uuid): Promise<OrderView | null> {
    const e = this.desk.entries.get(orderId);
    return e ? orderView(e, this.desk.needsNewerApp(orderId)) : null;
  }

  async searchSkus(q: string, limit: number, customerId: Uuid | null = null): Promise<SkuView[]> {
    return searchSkus(this.server, this.desk, q, limit, customerId);
  }

  async getSkus(skuIds: Uuid[]): Promise<SkuView[]> {
    return getSkus(this.server, this.desk, skuIds);
  }

  async listCustomers(): Promise<Customer[]> {
    return clone([...this.server.customers].sort((a, b) => a.name.localeCompare(b.name)));
  }

  async markStartup(): Promise<void> {}

  async listPending(): Promise<PendingEntry[]> {
    return clone(this.desk.marks());
  }

  // ------------------------------------------------------------ acts (./desk.ts records each call)

  async createOrder(header: NewOrder): Promise<Uuid> {
    return this.desk.createOrder(header);
  }

  async editOrder(orderId: Uuid, set: OrderHeaderSet): Promise<string> {
    return this.desk.editOrder(orderId, set);
  }

  async addLine(orderId: Uuid, skuId: Uuid, qtyOrdered: number): Promise<Uuid> {
    return this.desk.addLine(orderId, skuId, qtyOrdered);
  }

  async changeLine(orderId: Uuid, lineId: Uuid, qtyOrdered: number): Promise<string> {
    return this.desk.changeLine(orderId, lineId, qtyOrdered);
  }

  async removeLine(orderId: Uuid, lineId: Uuid): Promise<string> {
    return this.desk.removeLine(orderId, lineId);
  }

  async allocate(orderId: Uuid, lineId: Uuid, qty: number): Promise<string> {
    return this.desk.allocate(orderId, lineId, qty);
  }

  async release(orderId: Uuid, lineId: Uuid, qty: number): Promise<string> {
    return this.desk.release(orderId, lineId, qty);
  }

  async confirmOrder(orderId: Uuid): Promise<string> {
    return this.desk.confirmOrder(orderId);
  }

  async cancelOrder(orderId: Uuid): Promise<string> {
    return this.desk.cancelOrder(orderId);
  }

  /** What the server would say of an order's history (tests put it; an order the server has with none put: no entries). */
  readonly histories = new Map<Uuid, OrderHistory>();

  async getOrderHistory(orderId: Uuid): Promise<OrderHistory> {
    this.log('getOrderHistory', [orderId]);
    if (!this.network) throw err('offline', "the order's history is kept on the server, which cannot be reached now (mock network is down)");
    const h = this.histories.get(orderId);
    if (h) return clone(h);
    if (!this.server.orders.has(orderId)) throw err('not_found', 'the server has no such order yet');
    return { entries: [] };
  }

  async getInvoice(invoiceId: Uuid): Promise<Invoice | null> {
    return clone(this.server.invoices.get(invoiceId) ?? null);
  }

  /** As the engine's reorder: a new draft for the same customer with the active lines. */
  async reorderOrder(orderId: Uuid): Promise<Reorder> {
    this.log('reorderOrder', [orderId]);
    const source = this.desk.entries.get(orderId)?.order;
    if (!source) throw err('not_found', `no order ${orderId} on this desk`);
    const id = this.desk.newOrder({ customer_id: source.customer_id, customer_po: null, ship_window_start: null, ship_window_end: null, notes: null });
    const skipped: string[] = [];
    for (const l of source.lines) {
      const s = this.server.skus.get(l.sku_id);
      if (s && !s.active) skipped.push(`${s.style} · ${s.color} · ${s.size}`);
      else this.desk.addLine(id, l.sku_id, l.qty_ordered);
    }
    return { order_id: id, skipped };
  }

  // ------------------------------------------------------------ conflicts and rejections (fixtures)

  async listConflicts(): Promise<ConflictView[]> {
    return clone([...this.desk.conflicts.values()]);
  }

  async getConflict(orderId: Uuid): Promise<ConflictView | null> {
    return clone(this.desk.conflicts.get(orderId) ?? null);
  }

  async resolveConflict(orderId: Uuid, resolution: Resolution): Promise<void> {
    this.desk.resolveConflict(orderId, resolution);
  }

  async listRejections(): Promise<RejectionView[]> {
    return clone(this.desk.refusals.map((r) => r.view));
  }

  async resolveRejection(id: number, choice: RejectionChoice): Promise<void> {
    this.desk.resolveRejection(id, choice);
  }

  // ------------------------------------------------------------ kept for a newer app (fixtures)

  async listHeld(): Promise<HeldItem[]> {
    return clone(this.desk.held);
  }

  /** As the shell: the file goes to the user's Downloads folder, named by the local time. */
  async exportHeld(): Promise<HeldExport> {
    this.log('exportHeld', []);
    const d = new Date(this.now());
    const p = (n: number) => n.toString().padStart(2, '0');
    const stamp = `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}-${p(d.getHours())}${p(d.getMinutes())}${p(d.getSeconds())}`;
    const home = (this.profile?.user_email ?? 'user').split('@')[0];
    return { path: `/home/${home}/Downloads/holdfast-kept-${stamp}.json`, count: this.desk.held.length };
  }
}
