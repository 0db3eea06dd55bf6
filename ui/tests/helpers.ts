import { render, waitFor } from '@testing-library/svelte';
import userEvent from '@testing-library/user-event';
import App from '../src/App.svelte';
import type { Backend } from '../src/lib/backend';
import { contextMap } from '../src/lib/context';
import { Live } from '../src/lib/live.svelte';
import { MockBackend, type MockOptions } from '../src/lib/mock';

/** A settable clock for ages ("40 s ago"). */
export function fakeClock(start = Date.parse('2026-12-01T10:00:00Z')) {
  let t = start;
  const clock = () => t;
  clock.advance = (ms: number) => {
    t += ms;
  };
  return clock;
}

export function mockBackend(opts: MockOptions = {}) {
  return new MockBackend({ seed: 'catalog', signedIn: true, ...opts });
}

export function renderApp(backend: Backend, clock?: () => number) {
  const user = userEvent.setup();
  const r = render(App, { props: { backend, ...(clock ? { clock } : {}) } });
  return { user, ...r };
}

/** Renders one screen with the app context (no App around it). */
export function renderScreen<P extends Record<string, unknown>>(
  component: Parameters<typeof render>[0],
  props: P,
  backend: Backend,
) {
  const live = new Live(backend);
  const user = userEvent.setup();
  const r = render(component, { props, context: contextMap({ backend, live }) });
  return { user, live, ...r };
}

export const focused = () => document.activeElement as HTMLElement | null;

export async function waitFocus(el: Element) {
  await waitFor(() => {
    if (document.activeElement !== el) throw new Error(`focus is on ${describe(document.activeElement)}, not ${describe(el)}`);
  });
}

function describe(el: Element | null): string {
  if (!el) return 'nothing';
  const id = el.id ? `#${el.id}` : '';
  const label = el.getAttribute('aria-label') ?? '';
  return `<${el.tagName.toLowerCase()}${id}${label ? ` "${label}"` : ''}>`;
}

export function sku(mock: MockBackend, style: string, color: string, size: string) {
  const s = [...mock.server.skus.values()].find((x) => x.style === style && x.color === color && x.size === size);
  if (!s) throw new Error(`no SKU ${style} ${color} ${size}`);
  return s;
}

export function customer(mock: MockBackend, name: string) {
  const c = mock.server.customers.find((x) => x.name === name);
  if (!c) throw new Error(`no customer ${name}`);
  return c;
}

/**
 * The backend as the desktop app meets it: every command answers after
 * `ms` (Tauri IPC and the engine's SQLite take a few milliseconds), so a
 * second event of the same keystroke (the `change` a browser fires right
 * after Enter's keydown, a blur, a double click) arrives while the first act
 * is still on its way. Calls are recorded on the mock at once. `idle()`
 * resolves once no command is in flight (and none started meanwhile);
 * `log` lists `>name` when a command starts and `<name` when it answers.
 */
export function withLatency(m: MockBackend, ms = 15) {
  let inFlight = 0;
  const log: string[] = [];
  const sleep = (t: number) => new Promise((r) => setTimeout(r, t));
  const backend = new Proxy(m, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver);
      if (typeof v !== 'function' || prop === 'on' || prop === 'constructor') return v;
      return async (...args: unknown[]) => {
        inFlight += 1;
        log.push(`>${String(prop)}`);
        try {
          const r = await (v as (...a: unknown[]) => unknown).apply(target, args);
          await sleep(ms);
          return r;
        } finally {
          inFlight -= 1;
          log.push(`<${String(prop)}`);
        }
      };
    },
  }) as MockBackend;
  async function idle() {
    let quiet = 0;
    while (quiet < 3) {
      await sleep(ms);
      quiet = inFlight === 0 ? quiet + 1 : 0;
    }
  }
  return { backend, idle, log };
}

/**
 * The backend with one call held back, so that a newer call can overtake it:
 * `hold(name)` makes the next call of `name` read the mock at once (what it
 * answers is the state of that moment, as with the engine) but answer only
 * on `release()`. `arrived` resolves once that call has been made.
 */
export function holdable(m: MockBackend) {
  let held: { name: string; came: () => void; gate: Promise<void> } | null = null;
  const backend = new Proxy(m, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver);
      if (typeof v !== 'function' || prop === 'on' || prop === 'constructor') return v;
      return async (...args: unknown[]) => {
        const r = await (v as (...a: unknown[]) => unknown).apply(target, args);
        const h = held;
        if (h && h.name === prop) {
          held = null;
          h.came();
          await h.gate;
        }
        return r;
      };
    },
  }) as MockBackend;
  function hold(name: keyof MockBackend & string) {
    let came!: () => void;
    let release!: () => void;
    const arrived = new Promise<void>((r) => (came = r));
    held = { name, came, gate: new Promise<void>((r) => (release = r)) };
    return { arrived, release };
  }
  return { backend, hold };
}

/**
 * Lets every promise already resolved run its course (the mock answers at
 * once, so a load released by a test finishes within one turn of the event
 * loop), and Svelte update the page. Not a wait for time.
 */
export const drained = () => new Promise<void>((r) => setTimeout(r, 0));
