// The console's terminal: xterm.js over the sandbox's terminal
// WebSocket. `GET /api/v1/sandbox/{id}/terminal?cols=&rows=&cwd=` upgrades
// (the session cookie authenticates it); binary frames carry the PTY's
// bytes both ways, the page sends `{"type":"resize","cols","rows"}` text
// frames, and the server sends `{"type":"exit","exitCode"}` before it closes.
// One session per sandbox lives while the page does, so switching sandboxes
// and tabs comes back to the same shell.

import { Terminal } from './xterm.mjs';
import { FitAddon } from './addon-fit.mjs';
import { api, sandboxPath, routeMissing } from './api.js';
import { $, el, notice, mayTakeFocus } from './ui.js';

const host = $('terminal-host');
const encoder = new TextEncoder();
/** sandbox id → session */
const sessions = new Map();
let current = null; // the view the terminal pane shows
let shown = null; // the session on screen

const THEME = {
  background: '#0f172a', foreground: '#e2e8f0', cursor: '#93c5fd', selectionBackground: '#334155',
  black: '#1e293b', red: '#f87171', green: '#4ade80', yellow: '#facc15', blue: '#60a5fa',
  magenta: '#c084fc', cyan: '#22d3ee', white: '#e2e8f0', brightBlack: '#64748b',
};

function setStatus(text, size) {
  const s = $('terminal-status');
  s.textContent = text;
  if (size) s.append(' · ', el('span', { id: 'terminal-size' }, size));
}

function statusOf(s) {
  if (s !== shown) return;
  const size = `${s.term.cols}×${s.term.rows}`;
  $('terminal-reconnect').hidden = !s.ended;
  if (s.ended) {
    setStatus(s.exitCode != null ? `Session ended with exit code ${s.exitCode}.` : (s.failure || 'Session closed.'));
  } else if (s.opened) setStatus('Connected', size);
  else setStatus('Connecting…', size);
}

function send(s, data) {
  if (s.ws && s.ws.readyState === WebSocket.OPEN) s.ws.send(data);
}

function sendSize(s) {
  if (!s.opened) return;
  const { cols, rows } = s.term;
  if (s.sentCols === cols && s.sentRows === rows) return;
  s.sentCols = cols;
  s.sentRows = rows;
  send(s, JSON.stringify({ type: 'resize', cols, rows }));
}

/** Fits the terminal to its box (only while it is on screen and has a size). */
function fit(s) {
  if (s !== shown || !s.el.isConnected || s.el.clientWidth === 0) return;
  try { s.fit.fit(); } catch (_) { /* not laid out yet */ }
}

function create(id) {
  const box = el('div', { class: 'term', 'data-sandbox': id });
  host.append(box);
  const term = new Terminal({
    cursorBlink: true,
    fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace',
    fontSize: 13,
    scrollback: 5000,
    theme: THEME,
  });
  const fitter = new FitAddon();
  term.loadAddon(fitter);
  term.open(box);
  const s = { id, el: box, term, fit: fitter, ws: null, opened: false, ended: false, exitCode: null, startedAt: null, retries: 0 };
  term.onData((d) => send(s, encoder.encode(d)));
  term.onBinary((d) => send(s, Uint8Array.from(d, (c) => c.charCodeAt(0) & 0xff)));
  term.onResize(() => { sendSize(s); statusOf(s); });
  // Tab belongs to the shell; Shift+Escape leaves the terminal for the page.
  term.attachCustomKeyEventHandler((e) => {
    if (e.type === 'keydown' && e.key === 'Escape' && e.shiftKey) {
      $('mode-terminal').focus();
      return false;
    }
    return true;
  });
  sessions.set(id, s);
  return s;
}

function connect(s, sb) {
  fit(s);
  const url = new URL(sandboxPath(s.id, '/terminal'), location.href);
  url.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  url.searchParams.set('cols', String(s.term.cols));
  url.searchParams.set('rows', String(s.term.rows));
  url.searchParams.set('cwd', '/workspace');
  const ws = new WebSocket(url.href);
  ws.binaryType = 'arraybuffer';
  Object.assign(s, { ws, opened: false, ended: false, exitCode: null, failure: null, refused: false, startedAt: sb.startedAt, sentCols: s.term.cols, sentRows: s.term.rows });
  statusOf(s);
  ws.onopen = () => {
    if (s.ws !== ws) return;
    s.opened = true;
    s.retries = 0;
    sendSize(s);
    statusOf(s);
    if (s === shown && mayTakeFocus()) s.term.focus();
  };
  ws.onmessage = (ev) => {
    if (s.ws !== ws) return;
    if (typeof ev.data === 'string') {
      let msg = null;
      try { msg = JSON.parse(ev.data); } catch (_) { return; }
      if (msg && msg.type === 'exit') s.exitCode = msg.exitCode;
      return;
    }
    s.term.write(new Uint8Array(ev.data));
  };
  ws.onclose = () => {
    if (s.ws !== ws) return;
    s.ws = null;
    s.ended = true;
    if (!s.opened) {
      explainFailure(s, url);
      return;
    }
    const how = s.exitCode != null ? `exit code ${s.exitCode}` : 'connection closed';
    s.term.write(`\r\n\x1b[90m[session ended: ${how}]\x1b[0m\r\n`);
    statusOf(s);
  };
}

/** The API's refusal of `request`, or null when it was answered. */
async function refusal(request) {
  try {
    await request();
    return null;
  } catch (e) {
    return e;
  }
}

/**
 * A WebSocket that never opened says nothing about why; the same request
 * as a plain GET gets the API's answer (the route missing, the sandbox not
 * running, …). A paused sandbox refuses the terminal as it refuses every
 * use (409 `sandbox_paused`), but the terminal route checks the page's
 * origin first, which a plain GET of this page does not send: the pause is
 * read from the list of processes, which answers as the terminal would.
 */
async function explainFailure(s, url) {
  let reason = 'the server refused the connection';
  let told = false;
  let e = await refusal(() => api('GET', sandboxPath(s.id, '/processes')));
  if (!e || e.code !== 'sandbox_paused') e = await refusal(() => api('GET', `${url.pathname}${url.search}`));
  if (e) {
    if (routeMissing(e)) {
      s.failure = 'This server has no terminal.';
      statusOf(s);
      forget(s.id);
      terminal.onUnsupported();
      return;
    }
    if (e.code) { reason = e.message; told = true; }
    // Paused (or stopped) behind the page: the view learns it and shows
    // what can be done (a paused sandbox offers Resume).
    if (e.status === 409 && current && current.id === s.id) {
      s.refused = e.code === 'sandbox_paused';
      current.refresh();
    }
  }
  // Without a reason from the API the connection may just have been cut
  // while it was made (see api.js): try again, a few times.
  if (!told && s.retries < 3 && sessions.get(s.id) === s && current && current.id === s.id && current.sb) {
    s.retries++;
    setTimeout(() => {
      if (sessions.get(s.id) === s && !s.ws && current && current.id === s.id && current.sb && current.sb.status === 'RUNNING') connect(s, current.sb);
    }, 300 * s.retries);
    return;
  }
  s.failure = `Could not open a terminal: ${reason}`;
  statusOf(s);
  if (s === shown) notice(s.failure, 'error');
}

/** Puts `s` on screen (none: null); `focus` gives it the keyboard. */
function show(s, focus) {
  shown = s;
  for (const other of sessions.values()) other.el.hidden = other !== s;
  if (!s) {
    $('terminal-reconnect').hidden = true;
    return;
  }
  statusOf(s);
  requestAnimationFrame(() => {
    fit(s);
    sendSize(s);
    if (focus && s === shown && current && mayTakeFocus()) s.term.focus();
  });
}

function forget(id) {
  const s = sessions.get(id);
  if (!s) return;
  sessions.delete(id);
  if (s.ws) { const ws = s.ws; s.ws = null; ws.close(); }
  s.term.dispose();
  s.el.remove();
  if (shown === s) shown = null;
}

new ResizeObserver(() => {
  if (shown) requestAnimationFrame(() => fit(shown));
}).observe(host);

$('terminal-reconnect').addEventListener('click', () => {
  if (!shown || !current || !current.sb || current.sb.status !== 'RUNNING') return;
  shown.term.write('\r\n');
  connect(shown, current.sb);
  shown.term.focus();
});

export const terminal = {
  /** Called when the server has no terminal route at all. */
  onUnsupported() {},

  enter(v) {
    current = v;
    this.record(v);
    const s = sessions.get(v.id);
    if (s && shown === s && mayTakeFocus()) requestAnimationFrame(() => { if (shown === s && current === v) s.term.focus(); });
  },

  /** The shown sandbox's record (re)loaded: connect, or say why not. Never steals the focus. */
  record(v) {
    if (v !== current) return;
    const sb = v.sb;
    let s = sessions.get(v.id) || null;
    if (!sb || sb.status !== 'RUNNING') {
      if (shown !== s) show(s, false);
      // A session open when the sandbox was paused is frozen with it and
      // goes on once it is resumed.
      const why = sb && sb.status === 'PAUSED'
        ? `This sandbox is paused: resume it to use the terminal${s && s.ws ? ', which goes on where it was' : ''}.`
        : `The terminal needs a running sandbox; this one is ${sb ? sb.status.toLowerCase() : ''}.`;
      setStatus(sb ? why : 'Loading…');
      $('terminal-reconnect').hidden = true;
      return;
    }
    // A sandbox started again since the session ended gets a new session;
    // so does one that refused the session (paused at the time) and now runs.
    const restarted = s && s.ended && (s.startedAt !== sb.startedAt || s.refused);
    if (!s) s = create(v.id);
    if (shown !== s) show(s, true);
    else statusOf(s);
    if (!s.ws && (!s.ended || restarted)) {
      if (restarted) s.term.write('\r\n');
      connect(s, sb);
    }
  },

  leave() {
    current = null;
    show(null, false);
    setStatus('');
  },

  forget,

  closeAll() {
    for (const id of [...sessions.keys()]) forget(id);
  },
};
