// The status bar and the screens move together: a status the backend pushes
// is shown on the same debounced tick that reloads the screens, so the bar
// never says "Pending: 0" while a screen still shows a pending badge; and a
// status read that answers late never puts an older status back.
import { afterEach, describe, expect, test, vi } from 'vitest';
import type { Backend, SyncStatus } from '../src/lib/backend';
import { CHANGE_DEBOUNCE_MS, Live } from '../src/lib/live.svelte';

type Handler = (payload: unknown) => void;

/** Just enough of a backend: the events a test sends, and a status. */
function fakeBackend(status: () => SyncStatus | Promise<SyncStatus>) {
  const handlers = new Map<string, Handler>();
  const backend = {
    on: async (event: string, handler: Handler) => {
      handlers.set(event, handler);
      return () => handlers.delete(event);
    },
    getStatus: async () => status(),
  } as unknown as Backend;
  const emit = (event: string, payload: unknown) => handlers.get(event)?.(payload);
  return { backend, emit };
}

const withPending = (pending: number) => ({ pending }) as SyncStatus;

describe('live state', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  test('a pushed status is shown with the next screen reload, not before', async () => {
    vi.useFakeTimers();
    let current = withPending(1);
    const { backend, emit } = fakeBackend(() => current);
    const live = new Live(backend, () => 0);
    await live.start();
    expect(live.status?.pending).toBe(1);
    const tick = live.tick;

    current = withPending(0);
    emit('syncStatus', current);
    expect(live.status?.pending, 'held until the screens reload').toBe(1);
    expect(live.tick).toBe(tick);

    await vi.advanceTimersByTimeAsync(CHANGE_DEBOUNCE_MS);
    expect(live.tick).toBe(tick + 1);
    expect(live.status?.pending).toBe(0);
    live.stop();
  });

  test('a status read that answers after a newer one does not show', async () => {
    vi.useFakeTimers();
    let current: () => SyncStatus | Promise<SyncStatus> = () => withPending(1);
    const { backend, emit } = fakeBackend(() => current());
    const live = new Live(backend, () => 0);
    await live.start();
    expect(live.status?.pending).toBe(1);

    // A read (the poll's) that still finds the act pending answers late...
    let answer!: (s: SyncStatus) => void;
    current = () => new Promise((r) => (answer = r));
    const older = live.refreshStatus();
    // ...after the act went through and the next tick read the status again.
    current = () => withPending(0);
    emit('syncStatus', withPending(0));
    await vi.advanceTimersByTimeAsync(CHANGE_DEBOUNCE_MS);
    expect(live.status?.pending).toBe(0);

    answer(withPending(1));
    await older;
    expect(live.status?.pending).toBe(0);
    live.stop();
  });
});
