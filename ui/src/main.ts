// Picks the backend: the Tauri one inside the desktop app; outside it (a plain
// browser, `npm run dev`) the in-memory mock, loaded as its own chunk so the
// desktop never runs it.
import './app.css';
import { mount } from 'svelte';
import { isTauri } from '@tauri-apps/api/core';
import App from './App.svelte';
import { createTauriBackend, type Backend } from './lib/backend';

async function boot() {
  let backend: Backend;
  if (isTauri()) {
    backend = createTauriBackend();
    void backend.markStartup('page').catch(() => {});
  } else {
    const { MockBackend } = await import('./lib/mock');
    const mock = new MockBackend({ autoSyncMs: 400 });
    (window as unknown as { holdfastMock: unknown }).holdfastMock = mock;
    backend = mock;
  }
  mount(App, { target: document.getElementById('app')!, props: { backend } });
}

void boot();
