/**
 * Pending and refused acts in a wholesale account manager's words.
 *
 * The engine hands each pending act over as its `kind` and a one-line
 * `description` (protocol `Mutation::describe()`), which names lines, SKUs
 * and customers by the first 8 characters of their ids
 * ("allocate 6 on line 01a23366"). The UI reads the act back out of that
 * line (the formats are listed in {@link parseAct}) and names things with
 * what it already has: the order's lines, the SKUs, the customers.
 * Ids never reach the screen; when something cannot be named it is left
 * out ("Remove a line").
 */
import type { Customer, Line, Sku } from './backend';
import { skuLabel } from './format';

type SkuLike = Pick<Sku, 'id' | 'style' | 'color' | 'size' | 'code'>;

/** A SKU as people name it: style · colour · size, and its code when it has one. */
export function skuName(s: Pick<Sku, 'style' | 'color' | 'size' | 'code'> | null | undefined): string {
  if (!s) return 'an unknown SKU';
  return s.code ? `${skuLabel(s)} (${s.code})` : skuLabel(s);
}

/** The header fields an edit names, as the engine spells them. */
export type HeaderField = 'customer_id' | 'customer_po' | 'ship_window_start' | 'ship_window_end' | 'notes';

/** What a pending act does, read from its kind and description. */
export type ParsedAct =
  | { kind: 'create_order'; customer: string | null; po: string | null }
  | { kind: 'edit_order'; set: [HeaderField, string | null][] }
  | { kind: 'add_line'; line: string | null; sku: string | null; qty: number | null }
  | { kind: 'change_line'; line: string | null; qty: number | null }
  | { kind: 'remove_line'; line: string | null }
  | { kind: 'allocate' | 'release'; line: string | null; qty: number | null }
  | { kind: 'confirm' | 'cancel' }
  | { kind: 'other' };

const ID = '([0-9a-f][0-9a-f-]{7,35})';
const FIELDS: HeaderField[] = ['customer_id', 'customer_po', 'ship_window_start', 'ship_window_end', 'notes'];

/**
 * Reads an act back out of the engine's description. The formats
 * (protocol/src/mutation.rs, `Mutation::describe`):
 *
 * | kind           | description                                   |
 * | -------------- | --------------------------------------------- |
 * | `create_order` | `new order for customer C[, PO p]`            |
 * | `edit_order`   | `edit field = value, field = value` (`(none)` clears) |
 * | `add_line`     | `add line L of SKU S × n`                     |
 * | `change_line`  | `set line L quantity to n`                    |
 * | `remove_line`  | `remove line L`                               |
 * | `allocate`     | `allocate n on line L`                        |
 * | `release`      | `release n on line L`                         |
 * | `confirm`, `cancel` | the kind                                 |
 *
 * where C, L and S are id prefixes. Whatever does not match keeps its kind
 * with the parts it could not read left null.
 */
export function parseAct(kind: string, description: string): ParsedAct {
  const d = description.trim();
  const num = (s: string | undefined) => (s === undefined ? null : Number(s));
  let m: RegExpExecArray | null;
  switch (kind) {
    case 'create_order':
      m = new RegExp(`^new order(?: for customer ${ID})?(?:, PO (.*))?$`, 's').exec(d);
      return { kind, customer: m?.[1] ?? null, po: m?.[2] ?? null };
    case 'edit_order':
      return { kind, set: parseEdit(d) };
    case 'add_line':
      m = new RegExp(`^add line ${ID} of SKU ${ID} × (\\d+)$`).exec(d);
      return { kind, line: m?.[1] ?? null, sku: m?.[2] ?? null, qty: num(m?.[3] ?? /× (\d+)$/.exec(d)?.[1]) };
    case 'change_line':
      m = new RegExp(`^set line ${ID} quantity to (\\d+)$`).exec(d);
      return { kind, line: m?.[1] ?? null, qty: num(m?.[2]) };
    case 'remove_line':
      m = new RegExp(`^remove line ${ID}$`).exec(d);
      return { kind, line: m?.[1] ?? null };
    case 'allocate':
    case 'release':
      m = new RegExp(`^(?:allocate|release) (\\d+) on line ${ID}$`).exec(d);
      return { kind, line: m?.[2] ?? null, qty: num(m?.[1]) };
    case 'confirm':
    case 'cancel':
      return { kind };
    default:
      return { kind: 'other' };
  }
}

/** `edit customer_po = A, notes = b, c`: the fields in the engine's order (a value may hold ", "). */
function parseEdit(d: string): [HeaderField, string | null][] {
  const body = d.replace(/^edit\s*/, '');
  const at = new RegExp(`(?:^|, )(${FIELDS.join('|')}) = `, 'g');
  const starts: { field: HeaderField; from: number; to: number }[] = [];
  for (let m = at.exec(body); m; m = at.exec(body)) starts.push({ field: m[1] as HeaderField, from: m.index, to: at.lastIndex });
  return starts.map((s, i) => {
    const raw = body.slice(s.to, i + 1 < starts.length ? starts[i + 1].from : body.length);
    return [s.field, raw === '(none)' ? null : raw];
  });
}

/** What the UI knows to name an act's things with. */
export interface ActWorld {
  /** The lines of the act's order (the desk's view), and any seen before they were removed. */
  lines?: Iterable<Pick<Line, 'id' | 'sku_id'>>;
  skus?: Iterable<SkuLike>;
  customers?: Iterable<Pick<Customer, 'id' | 'name'>>;
}

// Lines this desk has shown, so a pending removal can still name its SKU.
const seenLines = new Map<string, string>();

/** Remembers which SKU each line is (the editor and the pending list call it on every load). */
export function rememberLines(lines: Iterable<Pick<Line, 'id' | 'sku_id'>>): void {
  for (const l of lines) seenLines.set(l.id, l.sku_id);
}

const byPrefix = <T extends { id: string }>(items: Iterable<T> | undefined, prefix: string | null): T | null => {
  if (!prefix || !items) return null;
  for (const x of items) if (x.id.startsWith(prefix)) return x;
  return null;
};

/** The SKU id of the line an act names (by its id prefix), if this desk knows the line. */
export function lineSkuId(prefix: string | null, world: ActWorld): string | null {
  if (!prefix) return null;
  const l = byPrefix(world.lines, prefix);
  if (l) return l.sku_id;
  for (const [id, skuId] of seenLines) if (id.startsWith(prefix)) return skuId;
  return null;
}

/** The SKU ids a list of acts needs named (to fetch them). */
export function skuIdsOf(acts: { kind: string; description: string }[], world: ActWorld): string[] {
  const out = new Set<string>();
  for (const a of acts) {
    const p = parseAct(a.kind, a.description);
    if ('line' in p) {
      const id = lineSkuId(p.line, world);
      if (id) out.add(id);
    }
  }
  return [...out];
}

const FIELD_WORDS: Record<HeaderField, string> = {
  customer_id: 'Customer',
  customer_po: 'PO',
  ship_window_start: 'Ship from',
  ship_window_end: 'Ship by',
  notes: 'Notes',
};

const clip = (s: string, n = 60) => (s.length > n ? `${s.slice(0, n - 1).trimEnd()}…` : s);

/** Generic words for an act whose description cannot be read. */
const KIND_WORDS: Record<string, string> = {
  create_order: 'New order',
  edit_order: 'Order header changed',
  add_line: 'Line added',
  change_line: 'Quantity changed',
  remove_line: 'Remove a line',
  allocate: 'Allocate',
  release: 'Release',
  confirm: 'Confirm the order',
  cancel: 'Cancel the order',
};

/**
 * One pending or refused act in words: "Allocate 6 of Kestrel Overshirt ·
 * Washed Indigo · M (KO-WI-M)", "PO set to HP-78", "Confirm the order".
 * Names what it can; never shows an id.
 */
export function describeAct(kind: string, description: string, world: ActWorld = {}): string {
  const p = parseAct(kind, description);
  const skus = world.skus ? [...world.skus] : [];
  const skuOfLine = (line: string | null) => {
    const id = lineSkuId(line, world);
    return id ? (skus.find((s) => s.id === id) ?? null) : null;
  };
  const of = (s: SkuLike | null) => (s ? ` of ${skuName(s)}` : '');
  switch (p.kind) {
    case 'create_order':
      return `New order${p.po ? `, PO ${p.po}` : ''}`;
    case 'edit_order': {
      if (p.set.length === 0) return KIND_WORDS.edit_order;
      return p.set
        .map(([f, v]) => {
          if (f === 'customer_id') {
            const c = v ? [...(world.customers ?? [])].find((x) => x.id === v || x.id.startsWith(v)) : null;
            return c ? `Customer changed to ${c.name}` : 'Customer changed';
          }
          if (v === null) return `${FIELD_WORDS[f]} cleared`;
          return f === 'notes' ? `Notes set to “${clip(v)}”` : `${FIELD_WORDS[f]} set to ${clip(v)}`;
        })
        .join('; ');
    }
    case 'add_line': {
      const s = skuOfLine(p.line) ?? byPrefix(skus, p.sku);
      if (p.qty === null) return s ? `Add ${skuName(s)}` : KIND_WORDS.add_line;
      return s ? `Add ${p.qty} × ${skuName(s)}` : `Add a line of ${p.qty}`;
    }
    case 'change_line': {
      const s = skuOfLine(p.line);
      if (p.qty === null) return s ? `Quantity of ${skuName(s)} changed` : KIND_WORDS.change_line;
      return s ? `Quantity of ${skuName(s)} set to ${p.qty}` : `Quantity set to ${p.qty}`;
    }
    case 'remove_line': {
      const s = skuOfLine(p.line);
      return s ? `Remove ${skuName(s)}` : KIND_WORDS.remove_line;
    }
    case 'allocate':
    case 'release': {
      const verb = p.kind === 'allocate' ? 'Allocate' : 'Release';
      const s = skuOfLine(p.line);
      return p.qty === null ? `${verb}${of(s)}` : `${verb} ${p.qty}${of(s)}`;
    }
    case 'confirm':
    case 'cancel':
      return KIND_WORDS[p.kind];
    default:
      return KIND_WORDS[kind] ?? 'A change to the order';
  }
}
