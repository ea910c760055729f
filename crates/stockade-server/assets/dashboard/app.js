// Stockade dashboard: sign in with a token, list / create / use sandboxes.
// No build step and no CDN: this file is served as-is from the binary.
//
// The API token is handed to the server once, at sign-in; the session then
// lives in an HttpOnly cookie that no script (this one included) can read,
// and every request that changes something carries the CSRF header.

const $ = (id) => document.getElementById(id);
const AGENT_KEY = 'stockade.agentCommand';
const CSRF = { 'X-Stockade-CSRF': '1' };

const state = {
  sandboxes: [],
  selected: null, // the selected sandbox as last fetched
  listTimer: null,
  statsTimer: null,
  logsAbort: null,
  samples: [],
  proxyToken: null,
  busy: false,
};

class ApiError extends Error {
  constructor(status, body) {
    const msg = body && body.error ? body.error.message : `HTTP ${status}`;
    super(msg);
    this.status = status;
    this.body = body;
  }
}

async function api(method, path, body, extraHeaders) {
  const headers = { ...CSRF, ...(extraHeaders || {}) };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let resp;
  try {
    resp = await fetch(path, {
      method, headers, credentials: 'same-origin',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, { error: { message: `The server did not answer (${e.message}).` } });
  }
  const text = await resp.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { json = null; }
  if (!resp.ok) throw new ApiError(resp.status, json || { error: { message: text || `HTTP ${resp.status}` } });
  return json;
}

// Reads a Server-Sent Events response, calling onEvent({event, data, id}).
async function readSse(resp, onEvent) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  let ev = { event: 'message', data: [], id: null };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      let line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        if (ev.data.length) onEvent({ event: ev.event, data: ev.data.join('\n'), id: ev.id });
        ev = { event: 'message', data: [], id: null };
      } else if (line.startsWith(':')) {
        // keep-alive comment
      } else {
        const i = line.indexOf(':');
        const field = i < 0 ? line : line.slice(0, i);
        let val = i < 0 ? '' : line.slice(i + 1);
        if (val.startsWith(' ')) val = val.slice(1);
        if (field === 'event') ev.event = val;
        else if (field === 'data') ev.data.push(val);
        else if (field === 'id') ev.id = val;
      }
    }
  }
}

function decodeChunk(data) {
  try {
    const v = JSON.parse(data);
    if (typeof v === 'string') return v;
    if (v && typeof v.data === 'string') return v.data;
    if (v && typeof v.text === 'string') return v.text;
  } catch (_) { /* plain text */ }
  return data;
}

function el(tag, attrs, ...kids) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') n.className = v;
    else if (k.startsWith('on')) n.addEventListener(k.slice(2), v);
    else n.setAttribute(k, v);
  }
  for (const k of kids.flat()) n.append(k && k.nodeType ? k : document.createTextNode(k == null ? '' : String(k)));
  return n;
}

function ago(iso) {
  const s = Math.max(0, Math.round((Date.now() - new Date(iso).getTime()) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return new Date(iso).toLocaleString();
}

function duration(s) {
  if (s == null) return '—';
  const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
  if (d) return `${d}d ${h}h ${m}m`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s % 60}s`;
  return `${s}s`;
}

function bytes(n) {
  if (n == null) return '—';
  const u = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0; let v = n;
  while (v >= 1000 && i < u.length - 1) { v /= 1000; i++; }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${u[i]}`;
}

function notice(msg) {
  const n = $('notice');
  n.textContent = msg || '';
  n.hidden = !msg;
}

// ---------- sign in ----------

async function showApp() {
  let me;
  try {
    me = await api('GET', '/api/v1/me');
  } catch (e) {
    signOut(e.status === 401 ? 'That token was not accepted.' : e.message);
    return;
  }
  $('signin').hidden = true;
  $('app').hidden = false;
  $('whoami').textContent = `${me.account.name}${me.account.isAdmin ? ' (admin)' : ''}`;
  $('agent-command').value = localStorage.getItem(AGENT_KEY) || '';
  await refreshList();
  clearInterval(state.listTimer);
  state.listTimer = setInterval(refreshList, 3000);
}

function signOut(message, { quiet } = {}) {
  if (!quiet) fetch('/api/v1/session', { method: 'DELETE', headers: CSRF, credentials: 'same-origin' }).catch(() => {});
  clearInterval(state.listTimer);
  stopLive();
  state.selected = null;
  $('app').hidden = true;
  $('signin').hidden = false;
  $('token-input').value = '';
  const err = $('signin-error');
  err.textContent = message || '';
  err.hidden = !message;
  $('token-input').focus();
}

$('signin-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const token = $('token-input').value.trim();
  $('token-input').value = '';
  try {
    await api('POST', '/api/v1/session', { token });
  } catch (err) {
    signOut(err.status === 401 ? 'That token was not accepted.' : err.message, { quiet: true });
    return;
  }
  await showApp();
});
$('signout').addEventListener('click', () => signOut());

// ---------- list ----------

async function refreshList() {
  try {
    const page = await api('GET', '/api/v1/sandbox?per_page=200');
    state.sandboxes = page.sandboxes;
    $('list-error').hidden = true;
  } catch (e) {
    if (e.status === 401) return signOut('Your token is no longer valid.');
    $('list-error').textContent = `Could not load sandboxes: ${e.message}`;
    $('list-error').hidden = false;
    return;
  }
  renderList();
}

function renderList() {
  const list = $('sandbox-list');
  list.textContent = '';
  $('empty').hidden = state.sandboxes.length > 0;
  for (const sb of state.sandboxes) {
    const current = state.selected && state.selected.id === sb.id;
    list.append(el('li', { 'data-id': sb.id },
      el('button', { class: 'sb', 'aria-current': current ? 'true' : 'false', onclick: () => select(sb.id) },
        el('span', { class: 'sb-name' }, sb.name),
        el('span', { class: `chip ${sb.status}` }, sb.status),
        el('span', { class: 'sb-meta' }, `${sb.id} · created ${ago(sb.createdAt)}`))));
  }
}

// ---------- create ----------

function toggleCreate(open) {
  const form = $('create-form');
  form.hidden = open === undefined ? !form.hidden : !open;
  $('create-toggle').setAttribute('aria-expanded', String(!form.hidden));
  if (!form.hidden) form.elements.name.focus();
}
$('create-toggle').addEventListener('click', () => toggleCreate());
$('empty-create').addEventListener('click', () => toggleCreate(true));

$('create-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const f = e.target.elements;
  const body = {};
  if (f.name.value.trim()) body.name = f.name.value.trim();
  if (f.image.value.trim()) body.dockerImage = f.image.value.trim();
  if (f.cpu.value) body.cpuCores = Number(f.cpu.value);
  if (f.memory.value) body.memoryGB = Number(f.memory.value);
  const status = $('create-status');
  status.className = 'status-line loading';
  status.textContent = 'Creating sandbox…';
  $('create-submit').disabled = true;
  try {
    const sb = await api('POST', '/api/v1/sandbox', body);
    status.className = 'status-line';
    status.textContent = `Created ${sb.name}.`;
    e.target.reset();
    toggleCreate(false);
    await refreshList();
    await select(sb.id, { tab: 'console' });
  } catch (err) {
    status.className = 'status-line error';
    status.textContent = `Could not create the sandbox: ${err.message}`;
  } finally {
    $('create-submit').disabled = false;
  }
});

// ---------- selection ----------

function stopLive() {
  clearInterval(state.statsTimer);
  state.statsTimer = null;
  if (state.logsAbort) state.logsAbort.abort();
  state.logsAbort = null;
}

async function select(id, opts) {
  stopLive();
  notice('');
  let sb;
  try {
    sb = await api('GET', `/api/v1/sandbox/${id}`);
  } catch (e) {
    if (e.status === 404 || e.status === 403) {
      gone(id);
      return;
    }
    notice(`Could not load the sandbox: ${e.message}`);
    return;
  }
  if (sb.status === 'TERMINATED') {
    gone(id, sb.name);
    return;
  }
  if (!state.selected || state.selected.id !== sb.id) {
    $('transcript').textContent = '';
    state.samples = [];
    state.proxyToken = null;
  }
  state.selected = sb;
  state.sandboxes = state.sandboxes.map((s) => (s.id === sb.id ? sb : s));
  renderList();
  renderDetail();
  showTab((opts && opts.tab) || currentTab());
  if (sb.status === 'RUNNING' && currentTab() === 'console') $('console-input').focus();
}

function gone(id, name) {
  state.sandboxes = state.sandboxes.filter((s) => s.id !== id);
  if (state.selected && state.selected.id === id) state.selected = null;
  renderList();
  $('detail').hidden = true;
  $('placeholder').hidden = false;
  notice(`Sandbox ${name || id} no longer exists; it was removed from the list.`);
}

function renderDetail() {
  const sb = state.selected;
  $('placeholder').hidden = true;
  $('detail').hidden = false;
  $('detail-name').textContent = sb.name;
  const chip = $('detail-status');
  chip.textContent = sb.status;
  chip.className = `chip ${sb.status}`;
  const running = sb.status === 'RUNNING';
  $('btn-start').disabled = running || state.busy;
  $('btn-stop').disabled = !running || state.busy;
  $('btn-delete').disabled = state.busy;
  $('stopped-banner').hidden = running || sb.status === 'PROVISIONING';
  $('console-input').disabled = !running;
  $('console-send').disabled = !running;
  renderFacts();
}

function renderFacts() {
  const sb = state.selected;
  const facts = $('facts');
  facts.textContent = '';
  const u = sb.usage || null;
  const rows = [
    ['Status', sb.status + (sb.statusReason ? ` (${sb.statusReason})` : '')],
    ['ID', sb.id],
    ['Image', sb.dockerImage],
    ['Uptime', sb.status === 'RUNNING' ? duration(sb.uptimeSeconds) : '—'],
    ['CPU', u && u.cpuPercent != null ? `${u.cpuPercent.toFixed(1)} % of ${sb.cpuCores} cores` : `${sb.cpuCores} cores`],
    ['Memory', u && u.memoryBytes != null ? `${bytes(u.memoryBytes)} of ${bytes(u.memoryLimitBytes)}` : `${sb.memoryGB} GB`],
    ['Volume', `${sb.volume.name} at ${sb.volume.mountPath}${sb.volume.size ? ` — ${sb.volume.size}` : ''}`],
    ['Created', new Date(sb.createdAt).toLocaleString()],
    ['Server', sb.server],
  ];
  for (const [k, v] of rows) facts.append(el('dt', {}, k), el('dd', {}, v));
  if (sb.volume.warning) facts.append(el('dt', {}, 'Warning'), el('dd', { class: 'warn', id: 'volume-warning' }, sb.volume.warning));
}

// ---------- tabs ----------

function currentTab() {
  const t = ['console', 'details', 'logs'].find((name) => $(`tab-${name}`).getAttribute('aria-selected') === 'true');
  return t || 'console';
}

function showTab(name) {
  for (const t of ['console', 'details', 'logs']) {
    $(`tab-${t}`).setAttribute('aria-selected', String(t === name));
    $(`panel-${t}`).hidden = t !== name;
  }
  stopLive();
  if (!state.selected) return;
  if (name === 'details') startDetails();
  if (name === 'logs') startLogs();
}
for (const t of ['console', 'details', 'logs']) $(`tab-${t}`).addEventListener('click', () => showTab(t));

// ---------- details: live chart and ports ----------

async function startDetails() {
  const id = state.selected.id;
  const tick = async () => {
    if (!state.selected || state.selected.id !== id) return;
    try {
      const sb = await api('GET', `/api/v1/sandbox/${id}`);
      if (!state.selected || state.selected.id !== id) return;
      state.selected = sb;
      renderDetail();
      const u = sb.usage;
      if (u) {
        const mem = u.memoryLimitBytes ? (100 * u.memoryBytes) / u.memoryLimitBytes : 0;
        state.samples.push({ cpu: u.cpuPercent || 0, mem });
        if (state.samples.length > 60) state.samples.shift();
      }
      drawChart();
    } catch (e) {
      if (e.status === 404) gone(id);
    }
  };
  await tick();
  state.statsTimer = setInterval(tick, 2000);
  loadPorts(id);
}

function drawChart() {
  const c = $('chart');
  const ctx = c.getContext('2d');
  ctx.clearRect(0, 0, c.width, c.height);
  ctx.strokeStyle = '#e3e6ec';
  for (let i = 0; i <= 4; i++) {
    const y = (c.height / 4) * i;
    ctx.beginPath(); ctx.moveTo(0, y); ctx.lineTo(c.width, y); ctx.stroke();
  }
  const plot = (key, color) => {
    const s = state.samples;
    if (s.length < 2) return;
    ctx.strokeStyle = color; ctx.lineWidth = 2; ctx.beginPath();
    s.forEach((p, i) => {
      const x = (c.width / 59) * (i + 60 - s.length);
      const y = c.height - (Math.min(100, p[key]) / 100) * c.height;
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  };
  plot('cpu', '#2b59c3');
  plot('mem', '#2f855a');
}

async function loadPorts(id) {
  const list = $('ports');
  list.textContent = '';
  let ports = [];
  try {
    const resp = await api('GET', `/api/v1/sandbox/${id}/ports`);
    ports = resp.ports || [];
  } catch (e) {
    list.append(el('li', {}, `Ports unavailable: ${e.message}`));
    return;
  }
  if (!ports.length) {
    list.append(el('li', { class: 'muted' }, 'No exposed ports.'));
    return;
  }
  if (!state.proxyToken) {
    try {
      state.proxyToken = (await api('POST', `/api/v1/sandbox/${id}/auth-token`, {})).token;
    } catch (_) { state.proxyToken = null; }
  }
  for (const p of ports) {
    // The host form gives the port an origin of its own (SEC-7).
    const base = p.hostUrl || p.url || `/proxy/${id}/${p.port}/`;
    const href = state.proxyToken ? `${base}${base.includes('?') ? '&' : '?'}stockade_token=${encodeURIComponent(state.proxyToken)}` : base;
    list.append(el('li', {}, el('a', { href, target: '_blank', rel: 'noopener' }, `port ${p.port}`), ` — ${base}`));
  }
}

// ---------- logs ----------

async function startLogs() {
  const id = state.selected.id;
  const out = $('logs');
  out.textContent = '';
  const abort = new AbortController();
  state.logsAbort = abort;
  try {
    const resp = await fetch(`/api/v1/sandbox/${id}/logs?tail=200&follow=true`, {
      headers: { Accept: 'text/event-stream' },
      credentials: 'same-origin',
      signal: abort.signal,
    });
    if (!resp.ok) {
      const body = await resp.json().catch(() => null);
      out.textContent = `Logs unavailable: ${body && body.error ? body.error.message : resp.status}`;
      return;
    }
    await readSse(resp, ({ event, data }) => {
      if (event !== 'stdout' && event !== 'stderr') return;
      const atBottom = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
      out.append(el('span', { class: event }, `${decodeChunk(data)}\n`));
      if (atBottom) out.scrollTop = out.scrollHeight;
    });
  } catch (e) {
    if (e.name !== 'AbortError') out.append(el('span', { class: 'stderr' }, `\n[log stream ended: ${e.message}]\n`));
  }
}

// ---------- console ----------

function shellQuote(s) {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

function commandFor(message) {
  const tpl = (localStorage.getItem(AGENT_KEY) || '').trim();
  if (!tpl || tpl === '{message}') return message;
  return tpl.includes('{message}') ? tpl.split('{message}').join(shellQuote(message)) : `${tpl} ${shellQuote(message)}`;
}

$('agent-command').addEventListener('change', (e) => localStorage.setItem(AGENT_KEY, e.target.value));

$('console-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const input = $('console-input');
  const message = input.value;
  if (!message.trim() || !state.selected) return;
  input.value = '';
  const id = state.selected.id;
  const out = el('div', { class: 'out' });
  const exit = el('div', { class: 'exit' }, 'running…');
  const entry = el('div', { class: 'msg' }, el('div', { class: 'you' }, message), out, exit);
  const transcript = $('transcript');
  transcript.append(entry);
  transcript.scrollTop = transcript.scrollHeight;
  $('console-send').disabled = true;
  try {
    const resp = await fetch(`/api/v1/sandbox/${id}/exec`, {
      method: 'POST',
      headers: { ...CSRF, Accept: 'text/event-stream', 'Content-Type': 'application/json' },
      credentials: 'same-origin',
      body: JSON.stringify({ shell: commandFor(message), cwd: '/workspace' }),
    });
    if (!resp.ok) {
      const body = await resp.json().catch(() => null);
      exit.textContent = `error: ${body && body.error ? body.error.message : `HTTP ${resp.status}`}`;
      exit.classList.add('fail');
      if (resp.status === 409 || resp.status === 404) select(id);
      return;
    }
    let finished = false;
    await readSse(resp, ({ event, data }) => {
      if (event === 'stdout' || event === 'stderr') {
        out.append(el('span', { class: event }, decodeChunk(data)));
      } else if (event === 'exit') {
        finished = true;
        let info = {};
        try { info = JSON.parse(data); } catch (_) { info = {}; }
        const code = info.exitCode;
        exit.textContent = info.timedOut ? 'timed out' : `exit code ${code}`;
        if (info.timedOut || code !== 0) exit.classList.add('fail');
      } else if (event === 'error') {
        exit.textContent = `error: ${decodeChunk(data)}`;
        exit.classList.add('fail');
        finished = true;
      }
      transcript.scrollTop = transcript.scrollHeight;
    });
    if (!finished) exit.textContent = 'the stream ended without an exit code';
  } catch (err) {
    exit.textContent = `error: ${err.message}`;
    exit.classList.add('fail');
  } finally {
    $('console-send').disabled = !(state.selected && state.selected.status === 'RUNNING');
    input.focus();
  }
});

// ---------- start / stop / delete ----------

async function lifecycle(verb, fn) {
  const id = state.selected.id;
  state.busy = true;
  renderDetail();
  notice(`${verb}…`);
  try {
    await fn(id);
    notice('');
  } catch (e) {
    notice(`Could not ${verb.toLowerCase()}: ${e.message}`);
  } finally {
    state.busy = false;
  }
  await refreshList();
  if (state.selected && state.selected.id === id) await select(id);
}

const startSandbox = () => lifecycle('Starting', (id) => api('POST', `/api/v1/sandbox/${id}/start`));
$('btn-start').addEventListener('click', startSandbox);
$('banner-start').addEventListener('click', startSandbox);
$('btn-stop').addEventListener('click', () => lifecycle('Stopping', (id) => api('POST', `/api/v1/sandbox/${id}/stop`)));
$('btn-delete').addEventListener('click', () => {
  $('delete-name').textContent = state.selected.name;
  $('preserve-volume').checked = false;
  $('delete-dialog').showModal();
});
$('delete-dialog').addEventListener('close', async () => {
  if ($('delete-dialog').returnValue !== 'confirm' || !state.selected) return;
  const { id, name } = state.selected;
  const keep = $('preserve-volume').checked;
  stopLive();
  state.busy = true;
  notice(`Deleting ${name}…`);
  try {
    await api('DELETE', `/api/v1/sandbox/${id}?preserveVolume=${keep}`);
    state.selected = null;
    $('detail').hidden = true;
    $('placeholder').hidden = false;
    notice(`Deleted ${name}.`);
  } catch (e) {
    notice(`Could not delete: ${e.message}`);
  } finally {
    state.busy = false;
  }
  await refreshList();
});

// ---------- boot ----------

// A session cookie from an earlier visit (or reload) signs in at once.
api('GET', '/api/v1/me').then(() => showApp(), () => signOut(undefined, { quiet: true }));
