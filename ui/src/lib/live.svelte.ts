/**
 * Live state shared by the screens: the sync status (pushed by the backend's
 * `syncStatus` event), a `tick` that bumps when the local data changed (the
 * backend's `changed` event, debounced), and a clock for ages ("40 s ago").
 * Screens reload what they show whenever `tick` moves, so changes from other
 * desks appear within a second without a manual refresh. A status the
 * backend pushes is shown on that same tick, so the status bar never says
 * "Pending: 0" while a screen still shows an order's badge as pending.
 */
import type { Backend, SyncStatus, Unsubscribe } from './backend';
import { Latest } from './latest';

export const CHANGE_DEBOUNCE_MS = 100;
/** A safety net if an event is ever missed: the status is re-read this often. */
export const STATUS_POLL_MS = 5000;

export class Live {
  status = $state<SyncStatus | null>(null);
  tick = $state(0);
  now = $state(0);
  /** A dialog is open: screen shortcuts stay quiet. */
  modal = $state(false);
  /** The last error a screen reported, for the shared alert region. */
  error = $state<string | null>(null);

  private unsubs: Unsubscribe[] = [];
  private timers: ReturnType<typeof setInterval>[] = [];
  private pending: ReturnType<typeof setTimeout> | null = null;
  /** A pushed status waiting for the next tick. */
  private heard: SyncStatus | null = null;
  private readonly reads = new Latest();

  constructor(
    private readonly backend: Backend,
    private readonly clock: () => number = () => Date.now(),
  ) {
    this.now = clock();
  }

  async start(): Promise<void> {
    this.unsubs.push(
      await this.backend.on('changed', () => this.poke()),
      await this.backend.on('syncStatus', (s) => {
        this.heard = s;
        this.poke();
      }),
    );
    this.timers.push(setInterval(() => (this.now = this.clock()), 1000));
    this.timers.push(setInterval(() => void this.refreshStatus(), STATUS_POLL_MS));
    await this.refreshStatus();
  }

  stop(): void {
    for (const u of this.unsubs) u();
    for (const t of this.timers) clearInterval(t);
    if (this.pending) clearTimeout(this.pending);
    this.unsubs = [];
    this.timers = [];
  }

  /** Something changed: reload screens (debounced) and the status. */
  poke(): void {
    if (this.pending) return;
    this.pending = setTimeout(() => {
      this.pending = null;
      if (this.heard) {
        this.status = this.heard;
        this.heard = null;
      }
      this.tick += 1;
      this.now = this.clock();
      void this.refreshStatus();
    }, CHANGE_DEBOUNCE_MS);
  }

  /** Reads overlap (each tick, the poll): only the newest may show (./latest.ts). */
  refreshStatus(): Promise<void> {
    return this.reads.run(async (current) => {
      try {
        const s = await this.backend.getStatus();
        if (current()) this.status = s;
      } catch {
        // The status bar keeps the last known status; the next event retries.
      }
    });
  }
}
