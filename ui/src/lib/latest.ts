/**
 * Loads of which only the newest shows. A screen reloads what it shows each
 * time `Live.tick` moves and after its own acts, so its loads overlap, and
 * the backend may answer them out of order: an older load that finishes
 * after a newer one would put older data back on screen (an order's badge
 * saying "Pending · 1" after the act went through). Each load is numbered as
 * it starts, and applies what it read only while no newer load has started.
 */
export class Latest {
  private started = 0;
  private newest: Promise<void> = Promise.resolve();

  /**
   * Runs `load`, which must apply what it read (and its error, and its
   * "loaded") only while `current()` is true. The promise settles once the
   * newest load started by then has, so a caller that awaits a load still
   * finds the screen showing data at least as new as it asked for.
   */
  run(load: (current: () => boolean) => Promise<void>): Promise<void> {
    const mine = ++this.started;
    const current = () => mine === this.started;
    const done = load(current).then(() => (current() ? undefined : this.newest));
    this.newest = done;
    return done;
  }
}
