// Volumes: every volume with its size, owner and state,
// the orphaned ones (no live sandbox owns them), and their confirmed cleanup.

import { api } from './api.js';
import { $, el, notice, showError, ago, ask, table, busy } from './ui.js';
import { format } from './router.js';

let shown = false;

/**
 * The names of the caller's sandboxes, active and terminated, by id (a
 * volume names only its sandbox's id). What cannot be listed is left out:
 * its volumes show the id alone.
 */
export async function sandboxNames() {
  const lists = await Promise.all(['per_page=1000', 'is_active=false&per_page=1000']
    .map((q) => api('GET', `/api/v1/sandbox?${q}`).catch(() => ({ sandboxes: [] }))));
  return new Map(lists.flatMap((l) => l.sandboxes).map((s) => [s.id, s.name]));
}

/** The sandbox a volume belongs to: its name (a link while it lives), then its id and state. */
function sandboxCell(v, names) {
  const name = names.get(v.sandboxId);
  const live = v.sandboxStatus && v.sandboxStatus !== 'TERMINATED';
  const label = name || v.sandboxId;
  return el('td', { 'data-sandbox': v.sandboxId },
    live ? el('a', { href: format({ page: 'sandbox', id: v.sandboxId, tab: 'details' }) }, label) : el('span', {}, label),
    el('div', { class: 'muted small' }, [name ? v.sandboxId : null, v.sandboxStatus].filter(Boolean).join(' · ')));
}

async function load() {
  const orphansOnly = $('volumes-orphans').checked;
  const host = $('volumes-list');
  let answer;
  let names;
  try {
    [answer, names] = await Promise.all([
      api('GET', orphansOnly ? '/api/v1/volumes/orphaned' : '/api/v1/volumes'),
      sandboxNames(),
    ]);
  } catch (e) {
    if (!shown) return;
    host.textContent = '';
    host.append(el('p', { class: 'error' }, `Could not load volumes: ${e.message}`));
    return;
  }
  if (!shown || orphansOnly !== $('volumes-orphans').checked) return;
  const vols = answer.volumes;
  const orphans = vols.filter((v) => v.orphaned);
  $('volumes-summary').textContent = `${answer.total} ${answer.total === 1 ? 'volume' : 'volumes'}, ${answer.totalSize} in all`
    + (orphansOnly ? '' : `; ${orphans.length} orphaned`);
  host.textContent = '';
  if (!vols.length) {
    host.append(el('p', { class: 'muted' }, orphansOnly ? 'No orphaned volumes.' : 'No volumes.'));
    return;
  }
  const rows = vols.map((v) => el('tr', { 'data-volume': v.name },
    sandboxCell(v, names),
    el('td', { class: 'mono small' }, v.name, v.warning ? el('div', { class: 'warn small' }, v.warning) : null),
    el('td', { class: 'num' }, v.size || '—'),
    el('td', {}, v.createdAt ? ago(v.createdAt) : '—'),
    el('td', {}, v.inUse ? 'in use' : (v.orphaned ? el('span', { class: 'warn' }, 'orphaned') : 'idle')),
    el('td', {}, v.orphaned ? el('button', { class: 'small danger', type: 'button', 'aria-label': `Delete volume ${v.name}`, onclick: (e) => busy(e.target, () => removeOne(v)) }, 'Delete') : null)));
  host.append(table(['Sandbox', 'Volume', 'Size', 'Created', 'State', ''], rows, { class: 'volumes' }));
}

async function removeOne(v) {
  const ok = await ask({ title: `Delete volume ${v.name}?`, text: `Its files are gone for good${v.size ? ` (${v.size})` : ''}.`, label: null, confirm: 'Delete', danger: true });
  if (ok === null) return;
  try {
    await api('DELETE', `/api/v1/volumes/${encodeURIComponent(v.name)}`);
    notice(`Deleted volume ${v.name}.`);
  } catch (e) {
    showError(`Could not delete volume ${v.name}`, e);
  }
  load();
}

$('volumes-orphans').addEventListener('change', load);
$('volumes-cleanup').addEventListener('click', (e) => busy(e.target, async () => {
  let orphans;
  try {
    orphans = await api('GET', '/api/v1/volumes/orphaned');
  } catch (err) {
    showError('Could not list orphaned volumes', err);
    return;
  }
  if (!orphans.total) {
    notice('There are no orphaned volumes to remove.');
    return;
  }
  const ok = await ask({
    title: `Remove ${orphans.total} orphaned ${orphans.total === 1 ? 'volume' : 'volumes'}?`,
    text: `No live sandbox owns them; together they hold ${orphans.totalSize}. Their files are gone for good.`,
    label: null, confirm: 'Remove them', danger: true,
  });
  if (ok === null) return;
  try {
    const r = await api('DELETE', '/api/v1/volumes/orphaned?confirm=true');
    const failed = r.failed.length ? `; ${r.failed.length} could not be removed: ${r.failed.map((f) => `${f.name} (${f.error.message})`).join(', ')}` : '';
    notice(`Removed ${r.removed.length} ${r.removed.length === 1 ? 'volume' : 'volumes'} and freed ${r.freed}${failed}.`, r.failed.length ? 'error' : 'info');
  } catch (err) {
    showError('Could not remove the orphaned volumes', err);
  }
  load();
}));

export const volumesPage = {
  show() { shown = true; load(); },
  hide() { shown = false; },
};
