import { describe, expect, test } from 'vitest';
import { ago, compareSizes, duration, money, parseDate } from '../src/lib/format';

describe('format', () => {
  test('money is minor units', () => {
    expect(money(500000)).toBe('$5,000.00');
    expect(money(4805)).toBe('$48.05');
    expect(money(null)).toBe('—');
  });

  test('ages read like a person says them', () => {
    expect(duration(40)).toBe('40 s');
    expect(duration(185)).toBe('3 min');
    expect(duration(2 * 3600 + 5 * 60)).toBe('2 h 5 min');
    expect(ago(Date.parse('2026-12-01T10:00:00Z'), Date.parse('2026-12-01T10:00:40Z'))).toBe('40 s ago');
    expect(ago(null, 0)).toBe('never');
  });

  test('dates as typed off a fax', () => {
    const today = new Date(2026, 0, 10);
    expect(parseDate('2026-03-15', today)).toBe('2026-03-15');
    expect(parseDate('3/15', today)).toBe('2026-03-15');
    expect(parseDate('3/15/27', today)).toBe('2027-03-15');
    expect(parseDate('3/15/2027', today)).toBe('2027-03-15');
    expect(parseDate('+14', today)).toBe('2026-01-24');
    expect(parseDate('', today)).toBe('');
    expect(parseDate('2/30', today)).toBeNull();
    expect(parseDate('next week', today)).toBeNull();
  });

  test('sizes sort as a size run', () => {
    expect(['XL', 'M', 'XS', 'L', 'S', 'XXL'].sort(compareSizes)).toEqual(['XS', 'S', 'M', 'L', 'XL', 'XXL']);
    expect(['34', '28', '30', '36', '32'].sort(compareSizes)).toEqual(['28', '30', '32', '34', '36']);
  });
});
