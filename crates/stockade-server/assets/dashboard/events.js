// A sandbox's history on its details tab: the lifecycle events of the
// sandbox (created, started, stopped, paused, …), newest first, with the
// facts each one carries (why it stopped, which settings changed). The
// feed is read to its end when the tab opens; then its live stream adds
// each new event while the tab stays open, resuming after the last event
// seen when the connection drops, or asking again every few seconds when
// the server has no stream.

import { api, sse, ApiError } from './api.js';
import { $, el, when, ago, table, explain } from './ui.js';

/** Rows shown at first, and how many more each "Show more" adds. */
const PAGE_ROWS = 50;
/** Events kept in memory for one sandbox; the oldest beyond go. */
const KEEP = 2000;
/** The feed's largest page. */
const FEED_LIMIT = 100;
/** How long to wait before reconnecting a dropped stream, and between polls without one. */
const RETRY_MS = 3000;
const POLL_MS = 4000;

/** The sandbox followed: `{ id, events (oldest first), seen ids, cursor, shown, abort }`, or null. */
let open = null;

const PREFIX = 'sandbox.lifecycle.';

/** The type in short: `stopped` for `sandbox.lifecycle.stopped`. */
export function shortType(type) {
  return String(type || '').startsWith(PREFIX) ? type.slice(PREFIX.length) : String(type || '');
}

/** The facts of an event's `eventData`, in words, one string each. */
export function eventFacts(data) {
  if (!data || typeof data !== 'object') return [];
  const facts = [];
  if (typeof data.reason === 'string' && data.reason) facts.push(`reason: ${data.reason}`);
  if (Array.isArray(data.changed) && data.changed.length) facts.push(`changed: ${data.changed.map(String).join(', ')}`);
  if (typeof data.set_timeout === 'string') facts.push(`times out ${when(data.set_timeout)}`);
  if (typeof data.server === 'string') facts.push(`now on ${data.server}${typeof data.from === 'string' ? ` (was ${data.from})` : ''}`);
  if (typeof data.forkId === 'string') facts.push(`fork ${data.forkId}`);
  if (typeof data.snapshotId === 'string') facts.push(`snapshot ${typeof data.name === 'string' ? `${data.name} (${data.snapshotId})` : data.snapshotId}`);
  return facts;
}

function status(text, kind = '') {
  const s = $('history-status');
  s.className = `muted small ${kind}`.trim();
  s.textContent = text;
}

/** Adds events (oldest first) that were not seen yet. */
function add(f, events) {
  let added = false;
  for (const e of events) {
    if (!e || !e.id || f.seen.has(e.id)) continue;
    f.seen.add(e.id);
    f.events.push(e);
    if (e.cursor) f.cursor = e.cursor;
    added = true;
  }
  while (f.events.length > KEEP) f.seen.delete(f.events.shift().id);
  return added;
}

function render(f) {
  if (open !== f) return;
  const host = $('history-list');
  host.textContent = '';
  if (!f.events.length) {
    host.append(el('p', { class: 'muted' }, 'No events yet.'));
    return;
  }
  const newest = f.events.slice().reverse();
  const shown = newest.slice(0, f.shown);
  const rows = shown.map((e) => el('tr', { 'data-event': e.id, 'data-type': shortType(e.type) },
    el('td', { title: e.timestamp }, when(e.timestamp), el('div', { class: 'muted small' }, ago(e.timestamp))),
    el('td', {}, el('span', { class: `chip event ${shortType(e.type)}` }, shortType(e.type))),
    el('td', { class: 'small' }, eventFacts(e.eventData).map((t) => el('div', {}, t)))));
  host.append(table(['When', 'Event', 'Details'], rows, { class: 'history' }));
  const rest = newest.length - shown.length;
  if (rest > 0) {
    host.append(el('div', { class: 'row' }, el('button', {
      type: 'button', id: 'history-more', class: 'small',
      onclick: () => { f.shown += PAGE_ROWS; render(f); },
    }, `Show ${Math.min(rest, PAGE_ROWS)} more (${rest} older)`)));
  }
}

const feedPath = (f, since) => {
  const q = new URLSearchParams({ sandboxId: f.id, limit: String(FEED_LIMIT) });
  if (since) q.set('since', since);
  return `/api/v1/events?${q}`;
};

/** Reads the feed from `f.cursor` to its end; true when something new came. */
async function readOn(f) {
  let added = false;
  for (;;) {
    const page = await api('GET', feedPath(f, f.cursor), undefined, { signal: f.abort.signal });
    if (open !== f) return added;
    if (add(f, page.events || [])) added = true;
    if (page.nextCursor) f.cursor = page.nextCursor;
    if (!page.events || page.events.length < FEED_LIMIT) return added;
  }
}

const pause = (f, ms) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  f.abort.signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
});

/** Follows the live stream; without one (or refused), asks the feed every few seconds. */
async function follow(f) {
  let streaming = true;
  while (open === f) {
    if (streaming) {
      const q = new URLSearchParams({ sandboxId: f.id });
      if (f.cursor) q.set('since', f.cursor);
      try {
        await sse(`/api/v1/events/stream?${q}`, {
          signal: f.abort.signal,
          onOpen: () => { if (open === f) status('Live: new events appear as they happen.'); },
          onEvent: ({ data }) => {
            if (open !== f) return;
            let e;
            try { e = JSON.parse(data); } catch (_) { return; }
            if (add(f, [e])) render(f);
          },
        });
      } catch (e) {
        if (open !== f || e.name === 'AbortError') return;
        // A server without the stream, or one that refuses it: poll instead.
        if (e instanceof ApiError && e.status >= 400 && e.status < 500) streaming = false;
      }
      if (open !== f) return;
      if (streaming) status('Reconnecting to the live events…');
      await pause(f, RETRY_MS);
    } else {
      try {
        if (await readOn(f)) render(f);
        status(`Refreshed ${new Date().toLocaleTimeString()}; checked every few seconds.`);
      } catch (e) {
        if (open !== f || e.name === 'AbortError') return;
        status(`Could not refresh the history: ${explain(e)}`, 'error');
      }
      await pause(f, POLL_MS);
    }
  }
}

async function start(f) {
  status('Loading the history…');
  try {
    await readOn(f);
  } catch (e) {
    if (open !== f || e.name === 'AbortError') return;
    $('history-list').textContent = '';
    status(`Could not load the history: ${explain(e)}`, 'error');
    return;
  }
  render(f);
  follow(f);
}

/** The History section of the details tab. */
export const eventHistory = {
  enter(id) {
    if (open && open.id === id) return;
    this.leave();
    open = { id, events: [], seen: new Set(), cursor: null, shown: PAGE_ROWS, abort: new AbortController() };
    $('history-list').textContent = '';
    start(open);
  },
  leave() {
    if (open) open.abort.abort();
    open = null;
    status('');
  },
};
