/** The backend and the live state, handed to every screen through Svelte context. */
import { getContext, setContext } from 'svelte';
import type { Backend } from './backend';
import type { Live } from './live.svelte';

export interface AppContext {
  backend: Backend;
  live: Live;
  /** The first screen is interactive (called by the sign-in form and the desk; only the first call counts). */
  ready?: () => void;
}

const KEY = Symbol('holdfast');

export function setApp(ctx: AppContext): void {
  setContext(KEY, ctx);
}

export function getApp(): AppContext {
  const ctx = getContext<AppContext | undefined>(KEY);
  if (!ctx) throw new Error('no Holdfast context: render inside <App> or pass it in the test');
  return ctx;
}

/** For tests: the context map @testing-library/svelte's `render` takes. */
export function contextMap(ctx: AppContext): Map<unknown, unknown> {
  return new Map<unknown, unknown>([[KEY, ctx]]);
}
