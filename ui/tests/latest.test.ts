// Overlapping loads, of which only the newest shows: an older load that
// finishes last leaves the newer data on screen, and awaiting it waits until
// the newest has shown.
import { describe, expect, test } from 'vitest';
import { Latest } from '../src/lib/latest';

/** A promise the test settles by hand. */
function deferred<T>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** A screen with one thing shown, loaded through `Latest`. */
function screen() {
  const loads = new Latest();
  const s = {
    shown: 'nothing yet',
    load: (read: Promise<string>) =>
      loads.run(async (current) => {
        const v = await read;
        if (current()) s.shown = v;
      }),
  };
  return s;
}

describe('Latest', () => {
  test('an older load that finishes after a newer one does not show', async () => {
    const s = screen();
    const older = deferred<string>();
    const newer = deferred<string>();
    const a = s.load(older.promise);
    const b = s.load(newer.promise);
    newer.resolve('new');
    await b;
    expect(s.shown).toBe('new');
    older.resolve('old');
    await a;
    expect(s.shown).toBe('new');
  });

  test('awaiting an overtaken load waits for the newest to show', async () => {
    const s = screen();
    const older = deferred<string>();
    const newer = deferred<string>();
    const order: string[] = [];
    const a = s.load(older.promise).then(() => order.push(`older done, showing ${s.shown}`));
    const b = s.load(newer.promise).then(() => order.push(`newer done, showing ${s.shown}`));
    older.resolve('old');
    await older.promise;
    newer.resolve('new');
    await Promise.all([a, b]);
    expect(order).toEqual(['newer done, showing new', 'older done, showing new']);
  });
});
