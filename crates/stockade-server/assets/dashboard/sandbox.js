// The sandbox view: header, lifecycle actions and tabs.
//
// What is shown switches at once when another sandbox is selected, and every
// action targets the sandbox shown. Each selection is a new `view` object;
// an answer that arrives for a view that is no longer current is dropped,
// and the action buttons stay disabled until the shown sandbox's own state
// has loaded.

import { api, sandboxPath } from './api.js';
import { $, el, notice, showError, clearNotice, cores, gb, ask, pausedAgo, origin } from './ui.js';
import { go, here } from './router.js';
import * as sidebar from './list.js';
import { terminal } from './terminal.js';
import { commands } from './commands.js';
import { notebook } from './notebook.js';
import { files } from './files.js';
import { details, sample } from './details.js';
import { logs } from './logs.js';
import { snapshotsPanel, refreshSnapshots } from './snapshots.js';

const TABS = ['console', 'files', 'details', 'logs', 'snapshots'];

/** The sandbox shown: `{ id, sb, alive(), refresh() }`; null when none. */
let view = null;
let activeTab = null;
/** Sandboxes with an action in flight: id → verb. */
const busy = new Map();
/** The console mode used when the URL names none. */
let preferredMode = 'terminal';

function newView(id) {
  const v = { id, sb: null, seq: 0 };
  v.alive = () => view === v;
  v.refresh = () => load(v, { quiet: true });
  return v;
}

// ---------- the console tab: terminal, one command at a time, or notebook ----------

const modes = { terminal, commands, notebook };
const MODES = Object.keys(modes);
const consolePanel = {
  mode: null,
  /** The mode shown last, which the console tab comes back to. */
  last: null,
  enter(v, route) { this.route(v, route); },
  route(v, route) {
    const mode = MODES.includes(route.tab) ? route.tab : 'terminal';
    if (mode === this.mode) {
      if (modes[mode].route) modes[mode].route(v, route);
      return;
    }
    if (this.mode) modes[this.mode].leave();
    this.mode = mode;
    for (const m of MODES) {
      $(`mode-${m}`).setAttribute('aria-pressed', String(m === mode));
      $(`${m}-pane`).hidden = m !== mode;
    }
    modes[mode].enter(v, route);
  },
  record(v) { if (this.mode) modes[this.mode].record(v); },
  leave() {
    if (this.mode) modes[this.mode].leave();
    this.last = this.mode;
    this.mode = null;
  },
};

terminal.onUnsupported = () => {
  preferredMode = 'commands';
  notice('This server has no terminal yet: the console runs one command at a time.', 'info');
  const route = here();
  if (route.page === 'sandbox' && route.tab === 'terminal') go({ ...route, tab: 'commands' }, { replace: true });
};

$('mode-terminal').addEventListener('click', () => { if (view) go({ page: 'sandbox', id: view.id, tab: 'terminal' }); });
$('mode-commands').addEventListener('click', () => { if (view) go({ page: 'sandbox', id: view.id, tab: 'commands' }); });
$('mode-notebook').addEventListener('click', () => { if (view) go({ page: 'sandbox', id: view.id, tab: 'notebook' }); });

const panels = { console: consolePanel, files, details, logs, snapshots: snapshotsPanel };

function tabOf(routeTab) {
  return MODES.includes(routeTab) || !routeTab ? 'console' : routeTab;
}

// ---------- showing a sandbox ----------

/** Shows the sandbox and tab of `route` (`page: 'sandbox'`). */
export function showSandbox(route) {
  if (!route.tab) {
    go({ ...route, tab: preferredMode }, { replace: true });
    return;
  }
  if (!view || view.id !== route.id) {
    leaveTab();
    view = newView(route.id);
    renderHead();
    load(view);
  }
  const tab = tabOf(route.tab);
  if (tab !== activeTab) {
    leaveTab();
    activeTab = tab;
    for (const t of TABS) {
      const b = $(`tab-${t}`);
      b.setAttribute('aria-selected', String(t === tab));
      b.tabIndex = t === tab ? 0 : -1;
      $(`panel-${t}`).hidden = t !== tab;
    }
    panels[tab].enter(view, route);
  } else if (panels[tab].route) {
    panels[tab].route(view, route);
  }
}

/** Leaves the sandbox view (another page is shown). */
export function hideSandbox() {
  leaveTab();
  view = null;
}

function leaveTab() {
  if (activeTab) panels[activeTab].leave();
  activeTab = null;
}

/** Loads the shown sandbox's record; a late or superseded answer is dropped. */
async function load(v, { quiet = false } = {}) {
  const mine = ++v.seq;
  let sb;
  try {
    sb = await api('GET', sandboxPath(v.id));
  } catch (e) {
    if (!v.alive() || mine !== v.seq) return;
    if (e.status === 404) { gone(v); return; }
    if (!quiet || e.status === 403) showError('Could not load the sandbox', e);
    return;
  }
  if (!v.alive() || mine !== v.seq) return;
  if (sb.status === 'TERMINATED' && sidebar.list.filter !== 'terminated') { gone(v, sb); return; }
  v.sb = sb;
  sample(sb);
  sidebar.update(sb);
  renderHead();
  if (activeTab) panels[activeTab].record(v);
}

function gone(v, sb) {
  const name = (sb && sb.name) || (sidebar.summary(v.id) || {}).name || v.id;
  sidebar.remove(v.id);
  forget(v.id);
  notice(`Sandbox ${name} no longer exists; it was removed from the list.`, 'error', { place: { page: 'home' } });
  go({ page: 'home' }, { replace: true });
}

/** Drops what the page keeps for a sandbox that is gone. */
export function forget(id) {
  terminal.forget(id);
  commands.forget(id);
  notebook.forget(id);
  files.forget(id);
}

/** After a list refresh: reload the shown sandbox if its state moved. */
sidebar.onRefresh((sandboxes) => {
  if (!view || !view.sb) return;
  // "paused 2m ago" moves on with the clock.
  if (view.sb.status === 'PAUSED') renderHead();
  const listed = sandboxes.find((s) => s.id === view.id);
  const expected = sidebar.list.filter === 'terminated' ? 'TERMINATED' : null;
  if (!listed ? expected === null : listed.status !== view.sb.status) load(view, { quiet: true });
});

function renderHead() {
  const v = view;
  const sb = v.sb;
  const shown = sb || sidebar.summary(v.id);
  $('detail-name').textContent = shown ? shown.name : v.id;
  const chip = $('detail-status');
  const verb = busy.get(v.id);
  chip.textContent = sb ? sb.status : 'LOADING';
  chip.className = `chip ${sb ? sb.status : 'LOADING'}`;
  const st = sb ? sb.status : null;
  const paused = st === 'PAUSED';
  $('detail-sub').textContent = sb
    ? `${sb.id} · ${origin(sb)} · ${cores(sb.cpuCores)} · ${gb(sb.memoryGB)}${paused ? ` · ${pausedAgo(sb)}` : ''}${verb ? ` · ${verb.toLowerCase()}…` : ''}`
    : `${v.id} · loading…`;
  $('page-sandbox').setAttribute('aria-busy', String(!sb));
  const off = !sb || Boolean(verb);
  $('btn-start').disabled = off || !(st === 'STOPPED' || st === 'ERROR');
  $('btn-stop').disabled = off || !(st === 'RUNNING' || paused);
  // Pause on a running sandbox, Resume in its place on a paused one.
  $('btn-pause').hidden = paused;
  $('btn-pause').disabled = off || st !== 'RUNNING';
  $('btn-resume').hidden = !paused;
  $('btn-resume').disabled = off || !paused;
  $('btn-fork').disabled = off || !['RUNNING', 'PAUSED', 'STOPPED'].includes(st);
  $('btn-snapshot').disabled = off || !['RUNNING', 'PAUSED', 'STOPPED'].includes(st);
  $('btn-delete').disabled = off || st === 'TERMINATED';
  $('stopped-banner').hidden = !(st === 'STOPPED' || st === 'ERROR');
  $('banner-start').disabled = $('btn-start').disabled;
  $('paused-banner').hidden = !paused;
  $('banner-resume').disabled = $('btn-resume').disabled;
  if (paused) $('paused-text').textContent = pausedText(sb);
  $('terminated-banner').hidden = st !== 'TERMINATED';
}

/** What the paused banner says: since when, and what a paused sandbox still does. */
function pausedText(sb) {
  const wakes = sb.lifecycle && sb.lifecycle.autoResume
    ? 'It resumes by itself when it is used: a command, a terminal, a code cell, a file call or a request to one of its ports.'
    : 'Commands, the terminal, code cells and its ports are refused until it is resumed; its files can still be read and written.';
  return `This sandbox was ${pausedAgo(sb)}: its processes are frozen in place with their memory. ${wakes}`;
}

// ---------- actions ----------

/**
 * Runs one action on the sandbox shown when it was asked for: its id is
 * taken at the click, never later, and the view reloads only if that
 * sandbox is still the one shown.
 */
async function act(verb, infinitive, fn) {
  const v = view;
  if (!v || !v.sb || busy.has(v.id)) return undefined;
  const { id, name } = v.sb;
  busy.set(id, verb);
  renderHead();
  notice(`${verb} ${name}…`);
  let result;
  try {
    result = await fn(id, name);
    clearNotice();
  } catch (e) {
    showError(`Could not ${infinitive} ${name}`, e);
  } finally {
    busy.delete(id);
  }
  if (view && view.id === id) {
    renderHead();
    await load(view);
  }
  sidebar.refresh();
  return result;
}

const start = () => act('Starting', 'start', (id) => api('POST', sandboxPath(id, '/start'), undefined, { repeatable: true }));
$('btn-start').addEventListener('click', start);
$('banner-start').addEventListener('click', start);
$('btn-stop').addEventListener('click', () => act('Stopping', 'stop', (id) => api('POST', sandboxPath(id, '/stop'), undefined, { repeatable: true })));
$('btn-pause').addEventListener('click', () => act('Pausing', 'pause', (id) => api('POST', sandboxPath(id, '/pause'), undefined, { repeatable: true })));
const resume = () => act('Resuming', 'resume', (id) => api('POST', sandboxPath(id, '/resume'), undefined, { repeatable: true }));
$('btn-resume').addEventListener('click', resume);
$('banner-resume').addEventListener('click', resume);

$('btn-fork').addEventListener('click', async () => {
  if (!view || !view.sb) return;
  const source = view.sb;
  const name = await ask({
    title: `Fork ${source.name}`,
    text: 'A new sandbox starts with a copy of this one\'s filesystem; this one keeps running.',
    label: 'Name of the new sandbox', value: `${source.name}-fork`, confirm: 'Fork',
  });
  if (name === null) return;
  const made = await act('Forking', 'fork', (id) => api('POST', sandboxPath(id, '/fork'), name ? { name } : {}));
  if (made && made.id) {
    // The message goes with the user to the fork, and no further.
    notice(`Forked ${source.name} into ${made.name}.`, 'info', { place: { page: 'sandbox', id: made.id } });
    await sidebar.refresh();
    go({ page: 'sandbox', id: made.id, tab: preferredMode });
  }
});

$('btn-snapshot').addEventListener('click', async () => {
  if (!view || !view.sb) return;
  const source = view.sb;
  const name = await ask({
    title: `Snapshot ${source.name}`,
    text: 'Saves its filesystem (root changes and /workspace); new sandboxes can start from it.',
    label: 'Snapshot name (optional)', value: '', confirm: 'Take snapshot',
  });
  if (name === null) return;
  const snap = await act('Snapshotting', 'snapshot', (id) => api('POST', sandboxPath(id, '/snapshots'), name ? { name } : {}));
  if (snap && snap.id) {
    notice(`Snapshot ${snap.name} is ${String(snap.status).toLowerCase()}.`);
    if (view && view.id === source.id) go({ page: 'sandbox', id: source.id, tab: 'snapshots' });
    refreshSnapshots();
  }
});

let pendingDelete = null;
$('btn-delete').addEventListener('click', () => {
  if (!view || !view.sb) return;
  pendingDelete = { id: view.sb.id, name: view.sb.name };
  $('delete-name').textContent = pendingDelete.name;
  $('preserve-volume').checked = false;
  $('delete-sync').checked = false;
  $('delete-dialog').showModal();
});
$('delete-dialog').addEventListener('close', async () => {
  const target = pendingDelete;
  pendingDelete = null;
  if ($('delete-dialog').returnValue !== 'confirm' || !target) return;
  const { id, name } = target;
  const keep = $('preserve-volume').checked;
  const sync = $('delete-sync').checked;
  busy.set(id, 'Deleting');
  if (view && view.id === id) renderHead();
  notice(`Deleting ${name}…`);
  try {
    await api('DELETE', sandboxPath(id, `?preserveVolume=${keep}${sync ? '&sync=true' : ''}`));
    forget(id);
    sidebar.remove(id);
    const leaving = Boolean(view && view.id === id);
    notice(`Deleted ${name}.`, 'info', leaving ? { place: { page: 'home' } } : undefined);
    if (leaving) go({ page: 'home' });
  } catch (e) {
    showError(`Could not delete ${name}`, e);
  } finally {
    busy.delete(id);
    if (view && view.id === id) renderHead();
  }
  sidebar.refresh();
});

// ---------- tabs: click and arrow keys ----------

for (const t of TABS) {
  $(`tab-${t}`).addEventListener('click', () => {
    if (!view) return;
    go({ page: 'sandbox', id: view.id, tab: t === 'console' ? (consolePanel.mode || consolePanel.last || preferredMode) : t });
  });
}
document.querySelector('#page-sandbox .tabs').addEventListener('keydown', (e) => {
  const i = TABS.findIndex((t) => $(`tab-${t}`) === document.activeElement);
  if (i < 0) return;
  let j = null;
  if (e.key === 'ArrowRight') j = (i + 1) % TABS.length;
  else if (e.key === 'ArrowLeft') j = (i + TABS.length - 1) % TABS.length;
  else if (e.key === 'Home') j = 0;
  else if (e.key === 'End') j = TABS.length - 1;
  if (j === null) return;
  e.preventDefault();
  $(`tab-${TABS[j]}`).focus();
  $(`tab-${TABS[j]}`).click();
});

/** Closes every live connection (sign-out). */
export function closeAll() {
  hideSandbox();
  terminal.closeAll();
  notebook.closeAll();
}
