/**
 * The events {@link MockBackend} sends the screens (`changed`, `syncStatus`),
 * delivered as Tauri delivers them.
 */
import type { EventName, EventPayloads, Unsubscribe } from '../backend';

export class Events {
  private readonly listeners = new Map<EventName, Set<(p: unknown) => void>>();

  on<E extends EventName>(event: E, handler: (payload: EventPayloads[E]) => void): Unsubscribe {
    let set = this.listeners.get(event);
    if (!set) {
      set = new Set();
      this.listeners.set(event, set);
    }
    const h = handler as (p: unknown) => void;
    set.add(h);
    return () => set!.delete(h);
  }

  /** Whether anyone listens, so a payload that costs work is only built for a listener. */
  heard(event: EventName): boolean {
    return !!this.listeners.get(event)?.size;
  }

  emit<E extends EventName>(event: E, payload: EventPayloads[E]): void {
    const set = this.listeners.get(event);
    if (!set) return;
    // Like Tauri: delivered after the current call returns.
    queueMicrotask(() => {
      for (const h of [...set]) h(payload);
    });
  }
}
