/** Formatting and parsing for what people type and read: money, ages, dates, sizes. */
import type { Sku } from './backend';

/** Minor units → "$1,234.50". */
export function money(cents: number | null | undefined): string {
  if (cents === null || cents === undefined) return '—';
  const neg = cents < 0;
  const abs = Math.abs(Math.round(cents));
  const dollars = Math.floor(abs / 100)
    .toString()
    .replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  return `${neg ? '−' : ''}$${dollars}.${(abs % 100).toString().padStart(2, '0')}`;
}

/** Seconds → "40 s", "3 min", "2 h 5 min", "3 d". */
export function duration(secs: number): string {
  const s = Math.max(0, Math.floor(secs));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 24) return m % 60 ? `${h} h ${m % 60} min` : `${h} h`;
  return `${Math.floor(h / 24)} d`;
}

/** Milliseconds since the epoch, from an RFC 3339 string or a number. */
export function toMs(t: string | number | null | undefined): number | null {
  if (t === null || t === undefined) return null;
  if (typeof t === 'number') return t;
  const ms = Date.parse(t);
  return Number.isNaN(ms) ? null : ms;
}

/** "40 s ago" (or "just now"). */
export function ago(t: string | number | null | undefined, now: number): string {
  const ms = toMs(t);
  if (ms === null) return 'never';
  const secs = (now - ms) / 1000;
  if (secs < 1) return 'just now';
  return `${duration(secs)} ago`;
}

/** Local wall-clock time for a printout: "2026-12-01 14:05". */
export function clock(t: string | number | null | undefined): string {
  const ms = toMs(t);
  if (ms === null) return '—';
  const d = new Date(ms);
  const p = (n: number) => n.toString().padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}`;
}

function iso(y: number, m: number, d: number): string | null {
  const dt = new Date(Date.UTC(y, m - 1, d));
  if (dt.getUTCFullYear() !== y || dt.getUTCMonth() !== m - 1 || dt.getUTCDate() !== d) return null;
  return `${y.toString().padStart(4, '0')}-${m.toString().padStart(2, '0')}-${d.toString().padStart(2, '0')}`;
}

/**
 * A date as typed off a fax: `2026-03-15`, `3/15`, `3/15/26`, `3/15/2026`,
 * `+14` (days from today), `today`. Returns `YYYY-MM-DD`, `''` for empty
 * input, or null when it cannot be read.
 */
export function parseDate(text: string, today: Date = new Date()): string | null {
  const t = text.trim().toLowerCase();
  if (t === '') return '';
  const y0 = today.getFullYear();
  const base = Date.UTC(y0, today.getMonth(), today.getDate());
  if (t === 'today') return new Date(base).toISOString().slice(0, 10);
  let m = /^\+(\d{1,3})$/.exec(t);
  if (m) return new Date(base + Number(m[1]) * 86_400_000).toISOString().slice(0, 10);
  m = /^(\d{4})-(\d{1,2})-(\d{1,2})$/.exec(t);
  if (m) return iso(Number(m[1]), Number(m[2]), Number(m[3]));
  m = /^(\d{1,2})[/.](\d{1,2})(?:[/.](\d{2}|\d{4}))?$/.exec(t);
  if (m) {
    let y = m[3] ? Number(m[3]) : y0;
    if (m[3] && m[3].length === 2) y += 2000;
    return iso(y, Number(m[1]), Number(m[2]));
  }
  return null;
}

const LETTER_SIZES = ['XXXS', 'XXS', 'XS', 'S', 'M', 'L', 'XL', 'XXL', 'XXXL', '2XL', '3XL', '4XL'];

/** Sorts sizes the way a size run reads: XS S M L XL…, then numbers, then the rest. */
export function compareSizes(a: string, b: string): number {
  const rank = (s: string): [number, number, string] => {
    const u = s.toUpperCase();
    const i = LETTER_SIZES.indexOf(u);
    if (i >= 0) return [0, i, u];
    const n = Number.parseFloat(u);
    if (!Number.isNaN(n)) return [1, n, u];
    return [2, 0, u];
  };
  const [ga, na, sa] = rank(a);
  const [gb, nb, sb] = rank(b);
  return ga - gb || na - nb || sa.localeCompare(sb);
}

/** "Kestrel Overshirt · Washed Indigo · M". */
export function skuLabel(s: Pick<Sku, 'style' | 'color' | 'size'> | null | undefined): string {
  if (!s) return 'unknown SKU';
  return `${s.style} · ${s.color} · ${s.size}`;
}

/** The first 8 characters of an id, for people. */
export function shortId(id: string): string {
  return id.slice(0, 8);
}

/**
 * What an invoice's payments say, in words: "awaiting payment",
 * "$100.00 paid, $68.00 still owed", "paid on June 3, 2026", and an
 * over-payment named as such. `when` formats the paid date.
 */
export function paymentWords(
  invoice: { amount: number; amount_paid: number; status: 'awaiting_payment' | 'paid'; paid_at: string | null },
  when: (iso: string | null) => string,
): string {
  const { amount, amount_paid: paid } = invoice;
  if (invoice.status === 'paid') {
    const over = paid > amount ? `, over-paid by ${money(paid - amount)}` : '';
    return `paid on ${when(invoice.paid_at)}${over}`;
  }
  if (paid > 0) return `${money(paid)} paid, ${money(amount - paid)} still owed`;
  return 'awaiting payment';
}
