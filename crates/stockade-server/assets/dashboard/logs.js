// The logs tab: the main process's output, the last lines and then
// live, stdout and stderr apart; an empty log says so. A stream cut by the
// network picks up after the last line it showed.

import { sse, eventText, sandboxPath, ApiError } from './api.js';
import { $, el } from './ui.js';

let abort = null;

const EMPTY = 'No output from the main process yet.';
const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

async function follow(v) {
  const out = $('logs');
  out.textContent = '';
  const empty = el('span', { class: 'empty-log muted' }, EMPTY);
  out.append(empty);
  const ctl = new AbortController();
  abort = ctl;
  let lines = 0;
  let lastId = null;
  let failures = 0;
  for (;;) {
    const query = lastId ? `follow=true&lastEventId=${encodeURIComponent(lastId)}` : 'tail=200&follow=true';
    try {
      await sse(sandboxPath(v.id, `/logs?${query}`), {
        signal: ctl.signal,
        onEvent: ({ event, data, id }) => {
          if (event !== 'stdout' && event !== 'stderr') return;
          if (id) lastId = id;
          failures = 0;
          if (!lines++) empty.remove();
          const atBottom = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
          out.append(el('span', { class: event }, `${eventText(data)}\n`));
          if (atBottom) out.scrollTop = out.scrollHeight;
        },
      });
      break;
    } catch (e) {
      if (e.name === 'AbortError' || abort !== ctl) return;
      const answered = e instanceof ApiError && e.status !== 0;
      if (answered || ++failures > 3) {
        if (!lines) empty.remove();
        out.append(el('span', { class: 'stderr' }, `Logs unavailable: ${e.message}\n`));
        return;
      }
      await sleep(500 * failures);
      if (abort !== ctl) return;
    }
  }
  if (abort === ctl && !lines) empty.textContent = `${EMPTY} (The stream ended.)`;
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
