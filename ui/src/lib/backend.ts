/**
 * The one interface between the UI and Rust.
 *
 * Every screen talks to a {@link Backend}. There are two implementations:
 * - {@link createTauriBackend} (this file): `invoke` + `listen` from
 *   `@tauri-apps/api`, over the src-tauri shell, which forwards each command
 *   to one `holdfast_client::Engine` call and each engine event to a Tauri
 *   event. Used inside the desktop app.
 * - `MockBackend` (`./mock.ts`): canned data and a record of calls, used by
 *   the Vitest suite and by `npm run dev` in a plain browser.
 *
 * # The contract with src-tauri (names are exact)
 *
 * Commands are `#[tauri::command]` functions with these names. Argument keys
 * are camelCase on this side; Tauri 2 maps them to the snake_case Rust
 * parameter names by default (`orderId` → `order_id`), so do not put
 * `rename_all` on the commands. Nested objects (`header`, `set`,
 * `resolution`, `choice`) pass through serde unchanged, snake_case inside.
 * Return values are the engine's own `Serialize` output.
 *
 * | command             | args                                                               | returns                      | engine call |
 * | ------------------- | ------------------------------------------------------------------ | ---------------------------- | ----------- |
 * | `sign_in`           | `serverUrl, tenant, email, password, deviceName: string\|null, discardPending: bool` | `Profile`     | `login` (device name: the host name when null) |
 * | `sign_out`          | —                                                                  | `bool` (server revoked it)   | `logout` |
 * | `get_profile`       | —                                                                  | `Profile \| null`            | `profile` |
 * | `get_status`        | —                                                                  | `SyncStatus`                 | `status` |
 * | `sync_now`          | —                                                                  | `null`                       | `connectivity_returned` (forgets the backoff, wakes the loop) |
 * | `list_orders`       | —                                                                  | `OrderView[]`                | `orders` |
 * | `list_order_page`   | `query: DeskQuery`                                                 | `OrderPage`                  | `order_page` (the desk's window: filtered, searched, counted by the engine) |
 * | `get_order`         | `orderId`                                                          | `OrderView \| null`          | `order` |
 * | `create_order`      | `header: NewOrder`                                                 | `string` (the new order id)  | `create_order` |
 * | `edit_order`        | `orderId, set: OrderHeaderSet`                                     | `string` (idempotency key)   | `edit_order` |
 * | `add_line`          | `orderId, skuId, qtyOrdered`                                       | `string` (the new line id)   | `add_line` |
 * | `change_line`       | `orderId, lineId, qtyOrdered`                                      | `string` (key)               | `change_line` |
 * | `remove_line`       | `orderId, lineId`                                                  | `string` (key)               | `remove_line` |
 * | `allocate`          | `orderId, lineId, qty`                                             | `string` (key)               | `allocate` |
 * | `release`           | `orderId, lineId, qty`                                             | `string` (key)               | `release` |
 * | `confirm_order`     | `orderId`                                                          | `string` (key)               | `confirm` |
 * | `cancel_order`      | `orderId`                                                          | `string` (key)               | `cancel` |
 * | `reorder_order`     | `orderId`                                                          | `Reorder` (new draft id, skipped lines) | `reorder` |
 * | `get_invoice`       | `invoiceId`                                                        | `Invoice \| null`           | `invoice` |
 * | `get_order_history` | `orderId`                                                          | `OrderHistory`               | `order_history` (online only) |
 * | `search_skus`       | `q, limit, customerId: string\|null`                               | `SkuView[]` (`customer_price` for that customer) | `skus_for` |
 * | `get_skus`          | `skuIds: string[]`                                                 | `SkuView[]` (unknown ids left out) | `sku` per id |
 * | `list_customers`    | —                                                                  | `Customer[]`                 | `customers` |
 * | `list_conflicts`    | —                                                                  | `ConflictView[]`             | `conflicts` |
 * | `get_conflict`      | `orderId`                                                          | `ConflictView \| null`       | `conflict` |
 * | `resolve_conflict`  | `orderId, resolution: Resolution`                                  | `null`                       | `resolve_conflict` |
 * | `list_rejections`   | —                                                                  | `RejectionView[]`            | `rejections` |
 * | `resolve_rejection` | `id, choice: RejectionChoice`                                      | `null`                       | `resolve_rejection` |
 * | `list_pending`      | —                                                                  | `[orderId, PendingMark][]`   | `pending` |
 * | `list_held`         | —                                                                  | `HeldItem[]`                 | `held` (what this build keeps but cannot read, in words) |
 * | `export_held`       | —                                                                  | `HeldExport` (`path`, `count`) | `export_held` into the user's Downloads folder (else the store's folder) as `holdfast-kept-<YYYY-MM-DD-HHMMSS>.json` |
 * | `mark_startup`      | `stage: 'page' \| 'ready'`                                         | `null`                       | — (logs the time since launch; see src-tauri `commands::mark_startup`) |
 *
 * A failing command rejects with a {@link BackendError}
 * `{"kind", "message", "code"?}` (see there for the mapping from
 * `holdfast_client::Error`).
 *
 * Events (emitted to the main window with `Emitter::emit`):
 *
 * | event                  | payload      | when |
 * | ---------------------- | ------------ | ---- |
 * | `holdfast:changed`     | `null`       | on `EngineEvent::Changed` (an act, a resolution, a pull that brought something) |
 * | `holdfast:sync-status` | `SyncStatus` | after every engine event, whatever its variant (`changed`, `sync_finished`, `pushed`, `sync_failed`, `stream_connected`, `stream_lost`, …): the shell calls `Engine::status()` and sends it |
 *
 * Screens refetch what they show on `holdfast:changed` (debounced ~100 ms),
 * so ATS and order changes from other desks appear within a second.
 */
import { invoke } from '@tauri-apps/api/core';
import { listen } from '@tauri-apps/api/event';

// ---------------------------------------------------------------- the types that cross (generated)

// Rendered from the Rust types by `make ui-types` into ./generated/ (ts-rs);
// a Rust test (src-tauri/tests/ui_types.rs) fails when they drift.
import type { BackendError } from './generated/BackendError';
import type { Badge } from './generated/Badge';
import type { Choice } from './generated/Choice';
import type { ConflictView } from './generated/ConflictView';
import type { Customer } from './generated/Customer';
import type { FieldDiff } from './generated/FieldDiff';
import type { HeldExport } from './generated/HeldExport';
import type { HeldItem } from './generated/HeldItem';
import type { HeldKind } from './generated/HeldKind';
import type { HistoryDelivery } from './generated/HistoryDelivery';
import type { HistoryDeliveryState } from './generated/HistoryDeliveryState';
import type { HistoryEntry } from './generated/HistoryEntry';
import type { Invoice } from './generated/Invoice';
import type { InvoiceStatus } from './generated/InvoiceStatus';
import type { Line } from './generated/Line';
import type { LinePrice } from './generated/LinePrice';
import type { NewOrder } from './generated/NewOrder';
import type { Order } from './generated/Order';
import type { OrderHead } from './generated/OrderHead';
import type { OrderHeaderSet } from './generated/OrderHeaderSet';
import type { OrderHistory } from './generated/OrderHistory';
import type { OrderStatus } from './generated/OrderStatus';
import type { OrderSummary } from './generated/OrderSummary';
import type { OrderPage } from './generated/OrderPage';
import type { DeskQuery } from './generated/DeskQuery';
import type { OrderView } from './generated/OrderView';
import type { PendingMark } from './generated/PendingMark';
import type { PendingStatus } from './generated/PendingStatus';
import type { ProblemCode } from './generated/ProblemCode';
import type { Profile } from './generated/Profile';
import type { RejectionChoice } from './generated/RejectionChoice';
import type { RejectionView } from './generated/RejectionView';
import type { Reorder } from './generated/Reorder';
import type { Resolution } from './generated/Resolution';
import type { SignedOut } from './generated/SignedOut';
import type { Sku } from './generated/Sku';
import type { SkuView } from './generated/SkuView';
import type { SyncStatus } from './generated/SyncStatus';
import type { JsonValue } from './generated/serde_json/JsonValue';

export type {
  BackendError,
  Badge,
  Choice,
  ConflictView,
  Customer,
  FieldDiff,
  HeldExport,
  HeldItem,
  HeldKind,
  HistoryDelivery,
  HistoryDeliveryState,
  HistoryEntry,
  Invoice,
  InvoiceStatus,
  JsonValue,
  Line,
  LinePrice,
  NewOrder,
  Order,
  OrderHead,
  OrderHeaderSet,
  OrderHistory,
  OrderStatus,
  OrderSummary,
  OrderPage,
  DeskQuery,
  OrderView,
  PendingMark,
  PendingStatus,
  ProblemCode,
  Profile,
  RejectionChoice,
  RejectionView,
  Reorder,
  Resolution,
  SignedOut,
  Sku,
  SkuView,
  SyncStatus,
};

export type Uuid = string;

/** `engine::pending()`: `(order_id, mark)` tuples, in queue order. */
export type PendingEntry = [Uuid, PendingMark];

// ---------------------------------------------------------------- arguments

export interface SignInArgs {
  serverUrl: string;
  tenant: string;
  email: string;
  password: string;
  /** Null: the shell uses the machine's host name. */
  deviceName: string | null;
  /** Drop a previous user's unsent acts (the engine refuses otherwise). */
  discardPending: boolean;
}

// ---------------------------------------------------------------- errors

/*
 * A failed command rejects with a {@link BackendError} (src-tauri's
 * `CommandError`). The shell maps `holdfast_client::Error`:
 * `Api(e) if e.is_transient()` → `offline`; `NotSignedIn` → `not_signed_in`;
 * `Unauthorized` (and a 401 on sign-in) → `unauthorized`; `Busy` → `busy`;
 * `NotFound` → `not_found`; `Invalid` → `invalid`; `Resolve` → `resolve`;
 * anything else → `internal`. `message` is the error's Display text, for
 * people; `code` is the API.md problem code when the server sent one.
 */

/** Turns whatever a command threw into a {@link BackendError}. */
export function toBackendError(e: unknown): BackendError {
  if (e && typeof e === 'object' && 'message' in e && 'kind' in e) {
    return e as BackendError;
  }
  if (typeof e === 'string') return { kind: 'internal', message: e };
  if (e instanceof Error) return { kind: 'internal', message: e.message };
  return { kind: 'internal', message: String(e) };
}

/** A human sentence for an error. */
export function errorText(e: unknown): string {
  return toBackendError(e).message;
}

// ---------------------------------------------------------------- events

export const EVENTS = {
  changed: 'holdfast:changed',
  syncStatus: 'holdfast:sync-status',
} as const;

export interface EventPayloads {
  changed: null;
  syncStatus: SyncStatus;
}

export type EventName = keyof EventPayloads;
export type Unsubscribe = () => void;

// ---------------------------------------------------------------- the interface

export interface Backend {
  /** Which implementation this is (the UI shows a banner for the mock). */
  readonly kind: 'tauri' | 'mock';

  signIn(args: SignInArgs): Promise<Profile>;
  signOut(): Promise<boolean>;
  getProfile(): Promise<Profile | null>;
  getStatus(): Promise<SyncStatus>;
  syncNow(): Promise<void>;

  listOrders(): Promise<OrderView[]>;
  /** One window of the desk's list (see {@link DeskQuery}, {@link OrderPage}): the UI never holds every order's row. */
  listOrderPage(query: DeskQuery): Promise<OrderPage>;
  getOrder(orderId: Uuid): Promise<OrderView | null>;
  createOrder(header: NewOrder): Promise<Uuid>;
  editOrder(orderId: Uuid, set: OrderHeaderSet): Promise<string>;
  addLine(orderId: Uuid, skuId: Uuid, qtyOrdered: number): Promise<Uuid>;
  changeLine(orderId: Uuid, lineId: Uuid, qtyOrdered: number): Promise<string>;
  removeLine(orderId: Uuid, lineId: Uuid): Promise<string>;
  allocate(orderId: Uuid, lineId: Uuid, qty: number): Promise<string>;
  release(orderId: Uuid, lineId: Uuid, qty: number): Promise<string>;
  confirmOrder(orderId: Uuid): Promise<string>;
  cancelOrder(orderId: Uuid): Promise<string>;
  /** Copies the order into a new draft (same customer and lines, today's prices); discontinued SKUs are left out and named. */
  reorderOrder(orderId: Uuid): Promise<Reorder>;
  /** A confirmed order's invoice as last pulled (null: not on this desk yet). */
  getInvoice(invoiceId: Uuid): Promise<Invoice | null>;
  /** The order's history from the server: rejects with kind `offline` when it cannot be reached. */
  getOrderHistory(orderId: Uuid): Promise<OrderHistory>;

  /** Matches code, style, colour and size; with a customer, each SKU carries what they would pay (`customer_price`). */
  searchSkus(q: string, limit: number, customerId?: Uuid | null): Promise<SkuView[]>;
  getSkus(skuIds: Uuid[]): Promise<SkuView[]>;
  listCustomers(): Promise<Customer[]>;

  listConflicts(): Promise<ConflictView[]>;
  getConflict(orderId: Uuid): Promise<ConflictView | null>;
  resolveConflict(orderId: Uuid, resolution: Resolution): Promise<void>;
  listRejections(): Promise<RejectionView[]>;
  resolveRejection(id: number, choice: RejectionChoice): Promise<void>;
  listPending(): Promise<PendingEntry[]>;
  /**
   * What this build keeps without being able to read it: documents the
   * server sent in a newer form, and the user's changes it cannot send.
   * `what` and `why` are words for people; `order_id` is only for opening
   * the order, never to show.
   */
  listHeld(): Promise<HeldItem[]>;
  /** Saves everything held, raw, to a file for an administrator; the shell picks the folder. */
  exportHeld(): Promise<HeldExport>;
  /**
   * Startup marks: `page` when the page's first script runs (the webview is
   * up), `ready` when the first interactive screen is on show. The shell
   * logs the time since launch (benchmarks read it).
   */
  markStartup(stage: 'page' | 'ready'): Promise<void>;

  /** Subscribes to an engine event; resolves to its unsubscribe function. */
  on<E extends EventName>(event: E, handler: (payload: EventPayloads[E]) => void): Promise<Unsubscribe>;
}

// ---------------------------------------------------------------- Tauri implementation

/** Command names, exactly as src-tauri registers them. */
export const COMMANDS = {
  signIn: 'sign_in',
  signOut: 'sign_out',
  getProfile: 'get_profile',
  getStatus: 'get_status',
  syncNow: 'sync_now',
  listOrders: 'list_orders',
  listOrderPage: 'list_order_page',
  getOrder: 'get_order',
  createOrder: 'create_order',
  editOrder: 'edit_order',
  addLine: 'add_line',
  changeLine: 'change_line',
  removeLine: 'remove_line',
  allocate: 'allocate',
  release: 'release',
  confirmOrder: 'confirm_order',
  cancelOrder: 'cancel_order',
  reorderOrder: 'reorder_order',
  getInvoice: 'get_invoice',
  getOrderHistory: 'get_order_history',
  searchSkus: 'search_skus',
  getSkus: 'get_skus',
  listCustomers: 'list_customers',
  listConflicts: 'list_conflicts',
  getConflict: 'get_conflict',
  resolveConflict: 'resolve_conflict',
  listRejections: 'list_rejections',
  resolveRejection: 'resolve_rejection',
  listPending: 'list_pending',
  listHeld: 'list_held',
  exportHeld: 'export_held',
  markStartup: 'mark_startup',
} as const satisfies Record<Exclude<keyof Backend, 'kind' | 'on'>, string>;

type Invoke = <T>(cmd: string, args?: Record<string, unknown>) => Promise<T>;
type Listen = <T>(event: string, handler: (e: { payload: T }) => void) => Promise<() => void>;

/**
 * The desktop implementation. `invokeFn`/`listenFn` are injectable so the
 * contract (names and argument keys) can be checked without a window.
 */
export function createTauriBackend(
  invokeFn: Invoke = invoke as Invoke,
  listenFn: Listen = listen as unknown as Listen,
): Backend {
  const call = async <T>(cmd: string, args?: Record<string, unknown>): Promise<T> => {
    try {
      return await invokeFn<T>(cmd, args);
    } catch (e) {
      throw toBackendError(e);
    }
  };
  const C = COMMANDS;
  return {
    kind: 'tauri',
    signIn: (a) => call(C.signIn, { ...a }),
    signOut: () => call(C.signOut),
    getProfile: () => call(C.getProfile),
    getStatus: () => call(C.getStatus),
    syncNow: () => call(C.syncNow),
    listOrders: () => call(C.listOrders),
    listOrderPage: (query) => call(C.listOrderPage, { query }),
    getOrder: (orderId) => call(C.getOrder, { orderId }),
    createOrder: (header) => call(C.createOrder, { header }),
    editOrder: (orderId, set) => call(C.editOrder, { orderId, set }),
    addLine: (orderId, skuId, qtyOrdered) => call(C.addLine, { orderId, skuId, qtyOrdered }),
    changeLine: (orderId, lineId, qtyOrdered) => call(C.changeLine, { orderId, lineId, qtyOrdered }),
    removeLine: (orderId, lineId) => call(C.removeLine, { orderId, lineId }),
    allocate: (orderId, lineId, qty) => call(C.allocate, { orderId, lineId, qty }),
    release: (orderId, lineId, qty) => call(C.release, { orderId, lineId, qty }),
    confirmOrder: (orderId) => call(C.confirmOrder, { orderId }),
    cancelOrder: (orderId) => call(C.cancelOrder, { orderId }),
    reorderOrder: (orderId) => call(C.reorderOrder, { orderId }),
    getInvoice: (invoiceId) => call(C.getInvoice, { invoiceId }),
    getOrderHistory: (orderId) => call(C.getOrderHistory, { orderId }),
    searchSkus: (q, limit, customerId = null) => call(C.searchSkus, { q, limit, customerId }),
    getSkus: (skuIds) => call(C.getSkus, { skuIds }),
    listCustomers: () => call(C.listCustomers),
    listConflicts: () => call(C.listConflicts),
    getConflict: (orderId) => call(C.getConflict, { orderId }),
    resolveConflict: (orderId, resolution) => call(C.resolveConflict, { orderId, resolution }),
    listRejections: () => call(C.listRejections),
    resolveRejection: (id, choice) => call(C.resolveRejection, { id, choice }),
    listPending: () => call(C.listPending),
    listHeld: () => call(C.listHeld),
    exportHeld: () => call(C.exportHeld),
    markStartup: (stage) => call(C.markStartup, { stage }),
    on: async (event, handler) => {
      const unlisten = await listenFn<never>(EVENTS[event], (e) => handler(e.payload));
      return unlisten;
    },
  };
}
