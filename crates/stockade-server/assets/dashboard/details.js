// The details tab: state and settings of the sandbox, the shared
// volumes it mounts, its disk use against the enforced limits, a live chart of CPU and
// memory with a few minutes of history, its exposed ports with proxy links
// (expose, unexpose), its egress policy, changed live, and a
// settings form (PATCH), and its history of lifecycle events (events.js).

import { api, sandboxPath } from './api.js';
import { $, el, notice, showError, clearNotice, origin, cores, gb, memory, duration, when, num, busy, pausedAgo,
  parsePairs, formatPairs, parseList, parseNumber, FieldError, markFields, egressControl, describePolicy } from './ui.js';
import { drawChart, CHART_COLORS } from './chart.js';
import { eventHistory } from './events.js';
import { format } from './router.js';

const WINDOW_MS = 5 * 60 * 1000;
const POLL_MS = 2000;
/**
 * sandbox id → usage samples as measured (`{t, cpuPercent, memoryBytes,
 * memoryLimitBytes}`, oldest first), kept while the page lives (10 minutes
 * of them): the server's recent history when the tab opens, then each
 * refresh's figures.
 */
const history = new Map();
/** sandbox id → a proxy token and when it expires. */
const proxyTokens = new Map();
let current = null;
let timer = null;
let portsFor = null;
let settingsFor = null;
/** What `/health` says of disk limits on this host (why one is not enforced), fetched once a minute at most. */
let diskHealth = { at: 0, value: null };

async function loadDiskHealth() {
  if (Date.now() - diskHealth.at < 60000) return;
  diskHealth.at = Date.now();
  try {
    // /health answers 503 with the same body when something is unhealthy.
    const resp = await fetch('/api/v1/health', { credentials: 'same-origin' });
    diskHealth.value = (await resp.json()).disk || null;
  } catch (_) { diskHealth.value = null; }
}

const BYTES_PER_GB = 1024 ** 3;

/**
 * One writable area's disk use: "12.0 KB of 2 GB" where the limit is
 * enforced, else what is used and that the limit is not enforced (and why,
 * as `/health` says).
 */
function diskArea(used, limit, sb, health) {
  const usedText = used == null ? 'not measured yet' : memory(used);
  if (limit != null) return `${usedText} of ${gb(limit / BYTES_PER_GB)}`;
  const why = health && health.reason ? `: ${health.reason}` : '';
  return `${usedText}${used == null ? '' : ' used'}; the ${gb(sb.diskSizeGB)} limit is not enforced on this host${why}`;
}

function diskRows(sb) {
  const d = sb.disk;
  if (!d) return [['Disk', `${gb(sb.diskSizeGB)}${sb.status === 'TERMINATED' ? '' : ' (use not measured)'}`]];
  const h = diskHealth.value || {};
  return [
    ['Disk, /workspace', diskArea(d.workspaceBytes, d.workspaceLimitBytes, sb, h.workspace)],
    ['Disk, root filesystem', diskArea(d.rootFsBytes, d.rootFsLimitBytes, sb, h.rootFs)],
  ];
}

/** Adds measurements to a sandbox's history: in time order, each once. */
function remember(id, samples) {
  const list = history.get(id) || [];
  const known = new Set(list.map((s) => s.t));
  for (const s of samples) {
    if (!Number.isFinite(s.t) || known.has(s.t)) continue;
    known.add(s.t);
    list.push(s);
  }
  list.sort((a, b) => a.t - b.t);
  const newest = list.length ? list[list.length - 1].t : 0;
  while (list.length && newest - list[0].t > 2 * WINDOW_MS) list.shift();
  history.set(id, list);
}

/** Records the usage figures of a freshly loaded sandbox. */
export function sample(sb) {
  const u = sb.usage;
  if (!u) return;
  remember(sb.id, [{ t: Date.parse(u.sampledAt) || Date.now(), cpuPercent: u.cpuPercent, memoryBytes: u.memoryBytes, memoryLimitBytes: u.memoryLimitBytes }]);
}

/**
 * Fetches what the server measured of the sandbox over the last minutes,
 * so that the chart shows them at once rather than starting empty. A
 * server without the history leaves the chart to fill as it refreshes.
 */
async function loadHistory(v) {
  let answer;
  try {
    answer = await api('GET', sandboxPath(v.id, '/usage/history'));
  } catch (_) {
    return;
  }
  remember(v.id, (answer.samples || []).map((s) => ({
    t: Date.parse(s.at), cpuPercent: s.cpuPercent, memoryBytes: s.memoryBytes, memoryLimitBytes: s.memoryLimitBytes,
  })));
  if (current === v && v.sb) renderChart(v.sb);
}

/** What the end of a session does, in words. */
const ON_TIMEOUT = {
  kill: 'kill: deleted with its files',
  stop: 'stop: stopped, its files kept',
  pause: 'pause: frozen in place, processes and memory kept',
};
const AFTER_TIMEOUT = { kill: 'deleted', stop: 'stopped', pause: 'paused' };

/** The lifecycle as the API answers it (older servers: from `persistent`). */
function lifecycleOf(sb) {
  return sb.lifecycle || { onTimeout: sb.persistent ? 'stop' : 'kill', autoResume: false, idleTimeoutMinutes: 0 };
}

/** The shared volumes it mounts: each name a link to the volume, with the path, "(ro)" when read-only. */
function mountsFact(sb) {
  return sb.volumeMounts.map((m, i) => el('span', { 'data-mount': m.volumeId },
    i ? ', ' : '',
    el('a', { href: format({ page: 'shared-volumes', volume: m.volumeId }) }, m.name),
    ` at ${m.path}${m.readOnly ? ' (ro)' : ''}`));
}

function renderFacts(sb) {
  const u = sb.usage || null;
  const running = sb.status === 'RUNNING';
  const paused = sb.status === 'PAUSED';
  const life = lifecycleOf(sb);
  const then = AFTER_TIMEOUT[life.onTimeout] || life.onTimeout;
  const timeout = !sb.timeoutMinutes ? 'never'
    : `${num(sb.timeoutMinutes)} min${sb.sessionExpiresAt ? `, this session ends ${when(sb.sessionExpiresAt)}` : ''} (then ${then})`;
  const idle = life.idleTimeoutMinutes ? `${num(life.idleTimeoutMinutes)} min without use (then ${then})` : 'none';
  const rows = [
    ['Status', sb.status + (paused ? ` (${pausedAgo(sb)})` : '') + (sb.statusReason ? ` (${sb.statusReason})` : '')],
    ['ID', sb.id],
    ['Image', sb.origin ? origin(sb) : sb.runtime ? `${sb.dockerImage} (runtime ${sb.runtime})` : sb.dockerImage],
    ['Start command', sb.startCommand || 'default (keeps the sandbox alive)'],
    ['Uptime', running || (paused && sb.uptimeSeconds != null) ? duration(sb.uptimeSeconds) : '—'],
    ['CPU', u && u.cpuPercent != null ? `${(u.cpuPercent / Math.max(0.01, sb.cpuCores)).toFixed(1)} % of ${cores(sb.cpuCores)}` : cores(sb.cpuCores)],
    ['Memory', u ? `${memory(u.memoryBytes)} of ${gb(sb.memoryGB)}` : gb(sb.memoryGB)],
    ...diskRows(sb),
    ['Processes', u ? String(u.pids) : '—'],
    ['Network', `${describePolicy(sb.networkPolicy)}${u && sb.networkAccess ? ` · received ${memory(u.networkRxBytes)}, sent ${memory(u.networkTxBytes)}` : ''}`],
    ['Volume', `${sb.volume.name} at ${sb.volume.mountPath}${sb.volume.size ? ` — ${sb.volume.size}` : ''}`],
    ...(sb.volumeMounts && sb.volumeMounts.length ? [['Shared volumes', mountsFact(sb)]] : []),
    ['Session timeout', timeout],
    ['Idle timeout', idle],
    ['On timeout', ON_TIMEOUT[life.onTimeout] || life.onTimeout],
    ['Auto-resume', life.autoResume ? 'yes: a paused sandbox resumes when it is used' : 'no: a paused sandbox waits for Resume'],
    ['Labels', sb.labels.length ? sb.labels.join(', ') : '—'],
    ['Tags', Object.keys(sb.tags).length ? formatPairs(sb.tags).split('\n').join(', ') : '—'],
    ['Environment', Object.keys(sb.environmentVars).length ? Object.keys(sb.environmentVars).join(', ') : '—'],
    ['Team', sb.teamId || '—'],
    ['Created', when(sb.createdAt)],
    ['Started', when(sb.startedAt)],
    ['Stopped', when(sb.stoppedAt)],
    ...(paused ? [['Paused', `${when(sb.pausedAt)} (${pausedAgo(sb)})`]] : []),
    ['Server', sb.server],
  ];
  if (sb.terminatedAt) rows.push(['Terminated', when(sb.terminatedAt)]);
  const facts = $('facts');
  facts.textContent = '';
  for (const [k, v] of rows) facts.append(el('dt', {}, k), el('dd', { 'data-fact': k }, v));
  if (sb.volume.warning) facts.append(el('dt', {}, 'Warning'), el('dd', { class: 'warn', id: 'volume-warning' }, sb.volume.warning));
}

function renderChart(sb) {
  // In percent of the sandbox's limits as they are now.
  const samples = (history.get(sb.id) || []).map((s) => ({
    t: s.t,
    cpu: s.cpuPercent == null ? null : s.cpuPercent / Math.max(0.01, sb.cpuCores),
    mem: s.memoryLimitBytes ? (100 * s.memoryBytes) / s.memoryLimitBytes : null,
  }));
  drawChart($('chart'), samples, { windowMs: WINDOW_MS, gapMs: POLL_MS * 5 });
  const last = samples[samples.length - 1];
  const legend = $('chart-legend');
  legend.textContent = '';
  legend.append(
    el('span', { class: 'key', style: `--key:${CHART_COLORS.cpu}` }, `CPU, % of ${cores(sb.cpuCores)}${last && last.cpu != null ? `: ${last.cpu.toFixed(1)} %` : ''}`),
    ' ',
    el('span', { class: 'key', style: `--key:${CHART_COLORS.mem}` }, `Memory, % of ${gb(sb.memoryGB)}${last && last.mem != null ? `: ${last.mem.toFixed(1)} %` : ''}`),
    el('span', { class: 'muted' }, ` · up to the last ${WINDOW_MS / 60000} minutes`));
}

// ---------- ports ----------

async function tokenFor(id) {
  const known = proxyTokens.get(id);
  if (known && Date.parse(known.expiresAt) - Date.now() > 60000) return known.token;
  const fresh = await api('POST', sandboxPath(id, '/auth-token'), {}, { repeatable: true });
  proxyTokens.set(id, fresh);
  return fresh.token;
}

async function loadPorts(v) {
  portsFor = v.id;
  const list = $('ports');
  let ports;
  try {
    ports = (await api('GET', sandboxPath(v.id, '/ports'))).ports || [];
  } catch (e) {
    if (current !== v) return;
    list.textContent = '';
    list.append(el('li', { class: 'error' }, `Ports unavailable: ${e.message}`));
    return;
  }
  let token = null;
  if (ports.length) {
    try { token = await tokenFor(v.id); } catch (_) { token = null; }
  }
  if (current !== v) return;
  list.textContent = '';
  if (!ports.length) list.append(el('li', { class: 'muted' }, 'No exposed ports.'));
  for (const p of ports) {
    // The host form gives the port an origin of its own.
    const base = p.hostUrl || p.url;
    const withToken = (u) => (token ? `${u}${u.includes('?') ? '&' : '?'}stockade_token=${encodeURIComponent(token)}` : u);
    list.append(el('li', { 'data-port': String(p.port) },
      el('a', { href: withToken(base), target: '_blank', rel: 'noopener' }, `port ${p.port}`),
      el('span', { class: 'muted small' }, ` ${base}`),
      p.hostUrl ? el('a', { class: 'small', href: withToken(p.url), target: '_blank', rel: 'noopener' }, ' (path form)') : null,
      ' ',
      el('button', { class: 'small', type: 'button', 'aria-label': `Unexpose port ${p.port}`, onclick: (e) => busy(e.target, () => unexpose(v, p.port)) }, 'Unexpose')));
  }
}

async function unexpose(v, port) {
  try {
    await api('DELETE', sandboxPath(v.id, `/ports/${port}`));
    notice(`Port ${port} is no longer exposed.`);
  } catch (e) {
    showError(`Could not unexpose port ${port}`, e);
  }
  if (current === v) loadPorts(v);
}

$('expose-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const v = current;
  if (!v) return;
  const input = $('expose-port');
  let port;
  try {
    port = parseNumber(input.value, 'port', { min: 1, max: 65535, integer: true });
    if (port === undefined) throw new FieldError('port', 'enter a port number from 1 to 65535');
  } catch (err) {
    input.setAttribute('aria-invalid', 'true');
    showError('Could not expose the port', err);
    return;
  }
  input.removeAttribute('aria-invalid');
  await busy(e.submitter || e.target.querySelector('button'), async () => {
    try {
      await api('POST', sandboxPath(v.id, '/ports'), { port }, { repeatable: true });
      input.value = '';
      notice(`Port ${port} is exposed.`);
    } catch (err) {
      showError(`Could not expose port ${port}`, err);
    }
  });
  if (current === v) loadPorts(v);
});

// ---------- settings ----------

const settingsForm = $('settings-form');
let settingsDirty = false;
settingsForm.addEventListener('input', () => { settingsDirty = true; });

/** What of a record the settings form shows. */
function settingsOf(sb) {
  return JSON.stringify([sb.name, sb.timeoutMinutes, sb.cpuCores, sb.memoryGB, sb.labels, sb.tags, sb.environmentVars, sb.status]);
}
let settingsShown = null;

/** Fills the settings form from the record; `fresh` clears what it said before. */
function fillSettings(sb, fresh) {
  const f = settingsForm.elements;
  f.name.value = sb.name;
  f.timeout.value = num(sb.timeoutMinutes);
  f.cpu.value = num(sb.cpuCores);
  f.memory.value = num(sb.memoryGB);
  f.labels.value = sb.labels.join(', ');
  f.tags.value = formatPairs(sb.tags);
  f.env.value = formatPairs(sb.environmentVars);
  settingsDirty = false;
  settingsFor = sb.id;
  settingsShown = settingsOf(sb);
  if (fresh) {
    markFields(settingsForm, [], {});
    $('settings-status').textContent = '';
  }
  const editable = sb.status !== 'TERMINATED';
  for (const input of settingsForm.elements) input.disabled = !editable;
}

const SETTINGS_FIELDS = { name: 'name', timeoutMinutes: 'timeout', cpuCores: 'cpu', memoryGB: 'memory', labels: 'labels', tags: 'tags', environmentVars: 'env' };

settingsForm.addEventListener('submit', async (e) => {
  e.preventDefault();
  const v = current;
  if (!v || !v.sb) return;
  const sb = v.sb;
  const f = settingsForm.elements;
  const status = $('settings-status');
  const body = {};
  try {
    if (f.name.value.trim() !== sb.name) body.name = f.name.value.trim();
    const timeout = parseNumber(f.timeout.value, 'timeoutMinutes', { min: 0 });
    if (timeout !== undefined && timeout !== sb.timeoutMinutes) body.timeoutMinutes = timeout;
    const cpu = parseNumber(f.cpu.value, 'cpuCores', { min: 0.01 });
    if (cpu !== undefined && cpu !== sb.cpuCores) body.cpuCores = cpu;
    const mem = parseNumber(f.memory.value, 'memoryGB', { min: 0.01 });
    if (mem !== undefined && mem !== sb.memoryGB) body.memoryGB = mem;
    const labels = parseList(f.labels.value);
    if (labels.join('\n') !== sb.labels.join('\n')) body.labels = labels;
    const tags = parsePairs(f.tags.value, 'tags', { max: 5 });
    if (JSON.stringify(tags) !== JSON.stringify(sb.tags)) body.tags = tags;
    const env = parsePairs(f.env.value, 'environmentVars', { keyPattern: /^[A-Za-z_][A-Za-z0-9_]*$/ });
    if (JSON.stringify(env) !== JSON.stringify(sb.environmentVars)) body.environmentVars = env;
  } catch (err) {
    if (!(err instanceof FieldError)) throw err;
    markFields(settingsForm, [err], SETTINGS_FIELDS);
    status.className = 'status-line error';
    status.textContent = `Not saved: ${err.message}`;
    return;
  }
  if (!Object.keys(body).length) {
    status.className = 'status-line';
    status.textContent = 'Nothing changed.';
    return;
  }
  await busy($('settings-save'), async () => {
    let answer;
    try {
      answer = await api('PATCH', sandboxPath(sb.id), body);
    } catch (err) {
      markFields(settingsForm, err.fields || [], SETTINGS_FIELDS);
      status.className = 'status-line error';
      status.textContent = `Not saved: ${err.message}`;
      return;
    }
    if (current !== v) return;
    const applied = answer.applied || { now: [], nextStart: [] };
    const parts = [];
    if (applied.now.length) parts.push(`in effect now: ${applied.now.join(', ')}`);
    if (applied.nextStart.length) parts.push(`from the next start: ${applied.nextStart.join(', ')}`);
    status.className = 'status-line';
    status.textContent = `Saved${parts.length ? ` (${parts.join('; ')})` : ''}.${(answer.notes || []).map((n) => ` ${n}`).join('')}`;
    settingsDirty = false;
    markFields(settingsForm, [], SETTINGS_FIELDS);
    await v.refresh();
  });
});

// ---------- the egress policy, changed live ----------

const networkForm = $('network-form');
const egress = egressControl(networkForm);
let networkFor = null;
let networkShown = null;
let networkDirty = false;
networkForm.addEventListener('input', () => { networkDirty = true; });
networkForm.addEventListener('change', () => { networkDirty = true; });

function fillNetwork(sb, fresh) {
  egress.fill(sb.networkPolicy);
  networkFor = sb.id;
  networkShown = JSON.stringify(sb.networkPolicy);
  networkDirty = false;
  if (fresh) {
    markFields(networkForm, [], {});
    $('network-status').textContent = '';
  }
  const editable = sb.status !== 'TERMINATED';
  for (const input of networkForm.elements) input.disabled = !editable;
}

function renderNetwork(sb) {
  $('network-current').textContent = `Now: ${describePolicy(sb.networkPolicy)}.`;
  if (networkFor !== sb.id) fillNetwork(sb, true);
  else if (!networkDirty && JSON.stringify(sb.networkPolicy) !== networkShown) fillNetwork(sb, false);
}

networkForm.addEventListener('submit', async (e) => {
  e.preventDefault();
  const v = current;
  if (!v || !v.sb) return;
  const status = $('network-status');
  let policy;
  try {
    policy = egress.read();
  } catch (err) {
    if (!(err instanceof FieldError)) throw err;
    markFields(networkForm, [err], egress.fields());
    status.className = 'status-line error';
    status.textContent = `Not applied: ${err.message}`;
    return;
  }
  await busy($('network-save'), async () => {
    let answer;
    try {
      answer = await api('PATCH', sandboxPath(v.id), { networkPolicy: policy });
    } catch (err) {
      markFields(networkForm, err.fields || [], egress.fields());
      status.className = 'status-line error';
      status.textContent = `Not applied: ${err.message}`;
      showError(`Could not change the network policy of ${v.sb.name}`, err, { owner: 'network-policy' });
      return;
    }
    // An earlier refusal's banner is out of date now.
    clearNotice('network-policy');
    if (current !== v) return;
    // The notes say whether it holds now or from the next start.
    status.className = 'status-line';
    status.textContent = `Applied: ${describePolicy(answer.sandbox ? answer.sandbox.networkPolicy : policy)}.${(answer.notes || []).map((n) => ` ${n}.`).join('')}`;
    markFields(networkForm, [], {});
    networkDirty = false;
    await v.refresh();
  });
});

// ---------- the tab ----------

function redraw() {
  if (current && current.sb) renderChart(current.sb);
}
new ResizeObserver(redraw).observe($('chart').parentElement);

export const details = {
  enter(v) {
    current = v;
    portsFor = null;
    settingsFor = null;
    networkFor = null;
    loadDiskHealth().then(() => { if (current === v && v.sb) renderFacts(v.sb); });
    $('facts').textContent = '';
    $('ports').textContent = '';
    if (v.sb) this.record(v);
    loadHistory(v);
    eventHistory.enter(v.id);
    v.refresh();
    clearInterval(timer);
    timer = setInterval(() => { if (current === v) v.refresh(); }, POLL_MS);
  },
  record(v) {
    if (v !== current || !v.sb) return;
    renderFacts(v.sb);
    renderChart(v.sb);
    if (portsFor !== v.id) loadPorts(v);
    renderNetwork(v.sb);
    // Another sandbox: a fresh form. The same one changed elsewhere: its
    // new values, unless someone is editing them here.
    if (settingsFor !== v.id) fillSettings(v.sb, true);
    else if (!settingsDirty && settingsOf(v.sb) !== settingsShown) fillSettings(v.sb, false);
  },
  leave() {
    clearInterval(timer);
    timer = null;
    current = null;
    eventHistory.leave();
  },
};
