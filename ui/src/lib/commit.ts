/**
 * One intention, one act. A field can be committed by Enter, by `change`,
 * by leaving it, or by all three in a row (Enter, then Tab away), and a
 * key can repeat: each of them must not queue the act again. A
 * {@link Committed} remembers, per field, the value last queued or last
 * shown by the engine; only a value different from it is queued.
 */
export class Committed<V> {
  /** What the field last queued, or the engine's value when it changed since. */
  private base = new Map<string, V>();
  /** The engine's value as last read. */
  private seen = new Map<string, V>();

  /**
   * The engine's (optimistic) value of a field, read on every load. A value
   * that differs from the last one read (another act, another desk) becomes
   * what the next commit is compared with; the same value read again (a
   * load that started before the act) changes nothing.
   */
  observe(key: string, value: V): void {
    if (this.seen.has(key) && this.seen.get(key) === value) return;
    this.seen.set(key, value);
    this.base.set(key, value);
  }

  /**
   * Whether `value` is a new intention for the field: true (and remembered)
   * when it differs from what was last queued or shown; false when it was
   * queued already, or is what the order holds.
   */
  claim(key: string, value: V): boolean {
    if (this.base.has(key) && this.base.get(key) === value) return false;
    this.base.set(key, value);
    return true;
  }

  /** The act was not queued (it failed): the same value may be committed again. */
  unclaim(key: string): void {
    if (this.seen.has(key)) this.base.set(key, this.seen.get(key)!);
    else this.base.delete(key);
  }
}

/**
 * Acts that must not run twice at once (a double click, a held key): `run`
 * skips a key whose act is still in flight, and `settled` waits for every
 * act in flight, keyed or not (closing the editor waits for them).
 */
export class InFlight {
  private keyed = new Map<string, Promise<unknown>>();
  private all = new Set<Promise<unknown>>();

  has(key: string): boolean {
    return this.keyed.has(key);
  }

  /**
   * Runs `fn`, unless an act under `key` is still running (then resolves to
   * undefined without running it). A null key only tracks it for {@link settled}.
   */
  run<T>(key: string | null, fn: () => Promise<T>): Promise<T | undefined> {
    if (key !== null && this.keyed.has(key)) return Promise.resolve(undefined);
    const p = fn();
    const done = p.then(
      () => {},
      () => {},
    );
    if (key !== null) this.keyed.set(key, done);
    this.all.add(done);
    void done.then(() => {
      if (key !== null && this.keyed.get(key) === done) this.keyed.delete(key);
      this.all.delete(done);
    });
    return p;
  }

  /** Resolves when every act in flight now, and any they start meanwhile, has finished. */
  async settled(): Promise<void> {
    while (this.all.size > 0) await Promise.all([...this.all]);
  }
}

/**
 * A click that is the second (or third…) of a double click: the first one
 * already did the act. Keyboard activation and script clicks have detail 0.
 */
export const isRepeatClick = (e: MouseEvent | undefined): boolean => !!e && e.detail > 1;
