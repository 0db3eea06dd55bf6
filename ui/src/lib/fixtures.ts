/**
 * Canned data for the mock backend, typed with the types generated from
 * Rust (./generated/): the demo tenant's customers and SKUs, and builders
 * for what only the engine can produce — a conflict (`conflictFixture`), a
 * refused act (`insufficientAts`) and something kept for a newer app
 * (`heldFixture`). A fixture states the engine's verdicts
 * (which field collides, which choices a rejection offers) instead of
 * computing them: those rules live in client/src/conflict.rs and engine.rs,
 * and their tests are the Rust ones.
 */
import type { ConflictView, Customer, FieldDiff, HeldItem, HeldKind, JsonValue, Order, RejectionChoice, RejectionView, Sku, Uuid } from './backend';

export const DEMO_PASSWORD = 'holdfast-demo';
export const LONG_CUSTOMER = 'Brightwater & Sons Mercantile Company of Greater Northern Ontario';

let fallbackCounter = 0;
export function uuid(): Uuid {
  const c = (globalThis as { crypto?: Crypto }).crypto;
  if (c && typeof c.randomUUID === 'function') return c.randomUUID();
  fallbackCounter += 1;
  const hex = (fallbackCounter + Date.now()).toString(16).padStart(12, '0').slice(-12);
  return `00000000-0000-4000-8000-${hex}`;
}

export const clone = <T>(v: T): T => (v === undefined ? v : (JSON.parse(JSON.stringify(v)) as T));

export function demoCustomers(): Customer[] {
  const customers: [string, number | null][] = [
    ['Austin Boutique', 500_000],
    ['Tokyo Distributor', null],
    [LONG_CUSTOMER, 2_500_000],
    ['Harbour & Pine', 1_000_000],
    ['Little Fern Kids', 250_000],
    ['Northwind Outfitters', null],
  ];
  return customers.map(([name, credit_limit]) => ({ id: uuid(), name, credit_limit, price_list_id: null, email: null, phone: null, active: true }));
}

/** Four styles in their colours and size runs, every SKU with stock. */
export function demoSkus(): Sku[] {
  const styles: [string, string[], string[], number][] = [
    ['Kestrel Overshirt', ['Washed Indigo', 'Olive'], ['XS', 'S', 'M', 'L', 'XL', 'XXL'], 4_800],
    ['Heron Chino', ['Stone', 'Navy'], ['28', '30', '32', '34', '36'], 3_900],
    ['Wren Tee', ['White', 'Black', 'Heather Grey'], ['XS', 'S', 'M', 'L', 'XL'], 1_400],
    ['Plover Rain Shell', ['Signal Orange'], ['S', 'M', 'L', 'XL'], 9_600],
  ];
  const out: Sku[] = [];
  let n = 0;
  for (const [style, colors, sizes, price] of styles) {
    for (const color of colors) {
      for (const size of sizes) {
        n += 1;
        // The API.md demo fact: Kestrel Overshirt / Washed Indigo / M has 6 on hand.
        const onHand = style === 'Kestrel Overshirt' && color === 'Washed Indigo' && size === 'M' ? 6 : 10 + ((n * 7) % 40);
        const initials = (t: string) => t.split(/\s+/).map((w) => w[0].toUpperCase()).join('');
        out.push({
          id: uuid(),
          code: `${initials(style)}-${initials(color)}-${size}`,
          active: true,
          style,
          color,
          size,
          wholesale_price: price,
          msrp: price * 2 + 500,
          on_hand: onHand,
          on_order: 0,
          allocated: 0,
          ats: onHand,
        });
      }
    }
  }
  return out;
}

/** One field of a conflict, with the engine's verdict spelled out. */
export function fieldDiff(
  field: string,
  values: { base: JsonValue; mine: JsonValue; theirs: JsonValue },
  verdict: { mine_changed: boolean; theirs_changed: boolean; collides: boolean },
): FieldDiff {
  return {
    field,
    base: values.base,
    mine: values.mine,
    theirs: values.theirs,
    ...verdict,
    quantity: field.startsWith('line:'),
  };
}

/** A conflict as the engine reports it: three documents and the fields that differ. */
export function conflictFixture(args: {
  base: Order;
  mine: Order;
  theirs: Order;
  fields: FieldDiff[];
  /** The user's acts held by it. */
  held: number;
}): ConflictView {
  return {
    order_id: args.theirs.id,
    changed_by: args.theirs.updated_by_name,
    changed_at: args.theirs.updated_at,
    your_base_version: args.base.version,
    current_version: args.theirs.version,
    fields: args.fields,
    can_rebase: args.fields.every((f) => !f.collides),
    held: args.held,
    base: clone(args.base),
    mine: clone(args.mine),
    theirs: clone(args.theirs),
  };
}

/** What the engine says about a refused act: the problem and the choices it offers. */
export interface RejectionFixture {
  http_status: number;
  code: RejectionView['code'];
  detail: string | null;
  facts: Record<string, JsonValue>;
  choices: RejectionChoice[];
}

/** The server's `insufficient_ats` answer to an allocation (of more than `atsNow`), with the engine's choices. */
export function insufficientAts(args: { skuId: Uuid; requested: number; atsNow: number }): RejectionFixture {
  return {
    http_status: 422,
    code: 'insufficient_ats',
    detail: `only ${args.atsNow} available to sell`,
    facts: { ats_available: args.atsNow, requested: args.requested, ats_now: args.atsNow, sku_id: args.skuId },
    choices: [{ choice: 'reduce_to_ats', qty: args.atsNow }, { choice: 'remove_line' }, { choice: 'try_again' }, { choice: 'dismiss' }],
  };
}

/** The engine's words for why it keeps something it cannot read (client/src/engine/held.rs). */
export const HELD_WHY = {
  /** A newer version of a record the desk showed before. */
  newerDocument:
    'The server has a newer version than this version of Holdfast can show. Update Holdfast to see it; until then you see it as it was.',
  /** A record the desk never could show. */
  unknownDocument: 'The server sent it in a form this version of Holdfast cannot show. It is kept: update Holdfast to see it.',
  /** One of the user's changes, made with a newer app. */
  newerAct:
    'Made with a newer version of Holdfast, which this one cannot read. It is kept, and goes to the server once Holdfast is updated; later changes to this order wait behind it.',
  /** One of the user's changes, damaged. */
  damagedAct:
    'It is damaged and cannot be sent. It is kept: save a copy for your administrator. Later changes to this order wait behind it.',
} as const;

/**
 * Something the engine keeps without being able to read it, as `held()`
 * lists it. `what` is the engine's description ("Order for Austin
 * Boutique, PO AB-7", "A change to order for …"); `why` defaults to the
 * engine's words for the kind.
 */
export function heldFixture(args: { kind: HeldKind; what: string; why?: string; orderId?: Uuid | null; since: string | number }): HeldItem {
  return {
    kind: args.kind,
    what: args.what,
    why: args.why ?? (args.kind === 'document' ? HELD_WHY.newerDocument : HELD_WHY.newerAct),
    order_id: args.orderId ?? null,
    since: new Date(args.since).toISOString(),
  };
}
