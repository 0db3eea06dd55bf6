/**
 * Every keyboard shortcut, in one list: the handlers match against it and the
 * help overlay (`?`) renders it, so the help cannot drift from what works.
 */

export type Area =
  | 'Anywhere'
  | 'Order desk'
  | 'Order editor'
  | 'Customer picker'
  | 'SKU search'
  | 'Size-run grid'
  | 'Lines'
  | 'Conflict view'
  | 'Pending list';

export interface Shortcut {
  id: string;
  area: Area;
  /** Key specs: `Alt+A`, `Ctrl+Enter`, `?`, `j`, `ArrowDown`, `Escape`, `F1`. */
  keys: string[];
  does: string;
}

export const SHORTCUTS: Shortcut[] = [
  { id: 'help', area: 'Anywhere', keys: ['?', 'F1'], does: 'Show or hide this help (? only outside a text field)' },
  { id: 'close', area: 'Anywhere', keys: ['Escape'], does: 'Close a dialog or list; from a screen, go back' },
  { id: 'go.desk', area: 'Anywhere', keys: ['Alt+D'], does: 'Go to the order desk' },
  { id: 'go.new', area: 'Anywhere', keys: ['Alt+N'], does: 'New order' },
  { id: 'sync', area: 'Anywhere', keys: ['Alt+S'], does: 'Sync now' },
  { id: 'go.rejections', area: 'Anywhere', keys: ['Alt+R'], does: 'Rejected allocations and other refused changes' },
  { id: 'go.pending', area: 'Anywhere', keys: ['Alt+P'], does: 'Printable list of changes not yet on the server' },

  { id: 'desk.down', area: 'Order desk', keys: ['ArrowDown', 'j'], does: 'Next order' },
  { id: 'desk.up', area: 'Order desk', keys: ['ArrowUp', 'k'], does: 'Previous order' },
  { id: 'desk.first', area: 'Order desk', keys: ['Home'], does: 'First order' },
  { id: 'desk.last', area: 'Order desk', keys: ['End'], does: 'Last order' },
  { id: 'desk.open', area: 'Order desk', keys: ['Enter'], does: 'Open the order (an order in conflict opens the conflict view)' },
  { id: 'desk.new', area: 'Order desk', keys: ['n'], does: 'New order' },
  { id: 'desk.search', area: 'Order desk', keys: ['/'], does: 'Search customer, PO or notes' },
  { id: 'desk.all', area: 'Order desk', keys: ['1'], does: 'Show all orders' },
  { id: 'desk.pending', area: 'Order desk', keys: ['2'], does: 'Show orders with pending changes' },
  { id: 'desk.conflict', area: 'Order desk', keys: ['3'], does: 'Show orders in conflict' },
  { id: 'desk.rejected', area: 'Order desk', keys: ['4'], does: 'Show orders with a rejected change' },

  { id: 'editor.customer', area: 'Order editor', keys: ['Alt+C'], does: 'Go to the customer' },
  { id: 'editor.find', area: 'Order editor', keys: ['Alt+F'], does: 'Find a SKU (style, colour, size)' },
  { id: 'editor.lines', area: 'Order editor', keys: ['Alt+L'], does: 'Go to the lines' },
  { id: 'editor.save', area: 'Order editor', keys: ['Ctrl+Enter'], does: 'Save the order header (creates a new order)' },
  { id: 'editor.allocate', area: 'Order editor', keys: ['Alt+A'], does: 'Allocate every line’s open quantity' },
  { id: 'editor.confirm', area: 'Order editor', keys: ['Alt+O'], does: 'Confirm the order' },
  { id: 'editor.cancel', area: 'Order editor', keys: ['Alt+X'], does: 'Cancel the order (asks first)' },
  { id: 'editor.conflict', area: 'Order editor', keys: ['Alt+V'], does: 'Resolve this order’s conflict' },
  { id: 'editor.document', area: 'Order editor', keys: ['Alt+K'], does: 'The order confirmation, to print or save as PDF' },
  { id: 'editor.reorder', area: 'Order editor', keys: ['Alt+E'], does: 'Reorder: copy this order into a new draft' },
  { id: 'editor.history', area: 'Order editor', keys: ['Alt+H'], does: 'Show or hide the order’s history' },
  { id: 'editor.back', area: 'Order editor', keys: ['Escape'], does: 'Back to the desk (a new order with a customer is kept)' },

  { id: 'picker.move', area: 'Customer picker', keys: ['ArrowDown', 'ArrowUp'], does: 'Move through matching customers' },
  { id: 'picker.pick', area: 'Customer picker', keys: ['Enter', 'Tab'], does: 'Take the highlighted customer (Tab also moves on)' },

  { id: 'sku.move', area: 'SKU search', keys: ['ArrowDown', 'ArrowUp'], does: 'Move through style + colour matches' },
  { id: 'sku.open', area: 'SKU search', keys: ['Enter'], does: 'Open the size-run grid for the highlighted style + colour' },

  { id: 'grid.next', area: 'Size-run grid', keys: ['Tab', 'Shift+Tab'], does: 'Next / previous size' },
  { id: 'grid.add', area: 'Size-run grid', keys: ['Enter'], does: 'Add a line for every size with a quantity' },
  { id: 'grid.cancel', area: 'Size-run grid', keys: ['Escape'], does: 'Close the grid without adding' },

  { id: 'line.save', area: 'Lines', keys: ['Enter'], does: 'In a quantity: save the new quantity' },
  { id: 'line.allocate', area: 'Lines', keys: ['Alt+Shift+A'], does: 'In a quantity: allocate this line’s open quantity' },
  { id: 'line.remove', area: 'Lines', keys: ['Alt+Delete'], does: 'In a quantity: remove this line' },
  { id: 'line.units.allocate', area: 'Lines', keys: ['Enter'], does: 'In a line’s units: allocate that many (empty: the open quantity)' },
  { id: 'line.units.release', area: 'Lines', keys: ['Shift+Enter'], does: 'In a line’s units: release that many (empty: all it holds)' },

  { id: 'conflict.rebase', area: 'Conflict view', keys: ['Alt+B'], does: 'Rebase & save (only when no field needs a choice)' },
  { id: 'conflict.mine', area: 'Conflict view', keys: ['m'], does: 'On a field’s choice: take yours' },
  { id: 'conflict.theirs', area: 'Conflict view', keys: ['t'], does: 'On a field’s choice: take theirs' },
  { id: 'conflict.save', area: 'Conflict view', keys: ['Ctrl+Enter'], does: 'Save your choices (every colliding field needs one)' },

  { id: 'pending.print', area: 'Pending list', keys: ['Ctrl+P'], does: 'Print the list' },
];

const byId = new Map(SHORTCUTS.map((s) => [s.id, s]));

/** Whether the key event matches one spec (`Alt+A`, `?`, `ArrowDown`…). */
export function matchesSpec(e: KeyboardEvent, spec: string): boolean {
  const parts = spec === '+' ? ['+'] : spec.split('+');
  const key = parts[parts.length - 1];
  const mods = new Set(parts.slice(0, -1));
  if (mods.has('Ctrl') !== (e.ctrlKey || e.metaKey)) return false;
  if (mods.has('Alt') !== e.altKey) return false;
  const printable = key.length === 1;
  // Shift is part of a printable key ("?" is Shift+/), so only check it for named keys and combos.
  if ((!printable || mods.size > 0) && mods.has('Shift') !== e.shiftKey) return false;
  if (printable && /[a-z]/i.test(key) && (e.altKey || e.ctrlKey || e.metaKey)) {
    // With Alt, e.key may be a special character (macOS): the physical key decides.
    return e.code === `Key${key.toUpperCase()}` || e.key.toLowerCase() === key.toLowerCase();
  }
  if (printable && /[0-9]/.test(key) && (e.altKey || e.ctrlKey)) return e.code === `Digit${key}` || e.key === key;
  return e.key === key;
}

/** Whether the key event is the shortcut `id`. */
export function hit(e: KeyboardEvent, id: string): boolean {
  const s = byId.get(id);
  if (!s) throw new Error(`unknown shortcut ${id}`);
  return s.keys.some((k) => matchesSpec(e, k));
}

/** The shortcut's keys for a label: "Alt+A". */
export function keysOf(id: string): string {
  return byId.get(id)?.keys.join(' / ') ?? '';
}

/** Typing in a field: plain-letter shortcuts must not fire. */
export function isTyping(e: Event): boolean {
  const t = e.target as HTMLElement | null;
  if (!t || !t.tagName) return false;
  if (t.isContentEditable) return true;
  if (t.tagName === 'TEXTAREA' || t.tagName === 'SELECT') return true;
  if (t.tagName === 'INPUT') {
    const type = (t as HTMLInputElement).type;
    return !['button', 'checkbox', 'radio', 'submit', 'reset'].includes(type);
  }
  return false;
}
