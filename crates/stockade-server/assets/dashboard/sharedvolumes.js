// Shared volumes: the account's named volumes that its sandboxes mount,
// each with the sandboxes that mount it; create, and delete (refused with
// the server's reason while a sandbox mounts it). One volume's page holds
// its facts and a browser of its files: folders by breadcrumbs, upload by
// picking or dropping files, download, new folder, rename and delete.
// Symlinks are shown with their target and never followed.

import { api, volumePath, volumeFilesUrl } from './api.js';
import { $, el, notice, showError, explain, ago, when, ask, table, busy, parseNumber, FieldError, markFields, statusLine, submitCreate } from './ui.js';
import { go, format } from './router.js';
import { sandboxNames } from './volumes.js';
import { entryActions, entriesTable, uploadPicker, uploadAll, dropTarget, askFolder, askRename, askDelete,
  attempt } from './fileparts.js';

/** The route shown; null while another page is. */
let route = null;
let listSeq = 0;
/**
 * The volume shown: `{ ref, record, dir, entries, seq }`, its name or id
 * as the URL gives it, its record once loaded, and the folder shown with
 * its entries (null while they load).
 */
let view = null;

const form = $('shared-volume-form');
/** API field → the create form's input. */
const FIELDS = { name: 'name', sizeGB: 'sizeGB' };

/** The account's shared volumes, newest first. */
export async function sharedVolumes() {
  return (await api('GET', '/api/v1/shared-volumes')).volumes;
}

/** The sandboxes that mount a volume: each a link, with the path, "(ro)" when read-only. */
function mountedBy(v, names) {
  if (!v.mounts.length) return el('span', { class: 'muted' }, 'no sandbox');
  return v.mounts.map((m) => el('div', { 'data-sandbox': m.sandboxId },
    el('a', { href: format({ page: 'sandbox', id: m.sandboxId, tab: 'details' }) }, names.get(m.sandboxId) || m.sandboxId),
    ` at ${m.path}${m.readOnly ? ' (ro)' : ''}`));
}

function sizeOf(v) {
  return v.sizeGB ? `${v.sizeGB} GB` : 'no limit';
}

/** Asks, then deletes a volume; the server's refusal (a sandbox mounts it) is shown. Answers whether it went. */
async function removeVolume(v) {
  const ok = await ask({
    title: `Delete volume ${v.name}?`,
    text: 'Its files are gone for good. While a sandbox mounts it, it is not deleted.',
    label: null, confirm: 'Delete', danger: true,
  });
  if (ok === null) return false;
  try {
    await api('DELETE', volumePath(v.id));
  } catch (e) {
    showError(`Could not delete volume ${v.name}`, e);
    return false;
  }
  notice(`Deleted volume ${v.name}.`, 'info', { place: { page: 'shared-volumes' } });
  return true;
}

// ---------- the list ----------

function listShown() {
  return Boolean(route && !route.volume);
}

async function loadList() {
  const mine = ++listSeq;
  const host = $('shared-volumes-list');
  let vols; let names;
  try {
    [vols, names] = await Promise.all([sharedVolumes(), sandboxNames()]);
  } catch (e) {
    if (!listShown() || mine !== listSeq) return;
    host.textContent = '';
    host.append(el('p', { class: 'error' }, `Could not load the shared volumes: ${explain(e)}`));
    return;
  }
  if (!listShown() || mine !== listSeq) return;
  host.textContent = '';
  if (!vols.length) {
    host.append(el('p', { class: 'muted', id: 'shared-volumes-empty' }, 'No shared volumes yet.'));
    return;
  }
  const rows = vols.map((v) => el('tr', { 'data-volume': v.name },
    el('td', {}, el('a', { href: format({ page: 'shared-volumes', volume: v.name }) }, v.name),
      v.status === 'READY' ? null : el('div', { class: 'muted small' }, v.status)),
    el('td', {}, v.server),
    el('td', { class: 'num' }, sizeOf(v)),
    el('td', { 'data-mounts': '' }, mountedBy(v, names)),
    el('td', {}, ago(v.createdAt)),
    el('td', {}, el('button', {
      class: 'small danger', type: 'button', 'aria-label': `Delete volume ${v.name}`,
      onclick: (e) => busy(e.target, async () => { await removeVolume(v); loadList(); }),
    }, 'Delete'))));
  host.append(table(['Name', 'Host', 'Size', 'Mounted by', 'Created', ''], rows, { class: 'shared-volumes', id: 'shared-volumes-table' }));
}

const formStatus = statusLine('shared-volume-status');

form.addEventListener('submit', (e) => {
  e.preventDefault();
  const f = form.elements;
  const body = { name: f.name.value.trim() };
  try {
    const size = parseNumber(f.sizeGB.value, 'sizeGB', { min: 1, integer: true });
    if (size !== undefined) body.sizeGB = size;
  } catch (err) {
    if (!(err instanceof FieldError)) throw err;
    markFields(form, [err], FIELDS);
    formStatus(`Not created: ${err.message}`, 'error');
    return;
  }
  busy($('shared-volume-create'), async () => {
    formStatus('Creating…', 'loading');
    const made = await submitCreate(form, FIELDS, formStatus, () =>
      api('POST', '/api/v1/shared-volumes', body));
    if (!made) return;
    formStatus(`Created volume ${made.name}.`);
    if (listShown()) loadList();
  });
});

// ---------- one volume ----------

function link(v, path) {
  return format({ page: 'shared-volumes', volume: v.ref, path });
}

/** A volume's entry in the shape the file table takes (that of a sandbox's files). */
function entryOf(e) {
  return {
    name: e.name,
    path: e.path,
    type: e.type === 'directory' ? 'dir' : e.type,
    size: e.size,
    modifiedAt: e.mtime,
    mode: (e.mode & 0o7777).toString(8).padStart(4, '0'),
    linkTarget: e.target,
  };
}

async function loadRecord(v) {
  let record; let names;
  try {
    [record, names] = await Promise.all([api('GET', volumePath(v.ref)), sandboxNames()]);
  } catch (e) {
    if (view !== v) return;
    if (e.status === 404) {
      notice(`There is no shared volume ${v.ref}.`, 'error', { place: { page: 'shared-volumes' } });
      go({ page: 'shared-volumes' }, { replace: true });
    } else showError(`Could not load the shared volume ${v.ref}`, e);
    return;
  }
  if (view !== v) return;
  v.record = record;
  $('shared-volume-name').textContent = record.name;
  $('shared-volume-new-sandbox').href = format({ page: 'new', params: { volume: record.name } });
  const rows = [
    ['Host', record.server],
    ['Size', sizeOf(record)],
    ['Status', record.status],
    ['Mounted by', mountedBy(record, names)],
    ['Created', `${when(record.createdAt)} (${ago(record.createdAt)})`],
    ['ID', record.id],
  ];
  const labels = Object.entries(record.labels || {});
  if (labels.length) rows.push(['Labels', labels.map(([k, val]) => `${k}=${val}`).join(', ')]);
  const facts = $('shared-volume-facts');
  facts.textContent = '';
  for (const [k, val] of rows) facts.append(el('dt', {}, k), el('dd', { 'data-fact': k }, val));
  // The root's crumb carries the volume's name, known now.
  if (v.entries || v.problem) renderDir(v);
}

/** The folders from the root down to the one shown: links, the last one the place shown. */
function crumbs(v) {
  const parts = v.dir === '/' ? [] : v.dir.slice(1).split('/');
  const items = [{ path: '/', label: v.record ? v.record.name : v.ref }];
  parts.forEach((p, i) => items.push({ path: `/${parts.slice(0, i + 1).join('/')}`, label: p }));
  return el('nav', { class: 'crumbs', id: 'volume-crumbs', 'aria-label': 'Folder' },
    el('ol', {}, items.map((c, i) => el('li', { 'data-dir': c.path },
      i === items.length - 1 ? el('span', { 'aria-current': 'page' }, c.label) : el('a', { href: link(v, c.path) }, c.label)))));
}

function renderDir(v) {
  const box = $('volume-files');
  const dir = v.dir;
  box.textContent = '';
  box.append(el('div', { class: 'file-head', 'data-dir': dir },
    crumbs(v),
    el('span', { class: 'spacer' }),
    el('button', { type: 'button', id: 'volume-mkdir', onclick: () => mkdir(v, dir) }, 'New folder'),
    uploadPicker('volume-upload', (items) => upload(v, dir, items)),
    el('button', { type: 'button', id: 'volume-refresh', onclick: () => openDir(v, dir, { quiet: true }) }, 'Refresh')));
  if (v.problem) {
    box.append(el('p', { class: 'error', id: 'volume-status' }, v.problem));
    return;
  }
  if (!v.entries) {
    box.append(el('p', { class: 'muted' }, 'loading…'));
    return;
  }
  if (!v.entries.length) {
    box.append(el('p', { class: 'muted', id: 'volume-status' }, 'This folder is empty. Drop files here to upload them.'));
    return;
  }
  box.append(entriesTable(v.entries, {
    id: 'volume-entries',
    href: (e) => (e.type === 'dir' ? link(v, e.path) : null),
    isDir: (e) => e.type === 'dir',
    actions: (e, isDir) => entryActions({
      name: e.name,
      href: e.type === 'file' ? volumeFilesUrl(v.ref, e.path, '/content') : null,
      download: e.name,
      onRename: () => rename(v, e.path),
      onDelete: () => remove(v, e.path, isDir),
    }),
  }));
}

/** Lists folder `dir` and shows it; `quiet` keeps the entries shown until the new ones are in. */
async function openDir(v, dir, { quiet = false } = {}) {
  const mine = ++v.seq;
  if (!quiet || v.dir !== dir) {
    v.dir = dir;
    v.entries = null;
    v.problem = null;
    renderDir(v);
  }
  let listing;
  try {
    listing = await api('GET', volumeFilesUrl(v.ref, dir));
  } catch (e) {
    if (view !== v || mine !== v.seq) return;
    v.entries = null;
    v.problem = e.status === 404 ? `${dir} does not exist in this volume.` : `Could not open ${dir}: ${explain(e)}`;
    renderDir(v);
    return;
  }
  if (view !== v || mine !== v.seq) return;
  v.problem = null;
  v.entries = listing.entries.map(entryOf)
    .sort((a, b) => ((a.type === 'dir') === (b.type === 'dir') ? a.name.localeCompare(b.name) : (a.type === 'dir' ? -1 : 1)));
  renderDir(v);
}

/** After a change: the folder shown again, as it is now. */
function reload(v) {
  if (view === v) return openDir(v, v.dir, { quiet: true });
  return undefined;
}

async function mkdir(v, dir) {
  const path = await askFolder(dir, '/');
  if (!path || view !== v) return;
  if (!await attempt(`Could not create the folder ${path}`, () => api('POST', volumeFilesUrl(v.ref, path, '/mkdir', '&parents=true')))) return;
  notice(`Created the folder ${path}.`);
  await reload(v);
}

async function rename(v, path) {
  const to = await askRename(path, '/');
  if (!to || view !== v) return;
  if (!await attempt(`Could not rename ${path}`, () => api('POST', volumePath(v.ref, '/files/rename'), { from: path, to }))) return;
  notice(`Renamed ${path} to ${to}.`);
  await reload(v);
}

async function remove(v, path, dir) {
  if (!await askDelete(path, dir, 'the volume') || view !== v) return;
  if (!await attempt(`Could not delete ${path}`, () => api('DELETE', volumeFilesUrl(v.ref, path)))) return;
  notice(`Deleted ${path}.`);
  await reload(v);
}

async function upload(v, dir, items) {
  if (!items.length || view !== v) return;
  await uploadAll(dir, items,
    (path, file) => api('PUT', volumeFilesUrl(v.ref, path, '/content'), file, { raw: true, headers: { 'Content-Type': 'application/octet-stream' } }));
  await reload(v);
}

dropTarget($('volume-files'), {
  active: () => Boolean(view && view.entries),
  fallbackDir: () => view.dir,
  onDrop: (dir, items) => upload(view, dir, items),
});

$('shared-volume-delete').addEventListener('click', (e) => busy(e.target, async () => {
  const v = view;
  if (!v || !v.record) return;
  if (await removeVolume(v.record) && view === v) go({ page: 'shared-volumes' });
}));

function showVolume(r) {
  if (!view || view.ref !== r.volume) {
    view = { ref: r.volume, record: null, dir: null, entries: null, problem: null, seq: 0 };
    $('shared-volume-name').textContent = r.volume;
    $('shared-volume-facts').textContent = '';
    $('shared-volume-new-sandbox').href = format({ page: 'new', params: { volume: r.volume } });
    loadRecord(view);
  }
  if (view.dir !== r.path) openDir(view, r.path);
}

export const sharedVolumesPage = {
  show(r) {
    route = r;
    $('shared-volumes-index').hidden = Boolean(r.volume);
    $('shared-volume').hidden = !r.volume;
    if (r.volume) showVolume(r);
    else {
      view = null;
      loadList();
    }
  },
  hide() {
    route = null;
    view = null;
    formStatus('');
  },
};
