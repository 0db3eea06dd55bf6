import { vitePreprocess } from '@sveltejs/vite-plugin-svelte';

export default {
  preprocess: vitePreprocess(),
  compilerOptions: {
    // Styles go to the CSS file, never into inline <style> tags (CSP).
    css: 'external',
  },
};
