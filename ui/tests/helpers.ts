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
