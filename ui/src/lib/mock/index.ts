/**
 * The in-memory stand-in backend for the UI tests and `npm run dev` outside
 * Tauri (main.ts loads it only there). Importers say `./lib/mock`; the parts
 * live beside this file: backend.ts (MockBackend), desk.ts, server.ts,
 * views.ts, events.ts, seed.ts.
 */
export { DEMO_PASSWORD, LONG_CUSTOMER } from '../fixtures';
export { MockBackend, type MockOptions } from './backend';
export type { RefusedAct } from './desk';
