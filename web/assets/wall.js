import { attachStream } from '/assets/stream.js';

// A live thumbnail per running desktop, at 3 frames per second.
for (const c of document.querySelectorAll('canvas[data-vm]')) attachStream(c, c.dataset.vm, 3);
