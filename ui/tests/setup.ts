// jsdom has no printing and no layout; the UI only needs these to exist.
import { configure } from '@testing-library/svelte';
import { vi } from 'vitest';

// findBy*/waitFor give a busy machine 3 s; the "within a second" live-update
// tests pass their own 1 s timeout, which is the requirement they check.
configure({ asyncUtilTimeout: 3000 });

window.print = vi.fn();
if (!Element.prototype.scrollIntoView) Element.prototype.scrollIntoView = () => {};
