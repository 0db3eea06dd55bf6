import { describe, expect, test } from 'vitest';
import type { FieldDiff, Order } from '../src/lib/backend';
import {
  classifyField,
  diffOrders,
  fieldKind,
  fromEngine,
  jsonEqual,
  planConflict,
  resolutionFor,
} from '../src/lib/conflict';

const LINE = '0190a000-0000-7000-8000-000000000007';

function order(patch: Partial<Order> = {}): Order {
  return {
    id: '0190a000-0000-7000-8000-000000000001',
    customer_id: '0190a000-0000-7000-8000-0000000000c1',
    customer_po: 'PO-1',
    ship_window_start: null,
    ship_window_end: null,
    notes: null,
    status: 'draft',
    version: 1,
    invoice_id: null,
    lines: [{ id: LINE, sku_id: '0190a000-0000-7000-8000-0000000000s9', qty_ordered: 5, qty_allocated: 0, unit_price: 1_000 }],
    total: 5_000,
    updated_at: '2026-12-01T10:00:00Z',
    updated_by: '0190a000-0000-7000-8000-0000000000u1',
    updated_by_name: 'Priya',
    created_at: '2026-12-01T09:00:00Z',
    ...patch,
  };
}

const withLine = (o: Order, qty: number, allocated = 0): Order => ({
  ...o,
  lines: [{ ...o.lines[0], qty_ordered: qty, qty_allocated: allocated }],
});

describe('field kinds', () => {
  test('lines and quantity-named fields are quantities; prices and amounts are money', () => {
    expect(fieldKind(`line:${LINE}`)).toBe('quantity');
    expect(fieldKind('qty_ordered')).toBe('quantity');
    expect(fieldKind('wholesale_price')).toBe('money');
    expect(fieldKind('credit_limit')).toBe('money');
    expect(fieldKind('amount')).toBe('money');
    expect(fieldKind('notes')).toBe('text');
    expect(fieldKind('customer_po')).toBe('text');
    expect(fieldKind('ship_window_end')).toBe('date');
    expect(fieldKind('status')).toBe('status');
  });
});

describe('classifying one field', () => {
  test('changed on one side only: that side, no choice', () => {
    expect(classifyField({ field: 'notes', base: null, mine: 'rush', theirs: null })).toMatchObject({
      outcome: 'mine',
      requiresChoice: false,
    });
    expect(classifyField({ field: 'notes', base: null, mine: null, theirs: 'hold' })).toMatchObject({
      outcome: 'theirs',
      requiresChoice: false,
    });
  });

  test('the same text on both sides needs no choice', () => {
    expect(classifyField({ field: 'notes', base: null, mine: 'rush', theirs: 'rush' })).toMatchObject({
      outcome: 'same',
      requiresChoice: false,
    });
  });

  test('different text on both sides needs a choice', () => {
    expect(classifyField({ field: 'notes', base: null, mine: 'rush', theirs: 'hold' })).toMatchObject({
      outcome: 'choose',
      requiresChoice: true,
    });
  });

  test('a quantity both sides set to the same number still needs a choice', () => {
    const v = { sku_id: 's', qty_ordered: 8, qty_allocated: 0 };
    const base = { sku_id: 's', qty_ordered: 5, qty_allocated: 0 };
    expect(classifyField({ field: `line:${LINE}`, base, mine: v, theirs: { ...v } })).toMatchObject({
      kind: 'quantity',
      outcome: 'choose',
      requiresChoice: true,
    });
  });

  test('money both sides set to the same amount still needs a choice', () => {
    expect(classifyField({ field: 'wholesale_price', base: 4800, mine: 4500, theirs: 4500 })).toMatchObject({
      kind: 'money',
      requiresChoice: true,
    });
  });

  test('a quantity changed on one side only is that side’s (no competing value)', () => {
    const base = { sku_id: 's', qty_ordered: 5, qty_allocated: 0 };
    expect(
      classifyField({ field: `line:${LINE}`, base, mine: base, theirs: { ...base, qty_ordered: 7 } }),
    ).toMatchObject({ outcome: 'theirs', requiresChoice: false });
  });

  test('the engine’s flags win over value comparison, and its `collides` can only add a choice', () => {
    // Touched by my acts even though the value ended where it started.
    expect(
      classifyField({ field: 'notes', base: 'a', mine: 'a', theirs: 'b', mine_changed: true, theirs_changed: true }),
    ).toMatchObject({ requiresChoice: true });
    expect(
      classifyField({ field: 'notes', base: 'a', mine: 'x', theirs: 'x', mine_changed: true, theirs_changed: true, collides: true }),
    ).toMatchObject({ requiresChoice: true });
    // The engine says quantity for a field whose name does not.
    expect(
      classifyField({ field: 'custom', base: 1, mine: 2, theirs: 2, mine_changed: true, theirs_changed: true, quantity: true }),
    ).toMatchObject({ kind: 'quantity', requiresChoice: true });
  });
});

describe('planning a whole conflict', () => {
  test('disjoint fields: one-click rebase', () => {
    const base = order();
    const mine = order({ notes: 'rush' });
    const theirs = order({ customer_po: 'PO-2', version: 2 });
    const plan = planConflict(diffOrders(base, mine, theirs));
    expect(plan.fields.map((f) => [f.field, f.outcome])).toEqual([
      ['customer_po', 'theirs'],
      ['notes', 'mine'],
    ]);
    expect(plan.colliding).toEqual([]);
    expect(plan.canRebase).toBe(true);
    expect(resolutionFor(plan, {})).toEqual({ ok: true, resolution: 'rebase' });
  });

  test('the same field: no rebase; every colliding field must be chosen', () => {
    const base = withLine(order(), 5);
    const mine = withLine(order({ notes: 'rush' }), 8);
    const theirs = withLine(order({ notes: 'hold', customer_po: 'PO-2', version: 3 }), 8);
    const plan = planConflict(diffOrders(base, mine, theirs));
    expect(plan.canRebase).toBe(false);
    expect(plan.colliding).toEqual(['notes', `line:${LINE}`]);
    expect(resolutionFor(plan, {})).toEqual({ ok: false, missing: ['notes', `line:${LINE}`] });
    expect(resolutionFor(plan, { notes: 'theirs' })).toEqual({ ok: false, missing: [`line:${LINE}`] });
    expect(resolutionFor(plan, { notes: 'theirs', [`line:${LINE}`]: 'mine' })).toEqual({
      ok: true,
      resolution: { choose: { notes: 'theirs', [`line:${LINE}`]: 'mine' } },
    });
  });

  test('a line removed by them and changed by me collides; added lines are their own fields', () => {
    const base = withLine(order(), 5);
    const mine = withLine(order(), 6);
    const theirs = order({ lines: [], version: 2 });
    const added = { id: 'new-line', sku_id: 's2', qty_ordered: 3, qty_allocated: 0, unit_price: 1_000 };
    const mineWithAdd = { ...mine, lines: [...mine.lines, added] };
    const plan = planConflict(diffOrders(base, mineWithAdd, theirs));
    expect(plan.fields.find((f) => f.field === `line:${LINE}`)).toMatchObject({ outcome: 'choose', theirs: null });
    expect(plan.fields.find((f) => f.field === 'line:new-line')).toMatchObject({ outcome: 'mine', base: null });
  });

  test('mineTouched (the engine’s pending fields) decides what is mine', () => {
    const base = order();
    const theirs = order({ notes: 'hold', version: 2 });
    // I set notes to what base had: by value nothing changed, but I did act on it.
    const plan = planConflict(diffOrders(base, order(), theirs, ['notes']));
    expect(plan.colliding).toEqual(['notes']);
  });

  test('unchanged fields are left out', () => {
    const plan = planConflict(diffOrders(order(), order(), order({ version: 2 })));
    expect(plan.fields).toEqual([]);
  });

  test('the engine can veto a rebase, never allow one the UI refuses', () => {
    const diffs: FieldDiff[] = [
      { field: 'notes', base: null, mine: 'a', theirs: null, mine_changed: true, theirs_changed: false, collides: false, quantity: false },
    ];
    expect(planConflict(fromEngine(diffs), false).canRebase).toBe(false);
    const q: FieldDiff[] = [
      {
        field: `line:${LINE}`,
        base: { qty_ordered: 5 },
        mine: { qty_ordered: 8 },
        theirs: { qty_ordered: 8 },
        mine_changed: true,
        theirs_changed: true,
        collides: false, // even if an engine said so, a quantity both touched is a choice
        quantity: true,
      },
    ];
    expect(planConflict(fromEngine(q), true).canRebase).toBe(false);
  });

  test('jsonEqual ignores key order and treats undefined as null', () => {
    expect(jsonEqual({ a: 1, b: [1, { c: 2 }] }, { b: [1, { c: 2 }], a: 1 })).toBe(true);
    expect(jsonEqual(undefined, null)).toBe(true);
    expect(jsonEqual({ a: 1 }, { a: 2 })).toBe(false);
    expect(jsonEqual([1], { 0: 1 })).toBe(false);
  });
});
