// Snapshots: the caller's snapshots, or one sandbox's, with
// "new sandbox from it" and delete; snapshots being made or deleted are
// followed until they settle.

import { api, sandboxPath } from './api.js';
import { $, el, notice, showError, ago, ask, table, busy } from './ui.js';
import { format } from './router.js';

let pageShown = false;
let panelView = null;
let pollTimer = null;

function snapshotTable(snaps, { withSource }) {
  const rows = snaps.map((s) => {
    const ready = s.status === 'READY';
    return el('tr', { 'data-snapshot': s.id },
      el('td', {}, el('strong', {}, s.name), el('div', { class: 'muted small' }, s.id)),
      el('td', {}, el('span', { class: `chip ${s.status}` }, s.status)),
      el('td', {}, s.workspaceSize || '—'),
      el('td', {}, ago(s.createdAt)),
      withSource ? el('td', {}, el('a', { href: format({ page: 'sandbox', id: s.sourceSandboxId, tab: 'details' }) }, s.sourceSandboxId)) : null,
      el('td', {}, el('span', { class: 'row-actions' },
        ready ? el('a', { class: 'button small primary', href: format({ page: 'new', params: { snapshot: s.id } }) }, 'New sandbox from it') : null,
        s.status === 'DELETING' || s.status === 'DELETED' ? null
          : el('button', { class: 'small danger', type: 'button', 'aria-label': `Delete snapshot ${s.name}`, onclick: (e) => busy(e.target, () => removeSnapshot(s)) }, 'Delete'))));
  });
  const headers = ['Snapshot', 'Status', '/workspace', 'Created'];
  if (withSource) headers.push('From sandbox');
  headers.push('');
  return table(headers, rows, { class: 'snapshots' });
}

async function removeSnapshot(s) {
  const ok = await ask({ title: `Delete snapshot ${s.name}?`, text: 'Sandboxes made from it keep running; no new ones can start from it.', label: null, confirm: 'Delete', danger: true });
  if (ok === null) return;
  try {
    await api('DELETE', `/api/v1/snapshots/${encodeURIComponent(s.id)}`);
    notice(`Snapshot ${s.name} is being deleted.`);
  } catch (e) {
    showError(`Could not delete snapshot ${s.name}`, e);
  }
  reload();
}

function settling(snaps) {
  return snaps.some((s) => s.status === 'CREATING' || s.status === 'DELETING');
}

function schedule(snaps) {
  clearTimeout(pollTimer);
  if (settling(snaps)) pollTimer = setTimeout(reload, 2000);
}

function reload() {
  if (pageShown) loadPage();
  else if (panelView) loadPanel(panelView);
}

async function loadPage() {
  const host = $('snapshots-list');
  let snaps;
  try {
    snaps = (await api('GET', '/api/v1/snapshots')).snapshots;
  } catch (e) {
    if (!pageShown) return;
    host.textContent = '';
    host.append(el('p', { class: 'error' }, `Could not load snapshots: ${e.message}`));
    return;
  }
  if (!pageShown) return;
  snaps = snaps.filter((s) => s.status !== 'DELETED');
  host.textContent = '';
  host.append(snaps.length ? snapshotTable(snaps, { withSource: true }) : el('p', { class: 'muted' }, 'No snapshots yet. Take one from a sandbox\'s Snapshot button.'));
  schedule(snaps);
}

async function loadPanel(v) {
  const host = $('sandbox-snapshots');
  let snaps;
  try {
    snaps = (await api('GET', sandboxPath(v.id, '/snapshots'))).snapshots;
  } catch (e) {
    if (panelView !== v) return;
    host.textContent = '';
    host.append(el('p', { class: 'error' }, `Could not load snapshots: ${e.message}`));
    return;
  }
  if (panelView !== v) return;
  snaps = snaps.filter((s) => s.status !== 'DELETED');
  host.textContent = '';
  host.append(snaps.length ? snapshotTable(snaps, { withSource: false }) : el('p', { class: 'muted' }, 'No snapshots of this sandbox yet.'));
  schedule(snaps);
}

$('snapshot-take').addEventListener('click', () => $('btn-snapshot').click());

/** Reloads the snapshots shown (after one was taken). */
export function refreshSnapshots() {
  reload();
}

export const snapshotsPanel = {
  enter(v) {
    panelView = v;
    $('sandbox-snapshots').textContent = '';
    loadPanel(v);
    this.record(v);
  },
  record(v) {
    if (v !== panelView) return;
    $('snapshot-take').disabled = $('btn-snapshot').disabled;
  },
  leave() {
    panelView = null;
    clearTimeout(pollTimer);
  },
};

export const snapshotsPage = {
  show() {
    pageShown = true;
    loadPage();
  },
  hide() {
    pageShown = false;
    clearTimeout(pollTimer);
  },
};

/** READY snapshots, for the create form's source list. */
export async function readySnapshots() {
  const all = (await api('GET', '/api/v1/snapshots')).snapshots;
  return all.filter((s) => s.status === 'READY');
}
