/**
 * The conflict view's field logic, as pure functions: given base (what the
 * user was looking at), mine (the user's pending edits on top) and theirs
 * (the server's current document), which fields changed on one side only
 * (kept as they are: a rebase re-issues mine on top of theirs), which agree,
 * and which need a person to choose.
 *
 * The rule, shared with the engine (client/src/conflict.rs):
 * - changed on one side only → that side's value, no question asked;
 * - changed on both sides to the same text → nothing to choose;
 * - changed on both sides differently → choose;
 * - quantities and money changed on both sides → ALWAYS choose, even when
 *   the numbers agree: a quantity or an amount is never picked by a program.
 * The engine's own verdict (`collides`) is honoured too: the UI may ask for
 * more choices than the engine, never fewer.
 */
import type { Choice, FieldDiff, Order, Resolution } from './backend';

export type FieldKind = 'quantity' | 'money' | 'date' | 'reference' | 'status' | 'text';

/** The header fields in the engine's order, then status; lines follow. */
export const HEADER_FIELDS = [
  'customer_id',
  'customer_po',
  'ship_window_start',
  'ship_window_end',
  'notes',
] as const;

const QUANTITY = /(^|_)(qty|quantity|quantities|units)(_|$)/;
const MONEY = /(^|_)(price|amount|total|credit|credit_limit|msrp|cost|money|cents)(_|$)/;

/** What kind of value a field holds (a `line:<id>` is its quantities). */
export function fieldKind(field: string): FieldKind {
  if (field.startsWith('line:')) return 'quantity';
  if (QUANTITY.test(field)) return 'quantity';
  if (MONEY.test(field)) return 'money';
  if (field === 'status') return 'status';
  if (field.startsWith('ship_window')) return 'date';
  if (field.endsWith('_id')) return 'reference';
  return 'text';
}

/** Quantities and money are only ever chosen by a person. */
export function isHumanOnly(kind: FieldKind): boolean {
  return kind === 'quantity' || kind === 'money';
}

/** JSON equality, blind to key order (values come from serde). */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a === undefined) a = null;
  if (b === undefined) b = null;
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return a === b;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a) && Array.isArray(b)) {
    return a.length === b.length && a.every((v, i) => jsonEqual(v, b[i]));
  }
  const ao = a as Record<string, unknown>;
  const bo = b as Record<string, unknown>;
  const keys = new Set([...Object.keys(ao), ...Object.keys(bo)]);
  for (const k of keys) if (!jsonEqual(ao[k], bo[k])) return false;
  return true;
}

/** One field as the diff sees it. The flags default to value comparison. */
export interface FieldInput {
  field: string;
  base: unknown;
  mine: unknown;
  theirs: unknown;
  /** The user's acts touched it (the engine knows even when the value ends up equal). */
  mine_changed?: boolean;
  theirs_changed?: boolean;
  /** The engine's verdict, when the input came from it. */
  collides?: boolean;
  /** The engine says it is a quantity. */
  quantity?: boolean;
}

/**
 * - `mine`: only I changed it; my change is re-applied on theirs.
 * - `theirs`: only they changed it; theirs stays.
 * - `same`: both changed it to the same (non-quantity, non-money) value.
 * - `choose`: a person must pick mine or theirs.
 */
export type Outcome = 'mine' | 'theirs' | 'same' | 'choose';

export interface ClassifiedField {
  field: string;
  kind: FieldKind;
  base: unknown;
  mine: unknown;
  theirs: unknown;
  mineChanged: boolean;
  theirsChanged: boolean;
  outcome: Outcome;
  requiresChoice: boolean;
}

export function classifyField(f: FieldInput): ClassifiedField {
  const kind: FieldKind = f.quantity ? 'quantity' : fieldKind(f.field);
  const mineChanged = f.mine_changed ?? !jsonEqual(f.mine, f.base);
  const theirsChanged = f.theirs_changed ?? !jsonEqual(f.theirs, f.base);
  const both = mineChanged && theirsChanged;
  const requiresChoice =
    f.collides === true || (both && (isHumanOnly(kind) || !jsonEqual(f.mine, f.theirs)));
  let outcome: Outcome;
  if (requiresChoice) outcome = 'choose';
  else if (both) outcome = 'same';
  else if (mineChanged) outcome = 'mine';
  else if (theirsChanged) outcome = 'theirs';
  else outcome = 'same';
  return {
    field: f.field,
    kind,
    base: f.base,
    mine: f.mine,
    theirs: f.theirs,
    mineChanged,
    theirsChanged,
    outcome,
    requiresChoice,
  };
}

export interface ConflictPlan {
  /** Every field either side changed, header first, then status, then lines. */
  fields: ClassifiedField[];
  /** The fields a person must choose for. */
  colliding: string[];
  /** Nothing needs a choice: one click re-applies mine on theirs. */
  canRebase: boolean;
}

/** Classifies the fields; `engineCanRebase` (ConflictView.can_rebase) can only veto. */
export function planConflict(inputs: FieldInput[], engineCanRebase = true): ConflictPlan {
  const fields = inputs
    .map(classifyField)
    .filter((f) => f.mineChanged || f.theirsChanged || f.requiresChoice);
  const colliding = fields.filter((f) => f.requiresChoice).map((f) => f.field);
  return { fields, colliding, canRebase: colliding.length === 0 && engineCanRebase };
}

/** The engine's rows, as inputs. */
export function fromEngine(diffs: FieldDiff[]): FieldInput[] {
  return diffs.map((d) => ({ ...d }));
}

/** A field's value in an order (a line: its SKU and quantities, or null when absent). */
export function fieldValue(o: Order, field: string): unknown {
  if (field.startsWith('line:')) {
    const id = field.slice(5);
    const l = o.lines.find((x) => x.id === id);
    return l ? { sku_id: l.sku_id, qty_ordered: l.qty_ordered, qty_allocated: l.qty_allocated } : null;
  }
  return (o as unknown as Record<string, unknown>)[field] ?? null;
}

/**
 * Builds the field rows from three documents. `mineTouched` lists the fields
 * the user's acts touched (the engine's `pending_fields`); without it, "mine
 * changed" means "differs from base".
 */
export function diffOrders(base: Order, mine: Order, theirs: Order, mineTouched?: string[]): FieldInput[] {
  const names: string[] = [...HEADER_FIELDS, 'status'];
  const lineIds = new Set<string>();
  for (const o of [base, mine, theirs]) for (const l of o.lines) lineIds.add(l.id);
  for (const t of mineTouched ?? []) if (t.startsWith('line:')) lineIds.add(t.slice(5));
  names.push(...[...lineIds].sort().map((id) => `line:${id}`));
  const out: FieldInput[] = [];
  for (const field of names) {
    const b = fieldValue(base, field);
    const m = fieldValue(mine, field);
    const t = fieldValue(theirs, field);
    const mine_changed = mineTouched ? mineTouched.includes(field) : !jsonEqual(m, b);
    const theirs_changed = !jsonEqual(t, b);
    if (!mine_changed && !theirs_changed) continue;
    out.push({ field, base: b, mine: m, theirs: t, mine_changed, theirs_changed });
  }
  return out;
}

export type ResolutionResult =
  | { ok: true; resolution: Resolution }
  | { ok: false; missing: string[] };

/**
 * What to send: `rebase` when nothing needs a choice, else `{choose}` naming
 * every colliding field. Refuses while any colliding field has no choice.
 */
export function resolutionFor(plan: ConflictPlan, choices: Record<string, Choice | undefined>): ResolutionResult {
  const missing = plan.colliding.filter((f) => choices[f] !== 'mine' && choices[f] !== 'theirs');
  if (missing.length > 0) return { ok: false, missing };
  if (plan.colliding.length === 0) {
    return plan.canRebase ? { ok: true, resolution: 'rebase' } : { ok: false, missing: [] };
  }
  const choose: Record<string, Choice> = {};
  for (const f of plan.colliding) choose[f] = choices[f] as Choice;
  return { ok: true, resolution: { choose } };
}
