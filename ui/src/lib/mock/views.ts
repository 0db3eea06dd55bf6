/**
 * What the screens read from {@link MockBackend}: an order with its badge and
 * pending marks, a SKU with the ATS this desk sees, and the sync status. Each
 * is a copy, so a screen never holds the mock's own state.
 */
import type { Badge, Line, OrderSummary, OrderView, Profile, SignedOut, Sku, SkuView, SyncStatus, Uuid } from '../backend';
import { clone } from '../fixtures';
import type { Desk, Entry } from './desk';
import type { PretendServer } from './server';

/** The connection as the last sync attempt left it. */
export interface Connection {
  online: boolean | null;
  lastSyncedAt: number | null;
  lastError: string | null;
}

export function orderView(e: Entry, needsNewerApp = false): OrderView {
  const badge: Badge = e.pending.some((m) => m.status === 'conflict')
    ? 'conflict'
    : e.pending.some((m) => m.status === 'rejected')
      ? 'rejected'
      : e.pending.length === 0
        ? 'synced'
        : 'pending';
  return {
    order: clone(e.order),
    line_prices: e.order.lines.map((l) => ({
      line_id: l.id,
      expected: e.expected?.[l.id] ?? null,
      priced_by_server: !!e.server?.lines.some((x) => x.id === l.id),
    })),
    server_version: e.server?.version ?? null,
    badge,
    pending: clone(e.pending),
    pending_fields: [...e.fields],
    dead_lettered: e.deadLettered ?? false,
    needs_newer_app: needsNewerApp,
  };
}

/** The engine's rule (client/src/engine/views.rs): acts pending this long while online are stuck. */
export const STUCK_AFTER_MS = 15 * 60 * 1000;

/** Acts queued at or before the cutoff are stuck (the mock counts the desk online since before them). */
export function stuckCutoff(state: Connection, now: number): number | null {
  return state.online === true ? now - STUCK_AFTER_MS : null;
}

export function orderSummary(
  { order: { lines, ...order }, badge, pending, dead_lettered: deadLettered, needs_newer_app: needsNewerApp }: OrderView,
  cutoff: number | null = null,
): OrderSummary {
  return {
    order,
    badge,
    pending_count: pending.length,
    line_count: lines.length,
    units: lines.reduce((n, l) => n + l.qty_ordered, 0),
    stuck: cutoff !== null && pending.some((m) => m.created_at <= cutoff),
    dead_lettered: deadLettered,
    needs_newer_app: needsNewerApp,
  };
}

/** Net units this desk's unsent acts allocate, per SKU. */
function pendingAllocation(desk: Desk): Map<Uuid, number> {
  const net = new Map<Uuid, number>();
  const add = (l: Line, sign: number) => net.set(l.sku_id, (net.get(l.sku_id) ?? 0) + sign * l.qty_allocated);
  for (const e of desk.entries.values()) {
    if (e.pending.length === 0) continue;
    for (const l of e.order.lines) add(l, 1);
    for (const l of e.server?.lines ?? []) add(l, -1);
  }
  return net;
}

function skuView(s: Sku, net: Map<Uuid, number>, customerPrice: number | null = null): SkuView {
  const n = net.get(s.id) ?? 0;
  return { ...clone(s), ats_local: s.ats - n, pending_allocation: n, customer_price: customerPrice };
}

export function searchSkus(server: PretendServer, desk: Desk, q: string, limit: number, customerId: Uuid | null = null): SkuView[] {
  const words = q.toLowerCase().split(/\s+/).filter(Boolean);
  const net = pendingAllocation(desk);
  return [...server.skus.values()]
    .filter((s) => {
      const hay = `${s.code ?? ''} ${s.style} ${s.color} ${s.size}`.toLowerCase();
      return words.every((w) => hay.includes(w));
    })
    .sort((a, b) => a.style.localeCompare(b.style) || a.color.localeCompare(b.color) || a.size.localeCompare(b.size))
    .slice(0, Math.max(0, limit))
    .map((s) => skuView(s, net, customerId ? server.priceFor(customerId, s.id) : null));
}

export function getSkus(server: PretendServer, desk: Desk, skuIds: Uuid[]): SkuView[] {
  const net = pendingAllocation(desk);
  return skuIds
    .map((id) => server.skus.get(id))
    .filter((s): s is Sku => !!s)
    .map((s) => skuView(s, net));
}

/** `now` is read only for the age of the oldest mark, so a clock that moves on each read moves only then. */
export function syncStatus(desk: Desk, profile: Profile | null, state: Connection, now: () => number, signedOut: SignedOut | null = null): SyncStatus {
  const marks = desk.marks();
  const oldest = marks.length ? Math.min(...marks.map(([, m]) => m.created_at)) : null;
  const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
  const cutoff = stuckCutoff(state, now());
  return {
    store: 'memory (mock)',
    signed_in: clone(profile),
    token_store: 'memory (mock)',
    online: state.online,
    pending: marks.length,
    oldest_pending_at: iso(oldest),
    oldest_pending_age_secs: oldest === null ? null : Math.max(0, Math.floor((now() - oldest) / 1000)),
    last_synced_at: iso(state.lastSyncedAt),
    conflicts: desk.conflicts.size,
    rejections: desk.refusals.length,
    next_attempt_at: null,
    last_error: state.lastError,
    signed_out: profile ? null : clone(signedOut),
    stuck: cutoff === null ? 0 : marks.filter(([, m]) => m.created_at <= cutoff).length,
    dead_lettered_orders: [...desk.entries.values()].filter((e) => e.deadLettered).length,
    held: desk.held.length,
  };
}
