// The logs tab (UI-4): the main process's output, the last lines and then
// live, stdout and stderr apart; an empty log says so.

import { sse, eventText, sandboxPath } from './api.js';
import { $, el } from './ui.js';

let abort = null;

const EMPTY = 'No output from the main process yet.';

async function follow(v) {
  const out = $('logs');
  out.textContent = '';
  const empty = el('span', { class: 'empty-log muted' }, EMPTY);
  out.append(empty);
  const ctl = new AbortController();
  abort = ctl;
  let lines = 0;
  try {
    await sse(sandboxPath(v.id, '/logs?tail=200&follow=true'), {
      signal: ctl.signal,
      onEvent: ({ event, data }) => {
        if (event !== 'stdout' && event !== 'stderr') return;
        if (!lines++) empty.remove();
        const atBottom = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
        out.append(el('span', { class: event }, `${eventText(data)}\n`));
        if (atBottom) out.scrollTop = out.scrollHeight;
      },
    });
    if (abort === ctl && !lines) empty.textContent = `${EMPTY} (The stream ended.)`;
  } catch (e) {
    if (e.name === 'AbortError' || abort !== ctl) return;
    if (!lines) empty.remove();
    out.append(el('span', { class: 'stderr' }, `Logs unavailable: ${e.message}\n`));
  }
}

export const logs = {
  enter(v) {
    follow(v);
  },
  record() {},
  leave() {
    if (abort) abort.abort();
    abort = null;
  },
};
