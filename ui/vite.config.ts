// Vite builds the UI into ui/dist, which Tauri embeds (frontendDist =
// "../ui/dist"). Asset paths are relative so the bundle works from any base,
// and nothing is inlined or fetched remotely: the shell's CSP is
// `default-src 'self'` with no inline scripts or styles.
import { defineConfig } from 'vitest/config';
import { svelte } from '@sveltejs/vite-plugin-svelte';
import { svelteTesting } from '@testing-library/svelte/vite';

export default defineConfig({
  base: './',
  plugins: [svelte(), svelteTesting()],
  clearScreen: false,
  server: {
    port: 5173,
    strictPort: true,
  },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2022',
    // Never inline assets as data: URIs (CSP is 'self' only).
    assetsInlineLimit: 0,
    sourcemap: false,
  },
  test: {
    environment: 'jsdom',
    include: ['tests/**/*.test.ts'],
    setupFiles: ['tests/setup.ts'],
    // No retries: a flaky test is a bug to fix, not to hide. The keyboard
    // flows type a few hundred keys; on a busy 2-core CI box that is seconds.
    retry: 0,
    testTimeout: 20_000,
  },
});
