// The file browser tab: a tree of /workspace (or of / for any other
// path typed in), upload by drag and drop or by picking files, download,
// new folder, rename, delete, and a viewer/editor for small text files.
// Changes made inside the sandbox show at once through the watch stream, or
// when the window gets the focus back where the server has no watch.

import { api, sse, filesUrl, routeMissing } from './api.js';
import { $, el, notice, showError, bytes, when, busy } from './ui.js';
import { go, format } from './router.js';
import { parentOf, nameOf, join, within, normalise as tidy, entryActions, entriesTable, uploadPicker, uploadAll,
  dropTarget, askFolder, askRename, askDelete, attempt } from './fileparts.js';

const WORKSPACE = '/workspace';
/** Files larger than this are offered for download, not opened. */
const EDIT_LIMIT = 1024 * 1024;
const WATCH_EVENTS = new Set(['create', 'write', 'remove', 'rename', 'chmod']);

/** sandbox id → what the browser holds for it (listings, open folders, drafts). */
const states = new Map();
let current = null; // the view shown
let st = null; // states.get(current.id)
let watch = null; // { abort, root }
let watchSupported = true;
let live = false; // the watch stream is open
let fileSeq = 0;
let refreshTimer = null;
const pendingDirs = new Set();

function stateOf(id) {
  let s = states.get(id);
  if (!s) {
    s = { id, root: WORKSPACE, dirs: new Map(), expanded: new Set([WORKSPACE]), selected: WORKSPACE, kind: 'dir', drafts: new Map(), file: null };
    states.set(id, s);
  }
  return s;
}

// ---------- paths ----------

function rootFor(p) { return within(p, WORKSPACE) ? WORKSPACE : '/'; }
/** Absolute and tidy: relative paths are below /workspace. */
function normalise(input) { return tidy(input, WORKSPACE); }
/** The folders from `root` down to `dir`, both included. */
function chain(root, dir) {
  const out = [root];
  if (dir === root) return out;
  const rest = (root === '/' ? dir.slice(1) : dir.slice(root.length + 1)).split('/');
  let p = root;
  for (const part of rest) { p = join(p, part); out.push(p); }
  return out;
}

function alive(v) { return current === v && v.alive(); }
function currentDir() { return st.kind === 'dir' ? st.selected : parentOf(st.selected); }
function goTo(path, opts) { go({ page: 'sandbox', id: current.id, tab: 'files', path }, opts); }

// ---------- listings ----------

async function loadDir(v, s, dir) {
  const listing = await api('GET', filesUrl(s.id, dir));
  if (!listing || !Array.isArray(listing.entries)) throw new Error(`${dir} is not a folder`);
  listing.entries.sort((a, b) => (a.type === 'dir') === (b.type === 'dir') ? a.name.localeCompare(b.name) : (a.type === 'dir' ? -1 : 1));
  s.dirs.set(dir, listing);
  return listing;
}

function entryOf(s, path) {
  const listing = s.dirs.get(parentOf(path));
  return listing ? listing.entries.find((e) => e.path === path || e.name === nameOf(path)) || null : null;
}

function isDirEntry(s, e) {
  return e.type === 'dir' || (e.type === 'symlink' && s.dirs.has(e.path));
}

/** Reloads the listed folders (all, or those in `only`) and redraws. */
async function reloadDirs(only) {
  const v = current; const s = st;
  if (!v) return;
  const dirs = [...s.dirs.keys()].filter((d) => !only || only.has(d));
  await Promise.all(dirs.map(async (d) => {
    try { await loadDir(v, s, d); } catch (_) { s.dirs.delete(d); }
  }));
  if (!alive(v) || st !== s) return;
  renderTree();
  if (s.kind === 'dir') {
    if (s.dirs.has(s.selected)) renderDir(s.selected);
    else if (dirs.includes(s.selected)) goTo(parentOf(s.selected), { replace: true });
  } else if (!entryOf(s, s.selected) && s.dirs.has(parentOf(s.selected)) && $('file-status')) {
    $('file-status').textContent = 'This file no longer exists in the sandbox.';
  }
}

// ---------- showing a path ----------

async function show(path) {
  const v = current; const s = st;
  path = normalise(path);
  s.selected = path;
  $('files-path').value = path;
  const root = rootFor(path);
  if (root !== s.root) {
    s.root = root;
    s.expanded.add(root);
    startWatch();
  }
  const folders = chain(root, path === root ? root : parentOf(path));
  for (const d of folders) s.expanded.add(d);
  renderTree();
  try {
    for (const d of folders) if (!s.dirs.has(d)) await loadDir(v, s, d);
  } catch (e) {
    if (!alive(v) || st !== s) return;
    renderMessage(`Could not open ${path}: ${e.message}`);
    renderTree();
    return;
  }
  if (!alive(v) || st !== s || s.selected !== path) return;
  let entry = path === root ? { path, name: nameOf(path), type: 'dir' } : entryOf(s, path);
  if (!entry) {
    try { entry = await api('GET', filesUrl(s.id, path, '/stat')); } catch (e) {
      if (!alive(v) || st !== s || s.selected !== path) return;
      renderTree();
      renderMessage(e.status === 404 ? `${path} does not exist in this sandbox.` : `Could not open ${path}: ${e.message}`);
      return;
    }
    if (!alive(v) || st !== s || s.selected !== path) return;
  }
  if (entry.type === 'dir' || entry.type === 'symlink') {
    // A symlink may lead to a folder: its listing says so.
    try {
      if (!s.dirs.has(path)) await loadDir(v, s, path);
      if (!alive(v) || st !== s || s.selected !== path) return;
      s.kind = 'dir';
      s.expanded.add(path);
      renderTree();
      renderDir(path);
      return;
    } catch (e) {
      if (entry.type === 'dir') {
        if (alive(v) && st === s) renderMessage(`Could not list ${path}: ${e.message}`);
        return;
      }
    }
  }
  if (!alive(v) || st !== s || s.selected !== path) return;
  s.kind = 'file';
  renderTree();
  renderFile(entry);
}

// ---------- the tree ----------

/** What has the focus inside `box`: its row's path and which control. */
function focusIn(box) {
  const a = document.activeElement;
  if (!box.contains(a)) return null;
  const row = a.closest('[data-path]');
  if (row) return { path: row.getAttribute('data-path'), label: a.getAttribute('aria-label') || a.textContent };
  return a.id ? { id: a.id } : null;
}

/** Gives the focus back to the same control after a redraw. */
function refocus(box, was) {
  if (!was) return;
  if (was.id) {
    const again = document.getElementById(was.id);
    if (again && box.contains(again)) again.focus();
    return;
  }
  const row = box.querySelector(`[data-path="${CSS.escape(was.path)}"]`);
  if (!row) return;
  const same = [...row.querySelectorAll('a, button')].find((c) => (c.getAttribute('aria-label') || c.textContent) === was.label);
  (same || row.querySelector('a, button') || row).focus();
}

function renderTree() {
  const s = st;
  const ul = $('file-tree');
  const was = focusIn(ul);
  ul.textContent = '';
  ul.append(treeNode(s, { path: s.root, name: s.root, type: 'dir' }));
  refocus(ul, was);
}

function treeNode(s, entry) {
  const dir = isDirEntry(s, entry);
  const open = dir && s.expanded.has(entry.path);
  const li = el('li', { 'data-path': entry.path, 'data-dir': dir ? entry.path : null, class: dir ? 'dir' : 'file' });
  const row = el('div', { class: 'tree-row' });
  if (dir) {
    row.append(el('button', {
      class: 'toggle', type: 'button', 'aria-expanded': String(open),
      'aria-label': `${open ? 'Collapse' : 'Expand'} ${entry.name}`,
      onclick: () => toggle(entry.path),
    }, open ? '▾' : '▸'));
  } else row.append(el('span', { class: 'toggle-space' }));
  row.append(el('a', {
    href: linkTo(s, entry.path),
    class: 'tree-link', 'aria-current': s.selected === entry.path ? 'page' : null,
  }, entry.name + (entry.type === 'symlink' ? ' ↗' : '') + (dir && entry.path !== s.root ? '/' : '')));
  li.append(row);
  if (open) {
    const listing = s.dirs.get(entry.path);
    const kids = el('ul', { role: 'group' });
    if (!listing) kids.append(el('li', { class: 'muted small' }, 'loading…'));
    else {
      for (const child of listing.entries) kids.append(treeNode(s, child));
      if (!listing.entries.length) kids.append(el('li', { class: 'muted small' }, 'empty'));
    }
    li.append(kids);
  }
  return li;
}

async function toggle(path) {
  const v = current; const s = st;
  if (s.expanded.has(path)) {
    s.expanded.delete(path);
    renderTree();
    return;
  }
  s.expanded.add(path);
  renderTree();
  if (!s.dirs.has(path)) {
    try { await loadDir(v, s, path); } catch (e) { showError(`Could not list ${path}`, e); s.expanded.delete(path); }
    if (alive(v) && st === s) renderTree();
  }
}

// ---------- the right-hand pane ----------

function renderMessage(text) {
  const view = $('file-view');
  view.textContent = '';
  view.append(el('p', { class: 'muted', id: 'file-status' }, text));
}

function linkTo(s, path) {
  return format({ page: 'sandbox', id: s.id, tab: 'files', path });
}

function actionsFor(s, entry, dir) {
  const name = nameOf(entry.path);
  return entryActions({
    name,
    href: dir ? filesUrl(s.id, entry.path, '/archive') : filesUrl(s.id, entry.path),
    download: dir ? `${name === '/' ? 'root' : name}.tar` : name,
    guarded: entry.path === '/' || entry.path === WORKSPACE,
    onRename: () => rename(entry.path),
    onDelete: () => remove(entry.path, dir),
  });
}

function renderDir(dir) {
  const s = st;
  const listing = s.dirs.get(dir);
  const view = $('file-view');
  const was = focusIn(view);
  view.textContent = '';
  view.append(
    el('div', { class: 'file-head', 'data-dir': dir },
      el('h3', { id: 'file-title' }, dir),
      el('span', { class: 'spacer' }),
      el('button', { type: 'button', id: 'files-mkdir', onclick: () => mkdir(dir) }, 'New folder'),
      uploadPicker('file-upload', (items) => upload(dir, items)),
      actionsFor(s, { path: dir }, true)),
  );
  if (!listing) { view.append(el('p', { class: 'muted' }, 'loading…')); return; }
  if (!listing.entries.length) view.append(el('p', { class: 'muted', id: 'file-status' }, 'This folder is empty. Drop files here to upload them.'));
  else {
    view.append(entriesTable(listing.entries, {
      id: 'file-entries',
      href: (e) => linkTo(s, e.path),
      isDir: (e) => isDirEntry(s, e),
      actions: (e, isDir) => actionsFor(s, e, isDir),
    }));
    if (listing.truncated) view.append(el('p', { class: 'muted small' }, 'Only the first entries of this folder are listed.'));
  }
  refocus(view, was);
}

function metaOf(entry) {
  return `${bytes(entry.size)} · ${entry.mode || ''}${entry.modifiedAt ? ` · ${when(entry.modifiedAt)}` : ''}`;
}

async function renderFile(entry) {
  const v = current; const s = st;
  const mine = ++fileSeq;
  const path = entry.path;
  const view = $('file-view');
  view.textContent = '';
  const status = el('p', { class: 'status-line', id: 'file-status', role: 'status' });
  view.append(
    el('div', { class: 'file-head' },
      el('h3', { id: 'file-title' }, path),
      el('span', { class: 'muted small', id: 'file-meta' }, metaOf(entry)),
      el('span', { class: 'spacer' }),
      actionsFor(s, entry, false)),
    status);
  if (entry.size > EDIT_LIMIT) {
    status.textContent = `This file is ${bytes(entry.size)}: larger than 1 MiB, so it is not opened here. Download it instead.`;
    s.file = null;
    return;
  }
  status.textContent = 'loading…';
  let buf;
  try {
    const resp = await api('GET', filesUrl(s.id, path), undefined, { response: true });
    buf = await resp.arrayBuffer();
  } catch (e) {
    if (mine === fileSeq && alive(v)) status.textContent = `Could not read ${path}: ${e.message}`;
    return;
  }
  if (mine !== fileSeq || !alive(v) || st !== s || s.selected !== path) return;
  let text = null;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(buf);
    if (text.includes('\u0000')) text = null;
  } catch (_) { text = null; }
  if (text === null) {
    status.textContent = `A binary file (${bytes(buf.byteLength)}): download it to look inside.`;
    s.file = null;
    return;
  }
  const draft = s.drafts.get(path);
  const area = el('textarea', { id: 'file-editor', class: 'editor', spellcheck: 'false', 'aria-label': `Contents of ${path}` });
  area.value = draft !== undefined ? draft : text;
  const save = el('button', { type: 'button', id: 'file-save', class: 'primary', disabled: draft === undefined }, 'Save');
  s.file = { path, original: text };
  status.textContent = draft !== undefined ? 'Unsaved changes (kept while this page is open).' : '';
  area.addEventListener('input', () => {
    const dirty = area.value !== s.file.original;
    if (dirty) s.drafts.set(path, area.value); else s.drafts.delete(path);
    save.disabled = !dirty;
    status.textContent = dirty ? 'Unsaved changes.' : '';
  });
  const doSave = () => busy(save, async () => {
    const body = area.value;
    status.textContent = 'Saving…';
    try {
      await api('PUT', filesUrl(s.id, path), body, { raw: true, headers: { 'Content-Type': 'application/octet-stream' } });
    } catch (e) {
      status.textContent = `Not saved: ${e.message}`;
      showError(`Could not save ${path}`, e);
      return;
    }
    s.file.original = body;
    if (area.value === body) s.drafts.delete(path);
    status.textContent = `Saved at ${new Date().toLocaleTimeString()}.`;
    if (!live) await reloadDirs(new Set([parentOf(path)]));
    const fresh = entryOf(s, path);
    if (fresh && $('file-meta') && s.selected === path) $('file-meta').textContent = metaOf(fresh);
  }).finally(() => { save.disabled = area.value === s.file.original; });
  save.addEventListener('click', doSave);
  area.addEventListener('keydown', (e) => {
    if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === 's') { e.preventDefault(); doSave(); }
  });
  view.append(area, el('div', { class: 'row end' }, el('span', { class: 'muted small' }, 'Ctrl+S saves'), save));
}

// ---------- changes ----------

async function mkdir(dir) {
  const v = current;
  const path = await askFolder(dir, WORKSPACE);
  if (!path || !alive(v)) return;
  if (!await attempt(`Could not create the folder ${path}`, () => api('POST', filesUrl(v.id, path, '/mkdir')))) return;
  notice(`Created the folder ${path}.`);
  if (alive(v)) await reloadDirs(new Set([parentOf(path), dir]));
}

async function rename(path) {
  const v = current;
  const to = await askRename(path, WORKSPACE);
  if (!to || !alive(v)) return;
  const moved = await attempt(`Could not rename ${path}`,
    () => api('POST', `/api/v1/sandbox/${encodeURIComponent(v.id)}/files/move`, { from: path, to }));
  if (!moved) return;
  notice(`Renamed ${path} to ${to}.`);
  if (!alive(v)) return;
  const s = st;
  if (s.drafts.has(path)) { s.drafts.set(to, s.drafts.get(path)); s.drafts.delete(path); }
  for (const d of [...s.dirs.keys()]) if (within(d, path)) s.dirs.delete(d);
  await reloadDirs(new Set([parentOf(path), parentOf(to)]));
  if (within(s.selected, path)) goTo(to + s.selected.slice(path.length), { replace: true });
}

async function remove(path, dir) {
  const v = current;
  if (!await askDelete(path, dir, 'the sandbox') || !alive(v)) return;
  if (!await attempt(`Could not delete ${path}`, () => api('DELETE', filesUrl(v.id, path, '', '&recursive=true')))) return;
  notice(`Deleted ${path}.`);
  if (!alive(v)) return;
  const s = st;
  for (const d of [...s.dirs.keys()]) if (within(d, path)) s.dirs.delete(d);
  for (const p of [...s.drafts.keys()]) if (within(p, path)) s.drafts.delete(p);
  await reloadDirs(new Set([parentOf(path)]));
  if (within(s.selected, path)) goTo(parentOf(path), { replace: true });
}

/** Uploads `{file, rel}` items below `dir`, one after the other. */
async function upload(dir, items) {
  const v = current;
  if (!items.length || !v) return;
  const touched = await uploadAll(dir, items,
    (path, file) => api('PUT', filesUrl(v.id, path), file, { raw: true, headers: { 'Content-Type': 'application/octet-stream' } }));
  if (alive(v)) await reloadDirs(touched);
}

dropTarget($('files-drop'), { active: () => Boolean(current), fallbackDir: currentDir, onDrop: upload });

// ---------- live updates ----------

function setLive(text) { $('files-live').textContent = text; }

function stopWatch() {
  if (watch) watch.abort.abort();
  watch = null;
  live = false;
}

async function startWatch() {
  stopWatch();
  const v = current; const s = st;
  if (!v || !v.sb || v.sb.status !== 'RUNNING' || !watchSupported) {
    setLive(v && v.sb && v.sb.status !== 'RUNNING' ? '' : 'Refreshes when this window gets the focus back.');
    return;
  }
  const mine = { abort: new AbortController(), root: s.root };
  watch = mine;
  try {
    await sse(filesUrl(s.id, s.root, '/watch', '&recursive=true'), {
      signal: mine.abort.signal,
      onOpen: () => { if (watch === mine) { live = true; setLive(`Live: changes inside ${s.root} show at once.`); } },
      onEvent: (ev) => { if (watch === mine) changed(ev); },
    });
  } catch (e) {
    if (e.name === 'AbortError') return;
    if (routeMissing(e)) watchSupported = false;
  }
  if (watch !== mine) return;
  watch = null;
  live = false;
  setLive('Refreshes when this window gets the focus back.');
}

function changed({ event, data }) {
  if (!WATCH_EVENTS.has(event)) return;
  let info;
  try { info = JSON.parse(data); } catch (_) { return; }
  if (!info || typeof info.path !== 'string') return;
  const s = st;
  pendingDirs.add(parentOf(info.path));
  if (s.dirs.has(info.path) && (event === 'remove' || event === 'rename')) pendingDirs.add(info.path);
  if (s.kind === 'file' && info.path === s.selected && event === 'write' && !s.drafts.has(info.path)) pendingDirs.add('\0file');
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(async () => {
    const dirs = new Set(pendingDirs);
    pendingDirs.clear();
    const reopen = dirs.delete('\0file');
    await reloadDirs(dirs);
    if (reopen && st === s && s.kind === 'file') {
      const entry = entryOf(s, s.selected);
      if (entry) renderFile(entry);
    }
  }, 150);
}

function refreshOnFocus() {
  if (!current || live || document.visibilityState === 'hidden') return;
  reloadDirs();
}
window.addEventListener('focus', refreshOnFocus);
document.addEventListener('visibilitychange', refreshOnFocus);

// ---------- the toolbar ----------

$('files-path-form').addEventListener('submit', (e) => {
  e.preventDefault();
  if (current) goTo(normalise($('files-path').value));
});
$('files-up').addEventListener('click', () => {
  if (!current) return;
  const dir = currentDir();
  if (dir !== '/') goTo(parentOf(dir));
});
$('files-refresh').addEventListener('click', () => {
  if (!current) return;
  const s = st;
  reloadDirs().then(() => {
    if (st === s && s.kind === 'file') {
      const entry = entryOf(s, s.selected);
      if (entry && !s.drafts.has(entry.path)) renderFile(entry);
    }
  });
});

export const files = {
  enter(v, route) {
    current = v;
    st = stateOf(v.id);
    $('file-tree').textContent = '';
    $('file-view').textContent = '';
    setLive('');
    show(route.path || st.selected || WORKSPACE);
    if (v.sb) startWatch();
  },
  route(v, route) {
    const path = normalise(route.path || WORKSPACE);
    if (path !== st.selected || !st.dirs.size) show(path);
  },
  record(v) {
    if (v !== current) return;
    const running = v.sb && v.sb.status === 'RUNNING';
    if (running && !watch && watchSupported) startWatch();
    if (!running && watch) { stopWatch(); setLive(''); }
  },
  leave() {
    stopWatch();
    clearTimeout(refreshTimer);
    pendingDirs.clear();
    current = null;
    st = null;
  },
  forget(id) { states.delete(id); },
};
